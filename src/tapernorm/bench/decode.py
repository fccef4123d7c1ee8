"""Greedy decoding with a preallocated KV cache (our v2 protocol): prefill and decode timed apart.

The prefill runs the prompt through the model, filling the cache, and picks the first token; then
`new_tokens` decode steps each feed the last token at its position and pick the next, so decode throughput
= B * new_tokens / decode time counts exactly the tokens the timed steps produce (docs/protocol.md).

The decoders are the library's (tapernorm.decode, the engine of GPT.generate; this module only
times them). Two modes, reported apart:
  eager     the model's own cached path (GPT.hidden's prefill, then GPT.hidden of one token a
            step on decode.step_linear's kernels, with a KVCache, as GPT.generate), under
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
import logging
import time
from collections.abc import Callable, Sequence

import torch

from ..config import section_defaults
from ..decode import Prefill, Step, compiled_decoder, eager_decoder, run, static_decoder
from ..model import GPT
from ..runtime.device import resolve_device
from .timing import Clock, paired_rounds, resolve_dtype, timing_precision
from .trust import LoadMeter, disturbance, load_now, paired_cell, trust_columns
from .variants import common_row, prepare_models

# max |cached - uncached logit| allowed, relative to max |logit|: float32 sums in another order;
# 16-bit types also round every intermediate activation differently.
GRID = section_defaults("bench")["decode"]  # the grid's defaults: the config schema's, stated once
CHECK_RTOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


class DecodeCheckError(RuntimeError):
    """Cached decode logits differ from an uncached forward beyond tolerance."""


class CudaGraphsSkipped(RuntimeError):
    """A compiled decode row on a GPU did not run as a CUDA graph (it timed plain inductor)."""


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
    batch_sizes: Sequence[int] = tuple(GRID["batch_sizes"]),
    prompt_lens: Sequence[int] = tuple(GRID["prompt_lens"]),
    new_tokens: int = GRID["new_tokens"],
    repeats: int = GRID["repeats"],
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = torch.float32,
    compile: bool = False,
    warmup: int = GRID["warmup"],
    reference: GPT | None = None,
    check_steps: int = 4,
    on_rows: Callable[[list[dict]], None] = lambda rows: None,
    on_round: Callable[[], None] = lambda: None,
) -> list[dict]:
    """Greedy decode per (batch, prompt length) cell and variant: speedups over the first model
    (medians of per-round ratios over `repeats` interleaved rounds) and the prefill and decode times
    and throughputs they imply (bench.trust.paired), with each cell's spread, the load of other
    processes and whether the timing was disturbed. Exports are verified against `reference` first
    (see bench.variants.prepare_models). Each cell's rows go to `on_rows` as soon as it is timed;
    `on_round` is called after each round (timing.paired_rounds).

    Compiled, each (variant, cell) is compiled once (`graphs_compiled`: the graphs dynamo made while
    building and checking it). On a GPU every compiled row says whether its step ran as a CUDA graph
    (`cuda_graphs`: no skip counted by inductor, `cudagraph_skips`, and graph launches seen by the
    profiler over two steps, `graph_launches`, -1 where the profiler could not run); after all cells,
    CudaGraphsSkipped names the rows that did not."""
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
        compiled=compile,
        load_before=load_now(),
        on_round=on_round,
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
                rows_of_cell = [{**common, **row} for row in cell(B, P)]
                on_rows(rows_of_cell)
                rows += rows_of_cell
    skipped = [r for r in rows if r["cuda_graphs"] is False]
    if skipped:
        raise CudaGraphsSkipped(
            "compiled decode did not run as CUDA graphs in "
            + "; ".join(
                f"{r['variant']} B={r['batch']} P={r['prompt_len']} (inductor cudagraph skips "
                f"+{r['cudagraph_skips']}, graph launches {r['graph_launches']})"
                for r in skipped
            )
            + ": those rows time plain inductor (TORCH_LOGS=perf_hints or =cudagraphs, whichever this "
            "torch knows, logs the reason)"
        )
    return rows


def _counter(group: str, name: str) -> int:
    """One of dynamo's and inductor's event counters (0 where never bumped)."""
    from torch._dynamo.utils import counters

    return int(counters[group][name])


def graph_launches(fn: Callable[[], object]) -> int:
    """CUDA graph launches the CUDA runtime saw while `fn` ran (torch.profiler), -1 if the profiler
    could not run here."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum("GraphLaunch" in event.name for event in prof.events())
    except RuntimeError as e:
        logging.getLogger(__name__).warning("graph_launches: the profiler failed (%s)", e)
        return -1


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
    compiled: bool,
    load_before: float | None,
    on_round: Callable[[], None] = lambda: None,
) -> list[dict]:
    """One (batch, prompt length) cell: build and check each variant's decoder, then time them
    (bench.trust: paired speedups, the load of other processes, and whether it was disturbed)."""
    max_len = P + new_tokens  # positions fed: the prompt, then one per decode step
    too_long = [n for n, m in models.items() if m.config.block_size < max_len]
    if too_long:
        raise ValueError(
            f"prompt {P} + {new_tokens} new tokens needs block_size >= {max_len}; {too_long} have "
            "less (see bench.variants.with_block_size)"
        )
    base = next(iter(models))
    device = models[base].tok_emb.weight.device
    prompt = torch.randint(0, models[base].config.vocab_size, (B, P), device=device)
    rounds, setup, check, graphs, skips = {}, {}, {}, {}, {}
    for name, model in models.items():
        t0, g0, s0 = time.perf_counter(), _counter("stats", "unique_graphs"), _skips()
        prefill, step = make(model, B, max_len)
        check[name] = check_decode(model, prefill, step, prompt, check_steps, clock)
        setup[name] = time.perf_counter() - t0  # building, compiling (if so) and checking
        graphs[name] = _counter("stats", "unique_graphs") - g0
        skips[name] = _skips() - s0

        def one_round(prefill=prefill, step=step, steps=new_tokens) -> dict[str, float]:
            _, (pre, dec), _ = greedy(prefill, step, prompt, steps + 1, clock)
            return {"prefill": pre, "decode": dec}

        rounds[name] = one_round
    s0 = _skips()
    with LoadMeter() as load:
        times = paired_rounds(rounds, repeats, warmup, on_round)
    late_skips = _skips() - s0  # counted while timing: not attributable, so every row gets them
    graphed, launches = compiled and clock.cuda, {}
    if graphed:
        for name, one_round in rounds.items():
            launches[name] = graph_launches(lambda one_round=one_round: one_round(steps=2))
    decode = paired_cell({name: times[name]["decode"] for name in models})
    prefill = paired_cell({name: times[name]["prefill"] for name in models})
    why = disturbance(decode, load.cores)
    rows = []
    for name in models:
        dec, pre = decode[name], prefill[name]
        rows.append(
            {
                "variant": name,
                "batch": B,
                "prompt_len": P,
                "new_tokens": new_tokens,
                "warmup": warmup,
                "rounds": repeats,
                "prefill_ms": 1e3 * pre.seconds,
                "decode_ms": 1e3 * dec.seconds,
                "ms_per_step": 1e3 * dec.seconds / new_tokens,
                "decode_tok_s": B * new_tokens / dec.seconds,
                "prefill_tok_s": B * P / pre.seconds,
                **trust_columns(dec, load.cores, load_before, why),
                "prefill_speedup": pre.speedup,
                "check_rel_diff": check[name],
                "setup_s": setup[name],
                "graphs_compiled": graphs[name] if compiled else None,
                "cudagraph_skips": skips[name] + late_skips if graphed else None,
                "graph_launches": launches[name] if graphed else None,
                "cuda_graphs": (
                    skips[name] + late_skips == 0 and launches[name] != 0 if graphed else None
                ),
            }
        )
    return rows


def _skips() -> int:
    """CUDA graphs inductor decided not to use (its counter, in torch releases before 2.11 and 2.13)."""
    return _counter("inductor", "cudagraph_skips")


def _compile_mode(device: torch.device) -> str:
    if device.type == "cuda":
        return "torch.compile reduce-overhead (CUDA graphs)"
    return "torch.compile (inductor, C++ wrapper)"
