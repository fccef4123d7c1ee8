"""The scaling study's files: a finished run's records copied into the study, and the summary
written as CSV, markdown and JSON."""

from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path

import pandas as pd

from ...runtime import bookkeeping
from ...runtime.atomic import atomic_write_bytes
from ...runtime.markdown import pipe_table
from ...runtime.out_dirs import is_temporary, make_aside, only_names
from ...runtime.output_set import OutputSet, json_bytes, marker_path
from ...runtime.provenance import made
from ...workflow.scaling import RECORD_FILES
from ..claims.loss import BLOWUP_RULE, GAP_MAX_PCT
from ..epochs import epochs_text, meaning
from .scaling import GAP_CLAIMS, paper_gap_text, trend

CLAIM_NAMES = {
    "1": "Internal-Taper (+aux) vs Baseline",
    "2": "All-Taper (+aux) vs Baseline",
    "dyt": "DyT vs Baseline (untied head)",
    "3": "logit chasing U (unanchored, no final norm / final norm kept)",
    "4": "suppression A (All-Taper (+aux) / Baseline)",
}


class RecordError(ValueError):
    """A run that cannot be recorded (unfinished), or a record directory holding other files."""


def _stale_asides(out: Path) -> list[Path]:
    """The directories `.<name>.<8 hex>.tmp` beside `out` that a record stopped between its renames
    left (make_aside's), holding record files only."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.[0-9a-f]{{8}}\.tmp")
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return []
    return [
        p
        for p in entries
        if pattern.fullmatch(p.name)
        and p.is_dir()
        and not p.is_symlink()
        and only_names(p, lambda n: n in RECORD_FILES or is_temporary(n))
    ]


def copy_record(run: Path, out: Path) -> list[Path]:
    """Copy `run`'s config.json, eval.json and metrics.jsonl to `out` as one set: written into a
    directory beside it (make_aside) and renamed in whole, an earlier record moved aside first and
    removed after (a reader sees the old record, none, or the new one; never files of two). `out`
    holds the three files only, as any run directory's record. Refuses an unfinished run, a record
    directory holding anything else (it is not a record) and an `out` that is a link."""
    missing = [name for name in RECORD_FILES if not (run / name).is_file()]
    if missing:
        raise RecordError(
            f"run {run} has no {', '.join(missing)}: it has not finished; train it first"
        )
    bookkeeping.read(bookkeeping.RUN_RESULT, run / "eval.json")  # a finished run's records read
    bookkeeping.read(bookkeeping.RUN_RECORD, run / "config.json")
    if out.is_symlink():
        raise RecordError(f"{out} is a link: give the record directory itself as --out")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in RECORD_FILES)
        if foreign:
            raise RecordError(
                f"{out} holds {', '.join(foreign[:3])}, not a run record: give another --out "
                "or move those files"
            )
    for stale in _stale_asides(out):  # (a record that stopped between its renames)
        shutil.rmtree(stale)
    tmp, old = make_aside(out), None
    try:
        for name in RECORD_FILES:
            atomic_write_bytes(tmp / name, (run / name).read_bytes())
        if out.exists():
            old = make_aside(out)
            os.replace(out, old)  # (onto make_aside's empty directory)
        os.replace(tmp, out)  # (onto nothing, or an empty directory: the workflow makes it)
    except BaseException:
        if old is not None and not out.exists():
            os.replace(old, out)  # the earlier record back
        for path in (tmp, old):
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old)
    return [out / name for name in RECORD_FILES]


def _number(x: float, unit: str) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:+.2f}%" if unit == "%" else f"{x:.2f}x"


def _text(r, column: str) -> str:
    """A text column of a row ('' where absent, or empty: NaN as a CSV reads it)."""
    value = getattr(r, column, "")
    return value if isinstance(value, str) else ""


def _count(x) -> int | None:
    return None if x is None or pd.isna(x) else int(x)


def _runs_cell(r) -> str:
    """'17/18 clean' of a row's runs ('n/a' in a summary from before the counts)."""
    n, clean = _count(getattr(r, "n_runs", None)), _count(getattr(r, "n_clean", None))
    return "n/a" if n is None or clean is None else f"{clean}/{n} clean"


