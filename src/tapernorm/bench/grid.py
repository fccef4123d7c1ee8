"""`tapernorm bench forward|decode` as a library call: the models to time (random weights at the
paper's config, or trained checkpoints), the grid (defaults per benchmark), and the rows as a table.

The timing itself is bench.forward.bench_forward (paper Table 3) and bench.decode.bench_decode (our
decode protocol); this module only chooses what they time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from ..checkpoint import load_model
from ..model import GPT
from . import variants
from .decode import bench_decode
from .forward import bench_forward
from .timing import CsvRows
from .trust import RERUN

# per benchmark: (batch sizes, sequence or prompt lengths, warmup rounds, timed rounds)
DEFAULT_GRID = {
    "forward": ([1, 4], [128, 256, 512], 10, 50),
    "decode": ([1, 4, 16], [128, 512], 2, 10),
}


def inference_models(
    positions: int,
    random: str | None = None,
    baseline: Path | None = None,
    tapered: Path | None = None,
    dyt: Path | None = None,
    random_dyt: bool = True,
    sizes: dict | None = None,
) -> tuple[dict[str, GPT], GPT, str]:
    """(models, reference, source): baseline, explicit, folded (and dyt) models with at least
    `positions` RoPE positions, either random weights at the paper's config of width `random`
    ("d512"; `sizes` overrides other GPTConfig fields, `random_dyt` adds a DyT model) or trained
    checkpoints; `reference` is the g=0 model the exports are verified against."""
    if random is not None:
        if baseline or tapered or dyt:
            raise ValueError("give either --random or --baseline and --tapered, not both")
        if not random.startswith("d") or not random[1:].isdigit():
            raise ValueError(f"--random takes a width like d512, got {random!r}")
        width = int(random[1:])
        cfg = variants.paper_config(**(sizes or {}), n_embd=width, block_size=max(512, positions))
        base_model, tapered_model = variants.random_variants(cfg, seed=0)
        dyt_model = variants.random_dyt(cfg, seed=0) if random_dyt else None
        source = f"random weights, paper config at d={width}"
        if sizes:
            source += " with " + ", ".join(f"{k}={v}" for k, v in sizes.items())
    elif baseline and tapered:
        base_model, tapered_model = load_model(baseline), load_model(tapered)
        dyt_model = load_model(dyt) if dyt else None
        source = f"trained checkpoints {baseline.name} and {tapered.name}"
        source += f" and {dyt.name}" if dyt else ""
        trained = tapered_model.config.block_size
        if positions > trained:
            source += f" (RoPE tables extended from {trained} to {positions} positions)"
        base_model = variants.with_block_size(base_model, positions)
        tapered_model = variants.with_block_size(tapered_model, positions)
        if dyt_model is not None:
            dyt_model = variants.with_block_size(dyt_model, positions)
    else:
        raise ValueError("give --random dWIDTH, or --baseline RUN_DIR and --tapered RUN_DIR")
    models, reference = variants.inference_variants(base_model, tapered_model, dyt_model)
    return models, reference, source


def run_inference_bench(
    which: str,
    random: str | None = None,
    baseline: Path | None = None,
    tapered: Path | None = None,
    dyt: Path | None = None,
    batch_sizes: Sequence[int] | None = None,
    lengths: Sequence[int] | None = None,
    new_tokens: int = 256,
    modes: Sequence[str] = ("eager",),
    warmup: int | None = None,
    repeats: int | None = None,
    device: str = "auto",
    dtype: str = "float32",
    threads: int | None = None,
    out: str | Path | None = None,
    random_dyt: bool = True,
    sizes: dict | None = None,
) -> pd.DataFrame:
    """Time the models of `inference_models` on the `which` ("forward" or "decode") grid: batch
    sizes x `lengths` (sequence lengths, or prompt lengths followed by `new_tokens` decode steps in
    each of `modes`); None takes DEFAULT_GRID's. One row per cell and model, with a `source`
    column; written as CSV to `out` if given, each cell's rows as soon as it is timed."""
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    default_batches, default_lengths, default_warmup, default_repeats = DEFAULT_GRID[which]
    batch_sizes, lengths = batch_sizes or default_batches, lengths or default_lengths
    warmup = default_warmup if warmup is None else warmup
    positions = max(lengths) + (new_tokens if which == "decode" else 0)
    models, reference, source = inference_models(
        positions, random, baseline, tapered, dyt, random_dyt, sizes
    )
    write = CsvRows(out) if out else lambda rows: None

    def on_rows(rows: list[dict]) -> None:
        write([{**row, "source": source} for row in rows])

    if which == "forward":
        rows = bench_forward(
            models,
            batch_sizes,
            lengths,
            warmup=warmup,
            iters=repeats or default_repeats,
            device=device,
            dtype=dtype,
            reference=reference,
            on_rows=on_rows,
        )
    else:
        rows = []
        for mode in modes:
            rows += bench_decode(
                models,
                batch_sizes,
                lengths,
                new_tokens,
                repeats=repeats or default_repeats,
                device=device,
                dtype=dtype,
                compile=mode == "compiled",
                warmup=warmup,
                reference=reference,
                on_rows=on_rows,
            )
    return pd.DataFrame(rows).assign(source=source)


def summary_table(df: pd.DataFrame) -> str:
    """What `tapernorm bench forward|decode` prints: where it ran, throughput and speedup per cell
    and model with the load of other processes, then every cell whose timing was disturbed."""
    first = df.iloc[0]
    forward = first["benchmark"] == "forward"
    shown = ["mode", "variant", "batch", "seq_len" if forward else "prompt_len"]
    shown += ["tok_s", "speedup"] if forward else ["decode_tok_s", "speedup"]
    shown += ["spread", "load", "disturbed"]
    head = f"{first['source']}; {first['device_name']}, {first['dtype']}, torch {first['torch']}"
    head += f"; other processes used {first['load_before']:.2f} cores before it started"
    text = head + "\n" + df[shown].to_string(index=False, float_format=lambda v: f"{v:.3f}")
    cells = df[df["disturbed"]].drop_duplicates(["mode", "batch", shown[3]])
    for row in cells.itertuples(index=False):
        text += (
            f"\nDISTURBED: {row.mode} B={row.batch} {shown[3]}={getattr(row, shown[3])}: "
            f"{row.disturbed_why}"
        )
    if len(cells):
        text += f"\n{len(cells)} cell(s) timed on a disturbed machine: {RERUN}"
    return text
