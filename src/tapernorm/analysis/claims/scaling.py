"""What the committed scaling study (results/cpu/scaling/summary.csv) adds to a claim's row: the
claim's estimate from the shortest to the longest training at each width, the trend toward or away
from its criterion, and, where the verdict at the longest training differs from the shortest's,
that the verdict flips, and the paper's own gap at that width with its version (Table 2: "paper v1,
Table 2, d=64: +1.46%"). Claims 3 and 4: the ablation on fresh seeds, and on how many it holds."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..studies.scaling import SUMMARY_COLUMNS, paper_gap_text, trend
from .rows import ClaimInputs

STUDY = "scaling study"


def load_scaling(path: str | Path) -> pd.DataFrame:
    """summary.csv of `tapernorm scaling summary`, with its path kept in attrs["source"]."""
    frame = pd.read_csv(path, dtype={"claim": str})
    missing = [c for c in SUMMARY_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"scaling summary {path}: not a summary.csv (no columns {missing})")
    frame["left_out"] = frame["left_out"].fillna("")  # (an empty CSV cell reads as NaN)
    frame.attrs["source"] = str(Path(path).parent)
    return frame


def _value(x: float, unit: str) -> str:
    if pd.isna(x):
        return "n/a"
    return f"{x:+.2f}%" if unit == "%" else f"{x:.2f}x"


def _interval(r) -> str:
    return f"[{_value(r.ci_low, r.unit)}, {_value(r.ci_high, r.unit)}]"


def study_note(summary: pd.DataFrame, claim: str) -> tuple[str, str]:
    """(text for the Ours column, text for the Holds? column; '' when nothing changes) of one
    claim, from the study's rows of it."""
    rows = summary[summary["claim"] == claim]
    if rows.empty:
        return "", ""
    source = summary.attrs.get("source", "results/cpu/scaling")
    if claim in ("3", "4"):
        r = rows.iloc[0]
        text = (
            f"{STUDY} ({source}), the ablation on {r.n_seeds} fresh seeds: "
            f"{_value(r.estimate, r.unit)} {_interval(r)}, {r.verdict}"
        )
        if r.left_out:
            text += f" ({r.left_out} left out)"
        return text, ""
    ours, holds = [], []
    for width, cell in rows.groupby("width"):
        cell = cell.sort_values("tokens_per_param")
        first, last = cell.iloc[0], cell.iloc[-1]
        path = " → ".join(
            f"{r.tokens_per_param:.0f}: {_value(r.estimate, r.unit)}" for r in cell.itertuples()
        )
        left = "; ".join(
            f"{r.steps:,} steps: {r.left_out} left out" for r in cell.itertuples() if r.left_out
        )
        quoted = paper_gap_text(claim, int(width))
        ours.append(
            f"d={width}, tokens/param {path} (longest {_interval(last)}, {last.n_seeds} pairs; "
            f"{trend(summary, claim, int(width))}{'; ' + left if left else ''}"
            f"{'; ' + quoted if quoted else ''})"
        )
        if last.verdict != first.verdict:
            holds.append(
                f"at {last.tokens_per_param:.0f} tokens/param (d={width}, {STUDY}): "
                f"{last.verdict}, the verdict flips"
            )
    return f"{STUDY} ({source}): " + "; ".join(ours), "; ".join(holds)


def with_study(claim: Callable[[ClaimInputs], dict], key: str) -> Callable[[ClaimInputs], dict]:
    """`claim` whose row also quotes the scaling study's rows of `key` (where it is given)."""

    @functools.wraps(claim)
    def row(inp: ClaimInputs) -> dict:
        out = claim(inp)
        if inp.scaling is None or inp.scaling.empty:
            return out
        ours, holds = study_note(inp.scaling, key)
        if ours:
            out = {**out, "Ours": f"{out['Ours']}; {ours}"}
        if holds:
            out = {**out, "Holds?": f"{out['Holds?']}; {holds}"}  # (its grade stays the claim's)
        return out

    return row
