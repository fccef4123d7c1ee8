"""Blow-ups (training/blowups.py): every step checked for a non-finite value and a finite spike,
recorded with its batch, counted in eval.json; the committed records scored by the same rule."""

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import blow_up_at, spike_at, tiny_run

from tapernorm.training import blowups
from tapernorm.training.blowups import GRAD_FACTOR, LOSS_FACTOR, SpikeDetector, rescore
from tapernorm.training.loop import train
from tapernorm.training.metrics_log import read_records

ROOT = Path(__file__).resolve().parents[1]
SCALING_RUNS = ROOT / "results" / "cpu" / "scaling" / "runs"


def _detector(losses, clip=1.0):
    det = SpikeDetector(clip)
    for loss in losses:
        det.logged(loss)
    return det


def test_loss_spike_needs_a_reference_and_crosses_k_times_its_median():
    det = _detector([4.0] * (blowups.MIN_REFERENCE - 1))
    assert det.reference() is None
    assert det.kind(100.0, 0.5) is None  # too early to judge a loss
    det.logged(4.0)
    assert det.reference() == 4.0
    assert det.kind(LOSS_FACTOR * 4.0, 0.5) is None  # at k x the median: not above it
    assert det.kind(LOSS_FACTOR * 4.0 + 1e-6, 0.5) == "loss_spike"
    assert det.kind(5.0, 0.5) is None


def test_reference_is_the_median_of_the_recent_window():
    det = _detector([1.0] * 50 + [3.0] * blowups.REFERENCE_WINDOW)
    assert det.reference() == 3.0  # the old losses left the window
    det = _detector([3.0, 3.0, 3.0, 1e6, 3.0])
    assert det.reference() == 3.0  # one huge logged loss does not move it
    det.logged(float("nan"))
    assert len(det.losses) == 5  # a non-finite loss does not join


def test_grad_spike_and_nonfinite_kinds():
    det = _detector([4.0] * 10, clip=1.0)
    assert det.kind(4.0, GRAD_FACTOR) is None
    assert det.kind(4.0, GRAD_FACTOR * 1.01) == "grad_spike"
    assert det.kind(float("nan"), 1.0) == "nonfinite_loss"
    assert det.kind(4.0, 1.0, aux=float("inf")) == "nonfinite_loss"  # the scale loss counts
    assert det.kind(4.0, float("inf")) == "nonfinite_grad"
    assert SpikeDetector(float("inf")).kind(4.0, 1e30) is None  # no clip: no gradient spike
    event = det.check(0.25, float("inf"), 1.0)
    assert event["kind"] == "nonfinite_loss" and event["loss"] == "inf"  # JSON has no inf
    json.dumps(event, allow_nan=False)


def test_summary_counts_and_lists_events():
    events = [{"step": s, "blowup": {"kind": "loss_spike"}} for s in range(30, 60)]
    out = blowups.summary(events)
    assert out["blew_up"] and out["blowups"] == 30 and out["first_blowup_step"] == 30
    assert len(out["blowup_events"]) == blowups.KEPT_EVENTS
    assert blowups.summary([]) == {
        "blew_up": False,
        "blowups": 0,
        "first_blowup_step": None,
        "blowup_events": [],
    }


def test_a_finite_spike_between_logged_steps_is_recorded_and_training_goes_on(
    shards_dir, tmp_path, monkeypatch
):
    spike_at(monkeypatch, {23}, 400.0)  # logits x400: a finite loss far above the median
    cfg = tiny_run(shards_dir, train={"steps": 30}, log={"every": 10, "ckpt_every": 10})
    result = train(cfg, tmp_path / "run")
    assert not result["diverged"] and result["weights_step"] == 30  # the run finished
    assert result["blew_up"] and result["blowups"] >= 1 and result["first_blowup_step"] == 23
    assert result["blowups_checked"] == "every step"
    records = read_records(tmp_path / "run" / "metrics.jsonl")
    first = next(r for r in records if "blowup" in r)
    assert first["step"] == 23  # not a logged step: only the per-step check sees it
    assert 23 not in [r["step"] for r in records if "gate" in r]
    event = first["blowup"]
    assert event["kind"] in ("loss_spike", "grad_spike") and event["gate"] == 1.0
    assert event["batch"]["data_seed"] == cfg.seed
    (starts,) = event["batch"]["starts"]  # one micro-batch of batch_size windows
    assert len(starts) == cfg.train.batch_size
    # the recorded starts are the batch step 23 trained on
    from tapernorm.data import TokenShards
    from tapernorm.training.run import batch_generator

    shards = TokenShards(str(shards_dir))
    x, _ = shards.windows("train", starts, 32)
    y, _ = shards.batch("train", cfg.train.batch_size, 32, batch_generator(cfg.seed, 23, 0))
    assert torch.equal(x, y)


