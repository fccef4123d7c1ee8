"""DyT (Zhu et al. 2025) as a norm-free baseline: the layer, the model, its pre-training variant, the
inference benchmarks' DyT rows and the claims row "TaperNorm vs DyT"."""

import json
import math

import pandas as pd
import pytest
import torch
from conftest import speed_reruns, tiny_run

from tapernorm import GPT, DyT, GPTConfig, fold_model
from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims import dyt as claims_dyt
from tapernorm.analysis.claims.document import ClaimInputs
from tapernorm.analysis.figures import speedups as figure_speedups
from tapernorm.analysis.tables import inference as inference_tables
from tapernorm.bench.decode import bench_decode
from tapernorm.bench.forward import bench_forward
from tapernorm.bench.variants import inference_variants, random_dyt, random_variants
from tapernorm.config import ConfigError
from tapernorm.fold import FoldError, export_explicit_scaling
from tapernorm.model import DYT_RECIPE, dyt_alpha0, dyt_config
from tapernorm.norms import LayerNorm, RMSNorm, TaperNorm
from tapernorm.training.checkpoint import load_model, save_model
from tapernorm.training.loop import train
from tapernorm.variants import VARIANTS
from tapernorm.workflow import Plan, validate_pipeline_config

TINY = dict(n_layer=2, n_head=2, n_embd=16, vocab_size=50, block_size=32)


def test_dyt_is_weight_tanh_alpha_x_plus_bias():
    layer = DyT(3, alpha0=0.7)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([1.0, 2.0, -0.5]))
        layer.bias.copy_(torch.tensor([0.0, 0.1, 1.0]))
    x = torch.tensor([[0.5, -2.0, 3.0]])
    by_hand = [1.0 * math.tanh(0.35), 2.0 * math.tanh(-1.4) + 0.1, -0.5 * math.tanh(2.1) + 1.0]
    assert torch.allclose(layer(x), torch.tensor([by_hand]), atol=1e-6)
    assert layer.alpha.item() == pytest.approx(0.7) and layer.alpha.requires_grad
    fresh = DyT(3)
    assert fresh.alpha.item() == 0.5 and fresh.weight.eq(1).all() and fresh.bias.eq(0).all()
    no_bias = DyT(3, alpha0=0.7, bias=False)
    with torch.no_grad():
        no_bias.weight.copy_(layer.weight)
    assert no_bias.bias is None and len(list(no_bias.parameters())) == 2
    assert torch.allclose(no_bias(x), layer(x) - layer.bias, atol=1e-6)


def test_alpha0_follows_the_dyt_papers_width_table():
    assert dyt_alpha0(64) == dyt_alpha0(1024) == (1.0, 1.0)  # narrower: the narrowest row
    assert dyt_alpha0(2048) == (1.0, 0.5) and dyt_alpha0(4096) == (0.8, 0.2)
    assert dyt_alpha0(3000) == (0.8, 0.2)  # between rows: the wider row (the smaller alpha0)
    assert dyt_alpha0(8192) == dyt_alpha0(16384) == (0.2, 0.05)
    big = GPTConfig(norm="dyt", **{**TINY, "n_embd": 4096, "n_head": 32})
    assert (big.dyt_alpha_attn, big.dyt_alpha_other) == (0.8, 0.2)
    assert GPTConfig(norm="dyt", dyt_alpha_attn=0.3, **TINY).dyt_alpha_attn == 0.3


def test_the_dyt_recipe_starts_the_residual_stream_at_unit_scale():
    torch.manual_seed(0)
    cfg = dyt_config(**{**TINY, "n_embd": 256, "n_head": 4})
    model = GPT(cfg)
    assert not cfg.tie_embeddings and model.lm_head.weight is not model.tok_emb.weight
    assert model.emb_scale.item() == 50.0 and model.emb_scale.requires_grad
    assert all(m.bias is None for m in model.modules() if isinstance(m, DyT))
    idx = torch.randint(0, TINY["vocab_size"], (4, 16))
    rms = model.embed(idx).pow(2).mean().sqrt().item()
    assert 0.9 < rms < 1.1  # 50 x N(0, 0.02^2): unit scale, the recipe's intent
    plain = GPT(GPTConfig(**{**TINY, "n_embd": 256, "n_head": 4}))
    assert plain.emb_scale is None and plain.embed(idx).pow(2).mean().sqrt().item() < 0.03


