"""Tables 1, 2 and 5 from run directories, each written as <stem>.csv, .md, .tex and .html (write.py).

Table 2's outlier rule is stats.py's (see its docstring; the caption states it): diverged runs are always
excluded and mark the cell with † and "(k/n seeds; m diverged)"; among at least 4 finite seeds, a run with
robust z-score |x - median| / (1.4826 MAD) > 3.5 is excluded and marked † as well; a cell whose seeds
all diverged reads "diverged (n/n)". The paper's numbers sit in their own column, labelled as such.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from ...variants import PAPER_VARIANTS, VARIANTS, baseline_of
from .. import comparable, paper
from ..runs import corpus_of, diverged_text, load_runs
from ..stats import RULE_TEXT, fmt_cell, gap_pct, paired_gap, stats_by_cell
from .write import write_table


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _join(values) -> str:
    return ", ".join(f"{v:,}" for v in sorted(set(values)))


def paired_text(runs: pd.DataFrame, variant: str) -> str:
    """Per width, `variant`'s validation-loss gap to its matched baseline paired by seed, with its
    95% interval and the per-seed gaps ("—" for a baseline or where no seed pairs)."""
    against = baseline_of(variant)
    if against is None:
        return "—"
    parts = []
    for width in _widths(runs):
        gap = paired_gap(runs, width, variant, against)
        if gap.n:
            parts.append(f"d={width}: {gap.text()}; {gap.seeds_text()}")
    return " | ".join(parts) or "—"


PAIRED_NOTE = (
    "Gaps paired by seed: seed s of every variant draws the same initialisation and the same "
    "batches, so per seed 100 (variant / baseline - 1) is one paired measurement; the mean of the "
    "per-seed gaps with its 95% t interval (none with one pair). Runs that Table 2's rule excludes "
    "are left out of the pairs."
)


def table1(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Table 1: the six variants (internal taper / final taper / scale loss), with our run counts,
    seeds and the gap to the matched baseline paired by seed; ours (DyT, the untied-head runs) too
    where they have runs."""
    rows = []
    for name, v in VARIANTS.items():
        mine = runs[runs["variant"] == name]
        if name not in PAPER_VARIANTS and mine.empty:
            continue
        rows.append(
            {
                "Variant": v["label"],
                "Name": name,
                "Internal taper": _yes(v["taper"] in ("internal", "all")),
                "Final taper": _yes(v["taper"] in ("final", "all")),
                "Scale loss": _yes(v["anchor"]),
                "Runs": len(mine),
                "Seeds": ", ".join(str(int(s)) for s in sorted(set(mine["seed"]))) or "—",
                "Diverged": int(mine["diverged"].sum()),
                "Gap to its baseline, paired by seed (95% interval)": paired_text(runs, name),
            }
        )
    caption = (
        "**Table 1.** Variants (paper's Table 1) and the number of runs of each in this run set "
        "(Diverged: runs that stopped at a non-finite loss). " + PAIRED_NOTE + _diverged_note(runs)
    )
    if any(r["Name"] == "dyt" for r in rows):
        caption += (
            " DyT (ours, not in the paper): every norm replaced by DyT (Zhu et al. 2025), by its "
            "authors' LLaMA recipe (untied head, no DyT bias, a learnable embedding scalar, alpha0 "
            "by width), otherwise trained like the baseline."
        )
    if any(r["Name"].endswith("_untied") for r in rows):
        caption += (
            " The untied-head variants (ours): the head is a separate matrix, not the embedding, as "
            "in DyT's recipe; the baseline DyT is measured against."
        )
    return pd.DataFrame(rows), caption


