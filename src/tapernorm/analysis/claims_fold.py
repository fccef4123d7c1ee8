"""Claims 6 and 7: folding is exact (verify.json of `tapernorm fold`) and speeds inference
(benchmark CSVs of `tapernorm bench forward|decode`); criteria in claims.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..bench.trust import RERUN
from ..runtime.jsonio import FileError, read_json
from . import inference_tables, paper
from .claim_numbers import Criterion, Numbers, Part, with_numbers
from .claim_rows import (
    NO,
    NOT_RESOLVED,
    PARTLY,
    YES,
    ClaimInputs,
    at_deviation,
    claim_row,
    not_judged,
    not_measured,
    weaker_than_paper,
)

# ---- claim 6: folding is exact ----------------------------------------------------------------------

EXACT_CRITERION = Criterion(
    f"every fold check passes and the largest relative logit difference is <= {paper.FOLD_RTOL:g}",
    None,
    paper.FOLD_RTOL,
)


def read_verify(path: str | Path) -> dict:
    """A verify.json from `tapernorm fold`, checked for the keys claim 6 uses (a skipped fold's:
    its reason, `skipped`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"verify file {path} does not exist")
    try:
        report = read_json(path)
    except FileError as e:  # not UTF-8 or not JSON (it names the file)
        raise ValueError(f"verify file {e}") from None
    if "skipped" in report:
        if not isinstance(report["skipped"], str) or not report["skipped"]:
            raise ValueError(f"verify file {path}: 'skipped' is not a reason")
        return report
    for export in ("folded", "scaled"):
        check = report.get(export)
        keys = ("rel_logit_diff", "loss_diff", "ok", "rtol")
        if not isinstance(check, dict) or any(k not in check for k in keys):
            raise ValueError(f"verify file {path}: '{export}' lacks one of {keys}")
    return report


def claim6(inp: ClaimInputs) -> dict:
    claim = "6. Folding is exact: folded and unfolded models give the same logits and loss"
    paper_value = f"same logits; max |dz| ~{paper.FOLD_RTOL:.0e} of the logit scale (float32)"
    if not inp.verify:
        return not_measured(claim, paper_value, "no verify.json files given")
    skipped = [r["skipped"] for _, r in inp.verify if "skipped" in r]
    folds = [(p, r) for p, r in inp.verify if "skipped" not in r]
    not_folded = f"Not folded: {'; '.join(skipped)}." if skipped else ""
    if not folds:
        why = f"no fold ran ({'; '.join(skipped)})"
        return claim_row(claim, paper_value, "no fold ran", "—", not_judged(why), not_folded)
    checks = [(p, r, e, r[e]) for p, r in folds for e in ("folded", "scaled")]
    rel = {
        e: max(c["rel_logit_diff"] for _, _, ex, c in checks if ex == e)
        for e in ("folded", "scaled")
    }
    loss = max(abs(c["loss_diff"]) for *_, c in checks)
    val = [abs(r["val_loss_diff"]) for _, r in folds if r.get("val_loss_diff") is not None]
    failed = [f"{Path(r.get('model', p)).name}/{e}" for p, r, e, c in checks if not c["ok"]]
    worst = max(rel.values())
    rtols = sorted({c["rtol"] for *_, c in checks})
    if failed:
        holds = "no"
    elif worst <= paper.FOLD_RTOL:
        holds = "yes"
    else:  # exact only to the looser tolerance the checks were run at
        holds = at_deviation(
            f"rtol {max(rtols):g}", f"rtol {paper.FOLD_RTOL:g}", f"no, {worst:.1e}"
        )
    ours = (
        f"max rel. logit diff {rel['folded']:.1e} (folded), {rel['scaled']:.1e} (explicit scaling); "
        f"max |loss diff| {loss:.1e}" + (f"; max |val loss diff| {max(val):.1e}" if val else "")
    )
    if skipped:
        ours += f"; {len(skipped)} model(s) not folded (diverged)"
    comment = (
        f"{len(folds)} model(s), checks at rtol {', '.join(f'{t:g}' for t in rtols)}: "
        f"{len(checks) - len(failed)}/{len(checks)} passed"
        + (f" (failed: {', '.join(failed)})" if failed else "")
        + f"; criterion: all pass and max relative logit difference <= {paper.FOLD_RTOL:g} (yes), "
        "all pass at a looser rtol (only at that deviation), else no."
        + (f" Judged on the folds that ran. {not_folded}" if skipped else "")
    )
    models = ", ".join(Path(r.get("model", p)).name for p, r in folds)
    if skipped:
        models += (
            " (not folded: "
            + ", ".join(Path(r.get("model", p)).name for p, r in inp.verify if "skipped" in r)
            + ")"
        )
    row = claim_row(claim, paper_value, ours, f"models: {models}", holds, comment)
    numbers = Numbers(
        headline=f"max rel. logit diff {worst:.1e}",
        unit="relative logit difference",
        estimate=worst,
        parts=tuple(
            Part(f"{Path(r.get('model', p)).name}/{e}", c["rel_logit_diff"])
            for p, r, e, c in checks
        ),
    )
    return with_numbers(row, numbers)


