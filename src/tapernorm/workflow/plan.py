"""The workflow's plan of a validated config: the families present, the outputs of the registry
(workflow/outputs.py) it makes, every target of rule all, the job records. `Plan(config)` is what
the Snakefile asks."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from ..config import ConfigError
from ..training.identity import MODEL_FILES
from ..variants import variants_with
from . import finetune as wft
from . import scaling as wsc
from . import stability as wst
from . import training as wtr
from .bench import BENCH_KINDS, Bench
from .devices import rules_env
from .family import Family, family_dirs
from .files import (
    FINETUNE_DATA_FILES,
    PRETRAIN_DATA,
    eval_set_files,
    pretrain_data_files,
    run_files,
    set_marker,
)
from .names import JOB_RECORDS, job_record, parse_run_name, run_name
from .outputs import BY_NAME, OUTPUTS, Output
from .trunks import Trunks

if TYPE_CHECKING:
    from ..config.run import RunConfig

# figure 2's runs: Baseline vs the variants claims 1 and 2 compare (Internal-Taper (+aux),
# All-Taper (+aux)), and DyT with its matched (untied-head) baseline (variants.VARIANTS' fig2 role)
FIG2_VARIANTS = variants_with("fig2")
TABLE_FILES = ("csv", "md", "tex", "html")  # html: what the report shows
FIGURE_FILES = ("pdf", "png")  # png: what the report shows
MANIFEST = "results/manifest.json"  # rule manifest: the run's last job
# rule claims: claims.md, claims.json, the report's page and the set's marker (runtime.output_set)
CLAIMS_FILES = ("results/claims.md", "results/claims.json", "results/claims.html",
                set_marker("results/claims"))  # fmt: skip
REPORT_HOME = "results/report/home.rst"  # rule report_home: the report's home page after a run
LR_GRID_SUMMARY = "results/lr_grid/lr_grid.json"  # rule lr_grid: the grid's summary
# rule tails: the tails battery (`tapernorm tails`) of the pre-training runs at the figure width and
# of the folded models, side by side: its table, and the JSON record that rule fig_tails draws
TAILS_TABLE, TAILS_FIGURE = "table_tails", "fig_tails"
TAILS_RECORD = f"results/tables/{TAILS_TABLE}.json"
# what `tapernorm tails` reads of a run (metrics.jsonl: the check of its runs, comparable.py)
TAILS_RUN_FILES = (*MODEL_FILES, "eval.json", "metrics.jsonl")
# where the config's `tails` leaves them out: float32 only, since on a CPU without native bfloat16
# (an AVX2-only host) bfloat16 autocast is emulated, several times float32's time (config/README.md)
TAILS_SETTINGS = {"windows": 128, "search_budget": 1024, "dtypes": ["float32"]}


def table_files(name: str) -> dict[str, str]:
    """{extension: path} of the files a table command writes (results/tables/<name>.<ext>)."""
    return {ext: f"results/tables/{name}.{ext}" for ext in TABLE_FILES}


def table_marker(name: str) -> str:
    """The set marker of table `name` (runtime.output_set)."""
    return set_marker(f"results/tables/{name}")


def figure_targets(name: str) -> list[str]:
    """The files of figure `name` that the default target asks for."""
    return [f"figures/{name}.{ext}" for ext in FIGURE_FILES]


class Plan:
    """The families of a validated config (each built by its function: a Family of rows, or None
    where the config leaves it out) and what the workflow builds from them."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.pretrain = wtr.pretrain(config)
        self.ablation = wtr.ablation(config)
        self.sweep = wtr.sweep(config)
        self.lr_grid = wtr.lr_grid(config)
        self.scaling = wsc.scaling(config)
        self.scaling_ablation = wsc.scaling_ablation(config)
        self.stability = wst.stability(config)
        self.stability_factors = wst.stability_factors(config)
        self.finetune = wft.finetune(config)
        self.finetune_base = wft.finetune_base(config)
        self.pretrain_figure_width = wtr.figure_width(config["pretrain"])
        self.bench = Bench(config, self.pretrain_figure_width) if config.get("bench") else None

    @cached_property
    def run_configs(self) -> dict[tuple[str, str], RunConfig]:
        """{(family, run): its config} of every run rule train trains, each resolved once, here
        (its data in PRETRAIN_DATA), before it branches from a trunk (trunks.with_trunk); a run
        that does not resolve is a ConfigError naming its family and run."""
        configs = {}
        for fam in self.training():
            for run in fam.runs():
                try:
                    configs[fam.name, run] = fam.run_config(run, PRETRAIN_DATA)
                except ConfigError as e:
                    raise ConfigError(f"{fam.name} run {run}: {e}") from e
        return configs

    @cached_property
    def trunks(self) -> Trunks:
        """The steps before the taper that the default's runs share (workflow/trunks.py)."""
        shared = (self.pretrain, self.ablation, self.sweep, self.stability, self.stability_factors)
        names = {f.name for f in shared if f}
        return Trunks([(*key, cfg) for key, cfg in self.run_configs.items() if key[0] in names])

    def training(self) -> list[Family]:
        """The families rule train trains (its {family} wildcard)."""
        found = [self.pretrain, self.ablation, self.sweep, self.lr_grid]
        found += [self.scaling, self.scaling_ablation, self.stability, self.stability_factors]
        return [f for f in found if f is not None]

    def family(self, name: str) -> Family:
        for fam in [*self.training(), self.finetune, self.finetune_base]:
            if fam is not None and fam.name == name:
                return fam
        raise ValueError(f"no family {name!r} in this config")

    def families(self) -> list[Family]:
        found = [*self.training(), self.finetune_base, self.finetune]
        return [f for f in found if f is not None]

    def outputs(self, lr_grid: bool = False) -> list[Output]:
        """The registry's outputs this config makes (each output's `needs` present; `lr_grid`: the
        checkout has the committed LR grid), in the registry's order."""
        present = {"": True, "committed_lr_grid": lr_grid}
        present |= {n: bool(getattr(self, n)) for n in ("ablation", "sweep", "finetune", "bench")}
        return [o for o in OUTPUTS if present[o.needs]]

    def tables_of(self, needs: str) -> list[str]:
        """The tables of the registry (rule and `tapernorm make` name theirs) that one rule per
        table builds from the runs `needs` says: "" the pre-training runs' (report.smk),
        "finetune" the fine-tuning's (finetune.smk)."""
        return [o.name for o in self.outputs() if o.by_table_rule and o.needs == needs]

    def figures(self) -> list[str]:
        """The figures this config draws from training runs, one rule each (report.smk)."""
        return [o.name for o in self.outputs() if o.kind == "figure" and o.from_runs]

    def figure_runs(self) -> dict[str, list[str]]:
        """{figure: the run directories it plots} of the figures this config draws (figures())."""
        width = self.pretrain_figure_width

        def pretrain(variants: Sequence[str] | None = None) -> list[str]:
            names = wtr.runs_at(self.pretrain, width)
            if variants is not None:
                names = [n for n in names if parse_run_name(n)[0] in variants]
            return self.pretrain.run_dirs(names)

        runs = {
            "fig1_gate_schedule": pretrain(["internal_aux"])[:1],
            "fig2_train_loss": pretrain(FIG2_VARIANTS),
            "fig3_logit_norm": pretrain(),
            "fig4_grad_norms": pretrain(),
            "fig4b_ablation_grad_norms": family_dirs(self.ablation),
            "fig6_scale_anchor": family_dirs(self.ablation),
            "fig7_anchor_sweep": family_dirs(self.ablation) + family_dirs(self.sweep),
        }
        return {name: runs[name] for name in self.figures()}

    def figure_width(self, figure: str) -> int:
        """--width of a figure: the ablation's for the ablation's figures, else figures 2-4's."""
        if BY_NAME[figure].needs in ("ablation", "sweep") and self.ablation:
            return wtr.figure_width(self.ablation.section)
        return self.pretrain_figure_width

    def fold_runs(self) -> list[str]:
        """The pre-training runs whose fold is checked (fold.variants at the figure width)."""
        width = self.pretrain_figure_width
        return [run_name(v, width, 0) for v in self.config["fold"]["variants"]]

    def fold_verify(self) -> list[str]:
        """verify.json of the fold check of each of fold_runs() (rule fold)."""
        return [f"results/fold/{run}/verify.json" for run in self.fold_runs()]

    def tails_runs(self) -> list[str]:
        """The run directories the tails battery measures (rule tails): every pre-training run at
        the figure width."""
        return self.pretrain.run_dirs(wtr.runs_at(self.pretrain, self.pretrain_figure_width))

    def tails_folded(self) -> list[str]:
        """The folded models it measures beside them: folded/ of each fold check (rule fold; left
        empty where the run diverged, which the table then says)."""
        return [f"{os.path.dirname(v)}/folded" for v in self.fold_verify()]

    def tails_settings(self) -> dict:
        """The battery's windows and search budget: the config's `tails`, else TAILS_SETTINGS."""
        return {**TAILS_SETTINGS, **(self.config.get("tails") or {})}

    def tails_gpus(self) -> int:
        """GPUs of the tails job: as a pre-training run's (one on cuda; auto and cpu none)."""
        return self.pretrain.gpus("")

    def finetune_evals(self) -> list[str]:
        return wft.eval_paths(self.finetune) if self.finetune else []

    def finetune_verify(self) -> list[str]:
        return wft.verify_paths(self.finetune) if self.finetune else []

    def bench_csvs(self) -> list[str]:
        return self.bench.csvs() if self.bench else []

    def gpu_rules_env(self) -> str:
        """The conda environment file (relative to workflow/rules/) of the rules that may hold a
        GPU: the CUDA build of torch when a family or the benchmarks run on cuda."""
        devices = [f.device for f in self.families()]
        return rules_env(devices + ([self.bench.device] if self.bench else []))

    def all_targets(self, lr_grid: bool = False) -> list[str]:
        """Every file the workflow's default target (rule all) builds for this config; `lr_grid`:
        the checkout has the committed LR grid (its figure is drawn)."""

        # each table's, figure's and the claims' set marker too (runtime.output_set): a job whose
        # write stopped between files is rerun for its missing marker (Snakemake looks only at
        # the outputs that targets or other jobs ask for)
        def tables(*names: str) -> list[str]:
            return [p for n in names for p in (*table_files(n).values(), table_marker(n))]

        def figures(*names: str) -> list[str]:
            return [p for n in names for p in (*figure_targets(n), set_marker(f"figures/{n}"))]

        files = {"table": tables, "figure": figures, "claims": lambda _: CLAIMS_FILES}
        targets = [f for output in self.outputs(lr_grid) for f in files[output.kind](output.name)]
        if self.finetune:
            exported = wft.runs_of(self.finetune, ["all_taperln"])
            targets += [f"results/export/{run}/verify.json" for run in exported]
        return [*targets, TAILS_RECORD, REPORT_HOME, MANIFEST]

    def timed_jobs(self, root: str | None = JOB_RECORDS) -> list[str]:
        """Job records of this config's jobs that keep one (trunks, training, fine-tuning, the
        tails battery, the inference benchmarks; not the LR grid, a study of its own), under `root`
        (None: relative to JOB_RECORDS, as `tapernorm job-times` takes them)."""
        records = []
        for fam in [self.pretrain, self.ablation, self.sweep, self.finetune_base, self.finetune]:
            records += fam.job_records(root) if fam else []
        records += [job_record("trunk", name, root=root) for name in self.trunks.names()]
        records.append(job_record("tails", root=root))
        if self.bench:
            records += [job_record(f"bench_{kind}", root=root) for kind in BENCH_KINDS]
        return records

    def manifest_inputs(self, analysis_inputs: Sequence[str], lr_grid: bool = False) -> list[str]:
        """Every file of the run that the manifest hashes, each once: the data it read, the files
        `analysis_inputs` of every training run, the fold checks, benchmarks, evaluations, job
        records, and every default target (all_targets(lr_grid)) but the manifest."""
        files = [*pretrain_data_files(self.config).values()]
        trained = [self.pretrain, self.ablation, self.sweep]
        files += run_files([d for fam in trained for d in family_dirs(fam)], analysis_inputs)
        files += self.fold_verify()
        files += self.bench_csvs() + self.timed_jobs()
        if self.finetune:
            files += [*FINETUNE_DATA_FILES.values()]
            for eval_set in self.finetune.section["eval"]["sets"]:
                files += [*eval_set_files(eval_set).values()]
            runs = self.finetune.run_dirs() + family_dirs(self.finetune_base)
            files += run_files(runs, (*MODEL_FILES, "eval.json"))
            files += self.finetune_evals() + self.finetune_verify()
            # the folded models (directories: `tapernorm manifest` hashes the files in them)
            files += [f"{os.path.dirname(v)}/folded" for v in self.finetune_verify()]
        files += [t for t in self.all_targets(lr_grid) if t != MANIFEST]
        return list(dict.fromkeys(files))