def table2(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Table 2: validation loss mean ± std per (width, variant), gap to the baseline, paper beside."""
    cells = stats_by_cell(runs)
    if not cells:
        raise ValueError("table 2 needs runs with a Table 1 variant")
    rows, notes = [], []
    for (width, variant), st in cells.items():
        against = baseline_of(variant)
        base = cells.get((width, against)) if against else None
        gap = None
        if base is not None and not base.all_diverged:
            gap = gap_pct(st.mean, base.mean)
        cell = runs[(runs["width"] == width) & (runs["variant"] == variant)]
        paired = paired_gap(runs, width, variant, against) if against else None
        rows.append(
            {
                "Width": width,
                "Params (ours)": _params(cell),
                "Paper size at this width": paper.size_label(width),
                "Variant": VARIANTS[variant]["label"],
                "Gap against": VARIANTS[against]["label"] if against else "—",
                "Seeds used": f"{st.n_used}/{st.n_total}",
                "Ours": fmt_cell(st, gap),
                "Gap paired by seed (95% interval)": paired.text() if paired else "—",
                "Per-seed gaps": paired.seeds_text() if paired and paired.n else "—",
                "Paper": paper.table2_text(width, variant),
            }
        )
        named = runs[(runs["width"] == width) & (runs["variant"] == variant)].set_index("name")
        notes += [f"{n} diverged at step {named.loc[n, 'diverged_step']}" for n in st.diverged]
        notes += [f"{n} outlier (val loss {named.loc[n, 'val_loss']:.4f})" for n in st.outliers]
    caption = (
        f"**Table 2.** Validation loss at g=0 (ours: the {corpus_of(runs)} corpus, "
        + ", ".join(
            f"d={w} {_join(runs[runs['width'] == w]['steps'])} steps" for w in _widths(runs)
        )
        + "; gap relative to the baseline of the same width with the same head, named in Gap "
        "against: the untied-head baseline for DyT, trained by its authors' recipe, and for the "
        "untied-head Internal-Taper (+aux); the paper's tied baseline for the paper's variants). "
        + RULE_TEXT
        + " "
        + PAIRED_NOTE
        + " Params (ours) is our model's parameter count; the paper's size at the same width is "
        "larger (its vocabulary is 10k, ours is the tokenizer's)."
        + f" Paper: {paper.TABLE2_SOURCE} (TinyStories, 6 seeds; † = 5 seeds, one outlier excluded)."
    )
    if notes:
        caption += " Excluded: " + "; ".join(notes) + "."
    return pd.DataFrame(rows), caption


def _diverged_note(runs: pd.DataFrame) -> str:
    """The captions' sentence naming the diverged runs ('' when none)."""
    named = diverged_text(runs)
    return f" Diverged (excluded from every mean and gap): {named}." if named else ""


def _params(cell: pd.DataFrame) -> str:
    values = sorted(set(cell["n_params"].dropna().astype(int)))
    return ", ".join(f"{n / 1e6:.2f}M" for n in values) or "—"


def _widths(runs: pd.DataFrame) -> list[int]:
    return [int(w) for w in sorted(runs["width"].unique())]


def table5(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Table 5: training steps by width, with seeds, batch x block size and warmup; paper beside."""
    rows = []
    for width in sorted(set(_widths(runs)) | set(paper.TABLE5_STEPS)):
        mine = runs[runs["width"] == width]
        p_steps = paper.TABLE5_STEPS.get(width)
        row = {"Width": width, "Size (paper)": paper.size_label(width)}
        if len(mine):
            warm = [
                f"{w:,} ({100 * w / s:.0f}%)"
                for w, s in sorted(set(zip(mine["warmup_steps"], mine["steps"], strict=True)))
            ]
            batch = sorted(set(zip(mine["batch_size"], mine["block_size"], strict=True)))
            row.update(
                {
                    "Steps (ours)": _join(mine["steps"]),
                    "Seeds (ours)": mine["seed"].nunique(),
                    "Runs (ours)": len(mine),
                    "Batch × T (ours)": ", ".join(f"{b} × {t}" for b, t in batch),
                    "Warmup (ours)": ", ".join(warm),
                }
            )
        else:
            row.update({k: "—" for k in ("Steps (ours)", "Seeds (ours)", "Runs (ours)")})
            row.update({"Batch × T (ours)": "—", "Warmup (ours)": "—"})
        if p_steps:
            warmup = int(paper.TABLE5_WARMUP_FRAC * p_steps)
            row.update(
                {
                    "Steps (paper)": f"{p_steps:,}",
                    "Seeds (paper)": paper.TABLE5_SEEDS,
                    "Batch × T (paper)": f"{paper.TABLE5_BATCH} × {paper.TABLE5_BLOCK}",
                    "Warmup (paper)": f"{warmup:,} ({100 * paper.TABLE5_WARMUP_FRAC:.0f}%)",
                }
            )
        else:
            row.update({k: "—" for k in ("Steps (paper)", "Seeds (paper)")})
            row.update({"Batch × T (paper)": "—", "Warmup (paper)": "—"})
        rows.append(row)
    caption = (
        "**Table 5.** Training steps by width: ours from the run configs (batch = sequences per "
        f"optimizer step incl. accumulation), beside {paper.TABLE5_SOURCE} (TinyStories)."
    )
    if runs["diverged"].any():
        caption += (
            " Runs (ours) counts every run started, the diverged ones too (they stopped before "
            f"their steps): {diverged_text(runs)}."
        )
    df = pd.DataFrame(rows)
    ours = [c for c in df.columns if "(ours)" in c]
    theirs = [c for c in df.columns if "(paper)" in c and c != "Size (paper)"]
    return df[["Width", "Size (paper)", *ours, *theirs]].astype(str), caption


TABLES: dict[str, Callable[[pd.DataFrame], tuple[pd.DataFrame, str]]] = {
    "1": table1,
    "2": table2,
    "5": table5,
}


def make_table(
    which: str,
    run_dirs: Sequence[str | Path],
    out_stem: str | Path,
    config_sha256: str | None = None,
    rehearsal: bool = False,
    allow_mixed: bool = False,
) -> list[Path]:
    """Load the runs, build table `which` ("1", "2" or "5") and write its csv/md/tex/html. The runs
    are checked comparable (comparable.check); `allow_mixed` lets cells of mixed recipes through,
    and the caption says so."""
    if which not in TABLES:
        raise ValueError(f"unknown table {which!r}; choose from {sorted(TABLES)}")
    runs, _ = load_runs(run_dirs)
    notes = comparable.check(runs, allow_mixed=allow_mixed)
    df, caption = TABLES[which](runs)
    caption = comparable.with_mixed(caption, notes)
    return write_table(df, out_stem, caption, config_sha256, rehearsal)