@pytest.mark.parametrize("style", ["llama", "gpt2"])
def test_a_dyt_model_has_no_norm_left(style):
    model = GPT(GPTConfig(style=style, norm="dyt", **TINY))
    kinds = {type(m) for m in model.modules()}
    assert not kinds & {RMSNorm, LayerNorm, TaperNorm, torch.nn.LayerNorm}
    assert sum(isinstance(m, DyT) for m in model.modules()) == 2 * TINY["n_layer"] + 1
    cfg = model.config
    assert model.blocks[0].ln_1.alpha.item() == pytest.approx(cfg.dyt_alpha_attn)
    assert model.blocks[0].ln_2.alpha.item() == pytest.approx(cfg.dyt_alpha_other)
    assert model.ln_f.alpha.item() == pytest.approx(cfg.dyt_alpha_other)
    assert (cfg.dyt_alpha_attn, cfg.dyt_alpha_other) == (1.0, 1.0)  # DyT's table, d <= 1024
    assert GPTConfig(**TINY).norm == "default"  # the default keeps today's model
    with pytest.raises(ValueError, match="GPTConfig.taper"):
        GPTConfig(norm="dyt", taper="internal", **TINY)


def test_dyt_generate_equals_uncached_greedy_and_checkpoints_round_trip(tmp_path):
    torch.manual_seed(0)
    model = GPT(GPTConfig(norm="dyt", dyt_alpha_attn=1.1, **TINY)).eval()
    prompt = torch.randint(0, TINY["vocab_size"], (2, 5))
    out = model.generate(prompt, 6)
    seq = prompt
    with torch.no_grad():
        for _ in range(6):
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)
    save_model(model, tmp_path / "m")
    back = load_model(tmp_path / "m").eval()
    assert back.config == model.config and back.config.dyt_alpha_attn == 1.1
    assert torch.equal(back(prompt), model(prompt))


def test_an_embedding_scalar_folds_but_has_no_stock_export():
    from tapernorm import set_gate
    from tapernorm.interop.hf_export import ExportError, to_hf

    torch.manual_seed(0)
    model = GPT(GPTConfig(taper="all", emb_scale=3.0, **TINY)).eval()
    set_gate(model, 0.0)
    idx = torch.randint(0, TINY["vocab_size"], (2, 7))
    folded = fold_model(model)
    assert folded.emb_scale.item() == 3.0
    assert torch.allclose(folded(idx), model(idx), rtol=1e-4, atol=1e-5)
    with pytest.raises(ExportError, match="emb_scale"):
        to_hf(model)


def test_fold_refuses_a_dyt_model():
    model = GPT(GPTConfig(norm="dyt", **TINY))
    for export in (fold_model, export_explicit_scaling):
        with pytest.raises(FoldError, match="DyT"):
            export(model)


