"""The timing kit every benchmark shares: clocks, interleaved rounds, dtypes and matmul precision,
the machine a result was measured on, and CSV rows written as they come.

Variants run round-robin (`paired_rounds`), one call each per round, so drift hits all alike; what
the rounds say (paired speedups, and whether to believe them) is bench.trust's. Nothing here
asserts a timing; the numbers are reported, never tested.
"""

from __future__ import annotations

import contextlib
import csv
import os
import platform
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from ..runtime.provenance import cpu_name  # the one reader of the CPU name

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def environment(device: str | torch.device | None = None) -> dict:
    """Device, versions and threads, recorded beside every benchmark result."""
    cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
    return {
        "device": torch.cuda.get_device_name(device) if cuda else cpu_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


class CsvRows:
    """Rows appended to a CSV file as they come, each call's flushed to disk before it returns, so
    a benchmark stopped at a time limit keeps the cells it finished. The file is emptied first; the
    columns are the first row's (later rows may leave some out, not add any)."""

    def __init__(self, path: str | Path):
        self.path, self.columns = Path(path), None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def __call__(self, rows: list[dict]) -> None:
        if not rows:
            return
        with self.path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns or list(rows[0]))
            if self.columns is None:
                writer.writeheader()
                self.columns = list(rows[0])
            writer.writerows(rows)
            f.flush()
            os.fsync(f.fileno())


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """A dtype by name (a key of DTYPES), or the dtype itself."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


@contextlib.contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """torch.set_float32_matmul_precision inside the block ("high" = TF32 on a GPU)."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def timing_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """TF32 matmuls on a GPU while timing (the paper's setting); the CPU is left as it is."""
    return matmul_precision("high") if device.type == "cuda" else contextlib.nullcontext()


class Clock:
    """Time stamps: perf_counter on the CPU; CUDA events on a GPU, so a span is the GPU's work in
    stream order, read after one synchronization at its end."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def stamp(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        if not self.cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def timed(
    fn: Callable[[], object], key: str = "s", sync: Callable[[], None] | None = None
) -> Callable[[], dict[str, float]]:
    """A run for paired_rounds: calls `fn` and returns {key: the wall-clock seconds it took}, with
    `sync` (e.g. Clock.sync) before and after, so the time is the device's. The run keeps `fn`'s
    last result as its `result` attribute."""

    def call() -> dict[str, float]:
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        result = fn()
        if sync is not None:
            sync()
        seconds = time.perf_counter() - t0
        call.result = result
        return {key: seconds}

    return call


def paired_rounds(
    runs: dict[str, Callable[[], dict[str, float]]],
    rounds: int,
    warmup: int,
    on_round: Callable[[], None] = lambda: None,
) -> dict[str, dict[str, list[float]]]:
    """Call every run `warmup` times, then `rounds` times round-robin, each round starting one name
    later (so no variant always follows the same one). A run returns {quantity: seconds}; the result
    is, per name and quantity, the list over rounds. `on_round` is called after each round, warm-up
    rounds too, between the timed calls (a progress count)."""
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
        on_round()
    times: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for r in range(rounds):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            for key, seconds in runs[name]().items():
                times[name].setdefault(key, []).append(seconds)
        on_round()
    return times
