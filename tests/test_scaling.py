"""The scaling study: its families' runs and configs, the records it keeps, the summary's
arithmetic (paired gaps per length, the ablation's per-seed ratios), and its figures."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import config_files

from tapernorm.analysis.claims.scaling import load_scaling, study_note
from tapernorm.analysis.stats import t975
from tapernorm.analysis.studies.scaling import read_study, summarize, trend
from tapernorm.analysis.studies.scaling_figures import curves_figure, gap_figure
from tapernorm.analysis.studies.scaling_io import RecordError, copy_record, write_summary
from tapernorm.artifact.manifest import config_hash
from tapernorm.cli import main
from tapernorm.config import ConfigError, resolve_run_config
from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow.scaling import SCALING_DIR, cells, record_dir, source, study_records
from tapernorm.workflow.training import spec

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _ci(scaling: dict) -> dict:
    raw = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    raw["scaling"] = scaling
    return validate_pipeline_config(raw, SCHEMA)


CI_GRID = {
    "grid": [{"width": 32, "steps": [24, 48], "variants": ["baseline", "internal_aux"]}],
    "seeds": 2,
    "eval_points": 4,
    "ablation_seeds": [1],
}


def test_runs_are_the_pretrain_recipe_at_each_length_with_periodic_validation():
    plan = Plan(_ci(CI_GRID))
    runs = plan.scaling.runs()
    assert len(runs) == 2 * 2 * 2 and "internal_aux-d32-s1-n48" in runs
    cfg = plan.scaling.run_config("internal_aux-d32-s1-n48", "data/pretrain")
    twin = plan.pretrain.run_config("internal_aux-d32-s1", "data/pretrain")
    assert cfg.name == "scaling/internal_aux-d32-s1-n48"
    assert cfg.train.steps == 48 and cfg.log.eval_every == 12
    # the same LR, and warmup and taper at the same fractions of the steps as the pretrain run
    assert cfg.train.lr == twin.train.lr
    assert cfg.train.warmup_steps == 2 * twin.train.warmup_steps
    assert cfg.taper.end == 48 and twin.taper.end == 24
    assert cfg.model == twin.model and cfg.anchor == twin.anchor
    with pytest.raises(ValueError, match="not part of the scaling family"):
        plan.scaling.run_config("internal_aux-d32-s2-n48", "data/pretrain")


def test_a_cell_equal_to_a_pretrain_run_is_that_run():
    grid = {**CI_GRID, "eval_points": 1}  # the ci config logs no periodic validation (eval_every 0)
    plan = Plan(_ci(grid))
    # eval_every = steps // 1 = steps: differs from the ci config's 0, so nothing is shared
    assert source(plan.scaling, plan.pretrain, "baseline-d32-s0-n24") == (
        "scaling",
        "baseline-d32-s0-n24",
    )
    raw = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    raw["pretrain"]["log"]["eval_every"] = 6
    raw["scaling"] = {**CI_GRID, "eval_points": 4}
    plan = Plan(validate_pipeline_config(raw, SCHEMA))
    assert source(plan.scaling, plan.pretrain, "baseline-d32-s0-n24") == (
        "pretrain",
        "baseline-d32-s0",
    )
    assert source(plan.scaling, plan.pretrain, "baseline-d32-s0-n48") == (
        "scaling",
        "baseline-d32-s0-n48",
    )


def test_the_ablation_reruns_on_fresh_seeds_with_its_own_settings():
    plan = Plan(_ci(CI_GRID))
    runs = plan.scaling_ablation.runs()
    assert runs == [f"{v}-d32-s1" for v in plan.ablation.section["variants"]]
    cfg = plan.scaling_ablation.run_config("all_aux-d32-s1", "data/pretrain")
    mine = resolve_run_config(spec(plan.config, "ablation", "all_aux", 32, 1, "data/pretrain"))
    assert cfg == mine.replace(name="scaling_ablation/all_aux-d32-s1")
    assert plan.scaling in plan.training() and plan.scaling_ablation in plan.training()


def test_the_config_files_give_the_config_the_committed_study_ran_under():
    """config.yaml then scaling.yaml validate to the config the study's manifests name (its records
    were trained under it): a change to the default that is not the study's is pinned in
    scaling.yaml (train.compile, on in the study, off in the default)."""
    cfg = validate_pipeline_config(config_files("config.yaml", "scaling.yaml"), SCHEMA)
    for name in ("manifest.json", "records_manifest.json"):
        manifest = json.loads((ROOT / SCALING_DIR / name).read_text())
        assert config_hash(cfg) == manifest["config_sha256"], name


def test_the_committed_study_config_spans_ten_times_the_tokens():
    plan = Plan(validate_pipeline_config(config_files("config.yaml", "scaling.yaml"), SCHEMA))
    grid = cells(plan.scaling.section)
    steps64 = sorted({n for v, w, n in grid if w == 64 and v == "baseline"})
    assert steps64[-1] >= 10 * steps64[0] and len(steps64) >= 3
    assert len({n for v, w, n in grid if w != 64}) >= 2  # a second width, two lengths
    assert plan.scaling.section["seeds"] >= 3
    assert set(plan.config["scaling"]["ablation_seeds"]).isdisjoint(
        range(plan.ablation.section["seeds"])
    )
    # the default's d=64 600-step runs are the study's shortest cells, not trained twice
    assert source(plan.scaling, plan.pretrain, "baseline-d64-s0-n600") == (
        "pretrain",
        "baseline-d64-s0",
    )


@pytest.mark.parametrize(
    "change, key",
    [
        ({"grid": [{"width": 33, "steps": [24], "variants": ["baseline"]}]}, "scaling.grid"),
        ({"seeds": 1}, "scaling.seeds"),
        ({"grid": [{"width": 32, "steps": [24], "variants": ["nope"]}]}, "scaling.grid"),
    ],
)
def test_a_bad_study_names_its_key(change, key):
    with pytest.raises(ConfigError, match=key):
        _ci({**CI_GRID, **change})


# ---- records and the summary ----------------------------------------------------------------------

LOGIT = {"baseline": 10.0, "internal": 11.0, "internal_aux": 9.0, "final": 30.0, "all": 40.0,
         "all_aux": 12.0}  # fmt: skip


def _record(root: Path, plan: Plan, family: str, run: str, val: float, logit: float = 10.0):
    """A run's records as `tapernorm train` writes them (the config the family resolves)."""
    fam = plan.family(family)
    cfg = fam.run_config(run, "data/pretrain")
    out = root / record_dir(family, run)
    out.mkdir(parents=True)
    n_params = 1000
    (out / "config.json").write_text(json.dumps({**cfg.to_dict(), "n_params": n_params}))
    steps = cfg.train.steps
    (out / "eval.json").write_text(json.dumps(
        {"val_loss": val, "diverged": False, "weights_step": steps, "n_params": n_params}
    ))  # fmt: skip
    lines = [{"step": s, "gate": 1.0, "lr": 1e-3, "loss": val + 1, "logit_norm": logit}
             for s in range(2, steps + 1, 2)]  # fmt: skip
    lines.insert(2, {"step": 6, "val_loss": val + 0.5, "val_gate": 1.0})
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return out


