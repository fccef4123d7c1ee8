"""Seconds per training step (forward, backward, clip, AdamW): our baseline, our model mid-taper,
optionally a DyT model, and transformers' LlamaForCausalLM on the same sizes, timed in interleaved
rounds; `tapernorm bench train-step` writes its rows (train_step_rows) as CSV.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from ..model import DYT_RECIPE, GPT, GPTConfig
from ..norms import set_gate, taper_norms
from ..runtime.device import autocast_for, resolve_device
from .timing import Clock, CsvRows, environment, paired_rounds, timed
from .trust import paired

TRAIN_DTYPES = ("float32", "bfloat16")  # bfloat16: float32 weights under bf16 autocast (training's)


def interleaved_medians(
    fns: dict[str, Callable[[], None]],
    repeats: int,
    warmup: int = 2,
    sync: Callable[[], None] = lambda: None,
) -> dict[str, dict]:
    """Time each fn `repeats` times, interleaved (paired_rounds), so drift hits all alike; `sync`
    (torch.cuda.synchronize on a GPU) runs before and after each call, so a time is the device's.

    Returns per name: median seconds, and the median of the per-round ratios to the first fn.
    """
    times = paired_rounds({n: timed(fn, sync=sync) for n, fn in fns.items()}, repeats, warmup)
    base = next(iter(fns))
    cell = {n: paired(times[base]["s"], times[n]["s"]) for n in fns}
    return {  # one statistic: median_s is the baseline's median over the paired ratio
        n: {"median_s": p.seconds, "ratio_to_" + base: 1.0 / p.speedup, "repeats": repeats}
        for n, p in cell.items()
    }


def _train_step_fn(
    model: torch.nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    hf: bool,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
):
    cuda = batch[0].device.type == "cuda"  # fused AdamW on a GPU, as training uses there
    kernel = {"fused": True} if cuda else {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), **kernel)
    x, y = batch

    def step() -> None:
        with autocast():
            logits = model(x).logits if hf else model(x)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def hf_llama_like(cfg: GPTConfig) -> torch.nn.Module:
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
    device: str | torch.device = "cpu",
    dtype: str = "float32",
    with_dyt: bool = False,
    warmup: int = 2,
    compile: bool = False,
) -> dict:
    """Seconds per training step (forward, backward, clip, AdamW): our baseline, our model mid-taper
    (0 < g < 1, both branches computed), with_dyt a DyT model, and transformers' LlamaForCausalLM on
    the same sizes. On `device`; dtype bfloat16 runs the step under bf16 autocast as training does
    (device.autocast_for); on a GPU each timed step is synchronized before and after. `compile`
    puts each model's forward under torch.compile as train.compile does (backward through its
    graph; clip and AdamW eager); the warmup rounds then include the compiles."""
    if dtype not in TRAIN_DTYPES:
        raise ValueError(f"train-step dtype must be one of {list(TRAIN_DTYPES)}, got {dtype!r}")
    device = resolve_device(device, setting="--device")
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
    batch = (x.to(device), torch.roll(x, -1, dims=1).to(device))
    ours = GPT(base_cfg).train()
    tapered = GPT(GPTConfig(**{**base_cfg.to_dict(), "taper": "all"})).train()
    for _, m in taper_norms(tapered):  # as if calibrated: frozen c, mid-taper
        m.frozen.fill_(True)
    set_gate(tapered, 0.5)
    models = {"ours_rmsnorm": ours, "ours_taper_g0.5": tapered}
    if with_dyt:
        models["ours_dyt"] = GPT(GPTConfig(**{**base_cfg.to_dict(), **DYT_RECIPE})).train()
    if with_hf:
        models["transformers_llama"] = hf_llama_like(base_cfg).train()
    fns = {
        name: _train_step_fn(
            torch.compile(model.to(device)) if compile else model.to(device),
            batch,
            hf=name == "transformers_llama",
            autocast=lambda: autocast_for(device, dtype),
        )
        for name, model in models.items()
    }
    clock = Clock(device)
    return {
        "benchmark": "train_step",
        "config": {
            **base_cfg.to_dict(),
            "batch_size": batch_size,
            "dtype": dtype,
            "compile": compile,
            "device": device.type,
            "params": ours.num_params(),
        },
        "env": environment(device),
        "results": interleaved_medians(fns, repeats, warmup, sync=clock.sync),
    }


def bench_train_steps(
    widths: Sequence[int], out_csv: str | Path | None = None, **kwargs
) -> list[dict]:
    """bench_train_step at each width in turn (the other settings `kwargs`); with `out_csv`, each
    width's rows (train_step_rows) are appended there as soon as it is timed."""
    write = CsvRows(out_csv) if out_csv else None
    results = []
    for width in widths:
        results.append(bench_train_step(n_embd=width, **kwargs))
        if write is not None:
            write(train_step_rows(results[-1]))
    return results


def train_step_rows(result: dict) -> list[dict]:
    """bench_train_step's result as CSV rows, one per model: ms per step and tokens per second."""
    cfg, env = result["config"], result["env"]
    tokens = cfg["batch_size"] * cfg["block_size"]
    rows = []
    for name, r in result["results"].items():
        ratio = next(v for k, v in r.items() if k.startswith("ratio_to_"))
        rows.append(
            {
                "benchmark": "train_step",
                "device": cfg.get("device", "cpu"),
                "device_name": env["device"],
                "torch": env["torch"],
                "dtype": cfg["dtype"],
                "compile": cfg.get("compile", False),
                "threads": env["threads"],
                "variant": name,
                "n_embd": cfg["n_embd"],
                "n_layer": cfg["n_layer"],
                "n_head": cfg["n_head"],
                "vocab_size": cfg["vocab_size"],
                "block_size": cfg["block_size"],
                "batch_size": cfg["batch_size"],
                "params": cfg["params"],
                "ms_per_step": 1e3 * r["median_s"],
                "tokens_per_s": tokens / r["median_s"],
                "ratio_to_baseline": ratio,
                "repeats": r["repeats"],
            }
        )
    return rows
