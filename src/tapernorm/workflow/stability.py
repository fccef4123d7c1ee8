"""The stability study (config/stability.yaml, docs/stability.md): how often does each arm blow up
late in the taper, do blow-ups follow the batches or the weights, and which one change removes them?

Two families. `stability`: runs <variant>-d<width>-s<init>-o<data>-n<steps> of every variant and
width, at one length, on every init seed crossed with every data-order seed (the run config's
`seed` draws the init, its `data_seed` the batches' order), each the pretrain family's recipe at
that length (same peak LR; warmup and taper the same fractions of the steps). A run whose two
seeds are equal is the scaling study's cell of that seed, trained eager. The runs are eager, so
the variants of one (width, init, data) branch from one trunk (workflow/trunks.py).
`stability_factors`: runs <stability run>-x<factor>, the stability run with one change (FACTORS),
on the runs the config names (those that blew up): one factor at a time, same init and data.

Every run's records (config.json, eval.json, metrics.jsonl) are copied to
results/cpu/stability/runs/<run>/ (committed); the summary is built from those records alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..config import resolve_run_config
from ..config.run import RunConfig
from .family import Family
from .names import factor_run_name, parse_factor_run, parse_stability_run, stability_run_name
from .scaling import RECORD_FILES, record_or_run
from .training import TrainingFamily

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


class StabilityFamily(Family):
    """Pre-training runs of `stability`: variants x widths x init seeds x data seeds."""

    name = "stability"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.pretrain = TrainingFamily(config, "pretrain")
        self.section = config["stability"]

    def cells(self) -> list[tuple[str, int, int, int]]:
        """(variant, width, init seed, data seed) of every run, in that order of nesting."""
        sec = self.section
        return [
            (v, w, i, j)
            for w in sec["widths"]
            for i in sec["init_seeds"]
            for j in sec["data_seeds"]
            for v in sec["variants"]
        ]

    def runs(self) -> list[str]:
        steps = self.section["steps"]
        return [stability_run_name(v, w, i, j, steps) for v, w, i, j in self.cells()]

    def spec(self, run: str, data_dir: str, name: str | None = None) -> dict:
        """The run config (to resolve) of stability run `run`, named `name` (default its own)."""
        variant, width, seed, data_seed, steps = parse_stability_run(run)
        eval_every = max(1, steps // self.section["eval_points"])
        spec = self.pretrain.spec(
            variant,
            width,
            seed,
            data_dir,
            steps=steps,
            name=name or f"{self.name}/{run}",
            log={"eval_every": eval_every},
            train={"compile": False},  # eager: exact trunks, and every run the same kernels
        )
        if data_seed != seed:
            spec["data_seed"] = data_seed
        return spec

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        if run not in self.runs():
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        return resolve_run_config(self.spec(run, data_dir))

    def record_dir(self, run: str) -> str:
        """Where the study keeps the records of run `run`."""
        return f"{STABILITY_DIR}/runs/{run}"

    def records(self) -> list[str]:
        """Every record file of the family, in run order."""
        return [f"{self.record_dir(r)}/{name}" for r in self.runs() for name in RECORD_FILES]

    def record_inputs(self, run: str, root: Path = Path(".")) -> list[str]:
        """What the record job of `run` copies: the run's files, or nothing for a complete record
        of the config given (scaling.record_or_run)."""
        return record_or_run(root / self.record_dir(run), self, run)

    @property
    def device(self) -> str:
        return self.pretrain.device

    def gpus(self, run: str) -> int:
        return self.pretrain.gpus(run)


class StabilityFactorFamily(StabilityFamily):
    """`stability.factors`: each named stability run again with each factor of `changes`."""

    name = "stability_factors"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.base = StabilityFamily(config)
        self.factors = self.section["factors"]

    def runs(self) -> list[str]:
        out = []
        for base in self.factors["runs"]:
            for factor in self.factors["changes"]:
                try:
                    FACTORS[factor][1](self.base.spec(base, ""))
                except ValueError:
                    continue  # (a factor the run does not have: no_aux of a baseline)
                out.append(factor_run_name(base, factor))
        return out

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        if run not in self.runs():
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        base, factor = parse_factor_run(run)
        spec = self.base.spec(base, data_dir, name=f"{self.name}/{run}")
        FACTORS[factor][1](spec)
        return resolve_run_config(spec)


def owner(families: list[StabilityFamily | None], run: str) -> StabilityFamily:
    """The family of the study (stability or stability_factors) that trains `run`."""
    for family in families:
        if family is not None and run in family.runs():
            return family
    raise ValueError(f"run {run} is not part of the stability study in this config")
