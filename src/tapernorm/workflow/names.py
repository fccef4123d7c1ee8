"""Run names, run directories (and the model files in one) and job records of the workflow, and
the Snakemake wildcard constraints made from the run-name patterns. Every run of every family lives
in `results/runs/<family>/<name>/` (run_dir)."""

from __future__ import annotations

import re

from ..training.identity import MODEL_FILES

RUNS_ROOT = "results/runs"
# Snakemake's job records (benchmark:) of the long jobs, <rule>/<wildcards>.tsv; table job_times
JOB_RECORDS = "results/job_records"


def wildcard_pattern(name: re.Pattern, **fixed: str) -> str:
    """A run-name regex as a Snakemake wildcard constraint: without its anchors, each named group
    non-capturing, or the literal of `fixed` (`protocol="all_taperln"`: only that protocol's runs)."""

    def group(m: re.Match) -> str:
        return re.escape(fixed[m[1]]) if m[1] in fixed else f"(?:{m[2]})"

    pattern = re.sub(
        r"\(\?P<(\w+)>([^()]*)\)", group, name.pattern.removeprefix("^").removesuffix("$")
    )
    if "(?P<" in pattern:
        raise ValueError(f"{name.pattern}: a named group holds a group")
    return pattern


def run_dir(family: str, name: str) -> str:
    """The directory of run `name` of `family` (what `tapernorm train --out` writes)."""
    return f"{RUNS_ROOT}/{family}/{name}"


def model_files(run: str, prefix: str = "") -> dict[str, str]:
    """{name: path} of what loading the model of run directory `run` reads (config, weights), each
    named `prefix` + the file's stem."""
    return {f"{prefix}{f.split('.')[0]}": f"{run}/{f}" for f in MODEL_FILES}


def job_record(rule: str, *wildcards: str, root: str | None = JOB_RECORDS) -> str:
    """The job record (benchmark: file) of a job of `rule`: <root>/<rule>/<wildcards...>.tsv, or
    <root>/<rule>.tsv for a rule without wildcards; relative to JOB_RECORDS with root=None."""
    name = "/".join((rule, *wildcards)) + ".tsv"
    return name if root is None else f"{root}/{name}"


# ---- pre-training and ablation runs: <variant>-d<width>-s<seed> ----------------------------------

RUN_NAME = re.compile(r"^(?P<variant>[a-z_]+)-d(?P<width>\d+)-s(?P<seed>\d+)$")


def run_name(variant: str, width: int, seed: int) -> str:
    return f"{variant}-d{width}-s{seed}"


def parse_run_name(name: str) -> tuple[str, int, int]:
    m = RUN_NAME.match(name)
    if m is None:
        raise ValueError(f"run name {name!r} is not <variant>-d<width>-s<seed>")
    return m["variant"], int(m["width"]), int(m["seed"])


# ---- the scale loss's dose-response: <form>-lam<lambda> ------------------------------------------

SWEEP_RUN_NAME = re.compile(r"^(?P<form>eq5|relative)-lam(?P<lam>[0-9][0-9.e+-]*)$")


def sweep_run_name(form: str, lam: float) -> str:
    return f"{form}-lam{lam:g}"


# ---- the learning-rate grid: <variant>-d<width>-s<seed>-lr<lr> -----------------------------------

LR_GRID_RUN_NAME = re.compile(
    r"^(?P<variant>[a-z_]+)-d(?P<width>\d+)-s(?P<seed>\d+)-lr(?P<lr>[0-9][0-9.e+-]*)$"
)


def lr_grid_run_name(variant: str, width: int, seed: int, lr: float) -> str:
    return f"{run_name(variant, width, seed)}-lr{lr:g}"


# ---- the scaling study: <variant>-d<width>-s<seed>-n<steps> --------------------------------------

SCALING_RUN_NAME = re.compile(
    r"^(?P<variant>[a-z_]+)-d(?P<width>\d+)-s(?P<seed>\d+)-n(?P<steps>\d+)$"
)


def scaling_run_name(variant: str, width: int, seed: int, steps: int) -> str:
    return f"{run_name(variant, width, seed)}-n{steps}"


