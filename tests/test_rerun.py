"""The pipeline reruns a train job without losing its record (config/ci.yaml, one train target):
`snakemake -f`, a changed input, a job killed after a checkpoint, the whole Snakemake process
group killed then `--unlock` and `--rerun-incomplete`. Each ends with the complete metrics.jsonl
and the weights and eval.json an uninterrupted run gives."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_workflow import ROOT

pytestmark = pytest.mark.slow

RUN = "results/runs/pretrain/baseline-d32-s0"
TARGET = f"{RUN}/eval.json"
OUTPUTS = ("eval.json", "model.safetensors", "metrics.jsonl")
# long enough for a kill between its first checkpoint (step 40) and its end
LONGER = "pretrain: {steps: 160, log: {every: 2, eval_windows: 16, ckpt_every: 40}}\n"
EXPECTED_STEPS = [1, *range(2, 161, 2)]  # log.every 2, step 1 and the last


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", *args]


def snakemake(wd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(command(*args), cwd=wd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def build(wd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return snakemake(
        wd, TARGET, *args, "--configfile", "config/ci.yaml", "longer.yaml", check=check
    )


def outputs(wd: Path) -> dict[str, bytes]:
    return {name: (wd / RUN / name).read_bytes() for name in OUTPUTS}


def without_timing(metrics: bytes) -> list[dict]:
    rows = [json.loads(line) for line in metrics.decode().splitlines()]
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]


def train_log(wd: Path) -> str:
    """The run's job log so far ("" while Snakemake, rerunning the job, has removed it and the new
    job has not yet created it)."""
    try:
        return (wd / "logs/runs/pretrain/baseline-d32-s0.log").read_text()
    except FileNotFoundError:
        return ""


def check_complete(wd: Path, reference: dict[str, bytes]) -> None:
    """The run's outputs are those of the uninterrupted run (tokens_per_s aside)."""
    now = outputs(wd)
    assert [r["step"] for r in without_timing(now["metrics.jsonl"])] == EXPECTED_STEPS
    assert without_timing(now["metrics.jsonl"]) == without_timing(reference["metrics.jsonl"])
    assert now["model.safetensors"] == reference["model.safetensors"]
    assert now["eval.json"] == reference["eval.json"]
    cfg = json.loads((wd / RUN / "config.json").read_text())
    assert json.loads(now["eval.json"])["weights_step"] == cfg["train"]["steps"] == 160


@pytest.fixture(scope="module")
def wd(tmp_path_factory) -> Path:
    wd = tmp_path_factory.mktemp("rerun")
    shutil.copy(ROOT / "Snakefile", wd)
    shutil.copytree(ROOT / "workflow", wd / "workflow")
    shutil.copytree(ROOT / "config", wd / "config")
    (wd / "longer.yaml").write_text(LONGER)
    build(wd, "--cores", "2")
    return wd


@pytest.fixture(scope="module")
def reference(wd) -> dict[str, bytes]:
    return outputs(wd)


def checkpoint_step(wd: Path) -> int:
    try:
        return json.loads((wd / RUN / "ckpt" / "state.json").read_text())["step"]
    except (OSError, ValueError):
        return 0


def start_after_a_checkpoint(wd: Path) -> subprocess.Popen:
    """Start the target afresh in its own process group; return once the run has checkpointed
    (and before it ends)."""
    shutil.rmtree(wd / RUN)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    args = command(TARGET, "--cores", "2", "--configfile", "config/ci.yaml", "longer.yaml")
    proc = subprocess.Popen(
        args,
        cwd=wd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while checkpoint_step(wd) < 40 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    step = checkpoint_step(wd)
    assert 40 <= step < 160 and not (wd / RUN / "eval.json").exists(), step
    return proc


def start_and_kill_after_a_checkpoint(wd: Path, kill) -> None:
    """Start the target in its own process group; once the run has checkpointed (and before it
    ends), kill(snakemake process, train pid)."""
    proc = start_after_a_checkpoint(wd)
    try:
        owner = json.loads((wd / RUN / "train.lock").read_text())
        kill(proc, owner["pid"])
        proc.wait(timeout=120)
        for _ in range(500):  # the train process is gone (it holds the lock until it is)
            try:
                os.kill(owner["pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_reference_run_is_complete(wd, reference):
    assert [r["step"] for r in without_timing(reference["metrics.jsonl"])] == EXPECTED_STEPS


def test_forced_rerun_of_a_finished_job_gives_its_outputs_back(wd, reference):
    build(wd, "--cores", "2", "-f")
    assert "resumed from step 160 (metrics.jsonl restored: 81 records)" in train_log(wd)
    assert outputs(wd) == reference  # bit for bit, tokens_per_s included: the saved record


def test_a_train_job_killed_after_a_checkpoint_resumes_whole(wd, reference):
    start_and_kill_after_a_checkpoint(wd, lambda proc, pid: os.kill(pid, signal.SIGKILL))
    assert not (wd / RUN / "eval.json").exists()
    build(wd, "--cores", "2")
    assert "resumed from step " in train_log(wd)
    check_complete(wd, reference)


def test_the_killed_workflow_is_unlocked_and_its_job_rerun_whole(wd, reference):
    start_and_kill_after_a_checkpoint(wd, lambda proc, pid: os.killpg(proc.pid, signal.SIGKILL))
    assert snakemake(wd, "--unlock", "--configfile", "config/ci.yaml").returncode == 0
    build(wd, "--cores", "2", "--rerun-incomplete")
    assert "resumed from step " in train_log(wd)
    check_complete(wd, reference)


def test_a_changed_input_starts_the_run_over(wd, reference):
    meta_path = wd / "data/pretrain/meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "note": "changed"}, indent=2))
    build(wd, "--cores", "2")
    log = train_log(wd)
    # (a run that branches from a trunk names the trunk, trained again on the data, as well)
    assert "is from other data (meta.json)" in log and "starting over" in log
    assert "resumed" not in log
    check_complete(wd, reference)  # the same tokens: the same run


def test_a_second_invocation_cannot_delete_a_running_jobs_outputs(wd, reference):
    """`--nolock --rerun-incomplete` while the job runs (held still meanwhile: SIGSTOP): Snakemake
    deletes the running job's outputs and starts the job again; that job waits for the run's lock
    (instead of failing, which would have Snakemake delete the outputs once more), the running job
    puts its record back and ends whole, and the second job finds the run finished."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    first = start_after_a_checkpoint(wd)
    second = None
    try:
        owner = json.loads((wd / RUN / "train.lock").read_text())["pid"]
        os.kill(owner, signal.SIGSTOP)
        args = command(TARGET, "--cores", "2", "--configfile", "config/ci.yaml", "longer.yaml")
        second = subprocess.Popen(
            [*args, "--nolock", "--rerun-incomplete"],
            cwd=wd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while "waiting for pid" not in train_log(wd) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"waiting for pid {owner} " in train_log(wd)
        assert not (wd / RUN / "metrics.jsonl").exists()  # the second invocation deleted it
        os.kill(owner, signal.SIGCONT)
        out_second, _ = second.communicate(timeout=300)
        out_first, _ = first.communicate(timeout=300)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert first.returncode == 0 and second.returncode == 0, out_first + out_second
    assert "holds this run, finished: nothing to do" in train_log(wd)
    check_complete(wd, reference)
