"""The stability study's families (workflow/stability.py): init seeds crossed with data orders,
trunks shared by the variants of one seed pair, the one-factor-at-a-time reruns; and the GELU MLP
one of those factors needs."""

import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import config_files, tiny_run

from tapernorm.fold import fold_model
from tapernorm.interop.hf_export import ExportError, hf_config_for
from tapernorm.model import GPT, GPTConfig
from tapernorm.norms import set_gate
from tapernorm.training.loop import train
from tapernorm.training.metrics_log import read_records
from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow.names import parse_factor_run
from tapernorm.workflow.stability import FACTORS, owner

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def _plan(**factors) -> Plan:
    raw = config_files("config.yaml", "stability.yaml")
    if factors:
        raw["stability"]["factors"] = factors
    return Plan(validate_pipeline_config(raw, SCHEMA))


def test_the_committed_config_crosses_init_and_data_seeds():
    plan = _plan()
    runs = plan.stability.runs()
    assert len(runs) == 4 * 2 * 4 * 3  # variants x widths x init seeds x data seeds
    cfg = plan.stability.run_config("internal_aux-d32-s1-o2-n2000", "data/x")
    assert (cfg.seed, cfg.data_seed, cfg.data_order_seed) == (1, 2, 2)
    assert cfg.train.steps == 2000 and not cfg.train.compile
    assert (cfg.taper.start, cfg.taper.end, cfg.log.eval_every) == (600, 2000, 200)
    same = plan.stability.run_config("all_aux-d64-s2-o2-n2000", "data/x")
    assert same.data_seed is None and same.data_order_seed == 2  # the scaling study's seed 2
    with pytest.raises(ValueError, match="not part of the stability family"):
        plan.stability.run_config("internal_aux-d32-s9-o0-n2000", "data/x")


def test_the_variants_of_one_seed_pair_share_a_trunk_and_pairs_do_not():
    plan = _plan()
    trunk = plan.trunks.of("stability", "internal_aux-d32-s1-o2-n2000")
    assert trunk == "stability-d32-s1-o2"
    for v in ("baseline", "internal", "all_aux"):
        assert plan.trunks.of("stability", f"{v}-d32-s1-o2-n2000") == trunk
    assert plan.trunks.of("stability", "baseline-d32-s1-o0-n2000") == "stability-d32-s1-o0"
    # equal seeds: no data_seed, the scaling study's seed (named as such)
    assert plan.trunks.of("stability", "baseline-d32-s1-o1-n2000") == "stability-d32-s1"
    assert len([n for n in plan.trunks.names() if n.startswith("stability-")]) == 24


def test_factor_runs_change_one_thing_each():
    base = "internal_aux-d32-s1-o2-n2000"
    plan = _plan(runs=[base, "baseline-d32-s0-o0-n2000"], changes=list(FACTORS))
    fam = plan.stability_factors
    runs = fam.runs()
    assert f"{base}-xno_aux" in runs and "baseline-d32-s0-o0-n2000-xno_aux" not in runs
    assert len(runs) == 6 + 5  # no_aux does not apply to the baseline
    ref = plan.stability.run_config(base, "d").to_dict()
    for factor in FACTORS:
        cfg = fam.run_config(f"{base}-x{factor}", "d").to_dict()
        changed = {
            f"{k}.{kk}"
            for k, v in cfg.items()
            if isinstance(v, dict)
            for kk in v
            if v[kk] != ref[k].get(kk)
        } | {k for k, v in cfg.items() if not isinstance(v, dict) and v != ref.get(k)}
        changed -= {"name"}
        expected = {
            "no_aux": {"variant", "anchor.enabled"},
            "plateau": {"taper.end"},
            "slow_taper": {"taper.start"},
            "clip": {"train.grad_clip"},
            "gelu": {"model.mlp"},
            "ema": {"taper.ema_mu"},
        }[factor]
        assert changed == expected, factor
    assert fam.run_config(f"{base}-xslow_taper", "d").taper.start == 100  # the warmup's end
    assert fam.run_config(f"{base}-xplateau", "d").taper.end == 1600
    # the changes after the taper starts branch from the run's own trunk
    assert plan.trunks.of("stability_factors", f"{base}-xplateau") == "stability-d32-s1-o2"
    assert plan.trunks.of("stability_factors", f"{base}-xno_aux") == "stability-d32-s1-o2"
    assert plan.trunks.of("stability_factors", f"{base}-xclip") is None
    assert owner([plan.stability, fam], f"{base}-xgelu") is fam
    assert owner([plan.stability, fam], base) is plan.stability
    assert parse_factor_run(f"{base}-xslow_taper") == (base, "slow_taper")


