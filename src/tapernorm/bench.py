"""Benchmarks: medians of repeated, interleaved runs and ratios against a baseline timed in the same
process. Nothing here asserts a timing; the numbers are reported, never tested.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .model import GPT, GPTConfig
from .norms import set_gate, taper_norms


def environment() -> dict:
    """Device, versions and threads, recorded beside every benchmark result."""
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor()
    return {
        "device": device or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def interleaved_medians(
    fns: dict[str, Callable[[], None]], repeats: int, warmup: int = 2
) -> dict[str, dict]:
    """Time each fn `repeats` times in round-robin order (so drift hits all alike).

    Returns per name: median seconds, and the median of the per-round ratios to the first fn.
    """
    names = list(fns)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(repeats):
        for n in names:
            t0 = time.perf_counter()
            fns[n]()
            times[n].append(time.perf_counter() - t0)
    base = names[0]
    return {
        n: {
            "median_s": statistics.median(times[n]),
            "ratio_to_" + base: statistics.median(
                a / b for a, b in zip(times[n], times[base], strict=True)
            ),
            "repeats": repeats,
        }
        for n in names
    }


def _train_step_fn(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], hf: bool):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), foreach=True)
    x, y = batch

    def step() -> None:
        logits = model(x).logits if hf else model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def hf_llama_like(cfg: GPTConfig):
    """transformers' LlamaForCausalLM with the same sizes as a llama-style GPTConfig."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.n_embd,
        intermediate_size=cfg.mlp_hidden,
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_kv_head,
        max_position_embeddings=cfg.block_size,
        rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
    )
    return LlamaForCausalLM._from_config(hf_cfg, attn_implementation="sdpa")


def bench_train_step(
    n_layer: int = 8,
    n_head: int = 16,
    n_embd: int = 128,
    vocab_size: int = 4096,
    block_size: int = 256,
    batch_size: int = 16,
    repeats: int = 7,
    with_hf: bool = True,
) -> dict:
    """Seconds per training step (forward, backward, clip, AdamW): our baseline, our model mid-taper
    (0 < g < 1, both branches computed) and transformers' LlamaForCausalLM on the same sizes."""
    torch.manual_seed(0)
    base_cfg = GPTConfig(
        style="llama",
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        vocab_size=vocab_size,
        block_size=block_size,
    )
    x = torch.randint(0, vocab_size, (batch_size, block_size))
    batch = (x, torch.roll(x, -1, dims=1))
    ours = GPT(base_cfg).train()
    tapered = GPT(GPTConfig(**{**base_cfg.to_dict(), "taper": "all"})).train()
    for _, m in taper_norms(tapered):  # as if calibrated: frozen c, mid-taper
        m.frozen.fill_(True)
    set_gate(tapered, 0.5)
    fns = {
        "ours_rmsnorm": _train_step_fn(ours, batch, hf=False),
        "ours_taper_g0.5": _train_step_fn(tapered, batch, hf=False),
    }
    if with_hf:
        fns["transformers_llama"] = _train_step_fn(hf_llama_like(base_cfg).train(), batch, hf=True)
    return {
        "benchmark": "train_step",
        "config": {**base_cfg.to_dict(), "batch_size": batch_size, "dtype": "float32"},
        "env": environment(),
        "results": interleaved_medians(fns, repeats),
    }
