"""The workflow config's checks: its files as Snakemake read them, the schema (filling defaults),
and what a schema can't say (every run of every family resolves to a valid run config)."""

from __future__ import annotations

import copy
from os import PathLike

from ..config import ConfigError
from . import finetune as wft
from .family import Family
from .plan import Plan
from .training import steps_for, validate_lr_grid

TRAINING_SECTIONS = ("pretrain", "ablation")


def check_config_files(paths: list[str], schema_path: str) -> None:
    """The workflow's config files (workflow.configfiles) as Snakemake read them: YAML syntax and
    duplicate keys (naming the line), then top-level keys that the schema knows, naming the file.
    A file with none of them is most likely a target written after --configfile, which reads every
    path after it as a config file: the error says so."""
    import yaml

    from ..config import check_yaml_files, config_text, yaml_load

    check_yaml_files(paths)
    with open(schema_path) as f:
        allowed = list(yaml.safe_load(f)["properties"])
    for path in paths:
        data = yaml_load(config_text(path), f"config file {path}")
        keys = [str(k) for k in data] if isinstance(data, dict) else []
        unknown = [k for k in keys if k not in allowed]
        if data is not None and (not keys or len(unknown) == len(keys)):
            raise ConfigError(
                f"config file {path}: not a workflow config (top-level keys {keys[:4]}, none of "
                f"{', '.join(allowed)}); a target written after --configfile is read as one more "
                "config file: put targets first (snakemake --cores all TARGET --configfile FILE)"
            )
        if unknown:
            raise ConfigError(
                f"config file {path}: config key {unknown[0]}: unknown key; allowed: "
                f"{', '.join(allowed)}"
            )


def merged_configs(base: dict, over: dict) -> dict:
    """Config `over` merged into `base` key by key, as Snakemake merges its --configfile files."""
    out = dict(base)
    for key, value in over.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged_configs(out[key], value) if nested else value
    return out


def read_config_files(paths: list[str | PathLike], schema_path: str | PathLike) -> dict:
    """Workflow config files checked as the Snakefile checks them (check_config_files), merged in
    order as `snakemake --configfile A B` merges them; not yet validated against the schema."""
    from ..config import config_text, yaml_load

    check_config_files([str(p) for p in paths], str(schema_path))
    config: dict = {}
    for path in paths:
        config = merged_configs(config, yaml_load(config_text(path), f"config file {path}") or {})
    return config


def validate_pipeline_config(config: dict, schema_path: str) -> dict:
    """The completed config of validated_plan (ConfigError naming the key)."""
    return validated_plan(config, schema_path).config


def validated_plan(config: dict, schema_path: str) -> Plan:
    """Validate the workflow config against its schema (filling defaults) and check what a schema
    can't: every run of every family resolves to a valid run config, every job's GPUs follow from
    its stated device. Raises ConfigError naming the key; returns the Plan of the completed config,
    its training runs' configs resolved (Plan.run_configs: each once, by the checks)."""
    import yaml

    from ..config import validate

    with open(schema_path) as f:
        schema = yaml.safe_load(f)
    config = copy.deepcopy(config)
    for family in TRAINING_SECTIONS:  # YAML gives int keys for {64: 500000}; JSON wants str
        fam = config.get(family)
        for key in ("steps", "gpu_step_ms"):
            by_width = fam.get(key) if isinstance(fam, dict) else None
            if isinstance(by_width, dict):
                config[family][key] = {str(k): v for k, v in by_width.items()}
    config = validate(config, schema)
    plan = Plan(config)
    for fam in (plan.pretrain, plan.ablation):
        if fam is not None:
            _validate_training(fam)
    if config.get("anchor_sweep") is not None:
        variants = plan.ablation.section["variants"] if plan.ablation else []
        lacking = [v for v in ("baseline", "all_aux") if v not in variants]
        if lacking:
            raise ConfigError(
                "config key anchor_sweep: it retrains the ablation's all_aux run and compares "
                f"with its baseline, but ablation.variants lacks {lacking}"
            )
    if plan.lr_grid is not None:
        validate_lr_grid(config)
    if plan.scaling is not None:
        _validate_scaling(plan)
    missing = set(config["fold"]["variants"]) - set(config["pretrain"]["variants"])
    if missing:
        raise ConfigError(f"config key fold.variants: {sorted(missing)} not in pretrain.variants")
    if "dyt" in config["fold"]["variants"]:
        raise ConfigError("config key fold.variants: dyt does not fold (tanh is not linear)")
    if plan.finetune is not None:
        wft.validate_finetune(plan.finetune)
    if plan.finetune_base is not None:
        wft.validate_finetune_base(plan.finetune_base)
    if plan.bench is not None:
        plan.bench.validate()
    _ = plan.run_configs  # each training run resolved, once (ConfigError: its family and run)
    return plan


def _validate_training(fam: Family) -> None:
    sec, name = fam.section, fam.name
    for width in sec["widths"]:
        if width % sec["model"]["n_head"]:
            raise ConfigError(
                f"config key {name}.widths: {width} is not divisible by "
                f"{name}.model.n_head={sec['model']['n_head']}"
            )
        try:
            steps_for(sec, width)
        except ValueError as e:
            raise ConfigError(f"config key {name}.steps: {e}") from e
    if isinstance(sec["seeds"], dict):
        if "default" not in sec["seeds"]:
            raise ConfigError(f"config key {name}.seeds: a mapping needs a 'default' count")
        unknown = sorted(set(sec["seeds"]) - {"default", *sec["variants"]})
        if unknown:
            raise ConfigError(f"config key {name}.seeds: {unknown} not in {name}.variants")
    if sec["figure_width"] is not None and sec["figure_width"] not in sec["widths"]:
        raise ConfigError(f"config key {name}.figure_width: not one of {name}.widths")


def _validate_scaling(plan: Plan) -> None:
    sec, n_head = plan.scaling.section, plan.pretrain.section["model"]["n_head"]
    for cell in sec["grid"]:
        if cell["width"] % n_head:
            raise ConfigError(
                f"config key scaling.grid: width {cell['width']} is not divisible by "
                f"pretrain.model.n_head={n_head}"
            )
    if sec["ablation_seeds"] and plan.ablation is None:
        raise ConfigError(
            "config key scaling.ablation_seeds: the config has no ablation section to rerun"
        )
