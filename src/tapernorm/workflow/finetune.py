"""The GPT-2 fine-tuning families (Sec. 6.4, Tables 4 and 6): runs <protocol>-<model> in
results/runs/finetune/, and the base models pre-trained here first (init: pretrain) in
results/runs/finetune_base/<model>/: a function each; what only fine-tuning has (its models,
GPUs, ranks, evaluations) are functions of its Family or section."""

from __future__ import annotations

from functools import partial

from ..config import ConfigError
from ..variants import PROTOCOLS
from .devices import job_gpus
from .family import Family, device_of
from .names import finetune_run_name, parse_finetune_run, run_dir

FINETUNE, FINETUNE_BASE = "finetune", "finetune_base"
FINETUNE_BASE_ROOT = run_dir(FINETUNE_BASE, "").rstrip("/")


def models(section: dict) -> list[str]:
    return [m["name"] for m in section["models"]]


def model(section: dict, name: str) -> dict:
    """The `finetune.models` entry named `name`."""
    for spec in section["models"]:
        if spec["name"] == name:
            return spec
    raise ValueError(f"no model {name!r} in finetune.models")


def base_models(section: dict) -> list[str]:
    """Models that are pre-trained here first (init: pretrain)."""
    return [m["name"] for m in section["models"] if m["init"] == "pretrain"]


def model_of(family: Family, run: str) -> dict:
    """The `finetune.models` entry of fine-tuning run `run`."""
    return model(family.section, parse_finetune_run(run)[1])


def run_spec(section: dict, run: str, data_dir: str) -> dict:
    """The run config (to resolve) of fine-tuning run <protocol>-<model>: the model's Table 6
    schedule and learning rates, the protocol's taper and scale loss."""
    protocol, name = parse_finetune_run(run)
    spec, proto = model(section, name), PROTOCOLS[protocol]
    init = spec["init"] if spec["init"] != "pretrain" else f"{FINETUNE_BASE_ROOT}/{name}"
    fakeln_model, fakeln = {}, {}
    if protocol == "fakeln":  # norms removed one by one, by default over the taper window
        fakeln_model = {"norm": "fakeln"}
        fakeln = {
            "fakeln": {
                "start": spec["fakeln_start"] or spec["taper_start"],
                "end": spec["fakeln_end"] or spec["taper_end"],
            }
        }
    train = {k: v for k, v in section["train"].items()}
    train.update(
        steps=spec["steps"],
        warmup_steps=spec["warmup_steps"],
        lr=spec["lr"],
        min_lr=spec["min_lr"],
        batch_size=spec["batch_size"] or train["batch_size"],
        grad_accum=spec["grad_accum"] or train["grad_accum"],
    )
    return {
        "name": f"{FINETUNE}/{run}",
        "seed": 0,
        "meta": {
            "family": FINETUNE,
            "protocol": protocol,
            "model": name,
            "label": spec["label"] or name,
            "paper": spec["paper"],
            "init": spec["init"],
        },
        "data": {"dir": data_dir},
        "init": {"from": init},
        "model": {"style": "gpt2", "taper": proto["taper"], **fakeln_model},
        "train": train,
        "taper": {"start": spec["taper_start"], "end": spec["taper_end"], **section["taper"]},
        "anchor": {"enabled": proto["anchor"], "lam": spec["lam"]},
        "log": {**section["log"]},
        **fakeln,
    }


def finetune(config: dict) -> Family | None:
    """One run per protocol x model of `finetune`, in model-protocol order."""
    sec = config.get(FINETUNE)
    if not sec:
        return None
    runs = [finetune_run_name(p, m) for m in models(sec) for p in sec["protocols"]]
    return Family(
        FINETUNE, sec, {run: partial(run_spec, sec, run) for run in runs},
        **device_of(config, FINETUNE), rule="finetune", rule_wildcards=("run",),
        gpus_of=partial(run_gpus, sec),
    )  # fmt: skip


def runs_of(family: Family, protocols: list[str]) -> list[str]:
    """The fine-tuning runs of some protocols, in run order."""
    return [r for r in family.runs() if parse_finetune_run(r)[0] in protocols]


def model_gpus(section: dict, name: str) -> int:
    """GPUs a fine-tuning run of model `name` holds: on cuda its `gpus` (at least 1); else none
    (auto with `gpus` set is refused when the config is validated)."""
    i = models(section).index(name)
    device = section["train"]["device"]
    gpus = model(section, name)["gpus"]
    return job_gpus(device, gpus, "finetune.train.device", f"finetune.models.{i}.gpus")


