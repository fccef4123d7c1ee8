"""The stability study (config/stability.yaml, docs/stability.md): how often does each arm blow up
late in the taper, and do blow-ups follow the batches or the weights?

One family, `stability`: runs <variant>-d<width>-s<init>-o<data>-n<steps> of every variant and
width, at one length, on every init seed crossed with every data-order seed (the run config's
`seed` draws the init, its `data_seed` the batches' order), each the pretrain family's recipe at
that length (same peak LR; warmup and taper the same fractions of the steps). A run whose two
seeds are equal is the scaling study's cell of that seed, trained eager. The runs are eager, so
the variants of one (width, init, data) branch from one trunk (workflow/trunks.py).

Every run's records (config.json, eval.json, metrics.jsonl) are copied to
results/cpu/stability/runs/<run>/ (committed); the summary is built from those records alone.
"""

from __future__ import annotations

from pathlib import Path

from ..config import resolve_run_config
from ..run_config import RunConfig
from .family import Family
from .names import parse_stability_run, stability_run_name
from .scaling import RECORD_FILES, record_or_run
from .training import TrainingFamily

STABILITY_DIR = "results/cpu/stability"  # the study's committed records and summary


class StabilityFamily(Family):
    """Pre-training runs of `stability`: variants x widths x init seeds x data seeds."""

    name = "stability"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.pretrain = TrainingFamily(config, "pretrain")
        self.section = config[self.name]

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

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        if run not in self.runs():
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        variant, width, seed, data_seed, steps = parse_stability_run(run)
        eval_every = max(1, steps // self.section["eval_points"])
        spec = self.pretrain.spec(
            variant,
            width,
            seed,
            data_dir,
            steps=steps,
            name=f"{self.name}/{run}",
            log={"eval_every": eval_every},
            train={"compile": False},  # eager: exact trunks, and every run the same kernels
        )
        if data_seed != seed:
            spec["data_seed"] = data_seed
        return resolve_run_config(spec)

    def record_dir(self, run: str) -> str:
        """Where the study keeps the records of run `run`."""
        return f"{STABILITY_DIR}/runs/{run}"

    def records(self) -> list[str]:
        """Every record file of the study, in run order."""
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
