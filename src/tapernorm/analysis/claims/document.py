"""results/claims.md: each claim of the paper's section 7 that the inputs allow, the paper's value, ours,
the scale ours was measured at, whether it holds, and one sentence on it.

Each claim is one declaration in CLAIMS (Claim): its statement, the paper's value and where it is
from, and three functions: `measure` (ClaimInputs -> the claim's typed numbers, a dataclass of its
module, or a NoVerdict row where the inputs allow no verdict: "not measured" where they are absent),
`judge` (those numbers -> a Verdict, by its criterion alone) and `describe` (numbers and verdict ->
the row's Ours, Scale and Comment cells and its Numbers); then its criterion and the scaling
study's rows it quotes. Other experiment families add their claims by adding a Claim to CLAIMS
(and, if they need new inputs, fields to ClaimInputs) or by passing markdown through
`extra_sections`. The three functions live by group in claims.loss (1, 2), claims.chasing (3-5),
claims.fold (6, 7) and claims.finetune (8), the paper's stability claim in claims.stability, and
the row beyond the paper, TaperNorm vs DyT, in claims.dyt (its criterion stated there); their
thresholds are named constants there. ClaimInputs and the grades of the "Holds?" column are in
claims.rows; the numbers claims.json carries beside each row's prose in claims.numbers.

Criteria (never tuned to the data; "end" = mean over the last 10% of logged steps, diverged runs
excluded from means and counted): each is a `*_CRITERION` constant of its claim's module (a
Claim's criterion: its one line is claims.json's `criterion`, quoted by the docs; its grading is
printed in the claim's comment). A claim's judge reaches a plain yes / partly / no (or not
resolved) by the parts' judges (loss.width_verdict, chasing.chase_verdict, suppression_verdict and
_grad_verdict, fold.judge_exact and speed_verdict, finetune._verdict, stability.width_verdict,
dyt._dyt_holds: tests/test_claim_judges.py and the claims' tests check the grades), then grades a
yes (claims.rows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ...runtime.output_set import OutputSet, check_member, json_bytes, marker_path
from ...runtime.provenance import REHEARSAL_NOTE, made, stamp
from .. import comparable, paper, speed_rule
from ..html import markdown_page
from ..runs import describe_scale, load_runs
from ..studies.lr_context import load_lr_grid
from ..tables import finetune as ft
from ..tables import inference as inference_tables
from ..tables.write import to_markdown
from . import chasing, dyt, finetune, fold, loss
from . import stability as stability_claim
from .chasing import CHASE_CRITERION, GRAD_CRITERION, SUPPRESS_CRITERION
from .dyt import DYT_CRITERION, grid_source, paper_variants_only
from .finetune import FINETUNE_CRITERION, paper_claim8
from .fold import EXACT_CRITERION, SPEED_CRITERION, read_verify
from .loss import GAP_CRITERION, gap_statement, paper_gap_value
from .numbers import Criterion, record_fields
from .rows import COLUMNS, GRADE_CLASS, GRADES, NOT_MEASURED, ClaimInputs, NoVerdict, Verdict
from .scale_card import COLUMNS as SCALE_COLUMNS
from .scale_card import scale_card
from .scaling import load_scaling, with_study
from .stability import STABILITY_CRITERION, load_stability

__all__ = [
    "CLAIMS",
    "COLUMNS",
    "GRADES",
    "NOT_MEASURED",
    "ClaimInputs",
    "Verdict",
    "claim1",
    "claim2",
    "claim3",
    "claim4",
    "claim5",
    "claim6",
    "claim7",
    "claim8",
    "claims_table",
    "read_verify",
    "write_claims",
]


@dataclass(frozen=True)
class Claim:
    """One claim of claims.md, declared once: its statement (the Claim cell; claims 1-8 are
    numbered by their place in CLAIMS, the others carry their `name`), the paper's value (the
    Paper cell, tagged with where it is from, `sources`: the paper's version and table, which
    claims.json's `paper_sources` lists too; DyT's row has none), how it is computed from the
    inputs, in three steps: `measure` (typed numbers, or a NoVerdict where the inputs allow
    none), `judge` (those numbers -> a Verdict, by the criterion) and `describe` (the numbers and
    the verdict -> the Ours, Scale and Comment cells and the row's Numbers: claims.rows.claim_row,
    claims.numbers.with_numbers), its criterion (claims.json's `criterion`), whether it is judged
    on the paper's six variants only (dyt.paper_variants_only) and the scaling study's claim
    whose rows it quotes (scaling.with_study)."""

    statement: str
    paper_value: str
    measure: Callable[[ClaimInputs], Any]
    judge: Callable[[Any], Verdict]
    describe: Callable[[Any, Verdict], dict]
    criterion: Criterion
    sources: tuple[paper.Source, ...] = ()
    paper_variants: bool = False
    study: str | None = None
    name: str | None = None

    def title(self, number: int) -> str:
        """The Claim cell: "<number>. <statement>", or the statement of a named claim."""
        return self.statement if self.name else f"{number}. {self.statement}"

    def cells(self, inp: ClaimInputs) -> dict:
        """The cells the claim computes (claims.rows.MEASURED, its grade and Numbers): measured,
        judged, described."""
        measured = self.measure(inp)
        if isinstance(measured, NoVerdict):
            return measured.row()
        return self.describe(measured, self.judge(measured))

    def row(self, inp: ClaimInputs, number: int) -> dict:
        """The claim's row: its statement and paper value, its cells (on the paper's variants
        where it says so) with the study's rows quoted, and its paper sources."""
        cells = paper_variants_only(self.cells) if self.paper_variants else self.cells
        if self.study is not None:
            cells = with_study(cells, self.study)
        return {
            "Claim": self.title(number),
            "Paper": paper.tagged(self.paper_value, *self.sources),
            **cells(inp),
            SOURCES_KEY: self.sources,
        }


