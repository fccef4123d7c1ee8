"""FakeLN (Baroni et al. 2025) rerun: the FakeNorm layer, the removal schedule, the `fakeln`
fine-tuning protocol end to end, and its place in Table 4 and claim 8."""

import copy
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from conftest import tiny_run

from tapernorm.analysis.claims import finetune as claims_finetune
from tapernorm.analysis.tables import finetune as ft
from tapernorm.config import ConfigError
from tapernorm.fakeln import removal_order, removal_steps
from tapernorm.fold import FoldError, fold_model
from tapernorm.norms import FakeNorm
from tapernorm.training.checkpoint import load_model
from tapernorm.training.loop import train
from tapernorm.workflow import finetune as wft
from tapernorm.workflow import validate_pipeline_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"


def test_removal_order_and_steps_split_the_window_evenly():
    assert removal_order(2) == [
        "blocks.0.ln_2",
        "blocks.1.ln_2",
        "blocks.0.ln_1",
        "blocks.1.ln_1",
        "ln_f",
    ]
    assert list(removal_steps(2, 10, 20).values()) == [12, 14, 16, 18, 20]
    steps = removal_steps(1, 1, 3)  # the CI model: 3 norms in a window of 2 steps
    assert list(steps.values()) == [2, 3, 3] and min(steps.values()) > 1
    with pytest.raises(ValueError, match="window"):
        removal_steps(2, 5, 5)


def _affine_along_rays(norm, h: torch.Tensor) -> tuple[bool, bool]:
    """(f(3h) - f(2h) == f(2h) - f(h): affine along rays, f(2h) == f(h): scale-invariant)."""
    with torch.no_grad():
        f1, f2, f3 = norm(h), norm(2 * h), norm(3 * h)
    affine = torch.allclose(f3 - f2, f2 - f1, atol=1e-5)
    invariant = torch.allclose(f1, f2, atol=1e-5)
    return affine, invariant


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_a_fake_norm_is_the_norm_until_removed_then_affine(kind):
    torch.manual_seed(0)
    norm = FakeNorm(8, kind)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        if norm.bias is not None:
            norm.bias.normal_()
    h = 3 * torch.randn(4, 5, 8) + 1
    norm.eval()  # (in training mode every forward records its sigma(h))
    if kind == "layer":
        ref = torch.nn.functional.layer_norm(h, (8,), norm.weight, norm.bias, 1e-5)
        assert torch.allclose(norm(h), ref, atol=1e-6)
    assert _affine_along_rays(norm, h)[1]  # a real norm: invariant to the input's scale
    norm.train()
    centred = h - h.mean(-1, keepdim=True) if kind == "layer" else h
    sigma = torch.sqrt(centred.pow(2).mean(-1) + 1e-5).mean()
    norm(h), norm.update(0.5)  # step 1
    norm(2 * h), norm.update(0.5)  # step 2: twice the scale
    ema = 0.5 * (0.5 * sigma) + 0.5 * (2 * sigma)  # = 0.25 sigma + sigma
    assert norm.freeze(0.5) == pytest.approx(float(ema / (1 - 0.5**2)), rel=1e-5)
    assert _affine_along_rays(norm.eval(), h) == (True, False)
    expected = centred / norm.scale * norm.weight + (0 if norm.bias is None else norm.bias)
    assert torch.allclose(norm(h), expected, atol=1e-5)


def _fakeln_run(shards_dir, out, start=2, end=7, steps=9):
    cfg = tiny_run(
        shards_dir,
        model={"style": "gpt2", "norm": "fakeln"},
        train={"steps": steps, "warmup_steps": 1},
        fakeln={"start": start, "end": end},
        log={"every": 1, "ckpt_every": 4},
    )
    return cfg, train(cfg, out)


def test_fakeln_training_removes_each_norm_at_its_step(shards_dir, tmp_path):
    cfg, result = _fakeln_run(shards_dir, tmp_path / "run")
    assert cfg.fakeln.to_dict() == {"start": 2, "end": 7, "ema_mu": 0.1}  # ema_mu: taper.ema_mu
    assert not result["diverged"] and math.isfinite(result["val_loss"])
    records = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    removed_at = {
        name: r["step"] for r in records for name in r.get("fakeln_removed", {})
    }  # the step that first ran each norm with its fixed scale
    assert removed_at == removal_steps(2, 2, 7)
    model = load_model(tmp_path / "run").eval()
    norms = {n: m for n, m in model.named_modules() if isinstance(m, FakeNorm)}
    assert set(norms) == set(removal_order(2))
    # no per-token normalization left: every norm's output is affine in its input's scale
    inputs = {}
    hooks = [
        m.register_forward_pre_hook(lambda m, a, n=n: inputs.setdefault(n, a[0]))
        for n, m in norms.items()
    ]
    model(torch.randint(0, model.config.vocab_size, (2, 16)))
    for hook in hooks:
        hook.remove()
    for name, m in norms.items():
        assert _affine_along_rays(m, inputs[name]) == (True, False), name
    with pytest.raises(FoldError, match="fakeln"):
        fold_model(model)


