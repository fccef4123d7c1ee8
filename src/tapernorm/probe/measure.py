"""What the battery measures in one forward pass over a set of windows: each window's loss, the
loss at its first position, and the RMS of the residual stream h_L (the input of the final norm)
at every position; for one window, the RMS of the residual after each block.

Every forward runs in eval mode under no_grad, at the dtype the battery asks for: "float32", or
"bfloat16" (autocast, on a CPU as on a GPU). Losses are always computed from float32 logits and
RMS values in float64, so a residual of 1e20 is still a number.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..model import GPT
from ..norms import set_gate, taper_norms
from ..runtime.device import autocast_for

DTYPES = {"float32": "fp32", "bfloat16": "bf16"}  # a battery dtype -> its key in the results


@contextmanager
def at_gate(model: GPT, gate: float | None) -> Iterator[GPT]:
    """The model in eval mode with every TaperNorm at `gate` (None: as they are); the gates and
    the training flag restored afterwards."""
    gates = [m.gate_value for _, m in taper_norms(model)]
    was_training = model.training
    model.eval()
    if gate is not None:
        set_gate(model, gate)
    try:
        yield model
    finally:
        for (_, m), g in zip(taper_norms(model), gates, strict=True):
            m.set_gate(g)
        model.train(was_training)


def device_of(model: GPT) -> torch.device:
    return model.tok_emb.weight.device


def token_rms(h: torch.Tensor) -> torch.Tensor:
    """The RMS over features of each token of h (..., d), in float64."""
    return h.detach().double().pow(2).mean(-1).sqrt()


@dataclass
class Scores:
    """Per-window results of a set of N windows of T tokens (float64, on the CPU)."""

    loss: torch.Tensor  # (N,) mean next-token CE over the window
    first_loss: torch.Tensor  # (N,) CE at position 0 (one token of context)
    resid: torch.Tensor  # (N, T) RMS of h_L at each position

    @property
    def resid_max(self) -> torch.Tensor:
        """(N,) the largest RMS of h_L over each window's positions."""
        return self.resid.max(dim=1).values


@torch.no_grad()
def score_windows(
    model: GPT, x: torch.Tensor, y: torch.Tensor, batch_size: int, dtype: str = "float32"
) -> Scores:
    """Losses and residual RMS of windows x with targets y, `batch_size` windows a forward."""
    device, losses, firsts, resids = device_of(model), [], [], []
    for i in range(0, len(x), batch_size):
        xb, yb = x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)
        with autocast_for(device, dtype):
            logits, h = model(xb, return_hidden=True)
        ce = F.cross_entropy(logits.float().flatten(0, 1), yb.flatten(), reduction="none")
        ce = ce.view(yb.shape).double()
        losses.append(ce.mean(1).cpu())
        firsts.append(ce[:, 0].cpu())
        resids.append(token_rms(h).cpu())
    return Scores(torch.cat(losses), torch.cat(firsts), torch.cat(resids))


@torch.no_grad()
def residual_max(
    model: GPT, x: torch.Tensor, batch_size: int, dtype: str = "float32"
) -> torch.Tensor:
    """(N,) the largest RMS of h_L over the positions of each window of x (no head computed)."""
    device, out = device_of(model), []
    for i in range(0, len(x), batch_size):
        with autocast_for(device, dtype):
            h = model.hidden(x[i : i + batch_size].to(device))
        out.append(token_rms(h).max(dim=1).values.cpu())
    return torch.cat(out)


@contextmanager
def block_outputs(model: GPT) -> Iterator[list[torch.Tensor]]:
    """Inside: the residual stream entering the first block (the embedding), then after each
    block (the last is h_L), appended for every forward pass (hooks on the blocks)."""
    seen: list[torch.Tensor] = []
    hooks = [model.blocks[0].register_forward_pre_hook(lambda _m, args: seen.append(args[0]))]
    hooks += [b.register_forward_hook(lambda _m, _a, out: seen.append(out)) for b in model.blocks]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


@torch.no_grad()
def block_rms(model: GPT, x: torch.Tensor, dtype: str = "float32") -> list[float]:
    """For one window x (T,): the largest RMS over its tokens of the residual stream entering the
    first block (the embedding), then after each block (the last is h_L)."""
    with block_outputs(model) as seen, autocast_for(device_of(model), dtype):
        model.hidden(x[None].to(device_of(model)))
    return [float(token_rms(h).max()) for h in seen]
