"""A run that diverged, as its own outputs record it, and the sentence every later step gives when it
skips that run.

A training run that meets a non-finite loss or gradient stops, keeps the weights of its last good
checkpoint (or its init) and writes eval.json with `diverged: true`, `diverged_step` and
`weights_step` (loop.finish). Those weights are not a trained model of the variant: the steps after
the run (fold, the folded model's evaluation, the Hugging Face export, the benchmarks) skip it with
`Diverged.reason()` instead of failing, so one bad run does not stop the rest of the pipeline; the
analysis excludes it and names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..runtime import bookkeeping
from ..variants import PROTOCOLS, VARIANTS


@dataclass(frozen=True)
class Diverged:
    """What a diverged run's eval.json and config.json say about it."""

    name: str  # the run's name (eval.json), e.g. "pretrain/internal_aux-d512-s0"
    step: int | None  # the first step whose loss or gradient norm was not finite
    weights_step: int  # the step of the weights it kept (0: its init)
    label: str  # e.g. "Internal-Taper (+aux) d512 s0" (variant or protocol, width, seed)

    def rolled_back(self) -> str:
        """'weights rolled back to step K' (', the init' for step 0)."""
        return f"weights rolled back to step {self.weights_step}" + (
            ", the init" if self.weights_step == 0 else ""
        )

    def reason(self) -> str:
        """'run NAME diverged at step N (weights rolled back to step K)': why a step skipped it."""
        return f"run {self.name} diverged at step {self.step} ({self.rolled_back()})"

    def not_timed(self) -> str:
        """'LABEL diverged at step N: not timed': a benchmark's note on the model it skipped."""
        return f"{self.label} diverged at step {self.step}: not timed"


def run_label(cfg: dict) -> str:
    """'Internal-Taper (+aux) d512 s0' of a run's config.json: its variant's (or fine-tuning
    protocol's) label, width and seed; the run's name where it has neither."""
    meta = cfg.get("meta") or {}
    variant, protocol = cfg.get("variant"), meta.get("protocol")
    if variant in VARIANTS:
        label = VARIANTS[variant]["label"]
    elif protocol in PROTOCOLS:
        label = f"{PROTOCOLS[protocol]['label']} {meta.get('model', '')}".rstrip()
    else:
        return str(cfg.get("name", "?"))
    width, seed = (cfg.get("model") or {}).get("n_embd"), cfg.get("seed")
    if variant in VARIANTS and width is not None and seed is not None:
        label += f" d{width} s{seed}"
    return label


def diverged(run_dir: str | Path) -> Diverged | None:
    """The divergence of the run in `run_dir` as its eval.json records it; None if it finished
    without diverging, or the directory holds a model but no run record (no eval.json). A damaged
    eval.json or config.json is a BookkeepingError naming it (bookkeeping.RUN_RESULT, RUN_RECORD)."""
    run_dir = Path(run_dir)
    if not (run_dir / "eval.json").is_file():
        return None
    result = bookkeeping.read(bookkeeping.RUN_RESULT, run_dir / "eval.json")
    if not result.get("diverged"):
        return None
    config = run_dir / "config.json"
    cfg = bookkeeping.read(bookkeeping.RUN_RECORD, config) if config.is_file() else {}
    name = result.get("name") or cfg.get("name") or run_dir.name
    return Diverged(
        name=name,
        step=result.get("diverged_step"),
        weights_step=int(result.get("weights_step") or 0),
        label=run_label({"name": name, **cfg}),
    )
