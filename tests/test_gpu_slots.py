"""GPUs per job on one machine (tapernorm.machine.gpu_slots, `tapernorm gpus`), with fake device counts:
concurrent jobs get different GPUs, one more waits or is refused, a killed job's GPU is free
again, a command of more processes than GPUs is refused, and nothing is claimed on the CPU or
where a scheduler granted the GPUs."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tapernorm.machine.gpu_slots import (
    CLAIMED_ENV,
    SLOTS_ENV,
    GpuSlotError,
    claim,
    device_pool,
)


def count(n: int):
    """A fake `torch sees n GPUs`."""
    return lambda: n


# ---- which GPUs a job claims from ----------------------------------------------------------------


def test_nothing_is_claimed_without_a_gpu_to_use():
    env = {}
    assert device_pool(0, 1, "cuda", env, count(2)) is None  # the job holds none
    assert device_pool(2, 2, "cpu", env, count(2)) is None
    # the CPU rehearsal: device auto, gpus 2, two gloo ranks on a machine without a GPU
    assert device_pool(2, 2, "auto", env, count(0)) is None
    assert device_pool(1, 4, "auto", env, count(0)) is None  # (no refusal either)


def test_the_pool_is_every_gpu_or_the_ones_named_by_hand():
    assert device_pool(1, 1, "cuda", {}, count(4)) == ["0", "1", "2", "3"]
    assert device_pool(2, 2, "auto", {}, count(2)) == ["0", "1"]
    by_hand = {"CUDA_VISIBLE_DEVICES": "2,3"}  # outside a scheduler: the GPUs to share out
    assert device_pool(1, 1, "cuda", by_hand, count(2)) == ["2", "3"]


def test_more_processes_than_gpus_are_refused_in_one_line():
    """Snakemake scaled a gpu=4 request down to --resources gpu=1: torchrun would start 4 ranks."""
    with pytest.raises(GpuSlotError) as e:
        device_pool(1, 4, "cuda", {}, count(1))
    assert str(e.value) == (
        "the command starts 4 processes, one per GPU, but the job holds 1 GPU (Snakemake gives a "
        "job at most --resources gpu=N, this machine's count): run it where 4 GPUs are "
        "available, or give it fewer processes"
    )
    assert "\n" not in str(e.value)
    with pytest.raises(GpuSlotError, match="the job holds 4 GPUs but this machine has 2 "):
        device_pool(4, 4, "cuda", {}, count(2))


def test_a_schedulers_grant_is_used_as_it_is():
    slurm = {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert device_pool(4, 4, "cuda", slurm, count(4)) is None
    inner = {CLAIMED_ENV: "1", "CUDA_VISIBLE_DEVICES": "1"}  # inside a `tapernorm gpus`
    assert device_pool(1, 1, "cuda", inner, count(1)) is None
    with pytest.raises(GpuSlotError, match=r"CUDA_VISIBLE_DEVICES='4' grants this job 1: ask"):
        device_pool(4, 4, "cuda", {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "4"}, count(1))


# ---- claims --------------------------------------------------------------------------------------


def test_concurrent_claims_get_different_gpus_and_a_third_is_refused(tmp_path):
    first = claim(1, ["0", "1"], tmp_path, "job a", wait=False)
    second = claim(1, ["0", "1"], tmp_path, "job b", wait=False)
    assert set(first) | set(second) == {"0", "1"}
    with pytest.raises(GpuSlotError) as e:
        claim(1, ["0", "1"], tmp_path, "job c", wait=False)
    pid = os.getpid()
    assert str(e.value).startswith("1 free GPU wanted, but only 0 of 2 free (GPU 0: pid ")
    assert f"GPU 1: pid {pid} on " in str(e.value) and "(job b)" in str(e.value)
    os.close(first.popitem()[1])  # the first job ends: its GPU is free
    third = claim(1, ["0", "1"], tmp_path, "job c", wait=False)
    assert set(third) == {"0"} and set(second) == {"1"}
    for fd in [*second.values(), *third.values()]:
        os.close(fd)


def test_a_claim_waits_for_a_free_gpu(tmp_path):
    held = claim(1, ["0"], tmp_path)
    threading.Timer(0.5, os.close, [held["0"]]).start()
    start = time.monotonic()
    got = claim(1, ["0"], tmp_path, poll_s=0.05)
    assert set(got) == {"0"} and time.monotonic() - start >= 0.4
    os.close(got["0"])


def test_a_job_never_holds_part_of_its_gpus(tmp_path):
    one = claim(1, ["0", "1"], tmp_path)
    with pytest.raises(GpuSlotError, match="2 free GPUs wanted, but only 1 of 2 free"):
        claim(2, ["0", "1"], tmp_path, wait=False)
    other = claim(1, ["0", "1"], tmp_path, wait=False)  # the free one was not kept
    assert set(one) | set(other) == {"0", "1"}
    for fd in [*one.values(), *other.values()]:
        os.close(fd)


# ---- `tapernorm gpus`: the command gets its GPUs, holds them while it runs --------------------------

SHOW = (  # prints its pid and GPU environment, then runs until the file argv[1] exists
    "import os, sys, time; from pathlib import Path; e = os.environ.get; "
    f"print(os.getpid(), e('CUDA_VISIBLE_DEVICES'), e('{CLAIMED_ENV}'), flush=True); "
    "[time.sleep(0.05) for _ in iter(lambda: Path(sys.argv[1]).exists(), True)]"
)


def gpus_command(tmp_path: Path, *options: str, stop: Path) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", SLOTS_ENV: str(tmp_path / "slots")}
    cmd = [sys.executable, "-m", "tapernorm.cli", "gpus", *options, "--"]
    cmd += [sys.executable, "-c", SHOW, str(stop)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_tapernorm_gpus_runs_each_command_on_its_own_gpu(tmp_path):
    stop = tmp_path / "stop"
    procs = [gpus_command(tmp_path, "--device", "cuda", "1", stop=stop) for _ in range(2)]
    try:
        shown = [p.stdout.readline().split() for p in procs]
        # exec: the command is the claiming process itself (the claim ends with it)
        assert [int(s[0]) for s in shown] == [p.pid for p in procs]
        assert sorted(s[1] for s in shown) == ["0", "1"] and {s[2] for s in shown} == {"1"}
        third = gpus_command(tmp_path, "--device", "cuda", "--no-wait", "1", stop=stop)
        out, err = third.communicate(timeout=60)
        assert third.returncode == 2 and out == ""
        assert err.startswith("tapernorm gpus: error: 1 free GPU wanted, but only 0 of 2 free")
        assert len(err.strip().splitlines()) == 1
        killed = procs[0]
        killed.send_signal(signal.SIGKILL)  # a crash: the kernel drops its claim
        killed.wait()
        again = gpus_command(tmp_path, "--device", "cuda", "--no-wait", "1", stop=stop)
        assert again.stdout.readline().split()[1] == shown[0][1]
        procs.append(again)
    finally:
        stop.touch()
        for p in procs:
            p.communicate(timeout=60)


def test_tapernorm_gpus_refuses_more_ranks_than_gpus_and_leaves_cpu_jobs_alone(tmp_path):
    stop = tmp_path / "stop"
    stop.touch()
    refused = gpus_command(tmp_path, "--device", "cuda", "--ranks", "4", "1", stop=stop)
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 2 and out == ""
    assert err.startswith("tapernorm gpus: error: the command starts 4 processes, one per GPU")
    cpu = gpus_command(tmp_path, "--device", "cpu", "--ranks", "2", "2", stop=stop)
    out, err = cpu.communicate(timeout=60)
    assert cpu.returncode == 0 and out.split()[1:] == ["0,1", "None"]  # the environment as it was
    assert not (tmp_path / "slots").exists()
