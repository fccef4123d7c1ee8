"""The registry of the pipeline's outputs: every table, figure, the claims and the job times once,
each with its name (the file stem, the name `tapernorm make` takes, and its report caption's file,
workflow/report/<name>.rst), the Snakemake rule that makes it, the family of runs the config must
have for it, the command that builds it, the function of tapernorm.analysis that builds it and its
report caption. The workflow's plan (Plan.outputs) and rules read it for the targets and the rules
of each output; `tapernorm make NAME` and `tapernorm table | figure` dispatch through it (the
builder is imported by tapernorm.analysis.builder); `tapernorm docs` writes the caption files from
it (artifact/report_captions.py)."""

from __future__ import annotations

from dataclasses import dataclass

REPORT_DIR = "workflow/report"  # <name>.rst: each output's caption in the Snakemake report
NOT_OUTPUTS = ("workflow.rst",)  # the report's description before a run: no output's caption
# what an output may need beyond the pre-training runs: a family of the config (Plan's attribute
# of that name) or, for the LR grid's figure, the checkout's committed LR grid
NEEDS = ("", "ablation", "sweep", "finetune", "bench", "committed_lr_grid")


@dataclass(frozen=True)
class Output:
    """One output. `builder` is "module:function" of tapernorm.analysis, imported on use (so the
    commands that draw nothing never load matplotlib). The command passes the builder the id
    first where `by_id` (a builder of several outputs), then the values of its options `reads`,
    the output stem, the stamp, and its options `options` by keyword."""

    name: str
    kind: str  # "table", "figure" or "claims"
    cli_id: str | None  # `tapernorm table | figure` WHICH; None: `command`, a command of its own
    builder: str
    caption: str  # what the output's report caption says of it (report_caption adds the rest)
    reads: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    by_id: bool = False
    rule: str = ""  # the Snakemake rule that makes it, where not `name`
    command: str = ""  # the `tapernorm` command that builds it, where `cli_id` is None
    needs: str = ""  # what the config must have for it (NEEDS; "": every config makes it)

    @property
    def target(self) -> str:
        """The Snakemake rule that makes the output."""
        return self.rule or self.name

    @property
    def by_table_rule(self) -> bool:
        """A table that the workflow's rule per table makes (report.smk's, finetune.smk's loop:
        a rule of the table's name running `tapernorm table ID`), not a rule or command of its
        own."""
        return self.kind == "table" and not (self.rule or self.command)

    @property
    def from_runs(self) -> bool:
        """Built from training runs' directories alone (--runs)."""
        return self.reads == RUNS

    def argv(self) -> list[str]:
        """The `tapernorm` command line (without its options) that builds the output."""
        return [self.kind, self.cli_id] if self.cli_id is not None else [self.command]

    def report_caption(self) -> str:
        """The text of workflow/report/<name>.rst: the caption and how to rebuild the output."""
        return (
            f"{self.caption}\nRebuild it: ``snakemake --cores all --forcerun {self.target}`` (add "
            "the run's ``--configfile``, if it had one).\n"
        )

    def caption_path(self) -> str:
        return f"{REPORT_DIR}/{self.name}.rst"


RUNS, BENCH, RUNS_EVALS = ("runs",), ("bench",), ("runs", "evals")  # what the builders read
MIXED, WIDTH_MIXED = ("allow_mixed",), ("width", "allow_mixed")  # their options