def _study(root: Path, gaps: dict[tuple[str, int], list[float]]) -> tuple[Plan, list[Path]]:
    """Records of CI_GRID's runs: baseline val 3.0 + seed/100, internal_aux that times 1 + gap/100
    per (variant, steps) and seed; the ablation's logit norms from LOGIT."""
    plan = Plan(_ci(CI_GRID))
    dirs = []
    for run in plan.scaling.runs():
        variant, _, seed, steps = run.split("-")
        seed, steps = int(seed[1:]), int(steps[1:])
        base = 3.0 + seed / 100
        val = base * (1 + gaps.get((variant, steps), [0.0] * 2)[seed] / 100)
        dirs.append(_record(root, plan, "scaling", run, val))
    for run in plan.scaling_ablation.runs():
        dirs.append(_record(root, plan, "scaling_ablation", run, 5.0, LOGIT[run.split("-")[0]]))
    return plan, dirs


def test_summary_gives_each_claims_paired_gap_with_its_t_interval(tmp_path):
    _, dirs = _study(tmp_path, {("internal_aux", 24): [1.0, 3.0], ("internal_aux", 48): [0.5, 0.7]})
    summary, per_seed = summarize(read_study(dirs))
    rows = summary[summary["claim"] == "1"].sort_values("steps")
    assert list(rows["steps"]) == [24, 48] and list(rows["n_seeds"]) == [2, 2]
    assert rows["estimate"].iloc[0] == pytest.approx(2.0)
    half = t975(1) * np.std([1.0, 3.0], ddof=1) / math.sqrt(2)
    assert rows["ci_low"].iloc[0] == pytest.approx(2.0 - half)
    assert rows["ci_high"].iloc[0] == pytest.approx(2.0 + half)
    assert rows["tokens_per_param"].iloc[1] == pytest.approx(48 * 8 * 32 / 1000)
    assert rows["verdict"].iloc[1] == "yes"  # [0.6 +- 1.27] inside +-2%
    assert rows["unit"].iloc[0] == "%" and "2" not in set(summary["claim"])  # no all_aux runs
    seeds = per_seed[(per_seed["claim"] == "1") & (per_seed["steps"] == 24)]
    assert list(seeds["value"]) == pytest.approx([1.0, 3.0])
    assert trend(summary, "1", 32) == "toward the band"


