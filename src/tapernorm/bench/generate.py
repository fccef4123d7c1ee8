"""GPT.generate against transformers' generate, and both against the memory floor of decoding.

One process: transformers' LlamaForCausalLM with random weights and our GPT with the same weights
(load_hf) decode the same prompt greedily; the tokens must be equal (GenerateMismatchError otherwise).
Then, interleaved (bench.timing.paired_rounds), end to end (prefill and decode): transformers'
`generate(do_sample=False)`, `GPT.generate` and `GPT.generate(compile=True)`. The compiled decoder is
built and compiled by an untimed first call, reported as compile_s.

The floor: at small batch a decode step reads every weight once, so a new token costs at least
weight bytes / memory bandwidth, the bandwidth measured in the same process (before and after the
timings, the best of a large tensor's sum, copy and matrix-vector product). floor_ratio = time per new
token (its share of the prefill included) / that floor.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
from torch import nn

from ..model import GPTConfig
from ..runtime.markdown import pipe_table
from .timing import environment, paired_rounds, timed
from .train_step import hf_llama_like
from .trust import paired_speedup
from .variants import paper_config

IMPLS = {
    "transformers": "transformers generate(do_sample=False)",
    "eager": "GPT.generate",
    "compiled": "GPT.generate(compile=True)",
}


class GenerateMismatchError(RuntimeError):
    """GPT.generate chose other tokens than transformers' generate on the same weights."""


def memory_bandwidth(megabytes: int = 512, repeats: int = 9) -> dict:
    """GB/s streaming a float32 tensor of `megabytes`: its sum (read), a copy (read + write) and a
    matrix-vector product (read, like a decode step's); medians over `repeats`."""
    n = megabytes * 2**20 // 4
    x, y = torch.ones(n), torch.empty(n)
    w, v = x.view(-1, 8192), torch.ones(8192)
    ops = {"sum": (x.sum, 1), "copy": (lambda: y.copy_(x), 2), "gemv": (lambda: w @ v, 1)}
    out = {"tensor_mb": megabytes}
    for name, (fn, passes) in ops.items():
        times = []
        for _ in range(repeats + 1):  # the first call warms up (page faults)
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[f"{name}_gb_s"] = passes * 4 * n / statistics.median(times[1:]) / 1e9
    out["best_gb_s"] = max(out[f"{name}_gb_s"] for name in ops)
    return out


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the distinct parameters (a tied embedding and head count once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def bench_generate(
    cfg: GPTConfig | None = None,
    batch: int = 1,
    prompt_len: int = 64,
    new_tokens: int = 64,
    repeats: int = 15,
    warmup: int = 2,
    compile: bool = True,
    seed: int = 0,
) -> list[dict]:
    """One row per implementation (IMPLS): median seconds of a whole generate call, tokens/s, ms
    per new token (per step of the batch), the median per-round speedup over transformers
    (quartiles beside it) and the floor ratio. `cfg`: a llama-style model, by default the paper's
    30M one (bench.variants.paper_config); float32 on the CPU."""
    from ..interop.hf_import import load_hf

    cfg = cfg or paper_config()
    cfg = GPTConfig(**{**cfg.to_dict(), "block_size": prompt_len + new_tokens})
    torch.manual_seed(seed)
    hf = hf_llama_like(cfg).eval()
    hf.generation_config.eos_token_id = None  # random weights: never stop early
    hf.generation_config.pad_token_id = 0
    ours = load_hf(hf).eval()
    prompt = torch.randint(0, cfg.vocab_size, (batch, prompt_len))
    load_before, bw_before = os.getloadavg(), memory_bandwidth()

    runs = {
        "transformers": timed(
            lambda: hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False)
        ),
        "eager": timed(lambda: ours.generate(prompt, new_tokens)),
    }
    if compile:
        runs["compiled"] = timed(lambda: ours.generate(prompt, new_tokens, compile=True))
    with torch.inference_mode():  # for transformers' generate too (ours enters it by itself)
        first = {name: run()["s"] for name, run in runs.items()}  # compiles, if so, untimed
        for name in runs:
            if not torch.equal(runs[name].result, runs["transformers"].result):
                raise GenerateMismatchError(f"{IMPLS[name]} chose other tokens than transformers")
        times = paired_rounds(runs, repeats, warmup)
    compile_s = first.get("compiled")
    bandwidth = max(bw_before["best_gb_s"], memory_bandwidth()["best_gb_s"])
    setting = _setting(cfg, ours, bandwidth, load_before[0], os.getloadavg()[0])
    floor_s = weight_bytes(ours) / (bandwidth * 1e9)
    base = times["transformers"]["s"]
    rows = []
    for name, t in times.items():
        median, q1, q3 = paired_speedup(base, t["s"])
        seconds = statistics.median(t["s"])
        rows.append(
            {
                "impl": name,
                "call": IMPLS[name],
                "batch": batch,
                "prompt_len": prompt_len,
                "new_tokens": new_tokens,
                "dtype": "float32",
                "rounds": repeats,
                "warmup": warmup,
                "median_s": seconds,
                "tok_s": batch * new_tokens / seconds,
                "ms_per_token": 1e3 * seconds / new_tokens,
                "speedup_vs_transformers": median,
                "speedup_q1": q1,
                "speedup_q3": q3,
                "same_tokens": True,
                "floor_ms": 1e3 * floor_s,
                "floor_ratio": seconds / new_tokens / floor_s,
                "compile_s": compile_s if name == "compiled" else None,
                **setting,
            }
        )
    return rows


