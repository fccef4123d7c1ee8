"""The rule that turns interleaved timing rounds into a speed verdict, one for every speed claim:
claim 7 (the folded model against the RMSNorm baseline) and the speed half of the TaperNorm-vs-DyT
row (the folded model against DyT).

The statistic. In one run of the benchmarks, a cell's speedup of `a` over `b` is the median over its
interleaved rounds of the per-round ratio t_b / t_a (bench.trust; > 1: `a` is faster); the run's
ratio is the geometric mean of that speedup over the run's grid of cells (forward and decode cells
alike, each cell once). One run is one unit: its cells were timed in one sitting on one machine, so
they share its state and are not independent; separate runs are.

The interval. A 95% t interval of the mean log ratio over the runs of one host class: runs with the
same benchmark setting (tables.inference.SETTING: device, CPU or GPU model, dtype, torch version,
threads, model size) and the same grid of cells. They are this run and, pooled with it, the runs
given to `tapernorm claims --bench-pool` (the committed reference runs, results/reference/*), each
measurement once: a pooled run identical to this one is this one, and a pooled run with a disturbed
cell (bench.trust) is left out and named.

The decision, at MARGIN (3%) and 95% confidence:
- faster: the interval lies wholly above 1.03: `a` is faster by at least 3%;
- slower: it lies wholly below 1/1.03: `a` is slower by at least 3%;
- within the margin: it lies wholly inside (1/1.03, 1.03): no gain of 3% either way;
- not resolved: it crosses an edge, or the class has fewer than MIN_RUNS runs.

Why pooled over runs. The rounds of one run measure that sitting's noise only. The committed
reference runs showed reruns of one commit on one host class moving a cell's speedup by more than
its rounds' interquartile range (a cell "faster" in one run was "slower" in its twin), and claim 7
read "partly" in one run and "not resolved" in its same-commit twin; only the spread between runs
says what a rerun can do, and a verdict that one rerun must not reverse needs it. MIN_RUNS: with two
runs the interval's width rests on one degree of freedom (two runs that agree by chance would claim
a precision no rerun showed). Why a margin: a gain under 3% of forward or decode time is within what
a change of machine, thread placement or library moves, far below the paper's smallest reported
folded gain (v1 Table 3), and without a margin enough pooled runs would call any difference,
however small, faster or slower. The pooled runs are of different commits: the pool assumes that
the benchmarked models' speed did not change between them (their setting is checked, their code is
not); a host class new to the pool starts its own, and is not resolved until it has MIN_RUNS runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .stats import t_interval
from .tables.inference import SETTING, timed

MARGIN = 0.03  # the smallest speed difference judged: 3% either way
CONFIDENCE = 0.95  # the t interval's coverage (stats.t975)
MIN_RUNS = 3
FASTER, SLOWER, WITHIN, NOT_RESOLVED = "faster", "slower", "within the margin", "not resolved"
RULE = (
    f"speed rule (analysis/speed_rule.py): the ratio of a run is the geometric mean over its grid "
    f"of benchmark cells of each cell's median per-round speedup; a {CONFIDENCE:.0%} t interval of "
    f"that ratio over the runs of one host class (this run and the --bench-pool runs of the same "
    f"setting and grid, disturbed runs left out; at least {MIN_RUNS} runs) decides: faster if it "
    f"lies wholly above {1 + MARGIN:g}×, slower if wholly below 1/{1 + MARGIN:g}×, within the "
    f"±{MARGIN:.0%} margin if wholly inside it, else not resolved"
)


@dataclass(frozen=True)
class Decision:
    """The rule's verdict on `a` against `b` over the runs of one host class."""

    state: str  # FASTER, SLOWER, WITHIN or NOT_RESOLVED
    runs: int  # runs judged (this one first)
    ratio: float  # geometric mean over the runs of their grid ratios (nan without runs)
    low: float  # the interval's ends (nan with fewer than two runs)
    high: float
    left_out: tuple[str, ...] = ()  # pooled runs not used, each with why

    def text(self, a: str, b: str) -> str:
        """'folded/baseline 1.028× over the grid (95% interval 1.019-1.038×, 10 runs)', and where
        the class has too few runs, that the rule needs more."""
        if not self.runs:
            return f"{a}/{b}: no run with both timed"
        interval = (
            f"{CONFIDENCE:.0%} interval {self.low:.3f}-{self.high:.3f}×, "
            if math.isfinite(self.low)
            else ""
        )
        runs = f"{self.runs} run" + ("s" if self.runs > 1 else "")
        if self.runs < MIN_RUNS:
            runs += f"; the rule needs {MIN_RUNS} runs of one host class"
        return f"{a}/{b} {self.ratio:.3f}× over the grid ({interval}{runs})"

    def said(self, a: str, b: str) -> str:
        """text() and the state: '... (..., 10 runs): not resolved'."""
        return f"{self.text(a, b)}: {self.state}"


def decide(log_ratios: Sequence[float]) -> Decision:
    """The rule on the runs' log grid ratios (one per run)."""
    n = len(log_ratios)
    mean, lo, hi = t_interval(log_ratios)
    edge = math.log1p(MARGIN)
    if n < MIN_RUNS:
        state = NOT_RESOLVED
    elif lo >= edge:
        state = FASTER
    elif hi <= -edge:
        state = SLOWER
    elif -edge < lo and hi < edge:
        state = WITHIN
    else:
        state = NOT_RESOLVED
    return Decision(state, n, math.exp(mean), math.exp(lo), math.exp(hi))