def test_claims_3_and_4_are_judged_on_each_fresh_seed(tmp_path):
    _, dirs = _study(tmp_path, {})
    summary, per_seed = summarize(read_study(dirs))
    c3 = summary[summary["claim"] == "3"].iloc[0]
    kept = np.mean([LOGIT[v] for v in ("baseline", "internal", "internal_aux")])
    assert c3["estimate"] == pytest.approx((30 + 40) / 2 / kept) and c3["unit"] == "x"
    assert c3["n_seeds"] == 1 and c3["verdict"] == "holds on 1/1 seeds"
    assert math.isnan(c3["ci_low"])  # one seed: no interval
    c4 = per_seed[per_seed["claim"] == "4"].iloc[0]
    assert c4["value"] == pytest.approx(12 / 10) and c4["verdict"] == "yes"


def test_summary_files_and_markdown(tmp_path):
    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    summary, per_seed = summarize(read_study(dirs))
    paths = write_summary(summary, per_seed, tmp_path / "out", "snakemake ... scaling")
    assert sorted(p.name for p in paths) == sorted(
        ["summary.csv", "per_seed.csv", "summary.md", "summary.json"]
    )
    csv = pd.read_csv(tmp_path / "out/summary.csv", dtype={"claim": str})
    assert list(csv.columns[:8]) == [
        "claim", "width", "tokens_per_param", "estimate", "ci_low", "ci_high", "n_seeds", "unit"
    ]  # fmt: skip
    record = json.loads((tmp_path / "out/summary.json").read_text())
    assert record["trends"]["1/d32"] == "toward the band"
    md = (tmp_path / "out/summary.md").read_text()
    cells = [_cells(line) for line in md.splitlines() if line.startswith("| 1: ")]
    assert [c[1:3] for c in cells] == [["d=32", "24"], ["d=32", "48"]]  # a row per cell
    assert cells[0][0].startswith("1: Internal-Taper (+aux)")  # the claim's variant
    assert cells[0][5] == "+2.00%" and cells[0][8] == "not resolved"  # estimate, verdict


def test_a_diverged_seed_is_named_where_it_is_left_out(tmp_path):
    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    diverged = next(d for d in dirs if d.name == "internal_aux-d32-s1-n24")
    (diverged / "eval.json").write_text(json.dumps(
        {"val_loss": None, "diverged": True, "weights_step": 20, "n_params": 1000}
    ))  # fmt: skip
    summary, per_seed = summarize(read_study(dirs))
    row = summary[(summary["claim"] == "1") & (summary["steps"] == 24)].iloc[0]
    assert row["n_seeds"] == 1 and row["left_out"].startswith("seed 1 (")
    assert "Internal-Taper (+aux)" in row["left_out"] and "diverged" in row["left_out"]
    assert summary[(summary["claim"] == "1") & (summary["steps"] == 48)].iloc[0]["left_out"] == ""
    write_summary(summary, per_seed, tmp_path / "out")
    md = (tmp_path / "out/summary.md").read_text()
    # golden: the rendered text
    assert "- Left out of claim 1, d=32, 24 steps: seed 1 (Internal-Taper (+aux) diverged)." in md
    note, _ = study_note(load_scaling(tmp_path / "out/summary.csv"), "1")
    assert "24 steps: seed 1 (" in note and "diverged) left out" in note
    assert "48 steps:" not in note  # (nothing left out there)