SOURCES_KEY = "paper_sources"  # the row's key holding its paper sources (not a column)
TABLE2, FIG3 = (paper.TABLE2_SOURCE,), (paper.FIG3_SOURCE,)
CHASED, ANCHORED = paper.FIG3_CHASING_RATIO, paper.FIG3_ANCHORED_RANGE
NO_FINAL_GRAD = paper.FIG4_NO_FINAL_NORM_GRAD
BEST, DECODE = paper.table3_best(), paper.DECODE_SPEEDUP
CLAIMS: tuple[Claim, ...] = (
    Claim(
        gap_statement("internal_aux"), paper_gap_value("internal_aux"),
        loss.measure_internal_aux, loss.judge_gap_claim, loss.describe_gap_claim,
        GAP_CRITERION, TABLE2, study="1",
    ),
    Claim(
        gap_statement("all_aux"), paper_gap_value("all_aux"),
        loss.measure_all_aux, loss.judge_gap_claim, loss.describe_gap_claim,
        GAP_CRITERION, TABLE2, study="2",
    ),
    Claim(
        "Without an anchor, final-norm removal causes logit chasing",
        f"~{CHASED[0]}-{CHASED[1]}x at d=512 (All-Taper ~2e5, Final-Taper ~1.2e5 vs ~5e3-6e3 "
        "anchored)",
        chasing.measure_chasing, chasing.judge_chasing, chasing.describe_chasing,
        CHASE_CRITERION, FIG3, paper_variants=True, study="3",
    ),
    Claim(
        "The scale loss suppresses logit chasing (All-Taper (+aux) close to anchored runs)",
        f"All-Taper (+aux) ~{ANCHORED[0]:.0e}-{ANCHORED[1]:.0e}, like the baseline (ratio ~1)",
        chasing.measure_suppression, chasing.judge_suppression, chasing.describe_suppression,
        SUPPRESS_CRITERION, FIG3, paper_variants=True, study="4",
    ),
    Claim(
        "Gradient norms cluster by final-norm presence without the anchor; the gap closes with it",
        f"no-final-norm grads decay to ~{NO_FINAL_GRAD[0]}-{NO_FINAL_GRAD[1]} (d=512); All-Taper "
        "(+aux) = Internal-Taper",
        chasing.measure_gradients, chasing.judge_gradients, chasing.describe_gradients,
        GRAD_CRITERION, (paper.FIG4_SOURCE,), paper_variants=True,
    ),
    Claim(
        "Folding is exact: folded and unfolded models give the same logits and loss",
        f"same logits; max |dz| ~{paper.FOLD_RTOL:.0e} of the logit scale (float32)",
        fold.measure_folds, fold.judge_folds, fold.describe_folds,
        EXACT_CRITERION, (paper.FOLD_SOURCE,),
    ),
    Claim(
        "Folding speeds inference (explicit scaling and folded vs the RMSNorm baseline)",
        f"v1 forward up to {BEST['folded']:.2f}× folded / {BEST['explicit']:.2f}× explicit "
        f"({paper.TABLE3_SETUP}); v2 decode up to {DECODE['folded']:.2f}× / "
        f"{DECODE['explicit']:.2f}×",
        fold.measure_speed, fold.judge_speed, fold.describe_speed,
        SPEED_CRITERION, (paper.TABLE3_SOURCE, paper.DECODE_SOURCE),
    ),
    Claim(
        "GPT-2 TaperLN fine-tuning ends close to Vanilla and at or better than FakeLN on most "
        "cells of Table 4",
        paper_claim8(),
        finetune.measure_finetune, finetune.judge_finetune, finetune.describe_finetune,
        FINETUNE_CRITERION, (paper.TABLE4_SOURCE,),
    ),
    Claim(
        "Stability: the taper trains stably (Internal-Taper (+aux) the most stable and reliable "
        "across seeds)",
        "stable training; Internal-Taper (+aux) the most stable and reliable across seeds",
        stability_claim.measure_stability, stability_claim.judge_stability,
        stability_claim.describe_stability,
        STABILITY_CRITERION, (paper.STABILITY_SOURCE,), name="stability",
    ),
    Claim(
        "TaperNorm vs DyT: Internal-Taper (+aux) as close to its matched baseline's loss as DyT "
        "to its own, and faster folded",
        "— (DyT is not in the paper; our comparison)",
        dyt.measure_dyt, dyt.judge_dyt, dyt.describe_dyt,
        DYT_CRITERION, study="dyt", name="TaperNorm vs DyT",
    ),
)  # fmt: skip
# each claim's cells (Claim.cells: measured, judged, described), by its number or name
claim1, claim2, claim3, claim4, claim5, claim6, claim7, claim8 = (c.cells for c in CLAIMS[:8])
claim_stability, claim_dyt = CLAIMS[8].cells, CLAIMS[9].cells


