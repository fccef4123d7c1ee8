"""Benchmarks: medians of repeated, interleaved runs and ratios against a baseline timed in the same
process. Nothing here asserts a timing; the numbers are reported, never tested.

Inference (paper Table 3 and our decode protocol): `inference_variants` turns a baseline and a g = 0
tapered model into {baseline, explicit, folded} (and a DyT model, if given, into a fourth column
"dyt": the norm-free alternative, timed as it is since it cannot fold); `bench_forward` times the v1
forward pass (last-token logits, no KV cache) and bench_decode.py the v2 greedy decode. Variants run
round-robin, one call each per round, so drift hits all alike; a speedup is the median over rounds of
t_baseline / t_variant, and every time and throughput beside it is derived from it (bench_trust).
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from .bench_trust import (  # noqa: F401  (paired_speedup: bench.paired_speedup for its users)
    LoadMeter,
    disturbance,
    load_now,
    paired,
    paired_cell,
    paired_speedup,
    trust_columns,
)
from .device import autocast_for, resolve_device
from .fold import export_explicit_scaling, fold_model, verify_fold
from .model import DYT_RECIPE, GPT, GPTConfig
from .norms import set_gate, taper_norms

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str | torch.device | None = None) -> dict:
    """Device, versions and threads, recorded beside every benchmark result."""
    cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
    return {
        "device": torch.cuda.get_device_name(device) if cuda else cpu_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


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

    def timed(fn: Callable[[], None]) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            return {"s": time.perf_counter() - t0}

        return run

    times = paired_rounds({n: timed(fn) for n, fn in fns.items()}, repeats, warmup)
    base = next(iter(fns))
    cell = {n: paired(times[base]["s"], times[n]["s"]) for n in fns}
    return {  # one statistic: median_s is the baseline's median over the paired ratio
        n: {"median_s": p.seconds, "ratio_to_" + base: 1.0 / p.speedup, "repeats": repeats}
        for n, p in cell.items()
    }


class CsvRows:
    """Rows appended to a CSV file as they come, each call's flushed to disk before it returns, so
    a benchmark stopped at a time limit keeps the cells it finished. The file is emptied first; the
    columns are the first row's (later rows may leave some out, not add any)."""

    def __init__(self, path: str | Path):
        self.path, self.columns = Path(path), None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def __call__(self, rows: list[dict]) -> None:
        if not rows:
            return
        with self.path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns or list(rows[0]))
            if self.columns is None:
                writer.writeheader()
                self.columns = list(rows[0])
            writer.writerows(rows)
            f.flush()
            os.fsync(f.fileno())


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


TRAIN_DTYPES = ("float32", "bfloat16")  # bfloat16: float32 weights under bf16 autocast (training's)


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
) -> dict:
    """Seconds per training step (forward, backward, clip, AdamW): our baseline, our model mid-taper
    (0 < g < 1, both branches computed), with_dyt a DyT model, and transformers' LlamaForCausalLM on
    the same sizes. On `device`; dtype bfloat16 runs the step under bf16 autocast as training does
    (device.autocast_for); on a GPU each timed step is synchronized before and after."""
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
            model.to(device),
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


# ---- inference: devices, clocks and rounds -----------------------------------------------------------


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


@contextlib.contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """torch.set_float32_matmul_precision inside the block ("high" = TF32 on a GPU)."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


class Clock:
    """Time stamps: perf_counter on the CPU; CUDA events on a GPU, so a span is the GPU's work in
    stream order, read after one synchronization at its end."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def stamp(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        if not self.cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def paired_rounds(
    runs: dict[str, Callable[[], dict[str, float]]], rounds: int, warmup: int
) -> dict[str, dict[str, list[float]]]:
    """Call every run `warmup` times, then `rounds` times round-robin, each round starting one name
    later (so no variant always follows the same one). A run returns {quantity: seconds}; the result
    is, per name and quantity, the list over rounds."""
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    times: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for r in range(rounds):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            for key, seconds in runs[name]().items():
                times[name].setdefault(key, []).append(seconds)
    return times


# ---- inference: the models --------------------------------------------------------------------------


def paper_config(**overrides) -> GPTConfig:
    """The paper's 30M model: d=512, L=8, 16 heads, vocab 10k, SwiGLU, RoPE (Sec. 6.1)."""
    base = dict(style="llama", n_layer=8, n_head=16, n_embd=512, vocab_size=10000, block_size=512)
    return GPTConfig(**{**base, **overrides})


