"""The scaling study (config/scaling.yaml, docs/scaling.md): do the verdicts hold as training grows?

Two families. `scaling`: pre-training runs <variant>-d<width>-s<seed>-n<steps> of each grid cell
(widths, training lengths, variants) on paired seeds 0 .. seeds-1, each the pretrain family's recipe
at its own length (same peak LR; warmup and taper the same fractions of the steps) with
`eval_points` periodic validations. `scaling_ablation`: the scale-anchor ablation, settings as they
are, on seeds it was not tuned on. A cell that is exactly a pretrain run (same config but the name)
is that run: the study records it instead of training it twice.

Every run's records (config.json, eval.json, metrics.jsonl) are copied to results/cpu/scaling/runs/
<family>/<run>/, which is committed: the summary and figures are built from those records alone.
"""

from __future__ import annotations

from pathlib import Path

from ..config import resolve_run_config
from ..config.run import RunConfig
from ..runtime import bookkeeping
from ..training.identity import config_identity
from .family import Family
from .names import (
    parse_run_name,
    parse_scaling_run,
    parse_stability_run,
    run_dir,
    run_name,
    scaling_run_name,
)
from .training import TrainingFamily

SCALING_DIR = "results/cpu/scaling"  # the study's committed records, summary and figures
RECORD_FILES = ("config.json", "eval.json", "metrics.jsonl")  # what the study keeps of a run


def record_dir(family: str, run: str) -> str:
    """Where the study keeps the records of run `run` of `family`."""
    return f"{SCALING_DIR}/runs/{family}/{run}"


def record_inputs(
    scaling: ScalingFamily, sfamily: Family, run: str, root: Path = Path(".")
) -> list[str]:
    """What the record job of `run` of `sfamily` (scaling or scaling_ablation) copies: the files of
    the run that trains it (record_source), or nothing when the record is complete and its
    config.json is the run config the workflow builds now. Such a record (as committed) is the
    study's data, not a product to keep up to date: otherwise, in a tree where the default has
    run, the newer data and the default's own eager runs of the 600-step cells would make Snakemake
    retrain the whole study (75 runs). A record with a file missing, or made under another config,
    is made again from its run (trained if need be)."""
    family, source = record_source(scaling, sfamily, run)
    return record_or_run(root / record_dir(sfamily.name, run), family, source)


def record_or_run(record: Path, family: Family, run: str) -> list[str]:
    """The files of run `run` of `family` that a record job copies into `record`, or nothing when
    `record` is complete and its config.json is the run config the workflow builds now (see
    record_inputs). A damaged config.json of a complete record is a BookkeepingError naming it
    (bookkeeping.STUDY_RECORD), never copied over: the record is the study's data."""
    files = [f"{run_dir(family.name, run)}/{name}" for name in RECORD_FILES]
    if not all((record / name).is_file() for name in RECORD_FILES):
        return files
    path = record / "config.json"
    recorded = bookkeeping.read(bookkeeping.STUDY_RECORD, path)
    data_dir = recorded["data"].get("dir")
    if not bookkeeping.STR.test(data_dir):
        raise bookkeeping.fail(bookkeeping.STUDY_RECORD, path, "has no valid data.dir")
    built = family.run_config(run, data_dir)
    return [] if same_run_config(recorded, built) else files


def record_source(scaling: ScalingFamily, sfamily: Family, run: str) -> tuple[Family, str]:
    """(family, run) whose run directory the record of `run` of `sfamily` copies."""
    if sfamily.name == scaling.name:
        name, run = scaling.source(run)
        return (scaling.pretrain if name == scaling.pretrain.name else scaling), run
    return sfamily, run


# what a run's config.json holds beside its run config: the model's own config (model.GPTConfig),
# its size and the step of its weights (and in meta, the provenance of the run)
RECORD_ONLY = ("model", "n_params", "weights_step", "diverged_step")


def same_run_config(recorded: dict, built: RunConfig) -> bool:
    """Whether a run's config.json was written for run config `built`: the same run by its identity
    (training.identity.config_identity, as a resume compares them), and a model whose config holds
    every model key `built` sets (config.json keeps the model's resolved config, not the section)."""
    cfg = built.to_dict()
    section = {k: v for k, v in cfg.pop("model").items() if v is not None}
    mine = {k: v for k, v in recorded.items() if k not in RECORD_ONLY}
    mine["meta"] = {k: v for k, v in recorded.get("meta", {}).items() if k != "provenance"}
    model = recorded.get("model")
    same_model = isinstance(model, dict) and all(model.get(k) == v for k, v in section.items())
    return same_model and config_identity(mine) == config_identity(cfg)


