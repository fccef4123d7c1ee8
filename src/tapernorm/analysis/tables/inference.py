"""Table 3 (forward throughput), the decode table and figure 5 (decode speedups) from the CSVs that
`tapernorm bench forward|decode` writes; the paper's numbers beside ours, labelled as such.

Every speedup is the median over interleaved rounds of t_baseline / t_variant (bench.trust), with
the quartiles of those per-round ratios as its spread, and every throughput is the baseline's
divided by it, so the columns agree. A cell whose timing was disturbed (other processes busy, or
per-round speedups spread too wide) is marked † in the tables, drawn hollow in figure 5, and keeps
claim 7 from a verdict. A DyT model, where it was timed beside them, gets
its own columns (markers in figure 5): the norm-free alternative, which cannot fold. Captions say
where ours were measured: on the default CPU pipeline that is a CPU at the default model scale, not
the paper's H100 at 30M parameters.

A model the benchmark skipped (its run diverged: bench.grid.skipped_runs) has rows with its reason in
a `skipped` column and no timings: its cells read "not timed", and every table, figure 5 and claim 7
name it and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ...bench.trust import RERUN
from ...variants import bench_columns
from .. import paper
from .training import write_table

CELL_VARIANTS = bench_columns("always")  # timed in every cell: baseline, explicit, folded
OPTIONAL_VARIANTS = bench_columns("if_trained")  # shown where the CSV has them: dyt
LABELS = {"baseline": "Baseline", "explicit": "Explicit scaling", "folded": "Folded", "dyt": "DyT"}
SETTING = ["device", "device_name", "dtype", "torch", "threads", "n_embd", "n_layer", "params"]
REQUIRED = {
    "forward": ["batch", "seq_len", "tok_s", "latency_ms"],
    "decode": ["batch", "prompt_len", "new_tokens", "prefill_ms", "decode_tok_s"],
}
COMMON = ["benchmark", "mode", "variant", "speedup", "speedup_q1", "speedup_q3", "rounds", "warmup"]
TRUST_DEFAULTS = {"source": "", "load": float("nan"), "disturbed": False, "disturbed_why": ""}
DISTURBED = "†"
NOT_TIMED = "not timed"
SKIP_COLUMNS = ["benchmark", "mode", "variant", "skipped"]  # what a skipped model's row holds


def load_bench(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The rows of one or more benchmark CSVs, columns checked."""
    frames = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"benchmark file {path} does not exist")
        df = pd.read_csv(path, dtype={"skipped": str})
        if "skipped" not in df.columns:
            df["skipped"] = ""
        df["skipped"] = df["skipped"].fillna("")
        if (df["skipped"] != "").all():  # nothing timed: only the skipped models' rows
            missing = [c for c in SKIP_COLUMNS if c not in df.columns]
        else:
            missing = [c for c in COMMON + SETTING if c not in df.columns]
            for kind in set(df.get("benchmark", [])):
                missing += [c for c in REQUIRED.get(kind, []) if c not in df.columns]
        if missing:
            raise ValueError(f"benchmark file {path} lacks columns {sorted(set(missing))}")
        frames.append(df)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COMMON)
    for column in COMMON + SETTING + [c for cols in REQUIRED.values() for c in cols]:
        if column not in df.columns:  # (a file of skipped models only)
            df[column] = float("nan")
    df["skipped"] = df.get("skipped", pd.Series(dtype=str)).fillna("")
    for column, default in TRUST_DEFAULTS.items():  # CSVs from before bench.trust: not checked
        if column not in df.columns:
            df[column] = default
    df["disturbed"] = df["disturbed"].astype(str).str.lower() == "true"
    for column in ("source", "disturbed_why"):  # text; a column with none reads as float NaN
        df[column] = df[column].astype(object).fillna("")
    return df.reset_index(drop=True)


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of timed models (without the skipped models' rows)."""
    if "skipped" not in df.columns:
        return df
    return df[df["skipped"].fillna("") == ""]


def skipped_notes(df: pd.DataFrame) -> list[str]:
    """Why each skipped model was not timed, once each, in the order of the rows
    ("Internal-Taper (+aux) d512 s0 diverged at step 9: not timed")."""
    if "skipped" not in df.columns:
        return []
    return list(dict.fromkeys(str(x) for x in df["skipped"].fillna("") if x))


def skipped_variants(df: pd.DataFrame) -> set[str]:
    """The columns (variants) with a skipped row and no timed row."""
    if "skipped" not in df.columns:
        return set()
    return set(df.loc[df["skipped"].fillna("") != "", "variant"]) - set(timed(df)["variant"])


def skipped_note(df: pd.DataFrame) -> str:
    """The captions' sentence on the models not timed ('' when none)."""
    notes = skipped_notes(df)
    return f" Not timed: {'; '.join(notes)}." if notes else ""


def _whole(setting: dict) -> dict:
    """A row's settings with whole floats as ints (a skipped model's empty cells make the CSV's
    integer columns float: 'd=512', not 'd=512.0')."""
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in setting.items()}


