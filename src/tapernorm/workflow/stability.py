"""The stability study (config/stability.yaml, docs/stability.md): how often does each arm blow up
late in the taper, do blow-ups follow the batches or the weights, and which one change removes them?

Two families, a function each. `stability`: runs <variant>-d<width>-s<init>-o<data>-n<steps> of
every variant and width, at one length, on every init seed crossed with every data-order seed (the
run config's `seed` draws the init, its `data_seed` the batches' order), each the pretrain family's
recipe at that length (same peak LR; warmup and taper the same fractions of the steps). A run whose
two seeds are equal is the scaling study's cell of that seed, trained eager. The runs are eager, so
the variants of one (width, init, data) branch from one trunk (workflow/trunks.py).
`stability_factors`: runs <stability run>-x<factor>, the stability run with one change (FACTORS),
on the runs the config names (those that blew up): one factor at a time, same init and data.

Every run's records (config.json, eval.json, metrics.jsonl) are copied to
results/cpu/stability/runs/<run>/ (committed); the summary is built from those records alone.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from .family import Family, device_of
from .names import factor_run_name, parse_factor_run, parse_stability_run, stability_run_name
from .scaling import RECORD_FILES, record_or_run
from .training import spec

STABILITY, STABILITY_FACTORS = "stability", "stability_factors"
STABILITY_DIR = "results/cpu/stability"  # the study's committed records and summary


def _no_aux(spec: dict) -> None:
    unanchored = {"internal_aux": "internal", "all_aux": "all"}
    if spec["variant"] not in unanchored:
        raise ValueError(f"factor no_aux: variant {spec['variant']} has no scale loss to turn off")
    spec["variant"] = unanchored[spec["variant"]]


def _plateau(spec: dict) -> None:
    spec["taper"]["end"] = round(0.8 * spec["train"]["steps"])


def _slow_taper(spec: dict) -> None:
    spec["taper"]["start"] = spec["train"]["warmup_steps"]


def _clip(spec: dict) -> None:
    spec["train"]["grad_clip"] = 0.25


def _gelu(spec: dict) -> None:
    spec["model"]["mlp"] = "gelu"


def _ema(spec: dict) -> None:
    spec["taper"]["ema_mu"] = 0.01


# One change each to a stability run's spec (a factor of the mechanism table): what it is, and how
FACTORS: dict[str, tuple[str, Callable[[dict], None]]] = {
    "no_aux": ("the scale loss off (Internal-Taper / All-Taper)", _no_aux),
    "plateau": ("the taper ends at 80% of the steps: a g = 0 plateau of 20%", _plateau),
    "slow_taper": (
        "the taper from the end of the warmup (the paper's start): 1.36x slower",
        _slow_taper,
    ),
    "clip": ("gradient clip 0.25 instead of 1.0", _clip),
    "gelu": ("a GELU MLP (hidden 4d, the same size) instead of SwiGLU", _gelu),
    "ema": ("calibration EMA rate mu 0.01 (the paper's) instead of 0.1", _ema),
}


def cells(section: dict) -> list[tuple[str, int, int, int]]:
    """(variant, width, init seed, data seed) of every run, in that order of nesting."""
    return [
        (v, w, i, j)
        for w in section["widths"]
        for i in section["init_seeds"]
        for j in section["data_seeds"]
        for v in section["variants"]
    ]


def run_spec(config: dict, run: str, data_dir: str, name: str | None = None) -> dict:
    """The run config (to resolve) of stability run `run`, named `name` (default its own)."""
    variant, width, seed, data_seed, steps = parse_stability_run(run)
    out = spec(
        config,
        "pretrain",
        variant,
        width,
        seed,
        data_dir,
        steps=steps,
        name=name or f"{STABILITY}/{run}",
        log={"eval_every": max(1, steps // config[STABILITY]["eval_points"])},
        train={"compile": False},  # eager: exact trunks, and every run the same kernels
    )
    if data_seed != seed:
        out["data_seed"] = data_seed
    return out


def factor_spec(config: dict, run: str, data_dir: str) -> dict:
    """The run config (to resolve) of factor run `run`: its stability run with the factor's one
    change."""
    base, factor = parse_factor_run(run)
    out = run_spec(config, base, data_dir, name=f"{STABILITY_FACTORS}/{run}")
    FACTORS[factor][1](out)
    return out


def stability(config: dict) -> Family | None:
    """Pre-training runs of `stability`: variants x widths x init seeds x data seeds."""
    sec = config.get(STABILITY)
    if not sec:
        return None
    runs = [stability_run_name(v, w, i, j, sec["steps"]) for v, w, i, j in cells(sec)]
    recipes = {run: partial(run_spec, config, run) for run in runs}
    return Family(STABILITY, sec, recipes, **device_of(config, "pretrain"))


def stability_factors(config: dict) -> Family | None:
    """`stability.factors`: each named stability run again with each factor of `changes` that it
    has (no_aux of a baseline is none)."""
    factors = (config.get(STABILITY) or {}).get("factors")
    if not factors:
        return None
    recipes = {}
    for base in factors["runs"]:
        for factor in factors["changes"]:
            try:
                FACTORS[factor][1](run_spec(config, base, ""))
            except ValueError:
                continue  # (a factor the run does not have: no_aux of a baseline)
            run = factor_run_name(base, factor)
            recipes[run] = partial(factor_spec, config, run)
    return Family(STABILITY_FACTORS, config[STABILITY], recipes, **device_of(config, "pretrain"))


def record_dir(run: str) -> str:
    """Where the study keeps the records of run `run`."""
    return f"{STABILITY_DIR}/runs/{run}"


def records(family: Family) -> list[str]:
    """Every record file of a family of the study, in run order."""
    return [f"{record_dir(r)}/{name}" for r in family.runs() for name in RECORD_FILES]


def record_inputs(family: Family, run: str, root: Path = Path(".")) -> list[str]:
    """What the record job of `run` copies: the run's files, or nothing for a complete record
    of the config given (scaling.record_or_run)."""
    return record_or_run(root / record_dir(run), family, run)


def owner(families: list[Family | None], run: str) -> Family:
    """The family of the study (stability or stability_factors) that trains `run`."""
    for family in families:
        if family is not None and run in family.recipes:
            return family
    raise ValueError(f"run {run} is not part of the stability study in this config")
