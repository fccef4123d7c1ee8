"""The files the rules name besides a run's own (workflow.names): the data sets' (what `tapernorm
prepare-data` and `prepare-eval` write, the rehearsal's stand-ins), a list of files of each run
directory, a table's or figure's outputs, and the committed results that the claims read where the
checkout has them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from ..runtime.output_set import MARKER_SUFFIX
from .bench import newest_gpu_check

PRETRAIN_DATA = "data/pretrain"  # the pre-training corpus' shards (rule prepare_data)
FINETUNE_DATA = "data/finetune"  # the GPT-2 fine-tuning family's (GPT-2 BPE; prepare_finetune_data)
EVAL_DATA = "data/eval"  # the evaluation sets, one directory each (rule prepare_eval)
# the committed LR grid (docs/norm-free.md): the claims use it where its scale is the runs'
LR_GRID = "results/cpu/lr_grid/lr_grid.json"
# the committed scaling study (docs/scaling.md): the claims quote each claim as training grows
SCALING_SUMMARY = "results/cpu/scaling/summary.csv"
# the committed stability study (config/stability.yaml): the claims' stability row
STABILITY_SUMMARY = "results/cpu/stability/summary.csv"
# the committed first-GPU checks (benchmarks/README.md): claim 7 quotes the newest
GPU_CHECKS = "results/gpu"
# the committed reference runs (docs/reproducibility.md): the speed rule pools their benchmarks
REFERENCE_RUNS = "results/reference"


def data_files(root: str, sentencepiece: bool) -> dict[str, str]:
    """What `tapernorm prepare-data` writes to `root` that its readers open: the shards, their meta
    and (SentencePiece) the tokenizer model."""
    files = {f: f"{root}/{f}.bin" for f in ("train", "val")} | {"meta": f"{root}/meta.json"}
    if sentencepiece:
        files["tokenizer"] = f"{root}/tokenizer.model"
    return files


FINETUNE_DATA_FILES = data_files(FINETUNE_DATA, sentencepiece=False)


def pretrain_data_files(config: dict) -> dict[str, str]:
    """data_files of the pre-training corpus, whose tokenizer the config's `data:` section names."""
    return data_files(PRETRAIN_DATA, config["data"]["tokenizer"] == "sentencepiece")


def finetune_data_config(config: dict) -> dict:
    """The settings (--config-json) of the fine-tuning corpus' `tapernorm prepare-data`: the
    config's `finetune.data` section, tokenized with GPT-2's BPE."""
    return {**config["finetune"]["data"], "tokenizer": "gpt2"}


def eval_set_files(eval_set: str) -> dict[str, str]:
    """What `tapernorm prepare-eval` writes for evaluation set `eval_set`."""
    root = f"{EVAL_DATA}/{eval_set}"
    return {"meta": f"{root}/meta.json", "rows": f"{root}/rows.bin"}


def rehearsal_inputs(config: dict) -> list[str]:
    """What rule rehearsal_inputs writes (the offline stand-ins of the external inputs, which the
    data and fine-tuning rules wait for); nothing for a config that does not rehearse."""
    rehearsal = config["rehearsal"]
    return [f"{rehearsal['inputs']}/standins.json"] if rehearsal else []


def run_files(run_dirs: Sequence[str], names: Sequence[str]) -> list[str]:
    """The files `names` of each of `run_dirs`, run by run."""
    return [f"{d}/{f}" for d in run_dirs for f in names]


def figure_files(name: str) -> dict[str, str]:
    """{extension: path} of the files a figure command writes (figures/<name>.<ext>; the .html is
    what the report shows)."""
    return {ext: f"figures/{name}.{ext}" for ext in ("pdf", "png", "html")}


def set_marker(stem: str) -> str:
    """The marker of the output set whose members are <stem>.<ext> (runtime.output_set), declared
    as an output of the rule that writes the set: a write that stopped between members leaves no
    marker, and Snakemake reruns a job whose declared output is missing."""
    return stem + MARKER_SUFFIX


def set_markers(paths: Sequence[str]) -> list[str]:
    """The markers of the output sets that `paths` belong to, where there are (a committed set
    from before markers has none): inputs of a job whose command checks what it reads against
    them (output_set.check_member)."""
    from ..runtime.output_set import marker_of

    markers = (marker_of(p) for p in paths)
    return list(dict.fromkeys(str(m) for m in markers if m is not None and m.is_file()))


def with_report(
    files: dict[str, str], name: str, category: str, report: Callable[..., str]
) -> dict[str, str]:
    """`files` with its .html marked for the report by `report` (Snakemake's), captioned by
    workflow/report/<name>.rst in the report's `category`."""
    caption = f"../report/{name}.rst"
    return {**files, "html": report(files["html"], caption=caption, category=category)}


def committed_lr_grid(checkout: str) -> list[str]:
    """The committed LR grid where there is one: the working directory's, else the one in
    `checkout` (a run with `-d OTHERDIR`, e.g. from a read-only checkout, reads the committed
    records where they are)."""
    for path in (LR_GRID, os.path.join(checkout, LR_GRID)):
        if os.path.isfile(path):
            return [path]
    return []


def committed_scaling_summary() -> list[str]:
    """The committed scaling study's summary, where the working directory has it."""
    return [SCALING_SUMMARY] if os.path.isfile(SCALING_SUMMARY) else []


def committed_stability_summary() -> list[str]:
    """The committed stability study's summary, where the working directory has it."""
    return [STABILITY_SUMMARY] if os.path.isfile(STABILITY_SUMMARY) else []


def committed_bench_pool() -> list[str]:
    """The committed reference runs' benchmark CSVs, where the working directory has them: the
    speed rule of claim 7 and DyT's row pools those of the run's host class (speed_rule)."""
    if not os.path.isdir(REFERENCE_RUNS):
        return []
    return sorted(
        os.path.join(REFERENCE_RUNS, run, "results", "bench", name)
        for run in os.listdir(REFERENCE_RUNS)
        if os.path.isdir(os.path.join(REFERENCE_RUNS, run, "results", "bench"))
        for name in os.listdir(os.path.join(REFERENCE_RUNS, run, "results", "bench"))
        if name.endswith(".csv")
    )


def committed_gpu_check() -> list[str]:
    """The newest committed first-GPU check's env.json, where the working directory has one."""
    newest = newest_gpu_check(GPU_CHECKS)
    return [newest] if newest else []
