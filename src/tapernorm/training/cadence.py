"""Training's cadence: what acts at an optimizer step, as a run config's `log` section and
train.steps say (and the step a process stops after, if it is told one).

A step is logged (its record written: step 1, every log.every-th, the last, and any step at which
something froze or was removed), evaluated (every log.eval_every-th but the last, whose evaluation
is the final one), checkpointed (every log.ckpt_every-th and the last), or the one the process
stops after; any of these is a boundary, where the loop reads what the steps left on the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config.run import RunConfig


@dataclass(frozen=True)
class Acts:
    """What acts at one step."""

    logged: bool
    evaluated: bool
    checkpointed: bool
    stopped: bool  # the step the process stops after (stop_after)

    @property
    def boundary(self) -> bool:
        """Whether anything acts: the loop reads the device here."""
        return self.logged or self.evaluated or self.checkpointed or self.stopped


@dataclass(frozen=True)
class Cadence:
    """When a run's steps 1 ... steps are logged, evaluated and checkpointed, and where it stops."""

    steps: int  # train.steps: the last step
    log_every: int
    eval_every: int  # 0: no periodic evaluation (only the final one)
    ckpt_every: int
    stop_after: int | None = None  # stop after this step (None: run to the last)

    @classmethod
    def of(cls, cfg: RunConfig, stop_after: int | None = None) -> Cadence:
        log = cfg.log
        return cls(cfg.train.steps, log.every, log.eval_every, log.ckpt_every, stop_after)

    def at(self, step: int, events: bool) -> Acts:
        """What acts at `step`; `events`: something froze or was removed at it (always logged)."""
        last = step == self.steps
        return Acts(
            logged=step == 1 or step % self.log_every == 0 or last or events,
            evaluated=bool(self.eval_every) and step % self.eval_every == 0 and step < self.steps,
            checkpointed=step % self.ckpt_every == 0 or last,
            stopped=self.stop_after is not None and step >= self.stop_after,
        )
