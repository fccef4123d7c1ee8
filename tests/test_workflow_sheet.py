"""The runs as a sheet (tapernorm.workflow.sheet): a row per training run, its config resolved
once, what rule train's jobs read and `tapernorm runs-sheet` prints."""

from pathlib import Path

import pytest
import yaml

from tapernorm.cli import main
from tapernorm.config import ConfigError
from tapernorm.workflow import Plan, read_config_files, validate_pipeline_config, validated_plan
from tapernorm.workflow import sheet as ws
from tapernorm.workflow.training import seeds_of

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def load(name: str) -> dict:
    return validate_pipeline_config(yaml.safe_load((ROOT / "config" / name).read_text()), SCHEMA)


def test_the_defaults_pretraining_rows_are_its_variants_widths_and_seeds():
    config = load("config.yaml")
    rows = [r for r in ws.runs_sheet(Plan(config)) if r.family == "pretrain"]
    sec = config["pretrain"]
    expected = [
        (v, w, s) for v in sec["variants"] for w in sec["widths"] for s in range(seeds_of(sec, v))
    ]
    assert [(r.variant, r.width, r.seed) for r in rows] == expected
    for r in rows:
        assert r.run == f"{r.variant}-d{r.width}-s{r.seed}" and r.config.name == f"pretrain/{r.run}"
        assert r.config.data.dir == "data/pretrain" and r.steps == r.config.train.steps
        # a run branches from its trunk (the sheet's `trunk`) exactly where its config says so
        assert r.config.init.trunk == (f"results/trunks/{r.trunk}" if r.trunk else None)
    assert {r.trunk for r in rows if r.variant == "baseline"} == {
        "pretrain-d64-s0",
        "pretrain-d64-s1",
        "pretrain-d64-s2",
    }
    assert {r.trunk for r in rows if r.variant == "dyt"} == {""}  # DyT trains from step 0


def test_each_runs_config_is_resolved_once(monkeypatch):
    """Once for the sheet, the trunks and rule trunk's configs together (Plan.run_configs)."""
    plan = Plan(load("config.yaml"))
    calls: dict[tuple[str, str], int] = {}
    for fam in plan.training():
        for run, recipe in fam.recipes.items():

            def counted(data_dir, recipe=recipe, key=(fam.name, run)):
                calls[key] = calls.get(key, 0) + 1
                return recipe(data_dir)

            monkeypatch.setitem(fam.recipes, run, counted)
    rows = ws.runs_sheet(plan)
    assert plan.trunks.names() and [
        plan.run_configs[plan.trunks.first_run(n)] for n in plan.trunks.names()
    ]
    assert len(rows) == len(calls) > 0 and set(calls.values()) == {1}
    assert [(r.family, r.run) for r in rows] == list(calls)


@pytest.mark.parametrize("name", ["config.yaml", "scaling.yaml"])
def test_the_checks_resolve_each_training_run_once_for_the_whole_invocation(name, monkeypatch):
    """validated_plan's checks resolve every training run, and the plan they return (what the
    Snakefile and runs-sheet take) holds those configs: the sheet and the trunks resolve none again."""
    from tapernorm.workflow import family

    names = ["config.yaml"] if name == "config.yaml" else ["config.yaml", name]
    raw = read_config_files([ROOT / "config" / n for n in names], SCHEMA)  # --configfile A B
    calls: dict[str, int] = {}
    resolve = family.resolve_run_config

    def counted(spec: dict) -> object:
        calls[spec["name"]] = calls.get(spec["name"], 0) + 1
        return resolve(spec)

    monkeypatch.setattr(family, "resolve_run_config", counted)
    plan = validated_plan(raw, SCHEMA)
    resolved = dict(calls)
    rows = ws.runs_sheet(plan)
    trunks = plan.trunks.names()  # planned from the same configs (none in the compiled study)
    assert trunks if name == "config.yaml" else not trunks
    assert calls == resolved and set(calls.values()) == {1}
    fine_tuning = ("finetune/", "finetune_base/")  # (rule finetune's: not the sheet's)
    trained = sorted(n for n in calls if not n.startswith(fine_tuning))
    assert trained == sorted(f"{r.family}/{r.run}" for r in rows)
    assert plan.config == validate_pipeline_config(raw, SCHEMA)


def test_a_training_run_that_does_not_resolve_is_named_with_its_family():
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    raw["pretrain"]["train"]["min_lr"] = 1.0  # above the peak LR: no run of the family resolves
    with pytest.raises(
        ConfigError, match=r"^pretrain run baseline-d64-s0: config key train.min_lr"
    ):
        validated_plan(raw, SCHEMA)


def test_runs_sheet_prints_a_line_per_run(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["runs-sheet", "--configfile", "config/ci.yaml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, first = (
        lines[0].split("\t"),
        dict(zip(lines[0].split("\t"), lines[1].split("\t"), strict=True)),
    )
    assert tuple(header) == ws.COLUMNS and "config" not in header
    rows = ws.runs_sheet(Plan(load("ci.yaml")))
    assert len(lines) == 1 + len(rows)
    assert first["run"] == rows[0].run and first["config_sha256"] == rows[0].config_sha256
    assert first["data_seed"] == "" and first["minutes"] == "30"