# ---- claim 7: folding speeds inference -------------------------------------------------------------

FOLD_SPEEDUP_YES = 1.05
DISTURBED_VERDICT = not_judged("disturbed timing")
FASTER, SLOWER, UNRESOLVED = "faster", "slower", "not resolved"
SPEED_CRITERION = Criterion(
    "per benchmark, the interquartile range of the folded model's per-round speedups over the "
    "RMSNorm baseline lies wholly above 1 in more than half of the cells, and in no cell wholly "
    "below 1 (a measured slowdown)",
    1.0,
    None,
)


def benchmark_state(consistent: int, slower: int, cells: int) -> str:
    """A benchmark's folded model is faster where more than half of its cells have the per-round
    speedups' interquartile range wholly above 1.0, slower where more than half have it wholly
    below, and not resolved otherwise (the ranges span 1.0: no difference measured)."""
    if consistent > cells / 2:
        return FASTER
    if slower > cells / 2:
        return SLOWER
    return UNRESOLVED


def cell_name(row) -> str:
    """'forward B=1 T=128' or 'decode compiled B=4 P=128': a benchmark cell."""
    if row.benchmark == "forward":
        return f"forward B={int(row.batch)} T={int(row.seq_len)}"
    return f"decode {row.mode} B={int(row.batch)} P={int(row.prompt_len)}"


def slower_cells(bench: pd.DataFrame) -> list[str]:
    """'decode compiled B=4 P=128: 0.96× (IQR 0.93-0.98, below 1)' for every cell where the
    folded model's per-round speedups' interquartile range lies wholly below 1.0: a measured
    slowdown."""
    folded = inference_tables.timed(bench)
    folded = folded[(folded["variant"] == "folded") & (folded["speedup_q3"] < 1)]
    return [
        f"{cell_name(r)}: {r.speedup:.2f}× (IQR {r.speedup_q1:.2f}-{r.speedup_q3:.2f}, below 1)"
        for r in folded.itertuples(index=False)
    ]


def speed_verdict(states: dict[str, str], medians: list[float], bench: pd.DataFrame) -> str:
    """Claim 7's verdict from its cells: a measured slowdown anywhere rules out yes (no where no
    cell is faster or every benchmark is slower, else partly); otherwise by the benchmarks'
    states (claims.py)."""
    best = paper.table3_best()["folded"]
    slow = slower_cells(bench)
    folded = inference_tables.timed(bench)
    folded = folded[folded["variant"] == "folded"]
    n, n_fast = len(folded), int((folded["speedup_q1"] > 1).sum())
    listed = ", ".join(f"{name} {state}" for name, state in states.items())
    if slow and (not n_fast or all(v == SLOWER for v in states.values())):
        return (
            f"{NO} (folded slower in {len(slow)}/{n} cells, faster in {n_fast}: {'; '.join(slow)})"
        )
    if slow:
        return (
            f"{PARTLY} (folded faster in {n_fast}/{n} cells, slower in {len(slow)}/{n}: "
            f"{'; '.join(slow)})"
        )
    if all(v == FASTER for v in states.values()):
        if min(medians) < FOLD_SPEEDUP_YES:
            return weaker_than_paper(
                f"folded medians {min(medians):.2f}-{max(medians):.2f}×", f"up to {best:.2f}×"
            )
        return YES
    if all(v == UNRESOLVED for v in states.values()):
        return f"{NOT_RESOLVED} (interquartile ranges span 1.0: {listed})"
    return f"{PARTLY} ({listed})"


def _benchmark_texts(bench: pd.DataFrame) -> tuple[list[str], dict[str, str], list[float]]:
    """Per benchmark (forward; decode per mode): its text for the Ours column, its state, and
    the folded model's median speedup."""
    ours, states, medians = [], {}, []
    for s in inference_tables.speedup_summary(bench):
        name = "forward" if s["benchmark"] == "forward" else f"decode {s['mode']}"
        f, e, n = s["folded"], s["explicit"], s["cells"]
        states[name] = benchmark_state(f["consistent"], f["slower"], n)
        unresolved = n - f["consistent"] - f["slower"]
        text = (
            f"{name}: folded best {f['best']:.2f}×, median {f['median']:.2f}× (interquartile "
            f"range above 1 in {f['consistent']}/{n} cells, below 1 in {f['slower']}/{n}, "
            f"spanning 1 in {unresolved}/{n})"
        )
        part = bench[(bench["benchmark"] == s["benchmark"]) & (bench["mode"] == s["mode"])]
        if slow := slower_cells(part):
            text += f", folded slower in {'; '.join(slow)}"
        ours.append(f"{text}; explicit best {e['best']:.2f}×, median {e['median']:.2f}×")
        medians.append(f["median"])
    return ours, states, medians


