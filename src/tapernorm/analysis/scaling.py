"""The scaling study's numbers: each claim's paired gap (or ratio) at every width and training
length, from the study's committed run records (workflow/scaling.py says where they lie).

Claims 1, 2 and DyT: the validation-loss gap of Internal-Taper (+aux), All-Taper (+aux) and DyT to
their matched baselines, paired by seed, mean and 95% t interval (stats.paired_gap), judged as the
claims are (claims_loss.within_verdict: inside +-2%). Claims 3 and 4 on the ablation's fresh seeds:
per seed, claim 3's ratio U (end logit norm of the unanchored runs without a final norm over the
runs that keep one) and claim 4's ratio A (All-Taper (+aux) over the baseline), each judged on its
own by the claims' criteria (claims_chasing); their geometric mean and a 95% t interval on log scale.

summary.csv has one row per (claim, width, tokens per parameter); per_seed.csv one row per seed of
every row, with its own verdict where a claim is judged per seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..variants import VARIANTS, baseline_of, variants_with
from .claims_chasing import CHASE_PARTLY, CHASE_YES, suppression_verdict
from .claims_loss import GAP_MAX_PCT, within_verdict
from .runs import load_runs, val_records
from .stats import VARIANT_LABELS, paired_gap, t975

# claim -> (variant, its baseline): claims 1, 2 and dyt (variants.VARIANTS' gap_claim role)
GAP_CLAIMS = {VARIANTS[v]["gap_claim"]: (v, baseline_of(v)) for v in variants_with("gap_claim")}
SUMMARY_COLUMNS = ("claim", "width", "tokens_per_param", "estimate", "ci_low", "ci_high")
SUMMARY_COLUMNS += ("n_seeds", "unit", "steps", "verdict", "criterion", "left_out")
KEPT_NORM = ("baseline", "internal", "internal_aux")  # runs that keep a real final norm
UNANCHORED_FREE = ("final", "all")  # final norm tapered, no scale loss


@dataclass(frozen=True)
class StudyRuns:
    """The study's runs (load_runs' one row per run) with tokens_per_param; the ablation's apart."""

    runs: pd.DataFrame
    ablation: pd.DataFrame
    curves: pd.DataFrame  # validation curves of every run (runs.val_records) with its family


def read_study(record_dirs: list[str | Path]) -> StudyRuns:
    """The study's record directories (<family>/<run>/ with config.json, eval.json, metrics.jsonl)."""
    runs, _ = load_runs(record_dirs)
    runs["tokens_per_param"] = runs["steps"] * runs["batch_size"] * runs["block_size"]
    runs["tokens_per_param"] /= runs["n_params"].astype(float)
    ablation = runs["family"] == "scaling_ablation"
    curves = val_records(runs).merge(runs[["run", "family"]], on="run")
    return StudyRuns(runs[~ablation].copy(), runs[ablation].copy(), curves)


def cell_tokens(runs: pd.DataFrame, against: str) -> float:
    """Tokens per parameter of a cell: its reference arm's (the baseline's parameters)."""
    return float(runs.loc[runs["variant"] == against, "tokens_per_param"].mean())


def gap_rows(study: StudyRuns) -> tuple[list[dict], list[dict]]:
    """(summary rows, per-seed rows) of claims 1, 2 and DyT at every (width, steps) that has both
    arms."""
    rows, seeds = [], []
    runs = study.runs
    for (width, steps), cell in runs.groupby(["width", "steps"]):
        for claim, (variant, against) in GAP_CLAIMS.items():
            if not {variant, against} <= set(cell["variant"]):
                continue
            gap = paired_gap(cell, int(width), variant, against)
            verdict, _ = within_verdict(gap)
            rows.append(
                {
                    "claim": claim,
                    "width": int(width),
                    "tokens_per_param": cell_tokens(cell, against),
                    "estimate": gap.mean,
                    "ci_low": gap.lo,
                    "ci_high": gap.hi,
                    "n_seeds": gap.n,
                    "unit": "%",
                    "steps": int(steps),
                    "verdict": verdict,
                    "criterion": f"95% interval inside ±{GAP_MAX_PCT:g}%",
                    "left_out": "; ".join(gap.left_out),
                }
            )
            seeds += [
                {
                    "claim": claim,
                    "width": int(width),
                    "steps": int(steps),
                    "seed": s,
                    "value": g,
                    "verdict": "",
                }  # fmt: skip
                for s, g in sorted(gap.per_seed.items())
            ]
    return rows, seeds