def _numbered(numbers: list[int]) -> str:
    """'1, 2' or '3-5' (three or more in a row)."""
    if len(numbers) > 2 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(map(str, numbers))


def measured_where(claims: Sequence[Claim] = CLAIMS) -> str:
    """'loss.py (claims 1, 2), chasing.py (3-5), ... and dyt.py (TaperNorm vs DyT)': the module
    of claims/ that measures each claim (its thresholds are named constants there)."""
    modules: dict[str, list] = {}
    for number, claim in enumerate(claims, 1):
        module = claim.measure.__module__.rsplit(".", 1)[-1] + ".py"
        modules.setdefault(module, []).append(claim.name or number)
    said = [
        f"{module} ({'claims ' if not i else ''}"
        + (_numbered(ids) if all(isinstance(x, int) for x in ids) else ", ".join(map(str, ids)))
        + ")"
        for i, (module, ids) in enumerate(modules.items())
    ]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]


def claim_rows(inp: ClaimInputs) -> list[tuple[dict, Criterion]]:
    """(row, its criterion) per claim in CLAIMS; a row may carry its Numbers (claims.numbers), and
    carries its paper value's sources in its Paper cell and under SOURCES_KEY."""
    return [(claim.row(inp, number), claim.criterion) for number, claim in enumerate(CLAIMS, 1)]


def claims_table(inp: ClaimInputs) -> pd.DataFrame:
    """One row per claim in CLAIMS."""
    return pd.DataFrame([row for row, _ in claim_rows(inp)], columns=list(COLUMNS))


INTRO = (
    "Each row is one of the claims of {source} with the paper's value (tagged with the paper's "
    "version, v1 or v2, and its table or figure) and ours, computed from the "
    "inputs listed at the end, at the scale stated above. 'End' values are means over the last "
    "10% of logged training steps; diverged runs are excluded from means and counted. Loss gaps "
    "are paired by seed (seed s of every variant draws the same initialisation and batches) and "
    "given with a 95% t interval. Thresholds are named constants in tapernorm/analysis/claims/: "
    "{measured_where}, and are stated in each comment. "
    "'Holds?' is graded (tapernorm/analysis/claims/rows.py): 'yes' at the paper's settings and size; "
    "'yes, weaker than the paper' or 'yes, unlike the paper' where our size is far below or on the "
    "other side of the paper's; 'only at a deviation' where it holds only at a setting the paper "
    "did not use (named, with the verdict at the paper's); 'partly'; 'no'; 'not reproduced at "
    "this scale' where the paper's premise for the claim is measured absent in our runs (the "
    "criterion's verdict beside it); 'not resolved' where "
    "the measurement cannot tell (an interval straddles the criterion's edge; for timings, the "
    "95% interval over reruns of one host class crosses the speed rule's 3% margin, "
    "speed_rule.py); 'not measured' (inputs not given); 'not judged' (inputs that cannot "
    "support a verdict). Losses, cross-entropies and timings move across CPUs and thread counts "
    "(docs/reproducibility.md)."
)


