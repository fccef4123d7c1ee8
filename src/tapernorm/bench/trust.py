"""What a benchmark cell's rounds say, and whether to believe them.

One statistic behind every column: a variant's speedup is the median over interleaved rounds of
t_baseline / t_variant (paired, so drift hits both), its spread the quartiles of those ratios, and
its time and throughput the baseline's median time divided by that speedup, so a table's
throughputs and speedups always agree. The variant's own median time is kept beside it
(`own_median_ms`), and its dispersion (`spread`: interquartile range over median of its times).

A cell's timing is *disturbed* when other processes used more than LOAD_LIMIT cores while it ran
(LoadMeter: the machine's busy CPU time minus this process's), or when a variant's per-round
speedups spread wider than SPREAD_LIMIT of their median (what a load that comes and goes does).
Disturbed cells are flagged in the CSV, the tables, figure 5 and claim 7, never silently averaged.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

# cores of other work: the idle default run measured 0.00-0.08 beside its cells; one busy loop is ~1
LOAD_LIMIT = 0.25
# (q3 - q1) / median of a variant's per-round speedups: idle CPU cells measured up to 0.45
SPREAD_LIMIT = 0.75
RERUN = (
    "rerun it on an idle machine: snakemake --cores all --forcerun bench_forward bench_decode "
    "(or the tapernorm bench command in the log)"
)


def _busy_cpu_seconds() -> float | None:
    """CPU seconds all processes have used since boot (Linux /proc/stat; steal time counts: a
    hypervisor that takes the CPU disturbs as much as a neighbour), None where unknown."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system  # all of this process's threads


class LoadMeter:
    """Cores other processes kept busy while the `with` block ran: (the machine's CPU time - this
    process's) / wall time; None where the machine's CPU time cannot be read."""

    def __enter__(self) -> LoadMeter:
        self.cores: float | None = None
        self._start = (time.perf_counter(), _busy_cpu_seconds(), _own_cpu_seconds())
        return self

    def __exit__(self, *exc) -> None:
        wall0, busy0, own0 = self._start
        busy1, wall = _busy_cpu_seconds(), time.perf_counter() - wall0
        if busy0 is None or busy1 is None or wall <= 0:
            return
        self.cores = max(0.0, (busy1 - busy0) - (_own_cpu_seconds() - own0)) / wall


def load_now(seconds: float = 1.0) -> float | None:
    """Cores other processes keep busy, sampled over `seconds` of sleep."""
    with LoadMeter() as meter:
        time.sleep(seconds)
    return meter.cores


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


@dataclass(frozen=True)
class Paired:
    """One variant's times over a cell's rounds, against the baseline's in the same rounds."""

    seconds: float  # the baseline's median / speedup: the time behind the throughput column
    speedup: float  # median over rounds of t_baseline / t_variant
    speedup_q1: float
    speedup_q3: float
    own_median: float  # the variant's own median time
    spread: float  # (q3 - q1) / median of the variant's own times

    @property
    def speedup_spread(self) -> float:
        return (self.speedup_q3 - self.speedup_q1) / self.speedup


def paired_speedup(base: list[float], other: list[float]) -> tuple[float, float, float]:
    """Median and quartiles of the per-round ratios base / other (> 1: `other` is faster)."""
    q1, q2, q3 = _quartiles([b / o for b, o in zip(base, other, strict=True)])
    return q2, q1, q3


def paired(base: list[float], times: list[float]) -> Paired:
    """Paired summary of `times` against `base` (the same rounds, in order)."""
    q2, q1, q3 = paired_speedup(base, times)
    o1, own, o3 = _quartiles(times)
    return Paired(statistics.median(base) / q2, q2, q1, q3, own, (o3 - o1) / own)


def paired_cell(times: dict[str, list[float]]) -> dict[str, Paired]:
    """paired() of every variant against the first (the baseline, speedup 1)."""
    base = next(iter(times.values()))
    return {name: paired(base, t) for name, t in times.items()}


def disturbance(cell: dict[str, Paired], load: float | None) -> str:
    """Why the cell's timing cannot be trusted, '' when it can."""
    why = []
    if load is not None and load > LOAD_LIMIT:
        why.append(f"other processes used {load:.2f} cores (limit {LOAD_LIMIT})")
    wide = {n: p.speedup_spread for n, p in cell.items() if p.speedup_spread > SPREAD_LIMIT}
    if wide:
        worst = max(wide, key=wide.get)
        why.append(
            f"per-round speedups of {', '.join(wide)} spread over {wide[worst]:.0%} of their median "
            f"(limit {SPREAD_LIMIT:.0%})"
        )
    return "; ".join(why)


def trust_columns(p: Paired, load: float | None, load_before: float | None, why: str) -> dict:
    """The CSV columns a row carries about how far its timing can be trusted."""
    return {
        "speedup": p.speedup,
        "speedup_q1": p.speedup_q1,
        "speedup_q3": p.speedup_q3,
        "own_median_ms": 1e3 * p.own_median,
        "spread": p.spread,
        "load": load,
        "load_before": load_before,
        "disturbed": bool(why),
        "disturbed_why": why,
    }