@torch.no_grad()
def random_variants(cfg: GPTConfig, seed: int = 0) -> tuple[GPT, GPT]:
    """A random-weight baseline and an Internal-Taper model with the same weights at g = 0.

    The tapered model gets random gamma_tilde in [0.8, 1.25] and, layer by layer in one forward pass
    on random tokens, c = 1 / rms of its norm's input (what calibration yields in a trained model;
    without it a random network at g = 0 overflows within a few layers).
    """
    torch.manual_seed(seed)
    baseline = GPT(dataclasses.replace(cfg, taper="none", norm_mode="taper")).eval()
    tapered = GPT(dataclasses.replace(cfg, taper="internal", norm_mode="taper")).eval()
    tapered.load_state_dict(baseline.state_dict(), strict=False)  # TaperNorm state keeps its init
    for _, norm in taper_norms(tapered):
        norm.weight_tilde.uniform_(0.8, 1.25)
        norm.frozen.fill_(True)
    set_gate(tapered, 0.0)

    def calibrate(norm: torch.nn.Module, args: tuple[torch.Tensor]) -> None:
        norm.c.fill_(float(args[0].float().pow(2).mean().rsqrt()))

    hooks = [norm.register_forward_pre_hook(calibrate) for _, norm in taper_norms(tapered)]
    tapered(torch.randint(0, cfg.vocab_size, (4, min(cfg.block_size, 64))))
    for hook in hooks:
        hook.remove()
    return baseline, tapered


@torch.no_grad()
def random_dyt(cfg: GPTConfig, seed: int = 0) -> GPT:
    """A random-weight model of `cfg`'s sizes with every norm a DyT, by DyT's LLaMA recipe
    (model.DYT_RECIPE: untied head, embedding scalar, no DyT bias, alpha0 by width)."""
    torch.manual_seed(seed)
    dyt = dataclasses.replace(
        cfg,
        taper="none",
        norm_mode="taper",
        dyt_alpha_attn=None,
        dyt_alpha_other=None,
        **DYT_RECIPE,
    )
    return GPT(dyt).eval()


def inference_variants(
    baseline: GPT, tapered: GPT, dyt: GPT | None = None
) -> tuple[dict[str, GPT], GPT]:
    """The three columns of paper Table 3 and the model the exports are verified against:
    {"baseline", "explicit": `tapered` at g = 0 with its norms as fixed multiplies, "folded"}, and
    "dyt" when a DyT model is given."""
    if tapered.config.taper == "none" or tapered.config.norm_mode != "taper":
        raise ValueError("inference_variants needs a tapered model in norm_mode 'taper'")
    if dyt is not None and dyt.config.norm != "dyt":
        raise ValueError(f"inference_variants: the dyt model has norm {dyt.config.norm!r}")
    reference = tapered.eval()
    set_gate(reference, 0.0)
    models = {
        "baseline": baseline.eval(),
        "explicit": export_explicit_scaling(reference),
        "folded": fold_model(reference),
    }
    if dyt is not None:
        models["dyt"] = dyt.eval()
    return models, reference


def with_block_size(model: GPT, block_size: int) -> GPT:
    """`model` able to take `block_size` positions (the same weights; RoPE tables recomputed), or
    `model` itself when it already can. Learned positions (gpt2 style) cannot grow."""
    cfg = model.config
    if block_size <= cfg.block_size:
        return model
    if cfg.style != "llama":
        raise ValueError(
            f"{cfg.style} models have learned positions: block_size {cfg.block_size} cannot grow "
            f"to the {block_size} positions asked for"
        )
    p = model.tok_emb.weight
    longer = GPT(dataclasses.replace(cfg, block_size=block_size)).to(p.device, p.dtype)
    longer.load_state_dict(model.state_dict())
    return longer.train(model.training)