def _last_weights_cell(r) -> str:
    """The gap with the blown-up runs at their last weights, where a run of the row blew up."""
    if r.unit != "%" or not _count(getattr(r, "n_blowup", None)):
        return "—"
    est = getattr(r, "estimate_last_weights", math.nan)
    lo, hi = (
        getattr(r, "ci_low_last_weights", math.nan),
        getattr(r, "ci_high_last_weights", math.nan),
    )
    n = _count(getattr(r, "n_seeds_last_weights", None)) or 0
    return f"{_number(est, r.unit)} [{_number(lo, r.unit)}, {_number(hi, r.unit)}] ({n})"


def passes_sentence(summary: pd.DataFrame, corpus: str = "the runs' data") -> str:
    """What the rows' passes over their training tokens mean beside the paper's (epochs.meaning),
    over the study's main grid (the ablation's slice apart: its rows say their own)."""
    main = summary[summary["claim"].isin(list(GAP_CLAIMS))]
    rows = main if len(main) else summary
    epochs = pd.to_numeric(rows.get("epochs", pd.Series(dtype=float)), errors="coerce")
    tokens = pd.to_numeric(rows.get("data_train_tokens", pd.Series(dtype=float)), errors="coerce")
    return meaning(epochs, tokens, corpus)


def _paper_cell(r) -> str:
    return paper_gap_text(r.claim, int(r.width)) or "—"


def split_hosts_lines(per_seed: pd.DataFrame) -> list[str]:
    """A line per seed whose compared runs were trained on two hosts (per_seed's split_hosts),
    and one per row whose seeds average pairs of different hosts (each pair on one host)."""
    if "split_hosts" not in per_seed:
        return []
    split = per_seed["split_hosts"].astype(bool)
    lines = [
        f"- Seed {r.seed} of claim {r.claim}, d={r.width}, {r.steps:,} steps: its compared runs "
        f"were trained on two hosts ({r.hosts}): two nearby trajectories, not one "
        "(docs/reproducibility.md)."
        for r in per_seed[split].itertuples()
    ]
    mixed = per_seed[~split & per_seed["hosts"].fillna("").str.contains("; ")]
    for (claim, width, steps), rows in mixed.groupby(["claim", "width", "steps"], sort=False):
        seeds = ", ".join(str(s) for s in rows["seed"])
        lines.append(
            f"- Claim {claim}, d={width}, {steps:,} steps: seed(s) {seeds} average pairs trained "
            f"on different hosts, each pair on one ({' | '.join(dict.fromkeys(rows['hosts']))})."
        )
    return lines


SUMMARY_HEADER = ["Claim", "Width", "Steps", "Tokens/param", "Epochs", "Estimate", "95% interval",
                  "Seeds", "Verdict", "Runs", "With blown-up runs at their last weights (seeds)",
                  "Paper"]  # fmt: skip