def places(bench: pd.DataFrame) -> str:
    """where() of each benchmark's rows, '; '-separated in sorted order."""
    return "; ".join(sorted({where(part) for _, part in bench.groupby("benchmark")}))


def where(df: pd.DataFrame) -> str:
    """Where and at what scale the rows were measured, for captions and claims."""
    df = timed(df)
    settings = df[SETTING].drop_duplicates()
    if len(settings) > 1:
        raise ValueError(f"rows from {len(settings)} different settings; give one:\n{settings}")
    s = _whole(settings.iloc[0].to_dict())
    place = (
        f"a CPU ({s['device_name']}, {s['threads']} threads)"
        if s["device"] == "cpu"
        else f"a GPU ({s['device_name']})"
    )
    sources = "; ".join(sorted(x for x in df["source"].unique() if x))
    text = (
        f"{place}, {s['dtype']}, torch {s['torch']}, model d={s['n_embd']} L={s['n_layer']} "
        f"({s['params'] / 1e6:.2f}M parameters)"
    )
    return text + (f", {sources}" if sources else "")


def scale_note(df: pd.DataFrame) -> str:
    """A plain statement of how our setting differs from the paper's (H100, bf16, 30M)."""
    s = _whole(timed(df).iloc[0].to_dict())
    if s["device"] == "cpu" and int(s["n_embd"]) == 512:
        return (
            f"Measured on a CPU in {s['dtype']} at the paper's model size (d=512, "
            f"{s['params'] / 1e6:.0f}M parameters; random weights where the source says so: speed "
            "does not depend on the weights' values), not on the paper's H100 in bf16. On a CPU "
            "the gain of removing a norm is the per-token cost of its ops beside the matrix "
            "products: in eager mode each RMSNorm is a few small kernels dispatched from Python per "
            "layer (most of it overhead at batch 1), which folding removes; a compiled step fuses "
            "the norm into its neighbours, so folding saves little there. The paper's GPU numbers "
            "are a different regime (kernel launches and memory traffic on an H100), which these "
            "CPU cells neither confirm nor refute."
        )
    if s["device"] == "cpu":
        return (
            f"Measured on a CPU at d={s['n_embd']}, not on the paper's H100 at 30M parameters: "
            "at this size a step is mostly dispatch overhead, so absolute throughputs are not "
            "comparable, only the direction and rough size of the speedups."
        )
    if int(s["n_embd"]) != 512 or s["dtype"] != "bfloat16":
        return (
            f"Measured on {s['device_name']} at d={s['n_embd']} in {s['dtype']}, not the paper's "
            "30M model in bf16 on an H100."
        )
    return f"Measured at the paper's scale (d=512, bf16) on {s['device_name']} (paper: H100)."


def _ktok(tok_s: float) -> str:
    k = tok_s / 1e3
    return f"{k:.1f}" if k >= 10 else f"{k:.2f}"


