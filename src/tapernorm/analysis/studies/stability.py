"""The stability study's summary (config/stability.yaml, workflow/stability.py): how often each arm
blows up, whether that is more often than the baseline, what it does to the loss gap, and whether
the blow-ups follow the batches (the data-order seed) or the weights (the init seed).

Per width and arm (summary.csv, one row each): the runs, how many finished clean (no blow-up:
training/blowups.py, a non-finite loss or gradient, or a finite spike), blew up, diverged; the
clean rate k/n with its exact 95% Clopper-Pearson interval (rates.py); the two-sided Fisher exact p
of its clean rate against the matched baseline's at the same width; each blow-up's first step,
gate and kind; and the gap of the validation loss to the baseline paired by (init, data) seed pair,
mean and 95% t interval, over the pairs where neither run blew up, and with every run counted at
the weights it kept (eval.json's validation loss: a diverged run's are of its last checkpoint
before the divergence, an earlier step: named). A pair whose run has no finite validation loss is
named, never dropped silently; no outlier rule applies.

The crossing: per width and tapered arm, the grid of init seeds (rows) x data seeds (columns)
marking which runs blew up, the blow-ups per column and per row, and the exact conditional test
of whether they gather by data seed or by init seed beyond chance (rates.axis_test: given how many
blew up, every placement in the grid equally likely), with the smallest p the grid could give with
that many blow-ups: what 12 runs can and cannot resolve. The same per width with the tapered arms
pooled (each arm's blow-ups placed at random in its own grid). And the blow-ups that share a
trigger: the same data seed and step (hence the same batch) in more than one run.

Numbers are compared only between runs of one recipe: every run of a width must share its steps,
LR, batch, context, warmup, taper window, data and depth, or the summary refuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...runtime.markdown import pipe_table
from ...runtime.output_set import OutputSet, json_bytes, marker_path
from ...runtime.provenance import made
from ...variants import VARIANTS, baseline_of
from .. import comparable
from ..claims.loss import blown_runs_text
from ..rates import AxisTest, axis_test, clopper_pearson, fisher_exact, pooled_axis_test
from ..runs import EVERY_STEP, KIND_TEXT, blown_up, load_runs, variant_order
from ..stats import PairedGap, last_weights_gap, paired_gap

ALPHA = 0.05  # the level the crossing's statement reads its p values at
UNIT = ("seed", "data_seed")  # a pair: the same init seed and data-order seed
# what every run of one width shares, or its numbers cannot be compared
RECIPE = ("steps", "lr", "batch_size", "block_size", "warmup_steps", "taper_start", "taper_end",
          "corpus", "train_tokens", "n_layer", "n_head", "grad_clip", "ema_mu", "mlp")  # fmt: skip
FACTOR_FAMILY = "stability_factors"  # its runs change one setting each: summarised apart
COLUMNS = (
    "width", "arm", "label", "steps", "n_runs", "n_clean", "n_blowup", "n_diverged", "clean_rate",
    "clean_ci_low", "clean_ci_high", "against", "against_clean", "fisher_p", "first_blowups",
    "blowups_checked", "gap_clean", "gap_clean_ci_low", "gap_clean_ci_high", "n_pairs_clean",
    "left_out_clean", "gap_last_weights", "gap_last_weights_ci_low", "gap_last_weights_ci_high",
    "n_pairs_last_weights", "left_out_last_weights", "blew_up",
)  # fmt: skip
MARK = {"clean": ".", "spike": "S", "diverged": "D", None: "—"}  # a grid cell: how the run ended


@dataclass
class Summary:
    """The study's summary: one row per (width, arm), the grids, the crossing's tests, the shared
    triggers, and what the records are."""

    rows: pd.DataFrame
    grids: list[dict] = field(default_factory=list)
    crossings: list[dict] = field(default_factory=list)
    triggers: list[dict] = field(default_factory=list)
    records: str = ""
    timing: list[dict] = field(default_factory=list)  # do blow-ups start on the batches?


def read_records(record_dirs: list[str | Path]) -> pd.DataFrame:
    """The run table of the study's record directories (runs.load_runs), checked comparable: each
    record complete and given once (comparable.check_records), one recipe per width (RECIPE)."""
    runs = load_runs(record_dirs)[0]
    comparable.check_records(runs, by=None)  # (seed pairs given twice: below, by data seed too)
    if runs["variant"].isna().any():
        raise ValueError("a record without a Table 1 variant: not a stability study's run")
    factors = [n for n in runs["name"] if str(n).split("/")[0] == FACTOR_FAMILY]
    if factors:
        raise ValueError(
            f"{factors[0]} is a run of {FACTOR_FAMILY} (one setting changed): the summary compares "
            "the arms of one recipe; give the stability family's records"
        )
    twice = runs[runs.duplicated(["width", "variant", "seed", "data_seed"], keep=False)]
    if len(twice):
        raise ValueError(
            f"two records of one arm and seed pair: {', '.join(twice['run'].head(2))} "
            f"(d={twice['width'].iloc[0]}, {twice['variant'].iloc[0]}, init {twice['seed'].iloc[0]}, "
            f"data {twice['data_seed'].iloc[0]}): give each run once"
        )
    check_recipe(runs)
    comparable.check_data(runs, "the study's records")  # one corpus, by its bytes
    return runs


def check_recipe(runs: pd.DataFrame) -> None:
    """ValueError naming the first setting (RECIPE) on which two runs of one width differ."""
    for width, at in runs.groupby("width"):
        for column in RECIPE:
            values = at[column].dropna().unique() if column in at else []
            if len(values) > 1:
                raise ValueError(
                    f"the records at d={width} differ in {column} ({', '.join(map(str, values))}): "
                    "their blow-up rates and gaps cannot be compared; give one recipe's records"
                )


def _short(run: dict) -> str:
    return f"init {run['seed']}, data {run['data_seed']}"


def _state(run: dict) -> str:
    if run["diverged"]:
        return "diverged"
    return "spike" if run["blew_up"] else "clean"


def first_blowups(arm: pd.DataFrame) -> str:
    """'init 1, data 2: a loss spike at step 1,750 (g=0.077)' per run of `arm` that blew up."""
    out = []
    for r in arm[blown_up(arm)].sort_values(["seed", "data_seed"]).to_dict("records"):
        step, gate = r["first_blowup_step"], r["first_blowup_gate"]
        kind = KIND_TEXT.get(r["first_blowup_kind"], str(r["first_blowup_kind"]))
        where = f"step {int(step):,}" if not pd.isna(step) else "an unrecorded step"
        at_gate = f" (g={gate:.3f})" if not pd.isna(gate) else ""
        out.append(f"{_short(r)}: {kind} at {where}{at_gate}")
    return "; ".join(out)


def _rate(arm: pd.DataFrame) -> tuple[int, int]:
    """(clean, runs) of an arm."""
    return int((~blown_up(arm)).sum()), len(arm)


def arm_row(runs: pd.DataFrame, width: int, variant: str) -> dict:
    """The row of one (width, arm) (module docstring)."""
    at = runs[runs["width"] == width]
    arm = at[at["variant"] == variant]
    clean, n = _rate(arm)
    lo, hi = clopper_pearson(clean, n)
    against = baseline_of(variant)
    row = {
        "width": int(width),
        "arm": variant,
        "label": VARIANTS[variant]["label"],
        "steps": int(arm["steps"].iloc[0]),
        "n_runs": n,
        "n_clean": clean,
        "n_blowup": n - clean,
        "n_diverged": int(arm["diverged"].sum()),
        "clean_rate": clean / n,
        "clean_ci_low": lo,
        "clean_ci_high": hi,
        "against": against or "",
        "against_clean": "",
        "fisher_p": math.nan,
        "first_blowups": first_blowups(arm),
        "blowups_checked": ", ".join(sorted(set(arm["blowups_checked"]))),
        "blew_up": blown_runs_text(arm),
        "left_out_clean": "",
        "left_out_last_weights": "",
    }
    base = at[at["variant"] == against] if against else at.iloc[:0]
    if not base.empty:
        b_clean, b_n = _rate(base)
        row["against_clean"] = f"{b_clean}/{b_n}"
        row["fisher_p"] = fisher_exact(clean, n - clean, b_clean, b_n - b_clean)
        row |= _gap_columns("clean", paired_gap(at, width, variant, against, True, UNIT, False))
        row |= _gap_columns("last_weights", last_weights_gap(at, width, variant, against, UNIT))
    return row


def _gap_columns(which: str, gap: PairedGap) -> dict:
    return {
        f"gap_{which}": gap.mean,
        f"gap_{which}_ci_low": gap.lo,
        f"gap_{which}_ci_high": gap.hi,
        f"n_pairs_{which}": gap.n,
        f"left_out_{which}": "; ".join(gap.left_out),
    }


def rate_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (width, arm) of `runs` (COLUMNS), in width then Table 1 order."""
    rows = [
        arm_row(runs, int(width), variant)
        for width in sorted(runs["width"].unique())
        for variant in variant_order(runs.loc[runs["width"] == width, "variant"])
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS))