OUTPUTS: tuple[Output, ...] = (
    Output(
        "table1",
        "table",
        "1",
        "tables.training:make_table",
        caption="""\
**Table 1**: the pre-training variants (which norms are tapered, whether the fixed-target scale loss
is used) and how many runs of each this pipeline trained.
""",
        reads=RUNS,
        options=MIXED,
        by_id=True,
    ),
    Output(
        "table2",
        "table",
        "2",
        "tables.training:make_table",
        caption="""\
**Table 2**: validation loss at g=0 (mean ± std over seeds) and the relative gap to the baseline of the
same width with the same head (column Gap against: the untied-head baseline for DyT), beside the
paper's numbers where the paper has that width. Diverged runs and robust
outliers (absolute robust z-score above 3.5 by median/MAD, with at least 4 seeds) are excluded from the mean and marked †.
The gaps paired by seed (seed s of every variant draws the same initialisation and batches) are
given with their 95% t interval and per seed; Params (ours) is our model's size beside the paper's
at the same width.
""",  # noqa: E501
        reads=RUNS,
        options=MIXED,
        by_id=True,
    ),
    Output(
        "table3",
        "table",
        "3",
        "tables.inference:make_bench_table",
        caption="""\
Table 3: forward throughput (k tokens/s; one forward pass over B x T tokens returning the last
token's logits, no KV cache) of the RMSNorm baseline and of Internal-Taper (+aux) at g=0 exported as
explicit scaling and folded (and DyT where timed), with speedups (medians of per-round ratios of
interleaved runs), beside the paper's H100 numbers. The caption says which models were timed (the
default: random weights at the paper's d=512) and where. A value marked † was timed on a disturbed
machine (the caption names the cells, why, and the rerun command); throughput and speedup come
from the same paired rounds, so they agree.
""",
        reads=BENCH,
        by_id=True,
        needs="bench",
    ),
    Output(
        "table4",
        "table",
        "4",
        "tables.finetune:make_finetune_table",
        caption="""\
Table 4: GPT-2 fine-tuning, mean cross-entropy at g=0 by model and protocol on the OpenWebText
held-out split, The Pile and Pile-filtered, beside the paper's numbers (FakeLN, Baroni et al. 2025:
our rerun where it ran, beside the published numbers). Off the paper's scale the model and the held-out set are stand-ins,
named as such in the table; sets not available offline are marked.
""",  # noqa: E501
        reads=RUNS_EVALS,
        options=MIXED,
        by_id=True,
        needs="finetune",
    ),
    Output(
        "table5",
        "table",
        "5",
        "tables.training:make_table",
        caption="""\
**Table 5**: training steps by width in this configuration, beside the paper's.
""",
        reads=RUNS,
        options=MIXED,
        by_id=True,
    ),
    Output(
        "table6",
        "table",
        "6",
        "tables.finetune:make_finetune_table",
        caption="""\
Table 6: fine-tuning schedules (total steps / warmup end / taper start / taper end), learning
rates, scale-loss weight and tokens per step, from this configuration's run configs, beside the
paper's.
""",
        reads=RUNS_EVALS,
        options=MIXED,
        by_id=True,
        needs="finetune",
    ),
    Output(
        "table_decode",
        "table",
        "decode",
        "tables.inference:make_bench_table",
        caption="""\
Decode benchmark: greedy decoding with a preallocated KV cache, per mode (eager, compiled), batch size
and prompt length: prefill time, decode tokens/s of the baseline, explicit scaling and folded models
(and DyT where timed), and decode speedups (medians of per-round ratios of interleaved runs, with
quartiles). The caption says which models were timed (the default: random weights at d=512) and where.
A value marked † was timed on a disturbed machine (the caption names the cells, why, and the rerun
command); throughput and speedup come from the same paired rounds, so they agree.
""",
        reads=BENCH,
        by_id=True,
        needs="bench",
    ),
    Output(
        "table_anchor",
        "table",
        "anchor",
        "studies.anchor_sweep:make_anchor_table",
        caption="""\
The scale loss's dose-response (not in the paper): per scale-loss form and weight lambda, the end
logit norm of All-Taper (+aux) over the ablation Baseline's, the end pre-logit scale over its target,
and the stiffness kappa of the restoring force on ln r (Prop. 4.3).
""",
        reads=RUNS,
        options=MIXED,
        rule="anchor_table",
        needs="sweep",
    ),
    Output(
        "table_tails",
        "table",
        None,
        "studies.tails:make_tails",
        caption="""\
The tails battery side by side (not in the paper; ``tapernorm tails``, the battery of ``tapernorm
probe``): one row per pre-training run at the figure width and per folded model, each at g = 0 (a
folded model, DyT and the baselines as they are), on the validation windows and on copies with 5%
and 20% of their tokens replaced at random or by rare and unseen ids (scored against the clean next
tokens), with the residual search's ratio and the largest residual RMS after any block; float32,
and bfloat16 after a slash where the battery measured it (the config's ``tails.dtypes``) and it
differs. The caption on the page says what each column is; the CSV has each measured dtype's
numbers, ``table_tails.json`` every number each battery returned.
""",
        rule="tails",
        command="tails",
    ),
    Output(
        "job_times",
        "table",
        None,
        "tables.job_times:write_job_times",
        caption="""\
Job times: the wall time of each training, fine-tuning and benchmark job from Snakemake's
job records (results/job_records), per rule and family: number of jobs, total and longest.
Jobs that ran side by side are added up, so a total is not the pipeline's elapsed time.
""",
        command="job-times",
    ),
    Output(
        "fig1_gate_schedule",
        "figure",
        "fig1",
        "figures.training:make_figure",
        caption="""\
Figure 1: (a) the TaperNorm layer: a normalizing branch h/r(h)·γ weighted g plus a
sample-independent linear branch c·h·γ̃ weighted 1-g (c frozen at the taper start), summed; g = 1 is
RMSNorm, g = 0 a fixed linear map. (b) the gate schedule g(k) logged by an actual Internal-Taper
(+aux) run, its taper start and end steps marked. The page above names the run and its steps, and
ends with the provenance stamp (the code's commit and the config's hash, also at the bottom of the
image and in its PDF/PNG metadata).
""",
        reads=RUNS,
        options=WIDTH_MIXED,
        by_id=True,
    ),
    Output(
        "fig2_train_loss",
        "figure",
        "fig2",
        "figures.training:make_figure",
        caption="""\
Figure 2: training loss vs step for the Baseline and Internal-Taper (+aux), and, where they were
pre-trained, DyT by its authors' recipe with the untied-head runs it is compared against. Each variant
has its own colour-blind-safe colour and its own marker; the line style says what happens to the
final norm (solid: kept, dotted: untied head, dash-dot: DyT). Lines: the mean over a variant's seeds;
bands: none for one seed, the min-max for 2-9 seeds, the 2.5-97.5 percentile from 10 seeds on. The
page above gives the style key in words, which band this run has, each variant's end-of-training loss
beside the paper's, and the provenance stamp.
""",
        reads=RUNS,
        options=WIDTH_MIXED,
        by_id=True,
    ),
    Output(
        "fig3_logit_norm",
        "figure",
        "fig3",
        "figures.training:make_figure",
        caption="""\
Figure 3: mean logit L2 norm vs step (log scale). (a) the paper's six variants; (b) where they were
pre-trained, DyT and the untied-head runs it is matched against, on axes of their own (their scale can
differ from the paper variants' by orders of magnitude). Each variant has its own colour-blind-safe
colour and its own marker; the line style says what happens to the final norm (solid: kept, dashed:
tapered, dotted: untied head, dash-dot: DyT). Lines: the mean over a variant's seeds; bands: none for
one seed, the min-max for 2-9 seeds, the 2.5-97.5 percentile from 10 seeds on; a diverged run ends
in an ×. Removing the final norm lets the logit scale grow ("logit chasing"). The page above gives
each variant's end value beside the paper's, so whether the scale loss holds All-Taper (+aux) near
the runs that keep a final norm can be read off: in the default CPU run it does not at the paper's
weight (All-Taper (+aux) ends beside the unanchored Final-Taper and All-Taper); Figures 6 and 7 show
the ablation, where it does at a larger weight.
""",
        reads=RUNS,
        options=WIDTH_MIXED,
        by_id=True,
    ),
    Output(
        "fig4_grad_norms",
        "figure",
        "fig4",
        "figures.training:make_figure",
        caption="""\
Figure 4: gradient Frobenius norms before clipping, averaged over blocks, vs step (log scale), one
panel per weight type (attention QKV, attention W_o, MLP W_1, MLP W_2). Row (a): the paper's six
variants; row (b), where they were pre-trained: DyT and the untied-head runs it is matched against, on
axes of their own (DyT's gradients can be orders of magnitude smaller). Colours, markers, line styles
and bands as in Figure 3. The page above says, from this run's end values, whether the runs without
a final norm end with smaller gradient norms than those with one, as in the paper's Fig. 4, or larger
(the opposite), and by how much. Claim 5 is judged on the scale-anchor ablation, whose gradient norms
are Figure 4b.
""",
        reads=RUNS,
        options=WIDTH_MIXED,
        by_id=True,
    ),
    Output(
        "fig4b_ablation_grad_norms",
        "figure",
        "fig4b",
        "figures.training:make_figure",
        caption="""\
Figure 4b (not in the paper): gradient Frobenius norms of the scale-anchor ablation's runs, where
claim 5 is judged, averaged over blocks, vs step (log scale), the paper's six variants. One panel per
weight type (attention QKV, attention W_o, MLP W_1, MLP W_2); row (a) before gradient clipping, row (b)
after it (where the runs logged it). Grey: the end window (the last 10% of logged steps) whose means
claim 5 compares; the page above gives claim 5's ratios in each convention (no-final-norm runs over
final-norm runs, and All-Taper (+aux) over Internal-Taper (+aux)) and whether the direction before
clipping is the paper's. Colours, markers and line styles as in Figure 3; the ablation has one seed
per variant by default, so no bands.
""",
        reads=RUNS,
        options=WIDTH_MIXED,
        by_id=True,
        needs="ablation",
    ),
    Output(
        "fig5_decode_speedup",
        "figure",
        "fig5",
        "figures.speedups:make_fig5",
        caption="""\
Figure 5: decode speedup of explicit scaling and folded (and DyT, the norm-free alternative timed as
it is, where timed) over the RMSNorm baseline per batch size and prompt length, eager and compiled;
markers are medians of per-round ratios, bars their quartiles, and each series has its own colour and
marker. Right of each panel: our best cell (the largest per-cell median) beside the paper's headline,
which says "up to" (1.14x explicit, 1.18x folded): a maximum over the paper's grid, so the comparison
is max against max; the paper publishes no per-cell numbers. A hollow marker is a cell whose timing
was disturbed (other processes busy beside it, or per-round speedups spread too wide): not a
measurement of the method; the page above names those cells, why, and how to rerun them.
""",
        reads=BENCH,
        rule="fig5",
        needs="bench",
    ),
    Output(
        "fig6_scale_anchor",
        "figure",
        "fig6",
        "figures.training:make_figure",
        caption="""\
Figure 6 (not in the paper): the scale-anchor ablation on a small slice of the corpus trained for many
epochs, the paper's six variants. Top row (log scale): the mean logit norm; the mean pre-logit scale
r(h), the quantity Eq. 5's scale loss holds at its target; and the final taper's scale c_f·r(h) over a
norm's (1 = what an RMSNorm gives; drawn only for variants whose final norm tapers). Bottom row: the
fraction of tokens with a positive margin; the mean cosine between the loss gradient at the pre-logit
state and that state (about 0 with a final norm, Prop. 4.1; negative without one once margins are
positive, Prop. 4.2); and softmax saturation, the mean ||softmax(z) - e_y||, i.e. the size of the
loss gradient with respect to the logits. Colours, markers, line styles and bands as in Figure 3 (the
ablation has one seed per variant by default: no bands).
""",
        reads=RUNS,
        options=WIDTH_MIXED,
        by_id=True,
        needs="ablation",
    ),
    Output(
        "fig7_anchor_sweep",
        "figure",
        "fig7",
        "studies.anchor_sweep:make_fig7",
        caption="""\
Figure 7 (not in the paper): the scale loss's dose-response. All-Taper (+aux) of the ablation
retrained at other scale-loss weights lambda, with the paper's Eq. 5 (circles) and with our relative
form (squares). Left: the end logit norm over the Baseline's; horizontal lines: the unanchored
Final-Taper (dashed) and All-Taper (dotted) runs; grey band: within 1.5x of the Baseline. Right: the
end pre-logit scale r(h) over its target s_tgt (dotted: r(h) = s_tgt). Each form's legend entry lists
the stiffness kappa of the restoring force on ln r (Prop. 4.3) at its points, in order of lambda;
the page above gives every point's kappa and ratios. The legend sits beside the axes; no text is drawn
on them.
""",
        reads=RUNS,
        options=MIXED,
        needs="sweep",
    ),
    Output(
        "fig_claim_gaps",
        "figure",
        "claim_gaps",
        "figures.summary:make_summary_figure",
        caption="""\
The claims' paired gaps (not in the paper): each variant's validation-loss gap to its matched
baseline in claims 1, 2 and TaperNorm vs DyT, the mean over seed pairs with its 95% t interval (none
with one pair), as ``results/claims.json`` carries them, against the shaded ±2% band of claims 1 and
2's criterion. The page above lists every number drawn and each row's verdict.
""",
        reads=("claims",),
        by_id=True,
    ),
    Output(
        "fig_lr_grid",
        "figure",
        "lr_grid",
        "figures.summary:make_summary_figure",
        caption="""\
The committed LR grid (``results/cpu/lr_grid``, not in the paper): validation loss at the last step
against the peak learning rate (log scale) per variant, each seed a dot and the line their mean; the
shared LR the pre-training runs use is dotted and each variant's best LR ringed. The page above lists
every mean drawn and each arm's gap to its matched baseline at the shared and at its best LR.
""",
        reads=("lr_grid",),
        by_id=True,
        needs="committed_lr_grid",
    ),
    Output(
        "fig_tails",
        "figure",
        "tails",
        "figures.summary:make_summary_figure",
        caption="""\
The tails battery side by side (not in the paper), from ``results/tables/table_tails.json``: (a) per
arm (the baseline, each tapered arm at g = 0, DyT and its untied-head baseline, the folded models),
one point per seed of the worst 5%-noisy window loss and of the residual search's ratio (log
scale), against the baselines' median and ``tapernorm probe``'s limits; (b), where the runs have
several training lengths, both against training tokens per parameter. The page above lists every
number drawn.
""",
        reads=("tails",),
        by_id=True,
    ),
    Output(
        "claims",
        "claims",
        None,
        "claims.document:write_claims",
        caption="""\
The paper's claims (Sec. 7), the paper's value, ours, the scale at which ours was measured, and
whether the claim holds here, headed by the scale card (ours beside the paper's, and what this
scale cannot test). Loss gaps are paired by seed with a 95% interval; 'not resolved' means the
measurement cannot tell.
""",
        command="claims",
    ),
)
BY_NAME = {o.name: o for o in OUTPUTS}


def cli_ids(kind: str) -> list[str]:
    """The `tapernorm table | figure` ids of the outputs of `kind`, in the registry's order."""
    return [o.cli_id for o in OUTPUTS if o.kind == kind and o.cli_id is not None]


def by_cli_id(kind: str, cli_id: str) -> Output:
    """The output of `kind` that `tapernorm table | figure` names `cli_id`."""
    return next(o for o in OUTPUTS if o.kind == kind and o.cli_id == cli_id)
