"""Run configs: defaults, variants and errors that name the key."""

import pytest

from tapernorm.config import ConfigError, load_run_config, resolve_run_config


def base(**over):
    cfg = {"data": {"dir": "d"}, "train": {"steps": 100, "warmup_steps": 5}}
    for k, v in over.items():
        cfg[k] = v
    return cfg


def test_defaults_are_filled():
    cfg = resolve_run_config(base())
    assert cfg.model.style == "llama" and cfg.train.betas == (0.9, 0.95)
    assert cfg.taper.start == 5 and cfg.taper.end == 100
    assert cfg.anchor.enabled is False and cfg.seed == 0


def test_variant_sets_taper_and_anchor():
    cfg = resolve_run_config(base(variant="all_aux"))
    assert cfg.model.taper == "all" and cfg.anchor.enabled is True


@pytest.mark.parametrize(
    "cfg,key",
    [
        (base(variant="half_taper"), "variant"),
        (base(taper={"start": 60, "end": 50}), "taper.start"),
        (base(train={"steps": -3}), "train.steps"),
        (base(model={"n_embd": 100, "n_head": 16}), "model.n_embd"),
        (base(model={"styel": "llama"}), "model"),
        (base(taper={"end": 500}), "taper.end"),
        (base(variant="internal", model={"taper": "all"}), "model.taper"),
        ({"train": {"steps": 10}}, "<top level>"),
        (base(train={"steps": 10, "warmup_steps": 0}, variant="internal"), "taper.start"),
    ],
)
def test_invalid_configs_name_the_key(cfg, key):
    with pytest.raises(ConfigError, match=f"config key {key}"):
        resolve_run_config(cfg)


@pytest.mark.parametrize(
    "key,names",
    [("norm_mode", "model.norm says what the norms are"), ("norm_kind", "model.style sets it")],
)
def test_a_retired_norm_key_names_what_replaced_it(key, names):
    with pytest.raises(ConfigError, match=f"config key model.{key}: no longer a key; {names}"):
        resolve_run_config(base(model={key: "taper" if key == "norm_mode" else "rms"}))


def test_yaml_file_and_overrides(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("data: {dir: x}\ntrain: {steps: 10, warmup_steps: 2}\n")
    cfg = load_run_config(p, ["train.steps=20", "model.taper=internal", "anchor.lam=0.5"])
    assert cfg.train.steps == 20 and cfg.model.taper == "internal"
    assert cfg.anchor.lam == 0.5 and cfg.taper.end == 20
    with pytest.raises(ConfigError, match="does not exist"):
        load_run_config(tmp_path / "nope.yaml")


def test_scientific_notation_without_dot_is_a_float(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("data: {dir: x}\ntrain: {steps: 10, lr: 3e-4}\n")
    cfg = load_run_config(p, ["train.min_lr=1e-5"])
    assert cfg.train.lr == 3e-4 and cfg.train.min_lr == 1e-5
