"""The GPT-2 fine-tuning families (Sec. 6.4, Tables 4 and 6): runs <protocol>-<model> in
results/runs/finetune/, and the base models pre-trained here first (init: pretrain) in
results/runs/finetune_base/<model>/."""

from __future__ import annotations

from ..config import ConfigError, resolve_run_config
from ..config.run import RunConfig
from ..variants import PROTOCOLS
from .devices import job_gpus
from .family import Family
from .names import finetune_run_name, parse_finetune_run, run_dir

FINETUNE_BASE_ROOT = run_dir("finetune_base", "").rstrip("/")


class FinetuneFamily(Family):
    """One run per protocol x model of `finetune`: the model's Table 6 schedule and learning rates,
    the protocol's taper and scale loss."""

    name = "finetune"
    rule = "finetune"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.section = config[self.name]

    def runs(self, protocols: list[str] | None = None) -> list[str]:
        """Run names in model-protocol order (optionally some protocols)."""
        ft = self.section
        wanted = (
            ft["protocols"] if protocols is None else [p for p in ft["protocols"] if p in protocols]
        )
        return [finetune_run_name(p, m["name"]) for m in ft["models"] for p in wanted]

    def models(self) -> list[str]:
        return [m["name"] for m in self.section["models"]]

    def model(self, model: str) -> dict:
        """The `finetune.models` entry named `model`."""
        for spec in self.section["models"]:
            if spec["name"] == model:
                return spec
        raise ValueError(f"no model {model!r} in finetune.models")

    def base_models(self) -> list[str]:
        """Models that are pre-trained here first (init: pretrain)."""
        return [m["name"] for m in self.section["models"] if m["init"] == "pretrain"]

    def label(self, model: str) -> str:
        return self.model(model)["label"] or model

    def spec_of(self, run: str) -> dict:
        return self.model(parse_finetune_run(run)[1])

    def run_config(self, run: str, data_dir: str, base_root: str = FINETUNE_BASE_ROOT) -> RunConfig:
        protocol, model = parse_finetune_run(run)
        ft = self.section
        if protocol not in ft["protocols"] or model not in self.models():
            raise ValueError(f"run {run} is not part of the finetune family in this config")
        spec, proto = self.model(model), PROTOCOLS[protocol]
        init = spec["init"] if spec["init"] != "pretrain" else f"{base_root}/{model}"
        fakeln_model, fakeln = {}, {}
        if protocol == "fakeln":  # norms removed one by one, by default over the taper window
            fakeln_model = {"norm": "fakeln"}
            fakeln = {
                "fakeln": {
                    "start": spec["fakeln_start"] or spec["taper_start"],
                    "end": spec["fakeln_end"] or spec["taper_end"],
                }
            }
        train = {k: v for k, v in ft["train"].items()}
        train.update(
            steps=spec["steps"],
            warmup_steps=spec["warmup_steps"],
            lr=spec["lr"],
            min_lr=spec["min_lr"],
            batch_size=spec["batch_size"] or train["batch_size"],
            grad_accum=spec["grad_accum"] or train["grad_accum"],
        )
        cfg = {
            "name": f"finetune/{run}",
            "seed": 0,
            "meta": {
                "family": "finetune",
                "protocol": protocol,
                "model": model,
                "label": self.label(model),
                "paper": spec["paper"],
                "init": spec["init"],
            },
            "data": {"dir": data_dir},
            "init": {"from": init},
            "model": {"style": "gpt2", "taper": proto["taper"], **fakeln_model},
            "train": train,
            "taper": {"start": spec["taper_start"], "end": spec["taper_end"], **ft["taper"]},
            "anchor": {"enabled": proto["anchor"], "lam": spec["lam"]},
            "log": {**ft["log"]},
            **fakeln,
        }
        return resolve_run_config(cfg)

    @property
    def device(self) -> str:
        return self.section["train"]["device"]

    def model_gpus(self, model: str) -> int:
        """GPUs a fine-tuning run of `model` holds: on cuda its `gpus` (at least 1); else none (auto
        with `gpus` set is refused when the config is validated)."""
        i = self.models().index(model)
        gpus = self.model(model)["gpus"]
        return job_gpus(self.device, gpus, "finetune.train.device", f"finetune.models.{i}.gpus")

    def gpus(self, run: str) -> int:
        return self.model_gpus(parse_finetune_run(run)[1])

    def check_gpus(self, run: str) -> int:
        """GPUs of a run's fold check and evaluation: one at most."""
        return min(1, self.gpus(run))

    def ranks(self, run: str) -> int:
        """Its model's `gpus` (torchrun: one process per GPU on CUDA, gloo processes on a CPU, as
        the rehearsal runs GPT-2 L and XL), or one."""
        return max(1, self.spec_of(run)["gpus"])

    def runtime(self, run: str) -> int:
        return self.spec_of(run)["runtime"]

    def mem_mb(self, run: str) -> int:
        return self.spec_of(run)["mem_mb"]

    def record_wildcards(self, run: str) -> tuple[str, ...]:
        return (run,)

    def eval_paths(self) -> list[str]:
        """The scores of every run on every evaluation set (rule eval_finetune)."""
        sets = self.section["eval"]["sets"]
        return [f"results/finetune/eval/{r}/{s}.json" for r in self.runs() for s in sets]

    def verify_paths(self) -> list[str]:
        """verify.json of the folded All-TaperLN runs' fold checks (rule fold_finetune)."""
        return [f"results/finetune/fold/{r}/verify.json" for r in self.runs(["all_taperln"])]

    def validate(self) -> None:
        ft = self.section
        if self.base_models() and ft["pretrain"] is None:
            raise ConfigError(
                f"config key finetune.pretrain: models {self.base_models()} have "
                "init: pretrain, so finetune.pretrain must say how to pre-train them"
            )
        names = self.models()
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
            self.model_gpus(spec["name"])
        for run in self.runs():
            try:
                self.run_config(run, "data")
            except ConfigError as e:
                raise ConfigError(f"finetune run {run}: {e}") from e


class FinetuneBaseFamily(Family):
    """The gpt2-style base models pre-trained here (finetune.pretrain) before their fine-tuning."""

    name = "finetune_base"
    rule = "pretrain_finetune_base"

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.finetune = FinetuneFamily(config)
        self.section = config["finetune"]["pretrain"]

    def runs(self) -> list[str]:
        return self.finetune.base_models()

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        if run not in self.runs():
            raise ValueError(f"model {run} is not pre-trained here (its init is not 'pretrain')")
        pre = self.section
        cfg = {
            "name": f"finetune_base/{run}",
            "seed": 0,
            "meta": {"family": "finetune_base", "model": run},
            "data": {"dir": data_dir},
            "model": {"style": "gpt2", **pre["model"]},
            "train": {**pre["train"], "steps": pre["steps"], "betas": [0.9, 0.95]},
            "log": {**pre["log"]},
        }
        return resolve_run_config(cfg)

    @property
    def device(self) -> str:
        return self.section["train"]["device"]

    def gpus(self, run: str) -> int:
        return job_gpus(self.device, None, "finetune.pretrain.train.device")

    def record_wildcards(self, run: str) -> tuple[str, ...]:
        return (run,)

    def validate(self) -> None:
        pre = self.section
        if pre["model"]["n_embd"] % pre["model"]["n_head"]:
            raise ConfigError("config key finetune.pretrain.model.n_embd: not divisible by n_head")
        for model in self.runs():
            self.run_config(model, "data")
