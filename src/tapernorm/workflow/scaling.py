"""The scaling study (config/scaling.yaml, docs/scaling.md): do the verdicts hold as training grows?

Two families, a function each. `scaling`: pre-training runs <variant>-d<width>-s<seed>-n<steps>
of each grid cell (widths, training lengths, variants) on paired seeds 0 .. seeds-1, each the
pretrain family's recipe at its own length (same peak LR; warmup and taper the same fractions of the
steps) with `eval_points` periodic validations. `scaling_ablation`: the scale-anchor ablation,
settings as they are, on seeds it was not tuned on. A cell that is exactly a pretrain run (same
config but the name) is that run: the study records it instead of training it twice.

Every run's records (config.json, eval.json, metrics.jsonl) are copied to results/cpu/scaling/runs/
<family>/<run>/, which is committed: the summary and figures are built from those records alone.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..config.run import RunConfig
from ..runtime import bookkeeping
from ..training.identity import config_identity
from .family import Family, device_of
from .names import (
    parse_scaling_run,
    parse_stability_run,
    run_dir,
    run_name,
    scaling_run_name,
)
from .training import spec

SCALING, SCALING_ABLATION = "scaling", "scaling_ablation"
SCALING_DIR = "results/cpu/scaling"  # the study's committed records, summary and figures
RECORD_FILES = ("config.json", "eval.json", "metrics.jsonl")  # what the study keeps of a run


def record_dir(family: str, run: str) -> str:
    """Where the study keeps the records of run `run` of `family`."""
    return f"{SCALING_DIR}/runs/{family}/{run}"


def record_inputs(
    scaling: Family, pretrain: Family, sfamily: Family, run: str, root: Path = Path(".")
) -> list[str]:
    """What the record job of `run` of `sfamily` (scaling or scaling_ablation) copies: the files of
    the run that trains it (record_source), or nothing when the record is complete and its
    config.json is the run config the workflow builds now. Such a record (as committed) is the
    study's data, not a product to keep up to date: otherwise, in a tree where the default has
    run, the newer data and the default's own eager runs of the 600-step cells would make Snakemake
    retrain the whole study (75 runs). A record with a file missing, or made under another config,
    is made again from its run (trained if need be)."""
    family, source = record_source(scaling, pretrain, sfamily, run)
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


def record_source(
    scaling: Family, pretrain: Family, sfamily: Family, run: str
) -> tuple[Family, str]:
    """(family, run) whose run directory the record of `run` of `sfamily` copies."""
    if sfamily.name == scaling.name:
        name, run = source(scaling, pretrain, run)
        return (pretrain if name == pretrain.name else scaling), run
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


def cells(section: dict) -> list[tuple[str, int, int]]:
    """(variant, width, steps) of every cell of `scaling.grid`, in grid order."""
    return [
        (v, cell["width"], steps)
        for cell in section["grid"]
        for steps in cell["steps"]
        for v in cell["variants"]
    ]


def scaling(config: dict) -> Family | None:
    """Pre-training runs of `scaling.grid` at each training length, paired seeds."""
    sec = config.get(SCALING)
    if not sec:
        return None
    recipes = {}
    for variant, width, steps in cells(sec):
        for seed in range(sec["seeds"]):
            run = scaling_run_name(variant, width, seed, steps)
            log = {"eval_every": max(1, steps // sec["eval_points"])}
            recipes[run] = partial(
                spec, config, "pretrain", variant, width, seed, steps=steps,
                name=f"{SCALING}/{run}", log=log,
            )  # fmt: skip
    return Family(SCALING, sec, recipes, **device_of(config, "pretrain"))


def source(scaling: Family, pretrain: Family, run: str) -> tuple[str, str]:
    """(family, run) that trains scaling run `run`: the pretrain run with the very same config
    where the pretrain family has one, else the scaling family's own."""
    variant, width, seed, _ = parse_scaling_run(run)
    twin = run_name(variant, width, seed)
    if twin in pretrain.recipes:
        mine = scaling.run_config(run, "")
        theirs = pretrain.run_config(twin, "")
        if mine.replace(name="") == theirs.replace(name=""):
            return pretrain.name, twin
    return scaling.name, run


def scaling_ablation(config: dict) -> Family | None:
    """The scale-anchor ablation's runs again, on `scaling.ablation_seeds` (not the seeds it was
    tuned on), settings exactly the ablation section's."""
    abl = config.get("ablation")
    if not (config.get(SCALING) and abl and config[SCALING]["ablation_seeds"]):
        return None
    recipes = {}
    for variant in abl["variants"]:
        for width in abl["widths"]:
            for seed in config[SCALING]["ablation_seeds"]:
                run = run_name(variant, width, seed)
                name = f"{SCALING_ABLATION}/{run}"
                recipes[run] = partial(spec, config, "ablation", variant, width, seed, name=name)
    return Family(SCALING_ABLATION, abl, recipes, **device_of(config, "ablation"))


STABILITY_RUNS = "results/cpu/stability/runs"  # the committed stability study's records


def extra_records(scaling: Family, root: Path = Path(".")) -> list[str]:
    """The record files of the committed stability study's runs that share a scaling cell's recipe:
    a variant, width and length of the grid, with init seed = data seed (the scaling study's seed
    of that number, trained eager); those the checkout has (the summary takes them beside the
    cell's own: `tapernorm scaling summary --extra-records`)."""
    grid = set(cells(scaling.section))
    out = []
    for d in sorted((root / STABILITY_RUNS).glob("*")):
        try:
            variant, width, seed, data_seed, steps = parse_stability_run(d.name)
        except ValueError:
            continue  # (a factor run: one setting changed)
        complete = all((d / name).is_file() for name in RECORD_FILES)
        if seed == data_seed and (variant, width, steps) in grid and complete:
            out += [f"{STABILITY_RUNS}/{d.name}/{name}" for name in RECORD_FILES]
    return out


def study_records(scaling: Family, ablation: Family | None) -> list[str]:
    """Every record file of the study, in family and run order."""
    runs = [(scaling.name, r) for r in scaling.runs()]
    runs += [(ablation.name, r) for r in ablation.runs()] if ablation else []
    return [f"{record_dir(f, r)}/{name}" for f, r in runs for name in RECORD_FILES]
