"""What every claim of results/claims.md is computed from (ClaimInputs) and returns (a row of
COLUMNS), and the helpers the claims share to judge runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..config import VARIANTS

NOT_MEASURED = "not measured"
COLUMNS = ("Claim", "Paper", "Ours", "Scale", "Holds?", "Comment")


@dataclass
class ClaimInputs:
    """Everything claims are computed from; empty frames / lists mean 'not given'."""

    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    ablation: pd.DataFrame = field(default_factory=pd.DataFrame)
    sweep: pd.DataFrame = field(default_factory=pd.DataFrame)  # anchor_sweep runs (claim 4)
    verify: list[tuple[Path, dict]] = field(default_factory=list)
    finetune: pd.DataFrame = field(default_factory=pd.DataFrame)  # finetune.load_finetune_evals
    bench: pd.DataFrame = field(default_factory=pd.DataFrame)  # benchmarks.load_bench


def claim_row(
    claim: str, paper_value: str, ours: str, scale: str, holds: str, comment: str
) -> dict:
    return dict(zip(COLUMNS, (claim, paper_value, ours, scale, holds, comment), strict=True))


def not_measured(claim: str, paper_value: str, why: str) -> dict:
    return claim_row(claim, paper_value, NOT_MEASURED, "—", NOT_MEASURED, why)


def combine_verdicts(verdicts: list[str]) -> str:
    if all(v == "yes" for v in verdicts):
        return "yes"
    if all(v == "no" for v in verdicts):
        return "no"
    return "partly"


def usable_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with a Table 1 variant that did not diverge."""
    if runs.empty:
        return runs
    return runs[runs["variant"].notna() & ~runs["diverged"]]


def variant_label(variant: str) -> str:
    return VARIANTS[variant]["label"]