def times(v: float) -> str:
    return f"{v:.2f}×"


def _iqr(row) -> str:
    return f"{row.speedup_q1:.2f}–{row.speedup_q3:.2f}"


def _mark(row) -> str:
    return DISTURBED if row.disturbed else ""


def disturbed_cells(df: pd.DataFrame) -> list[str]:
    """'forward B=1 T=128: why' for every disturbed cell, in the order timed."""
    out: dict[tuple, str] = {}
    for row in df[df["disturbed"]].itertuples(index=False):
        forward = row.benchmark == "forward"
        name = "forward" if forward else f"decode {row.mode}"
        cell = f"B={int(row.batch)} " + (
            f"T={int(row.seq_len)}" if forward else f"P={int(row.prompt_len)}"
        )
        out.setdefault((name, cell), f"{name} {cell}: {row.disturbed_why}")
    return list(out.values())


def disturbed_note(df: pd.DataFrame) -> str:
    """The caption's sentence on disturbed cells ('' when none), with each cell's reason and the
    rerun command."""
    cells = disturbed_cells(df)
    if not cells:
        return ""
    return (
        f" {DISTURBED} DISTURBED TIMING in {len(cells)} cell(s), not a measurement of the "
        f"method ({'; '.join(cells)}): {RERUN}."
    )


def timed_cells(df: pd.DataFrame, keys: list[str]) -> dict[tuple, dict[str, object]]:
    """(cell keys) -> {variant: row} of the timed rows; every cell has each CELL_VARIANT that was
    not skipped."""
    out: dict[tuple, dict[str, object]] = {}
    for row in timed(df).itertuples(index=False):
        out.setdefault(tuple(int(getattr(row, k)) for k in keys), {})[row.variant] = row
    expected = [v for v in CELL_VARIANTS if v not in skipped_variants(df)]
    for cell, variants in out.items():
        missing = [v for v in expected if v not in variants]
        if missing:
            raise ValueError(f"benchmark cell {dict(zip(keys, cell, strict=True))} lacks {missing}")
    return out


def shown(df: pd.DataFrame) -> tuple[str, ...]:
    """CELL_VARIANTS, then the OPTIONAL_VARIANTS with rows in `df` (timed or skipped)."""
    return CELL_VARIANTS + tuple(v for v in OPTIONAL_VARIANTS if v in set(df["variant"]))


def _absent(df: pd.DataFrame, variant: str) -> str:
    """What a cell of `variant` without a timing shows: not timed (skipped), or not measured."""
    return NOT_TIMED if variant in skipped_variants(df) else "—"


# ---- table 3: forward throughput ------------------------------------------------------------------


