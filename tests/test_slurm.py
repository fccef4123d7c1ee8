"""The workflow on a real SLURM cluster, through workflow/profiles/slurm-local.

- the CI pipeline (config/ci.yaml) runs to completion on SLURM and its numbers (table 2 and every
  run's validation loss) equal a local run's;
- a job that fails on SLURM fails the run, which names the job's log; a rerun completes the work;
- a node fault (slurmd and the node's job processes killed) fails the run within a bounded time
  instead of hanging; after slurmd is back a rerun completes the work with the same numbers.

Needs the local test cluster: `sudo workflow/cluster/slurm-up.sh` (CI brings it up and down);
without one every test here is skipped (with TAPERNORM_REQUIRE_SLURM=1, as in CI, it fails).
Run: python -m pytest -q -m slow tests/test_slurm.py
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "workflow/profiles/slurm-local"
CONFIG = "config/ci.yaml"
SLURM_UP = ROOT / "workflow/cluster/slurm-up.sh"
PID_DIR = Path("/run/slurm")  # slurm-up.sh's PID files
RUN_TIMEOUT = 1800  # s: a run that hangs fails its test instead of stalling CI
NODE_FAULT_BOUND = 240  # s from the fault to the run's exit: SlurmdTimeout + status checks
pytestmark = pytest.mark.slow


def partition() -> str:
    """The partition that the local profile submits to (a string resource: nested quotes)."""
    profile = yaml.safe_load((ROOT / PROFILE / "config.yaml").read_text())
    return profile["default-resources"]["slurm_partition"].strip("'\"")


def cluster_problem() -> str | None:
    """Why no job could run on SLURM here, or None when the profile's partition has a live node."""
    hint = "bring up the local test cluster with `sudo workflow/cluster/slurm-up.sh`"
    if shutil.which("sinfo") is None:
        return f"no SLURM client (sinfo) on PATH; {hint}"
    part = partition()
    try:
        proc = subprocess.run(
            ["sinfo", "--noheader", "--partition", part, "--format", "%a %T"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return f"sinfo timed out: no SLURM controller answers; {hint}"
    if proc.returncode != 0:
        return f"no SLURM cluster answers ({proc.stderr.strip()}); {hint}"
    live = [
        line
        for line in proc.stdout.splitlines()
        if line.split()[:1] == ["up"] and line.split()[1] in {"idle", "mixed", "allocated"}
    ]
    if not live:
        return f"partition {part!r} has no live node (sinfo: {proc.stdout.strip()!r}); {hint}"
    return None


@pytest.fixture(scope="module")
def cluster() -> str:
    """The partition; skips (fails, with TAPERNORM_REQUIRE_SLURM=1 as in CI) without a cluster."""
    problem = cluster_problem()
    if problem and os.environ.get("TAPERNORM_REQUIRE_SLURM") == "1":
        pytest.fail(problem)
    if problem:
        pytest.skip(problem)
    return partition()


def copy_workflow(dest: Path) -> Path:
    """A fresh copy of this checkout's workflow (not its results)."""
    dest.mkdir(parents=True)
    shutil.copy(ROOT / "Snakefile", dest)
    shutil.copytree(ROOT / "workflow", dest / "workflow")
    shutil.copytree(ROOT / "config", dest / "config")
    return dest


def start(cwd: Path, *args: str) -> subprocess.Popen:
    """Snakemake in the background (stdout and stderr together)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.Popen(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(proc: subprocess.Popen) -> str:
    """Interrupt a run (Snakemake then cancels its SLURM jobs); kill it if that takes a minute."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]


def finish(proc: subprocess.Popen, timeout: float = RUN_TIMEOUT) -> tuple[int, str]:
    """Wait for a run; one that outlives `timeout` is stopped and fails the test."""
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        out = stop(proc)
        raise AssertionError(
            f"snakemake still running after {timeout} s:\n{out[-20000:]}"
        ) from None


def snakemake(cwd: Path, *args: str, check: bool = True) -> tuple[int, str]:
    rc, out = finish(start(cwd, *args))
    if check and rc != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({rc}):\n{out[-20000:]}")
    return rc, out


def on_slurm(cwd: Path, *args: str, check: bool = True) -> tuple[int, str]:
    # targets and options first: --configfile takes every argument after it
    return snakemake(cwd, *args, "--profile", PROFILE, "--configfile", CONFIG, check=check)


def val_losses(wd: Path) -> dict[str, float]:
    """Validation loss of every run directory: results/runs/<family>/<run>/eval.json."""
    return {
        str(p.parent.relative_to(wd)): json.loads(p.read_text())["val_loss"]
        for p in sorted(wd.glob("results/runs/*/*/eval.json"))
    }


def assert_same_losses(got: dict[str, float], want: dict[str, float]) -> None:
    assert want, "no reference runs to compare with"
    for run, loss in want.items():
        assert run in got, f"{run} missing"
        assert abs(got[run] - loss) <= 1e-6, f"{run}: val_loss {got[run]!r} != {loss!r}"


def copy_run(src: Path, dest: Path) -> Path:
    """A copy of a finished workflow directory, results and Snakemake metadata included (file
    times kept, so nothing is out of date in it)."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    """The CI pipeline on SLURM and, side by side, a local run of the same training runs and
    table 2 (the reference; the runs are deterministic on the CPU)."""
    base = tmp_path_factory.mktemp("slurm")
    slurm, local = copy_workflow(base / "slurm"), copy_workflow(base / "local")
    _, plan = snakemake(local, "-n", "--configfile", CONFIG)
    evals = sorted(set(re.findall(r"results/runs/[\w.-]+/[\w.-]+/eval\.json", plan)))
    table = "results/tables/table2.csv"
    reference = start(local, table, *evals, "--cores", "2", "--configfile", CONFIG)
    t0 = time.monotonic()
    try:
        _, out = on_slurm(slurm)
    finally:
        rc, ref_out = finish(reference)
    print(f"\nCI pipeline on SLURM: {time.monotonic() - t0:.0f} s")
    assert rc == 0, f"local reference run failed:\n{ref_out[-20000:]}"
    return {"slurm": slurm, "local": local, "out": out}


def test_ci_pipeline_on_slurm_equals_local_run(runs):
    slurm, local = runs["slurm"], runs["local"]
    assert re.search(r"submitted with SLURM jobid \d+", runs["out"]), "no job went to SLURM"
    assert "localrule all" in runs["out"] and "(100%) done" in runs["out"]
    table = "results/tables/table2.csv"
    assert (slurm / table).read_text() == (local / table).read_text()
    assert_same_losses(val_losses(slurm), val_losses(local))


def test_failing_job_fails_the_run_and_a_rerun_completes_it(runs, tmp_path):
    """A corrupt model makes its fold job fail on SLURM; restored, a rerun completes the work."""
    wd = copy_run(runs["slurm"], tmp_path / "wf")
    # the first fold output in name order (all_aux in CI: no benchmark depends on it)
    verify = sorted(wd.glob("results/fold/*/verify.json"))[0]
    run = verify.parent.name
    model = wd / "results/runs/pretrain" / run / "model.safetensors"
    want, good, stat = json.loads(verify.read_text()), model.read_bytes(), model.stat()
    verify.unlink()
    model.write_bytes(b"corrupt" * 100)  # same time stamp: Snakemake cannot tell
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    # the fold output itself, and everything downstream (a missing intermediate file alone does
    # not make Snakemake rerun jobs whose outputs are present)
    targets = (str(verify.relative_to(wd)), "all")
    t0 = time.monotonic()
    rc, out = on_slurm(wd, *targets, check=False)
    print(f"\nfailing run on SLURM: {time.monotonic() - t0:.0f} s")
    assert rc != 0, out[-20000:]
    errors = re.findall(r"Error in rule (\w+):", out)
    assert errors == ["fold"], out[-20000:]  # exactly the one job
    log = f"logs/fold/{run}.log"
    assert log in out, out[-20000:]  # the job's log is named ...
    assert (wd / log).stat().st_size > 0  # ... and holds the error
    assert re.search(r"\.snakemake/slurm_logs/rule_fold/\S*\d+\.log", out), out[-20000:]

    model.write_bytes(good)
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    t0 = time.monotonic()
    _, out = on_slurm(wd, *targets)
    print(f"rerun on SLURM: {time.monotonic() - t0:.0f} s")
    assert "Error in rule" not in out
    assert json.loads(verify.read_text()) == want
    _, out = snakemake(wd, "-n", "--configfile", CONFIG)
    assert "Nothing to be done" in out, out[-20000:]


def node_processes() -> tuple[set[str], set[int]]:
    """The jobs whose processes run on the node, and those processes (`scontrol listpids`)."""
    listing = subprocess.run(
        ["scontrol", "listpids"], capture_output=True, text=True, timeout=30
    ).stdout
    rows = re.findall(r"^\s*(\d+)\s+(\d+)\s", listing, re.M)
    return {job for _, job in rows}, {int(pid) for pid, _ in rows}


def kill_node(pids: set[int]) -> None:
    """Simulate the node dying: SIGKILL slurmd, the jobs' processes and their slurmstepd."""
    for pid in list(pids):  # the step daemons that watch them
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if Path(f"/proc/{ppid}/comm").read_text().strip() == "slurmstepd":
                pids.add(ppid)
        except (OSError, ValueError, IndexError):
            pass
    os.kill(int((PID_DIR / "slurmd.pid").read_text()), signal.SIGKILL)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_node_fault_fails_the_run_in_bounded_time_and_a_rerun_completes_it(runs, tmp_path):
    if os.geteuid() != 0 or not (PID_DIR / "slurmd.pid").exists():
        pytest.skip("needs root and the cluster of workflow/cluster/slurm-up.sh (restarts slurmd)")
    wd = copy_run(runs["slurm"], tmp_path / "wf")
    lost = sorted(wd.glob("results/runs/pretrain/*/eval.json"))[:2]
    for p in lost:
        shutil.rmtree(p.parent)
    targets = [str(p.relative_to(wd)) for p in lost]

    # As many jobs as the node has CPUs: each is running when the node dies. (A job still
    # pending then would wait for a node forever, and so would Snakemake.)
    run = start(wd, *targets, "--jobs", "2", "--profile", PROFILE, "--configfile", CONFIG)
    try:
        deadline = time.monotonic() + 300
        while len((procs := node_processes())[0]) < 2:  # both jobs' processes have started
            assert run.poll() is None, run.communicate()[0][-20000:]
            assert time.monotonic() < deadline, "the training jobs never started"
            time.sleep(0.5)
        kill_node(procs[1])
        t0 = time.monotonic()
        rc, out = finish(run, timeout=NODE_FAULT_BOUND)
        print(f"\nnode fault to failed run: {time.monotonic() - t0:.0f} s")
        assert rc != 0, out[-20000:]
        assert "NODE_FAIL" in out, out[-20000:]
    finally:
        if run.poll() is None:
            stop(run)
        subprocess.run([str(SLURM_UP)], check=True, timeout=120)  # slurmd back, node resumed

    t0 = time.monotonic()
    on_slurm(wd, *targets)
    print(f"rerun on SLURM: {time.monotonic() - t0:.0f} s")
    want = {k: v for k, v in val_losses(runs["local"]).items() if f"{k}/eval.json" in targets}
    assert len(want) == 2
    assert_same_losses(val_losses(wd), want)


def test_the_rehearsal_torchrun_finetunes_on_slurm(cluster, tmp_path):
    """The paper config's GPT-2 fine-tuning path, rehearsed (config/rehearsal.yaml) on SLURM for
    the models that run under torchrun (GPT-2 L and XL: 2 gloo processes on one node): the
    stand-ins, the OWT shards, GPT-2 L's Vanilla fine-tune and GPT-2 XL's All-TaperLN fine-tune
    with its fold, its evaluations and its stock-HF export, each a SLURM job, every one finished.
    (tests/test_rehearsal.py runs the whole family, all 16 fine-tunes, locally.)"""
    wd = copy_workflow(tmp_path / "wf")
    configs = ("--configfile", "config/paper.yaml", "config/rehearsal.yaml")
    _, plan = snakemake(wd, "-n", "results/tables/table4.md", *configs)
    xl = "all_taperln-gpt2-xl"
    export = f"results/export/{xl}/verify.json"
    evals = sorted(set(re.findall(rf"results/finetune/eval/{xl}/[\w.-]+\.json", plan)))
    large = "results/runs/finetune/vanilla-gpt2-large/eval.json"
    targets = [large, export, *evals]
    assert evals, plan[-3000:]
    _, plan = snakemake(wd, "-n", *targets, *configs)
    planned = int(re.findall(r"^total\s+(\d+)$", plan, re.M)[-1])
    t0 = time.monotonic()
    _, out = snakemake(wd, *targets, "--profile", PROFILE, *configs)
    print(
        f"\nrehearsal torchrun fine-tunes on SLURM: {planned} jobs, {time.monotonic() - t0:.0f} s"
    )
    assert len(re.findall(r"submitted with SLURM jobid \d+", out)) >= 2 + len(evals) + 2
    assert f"{planned} of {planned} steps (100%) done" in out
    for run in ("vanilla-gpt2-large", xl):
        record = json.loads((wd / f"results/runs/finetune/{run}/eval.json").read_text())
        assert record["processes"] == 2, run
    assert json.loads((wd / export).read_text())["ok"]
