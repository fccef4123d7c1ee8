"""A training batch replayed through a model: where along the blocks does its residual stream grow?

`tapernorm replay RUN_DIR --step K` draws again the batch that run RUN_DIR trained on at optimizer
step K (batch_generator is a pure function of the data seed, the step and the micro-batch; where
the run recorded a blow-up at K, its recorded window starts are checked against the draw), pushes
it through a model (`--model`, default the run's own weights) at each gate and dtype asked for, and
reports per block the RMS of the residual stream (over features, per token): its largest value and
the median over the batch's sequences, the loss of each sequence, and the worst sequence's token
(where its residual peaks after the last block) with how often it occurs in the training tokens.
A TaperNorm model is set to each gate; a model without one runs as it is (gate "n/a").
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..data import TokenShards
from ..model import GPT
from ..norms import set_gate, taper_norms
from ..probe.measure import block_outputs
from ..runtime import bookkeeping
from ..runtime.provenance import git_state, now
from .blowups import events_of
from .checkpoint import load_model
from .metrics_log import METRICS, read_records
from .run import batch_generator

DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class Batch:
    """The windows of one training step of a run (every micro-batch, concatenated)."""

    x: torch.Tensor
    y: torch.Tensor
    data_seed: int
    step: int
    starts: list[list[int]]  # per micro-batch
    recorded: dict | None  # the run's blow-up event at that step, if any
    train_counts: np.ndarray  # how often each token id occurs in the run's training tokens


def run_batch(run_dir: str | Path, step: int, data_dir: str | Path | None = None) -> Batch:
    """The batch run `run_dir` trained on at optimizer step `step` (its config.json's data seed,
    batch size, micro-batches and block size; its data directory unless `data_dir`)."""
    run_dir = Path(run_dir)
    cfg = bookkeeping.read(bookkeeping.RUN_RECORD, run_dir / "config.json", need=("train", "data"))
    steps = int(cfg["train"]["steps"])
    if not 1 <= step <= steps:
        raise ValueError(f"step {step} is not a step of run {run_dir} (1..{steps})")
    seed = cfg.get("data_seed")
    seed = int(cfg["seed"] if seed is None else seed)
    shards = TokenShards(str(data_dir or cfg["data"]["dir"]), cfg["data"].get("train_tokens"))
    B, T = int(cfg["train"]["batch_size"]), int(cfg["model"]["block_size"])
    starts = [
        shards.batch_starts("train", B, T, batch_generator(seed, step, micro))
        for micro in range(int(cfg["train"].get("grad_accum", 1)))
    ]
    recorded = None
    if (run_dir / METRICS).is_file():
        events = [e for e in events_of(read_records(run_dir / METRICS)) if e["step"] == step]
        recorded = events[0]["blowup"] if events else None
    if recorded is not None and recorded.get("batch", {}).get("starts") not in (None, starts):
        raise ValueError(
            f"run {run_dir}: the batch drawn for step {step} is not the one its blow-up event "
            "recorded: another data directory than the run's? (give --data)"
        )
    x, y = shards.windows("train", [s for micro in starts for s in micro], T)
    counts = np.bincount(shards.tokens("train"), minlength=shards.vocab_size)
    return Batch(x, y, seed, step, starts, recorded, counts)


def residual_trace(model: GPT, idx: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(logits, [x_0, x_1, ..., x_L]): the residual stream after the embedding and after each
    block, each (B, T, d), from one forward pass (probe.measure.block_outputs)."""
    with block_outputs(model) as trace:
        logits = model(idx)
    return logits, trace


def rms(x: torch.Tensor) -> torch.Tensor:
    """Per-token RMS over features: (B, T, d) -> (B, T)."""
    return x.pow(2).mean(-1).sqrt()