def _setting(cfg: GPTConfig, ours, bandwidth: float, load_before: float, load_after: float):
    """The columns every row of bench_generate shares: the model, the machine and its load."""
    from transformers import __version__ as transformers_version

    env = environment("cpu")
    return {
        "weight_mb": weight_bytes(ours) / 1e6,
        "bandwidth_gb_s": bandwidth,
        "load_before": load_before,
        "load_after": load_after,
        "device_name": env["device"],
        "threads": env["threads"],
        "torch": env["torch"],
        "transformers": transformers_version,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "vocab_size": cfg.vocab_size,
    }


def markdown(rows: list[dict]) -> str:
    """The rows as a short markdown report."""
    r = rows[0]
    lines = [
        f"Batch {r['batch']}, prompt {r['prompt_len']}, {r['new_tokens']} new tokens, float32, "
        f"{r['threads']} threads on {r['device_name']} (torch {r['torch']}, transformers "
        f"{r['transformers']}); model d={r['n_embd']} L={r['n_layer']} {r['n_head']} heads vocab "
        f"{r['vocab_size']}, {r['weight_mb']:.1f} MB of weights. {r['rounds']} interleaved rounds "
        f"after {r['warmup']} warm-up rounds; load average {r['load_before']:.2f} before, "
        f"{r['load_after']:.2f} after. Floor: weight bytes / {r['bandwidth_gb_s']:.1f} GB/s = "
        f"{r['floor_ms']:.2f} ms per token.",
        "",
    ]
    header = ["call", "tokens/s", "ms per token", "vs transformers (median [IQR])", "x floor"]
    lines += pipe_table(header, [
        [r["call"], f"{r['tok_s']:.1f}", f"{r['ms_per_token']:.2f}",
         f"{r['speedup_vs_transformers']:.2f} [{r['speedup_q1']:.2f}, {r['speedup_q3']:.2f}]",
         f"{r['floor_ratio']:.2f}"]
        for r in rows
    ])  # fmt: skip
    compiled = [r for r in rows if r["compile_s"] is not None]
    lines += ["", "Same tokens as transformers: yes (checked before timing)."]
    if compiled:
        lines.append(
            f"Compile warm-up (first compile=True call, untimed): {compiled[0]['compile_s']:.1f} s."
        )
    return "\n".join(lines) + "\n"
