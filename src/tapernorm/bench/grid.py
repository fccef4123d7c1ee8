"""`tapernorm bench forward|decode` as a library call: the models to time (random weights at the
paper's config, or trained checkpoints), the grid (bench.settings: the config's `bench:` section),
and the rows as a table.

The timing itself is bench.forward.bench_forward (paper Table 3) and bench.decode.bench_decode (our
decode protocol); this module only chooses what they time.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from pathlib import Path

import pandas as pd
import torch

from ..model import GPT
from ..runtime.progress import Progress
from ..training.checkpoint import load_model
from ..training.divergence import diverged
from . import variants
from .decode import bench_decode
from .forward import bench_forward
from .settings import BenchRuns, BenchSettings
from .timing import CsvRows
from .trust import RERUN

log = logging.getLogger(__name__)


def skipped_runs(runs: BenchRuns) -> dict[str, str]:
    """{column: why} of the columns a benchmark of these run directories does not time: those of
    a run whose eval.json says it diverged (its weights are what it rolled back to, not a trained
    model: divergence.Diverged.not_timed), and every column when the baseline diverged (the
    speedups are over it)."""
    columns = {"baseline": ("baseline",), "tapered": variants.TAPERED_COLUMNS, "dyt": ("dyt",)}
    baseline, tapered, dyt = runs.baseline, runs.tapered, runs.dyt
    notes: dict[str, str] = {}
    base_bad = diverged(baseline) if baseline is not None else None
    for run, path in (("baseline", baseline), ("tapered", tapered), ("dyt", dyt)):
        bad = diverged(path) if path is not None else None
        for column in columns[run]:
            if bad is not None:
                notes[column] = bad.not_timed()
            elif base_bad is not None and path is not None:
                notes[column] = (
                    f"not timed: its speedups are over {base_bad.label}, which diverged at step "
                    f"{base_bad.step}"
                )
    return notes


def inference_models(
    positions: int,
    settings: BenchSettings,
    runs: BenchRuns,
    skipped: Collection[str] = (),
) -> tuple[dict[str, GPT], GPT | None, str]:
    """(models, reference, source): baseline, explicit, folded (and dyt) models with at least
    `positions` RoPE positions, either random weights at the paper's config of width
    `settings.random` ("d512"; `settings.sizes` overrides other GPTConfig fields,
    `settings.random_dyt` adds a DyT model) or the trained checkpoints of `runs`, leaving out the
    `skipped` columns (skipped_runs); `reference` is the g=0 model the exports are verified against
    (None when they are skipped)."""
    random, sizes, random_dyt = settings.random, settings.sizes, settings.random_dyt
    baseline, tapered, dyt = runs.baseline, runs.tapered, runs.dyt
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
        source = f"trained checkpoints {baseline.name} and {tapered.name}"
        source += f" and {dyt.name}" if dyt else ""
        if "baseline" in skipped:  # nothing is timed: the speedups are over the baseline
            return {}, None, source

        def load(path: Path | None, columns: Collection[str]) -> GPT | None:
            return None if path is None or set(columns) <= set(skipped) else load_model(path)

        base_model = load(baseline, ("baseline",))
        tapered_model = load(tapered, variants.TAPERED_COLUMNS)
        dyt_model = load(dyt, ("dyt",))
        trained = (tapered_model if tapered_model is not None else base_model).config.block_size
        if positions > trained:
            source += f" (RoPE tables extended from {trained} to {positions} positions)"
        base_model, tapered_model, dyt_model = (
            None if m is None else variants.with_block_size(m, positions)
            for m in (base_model, tapered_model, dyt_model)
        )
    else:
        raise ValueError("give --random dWIDTH, or --baseline RUN_DIR and --tapered RUN_DIR")
    models, reference = variants.inference_variants(base_model, tapered_model, dyt_model)
    return models, reference, source


def skip_rows(which: str, modes: Sequence[str], skipped: dict[str, str], source: str) -> list[dict]:
    """A CSV row per skipped column and mode, naming why in `skipped` (no timing columns)."""
    return [
        {"benchmark": which, "mode": mode, "variant": column, "skipped": why, "source": source}
        for mode in modes
        for column, why in skipped.items()
    ]


def run_inference_bench(
    which: str,
    settings: BenchSettings,
    runs: BenchRuns | None = None,
    threads: int | None = None,
    out: str | Path | None = None,
) -> pd.DataFrame:
    """Time the models of `inference_models` on the `which` ("forward" or "decode") grid of
    `settings`: batch sizes x lengths (sequence lengths, or prompt lengths followed by new_tokens
    decode steps in each of its modes). One row per cell and model, with a `source` column;
    written as CSV to `out` if given, each cell's rows as soon as it is timed.

    Trained runs that diverged are not timed (skipped_runs): the others are, and each skipped
    column gets a row per mode with its reason in a `skipped` column (after the timed rows; the
    column is there only when something was skipped)."""
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    grid, runs = settings.grid(which), runs or BenchRuns()
    skipped = skipped_runs(runs) if settings.random is None else {}
    for column, why in skipped.items():
        log.warning("bench %s: %s: %s", which, column, why)
    models, reference, source = inference_models(grid.positions, settings, runs, skipped)
    write = CsvRows(out) if out else lambda rows: None
    extra = {"skipped": ""} if skipped else {}

    def on_rows(rows: list[dict]) -> None:
        write([{**row, "source": source, **extra} for row in rows])

    rows = []  # (none when every column is skipped)
    modes = ["eager"] if which == "forward" else list(grid.modes)
    cells = len(modes) * len(grid.batch_sizes) * len(grid.lengths) if models else 0
    with Progress(f"bench {which}", cells * (grid.warmup + grid.repeats), "round") as progress:
        if models and which == "forward":
            rows = bench_forward(
                models,
                grid.batch_sizes,
                grid.seq_lens,
                warmup=grid.warmup,
                iters=grid.repeats,
                device=settings.device,
                dtype=settings.dtype,
                reference=reference,
                on_rows=on_rows,
                on_round=progress.update,
            )
        elif models:
            for mode in grid.modes:
                rows += bench_decode(
                    models,
                    grid.batch_sizes,
                    grid.prompt_lens,
                    grid.new_tokens,
                    repeats=grid.repeats,
                    device=settings.device,
                    dtype=settings.dtype,
                    compile=mode == "compiled",
                    warmup=grid.warmup,
                    reference=reference,
                    on_rows=on_rows,
                    on_round=progress.update,
                )
    notes = skip_rows(which, modes, skipped, source)
    write(notes)
    return pd.DataFrame([*({**r, **extra} for r in rows), *notes]).assign(source=source)


def summary_table(df: pd.DataFrame) -> str:
    """What `tapernorm bench forward|decode` prints: where it ran, throughput and speedup per cell
    and model with the load of other processes, then every cell whose timing was disturbed, and
    the models not timed with why."""
    skipped = df.get("skipped", pd.Series("", index=df.index)).fillna("").astype(str)
    notes = [f"NOT TIMED: {why}" for why in dict.fromkeys(skipped[skipped != ""])]
    df = df[skipped == ""]
    if df.empty:
        return "\n".join(notes)
    first = df.iloc[0]
    forward = first["benchmark"] == "forward"
    shown = ["mode", "variant", "batch", "seq_len" if forward else "prompt_len"]
    df = df.astype({column: int for column in shown[2:]})  # (NaN in skipped rows made them floats)
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
    return "\n".join([text, *notes])
