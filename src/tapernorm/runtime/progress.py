"""Progress of a long step on stderr: data preparation (documents encoded, text read for the
tokenizer), evaluation (batches scored) and the benchmarks (rounds timed).

On a terminal, a tqdm bar; elsewhere (a Snakemake log, a pipe, pytest) a plain line at most every
`every` seconds through the logger `tapernorm.runtime.progress` at INFO, which the commands print on stderr
(a short step prints none). It never writes to stdout, and it only counts: nothing it does reaches
what is computed or written. Training has its own, with the loss (training.loop.Progress).
"""

from __future__ import annotations

import logging
import sys
import time

from tqdm import tqdm

log = logging.getLogger(__name__)

EVERY = 30.0  # seconds between two log lines off a terminal


def clock(seconds: float) -> str:
    """A duration as m:ss, or h:mm:ss from an hour on."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts `unit`s done of `total` (None: unknown), and other quantities beside them (tokens);
    shows them as the module docstring says. A context manager (the bar closes at the end)."""

    def __init__(
        self, desc: str, total: int | None = None, unit: str = "it", every: float | None = None
    ):
        self.desc, self.total, self.unit = desc, total, unit
        self.every = EVERY if every is None else every
        self.done, self.counts = 0, {}
        self.bar = tqdm(
            total=total, desc=desc, unit=unit, file=sys.stderr, disable=not sys.stderr.isatty()
        )
        self.start = self.last = time.perf_counter()

    def update(self, n: int = 1, **counts: int) -> None:
        """`n` more units done, and `counts` more of the quantities beside them."""
        self.done += n
        for key, value in counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        if not self.bar.disable:
            if counts:
                self.bar.set_postfix(self.counts, refresh=False)
            self.bar.update(n)
            return
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            log.info("%s", self.line(now - self.start))

    def line(self, elapsed: float) -> str:
        """'desc: done/total unit (rate/s), counts, elapsed m:ss, ETA m:ss'."""
        done = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        parts = [f"{self.desc}: {done} {self.unit} ({self.done / max(elapsed, 1e-9):.3g}/s)"]
        parts += [f"{value} {key}" for key, value in self.counts.items()]
        parts.append(f"elapsed {clock(elapsed)}")
        if self.total and self.done:
            parts.append(f"ETA {clock(elapsed / self.done * max(self.total - self.done, 0))}")
        return ", ".join(parts)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
