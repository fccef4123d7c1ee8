"""Every rule's `input:` names every file its command reads.

The CI workflow's jobs are replayed in-process, in DAG order, from a dry run's shell commands; the
files each command opens under the working directory are traced (Python's "open" audit event, and
safetensors loads, which open their file in Rust) and compared with the job's declared inputs. Then
a content change to one run's metrics.jsonl must make Snakemake plan the figures that plot it."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tapernorm import cli
from tapernorm.training import checkpoint

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ("--configfile", "config/ci.yaml")
JOB_HEADER = re.compile(r"^(?:local)?rule (\w+):$")
FILE_KEYS = ("input", "output", "log", "benchmark")

_reads: list[str] | None = None  # paths opened while a traced command runs; None: not tracing


def _record_open(event: str, args: tuple) -> None:
    if event == "open" and _reads is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _reads.append(os.fsdecode(args[0]))


sys.addaudithook(_record_open)  # (audit hooks cannot be removed: it records only while tracing)


def snakemake(cwd: Path, *args: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"snakemake {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def planned_jobs(dry_run: str) -> list[dict]:
    """The jobs of `snakemake -n -p` output: rule, input/output/log/benchmark lists, shell."""
    jobs, job = [], None
    for line in dry_run.splitlines():
        header = JOB_HEADER.match(line)
        if header:
            job = {"rule": header[1], "shell": None, **{k: [] for k in FILE_KEYS}}
            jobs.append(job)
        elif job is not None and line.startswith("Shell command: "):
            job["shell"] = line.removeprefix("Shell command: ")
        elif job is not None and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            if key in FILE_KEYS:
                job[key] = value.split(", ")
    return [j for j in jobs if j["shell"] not in (None, "None")]


def command(shell: str) -> list[str]:
    """`OMP_NUM_THREADS=1 tapernorm train ... > log 2>&1` -> ["train", ...] (every rule runs one
    tapernorm command)."""
    words = shlex.split(shell)
    argv = words[: words.index(">")] if ">" in words else words
    while "=" in argv[0]:  # environment assignments
        argv.pop(0)
    assert argv[0] == "tapernorm" and "&&" not in argv, shell
    return argv[1:]


def files_under(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not p.relative_to(root).parts[0].startswith(".")
    }


def traced_run(main, argv: list[str], root: Path, monkeypatch) -> set[str]:
    """Run `main(argv)` here; the files under `root` it opened (relative paths)."""
    global _reads
    loads = []
    load_file = checkpoint.load_file

    def traced_load_file(path, *args, **kwargs):
        loads.append(os.fspath(path))
        return load_file(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "load_file", traced_load_file)
    _reads = []
    try:
        status = main(argv)
    finally:
        opened, _reads = _reads + loads, None
    assert status == 0, f"{main.__module__} {' '.join(argv)} exited {status}"
    paths = {Path(p) if Path(p).is_absolute() else root / p for p in opened}
    return {str(p.resolve().relative_to(root)) for p in paths if p.resolve().is_relative_to(root)}


def write_job_record(path: Path, seconds: float) -> None:
    """What Snakemake's `benchmark:` writes (its first columns), for `tapernorm job-times`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\n{seconds:.4f}\t{time.strftime('%H:%M:%S', time.gmtime(seconds))}\n")


def declared(path: str, inputs: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in inputs)


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """A copy of the workflow whose CI jobs ran here, in DAG order, each traced: (workdir, [(job,
    undeclared reads, reads)])."""
    root = tmp_path_factory.mktemp("wf").resolve()
    shutil.copy(ROOT / "Snakefile", root)
    for folder in ("workflow", "config"):
        shutil.copytree(ROOT / folder, root / folder)
    pending = planned_jobs(snakemake(root, "-n", "-p", *CONFIG))
    produced = {f for job in pending for key in ("output", "benchmark") for f in job[key]}
    traced = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("TAPERNORM_TRACEBACK", "1")
        while pending:
            ready = [
                j
                for j in pending
                if all((root / f).exists() or f not in produced for f in j["input"])
            ]
            assert ready, f"no job can run: {[j['rule'] for j in pending]}"
            job = ready[0]
            pending.remove(job)
            for f in job["log"] + job["output"]:
                (root / f).parent.mkdir(parents=True, exist_ok=True)
            before = files_under(root)
            start = time.perf_counter()
            reads = traced_run(cli.main, command(job["shell"]), root, mp) & before
            for record in job["benchmark"]:
                write_job_record(root / record, time.perf_counter() - start)
            own = job["output"] + job["log"] + job["benchmark"]
            undeclared = {p for p in reads if not declared(p, job["input"] + own)}
            traced.append((job, undeclared, reads))
    return root, traced


def test_every_command_reads_only_declared_inputs(replay):
    _, traced = replay
    undeclared = {}
    for job, missing, _ in traced:
        for path in missing:
            undeclared.setdefault(job["rule"], set()).add(re.sub(r"/[^/]+-d\d+-s\d+/", "/*/", path))
    assert not undeclared, "reads not declared as input:\n" + "\n".join(
        f"{rule}: {sorted(paths)}" for rule, paths in sorted(undeclared.items())
    )


def test_the_trace_sees_what_the_analysis_commands_read(replay):
    """The tracer is not blind: a figure's run files, the claims' JSON, the records of job-times."""
    _, traced = replay
    reads = {job["rule"]: r for job, _, r in traced}
    run = "results/runs/pretrain/baseline-d32-s0"
    assert {f"{run}/{f}" for f in ("config.json", "metrics.jsonl", "eval.json")} <= reads[
        "fig3_logit_norm"
    ]
    assert "results/fold/internal_aux-d32-s0/verify.json" in reads["claims"]
    assert "results/job_records/train/pretrain/dyt-d32-s1.tsv" in reads["job_times"]
    assert f"{run}/model.safetensors" in reads["fold"] | reads.get("bench_forward", set())


def test_an_edited_metrics_file_replots_the_figures_that_plot_it(replay):
    """Editing a run's training records (no rerun of it) replans the figures of that run and no
    training; figure 1 (Internal-Taper (+aux) only) stays."""
    root, _ = replay
    metrics = root / "results/runs/pretrain/baseline-d32-s0/metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    records[-1]["loss"] += 1.0
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    later = time.time() + 5  # newer than every output, whatever the file system's clock grain
    os.utime(metrics, (later, later))
    figures = [f"figures/{n}.png" for n in ("fig1_gate_schedule", "fig3_logit_norm")]
    plan = snakemake(root, *figures, "-n", "--rerun-triggers", "mtime", *CONFIG)
    rules = {m[1] for m in re.finditer(r"^(?:local)?rule (\w+):$", plan, re.M)}
    assert "fig3_logit_norm" in rules, plan
    assert "fig1_gate_schedule" not in rules and "train" not in rules, plan