def _cell_keys(rows: pd.DataFrame) -> pd.Series:
    """'forward/eager/1/128' or 'decode/compiled/4/128' per row: the cell it belongs to."""
    length = rows["seq_len"] if "seq_len" in rows else pd.Series(math.nan, index=rows.index)
    if "prompt_len" in rows:
        length = length.where(rows["benchmark"] == "forward", rows["prompt_len"])
    return (
        rows["benchmark"].astype(str)
        + "/"
        + rows["mode"].astype(str)
        + "/"
        + rows["batch"].astype(int).astype(str)
        + "/"
        + length.astype(int).astype(str)
    )


def cell_ratios(rows: pd.DataFrame, a: str, b: str) -> pd.Series:
    """Per cell with both `a` and `b` timed: a's speedup over b (each cell's median per-round
    speedup over the baseline, a's over b's: the baseline's time cancels)."""
    rows = timed(rows)
    keyed = rows.assign(cell=_cell_keys(rows)).set_index("cell")
    mine, other = (keyed[keyed["variant"] == v]["speedup"] for v in (a, b))
    both = mine.index.intersection(other.index)
    return (mine.loc[both] / other.loc[both]).sort_index()


def grid_log_ratio(rows: pd.DataFrame, a: str, b: str) -> float:
    """The run's log grid ratio: the mean over its cells of log(a's speedup / b's)."""
    ratios = cell_ratios(rows, a, b)
    if ratios.empty:
        raise ValueError(f"no benchmark cell has both {a} and {b} timed")
    return float(sum(math.log(r) for r in ratios) / len(ratios))


def host_class(rows: pd.DataFrame) -> tuple:
    """The benchmark setting that makes runs of one host class (tables.inference.SETTING)."""
    settings = timed(rows)[SETTING].drop_duplicates()
    if len(settings) != 1:
        raise ValueError(f"a run's benchmark rows have {len(settings)} settings; give one run")
    return tuple(str(v) for v in settings.iloc[0])


def _fingerprint(rows: pd.DataFrame) -> tuple:
    """What identifies one measurement: every timed row's cell, variant and times."""
    rows = timed(rows)
    times = [c for c in ("speedup", "speedup_q1", "speedup_q3", "own_median_ms") if c in rows]
    keys = zip(
        _cell_keys(rows), rows["variant"].astype(str), *(rows[c] for c in times), strict=True
    )
    return tuple(sorted((c, v, *map(float, t)) for c, v, *t in keys))


def pooled(
    own: pd.DataFrame, pool: Sequence[tuple[str, pd.DataFrame]]
) -> tuple[list[pd.DataFrame], list[str], list[str]]:
    """(this run and the pooled runs of its host class and grid, each measurement once; the names
    of the pooled runs used; the pooled runs of the class left out, each with why). Runs of other
    host classes or grids are not of the class: not named."""
    cls, cells = host_class(own), set(_cell_keys(timed(own)))
    runs, seen, used, left_out = [own], {_fingerprint(own)}, [], []
    for name, rows in pool:
        rows = timed(rows)
        if rows.empty or host_class(rows) != cls or set(_cell_keys(rows)) != cells:
            continue
        fingerprint = _fingerprint(rows)
        if fingerprint in seen:  # this run itself, or a copy of a pooled one
            continue
        seen.add(fingerprint)
        if "disturbed" in rows and rows["disturbed"].astype(bool).any():
            left_out.append(f"{name} (disturbed timing)")
            continue
        runs.append(rows)
        used.append(name)
    return runs, used, left_out


def judge(
    own: pd.DataFrame, pool: Sequence[tuple[str, pd.DataFrame]], a: str, b: str
) -> tuple[Decision, list[str]]:
    """The rule on `a` against `b` over this run's host class: (the decision, the pooled runs
    used)."""
    runs, used, left_out = pooled(own, pool)
    have = [r for r in runs if not cell_ratios(r, a, b).empty]
    decision = decide([grid_log_ratio(r, a, b) for r in have])
    return dataclasses.replace(decision, left_out=tuple(left_out)), used


def pool_note(used: Sequence[str], left_out: Sequence[str]) -> str:
    """'Pooled with 9 runs of this host class: a, b, ...; left out: c (disturbed timing).'"""
    if not used and not left_out:
        return "No other run of this host class was pooled (--bench-pool)."
    out = f"Pooled with {len(used)} run(s) of this host class" + (
        f": {', '.join(used)}" if used else ""
    )
    return out + (f"; left out: {', '.join(left_out)}." if left_out else ".")


def _run_name(directory: Path) -> str:
    """A pooled run's name: the run's directory for a run's results/bench, else the path."""
    if directory.name == "bench" and directory.parent.name == "results":
        return directory.parent.parent.name
    return str(directory)


def load_pool(directories: Sequence[str | Path]) -> list[tuple[str, pd.DataFrame]]:
    """(name, timed rows) of each directory's benchmark CSVs (forward.csv, decode*.csv: one run's
    `tapernorm bench` outputs), for `tapernorm claims --bench-pool`."""
    from .tables.inference import load_bench

    out = []
    for directory in map(Path, directories):
        if not directory.is_dir():
            raise FileNotFoundError(f"benchmark pool directory {directory} does not exist")
        files = sorted(directory.glob("forward*.csv")) + sorted(directory.glob("decode*.csv"))
        if not files:
            raise ValueError(f"benchmark pool directory {directory} has no forward or decode CSV")
        out.append((_run_name(directory), timed(load_bench(files))))
    return out