def test_an_unknown_factor_is_a_config_error():
    raw = config_files("config.yaml", "stability.yaml")
    raw["stability"]["factors"] = {"runs": ["baseline-d32-s0-o0-n2000"], "changes": ["warp"]}
    with pytest.raises(Exception, match="warp"):
        validate_pipeline_config(raw, SCHEMA)


def test_data_seed_changes_the_batches_not_the_init(shards_dir, tmp_path):
    a = train(tiny_run(shards_dir, train={"steps": 4}), tmp_path / "a")
    b = train(tiny_run(shards_dir, train={"steps": 4}, data_seed=7), tmp_path / "b")
    c = train(tiny_run(shards_dir, train={"steps": 4}, seed=7), tmp_path / "c")
    first = {k: read_records(tmp_path / k / "metrics.jsonl")[0]["loss"] for k in "abc"}
    assert first["a"] != first["b"]  # other batches from the same init
    assert a["val_loss"] != b["val_loss"] != c["val_loss"]
    # seed 0 with data seed 7 draws seed 7's batches: its step-1 batch meets another init
    assert first["b"] != first["c"]
    cfg_b = json.loads((tmp_path / "b" / "config.json").read_text())
    assert cfg_b["seed"] == 0 and cfg_b["data_seed"] == 7
    assert "data_seed" not in json.loads((tmp_path / "a" / "config.json").read_text())


# ---- the GELU MLP (factor gelu) -------------------------------------------------------------


def test_gelu_mlp_is_the_size_of_swiglu_and_folds_exactly():
    kw = dict(n_layer=2, n_head=2, n_embd=48, vocab_size=64, block_size=16, taper="all")
    torch.manual_seed(0)
    swiglu, gelu = GPT(GPTConfig(**kw)), GPT(GPTConfig(mlp="gelu", **kw))
    assert gelu.config.mlp_hidden == 4 * 48 and swiglu.config.mlp == "swiglu"
    assert gelu.blocks[0].mlp.w_gate is None and swiglu.blocks[0].mlp.w_gate is not None
    assert abs(gelu.num_params() - swiglu.num_params()) / swiglu.num_params() < 0.01
    set_gate(gelu, 0.0)
    idx = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        z, zf = gelu(idx), fold_model(gelu)(idx)
    assert (z - zf).abs().max() / z.abs().max() < 1e-5
    with pytest.raises(ValueError, match="mlp"):
        GPTConfig(mlp="relu", **kw)
    with pytest.raises(ExportError, match="gelu MLP"):
        hf_config_for(gelu.config)


def test_a_gelu_run_trains(shards_dir, tmp_path):
    cfg = tiny_run(shards_dir, variant="internal_aux", model={"mlp": "gelu"}, train={"steps": 6})
    result = train(cfg, tmp_path / "run")
    assert result["val_loss"] is not None and not result["diverged"]
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["model"]["mlp"] == "gelu"


def test_the_committed_stability_config_validates():
    raw = yaml.safe_load((ROOT / "config/stability.yaml").read_text())
    assert set(raw) == {"stability"}
    assert _plan().stability.section["steps"] == 2000


# ---- tapernorm replay ---------------------------------------------------------------------------