def replay(model: GPT, batch: Batch, gate: float | None, dtype: str) -> dict:
    """The batch through `model` (a copy, in `dtype`, at `gate` where it tapers): per block the
    largest and the median over sequences of each sequence's largest token RMS, per-sequence
    losses, and where the worst sequence peaks."""
    m = copy.deepcopy(model).to(DTYPES[dtype]).eval()
    tapered = bool(list(taper_norms(m)))
    if tapered and gate is not None:
        set_gate(m, gate)
    with torch.no_grad():
        logits, trace = residual_trace(m, batch.x)
        losses = F.cross_entropy(logits.flatten(0, 1), batch.y.flatten(), reduction="none")
    seq_loss = losses.view(batch.y.shape).double().mean(-1)
    peaks = torch.stack([rms(x).amax(-1) for x in trace]).double()  # (L + 1, sequences)
    worst = int(torch.nan_to_num(peaks[-1], nan=math.inf).argmax())
    pos = int(torch.nan_to_num(rms(trace[-1][worst]), nan=math.inf).argmax())
    return {
        "gate": gate if tapered else None,
        "dtype": dtype,
        "loss": _number(seq_loss.mean()),
        "max_sequence_loss": _number(seq_loss.max()),
        "sequence_losses": [_number(v) for v in seq_loss],
        "block_rms_max": [_number(v) for v in peaks.amax(-1)],
        "block_rms_median": [_number(v) for v in peaks.median(-1).values],
        "worst_sequence": worst,
        "worst_position": pos,
        "worst_token": int(batch.x[worst, pos]),
        "worst_token_train_count": int(batch.train_counts[int(batch.x[worst, pos])]),
        "logit_norm_max": _number(logits.double().norm(dim=-1).amax()),
    }


def _number(x: torch.Tensor | float) -> float | str:
    v = float(x)
    return v if math.isfinite(v) else str(v)


def replay_report(
    run_dir: str | Path,
    step: int,
    model_dir: str | Path | None = None,
    gates: list[float | None] | None = None,
    dtypes: list[str] | None = None,
    data_dir: str | Path | None = None,
) -> dict:
    """Batch `step` of `run_dir` through `model_dir` (default: the run's weights) at every gate
    and dtype: replay()'s rows, with the batch and the models named."""
    batch = run_batch(run_dir, step, data_dir)
    model = load_model(model_dir or run_dir)
    if not list(taper_norms(model)):
        gates = [None]  # no gate to set: one row per dtype
    rows = [replay(model, batch, g, d) for d in dtypes or ["float32"] for g in gates or [None]]
    return {
        "run": str(run_dir),
        "step": step,
        "data_seed": batch.data_seed,
        "starts": batch.starts,
        "recorded_event": batch.recorded,
        "model": str(model_dir or run_dir),
        "model_step": bookkeeping.read(
            bookkeeping.MODEL_CONFIG, Path(model_dir or run_dir) / "config.json"
        ).get("weights_step"),
        "rows": rows,
        "made": {**git_state(), "written": now()},
    }


def report_lines(report: dict) -> list[str]:
    """A plain-text table of a replay report: one line per (dtype, gate), the RMS per block."""
    lines = [
        f"batch of step {report['step']} of {report['run']} (data seed {report['data_seed']}) "
        f"through {report['model']}",
        "dtype     gate   loss      max seq loss   residual RMS, max over the batch: "
        "embedding, block 1 ..",
    ]
    for r in report["rows"]:
        gate = "n/a" if r["gate"] is None else f"{r['gate']:.3g}"
        blocks = " ".join(f"{v:.3g}" if isinstance(v, float) else v for v in r["block_rms_max"])
        lines.append(
            f"{r['dtype']:<9} {gate:<6} {_fmt(r['loss']):<9} {_fmt(r['max_sequence_loss']):<14} "
            f"{blocks}"
        )
    r = report["rows"][-1]
    lines.append(
        f"worst ({r['dtype']}, gate {r['gate']}): sequence {r['worst_sequence']}, position "
        f"{r['worst_position']}, token {r['worst_token']} ({r['worst_token_train_count']} "
        "occurrences in the training tokens)"
    )
    return lines


def _fmt(x: float | str) -> str:
    return f"{x:.4g}" if isinstance(x, float) else x
