"""Greedy decoding with a preallocated KV cache (our v2 protocol): prefill and decode timed apart.

The prefill runs the prompt through the model, filling the cache, and picks the first token; then
`new_tokens` decode steps each feed the last token at its position and pick the next, so decode throughput
= B * new_tokens / decode time counts exactly the tokens the timed steps produce (docs/protocol.md).

The decoders are the library's (decode.py, the engine of GPT.generate). Two modes, reported apart:
  eager     the model's own cached path (GPT.hidden with a KVCache, as GPT.generate), under
            torch.inference_mode, with the cache and the output buffer allocated once per cell.
  compiled  StaticDecoder: one decode step with fixed shapes (a full-length cache written at a position
            tensor, attention masked to the filled part), compiled by torch.compile: on a GPU with
            mode "reduce-overhead", i.e. replayed as a CUDA graph; on a CPU with inductor's C++
            wrapper (no Python between kernels). The prefill stays eager.
Before timing, the decoder's logits over the first steps must equal an uncached forward over the same
tokens (DecodeCheckError otherwise): in float32 for each variant, where a wrong position or cache slot
stands out, then for each cell's timed decoder in the benchmark dtype, with a tolerance for its rounding.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from .bench import (
    Clock,
    common_row,
    paired_rounds,
    paired_speedup,
    prepare_models,
    resolve_dtype,
    speedup_columns,
    timing_precision,
)
from .decode import (  # noqa: F401  (StaticDecoder: re-exported from its old home)
    Prefill,
    StaticDecoder,
    Step,
    compiled_decoder,
    eager_decoder,
    run,
    static_decoder,
)
from .device import resolve_device
from .model import GPT

# max |cached - uncached logit| allowed, relative to max |logit|: float32 sums in another order;
# 16-bit types also round every intermediate activation differently.
CHECK_RTOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


class DecodeCheckError(RuntimeError):
    """Cached decode logits differ from an uncached forward beyond tolerance."""


def greedy(
    prefill: Prefill,
    step: Step,
    prompt: torch.Tensor,
    new_tokens: int,
    clock: Clock,
    keep_logits: bool = False,
) -> tuple[torch.Tensor, tuple[float, float], list[torch.Tensor]]:
    """Greedy decoding of `new_tokens` tokens after `prompt` (B, P) (decode.run), timed by `clock`.

    Returns the tokens (B, P + new_tokens), (prefill seconds, decode seconds) and, with keep_logits,
    the logits that chose each new token.
    """
    clock.sync()
    out, kept, (t0, t1, t2) = run(
        prefill, step, prompt, new_tokens, keep_logits=keep_logits, stamp=clock.stamp
    )
    return out, (clock.seconds(t0, t1), clock.seconds(t1, t2)), kept


def check_decode(
    model: GPT, prefill: Prefill, step: Step, prompt: torch.Tensor, steps: int, clock: Clock
) -> float:
    """Decode `steps` tokens and compare their logits with one uncached forward over the same tokens;
    returns max |difference| / max |logit|, raises DecodeCheckError beyond CHECK_RTOL."""
    P = prompt.shape[1]
    tokens, _, kept = greedy(prefill, step, prompt, steps, clock, keep_logits=True)
    cached = torch.stack(kept, dim=1).float()
    uncached = model.head(model.hidden(tokens[:, :-1])[:, P - 1 :]).float()
    rel = ((cached - uncached).abs().max() / uncached.abs().max().clamp_min(1e-12)).item()
    rtol = CHECK_RTOL[model.tok_emb.weight.dtype]
    if not rel <= rtol:  # also catches NaN
        raise DecodeCheckError(
            f"cached decode logits differ from an uncached forward: max |dz| / max |z| = {rel:.3g} "
            f"> {rtol:g} (first {steps} new tokens, prompt {tuple(prompt.shape)})"
        )
    return rel


def bench_decode(
    models: dict[str, GPT],
    batch_sizes: Sequence[int] = (1, 4, 16),
    prompt_lens: Sequence[int] = (128, 512),
    new_tokens: int = 256,
    repeats: int = 10,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = torch.float32,
    compile: bool = False,
    warmup: int = 2,
    reference: GPT | None = None,
    check_steps: int = 4,
) -> list[dict]:
    """Greedy decode per (batch, prompt length) cell and variant: median prefill and decode times over
    `repeats` interleaved rounds, throughputs, and speedups over the first model (medians of per-round
    ratios). Exports are verified against `reference` first (see bench.prepare_models)."""
    if new_tokens < 1:
        raise ValueError("new_tokens must be >= 1 (decode steps after the prefill)")
    device, dtype = resolve_device(device), resolve_dtype(dtype)
    clock = Clock(device)
    # in 16-bit types a wrong position or cache slot can hide in rounding noise: check in float32 first
    logic = functools.partial(_check_logic, make=static_decoder if compile else eager_decoder)
    models = prepare_models(models, reference, device, dtype, check=lambda m: logic(m, clock=clock))
    base = next(iter(models))
    common = common_row("decode", "compiled" if compile else "eager", device, dtype, models[base])
    common["compile"] = _compile_mode(device) if compile else ""
    cell = functools.partial(
        _decode_cell,
        models,
        new_tokens=new_tokens,
        repeats=repeats,
        warmup=warmup,
        make=compiled_decoder if compile else eager_decoder,
        clock=clock,
        check_steps=min(check_steps, new_tokens + 1),
    )
    rows = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode())
        stack.enter_context(timing_precision(device))
        if (
            compile
        ):  # after a variant's first shape change dynamo recompiles it with dynamic shapes,
            torch._dynamo.reset()  # so each variant needs a few graphs, not one per cell
            limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else None
            stack.enter_context(torch._dynamo.config.patch(limit or "cache_size_limit", 64))
        for B in batch_sizes:
            for P in prompt_lens:
                rows += [{**common, **row} for row in cell(B, P)]
    return rows


def _check_logic(model: GPT, make: Callable, clock: Clock, steps: int = 6) -> float:
    """check_decode of a decoder built by `make` on a short random prompt (batch 2)."""
    P = max(1, min(8, model.config.block_size - steps))
    prompt = torch.randint(0, model.config.vocab_size, (2, P), device=model.tok_emb.weight.device)
    return check_decode(model, *make(model, 2, P + steps), prompt, steps, clock)


def _decode_cell(
    models: dict[str, GPT],
    B: int,
    P: int,
    new_tokens: int,
    repeats: int,
    warmup: int,
    make: Callable[[GPT, int, int], tuple[Prefill, Step]],
    clock: Clock,
    check_steps: int,
) -> list[dict]:
    """One (batch, prompt length) cell: build and check each variant's decoder, then time them."""
    max_len = P + new_tokens  # positions fed: the prompt, then one per decode step
    too_long = [n for n, m in models.items() if m.config.block_size < max_len]
    if too_long:
        raise ValueError(
            f"prompt {P} + {new_tokens} new tokens needs block_size >= {max_len}; {too_long} have "
            "less (see bench.with_block_size)"
        )
    base = next(iter(models))
    device = models[base].tok_emb.weight.device
    prompt = torch.randint(0, models[base].config.vocab_size, (B, P), device=device)
    runs, setup, check = {}, {}, {}
    for name, model in models.items():
        t0 = time.perf_counter()
        prefill, step = make(model, B, max_len)
        check[name] = check_decode(model, prefill, step, prompt, check_steps, clock)
        setup[name] = time.perf_counter() - t0  # building, compiling (if so) and checking

        def run(prefill=prefill, step=step) -> dict[str, float]:
            _, (pre, dec), _ = greedy(prefill, step, prompt, new_tokens + 1, clock)
            return {"prefill": pre, "decode": dec}

        runs[name] = run
    times = paired_rounds(runs, repeats, warmup)
    rows = []
    for name in models:
        pre = statistics.median(times[name]["prefill"])
        dec = statistics.median(times[name]["decode"])
        rows.append(
            {
                "variant": name,
                "batch": B,
                "prompt_len": P,
                "new_tokens": new_tokens,
                "warmup": warmup,
                "rounds": repeats,
                "prefill_ms": 1e3 * pre,
                "decode_ms": 1e3 * dec,
                "ms_per_step": 1e3 * dec / new_tokens,
                "decode_tok_s": B * new_tokens / dec,
                "prefill_tok_s": B * P / pre,
                **speedup_columns(times[base]["decode"], times[name]["decode"]),
                "prefill_speedup": paired_speedup(times[base]["prefill"], times[name]["prefill"])[
                    0
                ],
                "check_rel_diff": check[name],
                "setup_s": setup[name],
            }
        )
    return rows


def _compile_mode(device: torch.device) -> str:
    if device.type == "cuda":
        return "torch.compile reduce-overhead (CUDA graphs)"
    return "torch.compile (inductor, C++ wrapper)"
