"""The training families: pre-training and the ablation (<variant>-d<width>-s<seed> runs of one
config section each), the scale loss's dose-response (anchor_sweep: the ablation's All-Taper (+aux)
run at other scale-loss weights) and the learning-rate grid (lr_grid: pre-training runs at other
peak LRs)."""

from __future__ import annotations

import copy
import math

from ..config import ConfigError, resolve_run_config
from ..config.run import RunConfig
from .devices import job_gpus
from .family import Family
from .names import SWEEP_RUN_NAME, lr_grid_run_name, parse_run_name, run_name, sweep_run_name


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


class TrainingFamily(Family):
    """Runs <variant>-d<width>-s<seed> of config section `name` (pretrain, ablation)."""

    def __init__(self, config: dict, name: str) -> None:
        super().__init__(config)
        self.name = name
        self.section = config[name]

    def runs(self, width: int | None = None) -> list[str]:
        """Run names (all widths, or one), in variant-width-seed order."""
        fam = self.section
        widths = fam["widths"] if width is None else [width]
        return [
            run_name(v, w, s)
            for v in fam["variants"]
            for w in widths
            for s in range(seeds_of(fam, v))
        ]

    def seeds(self) -> dict[str, int]:
        return {v: seeds_of(self.section, v) for v in self.section["variants"]}

    @property
    def figure_width(self) -> int:
        """The width whose runs the figures show: `figure_width`, else the largest."""
        return self.section.get("figure_width") or max(self.section["widths"])

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        variant, width, seed = parse_run_name(run)
        fam = self.section
        if (
            variant not in fam["variants"]
            or width not in fam["widths"]
            or seed >= seeds_of(fam, variant)
        ):
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        return self.build(variant, width, seed, data_dir)

    def build(self, variant: str, width: int, seed: int, data_dir: str, **kw) -> RunConfig:
        """The RunConfig of spec(variant, width, seed, data_dir, **kw)."""
        return resolve_run_config(self.spec(variant, width, seed, data_dir, **kw))

    def spec(
        self,
        variant: str,
        width: int,
        seed: int,
        data_dir: str,
        lr: float | None = None,
        steps: int | None = None,
        name: str | None = None,
        **sections: dict,
    ) -> dict:
        """The run config (to resolve) of `variant` at `width` and `seed` by this section's recipe
        (peak LR `lr` instead of train.lr, `steps` instead of the section's, where given; warmup
        and taper stay the same fractions of the steps), named `name` (default <name>/<run>);
        `sections` update the keys of their sections (log={"eval_every": 10})."""
        fam = self.section
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
        spec = {
            "name": name or f"{self.name}/{run_name(variant, width, seed)}",
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
            spec[section].update(keys)
        return spec

    @property
    def device(self) -> str:
        return self.section["train"]["device"]

    def gpus(self, run: str) -> int:
        return job_gpus(self.device, None, f"{self.name}.train.device")

    def runtime(self, run: str, default: int = 30, cfg: RunConfig | None = None) -> int:
        """1.5x the run's steps at the section's `gpu_step_ms` for its width, plus 15 minutes of
        set-up and evaluation; `default` without an estimate (`cfg`: the run's, if resolved)."""
        return step_minutes(self.section, cfg or self.run_config(run, ""), default)


def step_minutes(section: dict, cfg: RunConfig, default: int = 30) -> int:
    estimates, width = section.get("gpu_step_ms") or {}, cfg.model.n_embd
    step_ms = estimates.get(width, estimates.get(str(width)))
    if step_ms is None:
        return default
    return math.ceil(1.5 * cfg.train.steps * step_ms / 60_000) + 15


class SweepFamily(Family):
    """The scale loss's dose-response (table_anchor, fig7): the ablation's All-Taper (+aux) run
    retrained at each (form, lambda) of `anchor_sweep`, but the one the ablation already is."""

    name = "anchor_sweep"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.ablation = TrainingFamily(config, "ablation")
        self.section = config[self.name]

    @property
    def base_run(self) -> str:
        """The ablation's run that every sweep point retrains at another lambda."""
        return run_name("all_aux", self.ablation.figure_width, 0)

    def runs(self) -> list[str]:
        anchor = self.ablation.section.get("anchor", {})
        own = (anchor.get("form", "eq5"), anchor.get("lam"))
        return [
            sweep_run_name(form, lam)
            for form in ("eq5", "relative")
            for lam in self.section[form]
            if (form, lam) != own
        ]

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        m = SWEEP_RUN_NAME.match(run)
        if m is None or run not in self.runs():
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        variant, width, seed = parse_run_name(self.base_run)
        spec = self.ablation.spec(
            variant,
            width,
            seed,
            data_dir,
            name=f"{self.name}/{run}",
            anchor={"form": m["form"], "lam": float(m["lam"])},
        )
        return resolve_run_config(spec)

    @property
    def device(self) -> str:
        return self.ablation.device

    def gpus(self, run: str) -> int:
        return self.ablation.gpus(self.base_run)

    def runtime(self, run: str, default: int = 30, cfg: RunConfig | None = None) -> int:
        return step_minutes(self.ablation.section, cfg or self.run_config(run, ""), default)


class LrGridFamily(Family):
    """The learning-rate grid (docs/norm-free.md): pre-training runs of `lr_grid.variants` (their
    matched baselines added) at each peak LR of `lr_grid.lrs`, seeds 0 .. lr_grid.seeds-1, at
    `lr_grid.width` (default: the pre-training figure width); everything but the LR is the
    pre-training family's recipe."""

    name = "lr_grid"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.pretrain = TrainingFamily(config, "pretrain")
        self.section = config[self.name]

    @property
    def width(self) -> int:
        return self.section.get("width") or self.pretrain.figure_width

    def arms(self) -> list[str]:
        """The grid's variants, each compared variant's matched baseline first."""
        from ..variants import baseline_of

        variants = self.section["variants"]
        return list(dict.fromkeys([*(b for v in variants if (b := baseline_of(v))), *variants]))

    def cells(self) -> list[tuple[str, int, float]]:
        """(variant, seed, lr) of every run, in arm-lr-seed order."""
        lrs = sorted(set(self.section["lrs"]))
        return [(v, s, lr) for v in self.arms() for lr in lrs for s in range(self.section["seeds"])]

    def runs(self) -> list[str]:
        return list(self._cells_by_run())

    def _cells_by_run(self) -> dict[str, tuple[str, int, float]]:
        return {lr_grid_run_name(v, self.width, s, lr): (v, s, lr) for v, s, lr in self.cells()}

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        cell = self._cells_by_run().get(run)
        if cell is None:
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        variant, seed, lr = cell
        name = f"{self.name}/{run}"
        return resolve_run_config(
            self.pretrain.spec(variant, self.width, seed, data_dir, lr, name=name)
        )

    @property
    def device(self) -> str:
        return self.pretrain.device

    def gpus(self, run: str) -> int:
        return self.pretrain.gpus(run)

    def runtime(self, run: str, default: int = 30, cfg: RunConfig | None = None) -> int:
        return step_minutes(self.pretrain.section, cfg or self.run_config(run, ""), default)

    def validate(self) -> None:
        width = self.width
        if width % self.pretrain.section["model"]["n_head"]:
            raise ConfigError(
                f"config key lr_grid.width: {width} is not divisible by pretrain.model.n_head"
            )
        try:
            steps_for(self.pretrain.section, width)
        except ValueError as e:
            raise ConfigError(f"config key lr_grid.width: {e}") from e


def family_seeds(config: dict) -> dict[str, dict[str, int]]:
    """{family: {variant: seeds}} of the training families of this config (the manifest's)."""
    return {f: TrainingFamily(config, f).seeds() for f in ("pretrain", "ablation") if config.get(f)}
