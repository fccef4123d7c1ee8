"""RunConfig: the typed run config, its agreement with the run schema, and what it writes."""

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import config_files

from tapernorm.config import load_schema, resolve_run_config
from tapernorm.config.run import OPTIONAL, SECTIONS, RunConfig, optional_keys
from tapernorm.training.identity import config_identity
from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow.scaling import RECORD_ONLY, source

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
RECORDS = ROOT / "results/cpu/scaling/runs"


def _tiny() -> RunConfig:
    return resolve_run_config({"data": {"dir": "d"}, "train": {"steps": 10}})


def test_every_section_has_the_schemas_keys_in_its_order():
    """The dataclasses and the run schema say the same keys in the same order; a key without a
    default in the schema is OPTIONAL (absent until set), every other one is always written."""
    schema = load_schema("run")["properties"]
    for name, cls in SECTIONS.items():
        props = schema[name]["properties"]
        keys = [f.metadata.get("key", f.name) for f in dataclasses.fields(cls)]
        assert keys == list(props), name
        optional = {f.metadata.get("key", f.name) for f in dataclasses.fields(cls)
                    if f.metadata.get(OPTIONAL)}  # fmt: skip
        required = schema[name].get("required", [])
        assert optional == {k for k, p in props.items() if "default" not in p} - {*required}, name
    top = [f.name for f in dataclasses.fields(RunConfig)]
    assert sorted(top) == sorted(schema)


def test_a_run_config_is_frozen_and_resolves_to_itself():
    cfg = _tiny()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.lr = 1.0
    assert resolve_run_config(cfg.to_dict()) == cfg
    assert RunConfig.from_dict(json.loads(cfg.to_json())) == cfg
    assert cfg.taper.start == 0 and cfg.taper.end == 10  # no warmup: the taper starts at step 0
    d = cfg.to_dict()
    assert "norm" not in d["model"] and "fakeln" not in d and "tensorboard" not in d["log"]
    assert d["init"] == {"from": None} and d["train"]["betas"] == [0.9, 0.95]


@pytest.mark.parametrize(
    "change, message",
    [({"extra": 1}, "config key extra: unknown key"), ({"train": None}, "config key train: must")],
)
def test_from_dict_names_the_key(change, message):
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict({**_tiny().to_dict(), **change})
    d = _tiny().to_dict()
    del d["log"]["every"]
    with pytest.raises(ValueError, match="config key log.every: missing"):
        RunConfig.from_dict(d)


def test_a_null_optional_key_is_the_same_run_as_an_absent_one():
    """An older config.json may spell an unset optional key as null: the same identity."""
    d = _tiny().to_dict()
    spelled = json.loads(json.dumps(d))
    for *section, key in optional_keys():
        (spelled[section[0]] if section else spelled)[key] = None
    assert config_identity(spelled) == config_identity(d)


def _study_plan() -> Plan:
    return Plan(validate_pipeline_config(config_files("config.yaml", "scaling.yaml"), SCHEMA))


def test_the_committed_records_are_the_configs_the_workflow_builds_now():
    """Every config.json of the committed scaling study (written before RunConfig) holds the run
    config the workflow builds today, key for key: only the order of the keys within a section
    may differ (RunConfig writes them in the schema's order)."""
    plan = _study_plan()
    records = sorted(RECORDS.glob("*/*/config.json"))
    assert len(records) >= 60
    for path in records:
        family, run = path.parent.parent.name, path.parent.name
        if family == plan.scaling.name:
            family, run = source(plan.scaling, plan.pretrain, run)
        recorded = json.loads(path.read_text())
        built = plan.family(family).run_config(run, recorded["data"]["dir"]).to_dict()
        recorded["meta"] = {k: v for k, v in recorded["meta"].items() if k != "provenance"}
        assert {k: v for k, v in recorded.items() if k not in RECORD_ONLY} == {
            k: v for k, v in built.items() if k != "model"
        }, path
        assert list(built) == [k for k in recorded if k == "model" or k not in RECORD_ONLY]
