"""What the Snakemake workflow needs from a pipeline config: run names, run configs, targets.

The workflow's config (config/*.yaml, validated by workflow/schemas/config.schema.yaml) describes
families of runs; each run is `results/runs/<family>/<variant>-d<width>-s<seed>/`. This module turns
one run name into the run config that `tapernorm train` takes, so the rules stay pure wiring.
"""

from __future__ import annotations

import copy
import re
import shlex

from .config import resolve_run_config

RUN_NAME = re.compile(r"^(?P<variant>[a-z_]+)-d(?P<width>\d+)-s(?P<seed>\d+)$")


def run_name(variant: str, width: int, seed: int) -> str:
    return f"{variant}-d{width}-s{seed}"


def parse_run_name(name: str) -> tuple[str, int, int]:
    m = RUN_NAME.match(name)
    if m is None:
        raise ValueError(f"run name {name!r} is not <variant>-d<width>-s<seed>")
    return m["variant"], int(m["width"]), int(m["seed"])


def family_runs(config: dict, family: str, width: int | None = None) -> list[str]:
    """Run names of a family (all its widths, or one), in variant-width-seed order."""
    fam = config[family]
    widths = fam["widths"] if width is None else [width]
    return [run_name(v, w, s) for v in fam["variants"] for w in widths for s in range(fam["seeds"])]


def figure_width(config: dict, family: str = "pretrain") -> int:
    """The width whose runs figures 2-4 show: `figure_width`, else the largest."""
    fam = config[family]
    return fam.get("figure_width") or max(fam["widths"])


def steps_for(fam: dict, width: int) -> int:
    steps = fam["steps"]
    if isinstance(steps, int):
        return steps
    if width not in steps and str(width) not in steps:
        raise ValueError(f"no steps given for width {width} (steps: {steps})")
    return int(steps.get(width, steps.get(str(width))))


def run_config(config: dict, family: str, name: str, data_dir: str) -> dict:
    """The resolved `tapernorm train` config of run `name` in `family` of the pipeline config."""
    variant, width, seed = parse_run_name(name)
    fam = config[family]
    if variant not in fam["variants"] or width not in fam["widths"] or seed >= fam["seeds"]:
        raise ValueError(f"run {name} is not part of the {family} family in this config")
    steps = steps_for(fam, width)
    train = copy.deepcopy(fam["train"])
    warmup_frac = train.pop("warmup_frac")
    train.update(steps=steps, warmup_steps=max(1, round(warmup_frac * steps)))
    cfg = {
        "name": f"{family}/{name}",
        "seed": seed,
        "variant": variant,
        "data": {"dir": data_dir, "train_tokens": fam.get("train_tokens")},
        "model": {**fam["model"], "n_embd": width},
        "train": train,
        "taper": copy.deepcopy(fam["taper"]),
        "anchor": {"lam": fam["anchor"]["lam"]},
        "log": copy.deepcopy(fam["log"]),
    }
    return resolve_run_config(cfg)


def validate_pipeline_config(config: dict, schema_path: str) -> dict:
    """Validate the workflow config against its schema (filling defaults) and check what a schema
    can't: every run of every family resolves to a valid run config. Raises ConfigError naming the
    key; returns the completed config."""
    import yaml

    from .config import ConfigError, validate

    with open(schema_path) as f:
        schema = yaml.safe_load(f)
    config = copy.deepcopy(config)
    for family in ("pretrain", "ablation"):  # YAML gives int keys for {64: 500000}; JSON wants str
        steps = (config.get(family) or {}).get("steps")
        if isinstance(steps, dict):
            config[family]["steps"] = {str(k): v for k, v in steps.items()}
    config = validate(config, schema)
    for family in ("pretrain", "ablation"):
        fam = config.get(family)
        if fam is None:
            continue
        for width in fam["widths"]:
            if width % fam["model"]["n_head"]:
                raise ConfigError(
                    f"config key {family}.widths: {width} is not divisible by "
                    f"{family}.model.n_head={fam['model']['n_head']}"
                )
            try:
                steps_for(fam, width)
            except ValueError as e:
                raise ConfigError(f"config key {family}.steps: {e}") from e
        if fam["figure_width"] is not None and fam["figure_width"] not in fam["widths"]:
            raise ConfigError(f"config key {family}.figure_width: not one of {family}.widths")
        for name in family_runs(config, family):
            try:
                run_config(config, family, name, "data")
            except ConfigError as e:
                raise ConfigError(f"{family} run {name}: {e}") from e
    missing = set(config["fold"]["variants"]) - set(config["pretrain"]["variants"])
    if missing:
        raise ConfigError(f"config key fold.variants: {sorted(missing)} not in pretrain.variants")
    return config


def wants_gpu(config: dict, family: str) -> bool:
    """Whether this family's training jobs run on a GPU (and so hold the `gpu` resource)."""
    device = config[family]["train"]["device"]
    if device != "auto":
        return device == "cuda"
    import torch

    return torch.cuda.is_available()


def prepare_data_args(data: dict) -> str:
    """The `tapernorm prepare-data` arguments for the config's `data` section."""
    args = [f"--corpus {data['corpus']}", f"--tokenizer {data['tokenizer']}"]
    if data["tokenizer"] == "sentencepiece":
        args.append(f"--vocab-size {data['vocab_size']}")
        if not data["byte_fallback"]:
            args.append("--no-byte-fallback")
    for key in ("local_path", "max_docs", "tokenizer_chars"):
        if data[key] is not None:
            args.append(f"--{key.replace('_', '-')} {shlex.quote(str(data[key]))}")
    return " ".join(args)