def parse_scaling_run(name: str) -> tuple[str, int, int, int]:
    """("baseline", 64, 0, 6000) from "baseline-d64-s0-n6000"."""
    m = SCALING_RUN_NAME.match(name)
    if m is None:
        raise ValueError(f"run name {name!r} is not <variant>-d<width>-s<seed>-n<steps>")
    return m["variant"], int(m["width"]), int(m["seed"]), int(m["steps"])


# ---- the stability study: <variant>-d<width>-s<init seed>-o<data seed>-n<steps> ------------------

STABILITY_RUN_NAME = re.compile(
    r"^(?P<variant>[a-z_]+)-d(?P<width>\d+)-s(?P<seed>\d+)-o(?P<data>\d+)-n(?P<steps>\d+)$"
)


def stability_run_name(variant: str, width: int, seed: int, data_seed: int, steps: int) -> str:
    return f"{run_name(variant, width, seed)}-o{data_seed}-n{steps}"


def parse_stability_run(name: str) -> tuple[str, int, int, int, int]:
    """("internal_aux", 32, 1, 2, 2000) from "internal_aux-d32-s1-o2-n2000"."""
    m = STABILITY_RUN_NAME.match(name)
    if m is None:
        raise ValueError(
            f"run name {name!r} is not <variant>-d<width>-s<seed>-o<data seed>-n<steps>"
        )
    return m["variant"], int(m["width"]), int(m["seed"]), int(m["data"]), int(m["steps"])


# one-factor-at-a-time reruns of a stability run: <stability run>-x<factor>
FACTOR_RUN_NAME = re.compile(
    r"^(?P<variant>[a-z_]+)-d(?P<width>\d+)-s(?P<seed>\d+)-o(?P<data>\d+)-n(?P<steps>\d+)"
    r"-x(?P<factor>[a-z_]+)$"
)


def factor_run_name(base: str, factor: str) -> str:
    return f"{base}-x{factor}"


def parse_factor_run(name: str) -> tuple[str, str]:
    """("internal_aux-d32-s1-o2-n2000", "gelu") from "internal_aux-d32-s1-o2-n2000-xgelu"."""
    m = FACTOR_RUN_NAME.match(name)
    if m is None:
        raise ValueError(f"run name {name!r} is not <stability run>-x<factor>")
    return name[: m.start("factor") - 2], m["factor"]


# ---- GPT-2 fine-tuning runs: <protocol>-<model> ---------------------------------------------------

FINETUNE_MODEL_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")  # the schema's finetune.models name
FINETUNE_RUN_NAME = re.compile(
    rf"^(?P<protocol>[a-z_]+)-(?P<model>{wildcard_pattern(FINETUNE_MODEL_NAME)})$"
)


def finetune_run_name(protocol: str, model: str) -> str:
    return f"{protocol}-{model}"


def parse_finetune_run(name: str) -> tuple[str, str]:
    """("all_taperln", "gpt2-medium") from "all_taperln-gpt2-medium"."""
    m = FINETUNE_RUN_NAME.match(name)
    if m is None:
        raise ValueError(f"fine-tuning run name {name!r} is not <protocol>-<model>")
    return m["protocol"], m["model"]


# ---- Snakemake wildcard constraints ---------------------------------------------------------------

RUN_WILDCARD = "|".join(
    wildcard_pattern(p)
    for p in (
        RUN_NAME,
        SWEEP_RUN_NAME,
        LR_GRID_RUN_NAME,
        SCALING_RUN_NAME,
        STABILITY_RUN_NAME,
        FACTOR_RUN_NAME,
    )
)  # {run}
FINETUNE_RUN_WILDCARD = wildcard_pattern(FINETUNE_RUN_NAME)  # {ftrun}
FOLDED_FINETUNE_RUN_WILDCARD = wildcard_pattern(FINETUNE_RUN_NAME, protocol="all_taperln")
FINETUNE_MODEL_WILDCARD = wildcard_pattern(FINETUNE_MODEL_NAME)  # {ftmodel}
