"""Whether a run can fit at all, checked before anything is built: a lower bound of the memory its
first step takes against the memory the device has free now, so that a config value off by
orders of magnitude (train.batch_size: 100000000, model.n_embd: 1000000) is one line naming the
sizes instead of minutes of building windows or a kill by the kernel.

The bound counts only what no step can do without:
- the parameters of a fresh model (the embedding, an untied head, and per layer the attention's
  query and output projections and an MLP's two matrices at most n_embd wide: 4 n_embd^2), their
  gradients and AdamW's two moments, in float32: 16 bytes a parameter;
- per token of one micro-batch (train.batch_size x model.block_size): the logits and their
  gradient (2 x vocab), and per layer the block's input, its attention and MLP outputs
  (4 x n_embd), at 2 bytes a value under bf16 autocast (train.dtype, auto on CUDA; else 4),
  plus the token ids and targets (16 bytes);
- the validation windows made up front (log.eval_windows x model.block_size, ids and targets).
The real use is larger (the MLP's hidden width, attention scores, the allocator's slack), so a run
refused here cannot fit; one let through may still run out of memory, and then says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..config.run import RunConfig
from ..runtime import bookkeeping

FLOAT = 4  # bytes of a float32
IDS = 16  # bytes of a token's id and target (int64)
GiB = 1 << 30


class TooLarge(ValueError):
    """A run whose memory bound exceeds the device's free memory."""


@dataclass(frozen=True)
class Estimate:
    params: int  # of a fresh model (0 for an init.from model: its size is read later)
    optimizer_bytes: int  # weights, gradients, AdamW moments
    activation_bytes: int  # one micro-batch
    window_bytes: int = 0  # the validation windows

    @property
    def total(self) -> int:
        return self.optimizer_bytes + self.activation_bytes + self.window_bytes

    def largest(self) -> str:
        """The config key of the largest term: what to lower first."""
        terms = {
            "model.n_embd": self.optimizer_bytes,
            "train.batch_size": self.activation_bytes,
            "log.eval_windows": self.window_bytes,
        }
        return max(terms, key=terms.__getitem__)


def _vocab(cfg: RunConfig) -> int:
    """The vocabulary the model will have: model.vocab_size, or the data's meta.json's (0 when it
    cannot be read: loading the data says why)."""
    if cfg.model.vocab_size:
        return int(cfg.model.vocab_size)
    try:
        meta = bookkeeping.read(bookkeeping.SHARDS_META, os.path.join(cfg.data.dir, "meta.json"))
    except (OSError, ValueError):
        return 0
    return meta["vocab_size"]


def estimate(cfg: RunConfig, device_type: str = "cpu") -> Estimate:
    """The lower bound of the module docstring for run `cfg` on a device of `device_type`."""
    m = cfg.model
    vocab, d, layers = _vocab(cfg), int(m.n_embd), int(m.n_layer)
    params = 0
    if cfg.init.source is None:
        embeddings = vocab * d * (1 if m.tie_embeddings else 2)
        params = embeddings + layers * (2 * d * d + 2 * d * min(d, int(m.mlp_hidden or d)))
    half = cfg.train.dtype == "bfloat16" or (cfg.train.dtype == "auto" and device_type == "cuda")
    value = 2 if half else FLOAT
    tokens = int(cfg.train.batch_size) * int(m.block_size)
    per_token = value * (2 * vocab + 4 * d * layers) + IDS
    windows = int(cfg.log.eval_windows) * int(m.block_size) * IDS
    return Estimate(params, 4 * FLOAT * params, tokens * per_token, windows)


def available_bytes(device: torch.device) -> int | None:
    """The memory free on `device` now (the host's MemAvailable for the CPU, the GPU's free memory
    for CUDA); None where it cannot be told."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def check_fits(cfg: RunConfig, device: torch.device, free: int | None = None) -> Estimate:
    """TooLarge, naming the sizes, if the bound of run `cfg` exceeds the free memory of `device`
    (`free`, default available_bytes); the estimate otherwise."""
    est = estimate(cfg, device.type)
    free = available_bytes(device) if free is None else free
    if free is None or est.total <= free:
        return est
    m, t = cfg.model, cfg.train
    raise TooLarge(
        f"run {cfg.name} needs at least {est.total / GiB:.1f} GiB before its first step "
        f"({est.params:,} parameters with gradients and AdamW moments: "
        f"{est.optimizer_bytes / GiB:.1f} GiB; one micro-batch of train.batch_size {t.batch_size} "
        f"x model.block_size {m.block_size} tokens at model.n_embd {m.n_embd}, model.n_layer "
        f"{m.n_layer}: {est.activation_bytes / GiB:.1f} GiB; log.eval_windows "
        f"{cfg.log.eval_windows} validation windows: {est.window_bytes / GiB:.1f} GiB), but "
        f"{device.type} has {free / GiB:.1f} GiB free: lower those sizes, the largest first "
        f"({est.largest()}; train.grad_accum keeps the tokens of a step with a smaller batch), "
        "or use a larger machine"
    )
