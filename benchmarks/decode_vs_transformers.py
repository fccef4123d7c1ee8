"""Batch-1 greedy decoding on this CPU: our KV-cache decode vs transformers, and folded vs RMSNorm.

    python benchmarks/decode_vs_transformers.py [--repeats 15] [--out results/bench/cpu_decode.json]

All in one process, float32, `--threads` threads (default 2), the paper's 30M llama model (d=512, L=8,
16 heads, vocab 10k, SwiGLU, RoPE) with random weights:

1. transformers' LlamaForCausalLM and our GPT with the same weights (tapernorm.load_hf) decode the same
   prompt greedily: the tokens must be equal (exit status 1 otherwise); then transformers' generate,
   our decode (eager, and compiled unless --no-compiled) and GPT.generate are timed end to end
   (prefill and decode), interleaved. Our decode steps are compared with the memory floor: at batch 1
   each step streams every weight once, so it takes at least weight bytes / memory bandwidth, the
   bandwidth measured here as the best of a large tensor's sum, copy and matrix-vector product.
2. The RMSNorm baseline vs an Internal-Taper model at g = 0 (calibrated c, random gamma_tilde) exported
   as explicit scaling and folded: bench_decode's paired, interleaved per-round ratios (eager, and
   compiled unless --no-compiled). For reference, the same ratio for transformers with its internal
   norms replaced by identities.

Nothing is asserted about speed; the summary is printed as markdown and JSON (and written with --out),
with the load average before and after, so a busy machine shows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch
from torch import nn

from tapernorm import load_hf
from tapernorm.bench.decode import bench_decode, greedy
from tapernorm.bench.generate import memory_bandwidth, weight_bytes
from tapernorm.bench.timing import Clock, environment, paired_rounds, timed
from tapernorm.bench.train_step import hf_llama_like
from tapernorm.bench.trust import paired_speedup
from tapernorm.bench.variants import inference_variants, paper_config, random_variants
from tapernorm.decode import compiled_decoder, eager_decoder
from tapernorm.runtime import jsonio
from tapernorm.training.checkpoint import write_json


def vs_transformers(
    cfg, prompt: torch.Tensor, new_tokens: int, repeats: int, warmup: int, compiled: bool
) -> dict:
    """transformers' generate vs our decode on the same weights: same tokens?, then timings."""
    hf = hf_llama_like(cfg).eval()
    hf.generation_config.eos_token_id = None  # random weights: never stop early
    hf.generation_config.pad_token_id = 0
    ours = load_hf(hf).eval()
    clock = Clock(torch.device("cpu"))
    B, P = prompt.shape
    decoders = {"ours": eager_decoder(ours, B, P + new_tokens - 1)}
    if compiled:
        decoders["ours_compiled"] = compiled_decoder(ours, B, P + new_tokens - 1)

    def hf_generate() -> torch.Tensor:
        return hf.generate(prompt, max_new_tokens=new_tokens, do_sample=False)

    def timed_decoder(decoder):
        def decode_round() -> dict[str, float]:
            decode_round.result, (pre, dec), _ = greedy(*decoder, prompt, new_tokens, clock)
            return {"total": pre + dec, "prefill": pre, "decode": dec}

        return decode_round

    runs = {
        "transformers": timed(hf_generate, key="total"),
        "ours_generate": timed(lambda: ours.generate(prompt, new_tokens), key="total"),
    }
    runs.update({name: timed_decoder(d) for name, d in decoders.items()})
    with torch.inference_mode():
        for name in ("transformers", *decoders):  # compiles, if so, outside the timed rounds
            runs[name]()
        hf_tokens = runs["transformers"].result
        same = {name: torch.equal(hf_tokens, runs[name].result) for name in decoders}
        times = paired_rounds(runs, repeats, warmup)
    base, steps = times["transformers"]["total"], new_tokens - 1
    return {
        "same_tokens": same,
        "tok_s": {n: B * new_tokens / statistics.median(t["total"]) for n, t in times.items()},
        "over_transformers": {n: paired_speedup(base, t["total"])[0] for n, t in times.items()},
        "prefill_ms": {n: 1e3 * statistics.median(times[n]["prefill"]) for n in decoders},
        "ms_per_decode_step": {
            n: 1e3 * statistics.median(times[n]["decode"]) / steps for n in decoders
        },
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

    def timed_generate(model: nn.Module):
        return timed(
            lambda: model.generate(prompt, max_new_tokens=new_tokens, do_sample=False), key="total"
        )

    with torch.inference_mode():
        runs = {"rmsnorm": timed_generate(plain), "identity": timed_generate(bare)}
        times = paired_rounds(runs, repeats, warmup)
    return paired_speedup(times["rmsnorm"]["total"], times["identity"]["total"])[0]


def markdown(r: dict) -> str:
    v, bw = r["vs_transformers"], r["bandwidth"]
    floor_ms = 1e3 * v["weight_bytes"] / (bw["best_gb_s"] * 1e9)
    names = {
        "transformers": "transformers generate",
        "ours": "ours, eager",
        "ours_compiled": "ours, compiled (torch.compile)",
        "ours_generate": "ours, GPT.generate",
    }
    lines = [
        f"## Batch-1 decode on {r['env']['device']} ({r['env']['threads']} threads, "
        f"torch {r['env']['torch']}, float32)",
        "",
        f"Model d=512 L=8 16 heads vocab 10k ({v['weight_bytes'] / 1e6:.1f} MB of weights), "
        f"prompt {r['prompt_len']}, {r['new_tokens']} new tokens, {r['repeats']} interleaved repeats; "
        f"load average {r['load_before'][0]:.2f} before, {r['load_after'][0]:.2f} after.",
        "",
        "| | tokens/s (prefill + decode) | over transformers (median paired ratio) |",
        "|---|---|---|",
    ]
    for name, label in names.items():
        if name in v["tok_s"]:
            lines.append(
                f"| {label} | {v['tok_s'][name]:.1f} | {v['over_transformers'][name]:.2f} |"
            )
    lines += ["", f"Same tokens as transformers: {v['same_tokens']}."]
    for name, ms in v["ms_per_decode_step"].items():
        lines.append(
            f"{names[name]}: {ms:.2f} ms per decode step = {ms / floor_ms:.2f}x the floor "
            f"{floor_ms:.2f} ms (weight bytes / {bw['best_gb_s']:.1f} GB/s)."
        )
    lines += [
        f"Bandwidth of a {bw['tensor_mb']} MB tensor: sum {bw['sum_gb_s']:.1f}, copy "
        f"{bw['copy_gb_s']:.1f}, matrix-vector {bw['gemv_gb_s']:.1f} GB/s.",
        "",
        "| mode | variant | decode tok/s | ms/step | speedup over baseline (median, IQR) |",
        "|---|---|---|---|---|",
    ]
    for row in r["fold"]:
        lines.append(
            f"| {row['mode']} | {row['variant']} | {row['decode_tok_s']:.1f} | "
            f"{row['ms_per_step']:.2f} | {row['speedup']:.3f} [{row['speedup_q1']:.3f}, "
            f"{row['speedup_q3']:.3f}] |"
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
    p.add_argument("--no-compiled", action="store_true", help="skip torch.compile (~20 s a graph)")
    p.add_argument("--no-hf-identity", action="store_true", help="skip the transformers reference")
    p.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_before = os.getloadavg()
    cfg = paper_config(block_size=args.prompt_len + args.new_tokens)
    prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt_len))
    bandwidth = memory_bandwidth()
    compiled = not args.no_compiled
    versus = vs_transformers(cfg, prompt, args.new_tokens, args.repeats, args.warmup, compiled)
    models, reference = inference_variants(*random_variants(cfg, seed=0))
    fold_rows = []
    for compile in (False, True) if compiled else (False,):
        fold_rows += bench_decode(
            models,
            batch_sizes=(1,),
            prompt_lens=(args.prompt_len,),
            new_tokens=args.new_tokens,
            repeats=args.repeats,
            warmup=args.warmup,
            device="cpu",
            dtype="float32",
            compile=compile,
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
    print(jsonio.dumps({k: v for k, v in result.items() if k != "fold"}, indent=2))
    if args.out:
        write_json(args.out, result)
    return 0 if all(versus["same_tokens"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