def claims_record(
    inp: ClaimInputs, config_sha256: str | None, inputs: dict, rehearsal: bool = False
) -> dict:
    """Everything claims.md shows, as data (results/claims.json): what made it (and whether it is
    a rehearsal on stand-ins), the scale card, each row with its grade and its numbers
    (claims.numbers.record_fields), the inputs."""
    rows = [
        {
            **{c: row[c] for c in COLUMNS},
            "grade": row["grade"],
            SOURCES_KEY: [s.to_dict() for s in row.get(SOURCES_KEY, ())],
            **record_fields(row, criterion),
        }
        for row, criterion in claim_rows(inp)
    ]
    card = scale_card(inp)
    return {
        "made": made(every_distribution=False),
        "config_sha256": config_sha256,
        "rehearsal": rehearsal,
        "stamp": stamp(config_sha256, rehearsal=rehearsal),
        "scale_card": card.to_dict("records"),
        "claims": rows,
        "inputs": inputs,
    }


def claims_markdown(record: dict) -> str:
    """claims.md from a claims record: the stamp, the scale card, the claims table, the inputs."""
    card = pd.DataFrame(record["scale_card"], columns=list(SCALE_COLUMNS))
    table = pd.DataFrame(record["claims"], columns=[*COLUMNS, "grade"])[list(COLUMNS)]
    parts = [
        "# Claims of the paper vs this reproduction",
        "",
        *([f"**{REHEARSAL_NOTE}**", ""] if record.get("rehearsal") else []),
        f"Made by {record['stamp']} on {record['made']['host']['cpu']} "
        f"({record['made']['written']}).",
        "",
        "## The scale of these numbers",
        "",
        to_markdown(card, "Ours beside the paper's, from the runs' configs and outputs."),
        "## Claims",
        "",
        to_markdown(table, INTRO.format(source=paper.SOURCE, measured_where=measured_where())),
        "## Inputs",
        "",
        *(f"- {k}: {v}" for k, v in record["inputs"].items()),
    ]
    return "\n".join(parts) + "\n"


def _checked(
    run_dirs: Sequence[str | Path], by: Sequence[str], allow_mixed: bool, notes: list[str]
) -> pd.DataFrame:
    """load_runs' table of `run_dirs` checked comparable (comparable.check), its notes of the mixes
    allowed added to `notes`; an empty table where none are given."""
    if not run_dirs:
        return pd.DataFrame()
    runs = load_runs(run_dirs)[0]
    notes += comparable.check(runs, by, allow_mixed)
    return runs