# ---- the crossing ------------------------------------------------------------------------------------


def grid_of(arm: pd.DataFrame) -> dict:
    """{(init seed, data seed): how the run ended} of an arm's runs (runs absent: not in it)."""
    return {(int(r["seed"]), int(r["data_seed"])): _state(r) for r in arm.to_dict("records")}


def crossing_text(by_data: AxisTest, by_init: AxisTest, k: int, n: int) -> str:
    """What the blow-ups' placement says (module docstring), in words."""
    if k == 0:
        return "no run blew up: nothing to attribute"
    if k == n:
        return "every run blew up: nothing to attribute"
    data, init = by_data.p < ALPHA, by_init.p < ALPHA
    ps = f"by data seed p={by_data.p:.3g}, by init seed p={by_init.p:.3g}"
    if data and not init:
        return f"the blow-ups follow the data order ({ps}){_blind(by_init, 'init')}"
    if init and not data:
        return f"the blow-ups follow the initialisation ({ps}){_blind(by_data, 'data')}"
    if data and init:
        return f"the blow-ups gather along both axes ({ps}): neither alone explains them"
    if by_data.min_p >= ALPHA and by_init.min_p >= ALPHA:
        return (
            f"not resolved: with {k} blow-up(s) in {n} runs no placement could reach p < "
            f"{ALPHA:g} on either axis (the smallest p: {by_data.min_p:.3g} by data seed, "
            f"{by_init.min_p:.3g} by init seed)"
        )
    return (
        f"not resolved: neither axis gathers them beyond chance ({ps}; the smallest p the grid "
        f"could give: {by_data.min_p:.3g} by data seed, {by_init.min_p:.3g} by init seed)"
    )


