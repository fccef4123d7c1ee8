"""The eager decode step's linear kernels (tapernorm.decode.step_linear) against every linear layer on
its own kernel (MKL's GEMM on a CPU), per model width: a kernel micro-benchmark beside bench.decode,
run by benchmarks/step_linear.py, not part of the pipeline.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from ..decode import Step, eager_decoder, layer_linear, step_linear
from ..model import GPT
from .timing import paired_rounds, timed
from .trust import paired_speedup
from .variants import paper_config


def bench_step_linear(
    widths: tuple[int, ...] = (64, 128, 256, 384, 512),
    batch: int = 1,
    steps: int = 64,
    repeats: int = 15,
    warmup: int = 2,
    seed: int = 0,
) -> list[dict]:
    """The eager decode step with step_linear's kernels against every linear layer on its own
    kernel (MKL's GEMM on a CPU), per model width (the paper's model otherwise, head_dim 32, random
    weights, float32, this CPU): median ms a step of `steps` steps after a 64-token prompt, and the
    median per-round speedup over interleaved rounds."""
    rows = []
    for d in widths:
        torch.manual_seed(seed)
        model = GPT(paper_config(n_embd=d, n_head=max(1, d // 32), block_size=64 + steps)).eval()
        prompt = torch.randint(0, model.config.vocab_size, (batch, 64))
        kernels = {
            "layer": layer_linear,
            "step_linear": step_linear(torch.device("cpu"), torch.float32, batch),
        }
        runs = {}
        with torch.inference_mode():
            for name, lin in kernels.items():
                prefill, step = eager_decoder(model, batch, 64 + steps, lin)
                runs[name] = _timed_steps(step, prefill(prompt).argmax(-1, keepdim=True), steps)
            times = paired_rounds(runs, repeats, warmup)
        median, q1, q3 = paired_speedup(times["layer"]["s"], times["step_linear"]["s"])
        rows.append(
            {
                "n_embd": d,
                "batch": batch,
                "layer_ms": 1e3 * statistics.median(times["layer"]["s"]) / steps,
                "step_linear_ms": 1e3 * statistics.median(times["step_linear"]["s"]) / steps,
                "speedup": median,
                "speedup_q1": q1,
                "speedup_q3": q3,
                "threads": torch.get_num_threads(),
            }
        )
    return rows


def _timed_steps(step: Step, tok: torch.Tensor, steps: int) -> Callable[[], dict[str, float]]:
    """A run for paired_rounds: `steps` decode steps after the 64-token prompt, timed."""

    def decode_steps() -> None:
        for pos in range(64, 64 + steps):
            step(tok, pos)

    return timed(decode_steps)
