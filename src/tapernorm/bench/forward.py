"""Paper Table 3 (its v1 protocol): one forward pass over B x T tokens returning the last token's
logits, no KV cache, for each model of bench.variants, timed in interleaved rounds; a speedup is
the median over rounds of t_baseline / t_variant, and every time and throughput beside it is derived
from it (bench.trust).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..model import GPT
from ..runtime.device import resolve_device
from .timing import Clock, paired_rounds, resolve_dtype, timing_precision
from .trust import LoadMeter, disturbance, load_now, paired_cell, trust_columns
from .variants import common_row, prepare_models


def bench_forward(
    models: dict[str, GPT],
    batch_sizes: Sequence[int],
    seq_lens: Sequence[int],
    warmup: int,
    iters: int,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = torch.float32,
    reference: GPT | None = None,
    on_rows: Callable[[list[dict]], None] = lambda rows: None,
    on_round: Callable[[], None] = lambda: None,
) -> list[dict]:
    """Paper Table 3: one forward pass over B x T tokens returning the last token's logits, no KV
    cache (the grid: bench.settings.ForwardGrid, whose defaults are the config schema's). Per cell
    and variant: the speedup over the first model (median of per-round ratios over
    `iters` interleaved rounds), the latency and throughput B * T / latency it implies, the cell's
    spread and load, and whether its timing was disturbed (bench.trust). Each cell's rows go to
    `on_rows` as soon as it is timed (e.g. a CsvRows); `on_round` is called after each round
    (timing.paired_rounds)."""
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
                    runs = {n: run(models[n]) for n in names}
                    times = paired_rounds(runs, iters, warmup, on_round)
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