def chasing_per_seed(ablation: pd.DataFrame) -> pd.DataFrame:
    """Per ablation seed: claim 3's U and each unanchored variant's ratio, claim 4's A, and each
    claim's verdict on that seed alone (claims_chasing's criteria)."""
    ok = ablation[~ablation["diverged"]]
    out = []
    for seed, runs in ok.groupby("seed"):
        by = runs.groupby("variant")["logit_norm_end"].mean()
        kept = [v for v in KEPT_NORM if v in by]
        free = [v for v in UNANCHORED_FREE if v in by]
        if not kept or not free or "baseline" not in by:
            continue
        ref = float(np.mean([by[v] for v in kept]))
        each = {v: by[v] / ref for v in free}
        chase = float(np.mean([by[v] for v in free])) / ref
        claim3 = (
            "yes"
            if min(each.values()) >= CHASE_YES
            else "partly"
            if chase >= CHASE_PARTLY
            else "no"
        )
        row = {
            "seed": int(seed),
            "U": chase,
            "claim3": claim3,
            **{f"U_{v}": r for v, r in each.items()},
        }
        if "all_aux" in by:
            a = by["all_aux"] / by["baseline"]
            u_base = float(np.mean([by[v] for v in free])) / by["baseline"]
            row.update(A=a, claim4=suppression_verdict(a, u_base))
        out.append(row)
    return pd.DataFrame(out)


def log_interval(values: np.ndarray) -> tuple[float, float, float]:
    """Geometric mean of positive ratios and its 95% t interval on log scale (NaN with < 2)."""
    logs = np.log(values)
    mean = float(np.exp(logs.mean()))
    if len(logs) < 2:
        return mean, math.nan, math.nan
    half = t975(len(logs) - 1) * float(logs.std(ddof=1)) / math.sqrt(len(logs))
    return mean, float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


def chasing_rows(study: StudyRuns) -> tuple[list[dict], list[dict]]:
    """(summary rows, per-seed rows) of claims 3 and 4 on the ablation's fresh seeds."""
    per_seed = chasing_per_seed(study.ablation)
    if per_seed.empty:
        return [], []
    abl = study.ablation
    width = int(abl["width"].iloc[0])
    tokens = cell_tokens(abl, "baseline")
    steps = int(abl["steps"].iloc[0])
    left_out = "; ".join(
        f"seed {int(r.seed)} ({VARIANT_LABELS.get(r.variant, r.variant)} diverged)"
        for r in abl[abl["diverged"]].sort_values(["seed", "variant"]).itertuples()
    )
    rows, seeds = [], []
    specs = (("3", "U", "claim3", f"each unanchored variant >= {CHASE_YES:g}x"),
             ("4", "A", "claim4", "A within 1/1.5-1.5x while U >= 2x"))  # fmt: skip
    for claim, column, verdict_col, criterion in specs:
        if column not in per_seed:
            continue
        judged = per_seed.dropna(subset=[column])
        mean, lo, hi = log_interval(judged[column].to_numpy(dtype=float))
        verdicts = judged[verdict_col].tolist()
        held = sum(v == "yes" for v in verdicts)
        rows.append(
            {"claim": claim, "width": width, "tokens_per_param": tokens, "estimate": mean,
             "ci_low": lo, "ci_high": hi, "n_seeds": len(judged), "unit": "x", "steps": steps,
             "verdict": f"holds on {held}/{len(verdicts)} seeds", "criterion": criterion,
             "left_out": left_out}
        )  # fmt: skip
        seeds += [
            {"claim": claim, "width": width, "steps": steps, "seed": int(r.seed),
             "value": getattr(r, column), "verdict": getattr(r, verdict_col)}
            for r in judged.itertuples()
        ]  # fmt: skip
    return rows, seeds


def summarize(study: StudyRuns) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, per_seed) frames of the study, rows sorted by claim, width and tokens."""
    gap_summary, gap_seeds = gap_rows(study)
    chase_summary, chase_seeds = chasing_rows(study)
    summary = pd.DataFrame(gap_summary + chase_summary, columns=list(SUMMARY_COLUMNS))
    order = {c: i for i, c in enumerate(["1", "2", "dyt", "3", "4"])}
    summary = summary.sort_values(
        ["claim", "width", "tokens_per_param"],
        key=lambda s: s.map(order) if s.name == "claim" else s,
    ).reset_index(drop=True)
    per_seed = pd.DataFrame(
        gap_seeds + chase_seeds, columns=["claim", "width", "steps", "seed", "value", "verdict"]
    )
    return summary, per_seed


def trend(summary: pd.DataFrame, claim: str, width: int) -> str:
    """How a gap claim's estimate moves from the shortest to the longest training at one width,
    relative to the paper's +-2% criterion: 'toward', 'away from' or 'along' the band."""
    rows = summary[(summary["claim"] == claim) & (summary["width"] == width)]
    rows = rows.sort_values("tokens_per_param")
    if len(rows) < 2:
        return "one length"
    first, last = rows.iloc[0]["estimate"], rows.iloc[-1]["estimate"]
    dist = [max(0.0, abs(x) - GAP_MAX_PCT) for x in (first, last)]
    if dist[0] == dist[1] == 0.0:
        return "inside the band throughout"
    return "toward the band" if dist[1] < dist[0] else "away from the band"
