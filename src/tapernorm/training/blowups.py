"""Blow-ups: every optimizer step checked for a non-finite value and for a finite spike.

A step blows up when its loss or gradient norm is not finite (a divergence: the run stops, loop.py),
or when it is finite but far out of line (a spike: the run goes on, and it is recorded):
- its training loss is above LOSS_FACTOR times the reference, the median of the last
  REFERENCE_WINDOW logged training losses (those in metrics.jsonl: every log.every steps), once
  there are MIN_REFERENCE of them;
- or its gradient norm before clipping is above GRAD_FACTOR times the clip (train.grad_clip).

Why these numbers: over the 75 committed records of the scaling study and its ablation, the
runs that did not blow up reach at most 1.41x their reference loss and 25x the clip at a logged
step, and those that did reach 6,900x and 8.4e16x (results/cpu/scaling). Twice the loss and a
hundred times the clip sit well between. The reference is made of logged losses only, so a run
resumed from a checkpoint or branched from its trunk (whose metrics.jsonl holds them) checks
every step exactly as an uninterrupted run does, and the committed records, which hold only the
logged steps, are scored by the same rule at those steps (`rescore`).

Each event is one metrics.jsonl record {"step": k, "blowup": {...}}: its kind, gate, loss, gradient
norm, reference, and the batch (data seed and window starts of every micro-batch) that a replay
(`tapernorm replay`) feeds the model again. eval.json counts them (`summary`).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable

LOSS_FACTOR = 2.0  # k: a loss above k x the median of the recent logged losses is a spike
GRAD_FACTOR = 100.0  # m: a gradient norm above m x the clip is a spike
REFERENCE_WINDOW = 20  # logged losses in the reference median (200 steps at log.every 10)
MIN_REFERENCE = 5  # no loss spike is judged before this many logged losses
KEPT_EVENTS = 20  # events listed in eval.json (all are counted, and all are in metrics.jsonl)

KINDS = ("nonfinite_loss", "nonfinite_grad", "loss_spike", "grad_spike")


class SpikeDetector:
    """The rule above, fed one step at a time: `check` a step, then `logged` for a logged loss."""

    def __init__(self, clip: float) -> None:
        self.clip = clip  # train.clip: inf without clipping (then no gradient spike is judged)
        self.losses: deque[float] = deque(maxlen=REFERENCE_WINDOW)

    @classmethod
    def from_records(cls, clip: float, records: Iterable[dict]) -> SpikeDetector:
        """A detector whose reference holds the logged losses of `records` (metrics.jsonl's, up to
        the step a run resumes or branches from)."""
        detector = cls(clip)
        for record in records:
            if "gate" in record and "loss" in record:
                detector.logged(record["loss"])
        return detector

    def reference(self) -> float | None:
        """The median of the recent logged losses (None before MIN_REFERENCE of them)."""
        if len(self.losses) < MIN_REFERENCE:
            return None
        return statistics.median(self.losses)

    def kind(self, loss: float, grad_norm: float, aux: float = 0.0) -> str | None:
        """Which blow-up a step with this training loss (cross-entropy), gradient norm and scale
        loss is (KINDS), or None."""
        if not math.isfinite(loss + aux):
            return "nonfinite_loss"
        if not math.isfinite(grad_norm):
            return "nonfinite_grad"
        ref = self.reference()
        if ref is not None and loss > LOSS_FACTOR * ref:
            return "loss_spike"
        if grad_norm > GRAD_FACTOR * self.clip:
            return "grad_spike"
        return None

    def check(self, gate: float, loss: float, grad_norm: float, aux: float = 0.0) -> dict | None:
        """The event of a step at gate `gate`, or None (the caller adds its step and batch)."""
        kind = self.kind(loss, grad_norm, aux)
        if kind is None:
            return None
        return {
            "kind": kind,
            "gate": gate,
            "loss": _number(loss),
            "grad_norm": _number(grad_norm),
            "reference": self.reference(),
        }

    def logged(self, loss: float | None) -> None:
        """A logged step's training loss joins the reference (a non-finite one does not: an event,
        not a number, whether read as NaN or as the null a record writes for it)."""
        if isinstance(loss, (int, float)) and not isinstance(loss, bool) and math.isfinite(loss):
            self.losses.append(float(loss))


def _number(x: float) -> float | str:
    """JSON has no inf or NaN: those as the strings "inf", "-inf", "nan"."""
    return x if math.isfinite(x) else str(x)


def summary(events: list[dict]) -> dict:
    """What eval.json says of a run's blow-up events (metrics.jsonl records {"step", "blowup"}):
    whether it blew up, how many steps did, the first, and the first KEPT_EVENTS events."""
    return {
        "blew_up": bool(events),
        "blowups": len(events),
        "first_blowup_step": events[0]["step"] if events else None,
        "blowup_events": events[:KEPT_EVENTS],
    }


def events_of(records: Iterable[dict]) -> list[dict]:
    """The blow-up events among metrics records, in step order."""
    return [r for r in records if "blowup" in r]


def rescore(records: Iterable[dict], clip: float) -> list[dict]:
    """The blow-ups of a record made before steps were checked: the rule applied to its logged
    steps only (a spike between two logged steps is not in the record, so cannot be found)."""
    detector, events = SpikeDetector(clip), []
    for record in records:
        if "gate" not in record or "loss" not in record:
            continue
        loss = _float(record["loss"])
        grad = _float(record.get("grad_norm", 0.0))
        event = detector.check(record["gate"], loss, grad, _float(record.get("aux_loss", 0.0)))
        if event is not None:
            events.append({"step": record["step"], "blowup": event})
        detector.logged(loss)
    return events


def _float(x: float | str | None) -> float:
    return float("nan") if x is None else float(x)
