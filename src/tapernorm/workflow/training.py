"""The training families: pre-training and the ablation (<variant>-d<width>-s<seed> runs of one
config section each), the scale loss's dose-response (anchor_sweep: the ablation's All-Taper (+aux)
run at other scale-loss weights) and the learning-rate grid (lr_grid: pre-training runs at other
peak LRs). Each is a function of the config returning its Family (None where the config leaves it
out); `spec` is the recipe they share: a section's run config of a variant, width and seed."""

from __future__ import annotations

import copy
from functools import partial

from ..config import ConfigError
from ..variants import baseline_of
from .family import Family, device_of
from .names import SWEEP_RUN_NAME, lr_grid_run_name, parse_run_name, run_name, sweep_run_name

SWEEP, LR_GRID = "anchor_sweep", "lr_grid"


def seeds_of(fam: dict, variant: str) -> int:
    """How many seeds (0 .. n-1) a family trains `variant` with: `seeds`, one number or a mapping
    with a `default` and per-variant counts."""
    seeds = fam["seeds"]
    return seeds if isinstance(seeds, int) else int(seeds.get(variant, seeds["default"]))


def steps_for(fam: dict, width: int) -> int:
    steps = fam["steps"]
    if isinstance(steps, int):
        return steps
    if width not in steps and str(width) not in steps:
        raise ValueError(f"no steps given for width {width} (steps: {steps})")
    return int(steps.get(width, steps.get(str(width))))


def figure_width(section: dict) -> int:
    """The width whose runs a section's figures show: `figure_width`, else the largest."""
    return section.get("figure_width") or max(section["widths"])


def spec(
    config: dict,
    family: str,
    variant: str,
    width: int,
    seed: int,
    data_dir: str,
    lr: float | None = None,
    steps: int | None = None,
    name: str | None = None,
    **sections: dict,
) -> dict:
    """The run config (to resolve) of `variant` at `width` and `seed` by section `family`'s recipe
    (peak LR `lr` instead of train.lr, `steps` instead of the section's, where given; warmup and
    taper stay the same fractions of the steps), named `name` (default <family>/<run>);
    `sections` update the keys of their sections (log={"eval_every": 10})."""
    fam = config[family]
    steps = steps_for(fam, width) if steps is None else steps
    train = copy.deepcopy(fam["train"])
    if lr is not None:
        train["lr"] = lr
    warmup_frac = train.pop("warmup_frac")
    train.update(steps=steps, warmup_steps=max(1, round(warmup_frac * steps)))
    taper = copy.deepcopy(fam["taper"])
    start_frac, end_frac = taper.pop("start_frac"), taper.pop("end_frac")
    # null: the run config's own default, the end of the warmup (resolve_run_config)
    taper.update(
        start=None if start_frac is None else max(1, round(start_frac * steps)),
        end=round(end_frac * steps),
    )
    out = {
        "name": name or f"{family}/{run_name(variant, width, seed)}",
        "seed": seed,
        "variant": variant,
        "data": {"dir": data_dir, "train_tokens": fam.get("train_tokens")},
        "model": {**fam["model"], "n_embd": width},
        "train": train,
        "taper": taper,
        "anchor": copy.deepcopy(fam["anchor"]),
        "log": copy.deepcopy(fam["log"]),
    }
    for section, keys in sections.items():
        out[section].update(keys)
    return out


def training(config: dict, family: str) -> Family:
    """Runs <variant>-d<width>-s<seed> of config section `family` (pretrain, ablation), in
    variant-width-seed order."""
    sec = config[family]
    recipes = {
        run_name(v, w, s): partial(spec, config, family, v, w, s)
        for v in sec["variants"]
        for w in sec["widths"]
        for s in range(seeds_of(sec, v))
    }
    return Family(family, sec, recipes, **device_of(config, family), timed_by=sec)


def pretrain(config: dict) -> Family:
    return training(config, "pretrain")


