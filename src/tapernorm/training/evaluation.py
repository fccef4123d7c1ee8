"""Validation loss at g = 0: the fixed validation windows of token shards, and evaluation sets."""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data import EvalSet, TokenShards
from ..model import GPT
from ..norms import set_gate, taper_norms
from ..runtime.device import autocast_for, is_out_of_memory, resolve_device
from ..runtime.progress import Progress
from .checkpoint import load_model, run_summary
from .divergence import diverged

CLI_SETTINGS = ("--windows", "--batch-size")  # what `tapernorm eval` calls n_windows, batch_size


class OutOfMemory(MemoryError):
    """Memory ran out in an evaluation; the message names the setting to lower."""


@torch.no_grad()
def mean_ce(
    model: GPT,
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    batch_size: int,
    autocast: AbstractContextManager | None = None,
    *,
    gate: float | None = 0.0,
    label: str | None = None,
) -> float:
    """Mean next-token CE of targets y given inputs x, with every TaperNorm at `gate` (default 0;
    None: the gates as they are; they are restored afterwards). `autocast`: a context for the
    forward passes (default: none). `label`: show the batches scored as they go under it
    (tapernorm.runtime.progress; none: quiet)."""
    gates = [m.gate_value for _, m in taper_norms(model)]
    was_training = model.training
    model.eval()
    if gate is not None:
        set_gate(model, gate)
    device = model.tok_emb.weight.device
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0  # read once, at the end
    starts = range(0, len(x_all), batch_size)
    with Progress(label, len(starts), "batch") if label else nullcontext() as progress:
        for i in starts:
            x, y = x_all[i : i + batch_size].to(device), y_all[i : i + batch_size].to(device)
            with autocast or nullcontext():
                logits = model(x)
            total += F.cross_entropy(
                logits.float().flatten(0, 1), y.flatten(), reduction="sum"
            ).double()
            count += y.numel()
            if progress is not None:
                progress.update()
    total = total.item()
    for (_, m), g in zip(taper_norms(model), gates, strict=True):
        m.set_gate(g)
    model.train(was_training)
    return total / count


def validation_windows(
    shards: TokenShards, n_windows: int, block_size: int, setting: str = CLI_SETTINGS[0]
) -> tuple[torch.Tensor, torch.Tensor]:
    """shards.val_windows; OutOfMemory naming `setting` (what sets n_windows) if they do not fit."""
    try:
        return shards.val_windows(n_windows, block_size)
    except (MemoryError, RuntimeError) as e:
        if not is_out_of_memory(e):
            raise
        size = 2 * 8 * n_windows * (block_size + 1) / 2**30
        raise OutOfMemory(
            f"out of memory: the {n_windows} validation windows of {setting} take {size:.3g} GiB; "
            f"lower {setting}"
        ) from None


def check_vocab(shards: TokenShards, model: GPT, model_dir: str | Path) -> None:
    """ValueError naming both if the shards' token ids may exceed the model's vocabulary."""
    if shards.vocab_size > model.config.vocab_size:
        raise ValueError(
            f"the token shards {shards.data_dir} have a vocabulary of {shards.vocab_size}, the "
            f"model {model_dir} only {model.config.vocab_size}: give shards of the model's own "
            "tokenizer (--data)"
        )


def evaluate(
    model: GPT,
    shards: TokenShards,
    n_windows: int,
    batch_size: int,
    windows: tuple[torch.Tensor, torch.Tensor] | None = None,
    settings: tuple[str, str] = CLI_SETTINGS,
    gate: float | None = 0.0,
    label: str | None = None,
) -> float:
    """Mean CE over the fixed validation windows (`windows`, made before, or made here), with
    every TaperNorm at `gate` (default 0; None: as the model is). `settings` name n_windows and
    batch_size in an out-of-memory error; `label` shows the batches as they go (mean_ce)."""
    if shards.vocab_size > model.config.vocab_size:
        raise ValueError(
            f"the shards in {shards.data_dir} have a vocabulary of {shards.vocab_size}, the model "
            f"only {model.config.vocab_size}: evaluate it on shards of its own tokenizer"
        )
    block_size = model.config.block_size
    x_all, y_all = windows or validation_windows(shards, n_windows, block_size, settings[0])
    try:
        return mean_ce(model, x_all, y_all, batch_size, gate=gate, label=label)
    except (MemoryError, RuntimeError) as e:
        if not is_out_of_memory(e):
            raise
        raise OutOfMemory(
            f"out of memory evaluating {len(x_all)} windows of {block_size} tokens in batches of "
            f"{batch_size}: lower {settings[1]}"
        ) from None