def test_a_clean_run_records_no_blowup_and_resume_checks_the_same(shards_dir, tmp_path):
    cfg = tiny_run(shards_dir, variant="internal_aux", train={"steps": 25})
    full = train(cfg, tmp_path / "full")
    assert full["blew_up"] is False and full["blowups"] == 0
    train(cfg, tmp_path / "resumed", stop_after=14)
    resumed = train(cfg, tmp_path / "resumed")
    assert {k: resumed[k] for k in ("blew_up", "blowups")} == {"blew_up": False, "blowups": 0}


def test_resumed_run_finds_the_same_spike(shards_dir, tmp_path, monkeypatch):
    """The reference is made of logged losses, so a run resumed from its checkpoint judges each
    step as an uninterrupted run does."""
    cfg = tiny_run(shards_dir, train={"steps": 30}, log={"every": 2, "ckpt_every": 10})
    spike_at(monkeypatch, {25}, 400.0)
    full = train(cfg, tmp_path / "full")
    spike_at(monkeypatch, {25 - 14}, 400.0)  # the resumed process counts forwards from step 15
    train(cfg, tmp_path / "resumed", stop_after=14)
    monkeypatch.undo()
    spike_at(monkeypatch, {25 - 10}, 400.0)  # it resumes from the step-10 checkpoint
    resumed = train(cfg, tmp_path / "resumed")
    keys = ("blew_up", "blowups", "first_blowup_step", "blowup_events")
    assert {k: full[k] for k in keys} == {k: resumed[k] for k in keys}
    assert full["first_blowup_step"] == 25


def test_divergence_is_a_blowup_and_in_eval_json(shards_dir, tmp_path, monkeypatch):
    blow_up_at(monkeypatch, 12)
    cfg = tiny_run(shards_dir, train={"steps": 30}, log={"every": 5, "ckpt_every": 10})
    result = train(cfg, tmp_path / "run")
    assert result["diverged"] and result["diverged_step"] == 12
    assert result["blew_up"] and result["blowup_events"][-1]["step"] == 12
    assert result["blowup_events"][-1]["blowup"]["kind"] == "nonfinite_loss"


# ---- the committed records, scored again --------------------------------------------------------


def _rescored(run: str) -> list[dict]:
    d = SCALING_RUNS / run
    clip = json.loads((d / "config.json").read_text())["train"]["grad_clip"]
    return rescore(read_records(d / "metrics.jsonl"), clip)


def test_rescore_flags_the_unflagged_all_taper_run():
    """All-Taper (+aux) d=32 seed 2 at 2,000 steps: eval.json says it did not diverge, its logged
    loss was 24,919 at step 1,750, 164.6 at 1,870 and 25,301 at its last step."""
    run = "scaling/all_aux-d32-s2-n2000"
    assert json.loads((SCALING_RUNS / run / "eval.json").read_text())["diverged"] is False
    events = _rescored(run)
    steps = [e["step"] for e in events]
    assert steps[0] == 1750 and 1870 in steps and 2000 in steps
    assert events[0]["blowup"]["kind"] == "loss_spike"
    assert events[0]["blowup"]["loss"] > 20_000


@pytest.mark.parametrize(
    "run",
    [
        "scaling/baseline-d64-s0-n6000",
        "scaling/internal_aux-d64-s1-n6000",
        "scaling/dyt-d64-s2-n6000",
    ],
)
def test_rescore_leaves_healthy_runs_clean(run):
    assert _rescored(run) == []


def test_rescore_finds_a_spike_only_at_logged_steps():
    records = [{"step": s, "gate": 1.0, "loss": 3.0, "grad_norm": 1.0} for s in range(10, 110, 10)]
    records.append({"step": 110, "gate": 0.0, "loss": 3.0 * LOSS_FACTOR * 1.5, "grad_norm": 1.0})
    records.append({"step": 115, "blowup": {"kind": "loss_spike"}})  # an event record: skipped
    events = rescore(records, 1.0)
    assert [e["step"] for e in events] == [110]
    assert math.isclose(events[0]["blowup"]["reference"], 3.0)