def _blind(test: AxisTest, axis: str) -> str:
    """A caveat where the other axis could not have reached significance at all."""
    if test.min_p < ALPHA:
        return ""
    return (
        f"; the {axis} seed axis could not reach p < {ALPHA:g} with this many blow-ups (its "
        f"smallest p: {test.min_p:.3g}), so it is not ruled out"
    )


def _counts_text(test: AxisTest) -> dict:
    return {str(g): f"{test.counts[g]}/{test.sizes[g]}" for g in sorted(test.sizes)}


def crossing(grids: list[dict], width: int, arms: list[str]) -> dict:
    """The crossing's test of the grids of `arms` at `width` (pooled where several)."""
    cells = [{key: state != "clean" for key, state in g.items()} for g in grids]
    by_data, by_init = pooled_axis_test(cells, 1), pooled_axis_test(cells, 0)
    if len(cells) == 1:
        by_data, by_init = axis_test(cells[0], 1), axis_test(cells[0], 0)
    k = sum(sum(c.values()) for c in cells)
    n = sum(len(c) for c in cells)
    return {
        "width": int(width),
        "arms": arms,
        "blowups": k,
        "runs": n,
        "by_data_seed": _counts_text(by_data),
        "by_init_seed": _counts_text(by_init),
        "p_data": by_data.p,
        "min_p_data": by_data.min_p,
        "p_init": by_init.p,
        "min_p_init": by_init.min_p,
        "statement": crossing_text(by_data, by_init, k, n),
    }


