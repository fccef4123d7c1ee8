"""Passes over the training tokens (epochs) of pre-training runs: steps x sequences per step x
block size over the tokens the run trains on (config data.train_tokens where a run trains on the
first N tokens, else the `train_tokens` of its data directory's meta.json, written by `tapernorm
prepare-data`). Where that meta.json cannot be read (a data directory absent from this checkout, a
relative data.dir read away from the repository root) the passes are not measured: NaN in a table,
NOT_MEASURED in text, never 0.

The paper states its tokens per run but not the size of its tokenized corpus (paper.PASSES), so
ours are set beside its statement, not beside a number.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from . import paper
from .runs import shards_meta

NOT_MEASURED = "not measured"


def data_train_tokens(data_dir: str | Path) -> int | None:
    """`train_tokens` of `data_dir`/meta.json, or None where it is unreadable, absent or not a
    positive count."""
    meta = shards_meta(data_dir)
    if meta is None:
        return None
    tokens = meta["train_tokens"]
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        return None
    return tokens


def trained_tokens(runs: pd.DataFrame) -> pd.Series:
    """Tokens each run drew: steps x sequences per step x block size."""
    return runs["steps"] * runs["batch_size"] * runs["block_size"]


def corpus_tokens(runs: pd.DataFrame) -> pd.Series:
    """The training tokens each run trains on (float; NaN where not measured)."""
    by_dir = {d: data_train_tokens(d) for d in set(runs["corpus"])}
    whole = runs["corpus"].map(lambda d: by_dir[d] if by_dir[d] is not None else math.nan)
    first = pd.to_numeric(runs["train_tokens"], errors="coerce") if "train_tokens" in runs else None
    if first is None:
        return whole.astype(float)
    # the first N tokens of the split, where N is set (and the split is at least that long)
    return first.where(first.notna() & (first > 0), whole).astype(float)


def epochs(runs: pd.DataFrame) -> pd.Series:
    """Passes over the training tokens of each run (NaN where not measured)."""
    return trained_tokens(runs).astype(float) / corpus_tokens(runs)


def epochs_text(value: float) -> str:
    """'5.44' or NOT_MEASURED (NaN, None)."""
    if value is None or not math.isfinite(value):
        return NOT_MEASURED
    return f"{value:.2f}" if value < 10 else f"{value:.0f}"


def paper_passes() -> str:
    """The paper's passes as it states them: 'not stated (4.1-8.2B tokens per run as ...)'."""
    return f"{paper.PASSES} ({paper.PASSES_WHY})"


def meaning(
    passes: pd.Series, tokens: pd.Series, corpus: str, also: str = "", with_paper: bool = True
) -> str:
    """One sentence on what these runs' passes mean beside the paper's (from the data): how many
    times the longest runs see their training tokens, or that the passes are not measured; `also`
    (other runs' passes) before the paper's (left out without `with_paper`: a table beside it)."""
    theirs = f"{'; ' + also if also else ''}."
    if with_paper:
        theirs += f" The paper ({paper.source_of('PASSES').tag}): {paper_passes()}."
    known = passes.dropna()
    if known.empty:
        return (
            f"Passes over the training tokens: {NOT_MEASURED} (no readable meta.json in the runs' "
            f"data directory {corpus}; run where it resolves){theirs}"
        )
    most, least = float(known.max()), float(known.min())
    sizes = ", ".join(f"{int(n):,}" for n in sorted(set(tokens.dropna())))
    span = epochs_text(most) if epochs_text(least) == epochs_text(most) else (
        f"{epochs_text(least)}-{epochs_text(most)}"
    )  # fmt: skip
    text = (
        f"Passes over the training tokens (epochs): {span}, over the {sizes} training tokens of "
        f"{corpus}"
    )
    if most > 1:
        text += (
            f"; the longest runs draw each training token about {most:.1f} times, so their "
            "validation loss is that of a model that has seen its training text repeatedly, not "
            "of one that sees fresh text at every step"
        )
    else:
        text += (
            f"; no run draws more tokens than its training split holds ({epochs_text(most)} "
            "passes at most): less than one pass"
        )
    return text + theirs