def test_summary_and_figure_replace_only_their_own_files(tmp_path, capsys):
    _, dirs = _study(tmp_path / "r", {})
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").write_text("my notes\n")
    args = ["scaling", "summary", "--records", *map(str, dirs), "--out", str(out)]
    assert main(args) == 2
    assert "summary.md exists and is not an earlier output" in capsys.readouterr().err
    assert (out / "summary.md").read_text() == "my notes\n" and not (out / "summary.csv").exists()
    assert main([*args, "--force"]) == 0
    assert main(args) == 0  # its own files now
    (tmp_path / "fig.png").write_bytes(b"a user's picture")
    fig = ["scaling", "figure", "fig_scaling_gaps", "--summary", str(out / "summary.csv")]
    assert main([*fig, "--out", str(tmp_path / "fig")]) == 2
    assert (tmp_path / "fig.png").read_bytes() == b"a user's picture"


def test_figures_draw_from_the_records(tmp_path):
    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    study = read_study(dirs)
    summary, _ = summarize(study)
    for name, paths in (
        ("gaps", gap_figure(summary, tmp_path / "gaps", "stamp")),
        ("curves", curves_figure(study, tmp_path / "curves", "stamp")),
    ):
        assert sorted(p.suffix for p in paths) == [".html", ".pdf", ".png"], name
        assert all(p.stat().st_size > 1000 for p in paths)
    assert len(study.curves[study.curves["run"] == str(dirs[0])]) == 2  # step 6 and the end


def test_record_copies_a_finished_run_and_refuses_what_is_not_one(tmp_path):
    plan = Plan(_ci(CI_GRID))
    run = _record(tmp_path / "src", plan, "scaling", "baseline-d32-s0-n24", 3.0)
    out = tmp_path / "rec"
    assert main(["scaling", "record", "--run", str(run), "--out", str(out)]) == 0
    assert (out / "metrics.jsonl").read_bytes() == (run / "metrics.jsonl").read_bytes()
    (run / "eval.json").unlink()
    with pytest.raises(RecordError, match="has not finished"):
        copy_record(run, tmp_path / "rec2")
    (out / "notes.txt").write_text("mine")
    run2 = _record(tmp_path / "src2", plan, "scaling", "baseline-d32-s0-n24", 3.0)
    with pytest.raises(RecordError, match="notes.txt, not a run record"):
        copy_record(run2, out)
    assert (out / "notes.txt").read_text() == "mine"


def _recorded(tmp_path: Path, val: float) -> Path:
    plan = Plan(_ci(CI_GRID))
    return _record(tmp_path / f"src{val}", plan, "scaling", "baseline-d32-s0-n24", val)


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir()}


def _beside(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name != out.name)


@pytest.mark.parametrize("earlier", ["none", "empty", "record"])
def test_record_arrives_whole_and_is_read_as_a_run_directory(tmp_path, earlier):
    """The three files are renamed in as one directory (nothing else in it, nothing left beside
    it), over nothing, an empty directory (the workflow makes it) or an earlier record."""
    out = tmp_path / "rec" / "baseline-d32-s0-n24"
    if earlier != "none":
        out.mkdir(parents=True)
    if earlier == "record":
        copy_record(_recorded(tmp_path, 2.0), out)
    run = _recorded(tmp_path, 3.0)
    copy_record(run, out)
    assert _files(out) == _files(run) and _beside(out) == []
    assert read_study([out]).runs["val_loss"].tolist() == [3.0]  # a run directory to the readers