def run_gpus(section: dict, run: str) -> int:
    return model_gpus(section, parse_finetune_run(run)[1])


def check_gpus(family: Family, run: str) -> int:
    """GPUs of a run's fold check and evaluation: one at most."""
    return min(1, family.gpus(run))


def ranks(family: Family, run: str) -> int:
    """Its model's `gpus` (torchrun: one process per GPU on CUDA, gloo processes on a CPU, as the
    rehearsal runs GPT-2 L and XL), or one."""
    return max(1, model_of(family, run)["gpus"])


def launcher(family: Family, run: str) -> str:
    """`tapernorm`, or for a run of several ranks torchrun starting one process per rank."""
    n = ranks(family, run)
    if n == 1:
        return "tapernorm"
    return f"torchrun --standalone --nproc_per_node {n} -m tapernorm.cli"


def eval_paths(family: Family) -> list[str]:
    """The scores of every run on every evaluation set (rule eval_finetune)."""
    sets = family.section["eval"]["sets"]
    return [f"results/finetune/eval/{r}/{s}.json" for r in family.runs() for s in sets]


def verify_paths(family: Family) -> list[str]:
    """verify.json of the folded All-TaperLN runs' fold checks (rule fold_finetune)."""
    return [f"results/finetune/fold/{r}/verify.json" for r in runs_of(family, ["all_taperln"])]


def validate_finetune(family: Family) -> None:
    ft = family.section
    if base_models(ft) and ft["pretrain"] is None:
        raise ConfigError(
            f"config key finetune.pretrain: models {base_models(ft)} have "
            "init: pretrain, so finetune.pretrain must say how to pre-train them"
        )
    names = models(ft)
    if len(set(names)) < len(names):
        raise ConfigError(f"config key finetune.models: model names repeat: {names}")
    for i, spec in enumerate(ft["models"]):
        key = f"finetune.models.{i}"
        if not spec["taper_start"] < spec["taper_end"] <= spec["steps"]:
            raise ConfigError(
                f"config key {key}: need taper_start < taper_end <= steps, got "
                f"{spec['taper_start']}, {spec['taper_end']}, {spec['steps']}"
            )
        accum = spec["grad_accum"] or ft["train"]["grad_accum"]
        if spec["gpus"] > 1 and accum < spec["gpus"]:
            raise ConfigError(
                f"config key {key}.gpus: {spec['gpus']} GPUs need grad_accum >= "
                f"{spec['gpus']} (one micro-batch per GPU and step at least), got {accum}"
            )
        model_gpus(ft, spec["name"])
    for run in family.runs():
        try:
            family.run_config(run, "data")
        except ConfigError as e:
            raise ConfigError(f"finetune run {run}: {e}") from e


def base_spec(section: dict, name: str, data_dir: str) -> dict:
    """The run config (to resolve) of gpt2-style base model `name`, pre-trained here
    (finetune.pretrain) before its fine-tuning."""
    return {
        "name": f"{FINETUNE_BASE}/{name}",
        "seed": 0,
        "meta": {"family": FINETUNE_BASE, "model": name},
        "data": {"dir": data_dir},
        "model": {"style": "gpt2", **section["model"]},
        "train": {**section["train"], "steps": section["steps"], "betas": [0.9, 0.95]},
        "log": {**section["log"]},
    }


def finetune_base(config: dict) -> Family | None:
    """The base models of `finetune` pre-trained here (init: pretrain), one run each, named by the
    model."""
    sec = config.get(FINETUNE)
    if not sec or sec.get("pretrain") is None:
        return None
    pre = sec["pretrain"]
    recipes = {name: partial(base_spec, pre, name) for name in base_models(sec)}
    return Family(
        FINETUNE_BASE, pre, recipes, **device_of(config, "finetune.pretrain"),
        rule="pretrain_finetune_base", rule_wildcards=("run",),
    )  # fmt: skip


def validate_finetune_base(family: Family) -> None:
    pre = family.section
    if pre["model"]["n_embd"] % pre["model"]["n_head"]:
        raise ConfigError("config key finetune.pretrain.model.n_embd: not divisible by n_head")
    for name in family.runs():
        family.run_config(name, "data")
