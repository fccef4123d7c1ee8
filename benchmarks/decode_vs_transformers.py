"""Batch-1 greedy decoding on this CPU: our KV-cache decode vs transformers, and folded vs RMSNorm.

    python benchmarks/decode_vs_transformers.py [--repeats 15] [--out results/bench/cpu_decode.json]

All in one process, float32, `--threads` threads (default 2), the paper's 30M llama model (d=512, L=8,
16 heads, vocab 10k, SwiGLU, RoPE) with random weights:

1. transformers' LlamaForCausalLM and our GPT with the same weights (tapernorm.load_hf) decode the same
   prompt greedily: the tokens must be equal; then both are timed, interleaved, end to end (prefill and
   decode), and our decode steps are compared with the memory floor: at batch 1 each step streams every
   weight once, so a step takes at least weight bytes / memory bandwidth (bandwidth measured here with
   a large tensor sum).
2. The RMSNorm baseline vs an Internal-Taper model at g = 0 (calibrated c, random gamma_tilde) exported
   as explicit scaling and folded: bench_decode's paired, interleaved per-round ratios. For reference,
   the same ratio for transformers with its internal norms replaced by identities.

Nothing is asserted about speed; the summary is printed as markdown and JSON (and written with --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from tapernorm import load_hf
from tapernorm.bench import (
    Clock,
    environment,
    hf_llama_like,
    inference_variants,
    paired_rounds,
    paired_speedup,
    paper_config,
    random_variants,
)
from tapernorm.bench_decode import bench_decode, eager_decoder, greedy
from tapernorm.checkpoint import write_json


def memory_bandwidth(megabytes: int = 512, repeats: int = 9) -> dict:
    """Read bandwidth (a float32 tensor's sum) and copy bandwidth (read + write), median GB/s."""
    x = torch.ones(megabytes * 2**20 // 4)
    y = torch.empty_like(x)
    nbytes = x.numel() * 4
    read, copy = [], []
    for _ in range(repeats + 1):  # the first round warms up (page faults)
        t0 = time.perf_counter()
        x.sum()
        t1 = time.perf_counter()
        y.copy_(x)
        t2 = time.perf_counter()
        read.append(nbytes / (t1 - t0) / 1e9)
        copy.append(2 * nbytes / (t2 - t1) / 1e9)
    return {
        "tensor_mb": megabytes,
        "read_gb_s": statistics.median(read[1:]),
        "copy_gb_s": statistics.median(copy[1:]),
    }


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the distinct parameters (a tied embedding and head count once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def vs_transformers(cfg, prompt: torch.Tensor, new_tokens: int, repeats: int, warmup: int) -> dict:
    hf = hf_llama_like(cfg).eval()
    hf.generation_config.eos_token_id = None  # random weights: never stop early
    hf.generation_config.pad_token_id = 0
    ours = load_hf(hf).eval()
    clock = Clock(torch.device("cpu"))
    B, P = prompt.shape
    prefill, step = eager_decoder(ours, B, P + new_tokens - 1)

    def run_hf() -> dict[str, float]:
        t0 = time.perf_counter()
        run_hf.tokens = hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False)
        return {"total": time.perf_counter() - t0}

    def run_ours() -> dict[str, float]:
        run_ours.tokens, (pre, dec), _ = greedy(prefill, step, prompt, new_tokens, clock)
        return {"total": pre + dec, "prefill": pre, "decode": dec}

    def run_generate() -> dict[str, float]:
        t0 = time.perf_counter()
        ours.generate(prompt, new_tokens)
        return {"total": time.perf_counter() - t0}

    runs = {"transformers": run_hf, "ours": run_ours, "ours_generate": run_generate}
    with torch.inference_mode():
        run_hf(), run_ours()
        same = torch.equal(run_hf.tokens, run_ours.tokens)
        first_diff = None
        if not same:
            differ = (run_hf.tokens != run_ours.tokens).any(0).nonzero()
            first_diff = int(differ[0]) - P
        times = paired_rounds(runs, repeats, warmup)
    total = {name: statistics.median(t["total"]) for name, t in times.items()}
    steps = new_tokens - 1
    return {
        "same_tokens": same,
        "first_differing_new_token": first_diff,
        "tok_s": {name: B * new_tokens / t for name, t in total.items()},
        "ours_over_transformers": paired_speedup(
            times["transformers"]["total"], times["ours"]["total"]
        )[0],
        "generate_over_transformers": paired_speedup(
            times["transformers"]["total"], times["ours_generate"]["total"]
        )[0],
        "ours_prefill_ms": 1e3 * statistics.median(times["ours"]["prefill"]),
        "ours_ms_per_decode_step": 1e3 * statistics.median(times["ours"]["decode"]) / steps,
        "ours_decode_tok_s": B * steps / statistics.median(times["ours"]["decode"]),
        "weight_bytes": weight_bytes(ours),
    }


def hf_identity_ratio(cfg, prompt, new_tokens: int, repeats: int, warmup: int) -> float:
    """transformers' decode speedup from replacing its internal norms by identities (reference)."""
    torch.manual_seed(1)
    plain, bare = hf_llama_like(cfg).eval(), hf_llama_like(cfg).eval()
    bare.load_state_dict(plain.state_dict())
    for layer in bare.model.layers:
        layer.input_layernorm = nn.Identity()
        layer.post_attention_layernorm = nn.Identity()
    for m in (plain, bare):
        m.generation_config.eos_token_id = None
        m.generation_config.pad_token_id = 0

    def timed(model):
        def run() -> dict[str, float]:
            t0 = time.perf_counter()
            model.generate(prompt, max_new_tokens=new_tokens, do_sample=False)
            return {"total": time.perf_counter() - t0}

        return run

    with torch.inference_mode():
        times = paired_rounds({"rmsnorm": timed(plain), "identity": timed(bare)}, repeats, warmup)
    return paired_speedup(times["rmsnorm"]["total"], times["identity"]["total"])[0]


def markdown(r: dict) -> str:
    v, b, f = r["vs_transformers"], r["bandwidth"], r["fold"]
    floor_ms = 1e3 * v["weight_bytes"] / (b["read_gb_s"] * 1e9)
    lines = [
        f"## Batch-1 decode on {r['env']['device']} ({r['env']['threads']} threads, "
        f"torch {r['env']['torch']}, float32)",
        "",
        f"Model d=512 L=8 16 heads vocab 10k ({v['weight_bytes'] / 1e6:.1f} MB of weights), "
        f"prompt {r['prompt_len']}, {r['new_tokens']} new tokens, {r['repeats']} interleaved repeats; "
        f"load average {r['load_before'][0]:.2f} before, {r['load_after'][0]:.2f} after.",
        "",
        "| | tokens/s (prefill + decode) | ratio to transformers |",
        "|---|---|---|",
        f"| transformers generate | {v['tok_s']['transformers']:.1f} | 1.00 |",
        f"| ours (bench decode) | {v['tok_s']['ours']:.1f} | {v['ours_over_transformers']:.2f} |",
        f"| ours (GPT.generate) | {v['tok_s']['ours_generate']:.1f} | "
        f"{v['generate_over_transformers']:.2f} |",
        "",
        f"Same tokens as transformers: {v['same_tokens']}. Our decode: "
        f"{v['ours_ms_per_decode_step']:.2f} ms/step ({v['ours_decode_tok_s']:.1f} tok/s); floor "
        f"{floor_ms:.2f} ms/step = weight bytes / read bandwidth {b['read_gb_s']:.1f} GB/s "
        f"(copy {b['copy_gb_s']:.1f} GB/s) -> {v['ours_ms_per_decode_step'] / floor_ms:.2f}x the floor.",
        "",
        "| variant | decode tok/s | ms/step | speedup over baseline (median, IQR) |",
        "|---|---|---|---|",
    ]
    for row in f:
        lines.append(
            f"| {row['variant']} | {row['decode_tok_s']:.1f} | {row['ms_per_step']:.2f} | "
            f"{row['speedup']:.3f} [{row['speedup_q1']:.3f}, {row['speedup_q3']:.3f}] |"
        )
    if r["hf_identity_speedup"] is not None:
        lines += ["", f"transformers, internal norms -> identity: {r['hf_identity_speedup']:.3f}x"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=15, help="interleaved timed rounds (>= 15)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--no-hf-identity", action="store_true", help="skip the transformers reference")
    p.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_before = os.getloadavg()
    cfg = paper_config(block_size=args.prompt_len + args.new_tokens)
    prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt_len))
    bandwidth = memory_bandwidth()
    versus = vs_transformers(cfg, prompt, args.new_tokens, args.repeats, args.warmup)
    models, reference = inference_variants(*random_variants(cfg, seed=0))
    fold_rows = bench_decode(
        models,
        batch_sizes=(1,),
        prompt_lens=(args.prompt_len,),
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        warmup=args.warmup,
        device="cpu",
        dtype="float32",
        reference=reference,
    )
    hf_identity = None
    if not args.no_hf_identity:
        hf_identity = hf_identity_ratio(cfg, prompt, args.new_tokens, args.repeats, args.warmup)
    result = {
        "env": environment("cpu"),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "bandwidth": bandwidth,
        "vs_transformers": versus,
        "fold": fold_rows,
        "hf_identity_speedup": hf_identity,
    }
    print(markdown(result))
    print(json.dumps({k: v for k, v in result.items() if k != "fold"}, indent=2))
    if args.out:
        write_json(args.out, result)
    return 0 if versus["same_tokens"] else 1


if __name__ == "__main__":
    sys.exit(main())