@pytest.mark.parametrize("fails", [0, 1, 2, "rename"])
def test_a_record_stopped_midway_leaves_the_earlier_one_whole(tmp_path, monkeypatch, fails):
    """A write that fails at any file, or at the rename, leaves the earlier record as it was and
    nothing beside it; a record killed between its renames leaves directories the next removes."""
    from tapernorm.analysis.studies import scaling_io

    out = tmp_path / "rec" / "r"
    copy_record(_recorded(tmp_path, 2.0), out)
    before = _files(out)
    calls = {"write": 0, "replace": 0}
    write, replace = scaling_io.atomic_write_bytes, scaling_io.os.replace

    def failing_write(path, data):
        calls["write"] += 1
        if calls["write"] == int(fails) + 1:
            raise OSError(28, "No space left on device", str(path))
        write(path, data)

    def failing_replace(src, dst):
        if Path(dst) == out and not calls["replace"]:  # the new record's rename (the earlier one
            calls["replace"] += 1  # moved aside); not the files' atomic writes, nor the way back
            raise OSError(28, "No space left on device", str(dst))
        replace(src, dst)

    if fails == "rename":
        monkeypatch.setattr(scaling_io.os, "replace", failing_replace)
    else:
        monkeypatch.setattr(scaling_io, "atomic_write_bytes", failing_write)
    with pytest.raises(OSError, match="No space left"):
        copy_record(_recorded(tmp_path, 3.0), out)
    monkeypatch.undo()
    assert calls["replace" if fails == "rename" else "write"]  # (it failed where it was meant to)
    assert _files(out) == before and _beside(out) == []
    # killed between the renames: the earlier record aside, the new one staged, no `out`
    aside, staged = tmp_path / "rec" / ".r.0123abcd.tmp", tmp_path / "rec" / ".r.4567cdef.tmp"
    out.rename(aside)
    shutil.copytree(aside, staged)
    copy_record(_recorded(tmp_path, 4.0), out)
    assert json.loads((out / "eval.json").read_text())["val_loss"] == 4.0
    assert _beside(out) == []


