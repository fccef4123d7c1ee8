"""Greedy decoding with a preallocated KV cache (our v2 protocol): prefill and decode timed apart.

The prefill runs the prompt through the model, filling the cache, and picks the first token; then
`new_tokens` decode steps each feed the last token at its position and pick the next, so decode throughput
= B * new_tokens / decode time counts exactly the tokens the timed steps produce (docs/protocol.md).

Two modes, reported separately:
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
import torch.nn.functional as F
from torch import nn

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
from .device import resolve_device
from .model import GPT, Attention

# max |cached - uncached logit| allowed, relative to max |logit|: float32 sums in another order;
# 16-bit types also round every intermediate activation differently.
CHECK_RTOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}

Prefill = Callable[[torch.Tensor], torch.Tensor]  # prompt (B, P) -> last logits (B, V)
Step = Callable[[torch.Tensor, int], torch.Tensor]  # (token (B, 1), its position) -> logits (B, V)


class DecodeCheckError(RuntimeError):
    """Cached decode logits differ from an uncached forward beyond tolerance."""


class StaticDecoder(nn.Module):
    """One decode step of a GPT with fixed shapes, for torch.compile and CUDA graphs.

    The cache (the model's KVCache tensors, registered as buffers so compiled graphs treat them as
    static) is written at `pos`, a 1-element tensor, with index_copy_; attention covers all `max_len`
    slots with a mask keeping positions <= pos. Same computation as Attention.forward with a cache.
    """

    def __init__(self, model: GPT, batch: int, max_len: int):
        super().__init__()
        self.model = model
        self.caches = model.new_cache(batch, max_len)
        for i, cache in enumerate(self.caches):
            self.register_buffer(f"k{i}", cache.k, persistent=False)
            self.register_buffer(f"v{i}", cache.v, persistent=False)
        device = model.tok_emb.weight.device
        self.register_buffer("positions", torch.arange(max_len, device=device), persistent=False)

    def prefill(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model.head(self.model.hidden(idx, self.caches, 0)[:, -1])

    def forward(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """tok (B, 1) at position pos (1,) -> logits (B, V)."""
        m = self.model
        x, rope = m.tok_emb(tok), None
        if m.pos_emb is not None:
            x = x + m.pos_emb(pos)
        else:
            rope = (m.rope_cos[pos].to(x.dtype), m.rope_sin[pos].to(x.dtype))
        mask = (self.positions <= pos).view(1, 1, 1, -1)
        for i, block in enumerate(m.blocks):
            k_cache, v_cache = getattr(self, f"k{i}"), getattr(self, f"v{i}")
            x = x + self._attend(block.attn, block.ln_1(x), rope, k_cache, v_cache, pos, mask)
            x = x + block.mlp(block.ln_2(x))
        return m.head(x)[:, 0]

    @staticmethod
    def _attend(attn: Attention, x, rope, k_cache, v_cache, pos, mask) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = attn.heads(x, rope)
        k_cache.index_copy_(2, pos, k)
        v_cache.index_copy_(2, pos, v)
        y = F.scaled_dot_product_attention(
            q, k_cache, v_cache, attn_mask=mask, enable_gqa=attn.n_kv_head != attn.n_head
        )
        return attn.proj(y.transpose(1, 2).reshape(B, T, C))


def eager_decoder(model: GPT, batch: int, max_len: int) -> tuple[Prefill, Step]:
    """The model's own KV-cache path, with a cache allocated once (reused by every call)."""
    cache = model.new_cache(batch, max_len)

    def prefill(idx: torch.Tensor) -> torch.Tensor:
        return model.head(model.hidden(idx, cache, 0)[:, -1])

    def step(tok: torch.Tensor, pos: int) -> torch.Tensor:
        return model.head(model.hidden(tok, cache, pos))[:, 0]

    return prefill, step


def static_decoder(
    model: GPT, batch: int, max_len: int, backend: str | None = None
) -> tuple[Prefill, Step]:
    """StaticDecoder as it is (backend None), or compiled as one graph by torch.compile with
    `backend` ("inductor": see _compile_kwargs). backend="eager" only traces, the tests' quick check
    of the graph capture."""
    decoder = StaticDecoder(model, batch, max_len)
    device = model.tok_emb.weight.device
    run, options = decoder, {}
    if backend is not None:
        options = _compile_kwargs(device, backend)
        run = torch.compile(decoder, backend=backend, fullgraph=True, **options)
    cuda_graphs = options.get("mode") == "reduce-overhead"
    positions = [torch.tensor([i], device=device) for i in range(max_len)]  # one tensor per step

    def step(tok: torch.Tensor, pos: int) -> torch.Tensor:
        if cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()  # each step overwrites the last one's outputs
        return run(tok, positions[pos])

    return decoder.prefill, step


def _compile_kwargs(device: torch.device, backend: str) -> dict:
    """GPU: CUDA graphs (mode "reduce-overhead"). CPU: inductor's C++ wrapper, which calls the step's
    ~100 kernels from C++ instead of Python; measured here on the 30M model at batch 1, it cuts a decode
    step from ~6.7 to ~5.8 ms (2 threads) for ~10 s more compile time."""
    if backend != "inductor":
        return {}
    if device.type == "cuda":
        return {"mode": "reduce-overhead"}
    return {"options": {"cpp_wrapper": True}}


def compiled_decoder(model: GPT, batch: int, max_len: int) -> tuple[Prefill, Step]:
    """The compiled mode's decoder: StaticDecoder under torch.compile (inductor)."""
    return static_decoder(model, batch, max_len, backend="inductor")


def greedy(
    prefill: Prefill,
    step: Step,
    prompt: torch.Tensor,
    new_tokens: int,
    clock: Clock,
    keep_logits: bool = False,
) -> tuple[torch.Tensor, tuple[float, float], list[torch.Tensor]]:
    """Greedy decoding of `new_tokens` tokens after `prompt` (B, P).

    Returns the tokens (B, P + new_tokens), (prefill seconds, decode seconds) and, with keep_logits,
    the logits that chose each new token.
    """
    B, P = prompt.shape
    out = torch.empty(B, P + new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :P] = prompt
    kept = []
    clock.sync()
    t0 = clock.stamp()
    logits = prefill(prompt)
    tok = logits.argmax(-1, keepdim=True)  # (B, 1), its own tensor: the same strides every step
    out[:, P] = tok[:, 0]
    t1 = clock.stamp()
    for i in range(1, new_tokens):
        if keep_logits:
            kept.append(logits.clone())
        logits = step(tok, P + i - 1)
        tok = logits.argmax(-1, keepdim=True)
        out[:, P + i] = tok[:, 0]
    t2 = clock.stamp()
    if keep_logits:
        kept.append(logits.clone())
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
