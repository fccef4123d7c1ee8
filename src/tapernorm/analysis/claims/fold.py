"""Claims 6 and 7: folding is exact (verify.json of `tapernorm fold`) and speeds inference
(benchmark CSVs of `tapernorm bench forward|decode`, judged by the speed rule: speed_rule). Their
criteria and gradings are EXACT_CRITERION and SPEED_CRITERION. Claim 6 is judged on the folds that
ran (a diverged run's fold is skipped, its verify.json says why, and named; not judged if none ran);
claim 7 names a model the benchmarks skipped (its run diverged) and is not judged when the exports
were not timed or this run's timing was disturbed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...bench.trust import RERUN
from ...runtime.jsonio import FileError, read_json
from .. import paper, speed_rule
from ..tables import inference as inference_tables
from .numbers import Criterion, Numbers, Part, with_numbers
from .rows import (
    NO,
    NOT_RESOLVED,
    YES,
    ClaimInputs,
    NoVerdict,
    Verdict,
    at_deviation,
    because,
    claim_row,
    not_judged,
    not_measured,
    plain,
    weaker_than_paper,
)

# ---- claim 6: folding is exact ----------------------------------------------------------------------

EXACT_CRITERION = Criterion(
    f"every fold check passes and the largest relative logit difference is <= {paper.FOLD_RTOL:g}",
    None,
    paper.FOLD_RTOL,
    grading=f"criterion: all pass and max relative logit difference <= {paper.FOLD_RTOL:g} (yes), "
    "all pass at a looser rtol (only at that deviation), else no.",
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


def judge_exact(failed: bool, worst: float, rtols: list[float]) -> Verdict:
    """EXACT_CRITERION's grading of the folds' checks: no if one failed; yes if the largest
    relative logit difference `worst` is within the paper's rtol; else exact only to the looser
    rtol the checks ran at (`rtols`): "only at a deviation"."""
    if failed:
        return plain(NO)
    if worst <= paper.FOLD_RTOL:
        return plain(YES)
    return at_deviation(f"rtol {max(rtols):g}", f"rtol {paper.FOLD_RTOL:g}", f"no, {worst:.1e}")


@dataclass(frozen=True, eq=False)
class FoldChecks:
    """Claim 6 measured: the folds that ran (verify.json's path and report each), the models not
    folded and why, each check (path, report, export, its result) of the folded and explicit-scaling
    exports, the largest relative logit difference of each export kind and overall (`worst`), the
    largest |loss diff| and |val loss diff|s, the failed checks and the rtols they ran at."""

    folds: list[tuple[Path, dict]]
    not_folded: list[str]  # the models
    skipped: list[str]  # why each was not
    checks: list[tuple[Path, dict, str, dict]]
    rel: dict[str, float]
    loss: float
    val: list[float]
    failed: list[str]
    worst: float
    rtols: list[float]


def not_folded_note(skipped: Sequence[str]) -> str:
    """The comment's sentence on the folds skipped (`skipped`: each one's reason), if any."""
    return f"Not folded: {'; '.join(skipped)}." if skipped else ""


def measure_folds(inp: ClaimInputs) -> FoldChecks | NoVerdict:
    if not inp.verify:
        return not_measured("no verify.json files given")
    skipped = [r["skipped"] for _, r in inp.verify if "skipped" in r]
    folds = [(p, r) for p, r in inp.verify if "skipped" not in r]
    if not folds:
        why = f"no fold ran ({'; '.join(skipped)})"
        return NoVerdict("no fold ran", "—", not_judged(why), not_folded_note(skipped))
    checks = [(p, r, e, r[e]) for p, r in folds for e in ("folded", "scaled")]
    rel = {
        e: max(c["rel_logit_diff"] for _, _, ex, c in checks if ex == e)
        for e in ("folded", "scaled")
    }
    return FoldChecks(
        folds=folds,
        not_folded=[Path(r.get("model", p)).name for p, r in inp.verify if "skipped" in r],
        skipped=skipped,
        checks=checks,
        rel=rel,
        loss=max(abs(c["loss_diff"]) for *_, c in checks),
        val=[abs(r["val_loss_diff"]) for _, r in folds if r.get("val_loss_diff") is not None],
        failed=[f"{Path(r.get('model', p)).name}/{e}" for p, r, e, c in checks if not c["ok"]],
        worst=max(rel.values()),
        rtols=sorted({c["rtol"] for *_, c in checks}),
    )


def judge_folds(m: FoldChecks) -> Verdict:
    return judge_exact(bool(m.failed), m.worst, m.rtols)


def describe_folds(m: FoldChecks, holds: Verdict) -> dict:
    rel, failed, skipped = m.rel, m.failed, m.skipped
    ours = (
        f"max rel. logit diff {rel['folded']:.1e} (folded), {rel['scaled']:.1e} (explicit scaling); "
        f"max |loss diff| {m.loss:.1e}"
        + (f"; max |val loss diff| {max(m.val):.1e}" if m.val else "")
    )
    if skipped:
        ours += f"; {len(skipped)} model(s) not folded (diverged)"
    comment = (
        f"{len(m.folds)} model(s), checks at rtol {', '.join(f'{t:g}' for t in m.rtols)}: "
        f"{len(m.checks) - len(failed)}/{len(m.checks)} passed"
        + (f" (failed: {', '.join(failed)})" if failed else "")
        + f"; {EXACT_CRITERION.grading}"
        + (f" Judged on the folds that ran. {not_folded_note(skipped)}" if skipped else "")
    )
    models = ", ".join(Path(r.get("model", p)).name for p, r in m.folds)
    if skipped:
        models += f" (not folded: {', '.join(m.not_folded)})"
    row = claim_row(ours, f"models: {models}", holds, comment)
    numbers = Numbers(
        headline=f"max rel. logit diff {m.worst:.1e}",
        unit="relative logit difference",
        estimate=m.worst,
        parts=tuple(
            Part(f"{Path(r.get('model', p)).name}/{e}", c["rel_logit_diff"])
            for p, r, e, c in m.checks
        ),
    )
    return with_numbers(row, numbers)


# ---- claim 7: folding speeds inference -------------------------------------------------------------

FOLD_SPEEDUP_YES = 1.05  # a "faster" grid ratio below this is "yes, weaker than the paper"
DISTURBED_VERDICT = not_judged("disturbed timing")
SPEED_CRITERION = Criterion(
    f"{speed_rule.RULE}; the folded model against the RMSNorm baseline: faster is yes (weaker than "
    f"the paper below {FOLD_SPEEDUP_YES:g}×), slower or within the margin is no",
    1 + speed_rule.MARGIN,
    None,
    grading=f"Verdict by the {speed_rule.RULE}. Folded against the baseline: faster is yes (graded "
    f"weaker than the paper below {FOLD_SPEEDUP_YES:g}×), slower or within the margin is no, else "
    "not resolved.",
)


def cell_name(row) -> str:
    """'forward B=1 T=128' or 'decode compiled B=4 P=128': a benchmark cell."""
    if row.benchmark == "forward":
        return f"forward B={int(row.batch)} T={int(row.seq_len)}"
    return f"decode {row.mode} B={int(row.batch)} P={int(row.prompt_len)}"


def slower_cells(bench: pd.DataFrame) -> list[str]:
    """'decode compiled B=4 P=128: 0.96× (IQR 0.93-0.98, below 1)' for every cell where the
    folded model's per-round speedups' interquartile range lies wholly below 1.0."""
    folded = inference_tables.timed(bench)
    folded = folded[(folded["variant"] == "folded") & (folded["speedup_q3"] < 1)]
    return [
        f"{cell_name(r)}: {r.speedup:.2f}× (IQR {r.speedup_q1:.2f}-{r.speedup_q3:.2f}, below 1)"
        for r in folded.itertuples(index=False)
    ]


def speed_verdict(decision: speed_rule.Decision) -> Verdict:
    """Claim 7's verdict from the speed rule's decision on folded against the baseline:
    faster is yes (weaker than the paper below FOLD_SPEEDUP_YES), slower or within the margin no,
    else not resolved."""
    text = decision.text("folded", "baseline")
    if decision.state == speed_rule.FASTER:
        if decision.ratio < FOLD_SPEEDUP_YES:
            best = paper.table3_best()["folded"]
            return weaker_than_paper(text, f"up to {best:.2f}× (v1 Table 3)")
        return plain(YES)  # plain, as every claim's yes (the numbers are in Ours)
    if decision.state == speed_rule.SLOWER:
        return because(NO, text)
    if decision.state == speed_rule.WITHIN:
        return because(NO, f"no gain of {speed_rule.MARGIN:.0%}: {text}")
    return because(NOT_RESOLVED, text)


def _benchmark_texts(bench: pd.DataFrame) -> list[str]:
    """Per benchmark (forward; decode per mode): its text for the Ours column (the cells' medians
    and interquartile ranges, as the tables show them; the verdict is the speed rule's)."""
    ours = []
    for s in inference_tables.speedup_summary(bench):
        name = "forward" if s["benchmark"] == "forward" else f"decode {s['mode']}"
        f, e, n = s["folded"], s["explicit"], s["cells"]
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
    return ours


def speed_numbers(bench: pd.DataFrame, decision: speed_rule.Decision) -> Numbers:
    """The speed rule's grid ratio over the runs of this host class with its interval, as the
    headline; each cell of this run a part with its interquartile range."""
    folded = inference_tables.timed(bench)
    folded = folded[folded["variant"] == "folded"]
    finite = math.isfinite(decision.low)
    return Numbers(
        headline=decision.said("folded", "baseline"),
        unit="× (t_baseline / t_folded, geometric mean over the benchmark grid)",
        estimate=decision.ratio,
        ci_low=decision.low if finite else None,
        ci_high=decision.high if finite else None,
        interval=f"{speed_rule.CONFIDENCE:.0%} t interval over {decision.runs} run(s) of this "
        "host class; parts: interquartile range of the per-round speedups of each cell of this run",
        parts=tuple(
            Part(cell_name(r), r.speedup, r.speedup_q1, r.speedup_q3)
            for r in folded.itertuples(index=False)
        ),
    )


@dataclass(frozen=True, eq=False)
class Timings:
    """Claim 7 measured on one machine: the timed rows, the cells timed on a disturbed machine,
    the speed rule's decision on folded against the baseline and the runs it pooled (`used`)."""

    bench: pd.DataFrame
    disturbed: list[str]
    decision: speed_rule.Decision
    used: list[str]

    @classmethod
    def of(cls, bench: pd.DataFrame, pool: Sequence[tuple[str, pd.DataFrame]]) -> Timings:
        decision, used = speed_rule.judge(bench, pool, "folded", "baseline")
        return cls(bench, inference_tables.disturbed_cells(bench), decision, used)

    @property
    def verdict(self) -> Verdict:
        return DISTURBED_VERDICT if self.disturbed else speed_verdict(self.decision)

    def ours(self) -> list[str]:
        return [*_benchmark_texts(self.bench), self.decision.said("folded", "baseline")]


@dataclass(frozen=True, eq=False)
class SpeedClaim:
    """Claim 7 measured: this run's timings, the models not timed, and a first-GPU check's
    timings (pooled with the runs of its own host class) where one is given, with its device."""

    here: Timings
    not_timed: str
    gpu: Timings | None
    gpu_where: str


def measure_speed(inp: ClaimInputs) -> SpeedClaim | NoVerdict:
    not_timed = "; ".join(inp.bench_skipped)
    if inp.bench.empty and not inp.bench_skipped:
        return not_measured("no benchmark CSVs given")
    if inp.bench.empty or "folded" not in set(inp.bench["variant"]):
        why = f"the exports were not timed ({not_timed})"
        return NoVerdict("not timed", "—", not_judged(why), f"Not timed: {not_timed}.")
    on_gpu = inp.gpu is not None and not inp.gpu.empty
    gpu = Timings.of(inp.gpu, inp.bench_pool) if on_gpu else None
    return SpeedClaim(Timings.of(inp.bench, inp.bench_pool), not_timed, gpu, inp.gpu_where)


def judge_speed(m: SpeedClaim) -> Verdict:
    """The speed rule's verdict here (not judged on disturbed timing), a GPU's beside it."""
    holds = m.here.verdict
    return holds.noted(f"on a GPU: {m.gpu.verdict.text}") if m.gpu else holds


def describe_speed(m: SpeedClaim, holds: Verdict) -> dict:
    bench, here = m.here.bench, m.here
    ours = here.ours()
    scales = {
        kind: inference_tables.where(part) for kind, part in bench.groupby("benchmark", sort=False)
    }
    if len(set(scales.values())) == 1:
        scales = {"both": next(iter(scales.values()))}
    comment = (
        "Speedup per cell = median over interleaved rounds of t_baseline / t_export, with the "
        "interquartile range of those per-round ratios; best and median over the cells of each "
        "benchmark (a cell whose interquartile range lies wholly below 1.0 is named). "
        f"{SPEED_CRITERION.grading} {speed_rule.pool_note(here.used, here.decision.left_out)} "
        f"{inference_tables.scale_note(bench)}"
    )
    if here.disturbed:
        comment = (
            f"NOT JUDGED: {len(here.disturbed)} cell(s) were timed on a disturbed machine "
            f"({'; '.join(here.disturbed)}); {RERUN}. " + comment
        )
    if m.not_timed:
        comment += f" Not timed: {m.not_timed}."
    scale = " | ".join(v if k == "both" else f"{k}: {v}" for k, v in scales.items())
    if m.gpu:  # a first-GPU check, judged alike, said apart
        ours.append(f"on a GPU ({m.gpu_where}): " + "; ".join(m.gpu.ours()))
        comment += (
            f" On a GPU: a first-GPU check ({m.gpu_where}; "
            f"{inference_tables.scale_note(m.gpu.bench)}), judged by the same rule. On a GPU: "
            f"{speed_rule.pool_note(m.gpu.used, m.gpu.decision.left_out)}"
        )
    row = claim_row("; ".join(ours), scale, holds, comment)
    return with_numbers(row, speed_numbers(bench, here.decision))