class ScalingFamily(Family):
    """Pre-training runs of `scaling.grid` at each training length, paired seeds."""

    name = "scaling"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.pretrain = TrainingFamily(config, "pretrain")
        self.section = config[self.name]

    def cells(self) -> list[tuple[str, int, int]]:
        """(variant, width, steps) of every cell, in grid order."""
        return [
            (v, cell["width"], steps)
            for cell in self.section["grid"]
            for steps in cell["steps"]
            for v in cell["variants"]
        ]

    def runs(self) -> list[str]:
        seeds = range(self.section["seeds"])
        return [scaling_run_name(v, w, s, n) for v, w, n in self.cells() for s in seeds]

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        if run not in self.runs():
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        variant, width, seed, steps = parse_scaling_run(run)
        eval_every = max(1, steps // self.section["eval_points"])
        spec = self.pretrain.spec(
            variant,
            width,
            seed,
            data_dir,
            steps=steps,
            name=f"{self.name}/{run}",
            log={"eval_every": eval_every},
        )
        return resolve_run_config(spec)

    def source(self, run: str) -> tuple[str, str]:
        """(family, run) that trains `run`: the pretrain run with the very same config where the
        pretrain family has one, else this family's own."""
        variant, width, seed, _ = parse_scaling_run(run)
        twin = run_name(variant, width, seed)
        if twin in self.pretrain.runs():
            mine = self.run_config(run, "")
            theirs = self.pretrain.run_config(twin, "")
            if mine.replace(name="") == theirs.replace(name=""):
                return self.pretrain.name, twin
        return self.name, run

    def trained_runs(self) -> list[str]:
        """The runs this family trains itself (those no pretrain run stands for)."""
        return [r for r in self.runs() if self.source(r)[0] == self.name]

    @property
    def device(self) -> str:
        return self.pretrain.device

    def gpus(self, run: str) -> int:
        return self.pretrain.gpus(run)


class ScalingAblationFamily(Family):
    """The scale-anchor ablation's runs again, on `scaling.ablation_seeds` (not the seeds it was
    tuned on), settings exactly the ablation section's."""

    name = "scaling_ablation"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.ablation = TrainingFamily(config, "ablation")
        self.seeds = list(config["scaling"]["ablation_seeds"])

    def runs(self) -> list[str]:
        fam = self.ablation.section
        return [
            run_name(v, w, s) for v in fam["variants"] for w in fam["widths"] for s in self.seeds
        ]

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        if run not in self.runs():
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        variant, width, seed = parse_run_name(run)
        name = f"{self.name}/{run}"
        return resolve_run_config(self.ablation.spec(variant, width, seed, data_dir, name=name))

    @property
    def device(self) -> str:
        return self.ablation.device

    def gpus(self, run: str) -> int:
        return self.ablation.gpus(run)


STABILITY_RUNS = "results/cpu/stability/runs"  # the committed stability study's records


def extra_records(scaling: ScalingFamily, root: Path = Path(".")) -> list[str]:
    """The record files of the committed stability study's runs that share a scaling cell's recipe:
    a variant, width and length of the grid, with init seed = data seed (the scaling study's seed
    of that number, trained eager); those the checkout has (the summary takes them beside the
    cell's own: `tapernorm scaling summary --extra-records`)."""
    cells = set(scaling.cells())
    out = []
    for d in sorted((root / STABILITY_RUNS).glob("*")):
        try:
            variant, width, seed, data_seed, steps = parse_stability_run(d.name)
        except ValueError:
            continue  # (a factor run: one setting changed)
        complete = all((d / name).is_file() for name in RECORD_FILES)
        if seed == data_seed and (variant, width, steps) in cells and complete:
            out += [f"{STABILITY_RUNS}/{d.name}/{name}" for name in RECORD_FILES]
    return out


def study_records(scaling: ScalingFamily, ablation: ScalingAblationFamily | None) -> list[str]:
    """Every record file of the study, in family and run order."""
    runs = [(scaling.name, r) for r in scaling.runs()]
    runs += [(ablation.name, r) for r in ablation.runs()] if ablation else []
    return [f"{record_dir(f, r)}/{name}" for f, r in runs for name in RECORD_FILES]