def evaluate_rows(
    model: GPT,
    eval_set: EvalSet,
    batch_size: int,
    max_rows: int | None = None,
    dtype: str = "float32",
    label: str | None = None,
) -> dict:
    """Mean CE of an evaluation set at g = 0: each row scored on its own (row[:-1] predicts
    row[1:]); `dtype` as train.dtype ("auto": bf16 autocast on CUDA, CE always in float32);
    `label` shows the batches as they go (mean_ce)."""
    rows = eval_set.rows(max_rows)
    if rows.shape[1] - 1 > model.config.block_size:
        raise ValueError(
            f"evaluation rows of {rows.shape[1]} tokens need block_size >= {rows.shape[1] - 1}, "
            f"the model has {model.config.block_size}"
        )
    if int(rows.max()) >= model.config.vocab_size:
        raise ValueError(
            f"evaluation set {eval_set.data_dir} has token ids up to {int(rows.max())}, beyond the "
            f"model's vocabulary of {model.config.vocab_size}"
        )
    autocast = autocast_for(model.tok_emb.weight.device, dtype)
    try:
        loss = mean_ce(model, rows[:, :-1], rows[:, 1:], batch_size, autocast, label=label)
    except (MemoryError, RuntimeError) as e:
        if not is_out_of_memory(e):
            raise
        raise OutOfMemory(
            f"out of memory evaluating {len(rows)} rows of {rows.shape[1]} tokens in batches of "
            f"{batch_size}: lower --batch-size"
        ) from None
    return {"loss": loss, "rows": len(rows), "tokens": len(rows) * (rows.shape[1] - 1)}


def evaluate_model(
    model_dir: str | Path,
    data: str | Path,
    windows: int = 64,
    batch_size: int = 16,
    max_rows: int | None = None,
    dtype: str = "float32",
    folded: str | Path | None = None,
    device: str = "auto",
) -> dict:
    """`tapernorm eval`: the validation loss at g = 0 of a run (or model) directory on `data`.

    Token shards: the first `windows` fixed validation windows. An evaluation set of `prepare-eval`
    (it has rows.bin): every row (the first `max_rows`) scored on its own under `dtype`, and, when
    `folded` names a folded export, that export on the same rows. Returns the result as a dict.

    A run whose eval.json says it diverged is scored as it was left (the weights it rolled back to;
    `val_loss` null where not finite), and its `folded` entry records `skipped` (its fold was
    skipped for the same reason: training.fold_run) instead of reading --folded.
    """
    dev = resolve_device(device)
    model = load_model(model_dir, dev)
    bad = diverged(model_dir)
    result = {"model": str(model_dir), "data": str(data), "eval": "g=0"}
    if bad is not None:
        result["diverged_note"] = bad.reason()
    if not (Path(data) / "rows.bin").exists():  # token shards: the fixed validation windows
        if folded is not None:
            raise ValueError(f"--folded needs an evaluation set of prepare-eval; {data} has none")
        loss = evaluate(model, TokenShards(data), windows, batch_size, label=f"eval {data}")
        result["val_loss"] = None if bad is not None and not math.isfinite(loss) else loss
        return result
    eval_set = EvalSet(data)
    scores = evaluate_rows(model, eval_set, batch_size, max_rows, dtype, f"eval {data}")
    loss = scores["loss"]
    result.update(
        set=eval_set.meta["set"],
        val_loss=None if bad is not None and not math.isfinite(loss) else loss,
        rows=scores["rows"],
        tokens=scores["tokens"],
        dtype=dtype,
        set_meta=eval_set.meta,
        run=run_summary(model_dir),
    )
    if folded is not None and bad is not None:
        result["folded"] = {"model": str(folded), "skipped": bad.reason()}
    elif folded is not None:  # the folded export, on the same rows
        del model
        folded_model, label = load_model(folded, dev), f"eval {folded} on {data}"
        loss = evaluate_rows(folded_model, eval_set, batch_size, max_rows, dtype, label)["loss"]
        result["folded"] = {
            "model": str(folded),
            "val_loss": loss,
            "loss_diff": loss - scores["loss"],
        }
    return result