def speed_numbers(bench: pd.DataFrame) -> Numbers:
    """The folded model's median speedup over every cell, each cell a part with its IQR."""
    folded = inference_tables.timed(bench)
    folded = folded[folded["variant"] == "folded"]
    n, slow = len(folded), int((folded["speedup_q3"] < 1).sum())
    fast, median = int((folded["speedup_q1"] > 1).sum()), float(folded["speedup"].median())
    return Numbers(
        headline=f"folded median {median:.2f}× over {n} cells: faster in {fast}, slower in {slow}",
        unit="× (t_baseline / t_folded)",
        estimate=median,
        interval="parts: interquartile range of the per-round speedups of each cell",
        parts=tuple(
            Part(cell_name(r), r.speedup, r.speedup_q1, r.speedup_q3)
            for r in folded.itertuples(index=False)
        ),
    )


def claim7(inp: ClaimInputs) -> dict:
    claim = "7. Folding speeds inference (explicit scaling and folded vs the RMSNorm baseline)"
    best, decode = paper.table3_best(), paper.DECODE_SPEEDUP
    paper_value = (
        f"v1 forward up to {best['folded']:.2f}× folded / {best['explicit']:.2f}× explicit "
        f"({paper.TABLE3_SETUP}); v2 decode up to {decode['folded']:.2f}× / "
        f"{decode['explicit']:.2f}×"
    )
    not_timed = "; ".join(inp.bench_skipped)
    if inp.bench.empty and not inp.bench_skipped:
        return not_measured(claim, paper_value, "no benchmark CSVs given")
    if inp.bench.empty or "folded" not in set(inp.bench["variant"]):
        why = f"the exports were not timed ({not_timed})"
        return claim_row(
            claim, paper_value, "not timed", "—", not_judged(why), f"Not timed: {not_timed}."
        )
    ours, states, medians = _benchmark_texts(inp.bench)
    disturbed = inference_tables.disturbed_cells(inp.bench)
    holds = DISTURBED_VERDICT if disturbed else speed_verdict(states, medians, inp.bench)
    scales = {
        kind: inference_tables.where(part)
        for kind, part in inp.bench.groupby("benchmark", sort=False)
    }
    if len(set(scales.values())) == 1:
        scales = {"both": next(iter(scales.values()))}
    comment = (
        "Speedup per cell = median over interleaved rounds of t_baseline / t_export, with the "
        "interquartile range of those per-round ratios; best and median over the cells of each "
        "benchmark. A cell whose interquartile range lies wholly below 1.0 is a measured "
        "slowdown, named in the row. Criterion per benchmark: the folded model is faster where "
        "more than half of the cells have their interquartile range wholly above 1.0, slower "
        "where more than half have it wholly below, else not resolved. Claim: a measured slowdown "
        "in any cell makes it partly (no where no cell is faster or every benchmark is slower); "
        "otherwise yes if every "
        f"benchmark is faster (graded weaker than the paper where a median is below "
        f"{FOLD_SPEEDUP_YES:g}×), not resolved if none is resolved, else partly. "
        f"{inference_tables.scale_note(inp.bench)}"
    )
    if disturbed:
        comment = (
            f"NOT JUDGED: {len(disturbed)} cell(s) were timed on a disturbed machine "
            f"({'; '.join(disturbed)}); {RERUN}. " + comment
        )
    if not_timed:
        comment += f" Not timed: {not_timed}."
    scale = " | ".join(v if k == "both" else f"{k}: {v}" for k, v in scales.items())
    if inp.gpu is not None and not inp.gpu.empty:  # a first-GPU check, judged alike, said apart
        gpu_ours, gpu_states, gpu_medians = _benchmark_texts(inp.gpu)
        gpu_holds = (
            DISTURBED_VERDICT
            if inference_tables.disturbed_cells(inp.gpu)
            else speed_verdict(gpu_states, gpu_medians, inp.gpu)
        )
        ours.append(f"on a GPU ({inp.gpu_where}): " + "; ".join(gpu_ours))
        holds += f"; on a GPU: {gpu_holds}"
        comment += (
            f" On a GPU: a first-GPU check ({inp.gpu_where}; "
            f"{inference_tables.scale_note(inp.gpu)}), judged by the same criterion."
        )
    row = claim_row(claim, paper_value, "; ".join(ours), scale, holds, comment)
    return with_numbers(row, speed_numbers(inp.bench))