def test_a_resumed_fakeln_run_takes_the_same_steps(shards_dir, tmp_path):
    cfg, whole = _fakeln_run(shards_dir, tmp_path / "whole")
    train(cfg, tmp_path / "resumed", stop_after=4)  # killed after a checkpoint, mid-removals
    resumed = train(cfg, tmp_path / "resumed")
    assert resumed["val_loss"] == pytest.approx(whole["val_loss"], rel=1e-5)


def test_fakeln_run_configs(shards_dir):
    with pytest.raises(ConfigError, match="config key fakeln"):
        tiny_run(shards_dir, model={"norm": "fakeln"}, fakeln={"start": 5, "end": 40})
    with pytest.raises(ConfigError, match="config key fakeln"):
        tiny_run(shards_dir, fakeln={"start": 2, "end": 5})  # not a fakeln model
    raw = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg = validate_pipeline_config(raw, SCHEMA)
    assert "fakeln" in cfg["finetune"]["protocols"]
    model = cfg["finetune"]["models"][0]["name"]
    rc = wft.finetune(cfg).run_config(f"fakeln-{model}", "data/finetune")
    assert rc.model.norm == "fakeln" and rc.model.taper == "none"
    spec = cfg["finetune"]["models"][0]
    assert (rc.fakeln.start, rc.fakeln.end) == (spec["taper_start"], spec["taper_end"])
    assert not rc.anchor.enabled
    vanilla = wft.finetune(cfg).run_config(f"vanilla-{model}", "data/finetune")
    assert "fakeln" not in vanilla.to_dict() and "norm" not in vanilla.to_dict()["model"]
    moved = copy.deepcopy(raw)
    moved["finetune"]["models"][0].update(fakeln_start=2, fakeln_end=5)
    rc = wft.finetune(validate_pipeline_config(moved, SCHEMA)).run_config(f"fakeln-{model}", "d")
    assert (rc.fakeln.start, rc.fakeln.end) == (2, 5)


def test_fakeln_from_a_trained_base_starts_as_the_same_function(shards_dir, tmp_path):
    base = tiny_run(shards_dir, model={"style": "gpt2"}, train={"steps": 3, "warmup_steps": 1})
    train(base, tmp_path / "base")
    cfg = tiny_run(
        shards_dir,
        init={"from": str(tmp_path / "base")},
        model={"style": "gpt2", "norm": "fakeln"},
        train={"steps": 4, "warmup_steps": 1},
        fakeln={"start": 1, "end": 3},
    )
    from tapernorm.training.run import build_model

    fake, real = build_model(cfg, 512).eval(), load_model(tmp_path / "base").eval()
    idx = torch.randint(0, 512, (2, 16))
    assert torch.allclose(fake(idx), real(idx), atol=1e-5)
    assert train(cfg, tmp_path / "fake")["val_loss"] is not None


def _evals(fakeln_loss: float | None) -> pd.DataFrame:
    rows = []
    losses = {"vanilla": 3.0, "internal_taperln": 3.03, "all_taperln": 3.1}
    if fakeln_loss is not None:
        losses["fakeln"] = fakeln_loss
    for protocol, loss in losses.items():
        rows.append(
            {
                "run": f"finetune/{protocol}-m",
                "protocol": protocol,
                "model": "m",
                "label": "a stand-in",
                "paper": "gpt2",
                "init": "pretrain",
                "set": "heldout",
                "column": "owt",
                "corpus": "shakespeare",
                "source": None,
                "row_len": 16,
                "rows": 8,
                "loss": loss,
                "folded_loss": math.nan,
                "fold_diff": math.nan,
                "diverged": False,
                "steps": 6,
            }
        )
    return pd.DataFrame(rows)


def test_table4_has_our_fakeln_row_and_claim8_compares_with_it():
    table, caption = ft.table4(_evals(3.05))
    row = table[(table["Model"] == "a stand-in") & (table["Protocol"] == "FakeLN")].iloc[0]
    ours = "shakespeare held-out, in OWT's place (ours)"  # what our OWT column holds here
    assert row[ours] == "3.0500" and row["OWT (paper)"] == "3.0797"
    assert "FakeLN (ours)" in caption and "FakeLN (Baroni et al., published)" in caption
    cells = claims_finetune.claim8_cells(_evals(3.05))
    assert [c[1] for c in cells["close"]] == ["internal_taperln", "all_taperln"]  # not fakeln
    assert [ok for *_, ok in cells["fakeln"]] == [True, False]
    assert cells["fakeln_sources"] == {"ours"}
    without, caption = ft.table4(_evals(None))
    row = without[(without["Model"] == "a stand-in") & (without["Protocol"] == "FakeLN")].iloc[0]
    ours = "shakespeare held-out, in OWT's place (ours)"
    assert row[ours] == ft.NOT_RERUN and "not rerun" in caption
    assert (
        claims_finetune.claim8_cells(_evals(None))["fakeln"] == []
    )  # a stand-in: not the paper's model