def prepare_models(
    models: dict[str, GPT],
    reference: GPT | None,
    device: torch.device,
    dtype: torch.dtype,
    rtol: float = 1e-4,  # random tokens: trained d64 Internal-Taper (+aux) measured 2.9e-5 here
    check: Callable[[GPT], object] | None = None,
) -> dict[str, GPT]:
    """Copies of `models` on `device` in `dtype`, in eval mode, after every export among them
    (norm_mode scale or folded) was verified against the g = 0 `reference` in float32 at full matmul
    precision: verify_fold raises FoldVerificationError beyond `rtol` (looser than the fold rule's
    1e-5 on validation text: random tokens drive a trained model's unnormalized blocks harder and
    float32 roundoff grows; a wrong fold is off by far more). `check`, if given, is called
    on each model there too (float32, on `device`). The inputs are left as they are."""
    exports = [n for n, m in models.items() if m.config.norm_mode in ("scale", "folded")]
    if exports and reference is None:
        raise ValueError(f"exported models {exports} need a reference to be verified against")
    out = {}
    with torch.inference_mode(), matmul_precision("highest"):
        if exports:
            reference = copy.deepcopy(reference).to(device=device, dtype=torch.float32).eval()
            cfg = reference.config
            gen = torch.Generator().manual_seed(1)
            idx = torch.randint(0, cfg.vocab_size, (2, min(cfg.block_size, 64)), generator=gen)
        for name, model in models.items():
            out[name] = copy.deepcopy(model).to(device=device, dtype=torch.float32).eval()
            if name in exports:
                verify_fold(reference, out[name], idx.to(device), rtol=rtol)
            if check is not None:
                check(out[name])
            out[name].to(dtype=dtype)
    return out


def describe(model: GPT) -> dict:
    """The model columns of a benchmark row."""
    cfg = model.config
    return {
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "vocab_size": cfg.vocab_size,
        "params": model.num_params(),
    }


def common_row(benchmark: str, mode: str, device: torch.device, dtype: torch.dtype, model: GPT):
    """Columns shared by every row of a benchmark: what was measured, where, with what."""
    env = environment(device)
    return {
        "benchmark": benchmark,
        "mode": mode,
        "device": device.type,
        "device_name": env["device"],
        "torch": env["torch"],
        "dtype": str(dtype).removeprefix("torch."),
        "threads": env["threads"],
        **describe(model),
    }


def timing_precision(device: torch.device):
    """TF32 matmuls on a GPU while timing (the paper's setting); the CPU is left as it is."""
    return matmul_precision("high") if device.type == "cuda" else contextlib.nullcontext()


# ---- inference: the forward pass (paper Table 3, v1) ---------------------------------------------------


def bench_forward(
    models: dict[str, GPT],
    batch_sizes: Sequence[int] = (1, 4),
    seq_lens: Sequence[int] = (128, 256, 512),
    warmup: int = 10,
    iters: int = 50,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = torch.float32,
    reference: GPT | None = None,
    on_rows: Callable[[list[dict]], None] = lambda rows: None,
) -> list[dict]:
    """Paper Table 3: one forward pass over B x T tokens returning the last token's logits, no KV
    cache. Per cell and variant: the speedup over the first model (median of per-round ratios over
    `iters` interleaved rounds), the latency and throughput B * T / latency it implies, the cell's
    spread and load, and whether its timing was disturbed (bench_trust). Each cell's rows go to
    `on_rows` as soon as it is timed (e.g. a CsvRows)."""
    device, dtype = resolve_device(device), resolve_dtype(dtype)
    models = prepare_models(models, reference, device, dtype)
    clock, names, base = Clock(device), list(models), next(iter(models))
    common = common_row("forward", "eager", device, dtype, models[base])
    load_before = load_now()
    rows = []
    with torch.inference_mode(), timing_precision(device):
        for B in batch_sizes:
            for T in seq_lens:
                idx = torch.randint(0, models[base].config.vocab_size, (B, T), device=device)

                def run(model: GPT, idx=idx) -> Callable[[], dict[str, float]]:
                    def call() -> dict[str, float]:
                        clock.sync()
                        start = clock.stamp()
                        model.head(model.hidden(idx)[:, -1:])
                        return {"latency": clock.seconds(start, clock.stamp())}

                    return call

                with LoadMeter() as load:
                    times = paired_rounds({n: run(models[n]) for n in names}, iters, warmup)
                timing = paired_cell({n: times[n]["latency"] for n in names})
                why = disturbance(timing, load.cores)
                cell = [
                    {
                        **common,
                        "variant": name,
                        "batch": B,
                        "seq_len": T,
                        "warmup": warmup,
                        "rounds": iters,
                        "latency_ms": 1e3 * p.seconds,
                        "tok_s": B * T / p.seconds,
                        **trust_columns(p, load.cores, load_before, why),
                    }
                    for name, p in timing.items()
                ]
                on_rows(cell)
                rows += cell
    return rows