def table3(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Per (B, T): our baseline / explicit / folded throughput (k tok/s) with speedups, paper beside."""
    df = df[df["benchmark"] == "forward"]
    if df.empty:
        raise ValueError("table 3 needs forward benchmark rows (tapernorm bench forward)")
    ours, variants = timed_cells(df, ["batch", "seq_len"]), shown(df)
    rows = []
    for B, T in sorted(set(ours) | set(paper.TABLE3)):
        row: dict[str, object] = {"B": B, "T": T}
        cell = ours.get((B, T))
        for v in variants:
            if cell is None or v not in cell:
                row[f"{LABELS[v]} (ours)"] = _absent(df, v) if cell or not ours else "—"
            elif v == "baseline":
                row[f"{LABELS[v]} (ours)"] = _ktok(cell[v].tok_s) + _mark(cell[v])
            else:
                row[f"{LABELS[v]} (ours)"] = (
                    f"{_ktok(cell[v].tok_s)} ({times(cell[v].speedup)}){_mark(cell[v])}"
                )
        folded = cell.get("folded") if cell else None
        row["Folded speedup IQR (ours)"] = (
            _iqr(folded)
            if folded is not None
            else _absent(df, "folded")
            if cell or not ours
            else "—"
        )
        for v in CELL_VARIANTS:
            row[f"{LABELS[v]} (paper)"] = paper.table3_text(B, T, v)
        rows.append(row)
    ran = timed(df)
    if ran.empty:
        ours_text = "Ours: nothing timed."
    else:
        s = ran.iloc[0].to_dict()
        ours_text = (
            f"the median of per-round time ratios over {s['rounds']} interleaved rounds after "
            f"{s['warmup']} warmup rounds (latency: the median; IQR: quartiles of the per-round "
            f"ratios). Ours: {where(df)}. {scale_note(df)}"
        )
    caption = (
        "**Table 3.** Forward throughput in k tokens/s (one forward pass over B × T tokens returning "
        "the last token's logits, no KV cache) of the RMSNorm baseline and of Internal-Taper (+aux) at "
        "g=0 exported as explicit scaling and folded"
        + (
            ", and DyT (every norm a DyT, by its authors' LLaMA recipe; ours only)"
            if "dyt" in variants
            else ""
        )
        + "; in parentheses the speedup over the baseline: "
        + ours_text
        + f" Paper: {paper.TABLE3_SOURCE} ({paper.TABLE3_SETUP}). "
        "—: cell not measured." + skipped_note(df) + disturbed_note(df)
    )
    return pd.DataFrame(rows), caption


# ---- the decode table -----------------------------------------------------------------------------


def table_decode(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Per mode, B and prompt: prefill ms and decode tok/s of each variant, decode speedups."""
    df = df[df["benchmark"] == "decode"]
    if df.empty:
        raise ValueError("the decode table needs decode benchmark rows (tapernorm bench decode)")
    rows, variants = [], shown(df)
    prefill = f"Prefill ms ({' / '.join(v if v != 'dyt' else 'DyT' for v in variants)})"
    for mode in [m for m in ("eager", "compiled") if m in set(df["mode"])]:
        cells = timed_cells(df[df["mode"] == mode], ["batch", "prompt_len"])
        if not cells:  # nothing timed in this mode
            row = {"Mode": mode, "B": "—", "Prompt": "—", prefill: "—"}
            row.update({f"{LABELS[v]} tok/s": _absent(df, v) for v in variants})
            row.update({f"{LABELS[v]} speedup (IQR)": _absent(df, v) for v in variants[1:]})
            rows.append(row)
        for (B, P), cell in sorted(cells.items()):
            row: dict[str, object] = {"Mode": mode, "B": B, "Prompt": P}
            row[prefill] = " / ".join(
                f"{cell[v].prefill_ms:.3g}" if v in cell else "—" for v in variants
            )
            for v in variants:
                row[f"{LABELS[v]} tok/s"] = (
                    f"{cell[v].decode_tok_s:,.1f}{_mark(cell[v])}" if v in cell else _absent(df, v)
                )
            for v in variants[1:]:
                row[f"{LABELS[v]} speedup (IQR)"] = (
                    f"{times(cell[v].speedup)} ({_iqr(cell[v])}){_mark(cell[v])}"
                    if v in cell
                    else _absent(df, v)
                )
            rows.append(row)
    ran, headline = timed(df), paper.DECODE_SPEEDUP
    if ran.empty:
        ours_text = "Ours: nothing timed. "
    else:
        s = ran.iloc[0].to_dict()
        ours_text = (
            f"then {s['new_tokens']} decode steps; decode tok/s = B × {s['new_tokens']} / decode "
            f"time, prefill timed apart. Medians of {s['rounds']} interleaved rounds after "
            f"{s['warmup']} warmup rounds; "
        )
    caption = (
        "**Decode benchmark.** Greedy decoding with a preallocated KV cache: a prefill over the "
        "prompt, "
        + ours_text
        + "speedup = median of per-round decode-time ratios baseline / export"
        + (" (or DyT, a norm-free model timed as it is)" if "dyt" in variants else "")
        + " (IQR: their quartiles). "
        "eager: the model's KV-cache path; compiled: a fixed-shape decode step under torch.compile "
        "(CUDA graphs on a GPU), prefill eager. "
        + (f"Ours: {where(df)}. {scale_note(df)} " if not ran.empty else "")
        + f"Paper ({paper.DECODE_SOURCE}, KV-cached decoding, headline only): up to "
        f"{headline['explicit']:.2f}× (explicit scaling) and {headline['folded']:.2f}× (folded); "
        "its per-cell numbers and protocol are not known, the protocol here is ours."
        + skipped_note(df)
        + disturbed_note(df)
    )
    if "cuda_graphs" in df.columns:  # compiled rows on a GPU say whether their step was a graph
        bad = ran[(ran["mode"] == "compiled") & (ran["cuda_graphs"].astype(str) == "False")]
        if len(bad):
            cells = sorted({f"B={r.batch} P={r.prompt_len} {r.variant}" for r in bad.itertuples()})
            caption += f" CUDA GRAPHS NOT USED (plain inductor timed) in: {', '.join(cells)}."
    return pd.DataFrame(rows), caption


# ---- summaries for claim 7 ------------------------------------------------------------------------


def speedup_summary(df: pd.DataFrame) -> list[dict]:
    """Per benchmark (forward; decode per mode): best and median over cells of each export's
    speedup, and in how many cells the export was faster in at least 3 of 4 rounds (q1 > 1:
    `consistent`) or slower in at least 3 of 4 (q3 < 1: `slower`); in the other cells the
    interquartile range of the per-round speedups spans 1.0 (no difference resolved)."""
    out = []
    for (benchmark, mode), part in timed(df).groupby(["benchmark", "mode"], sort=False):
        entry = {"benchmark": benchmark, "mode": mode, "cells": 0}
        for v in shown(part)[1:]:
            mine = part[part["variant"] == v]
            if mine.empty:  # not timed
                continue
            entry["cells"] = max(entry["cells"], len(mine))
            entry[v] = {
                "best": float(mine["speedup"].max()),
                "median": float(mine["speedup"].median()),
                "consistent": int((mine["speedup_q1"] > 1).sum()),
                "slower": int((mine["speedup_q3"] < 1).sum()),
            }
        out.append(entry)
    return out


def separated(df: pd.DataFrame, a: str, b: str) -> dict[str, tuple[int, int, int]]:
    """Per benchmark (forward; decode per mode) with rows of both variants: in how many cells a's
    interquartile range of per-round speedups lies wholly above b's, wholly below it, and in all."""
    out = {}
    for (benchmark, mode), part in timed(df).groupby(["benchmark", "mode"], sort=False):
        keys = ["batch", "seq_len" if benchmark == "forward" else "prompt_len"]
        rows = {v: part[part["variant"] == v].set_index(keys) for v in (a, b)}
        both = rows[a].index.intersection(rows[b].index)
        if not len(both):
            continue
        ra, rb = rows[a].loc[both], rows[b].loc[both]
        above = int((ra["speedup_q1"] > rb["speedup_q3"]).sum())
        below = int((ra["speedup_q3"] < rb["speedup_q1"]).sum())
        name = "forward" if benchmark == "forward" else f"decode {mode}"
        out[name] = (above, below, len(both))
    return out


# ---- entry points ---------------------------------------------------------------------------------

TABLES = {"3": table3, "decode": table_decode}


def make_bench_table(
    which: str,
    bench_csvs: Sequence[str | Path],
    out_stem: str | Path,
    config_sha256: str | None = None,
    rehearsal: bool = False,
    command: str = "tapernorm table",
) -> list[Path]:
    """Build table "3" (forward) or "decode" from benchmark CSVs and write its csv/md/tex/html
    (an output set; `command` the one its marker says to rerun)."""
    if which not in TABLES:
        raise ValueError(f"unknown benchmark table {which!r}; choose from {sorted(TABLES)}")
    df, caption = TABLES[which](load_bench(bench_csvs))
    return write_table(df, out_stem, caption, config_sha256, rehearsal, command=command)
