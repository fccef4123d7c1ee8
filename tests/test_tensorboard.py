"""log.tensorboard: off unless asked for (an existing config resolves to the very bytes it did, and
its run identity is the same), a view of metrics.jsonl when on (the same numbers, the same run),
and a one-line error before the run starts when the package is missing."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import tiny_run

from tapernorm.cli import main
from tapernorm.runtime import jsonio
from tapernorm.training.identity import config_identity
from tapernorm.training.loop import train
from tapernorm.training.tensorboard_log import TENSORBOARD_DIR, scalars

STEPS = {"steps": 6, "device": "cpu"}
LOG = {"every": 2, "ckpt_every": 3, "eval_windows": 4, "eval_every": 3}


def test_an_existing_config_resolves_as_before(shards_dir):
    """No default is filled in: a config without the key resolves without it (config.json and
    the workflow's train params unchanged), and turning it on is not another run."""
    cfg = tiny_run(shards_dir)
    assert "tensorboard" not in cfg.to_dict()["log"] and cfg.log.tensorboard is None
    on = tiny_run(shards_dir, log={"tensorboard": True})
    assert on.log.tensorboard is True
    identity = config_identity(cfg.to_dict())
    assert jsonio.dumps(config_identity(on.to_dict())) == jsonio.dumps(identity)
    other = tiny_run(shards_dir, log={"geometry": True})
    assert config_identity(other.to_dict()) != identity  # (the identity still compares log)


def test_scalars_are_the_records_numbers():
    record = {"step": 4, "loss": 2.5, "gate": 1, "c": {"blocks.0.ln_1": 0.5}, "note": "x"}
    assert dict(scalars(record)) == {"loss": 2.5, "gate": 1.0, "c/blocks.0.ln_1": 0.5}


def test_a_missing_package_stops_the_run_before_it_starts(
    shards_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import blocked
    cfg = tiny_run(shards_dir, train=STEPS, log={**LOG, "tensorboard": True})
    out = tmp_path / "run"
    assert main(["train", "--config-json", cfg.to_json(), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "tapernorm train: error: log.tensorboard is true but the tensorboard package is not "
        "installed: pip install tensorboard (or set log.tensorboard: false)"
    ]
    assert not out.exists()  # nothing started


def test_the_log_holds_the_records_numbers_and_changes_no_result(shards_dir, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    plain = tiny_run(shards_dir, train=STEPS, log=LOG, variant="internal_aux")
    viewed = tiny_run(
        shards_dir, train=STEPS, log={**LOG, "tensorboard": True}, variant="internal_aux"
    )
    train(plain, tmp_path / "plain")
    train(viewed, tmp_path / "viewed")
    for name in ("model.safetensors", "eval.json"):
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "viewed" / name).read_bytes()
    assert not (tmp_path / "plain" / TENSORBOARD_DIR).exists()

    records = [json.loads(x) for x in (tmp_path / "viewed/metrics.jsonl").read_text().splitlines()]
    expected: dict[str, dict[int, float]] = {}
    for record in records:
        for tag, value in scalars(record):
            expected.setdefault(tag, {})[record["step"]] = value
    assert {"loss", "val_loss", "grad_norm", "lr", "gate"} <= expected.keys()
    events = EventAccumulator(str(tmp_path / "viewed" / TENSORBOARD_DIR))
    events.Reload()
    assert set(events.Tags()["scalars"]) == expected.keys()
    for tag, by_step in expected.items():
        got = {e.step: e.value for e in events.Scalars(tag)}
        assert got == pytest.approx(by_step, rel=1e-6), tag  # (TensorBoard keeps float32)