def summary_markdown(
    summary: pd.DataFrame,
    extra_note: str = "",
    per_seed: pd.DataFrame | None = None,
    corpus: str = "the runs' data",
) -> str:
    """The summary as a markdown table, one row per (claim, width, length): the runs that finished
    clean and the gap with the blown-up runs at their last weights beside each estimate, the
    passes over the training tokens and the paper's value (with its version) where it has one;
    what the passes mean beside the paper's; the blow-up rule, the blow-ups and the seeds left out
    under it; seed pairs trained on two hosts; each gap claim's trend from the shortest to the
    longest training per width."""
    rows = []
    for r in summary.itertuples():
        ci = f"[{_number(r.ci_low, r.unit)}, {_number(r.ci_high, r.unit)}]"
        passes = getattr(r, "epochs", math.nan)
        rows.append([f"{r.claim}: {CLAIM_NAMES[r.claim]}", f"d={r.width}", f"{r.steps:,}",
                     f"{r.tokens_per_param:.1f}", epochs_text(float(passes)),
                     _number(r.estimate, r.unit), ci, r.n_seeds, r.verdict, _runs_cell(r),
                     _last_weights_cell(r), _paper_cell(r)])  # fmt: skip
    lines = pipe_table(SUMMARY_HEADER, rows)
    lines += [
        "",
        "Epochs: steps x batch x block / training tokens of each run. "
        + passes_sentence(summary, corpus),
        "",
        f"Blow-ups limit a loss verdict (claims 1, 2, dyt): {BLOWUP_RULE}.",
        "",
    ]
    if extra_note:
        lines += [f"Extra records: {extra_note}.", ""]
    if per_seed is not None:
        lines += split_hosts_lines(per_seed)
    for r in summary.itertuples():
        where = f"claim {r.claim}, d={r.width}, {r.steps:,} steps"
        if _text(r, "blew_up"):
            lines.append(f"- Blew up in {where}: {r.blew_up}.")
        if _text(r, "left_out"):
            lines.append(f"- Left out of {where}: {r.left_out}.")
        if _text(r, "left_out_last_weights"):
            lines.append(f"- Left out of {where} at last weights: {r.left_out_last_weights}.")
        if _text(r, "extra_runs"):
            lines.append(f"- Extra runs in {where}: {r.extra_runs}.")
    for claim in (c for c in GAP_CLAIMS if c in set(summary["claim"])):
        for width in sorted(summary.loc[summary["claim"] == claim, "width"].unique()):
            lines.append(
                f"- Claim {claim}, d={width}: {trend(summary, claim, int(width))} (±"
                f"{GAP_MAX_PCT:g}%) from the shortest to the longest training."
            )
    return "\n".join(lines) + "\n"


def verdict_path(cell: pd.DataFrame) -> str:
    """A claim's verdicts from the shortest to the longest training at one width ('yes → not
    resolved: flips'), or the one verdict they all share."""
    verdicts = list(cell.sort_values("tokens_per_param")["verdict"])
    if len(set(verdicts)) == 1:
        return f"{verdicts[0]} at every length"
    flips = " (the verdict flips)" if verdicts[0] != verdicts[-1] else ""
    return " → ".join(verdicts) + flips


def write_summary(
    summary: pd.DataFrame,
    per_seed: pd.DataFrame,
    out: Path,
    made_by: str = "",
    extra_note: str = "",
    corpus: str | None = None,
) -> list[Path]:
    """summary.csv, per_seed.csv, summary.md and summary.json (the rows, the trends, the blow-up
    rule, what the passes over the training tokens mean, the seed pairs trained on two hosts,
    what the extra records gave and what made them) in `out`; `corpus` names the runs' data
    (default: the one summarize recorded)."""
    corpus = corpus or summary.attrs.get("corpus") or "the runs' data"
    if summary.empty:
        raise ValueError("the study's records give no claim a row: check the grid's variants")
    out.mkdir(parents=True, exist_ok=True)
    files = OutputSet(marker_path(out / "summary"), "tapernorm scaling summary")
    files.add(out / "summary.csv", summary.to_csv(index=False).encode())
    files.add(out / "per_seed.csv", per_seed.to_csv(index=False).encode())
    markdown = summary_markdown(summary, extra_note, per_seed, corpus)
    files.add(out / "summary.md", markdown.encode())
    trends = {
        f"{claim}/d{width}": trend(summary, claim, int(width))
        for claim in GAP_CLAIMS
        for width in sorted(summary.loc[summary["claim"] == claim, "width"].unique())
    }
    record = {
        "made_by": made_by,
        "made": made(every_distribution=False),
        "rows": summary.to_dict("records"),
        "trends": trends,
        "blowup_rule": BLOWUP_RULE,
        "extra_records": extra_note,
        "passes": passes_sentence(summary, corpus),
        "split_hosts": split_hosts_lines(per_seed),
    }
    files.add(out / "summary.json", json_bytes(record))
    return files.commit()