def test_the_dyt_variant_sets_the_norm_and_trains(shards_dir, tmp_path):
    cfg = tiny_run(shards_dir, variant="dyt", train={"steps": 12, "warmup_steps": 2})
    assert cfg.model.norm == "dyt" and cfg.model.taper == "none"
    assert not cfg.anchor.enabled
    m = cfg.model.to_dict()
    assert (m["tie_embeddings"], m["dyt_bias"], m["emb_scale"]) == (False, False, 50.0)
    assert m["emb_scale"] == DYT_RECIPE["emb_scale"]  # variants.VARIANTS states model.DYT_RECIPE
    assert {k: m[k] for k in DYT_RECIPE} == DYT_RECIPE
    result = train(cfg, tmp_path / "dyt")
    records = [json.loads(x) for x in (tmp_path / "dyt/metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert not result["diverged"] and math.isfinite(result["val_loss"])
    # the loss falls (slowly: at init tanh sees embedding-scale inputs, docs/norm-free.md)
    assert sum(losses[-3:]) < sum(losses[:3]) and losses[-1] < losses[0] - 0.005
    model = load_model(tmp_path / "dyt")
    assert model.config.norm == "dyt" and isinstance(model.ln_f, DyT)
    with pytest.raises(ConfigError, match="model.norm"):
        tiny_run(shards_dir, variant="dyt", model={"norm": "default"})
    with pytest.raises(ConfigError, match="model.taper"):
        tiny_run(shards_dir, model={"norm": "dyt", "taper": "all"})
    with pytest.raises(ConfigError, match="model.tie_embeddings.*contradicts variant 'dyt'"):
        tiny_run(shards_dir, variant="dyt", model={"tie_embeddings": True})
    shipped = tiny_run(shards_dir, model={"norm": "dyt", "dyt_bias": True})  # the old set-up:
    assert shipped.model.tie_embeddings  # reachable only by spelling out its keys
    untied = tiny_run(shards_dir, variant="baseline_untied")
    assert not untied.model.tie_embeddings and untied.model.norm is None
    baseline = tiny_run(shards_dir, variant="baseline")
    assert "norm" not in baseline.to_dict()["model"]  # other runs' configs are as before


def test_pipeline_benchmarks_time_the_dyt_run_when_pretrained():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    schema = root / "workflow/schemas/config.schema.yaml"
    raw = yaml.safe_load((root / "config/ci.yaml").read_text())
    cfg = validate_pipeline_config(raw, schema)
    assert "dyt" in cfg["pretrain"]["variants"] and Plan(cfg).bench.runs()["dyt"] == "dyt-d32-s0"
    without = {**raw, "pretrain": {**raw["pretrain"], "variants": ["baseline", "internal_aux"]}}
    without["fold"] = {"variants": ["internal_aux"]}
    assert "dyt" not in Plan(validate_pipeline_config(without, schema)).bench.runs()
    bad = {**raw, "fold": {"variants": ["internal_aux", "dyt"]}}
    with pytest.raises(ConfigError, match="fold.variants"):
        validate_pipeline_config(bad, schema)


@pytest.fixture(scope="module")
def bench_rows():
    cfg = GPTConfig(style="llama", **{**TINY, "n_embd": 32, "block_size": 64})
    baseline, tapered = random_variants(cfg)
    models, reference = inference_variants(baseline, tapered, random_dyt(cfg))
    assert list(models) == ["baseline", "explicit", "folded", "dyt"]
    forward = bench_forward(models, [1], [8], warmup=0, iters=2, reference=reference)
    decode = bench_decode(models, [1], [4], 3, repeats=2, warmup=0, reference=reference)
    calm = {"disturbed": False, "disturbed_why": ""}  # 2 rounds of a tiny model spread widely
    return pd.DataFrame(forward + decode).assign(source="test", **calm)


def test_the_benchmarks_have_dyt_rows_and_tables_show_them(bench_rows):
    df = bench_rows
    for kind in ("forward", "decode"):
        rows = df[(df["benchmark"] == kind) & (df["variant"] == "dyt")]
        assert len(rows) == 1 and rows["speedup"].iloc[0] > 0
    t3, caption = inference_tables.table3(df)
    assert "DyT (ours)" in t3.columns and "DyT" in caption
    mine = t3[(t3["B"] == 1) & (t3["T"] == 8)]["DyT (ours)"].iloc[0]
    assert "×" in mine
    dec, _ = inference_tables.table_decode(df)
    assert "DyT speedup (IQR)" in dec.columns and "DyT tok/s" in dec.columns
    fig, caption = figure_speedups.fig5(df)
    assert any(label.startswith("DyT") for label in fig.axes[0].get_legend_handles_labels()[1])
    assert "DyT: green, up triangles" in caption
    old, _ = inference_tables.table3(df[df["variant"] != "dyt"])
    assert not any("DyT" in c for c in old.columns)  # without DyT rows: the table as before


def _runs(dyt_gap: float, n: int = 2, untied_taper: float | None = None) -> pd.DataFrame:
    """Baseline 2.0 and Internal-Taper (+aux) 2.02 (tied), Baseline (untied head) 1.8 and DyT
    1.8 x (1 + dyt_gap / 2), and Internal-Taper (+aux) untied at 1.8 + untied_taper if given."""
    rows = []
    cells = [("baseline", 2.0), ("internal_aux", 2.02), ("baseline_untied", 1.8)]
    cells.append(("dyt", 1.8 * (1 + dyt_gap / 2)))
    if untied_taper is not None:
        cells.append(("internal_aux_untied", 1.8 + untied_taper))
    for variant, loss in cells:
        for s in range(n):
            rows.append(
                {
                    "name": f"{variant}-d64-s{s}",
                    "variant": variant,
                    "width": 64,
                    "seed": s,
                    "steps": 100,
                    "lr": 1e-3,
                    "val_loss": loss + 0.001 * s,
                    "diverged": False,
                    "corpus": "no-such-corpus",
                    "train_tokens": None,
                    "n_layer": 8,
                    "n_head": 4,
                    "block_size": 128,
                    "batch_size": 16,
                }
            )
    return pd.DataFrame(rows)


def _grid(taper_best: float | None, dyt_best: float | None, **scale) -> dict:
    """An lr_grid.json at _runs' scale (or `scale`'s changes) with the arms' best-LR gaps."""
    base = {"corpus": "no-such-corpus", "n_embd": 64, "n_layer": 8, "n_head": 4}
    base |= {"block_size": 128, "steps": 100, "batch_size": 16, "seeds": [0, 1]}
    gaps = [
        {"variant": v, "label": VARIANTS[v]["label"], "against": "Baseline (untied head)",
         "shared_lr": 1e-3, "gap_shared_pct": 1.0, "best_lr": 3e-3, "baseline_best_lr": 3e-3,
         "gap_best_pct": g}
        for v, g in (("internal_aux_untied", taper_best), ("dyt", dyt_best))
    ]  # fmt: skip
    made = {"commit": "f" * 40, "dirty": False, "host": {"cpu": "a test CPU"}}
    return {"path": "grid", "made": made, "scale": base | scale, "cells": [], "gaps": gaps}


def _with_quartiles(rows: pd.DataFrame, folded: tuple, dyt: tuple) -> pd.DataFrame:
    """Benchmark rows whose folded and DyT per-round speedups have these (q1, median, q3)."""
    out = rows.copy()
    for variant, (q1, med, q3) in (("folded", folded), ("dyt", dyt)):
        at = out["variant"] == variant
        out.loc[at, ["speedup_q1", "speedup", "speedup_q3"]] = [q1, med, q3]
    return out


def test_the_dyt_rows_measure_is_the_two_gaps_and_its_judge_grades_both_halves():
    """The typed numbers behind the TaperNorm-vs-DyT row: each method's gap to the baseline with
    its head, the loss half and the speed half; the judge reads those alone."""
    claim = claims.CLAIMS[-1]
    measured = claim.measure(ClaimInputs(runs=_runs(0.10)))
    [(taper, dyt)] = measured.gaps.values()
    assert (taper.variant, taper.against, dyt.variant, dyt.against) == (
        "internal_aux",
        "baseline",
        "dyt",
        "baseline_untied",
    )
    assert (taper.pct, dyt.pct) == pytest.approx((1.0, 5.0), abs=0.01)  # (seeds differ a little)
    assert measured.loss.ok == [True] and measured.speed_state is None  # no benchmark rows
    assert claim.judge(measured).grade == "partly"
    worse = claim.measure(ClaimInputs(runs=_runs(0.0)))
    assert worse.loss.ok == [False] and claim.judge(worse).grade == "no"


def _dyt(**kw) -> tuple[dict, claims_dyt.DytClaim]:
    """The TaperNorm-vs-DyT row on these inputs and its typed measure."""
    inp = ClaimInputs(**kw)
    return claims.claim_dyt(inp), claims.CLAIMS[-1].measure(inp)


SHARED, AT_BEST = "at the shared LR", "each arm at its own best LR"  # LossHalf.where


def test_claims_row_tapernorm_vs_dyt(bench_rows):
    apart = _with_quartiles(bench_rows, folded=(1.2, 1.3, 1.4), dyt=(0.9, 1.0, 1.1))
    pool = speed_reruns(apart)  # folded 1.3x DyT in three runs: faster by the speed rule
    row, m = _dyt(runs=_runs(0.10), bench=apart, bench_pool=pool)
    assert row["grade"] == "yes"  # closer at the shared LR (no grid), folded faster
    assert (m.loss.ok, m.loss.where, m.speed_state) == ([True], SHARED, "yes")
    alone, m = _dyt(runs=_runs(0.10), bench=apart)  # one run
    assert alone["grade"] == "partly" and m.speed_state == "not resolved"
    assert (m.loss.ok, m.loss.where) == ([True], SHARED)
    # golden: the rendered text (the DyT row's Ours at the shared LR)
    assert (
        "d=64 at the shared LR 0.001: Internal-Taper (+aux) +1.00% vs Baseline, DyT +5.00% vs "
        "Baseline (untied head)" in row["Ours"]
    )
    assert "1/1 cells" in row["Ours"] and "untied head" in row["Comment"]  # the cells apart
    assert "Criterion" in row["Comment"] and "no LR grid given" in row["Comment"]
    overlapping = _with_quartiles(bench_rows, folded=(0.95, 1.05, 1.15), dyt=(0.9, 1.0, 1.1))
    held, m = _dyt(runs=_runs(0.10), bench=overlapping)
    assert held["grade"] == "partly"
    assert (m.loss.ok, m.speed_state) == ([True], "not resolved")
    no_bench, m = _dyt(runs=_runs(0.10))
    assert no_bench["grade"] == "partly" and (m.loss.ok, m.speed_state) == ([True], None)
    assert "no DyT benchmark rows" in no_bench["Holds?"]  # why speed is not judged
    worse, m = _dyt(runs=_runs(0.0))
    assert worse["grade"] == "no" and (m.loss.ok, m.loss.where) == ([False], SHARED)
    none = claims.claim_dyt(ClaimInputs(runs=_runs(0.1)[lambda d: d["variant"] != "dyt"]))
    assert none["Holds?"] == "not measured"
    unmatched = _runs(0.1)[lambda d: d["variant"] != "baseline_untied"]
    assert claims.claim_dyt(ClaimInputs(runs=unmatched))["Holds?"] == "not measured"
    same_head, m = _dyt(runs=_runs(0.10, untied_taper=0.18))
    [(taper, _)] = m.gaps.values()  # the untied TaperNorm run is the one judged
    assert (taper.variant, taper.against) == ("internal_aux_untied", "baseline_untied")
    assert taper.pct == pytest.approx(10.0, abs=0.01) and "+10.00%" in same_head["Ours"]
    assert same_head["grade"] == "no"
    busy = apart.assign(disturbed=True, disturbed_why="other processes used 1.00 cores")
    held, m = _dyt(runs=_runs(0.10), bench=busy)
    assert held["grade"] == "partly" and m.speed_state is None
    assert "disturbed timing" in held["Holds?"]  # why speed is not judged


def test_the_dyt_row_judges_the_loss_at_each_arms_best_lr_from_a_grid_at_its_scale(
    bench_rows, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the runs' data.dir resolves: the grid's corpus can be compared
    (tmp_path / "no-such-corpus").mkdir()
    counts = '"vocab_size": 64, "eot_id": 0, "train_tokens": 10, "val_tokens": 5'
    (tmp_path / "no-such-corpus/meta.json").write_text(f'{{"corpus": "no-such-corpus", {counts}}}')
    apart = _with_quartiles(bench_rows, folded=(1.2, 1.3, 1.4), dyt=(0.9, 1.0, 1.1))
    pool = speed_reruns(apart)  # folded faster than DyT by the speed rule
    # at the shared LR TaperNorm is closer (+1% vs +5%); at each arm's best LR DyT is (-2.9%)
    grid = _grid(1.2, -2.9)
    row, m = _dyt(runs=_runs(0.10), bench=apart, bench_pool=pool, lr_grid=grid)
    assert row["grade"] == "partly" and (m.loss.ok, m.loss.where) == ([False], AT_BEST)
    assert m.loss.grid is grid and m.speed_state == "yes"
    assert "LR grid grid" in row["Ours"] and "commit ffffffffffff" in row["Ours"]  # named
    assert "+1.20% (LR 0.003)" in row["Ours"] and "DyT -2.90%" in row["Ours"]
    assert "DyT +5.00%" in row["Ours"]  # the shared LR stays beside
    other = _grid(1.2, -2.9, steps=600)  # a grid at another scale is named and not used
    row, m = _dyt(runs=_runs(0.10), bench=apart, bench_pool=pool, lr_grid=other)
    assert row["grade"] == "yes" and m.loss.grid is None and m.loss.where == SHARED
    assert "steps 600 vs 100" in row["Comment"]  # the scale that differs, named
    diverged = claims.claim_dyt(ClaimInputs(runs=_runs(0.10), lr_grid=_grid(1.2, None)))
    assert "DyT diverged" in diverged["Ours"] and "TaperNorm closer each arm" in diverged["Holds?"]
    assert claims.CLAIMS[-1].measure is claims_dyt.measure_dyt  # quoting the study's rows
    assert claims.CLAIMS[-1].study == "dyt"
