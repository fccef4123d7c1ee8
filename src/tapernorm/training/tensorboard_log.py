"""A training run's optional TensorBoard log (`log.tensorboard: true`; off by default): rank 0
writes the numbers of every metrics.jsonl record, as it writes the record, to <out>/tensorboard/
(`tensorboard --logdir results/runs` shows the runs' curves while they train). metrics.jsonl stays
the record that the analysis reads; this is a view of it.

The `tensorboard` package is an optional extra (pip install tensorboard, or the checkout's
`.[tensorboard]`): a run that asks for the log without it stops before it starts, saying so.
Whether the log is written is not part of a run's identity (identity.VIEW_KEYS): turning it on
or off resumes a run instead of starting it over.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

from ..config import ConfigError
from ..config.run import RunConfig

TENSORBOARD_DIR = "tensorboard"  # in the run directory


def check_available(cfg: RunConfig) -> None:
    """ConfigError (one line, before the run starts) if the config asks for the log and the
    tensorboard package is not installed."""
    if cfg.log.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            "log.tensorboard is true but the tensorboard package is not installed: "
            "pip install tensorboard (or set log.tensorboard: false)"
        )


def scalars(record: dict, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(tag, value) of each number of a metrics record but its step; a nested entry (c per norm)
    as outer/inner, TensorBoard's grouping."""
    for key, value in record.items():
        if key == "step" and not prefix:
            continue
        if isinstance(value, dict):
            yield from scalars(value, f"{prefix}{key}/")
        elif isinstance(value, (int, float)):
            yield prefix + key, float(value)


class TensorBoardLog:
    """<out>/tensorboard/ open for the scalars of the records of the steps after `first_step` (a
    resumed run hides what an earlier process wrote past its checkpoint: purge_step)."""

    def __init__(self, out: Path, first_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(out / TENSORBOARD_DIR), purge_step=first_step + 1)

    def write(self, record: dict) -> None:
        for tag, value in scalars(record):
            self.writer.add_scalar(tag, value, record["step"])

    def close(self) -> None:
        self.writer.close()