def test_record_refuses_an_out_that_is_a_link(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(RecordError, match="is a link"):
        copy_record(_recorded(tmp_path, 3.0), tmp_path / "link")
    assert list(target.iterdir()) == []


def test_study_records_list_every_run_of_both_families():
    plan = Plan(_ci(CI_GRID))
    records = study_records(plan.scaling, plan.scaling_ablation)
    assert len(records) == 3 * (len(plan.scaling.runs()) + len(plan.scaling_ablation.runs()))
    assert records[0] == "results/cpu/scaling/runs/scaling/baseline-d32-s0-n24/config.json"


def test_the_docs_block_quotes_every_row_of_the_committed_summary(tmp_path):
    from tapernorm.artifact.doc_blocks import render_document

    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    summary, per_seed = summarize(read_study(dirs))
    study = tmp_path / "results/cpu/scaling"
    write_summary(summary, per_seed, study)
    doc = tmp_path / "README.md"
    doc.write_text(
        "x\n<!-- generated by `tapernorm docs`: scaling from results/cpu/scaling -->\n"
        "<!-- end generated -->\ny\n"
    )
    text = render_document(doc, tmp_path)
    assert "](results/cpu/scaling/)" in text and "fig_scaling_gaps.png" in text
    row = next(line for line in text.splitlines() if line.startswith("| 1: Internal"))
    width, points, verdicts = _cells(row)[1:]
    assert width == "d=32" and [p.split(": ")[0] for p in points.split(" → ")] == ["6.1", "12.3"]
    assert points.startswith("6.1: +2.00% [")
    path, trend = verdicts.split("; ")
    assert path.startswith("not resolved → yes") and "flips" in path and trend == "toward the band"
    assert text.startswith("x\n") and text.endswith("y\n")
    doc.write_text(
        "<!-- generated by `tapernorm docs`: scaling-brief from results/cpu/scaling -->\n"
        "<!-- end generated -->\n"
    )
    brief = render_document(doc, tmp_path)  # the README's: shortest -> longest, one row each
    row = _cells(next(line for line in brief.splitlines() if line.startswith("| 1 | d=32")))
    assert row[2] == "6 → 12" and row[3].startswith("+2.00% → ")
    assert row[5].split("; ") == ["not resolved → yes", "toward the band"]


def _committed_study(root: Path) -> list[Path]:
    """The workflow and a study's records, summary, figures and manifest in `root`, as a clone has
    them: the manifest written before what it lists, the records newest (the checkout's order)."""
    import os
    import shutil
    import time

    for name in ("Snakefile", "workflow", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    (root / "config/study.yaml").write_text(yaml.safe_dump({"scaling": CI_GRID}))
    (root / SCALING_DIR).mkdir(parents=True)
    (root / SCALING_DIR / "manifest.json").write_text("{}")
    plan, dirs = _study(root, {("internal_aux", 24): [1.0, 3.0]})
    study = read_study(dirs)
    summary, per_seed = summarize(study)
    out = root / SCALING_DIR
    write_summary(summary, per_seed, out)
    gap_figure(summary, out / "fig_scaling_gaps", "stamp")
    curves_figure(study, out / "fig_scaling_curves", "stamp")
    later = time.time() + 1
    for path in (p for d in dirs for p in d.iterdir()):
        os.utime(path, (later, later))
    return dirs


def _dry_run(root: Path, target: str) -> dict[str, str]:
    """The jobs `snakemake -n target` plans in `root` (the study given after config/ci.yaml)."""
    import subprocess

    cmd = ["snakemake", "-n", target, "--configfile", "config/ci.yaml", "config/study.yaml"]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    if "Nothing to be done" in done.stdout + done.stderr:
        return {}
    stats = done.stdout.split("Job stats:")[1].split("\n\n")[0]
    return dict(line.split() for line in stats.splitlines()[3:] if len(line.split()) == 2)


def test_a_figure_is_rebuilt_from_the_committed_records_alone(tmp_path):
    """With the study's records, summary and figures in place (as committed) and no run directory,
    asking for one figure again plans only that figure's job: nothing is trained."""
    _committed_study(tmp_path)
    (tmp_path / SCALING_DIR / "fig_scaling_gaps.png").unlink()
    jobs = _dry_run(tmp_path, "results/cpu/scaling/fig_scaling_gaps.png")
    assert jobs == {"scaling_figure": "1", "total": "1"}


@pytest.mark.parametrize(
    ("marker", "job"),
    [("summary.set.json", "scaling_summary"), ("fig_scaling_gaps.set.json", "scaling_figure")],
)
def test_a_set_whose_write_stopped_is_written_again(tmp_path, marker, job):
    """A summary or figure whose write was killed between its files (output_set: its marker not
    yet back) is planned again, alone with what reads it; its files, each whole, do not hide it."""
    _committed_study(tmp_path)
    assert _dry_run(tmp_path, "scaling") == {}
    (tmp_path / SCALING_DIR / marker).unlink()
    jobs = _dry_run(tmp_path, "scaling")
    assert jobs[job] == "1" and "train" not in jobs and "scaling_record" not in jobs


def test_a_tree_where_the_default_ran_replans_nothing_of_the_study(tmp_path):
    """The default's data, newer than every record, and a fresh clone's file times plan nothing
    (before, Snakemake retrained every run of the study); a record with a file missing is made
    again from its run, trained for it, and what reads it is remade."""
    import os
    import time

    dirs = _committed_study(tmp_path)
    data = tmp_path / "data/pretrain"
    data.mkdir(parents=True)
    for name in ("train.bin", "val.bin", "meta.json", "tokenizer.model"):
        (data / name).write_text("x")
        os.utime(data / name, (time.time() + 5,) * 2)
    assert _dry_run(tmp_path, "scaling") == {}

    (dirs[0] / "eval.json").unlink()
    jobs = _dry_run(tmp_path, "scaling")
    assert (jobs["train"], jobs["scaling_record"], jobs["scaling_summary"]) == ("1", "1", "1")


def test_claim_rows_and_scale_card_quote_the_study(tmp_path):
    from tapernorm.analysis.claims.rows import ClaimInputs
    from tapernorm.analysis.claims.scale_card import untested
    from tapernorm.analysis.claims.scaling import load_scaling, study_note, with_study

    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    summary, per_seed = summarize(read_study(dirs))
    write_summary(summary, per_seed, tmp_path / "study")
    study = load_scaling(tmp_path / "study/summary.csv")
    cell = study[study["claim"] == "1"].sort_values("tokens_per_param")
    assert list(cell["verdict"]) == ["not resolved", "yes"]  # what the notes quote
    ours, holds = study_note(study, "1")
    assert ours.startswith(f"scaling study ({tmp_path / 'study'}): ")
    assert "d=32" in ours and "6: +2.00%" in ours and "toward the band" in ours
    assert holds.startswith("at 12 tokens/param") and "d=32" in holds
    assert holds.endswith("yes, the verdict flips")
    ours3, holds3 = study_note(study, "3")
    assert "1 fresh seeds" in ours3 and "holds on 1/1 seeds" in ours3
    assert holds3 == "" and study_note(study, "2") == ("", "")

    def claim(inp):
        return {"Claim": "1", "Ours": "d=64: +1%", "Holds?": "yes"}

    row = with_study(claim, "1")(ClaimInputs(scaling=study))
    assert row["Ours"].startswith("d=64: +1%; scaling study") and row["Holds?"].startswith("yes; ")
    assert with_study(claim, "1")(ClaimInputs()) == claim(None)  # no study given: unchanged
    runs = read_study(dirs).runs
    notes = untested(ClaimInputs(runs=runs[runs["width"] == 32], scaling=study))
    assert any("the scaling study up to ~12" in n for n in notes)
    with pytest.raises(ValueError, match="not a summary.csv"):
        (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
        load_scaling(tmp_path / "bad.csv")


def _every_grade() -> dict[str, str]:
    """A verdict of every grade, built by the helpers the claims use."""
    from tapernorm.analysis.claims import rows as cr

    return {
        cr.YES: cr.plain(cr.YES),
        cr.WEAKER: cr.weaker_than_paper("+0.1%", "+1%"),
        cr.UNLIKE: cr.unlike_paper("-1%", "+1%"),
        cr.AT_DEVIATION: cr.at_deviation("λ=10", "λ=0.1", cr.NO),
        cr.PARTLY: cr.plain(cr.PARTLY),
        cr.NO: cr.plain(cr.NO),
        cr.NOT_REPRODUCED: cr.not_reproduced("logits 2.75x (needs >= 10x)", cr.NO),
        cr.NOT_RESOLVED: cr.because(cr.NOT_RESOLVED, "d=64: straddles"),
        cr.NOT_MEASURED: cr.plain(cr.NOT_MEASURED),
        cr.NOT_JUDGED: cr.not_judged("disturbed"),
    }


@pytest.mark.parametrize("with_note", [False, True])
def test_claims_json_keeps_every_grade_with_and_without_the_studys_note(
    tmp_path, monkeypatch, with_note
):
    """The paper path's claims job once failed on 'partly; at 29 tokens/param ...: yes, the verdict
    flips': a verdict with the study's note appended was parsed back into a grade."""
    from tapernorm.analysis.claims import document as claims
    from tapernorm.analysis.claims.rows import GRADES, ClaimInputs, claim_row
    from tapernorm.analysis.claims.scaling import load_scaling

    grades = _every_grade()
    assert set(grades) == set(GRADES)
    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})  # claim 1 flips
    summary, per_seed = summarize(read_study(dirs))
    write_summary(summary, per_seed, tmp_path / "study")
    study = load_scaling(tmp_path / "study/summary.csv") if with_note else None

    def claim_of(verdict):
        def describe(measured, holds):
            return claim_row("d=64: +1%", "s", holds, "")

        return claims.Claim(
            "1", "p", lambda inp: inp, lambda _: verdict, describe, claims.GAP_CRITERION, study="1"
        )

    monkeypatch.setattr(claims, "CLAIMS", [claim_of(v) for v in grades.values()])
    record = claims.claims_record(ClaimInputs(scaling=study), None, {})
    assert [r["grade"] for r in record["claims"]] == list(grades)
    noted = [r["Holds?"] for r in record["claims"] if "the verdict flips" in r["Holds?"]]
    assert len(noted) == (len(grades) if with_note else 0)


def test_a_readme_claim_row_says_where_the_study_judges_it_otherwise():
    from tapernorm.artifact.doc_blocks import _claim_cells

    flips = "at 29 tokens/param (d=64, scaling study): yes, the verdict flips"
    row = {"Claim": "2. All-Taper", "Ours": "x", "headline": "h", "grade": "not resolved",
           "Holds?": f"not resolved (d=64: straddles); {flips}"}  # fmt: skip
    assert _claim_cells(row) == ["2", "All-Taper", "h", f"not resolved; {flips}"]
    assert _claim_cells({**row, "Holds?": "not resolved"})[3] == "not resolved"


def test_a_complete_record_of_todays_config_depends_on_nothing(tmp_path):
    from tapernorm.workflow.scaling import RECORD_FILES, record_inputs

    plan = Plan(_ci(CI_GRID))
    run, family = "baseline-d32-s0-n24", plan.scaling
    inputs = [f"results/runs/scaling/{run}/{f}" for f in RECORD_FILES]

    def copied() -> list[str]:
        return record_inputs(plan.scaling, plan.pretrain, family, run, tmp_path)

    assert copied() == inputs  # no record yet
    record = _record(tmp_path, plan, "scaling", run, 3.0)
    assert copied() == []
    config = json.loads((record / "config.json").read_text())
    config["meta"]["provenance"] = {"commit": "abc"}  # what made it: not part of the config
    (record / "config.json").write_text(json.dumps(config))
    assert copied() == []
    (record / "config.json").write_text(json.dumps({**config, "seed": 7}))  # another config
    assert copied() == inputs
    model = {**config["model"], "n_layer": config["model"]["n_layer"] + 1}  # another model
    (record / "config.json").write_text(json.dumps({**config, "model": model}))
    assert copied() == inputs
    (record / "config.json").write_text(json.dumps(config))
    (record / "eval.json").unlink()  # incomplete
    assert copied() == inputs


def test_every_committed_record_is_of_the_config_the_workflow_builds_now():
    """So `snakemake scaling` with config.yaml and scaling.yaml plans nothing in any tree."""
    from tapernorm.workflow.scaling import record_inputs

    plan = Plan(validate_pipeline_config(config_files("config.yaml", "scaling.yaml"), SCHEMA))
    for family in (plan.scaling, plan.scaling_ablation):
        for run in family.runs():
            assert record_inputs(plan.scaling, plan.pretrain, family, run, ROOT) == [], (
                family.name,
                run,
            )


def test_extra_records_are_the_stability_runs_of_a_cells_recipe(tmp_path):
    """The committed stability study's runs whose init seed is their data seed, of a variant,
    width and length of the grid, complete: what the scaling summary takes beside a cell's own."""
    from tapernorm.workflow.scaling import extra_records

    scaling = Plan(_ci(CI_GRID)).scaling
    runs = tmp_path / "results/cpu/stability/runs"
    for name in ("baseline-d32-s0-o0-n24", "internal_aux-d32-s1-o1-n48",  # taken
                 "internal_aux-d32-s0-o1-n24",  # another data order than its init
                 "baseline-d32-s1-o1-n24-xgelu",  # a factor run
                 "all_aux-d32-s0-o0-n24", "baseline-d32-s2-o2-n99",  # no such cell
                 "baseline-d32-s1-o1-n24"):  # fmt: skip
        (runs / name).mkdir(parents=True)
        for f in ("config.json", "eval.json", "metrics.jsonl"):
            (runs / name / f).write_text("{}")
    (runs / "baseline-d32-s1-o1-n24/eval.json").unlink()  # incomplete
    taken = sorted({p.rsplit("/", 2)[1] for p in extra_records(scaling, tmp_path)})
    assert taken == ["baseline-d32-s0-o0-n24", "internal_aux-d32-s1-o1-n48"]
    assert extra_records(scaling, tmp_path / "nowhere") == []


def _with_data_hash(run: Path, train_bin: str) -> None:
    config = json.loads((run / "config.json").read_text())
    files = {"meta.json": "m" * 64, "train.bin": train_bin, "val.bin": "v" * 64}
    config["meta"] = {"provenance": {"data_sha256": files}}
    (run / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("other", [0, 3, -1])  # a run, another width's, the ablation's
def test_the_study_refuses_records_on_other_data_bytes(tmp_path, other, caplog):
    _, dirs = _study(tmp_path, {})
    for d in dirs:
        _with_data_hash(d, "a" * 64)
    read_study(dirs)
    _with_data_hash(dirs[other], "b" * 64)
    with pytest.raises(ValueError, match="the study's records differ in data sha256") as e:
        read_study(dirs)
    assert dirs[other].name in str(e.value) and "other data bytes" in str(e.value)
    assert "data hash not recorded" not in caplog.text
    _, older = _study(tmp_path / "older", {})  # records from before the hash: not compared
    with caplog.at_level("WARNING", logger="tapernorm"):
        read_study(older)
    assert caplog.text.count("data hash not recorded") == 1
