"""The training step on an accelerator's terms: nothing read back between boundaries (divergence is
noticed at the next one, with the same outcome), and train.compile's one graph per gate phase."""

import dataclasses
import json

import pytest
import torch
from conftest import blow_up_at, tiny_run

from tapernorm.model import GPT
from tapernorm.training.checkpoint import load_model
from tapernorm.training.loop import train


def _steps(run_dir):
    """The steps of the training records (blow-up events aside)."""
    records = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in records if "blowup" not in r]


def test_divergence_between_boundaries_is_noticed_at_the_next_one(
    shards_dir, tmp_path, monkeypatch
):
    """Step 7 diverges; steps 8-9 run on a non-finite model without a read; step 10 (logged and
    checkpointed) notices: the outcome is that of a loop that stopped at step 7."""
    blow_up_at(monkeypatch, 7)
    cfg = tiny_run(shards_dir, train={"steps": 30}, log={"every": 5, "ckpt_every": 5})
    result = train(cfg, tmp_path / "run")
    assert result["diverged"] and result["diverged_step"] == 7
    assert result["weights_step"] == 5 and result["val_loss"] is not None
    assert _steps(tmp_path / "run") == [1, 5]  # nothing logged at or after the divergence
    assert result["first_blowup_step"] == 7  # but the step that diverged is a blow-up event
    saved = load_model(tmp_path / "run")
    assert all(torch.isfinite(p).all() for p in saved.parameters())


def test_divergence_before_any_checkpoint_keeps_the_init(shards_dir, tmp_path, monkeypatch):
    blow_up_at(monkeypatch, 3)
    cfg = tiny_run(shards_dir, train={"steps": 30}, log={"every": 10, "ckpt_every": 20})
    result = train(cfg, tmp_path / "run")
    assert result["diverged_step"] == 3 and result["weights_step"] == 0
    saved = load_model(tmp_path / "run")
    torch.manual_seed(cfg.seed)
    init = GPT(saved.config)  # the run's init: the same seed, the same config
    for (name, p), q in zip(saved.state_dict().items(), init.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


@pytest.mark.slow
def test_compiled_training_takes_one_graph_per_gate_phase(shards_dir, tmp_path):
    """train.compile: 12 steps through g = 1, 0 < g < 1 and g = 0 compile three graphs (a changing
    g does not recompile) and end where eager training ends, to float rounding."""
    from torch._dynamo.utils import counters

    cfg = tiny_run(
        shards_dir,
        variant="all_aux",
        train={"steps": 12, "warmup_steps": 3},
        taper={"start": 3, "end": 9},
        log={"every": 1},
    )
    train(cfg, tmp_path / "eager")
    torch._dynamo.reset()
    counters.clear()
    train(cfg.replace(train=dataclasses.replace(cfg.train, compile=True)), tmp_path / "compiled")
    assert counters["stats"]["unique_graphs"] == 3

    def training_records(run: str) -> list[dict]:  # (blow-up events aside: this run spikes)
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [r for r in map(json.loads, lines) if "gate" in r]

    eager, compiled = training_records("eager"), training_records("compiled")
    assert [r["gate"] for r in compiled] == [r["gate"] for r in eager]
    for a, b in zip(eager, compiled, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), a["step"]


def test_the_geometry_heads_second_pass_records_no_calibration(shards_dir):
    """dCE/dh of a compiled or DDP step goes through the head again: that pass must not add the
    final TaperNorm's statistics a second time (with grad_accum > 1 it moved c, and DDP's
    processes left the single process's step), and gives the head's own logits."""
    from tapernorm.training.diagnostics import head_without_calibration
    from tapernorm.training.run import build_model

    cfg = tiny_run(shards_dir, variant="all_aux")
    model = build_model(cfg, 512).train()
    h = torch.randn(2, 5, model.config.n_embd)
    logits = model.head(h)
    pending = list(model.ln_f._pending)
    assert len(pending) == 1  # the training pass recorded its statistics
    assert torch.equal(head_without_calibration(model, h), logits)
    assert model.ln_f._pending == pending and model.ln_f.training
