"""The former face of the workflow layer, kept for the code that imports it: each name forwards to
tapernorm.workflow (one object per run family: workflow.plan.Plan). New code imports from there."""

from __future__ import annotations

from .workflow.bench import BENCH_KINDS, BENCH_OPTIONAL, BENCH_VARIANTS
from .workflow.devices import gpu_prefix
from .workflow.finetune import FINETUNE_BASE_ROOT, FinetuneBaseFamily, FinetuneFamily
from .workflow.names import (
    FINETUNE_MODEL_NAME,
    FINETUNE_MODEL_WILDCARD,
    FINETUNE_RUN_NAME,
    FINETUNE_RUN_WILDCARD,
    FOLDED_FINETUNE_RUN_WILDCARD,
    JOB_RECORDS,
    RUN_NAME,
    RUN_WILDCARD,
    SWEEP_RUN_NAME,
    finetune_run_name,
    job_record,
    parse_finetune_run,
    parse_run_name,
    run_name,
    sweep_run_name,
    wildcard_pattern,
)
from .workflow.plan import (
    FIG2_VARIANTS,
    FIGURE_FILES,
    FINETUNE_TABLES,
    MANIFEST,
    PRETRAIN_TABLES,
    REPORT_HOME,
    TABLE_FILES,
    Plan,
)
from .workflow.training import SweepFamily, TrainingFamily, family_seeds, seeds_of, steps_for
from .workflow.validate import check_config_files, validate_pipeline_config

SWEEP_FAMILY = SweepFamily.name

__all__ = [
    "BENCH_KINDS",
    "BENCH_OPTIONAL",
    "BENCH_VARIANTS",
    "FIG2_VARIANTS",
    "FIGURE_FILES",
    "FINETUNE_BASE_ROOT",
    "FINETUNE_MODEL_NAME",
    "FINETUNE_MODEL_WILDCARD",
    "FINETUNE_RUN_NAME",
    "FINETUNE_RUN_WILDCARD",
    "FINETUNE_TABLES",
    "FOLDED_FINETUNE_RUN_WILDCARD",
    "JOB_RECORDS",
    "MANIFEST",
    "PRETRAIN_TABLES",
    "REPORT_HOME",
    "RUN_NAME",
    "RUN_WILDCARD",
    "SWEEP_FAMILY",
    "SWEEP_RUN_NAME",
    "TABLE_FILES",
    "check_config_files",
    "family_seeds",
    "finetune_run_name",
    "gpu_prefix",
    "job_record",
    "parse_finetune_run",
    "parse_run_name",
    "run_name",
    "seeds_of",
    "steps_for",
    "sweep_run_name",
    "validate_pipeline_config",
    "wildcard_pattern",
]


def family_runs(config: dict, family: str, width: int | None = None) -> list[str]:
    return TrainingFamily(config, family).runs(width)


def figure_width(config: dict, family: str = "pretrain") -> int:
    return TrainingFamily(config, family).figure_width


def run_config(config: dict, family: str, name: str, data_dir: str) -> dict:
    return Plan(config).family(family).run_config(name, data_dir)


def sweep_base_run(config: dict) -> str:
    return SweepFamily(config).base_run


def sweep_runs(config: dict) -> list[str]:
    plan = Plan(config)
    return plan.sweep.runs() if plan.sweep else []


def sweeps(config: dict) -> bool:
    return Plan(config).sweep is not None


def families(config: dict) -> list[str]:
    return [f.name for f in Plan(config).training()]


def figures(config: dict) -> list[str]:
    return Plan(config).figures()


def train_device(config: dict, family: str) -> str:
    return Plan(config).family(family).device


def wants_gpu(config: dict, family: str) -> bool:
    fam = Plan(config).family(family)
    return fam.gpus(fam.runs()[0]) > 0


def train_runtime(config: dict, family: str, name: str, default: int = 30) -> int:
    return Plan(config).family(family).runtime(name, default)


def gpu_rules_env(config: dict) -> str:
    return Plan(config).gpu_rules_env()


def finetune_runs(config: dict, protocols: list[str] | None = None) -> list[str]:
    return FinetuneFamily(config).runs(protocols)


def finetune_models(config: dict) -> list[str]:
    return FinetuneFamily(config).models()


def finetune_model(config: dict, model: str) -> dict:
    return FinetuneFamily(config).model(model)


def finetune_base_models(config: dict) -> list[str]:
    return FinetuneFamily(config).base_models()


def finetune_model_label(config: dict, model: str) -> str:
    return FinetuneFamily(config).label(model)


def finetune_base_config(config: dict, model: str, data_dir: str) -> dict:
    return FinetuneBaseFamily(config).run_config(model, data_dir)


def finetune_run_config(
    config: dict, name: str, data_dir: str, base_root: str = FINETUNE_BASE_ROOT
) -> dict:
    return FinetuneFamily(config).run_config(name, data_dir, base_root)


def finetune_gpus(config: dict, model: str) -> int:
    return FinetuneFamily(config).model_gpus(model)


def finetune_base_gpus(config: dict) -> int:
    base = FinetuneBaseFamily(config)
    return base.gpus("")


def finetune_ranks(config: dict, model: str) -> int:
    return FinetuneFamily(config).ranks(finetune_run_name("all_taperln", model))


def finetune_launcher(config: dict, model: str) -> str:
    return FinetuneFamily(config).launcher(finetune_run_name("all_taperln", model))


def finetune_device(config: dict) -> str:
    return FinetuneFamily(config).device


def bench_runs(config: dict) -> dict[str, str]:
    return Plan(config).bench.runs()


def bench_inputs(config: dict) -> dict[str, str]:
    return Plan(config).bench.inputs()


def bench_csvs(config: dict) -> list[str]:
    return Plan(config).bench_csvs()


def all_targets(config: dict) -> list[str]:
    return Plan(config).all_targets()


def timed_jobs(config: dict, root: str | None = JOB_RECORDS) -> list[str]:
    return Plan(config).timed_jobs(root)
