"""The trunk (training/trunk.py): every variant branched from the shared steps before the taper
ends exactly where it ends trained from step 0."""

import hashlib
import json

import pytest
from conftest import tiny_run

from tapernorm.training.checkpoint import CheckpointError
from tapernorm.training.loop import train, train_trunk
from tapernorm.training.trunk import shares_trunk, trunk_config
from tapernorm.variants import VARIANTS

TAPER = {"start": 12, "end": 30, "ema_mu": 0.1}
LOG = {"every": 5, "eval_every": 10, "ckpt_every": 20, "eval_windows": 16}


def variant_run(shards_dir, variant: str, seed: int = 0, **sections):
    spec = VARIANTS[variant]
    anchor = {"enabled": spec["anchor"], **sections.pop("anchor", {})}
    taper = {**TAPER, **sections.pop("taper", {})}
    return tiny_run(
        shards_dir,
        name=f"pretrain/{variant}-s{seed}",
        seed=seed,
        variant=variant,
        model={"taper": spec["taper"], **sections.pop("model", {})},
        anchor=anchor,
        taper=taper,
        log=LOG,
        **sections,
    )


def with_trunk(cfg, trunk_dir):
    return cfg.replace(init=cfg.init.__class__(source=None, trunk=str(trunk_dir)))


def outputs(run_dir):
    """What a run computed: its weights' bytes, eval.json, and the record without the timings."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        r.pop("tokens_per_s", None)
    weights = hashlib.sha256((run_dir / "model.safetensors").read_bytes()).hexdigest()
    return weights, json.loads((run_dir / "eval.json").read_text()), records


@pytest.fixture(scope="module")
def trunk_dir(shards_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("trunk") / "trunk"
    result = train_trunk(variant_run(shards_dir, "baseline"), out)
    assert result["step"] == TAPER["start"]
    return out


@pytest.mark.parametrize(
    "variant, sections",
    [
        ("baseline", {}),
        ("internal", {}),
        ("internal_aux", {}),
        ("final", {}),
        ("all", {}),
        ("all_aux", {}),
        # the anchor sweep's runs: another weight and form of the scale loss, same trunk
        ("all_aux", {"anchor": {"lam": 10.0, "form": "relative"}}),
        # the ablation's window: the taper ends before the last step
        ("internal_aux", {"taper": {"end": 20}}),
    ],
)
def test_branch_is_the_run_from_step_zero(
    shards_dir, trunk_dir, tmp_path, caplog, variant, sections
):
    cfg = variant_run(shards_dir, variant, **sections)
    assert shares_trunk(cfg, trunk_config(variant_run(shards_dir, "baseline"), "x"))
    train(cfg, tmp_path / "scratch")
    with caplog.at_level("INFO", logger="tapernorm"):
        train(with_trunk(cfg, trunk_dir), tmp_path / "branched")
    assert f"branched from its trunk {trunk_dir} at step {TAPER['start']}" in caplog.text
    assert outputs(tmp_path / "branched") == outputs(tmp_path / "scratch")
    record = json.loads((tmp_path / "branched" / "config.json").read_text())
    assert record["init"]["trunk"] == str(trunk_dir)


def test_trunk_configs(shards_dir):
    base = trunk_config(variant_run(shards_dir, "baseline"))
    assert base.model.taper == "all" and base.anchor.enabled
    assert base.log.ckpt_every == TAPER["start"]
    # what the variants differ in is not part of it; what their steps compute is
    assert trunk_config(variant_run(shards_dir, "all_aux", anchor={"lam": 3.0})) == base
    assert trunk_config(variant_run(shards_dir, "internal", seed=1)) != base
    assert trunk_config(variant_run(shards_dir, "internal", train={"lr": 1e-3})) != base
    assert trunk_config(variant_run(shards_dir, "internal", taper={"start": 10})) != base
    # no exact trunk: LayerNorm's TaperNorm adds its bias outside the kernel; compiled steps; DyT
    assert trunk_config(variant_run(shards_dir, "internal", model={"style": "gpt2"})) is None
    assert trunk_config(variant_run(shards_dir, "internal", train={"compile": True})) is None
    assert trunk_config(variant_run(shards_dir, "dyt", model={"norm": "dyt"})) is None
    assert trunk_config(variant_run(shards_dir, "baseline", taper={"start": 0})) is None


def test_another_runs_trunk_is_refused(shards_dir, trunk_dir, tmp_path):
    cfg = variant_run(shards_dir, "internal_aux", seed=1)
    with pytest.raises(CheckpointError, match="trunk of another run"):
        train(with_trunk(cfg, trunk_dir), tmp_path / "run")
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        train(with_trunk(cfg, tmp_path / "none"), tmp_path / "run2")


def test_a_trunk_there_is_kept(shards_dir, trunk_dir):
    state = trunk_dir / "ckpt" / "state.safetensors"
    before = state.stat().st_mtime_ns
    assert train_trunk(variant_run(shards_dir, "final"), trunk_dir)["step"] == TAPER["start"]
    assert state.stat().st_mtime_ns == before


def test_no_trunk_is_an_error(shards_dir, tmp_path):
    with pytest.raises(ValueError, match="has no trunk"):
        train_trunk(variant_run(shards_dir, "internal", model={"style": "gpt2"}), tmp_path / "t")


def test_a_trunk_whose_files_were_deleted_is_trained_again(shards_dir, tmp_path):
    """What `snakemake -f` leaves of a trunk (its declared outputs deleted, ckpt/ empty): trained
    again, to the same state."""
    cfg = variant_run(shards_dir, "internal")
    out = tmp_path / "trunk"
    train_trunk(cfg, out)
    state = (out / "ckpt" / "state.safetensors").read_bytes()
    for name in ("state.json", "state.safetensors", "metrics.jsonl"):
        (out / "ckpt" / name).unlink()
    (out / "trunk.json").unlink()
    assert train_trunk(cfg, out)["step"] == TAPER["start"]
    assert (out / "ckpt" / "state.safetensors").read_bytes() == state
    assert json.loads((out / "trunk.json").read_text())["name"] == "pretrain/trunk-s0"