def test_replay_draws_the_recorded_batch_and_traces_every_block(shards_dir, tmp_path, monkeypatch):
    from tapernorm.cli import main
    from tapernorm.training.replay import replay_report, residual_trace, run_batch

    cfg = tiny_run(shards_dir, variant="all_aux", train={"steps": 12}, data_seed=3)
    train(cfg, tmp_path / "run")
    batch = run_batch(tmp_path / "run", 7)
    assert batch.data_seed == 3 and batch.x.shape == (cfg.train.batch_size, 32)
    # a recorded event's starts are checked against the draw
    records = read_records(tmp_path / "run" / "metrics.jsonl")
    event = {"step": 7, "blowup": {"kind": "loss_spike", "batch": {"starts": batch.starts}}}
    path = tmp_path / "run" / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*records, event]))
    assert run_batch(tmp_path / "run", 7).recorded["kind"] == "loss_spike"
    event["blowup"]["batch"]["starts"] = [[0] * cfg.train.batch_size]
    path.write_text("".join(json.dumps(r) + "\n" for r in [*records, event]))
    with pytest.raises(ValueError, match="not the one its blow-up event recorded"):
        run_batch(tmp_path / "run", 7)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match="not a step"):
        run_batch(tmp_path / "run", 13)

    from tapernorm.training.checkpoint import load_model

    model = load_model(tmp_path / "run")
    logits, trace = residual_trace(model, batch.x)
    assert len(trace) == 3 and torch.allclose(trace[-1], model.hidden(batch.x))
    report = replay_report(tmp_path / "run", 7, gates=[1.0, 0.0], dtypes=["float32", "float64"])
    rows = {(r["dtype"], r["gate"]): r for r in report["rows"]}
    assert set(rows) == {("float32", 1.0), ("float32", 0.0), ("float64", 1.0), ("float64", 0.0)}
    assert len(rows["float32", 0.0]["block_rms_max"]) == 3  # the embedding and 2 blocks
    a, b = rows["float32", 0.0]["loss"], rows["float64", 0.0]["loss"]
    assert abs(a - b) < 1e-4 * abs(b)
    assert rows["float32", 1.0]["loss"] != a  # the gate matters to a tapered model
    from tapernorm.data import TokenShards

    row = rows["float32", 0.0]
    train_tokens = TokenShards(str(shards_dir)).tokens("train")
    assert row["worst_token"] == int(batch.x[row["worst_sequence"], row["worst_position"]])
    assert row["worst_token_train_count"] == int((train_tokens == row["worst_token"]).sum())
    baseline = tmp_path / "baseline"
    train(tiny_run(shards_dir, train={"steps": 8}), baseline)
    plain = replay_report(baseline, 7, gates=[1.0, 0.0], dtypes=["float32"])
    assert [r["gate"] for r in plain["rows"]] == [None]  # no TaperNorm: no gate to set
    out = tmp_path / "replay.json"
    assert (
        main(["replay", str(tmp_path / "run"), "--step", "7", "--gate", "0", "--out", str(out)])
        == 0
    )
    assert json.loads(out.read_text())["rows"][0]["gate"] == 0.0
    assert (
        main(["replay", str(tmp_path / "run"), "--step", "7", "--gate", "0", "--out", str(out)])
        == 0
    )
    with pytest.raises(SystemExit):
        main(["replay", str(tmp_path / "run"), "--step", "7", "--gate", "2"])


def test_the_replay_and_factor_blocks_quote_the_committed_files(shards_dir, tmp_path):
    """docs/stability.md's blocks: a row per model and gate of each committed replay (the last
    block's RMS in fp32 and fp64, the worst sequence's loss, the token), and the factor table."""
    from tapernorm.artifact.doc_blocks import render_document
    from tapernorm.cli import main

    cfg = tiny_run(shards_dir, variant="all_aux", train={"steps": 12}, data_seed=3)
    train(cfg, tmp_path / "run")
    study = tmp_path / "results/cpu/stability"
    (study / "replay").mkdir(parents=True)
    out = study / "replay/run-step7.json"
    args = ["replay", str(tmp_path / "run"), "--step", "7", "--gate", "1", "0", "--out", str(out)]
    assert main([*args, "--dtype", "float32", "float64"]) == 0
    report = json.loads(out.read_text())
    (study / "factors.md").write_text(
        "# One change at a time\n\nwords\n\n| Change | a |\n|---|---|\n"
    )
    doc = tmp_path / "docs/stability.md"
    doc.parent.mkdir()
    doc.write_text(
        "<!-- generated by `tapernorm docs`: stability-replay from results/cpu/stability -->\n"
        "<!-- end generated -->\n"
        "<!-- generated by `tapernorm docs`: stability-factors from results/cpu/stability -->\n"
        "<!-- end generated -->\n"
    )
    text = render_document(doc, tmp_path)
    rows = [ln for ln in text.splitlines() if ln.startswith("| [run](")]
    assert len(rows) == 2  # gates 1 and 0
    last = report["rows"][-1]  # float64, gate 0
    assert "| 0 | " in rows[1] and f"{last['worst_token']} (" in rows[1]
    assert f"| {last['block_rms_max'][-1]:.3g} |" in rows[1]
    assert "](../results/cpu/stability/replay/run-step7.json)" in rows[0]
    assert f"| 7 (data seed {report['data_seed']}) | 1 |" in rows[0]
    assert "| Change | a |" in text and "words" not in text