def crossings(runs: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """(grids, crossings): per width and tapered arm, and per width with the tapered arms pooled."""
    grids, tests = [], []
    for width in sorted(runs["width"].unique()):
        at = runs[runs["width"] == width]
        tapered = [v for v in variant_order(at["variant"]) if baseline_of(v) is not None]
        arm_grids = []
        for variant in variant_order(at["variant"]):
            g = grid_of(at[at["variant"] == variant])
            grids.append({"width": int(width), "arm": variant, "cells": g})
            if variant in tapered:
                arm_grids.append(g)
                tests.append(crossing([g], int(width), [variant]))
        if len(arm_grids) > 1:
            tests.append(crossing(arm_grids, int(width), tapered))
    return grids, tests


def trigger_steps(steps: tuple, checked: str) -> list[int]:
    """The steps that start a blow-up: the first, and (every step checked) each one whose previous
    step did not blow up; in a record scored on its logged steps only, every recorded step."""
    steps = sorted(set(int(s) for s in steps))
    if checked != EVERY_STEP:
        return steps
    return [s for i, s in enumerate(steps) if i == 0 or steps[i - 1] != s - 1]


def shared_triggers(runs: pd.DataFrame) -> list[dict]:
    """Blow-ups starting at one step in runs of one data seed (the same batch), across arms, init
    seeds and widths: each (data seed, step) that more than one run shares."""
    groups: dict[tuple[int, int], list[str]] = {}
    for r in runs[blown_up(runs)].to_dict("records"):
        steps = r["blowup_steps"] or (
            (r["first_blowup_step"],) if not pd.isna(r["first_blowup_step"]) else ()
        )
        for step in trigger_steps(steps, r["blowups_checked"]):
            name = f"{r['label']} d={r['width']} ({_short(r)})"
            groups.setdefault((int(r["data_seed"]), step), []).append(name)
    return [
        {"data_seed": d, "step": s, "runs": sorted(names)}
        for (d, s), names in sorted(groups.items())
        if len(names) > 1
    ]


PERMUTATIONS = 10_000  # draws of the timing test (a fixed seed: the same p every time)


def timing_test(runs: pd.DataFrame, label: str) -> dict | None:
    """Do blow-ups start on the batches? Among the runs of `runs` that blew up, the pairs on one data
    order that start a blow-up at a common step, against the pairs on different orders (whose
    steps, learning rate and gate are the same; only their batches differ). p: the share of
    PERMUTATIONS relabellings of the runs' data seeds (counts kept) with as many same-order pairs
    sharing a step as observed (+1 over +1). None where there is nothing to compare: fewer than
    two runs that blew up, or no pair on one order, or none across."""
    blown = runs[blown_up(runs)].to_dict("records")
    steps = []
    for r in blown:
        recorded = r["blowup_steps"] or (
            (r["first_blowup_step"],) if not pd.isna(r["first_blowup_step"]) else ()
        )
        steps.append(set(trigger_steps(recorded, r["blowups_checked"])))
    n = len(blown)
    if n < 2:
        return None
    share = np.array([[bool(a & b) for b in steps] for a in steps])
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    seeds = np.array([int(r["data_seed"]) for r in blown])

    def same_and_shared(labels: np.ndarray) -> int:
        return int((share & upper & (labels[:, None] == labels[None, :])).sum())

    same = upper & (seeds[:, None] == seeds[None, :])
    if not same.any() or same.sum() == upper.sum():  # no pairs on one order, or none across
        return None
    observed = same_and_shared(seeds)
    rng = np.random.default_rng(0)
    hits = sum(same_and_shared(rng.permutation(seeds)) >= observed for _ in range(PERMUTATIONS))
    p = (1 + hits) / (1 + PERMUTATIONS)
    out = {
        "runs": label,
        "blown_up": n,
        "same_order_shared": observed,
        "same_order_pairs": int(same.sum()),
        "other_order_shared": int((share & upper & ~same).sum()),
        "other_order_pairs": int((upper & ~same).sum()),
        "p": p,
    }
    shown = f"p={p:.2g}" if hits else f"p<={p:.2g}, the smallest {PERMUTATIONS:,} draws give"
    out["statement"] = (
        f"{out['same_order_shared']} of {out['same_order_pairs']} pairs on one data order start a "
        f"blow-up at a common step, {out['other_order_shared']} of {out['other_order_pairs']} "
        f"pairs on different orders (permutation {shown})"
    )
    return out


def timing_tests(runs: pd.DataFrame) -> list[dict]:
    """timing_test over the tapered runs of each width, and of every width together where there
    are several (one data order draws the same batches at every width)."""
    tapered = runs[runs["variant"] != "baseline"]
    groups = [(at, f"d={w}") for w, at in tapered.groupby("width")]
    if len(groups) > 1:
        groups.insert(0, (tapered, "every width"))
    return [t for at, label in groups if (t := timing_test(at, label)) is not None]


def summarize(runs: pd.DataFrame) -> Summary:
    """The study's summary from its run table (read_records)."""
    grids, tests = crossings(runs)
    checked = ", ".join(sorted(set(runs["blowups_checked"])))
    widths = ", ".join(f"d={w}" for w in sorted(runs["width"].unique()))
    steps = ", ".join(f"{s:,}" for s in sorted(runs["steps"].unique()))
    records = f"{len(runs)} runs ({widths}; {steps} steps; blow-ups checked at {checked})"
    return Summary(
        rate_rows(runs), grids, tests, shared_triggers(runs), records, timing_tests(runs)
    )


# ---- the files ---------------------------------------------------------------------------------------


def _p(x: float) -> str:
    return "—" if pd.isna(x) else f"{x:.3g}"


def _gap(r: dict, which: str) -> str:
    mean = r[f"gap_{which}"]
    if pd.isna(mean):
        return "—" if not r["against"] else "no pair"
    lo, hi = r[f"gap_{which}_ci_low"], r[f"gap_{which}_ci_high"]
    ci = "no interval" if pd.isna(lo) else f"[{lo:+.2f}%, {hi:+.2f}%]"
    return f"{mean:+.2f}% {ci} ({int(r[f'n_pairs_{which}'])})"


def grid_markdown(grid: dict) -> list[str]:
    """An arm's grid: init seeds down, data seeds across ('.' clean, 'S' a finite spike, 'D'
    diverged, '—' no run), with the blow-ups per row and column."""
    cells = grid["cells"]
    inits = sorted({i for i, _ in cells})
    datas = sorted({j for _, j in cells})

    def count(keys) -> str:
        present = [cells[k] for k in keys if k in cells]
        return f"{sum(s != 'clean' for s in present)}/{len(present)}"

    rows = [
        [i, *(MARK[cells.get((i, j))] for j in datas), count([(i, j) for j in datas])]
        for i in inits
    ]
    rows.append(["blew up", *(count([(i, j) for i in inits]) for j in datas), count(list(cells))])
    return pipe_table(["init \\ data", *datas, "blew up"], rows)


SUMMARY_HEADER = ["Width", "Arm", "Runs", "Clean", "Blew up", "Diverged", "Clean rate [95% CP]",
                  "Baseline clean", "Fisher p", "Gap, clean pairs",
                  "Gap, blown-up runs at their last weights"]  # fmt: skip


def summary_markdown(summary: Summary) -> str:
    """summary.md: the rows, the grids with the crossing's statements, the shared triggers."""
    lines = [
        "# The stability study",
        "",
        f"Records: {summary.records}. A run blew up where a step's loss or gradient norm was not "
        "finite (it diverged: training stopped) or was a finite spike (a training loss above 2x "
        "the median of its last 20 logged losses, or a gradient norm above 100x the clip; "
        "training/blowups.py); clean otherwise. Clean rate: k/n with its exact 95% "
        "Clopper-Pearson interval; p: two-sided Fisher exact test of the clean rate against the "
        "baseline's at the same width. Gaps: validation loss against the baseline, paired by "
        "(init, data) seed pair, mean and 95% t interval (pairs).",
        "",
    ]
    rows = []
    for r in summary.rows.to_dict("records"):
        rate = f"{r['clean_rate']:.2f} [{r['clean_ci_low']:.2f}, {r['clean_ci_high']:.2f}]"
        rows.append([f"d={r['width']}", r["label"], r["n_runs"], r["n_clean"], r["n_blowup"],
                     r["n_diverged"], rate, r["against_clean"] or "—", _p(r["fisher_p"]),
                     _gap(r, "clean"), _gap(r, "last_weights")])  # fmt: skip
    lines += pipe_table(SUMMARY_HEADER, rows)
    lines.append("")
    for r in summary.rows.to_dict("records"):
        where = f"d={r['width']}, {r['label']}"
        if r["blew_up"]:
            lines.append(f"- Blew up, {where}: {r['blew_up']}.")
        for which, text in (("clean", "clean pairs"), ("last_weights", "at last weights")):
            if r[f"left_out_{which}"]:
                lines.append(f"- Left out of the gap ({text}), {where}: {r[f'left_out_{which}']}.")
    lines += ["", "## Data order or initialisation?", ""]
    lines.append(
        "Each grid: init seeds down, data-order seeds across; '.' clean, 'S' a finite spike, 'D' "
        "diverged, '—' no run. The test: given how many runs blew up, every placement in the grid "
        "equally likely (exact); its statistic sum_j c_j^2 / n_j over the columns (data seeds) or "
        "the rows (init seeds). 'The smallest p' is what the grid gives when every blow-up gathers "
        "as far as it can: a p cannot go below it, whatever the cause."
    )
    tests = {(t["width"], tuple(t["arms"])): t for t in summary.crossings}
    for grid in summary.grids:
        test = tests.get((grid["width"], (grid["arm"],)))
        if test is None:
            continue
        lines += ["", f"### d={grid['width']}, {VARIANTS[grid['arm']]['label']}", ""]
        lines += grid_markdown(grid)
        lines += ["", _test_line(test)]
    for test in summary.crossings:
        if len(test["arms"]) > 1:
            labels = ", ".join(VARIANTS[a]["label"] for a in test["arms"])
            lines += ["", f"### d={test['width']}, the tapered arms pooled ({labels})", ""]
            lines.append(_test_line(test))
    lines += ["", "## Shared triggers", ""]
    for t in summary.timing:
        lines.append(f"- Tapered runs, {t['runs']}: {t['statement']}.")
    lines += [""] if summary.timing else []
    if summary.triggers:
        lines.append(
            "Blow-ups starting at the same step in runs of one data seed (the same batch):"
        )
        lines.append("")
        for t in summary.triggers:
            lines.append(
                f"- data seed {t['data_seed']}, step {t['step']:,}: {'; '.join(t['runs'])}"
            )
    else:
        lines.append("No two runs of one data seed start a blow-up at the same step.")
    return "\n".join(lines) + "\n"


def _test_line(test: dict) -> str:
    per = lambda d: ", ".join(f"{k}: {v}" for k, v in d.items())  # noqa: E731
    return (
        f"Blew up per data seed {per(test['by_data_seed'])}; per init seed "
        f"{per(test['by_init_seed'])} ({test['blowups']} of {test['runs']} runs). By data seed "
        f"p={test['p_data']:.3g} (the smallest p: {test['min_p_data']:.3g}); by init seed "
        f"p={test['p_init']:.3g} (the smallest p: {test['min_p_init']:.3g}). "
        f"{test['statement'][0].upper()}{test['statement'][1:]}."
    )


def _json_grid(grid: dict) -> dict:
    cells = [
        {"init_seed": i, "data_seed": j, "ended": s} for (i, j), s in sorted(grid["cells"].items())
    ]
    return {"width": grid["width"], "arm": grid["arm"], "cells": cells}


def write_summary(summary: Summary, out: Path, made_by: str = "") -> list[Path]:
    """summary.csv, summary.md and summary.json in `out`, as one output set (summary.set.json)."""
    if summary.rows.empty:
        raise ValueError("the records give no arm a row")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = OutputSet(marker_path(out / "summary"), "tapernorm stability summary")
    files.add(out / "summary.csv", summary.rows.to_csv(index=False).encode())
    files.add(out / "summary.md", summary_markdown(summary).encode())
    record = {
        "made_by": made_by,
        "made": made(every_distribution=False),
        "records": summary.records,
        "rows": summary.rows.to_dict("records"),
        "grids": [_json_grid(g) for g in summary.grids],
        "crossings": summary.crossings,
        "shared_triggers": summary.triggers,
        "timing": summary.timing,
    }
    files.add(out / "summary.json", json_bytes(record))
    return files.commit()