def write_claims(
    out_path: str | Path,
    runs: Sequence[str | Path] = (),
    ablation_runs: Sequence[str | Path] = (),
    sweep_runs: Sequence[str | Path] = (),
    verify_files: Sequence[str | Path] = (),
    extra_sections: Sequence[str] = (),
    finetune_evals: Sequence[str | Path] = (),
    bench_files: Sequence[str | Path] = (),
    lr_grid: str | Path | None = None,
    config_sha256: str | None = None,
    rehearsal: bool = False,
    scaling: str | Path | None = None,
    gpu: str | Path | None = None,
    stability: str | Path | None = None,
    allow_mixed: bool = False,
    bench_pool: Sequence[str | Path] = (),
) -> Path:
    """Compute every claim from the given run dirs / verify files; write <out>.md, .html (the
    report's page) and .json (claims_record) atomically.

    `extra_sections`: markdown blocks appended after the table (e.g. other families' notes).
    `finetune_evals`: eval JSON files of the GPT-2 fine-tuning runs (claim 8).
    `bench_files`: CSVs of `tapernorm bench forward|decode` (claim 7).
    `lr_grid`: lr_grid.json of `tapernorm lr-grid` (the TaperNorm-vs-DyT row, the scale card).
    `scaling`: summary.csv of the scaling study (claims 1-4 and DyT's rows, the scale card).
    `gpu`: a first-GPU check's directory (results/gpu/DIR): claim 7 on a GPU too.
    `stability`: summary.csv of the stability study (the stability row).
    `config_sha256`: the workflow config's hash, named in the stamp.
    `rehearsal`: a rehearsal of the paper path on stand-ins (config/rehearsal.yaml): said at the top
    and in the stamp.
    `allow_mixed`: let runs of mixed recipes through comparable.check (the inputs say so).
    `bench_pool`: other runs' benchmark directories (results/reference/*/results/bench),
    pooled by the speed rule with `bench_files` where of the same host class (speed_rule).
    An input that is a member of an output set (the summaries, the LR grid) is read only whole
    (output_set.check_member: IncompleteSet, one line, otherwise).
    """
    for member in (lr_grid, scaling, stability):
        if member:
            check_member(member)
    mixed: list[str] = []
    mixed += ft.check_evals(finetune_evals, allow_mixed)  # claim 8: a row's sets of one run
    bench = inference_tables.load_bench(bench_files) if bench_files else pd.DataFrame()
    if gpu:
        from ..studies.gpu_report import gpu_bench  # (imports torch)

        gpu_rows, gpu_where = gpu_bench(gpu)
    else:
        gpu_rows, gpu_where = None, ""
    inp = ClaimInputs(
        runs=_checked(runs, comparable.CELL, allow_mixed, mixed),
        ablation=_checked(ablation_runs, comparable.CELL, allow_mixed, mixed),
        sweep=_checked(sweep_runs, comparable.SWEEP_CELL, allow_mixed, mixed),
        verify=[(Path(p), read_verify(p)) for p in verify_files],
        finetune=ft.load_finetune_evals(finetune_evals) if finetune_evals else pd.DataFrame(),
        bench=inference_tables.timed(bench),
        bench_skipped=inference_tables.skipped_notes(bench),
        bench_pool=speed_rule.load_pool(bench_pool),
        lr_grid=load_lr_grid(lr_grid) if lr_grid else None,
        scaling=load_scaling(scaling) if scaling else None,
        stability=load_stability(stability) if stability else None,
        gpu=gpu_rows,
        gpu_where=gpu_where,
    )
    inputs = _inputs_listed(inp, runs, ablation_runs, sweep_runs, verify_files, finetune_evals,
                            bench_files, bench_pool, scaling, stability, gpu)  # fmt: skip
    if mixed:
        inputs["mixed inputs allowed"] = comparable.mixed_note(mixed)
    record = claims_record(inp, config_sha256, inputs, rehearsal)
    text = claims_markdown(record)
    for section in extra_sections:
        text += "\n" + section.rstrip() + "\n"
    out = Path(out_path)
    claims = OutputSet(marker_path(out.with_suffix("")), "tapernorm claims")
    claims.add(out, text.encode())
    grades = [GRADE_CLASS[row["grade"]] for row in record["claims"]]
    claims.add(out.with_suffix(".html"), markdown_page(text, "claims", grades).encode())
    claims.add(out.with_suffix(".json"), json_bytes(record))
    claims.commit()
    return out


def _inputs_listed(
    inp: ClaimInputs, runs: Sequence, ablation_runs: Sequence, sweep_runs: Sequence,
    verify_files: Sequence, finetune_evals: Sequence, bench_files: Sequence,
    bench_pool: Sequence, scaling: str | Path | None, stability: str | Path | None,
    gpu: str | Path | None,
) -> dict[str, str]:  # fmt: skip
    """claims.md's list of what it was computed from."""
    return {
        "pre-training runs": f"{len(runs)} ({describe_scale(inp.runs) if runs else 'none'})",
        "ablation runs": f"{len(ablation_runs)} "
        f"({describe_scale(inp.ablation) if ablation_runs else 'none'})",
        "scale-loss sweep runs": str(len(sweep_runs)),
        "fold verify files": str(len(verify_files)),
        "fine-tuning evaluations": str(len(finetune_evals)),
        "benchmark CSVs": str(len(bench_files)),
        "benchmark pool (speed rule)": f"{len(bench_pool)} run(s)",
        "LR grid": grid_source(inp.lr_grid) if inp.lr_grid else "none",
        "scaling study": str(scaling) if scaling else "none",
        "stability study": str(stability) if stability else "none",
        "first-GPU check": str(gpu) if gpu else "none",
    }