def ablation(config: dict) -> Family | None:
    return training(config, "ablation") if config.get("ablation") else None


def runs_at(family: Family, width: int) -> list[str]:
    """The runs of a pretrain or ablation family at one width, in run order."""
    return [r for r in family.runs() if parse_run_name(r)[1] == width]


def family_seeds(config: dict) -> dict[str, dict[str, int]]:
    """{family: {variant: seeds}} of the training families of this config (the manifest's)."""
    return {
        f: {v: seeds_of(config[f], v) for v in config[f]["variants"]}
        for f in ("pretrain", "ablation")
        if config.get(f)
    }


def sweep_base_run(config: dict) -> str:
    """The ablation's run that every point of the anchor sweep retrains at another lambda."""
    return run_name("all_aux", figure_width(config["ablation"]), 0)


def sweep(config: dict) -> Family | None:
    """The scale loss's dose-response (table_anchor, fig7): the ablation's All-Taper (+aux) run
    retrained at each (form, lambda) of `anchor_sweep`, but the one the ablation already is."""
    if not (config.get("ablation") and config.get(SWEEP)):
        return None
    abl = config["ablation"]
    anchor = abl.get("anchor", {})
    own = (anchor.get("form", "eq5"), anchor.get("lam"))
    runs = [
        sweep_run_name(form, lam)
        for form in ("eq5", "relative")
        for lam in config[SWEEP][form]
        if (form, lam) != own
    ]
    variant, width, seed = parse_run_name(sweep_base_run(config))
    recipes = {}
    for run in runs:
        m = SWEEP_RUN_NAME.match(run)
        anchored = {"form": m["form"], "lam": float(m["lam"])}
        recipes[run] = partial(
            spec, config, "ablation", variant, width, seed, name=f"{SWEEP}/{run}", anchor=anchored
        )
    return Family(SWEEP, config[SWEEP], recipes, **device_of(config, "ablation"), timed_by=abl)


def lr_grid_width(config: dict) -> int:
    return config[LR_GRID].get("width") or figure_width(config["pretrain"])


def lr_grid_arms(section: dict) -> list[str]:
    """The grid's variants, each compared variant's matched baseline first."""
    variants = section["variants"]
    return list(dict.fromkeys([*(b for v in variants if (b := baseline_of(v))), *variants]))


def lr_grid_cells(section: dict) -> list[tuple[str, int, float]]:
    """(variant, seed, lr) of every run, in arm-lr-seed order."""
    lrs = sorted(set(section["lrs"]))
    return [
        (v, s, lr) for v in lr_grid_arms(section) for lr in lrs for s in range(section["seeds"])
    ]


def lr_grid(config: dict) -> Family | None:
    """The learning-rate grid (docs/norm-free.md): pre-training runs of `lr_grid.variants` (their
    matched baselines added) at each peak LR of `lr_grid.lrs`, seeds 0 .. lr_grid.seeds-1, at
    `lr_grid.width` (default: the pre-training figure width); everything but the LR is the
    pre-training family's recipe."""
    if not config.get(LR_GRID):
        return None
    width, pre = lr_grid_width(config), config["pretrain"]
    recipes = {}
    for variant, seed, lr in lr_grid_cells(config[LR_GRID]):
        run = lr_grid_run_name(variant, width, seed, lr)
        name = f"{LR_GRID}/{run}"
        recipes[run] = partial(spec, config, "pretrain", variant, width, seed, lr=lr, name=name)
    return Family(LR_GRID, config[LR_GRID], recipes, **device_of(config, "pretrain"), timed_by=pre)


def validate_lr_grid(config: dict) -> None:
    width, pre = lr_grid_width(config), config["pretrain"]
    if width % pre["model"]["n_head"]:
        raise ConfigError(
            f"config key lr_grid.width: {width} is not divisible by pretrain.model.n_head"
        )
    try:
        steps_for(pre, width)
    except ValueError as e:
        raise ConfigError(f"config key lr_grid.width: {e}") from e
