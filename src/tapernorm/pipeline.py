"""What the Snakemake workflow needs from a pipeline config: run names, run configs, targets.

The workflow's config (config/*.yaml, validated by workflow/schemas/config.schema.yaml) describes
families of runs; each run is `results/runs/<family>/<variant>-d<width>-s<seed>/`, and each GPT-2
fine-tuning run `results/runs/finetune/<protocol>-<model>/` (its base, when pre-trained here,
`results/runs/finetune_base/<model>/`). This module turns one run name into the run config that
`tapernorm train` takes, so the rules stay pure wiring.
"""

from __future__ import annotations

import copy
import math
import re
import shlex

from .config import PROTOCOLS, resolve_run_config, taper_start


def wildcard_pattern(name: re.Pattern, **fixed: str) -> str:
    """A run-name regex as a Snakemake wildcard constraint: without its anchors, each named group
    non-capturing, or the literal of `fixed` (`protocol="all_taperln"`: only that protocol's runs)."""

    def group(m: re.Match) -> str:
        return re.escape(fixed[m[1]]) if m[1] in fixed else f"(?:{m[2]})"

    pattern = re.sub(
        r"\(\?P<(\w+)>([^()]*)\)", group, name.pattern.removeprefix("^").removesuffix("$")
    )
    if "(?P<" in pattern:
        raise ValueError(f"{name.pattern}: a named group holds a group")
    return pattern


RUN_NAME = re.compile(r"^(?P<variant>[a-z_]+)-d(?P<width>\d+)-s(?P<seed>\d+)$")


# figure 2's runs: Baseline vs Internal-Taper (+aux), and DyT with its matched (untied-head) baseline
FIG2_VARIANTS = ("baseline", "internal_aux", "dyt", "baseline_untied", "internal_aux_untied")


def run_name(variant: str, width: int, seed: int) -> str:
    return f"{variant}-d{width}-s{seed}"


def parse_run_name(name: str) -> tuple[str, int, int]:
    m = RUN_NAME.match(name)
    if m is None:
        raise ValueError(f"run name {name!r} is not <variant>-d<width>-s<seed>")
    return m["variant"], int(m["width"]), int(m["seed"])


def seeds_of(fam: dict, variant: str) -> int:
    """How many seeds (0 .. n-1) a family trains `variant` with: `seeds`, one number or a mapping
    with a `default` and per-variant counts."""
    seeds = fam["seeds"]
    return seeds if isinstance(seeds, int) else int(seeds.get(variant, seeds["default"]))


def family_runs(config: dict, family: str, width: int | None = None) -> list[str]:
    """Run names of a family (all its widths, or one), in variant-width-seed order."""
    fam = config[family]
    widths = fam["widths"] if width is None else [width]
    return [
        run_name(v, w, s) for v in fam["variants"] for w in widths for s in range(seeds_of(fam, v))
    ]


def family_seeds(config: dict) -> dict[str, dict[str, int]]:
    """{family: {variant: seeds}} of the training families of this config (the manifest's)."""
    return {
        family: {v: seeds_of(config[family], v) for v in config[family]["variants"]}
        for family in ("pretrain", "ablation")
        if config.get(family)
    }


def figure_width(config: dict, family: str = "pretrain") -> int:
    """The width whose runs figures 2-4 show: `figure_width`, else the largest."""
    fam = config[family]
    return fam.get("figure_width") or max(fam["widths"])


def steps_for(fam: dict, width: int) -> int:
    steps = fam["steps"]
    if isinstance(steps, int):
        return steps
    if width not in steps and str(width) not in steps:
        raise ValueError(f"no steps given for width {width} (steps: {steps})")
    return int(steps.get(width, steps.get(str(width))))


def run_config(config: dict, family: str, name: str, data_dir: str) -> dict:
    """The resolved `tapernorm train` config of run `name` in `family` of the pipeline config."""
    if family == SWEEP_FAMILY:
        return sweep_run_config(config, name, data_dir)
    variant, width, seed = parse_run_name(name)
    fam = config[family]
    if (
        variant not in fam["variants"]
        or width not in fam["widths"]
        or seed >= seeds_of(fam, variant)
    ):
        raise ValueError(f"run {name} is not part of the {family} family in this config")
    steps = steps_for(fam, width)
    train = copy.deepcopy(fam["train"])
    warmup_frac = train.pop("warmup_frac")
    train.update(steps=steps, warmup_steps=max(1, round(warmup_frac * steps)))
    taper = copy.deepcopy(fam["taper"])
    start_frac, end_frac = taper.pop("start_frac"), taper.pop("end_frac")
    start = None if start_frac is None else max(1, round(start_frac * steps))
    taper.update(start=taper_start(start, train["warmup_steps"]), end=round(end_frac * steps))
    cfg = {
        "name": f"{family}/{name}",
        "seed": seed,
        "variant": variant,
        "data": {"dir": data_dir, "train_tokens": fam.get("train_tokens")},
        "model": {**fam["model"], "n_embd": width},
        "train": train,
        "taper": taper,
        "anchor": copy.deepcopy(fam["anchor"]),
        "log": copy.deepcopy(fam["log"]),
    }
    return resolve_run_config(cfg)


# ---- the scale loss's dose-response (table_anchor, fig7) --------------------------------------------

SWEEP_FAMILY = "anchor_sweep"
SWEEP_RUN_NAME = re.compile(r"^(?P<form>eq5|relative)-lam(?P<lam>[0-9][0-9.e+-]*)$")


def sweep_run_name(form: str, lam: float) -> str:
    return f"{form}-lam{lam:g}"


def sweep_base_run(config: dict) -> str:
    """The ablation's All-Taper (+aux) run that every sweep point retrains at another lambda."""
    return run_name("all_aux", figure_width(config, "ablation"), 0)


def sweep_runs(config: dict) -> list[str]:
    """Sweep points trained in the anchor_sweep family: every (form, lambda) listed, except the one
    the ablation's all_aux run already is."""
    sweep, anchor = config.get(SWEEP_FAMILY), (config.get("ablation") or {}).get("anchor", {})
    if not sweep:
        return []
    own = (anchor.get("form", "eq5"), anchor.get("lam"))
    return [
        sweep_run_name(form, lam)
        for form in ("eq5", "relative")
        for lam in sweep[form]
        if (form, lam) != own
    ]


def sweep_run_config(config: dict, name: str, data_dir: str) -> dict:
    """The ablation's all_aux run config with the sweep point's scale-loss form and weight."""
    m = SWEEP_RUN_NAME.match(name)
    if m is None or name not in sweep_runs(config):
        raise ValueError(f"run {name} is not part of the {SWEEP_FAMILY} family in this config")
    cfg = run_config(config, "ablation", sweep_base_run(config), data_dir)
    cfg.update(name=f"{SWEEP_FAMILY}/{name}")
    cfg["anchor"].update(form=m["form"], lam=float(m["lam"]))
    return resolve_run_config(cfg)


def check_config_files(paths: list[str], schema_path: str) -> None:
    """The workflow's config files (workflow.configfiles) as Snakemake read them: YAML syntax and
    duplicate keys (naming the line), then top-level keys that the schema knows, naming the file.
    A file with none of them is most likely a target written after --configfile, which reads every
    path after it as a config file: the error says so."""
    import yaml

    from .config import ConfigError, check_yaml_files, config_text, yaml_load

    check_yaml_files(paths)
    with open(schema_path) as f:
        allowed = list(yaml.safe_load(f)["properties"])
    for path in paths:
        data = yaml_load(config_text(path), f"config file {path}")
        keys = [str(k) for k in data] if isinstance(data, dict) else []
        unknown = [k for k in keys if k not in allowed]
        if data is not None and (not keys or len(unknown) == len(keys)):
            raise ConfigError(
                f"config file {path}: not a workflow config (top-level keys {keys[:4]}, none of "
                f"{', '.join(allowed)}); a target written after --configfile is read as one more "
                "config file: put targets first (snakemake --cores all TARGET --configfile FILE)"
            )
        if unknown:
            raise ConfigError(
                f"config file {path}: config key {unknown[0]}: unknown key; allowed: "
                f"{', '.join(allowed)}"
            )


def validate_pipeline_config(config: dict, schema_path: str) -> dict:
    """Validate the workflow config against its schema (filling defaults) and check what a schema
    can't: every run of every family resolves to a valid run config. Raises ConfigError naming the
    key; returns the completed config."""
    import yaml

    from .config import ConfigError, validate

    with open(schema_path) as f:
        schema = yaml.safe_load(f)
    config = copy.deepcopy(config)
    for family in ("pretrain", "ablation"):  # YAML gives int keys for {64: 500000}; JSON wants str
        fam = config.get(family)
        for key in ("steps", "gpu_step_ms"):
            by_width = fam.get(key) if isinstance(fam, dict) else None
            if isinstance(by_width, dict):
                config[family][key] = {str(k): v for k, v in by_width.items()}
    config = validate(config, schema)
    for family in ("pretrain", "ablation"):
        fam = config.get(family)
        if fam is None:
            continue
        for width in fam["widths"]:
            if width % fam["model"]["n_head"]:
                raise ConfigError(
                    f"config key {family}.widths: {width} is not divisible by "
                    f"{family}.model.n_head={fam['model']['n_head']}"
                )
            try:
                steps_for(fam, width)
            except ValueError as e:
                raise ConfigError(f"config key {family}.steps: {e}") from e
        if isinstance(fam["seeds"], dict):
            if "default" not in fam["seeds"]:
                raise ConfigError(f"config key {family}.seeds: a mapping needs a 'default' count")
            unknown = sorted(set(fam["seeds"]) - {"default", *fam["variants"]})
            if unknown:
                raise ConfigError(f"config key {family}.seeds: {unknown} not in {family}.variants")
        if fam["figure_width"] is not None and fam["figure_width"] not in fam["widths"]:
            raise ConfigError(f"config key {family}.figure_width: not one of {family}.widths")
        for name in family_runs(config, family):
            try:
                run_config(config, family, name, "data")
            except ConfigError as e:
                raise ConfigError(f"{family} run {name}: {e}") from e
    if config.get(SWEEP_FAMILY) is not None:
        ablation = config.get("ablation")
        lacking = [
            v for v in ("baseline", "all_aux") if v not in (ablation or {}).get("variants", [])
        ]
        if lacking:
            raise ConfigError(
                f"config key {SWEEP_FAMILY}: it retrains the ablation's all_aux run and compares "
                f"with its baseline, but ablation.variants lacks {lacking}"
            )
    missing = set(config["fold"]["variants"]) - set(config["pretrain"]["variants"])
    if missing:
        raise ConfigError(f"config key fold.variants: {sorted(missing)} not in pretrain.variants")
    if "dyt" in config["fold"]["variants"]:
        raise ConfigError("config key fold.variants: dyt does not fold (tanh is not linear)")
    if config.get("finetune") is not None:
        _validate_finetune(config)
    if config.get("bench") is not None:
        _validate_bench(config)
    return config


def wants_gpu(config: dict, family: str) -> bool:
    """Whether this family's training jobs run on a GPU (and so hold the `gpu` resource)."""
    trains_like = (
        "ablation" if family == SWEEP_FAMILY else family
    )  # the sweep retrains ablation runs
    return device_is_gpu(config[trains_like]["train"]["device"])


def train_device(config: dict, family: str) -> str:
    """The configured train.device (auto | cpu | cuda) of a training family's runs."""
    return config["ablation" if family == SWEEP_FAMILY else family]["train"]["device"]


def gpu_prefix(gpus: int, device: str, ranks: int = 1) -> str:
    """The command prefix that gives a job its GPUs on a workstation: `tapernorm gpus` (claims
    `gpus` free GPUs, Snakemake's granted resources.gpu, and shows the command only them; refuses a
    command of more `ranks` than that; tapernorm.gpu_slots); "" for a job that holds none."""
    if gpus <= 0 or device == "cpu":
        return ""
    ranks_option = f" --ranks {ranks}" if ranks > 1 else ""
    return f"tapernorm gpus --device {device}{ranks_option} {gpus} --"


def train_runtime(config: dict, family: str, name: str, default: int = 30) -> int:
    """Minutes a training job asks a cluster for: 1.5x its steps at its family's `gpu_step_ms`
    for its width, plus 15 minutes of set-up and evaluation; `default` without an estimate."""
    fam = config["ablation" if family == SWEEP_FAMILY else family]
    run = run_config(config, family, name, "")
    estimates, width = fam.get("gpu_step_ms") or {}, run["model"]["n_embd"]
    step_ms = estimates.get(width, estimates.get(str(width)))
    if step_ms is None:
        return default
    return math.ceil(1.5 * run["train"]["steps"] * step_ms / 60_000) + 15


def gpu_rules_env(config: dict) -> str:
    """The conda environment file (relative to workflow/rules/) of the rules that may hold a GPU
    (training, fine-tuning, their evaluation and folding, benchmarks): the CUDA build of torch when
    the config trains, fine-tunes or benchmarks on a GPU, else the CPU build."""
    devices = [config[f]["train"]["device"] for f in ("pretrain", "ablation") if config.get(f)]
    if config.get("finetune"):
        devices.append(config["finetune"]["train"]["device"])
    if config.get("bench"):
        devices.append(config["bench"]["device"])
    gpu = any(device_is_gpu(d) for d in devices)
    return "../envs/tapernorm-cuda.yaml" if gpu else "../envs/tapernorm.yaml"


def device_is_gpu(device: str) -> bool:
    """Whether train.device `device` (auto | cpu | cuda) means a GPU on this machine."""
    if device != "auto":
        return device == "cuda"
    import torch

    return torch.cuda.is_available()


def prepare_data_args(data: dict) -> str:
    """The `tapernorm prepare-data` arguments for the config's `data` section."""
    args = [f"--corpus {data['corpus']}", f"--tokenizer {data['tokenizer']}"]
    if data["tokenizer"] == "sentencepiece":
        args.append(f"--vocab-size {data['vocab_size']}")
        if not data["byte_fallback"]:
            args.append("--no-byte-fallback")
    if data["corpus"] == "tinystories":
        args.append(f"--tinystories {data['tinystories']}")
    for key in ("local_path", "max_docs", "tokenizer_chars"):
        if data[key] is not None:
            args.append(f"--{key.replace('_', '-')} {shlex.quote(str(data[key]))}")
    return " ".join(args)


# ---- the GPT-2 fine-tuning family (Sec. 6.4, Tables 4 and 6) -----------------------------------------

FINETUNE_MODEL_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")  # the schema's finetune.models name
FINETUNE_RUN_NAME = re.compile(
    rf"^(?P<protocol>[a-z_]+)-(?P<model>{wildcard_pattern(FINETUNE_MODEL_NAME)})$"
)
FINETUNE_BASE_ROOT = "results/runs/finetune_base"


def finetune_run_name(protocol: str, model: str) -> str:
    return f"{protocol}-{model}"


def parse_finetune_run(name: str) -> tuple[str, str]:
    """("all_taperln", "gpt2-medium") from "all_taperln-gpt2-medium"."""
    m = FINETUNE_RUN_NAME.match(name)
    if m is None:
        raise ValueError(f"fine-tuning run name {name!r} is not <protocol>-<model>")
    return m["protocol"], m["model"]


def finetune_runs(config: dict, protocols: list[str] | None = None) -> list[str]:
    """Run names of the fine-tuning family, in model-protocol order (optionally some protocols)."""
    ft = config["finetune"]
    wanted = (
        ft["protocols"] if protocols is None else [p for p in ft["protocols"] if p in protocols]
    )
    return [finetune_run_name(p, m["name"]) for m in ft["models"] for p in wanted]


def finetune_models(config: dict) -> list[str]:
    return [m["name"] for m in config["finetune"]["models"]]


def finetune_model(config: dict, model: str) -> dict:
    """The `finetune.models` entry named `model`."""
    for spec in config["finetune"]["models"]:
        if spec["name"] == model:
            return spec
    raise ValueError(f"no model {model!r} in finetune.models")


def finetune_base_models(config: dict) -> list[str]:
    """Models that are pre-trained here first (init: pretrain)."""
    return [m["name"] for m in config["finetune"]["models"] if m["init"] == "pretrain"]


def finetune_model_label(config: dict, model: str) -> str:
    return finetune_model(config, model)["label"] or model


def finetune_base_config(config: dict, model: str, data_dir: str) -> dict:
    """The resolved run config that pre-trains the gpt2-style base of `model` on `data_dir`."""
    ft = config["finetune"]
    if model not in finetune_base_models(config):
        raise ValueError(f"model {model} is not pre-trained here (its init is not 'pretrain')")
    pre = ft["pretrain"]
    cfg = {
        "name": f"finetune_base/{model}",
        "seed": 0,
        "meta": {"family": "finetune_base", "model": model},
        "data": {"dir": data_dir},
        "model": {"style": "gpt2", **pre["model"]},
        "train": {**pre["train"], "steps": pre["steps"], "betas": [0.9, 0.95]},
        "log": {**pre["log"]},
    }
    return resolve_run_config(cfg)


def finetune_run_config(
    config: dict, name: str, data_dir: str, base_root: str = FINETUNE_BASE_ROOT
) -> dict:
    """The resolved `tapernorm train` config of fine-tuning run `name` (<protocol>-<model>):
    the model's Table 6 schedule and learning rates, the protocol's taper and scale loss."""
    protocol, model = parse_finetune_run(name)
    ft = config["finetune"]
    if protocol not in ft["protocols"] or model not in finetune_models(config):
        raise ValueError(f"run {name} is not part of the finetune family in this config")
    spec, proto = finetune_model(config, model), PROTOCOLS[protocol]
    init = spec["init"] if spec["init"] != "pretrain" else f"{base_root}/{model}"
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
        "name": f"finetune/{name}",
        "seed": 0,
        "meta": {
            "family": "finetune",
            "protocol": protocol,
            "model": model,
            "label": finetune_model_label(config, model),
            "paper": spec["paper"],
            "init": spec["init"],
        },
        "data": {"dir": data_dir},
        "init": {"from": init},
        "model": {"style": "gpt2", "taper": proto["taper"]},
        "train": train,
        "taper": {"start": spec["taper_start"], "end": spec["taper_end"], **ft["taper"]},
        "anchor": {"enabled": proto["anchor"], "lam": spec["lam"]},
        "log": {**ft["log"]},
    }
    if protocol == "fakeln":  # norms removed one by one, by default over the taper window
        cfg["model"]["norm"] = "fakeln"
        cfg["fakeln"] = {
            "start": spec["fakeln_start"] or spec["taper_start"],
            "end": spec["fakeln_end"] or spec["taper_end"],
        }
    return resolve_run_config(cfg)


def finetune_gpus(config: dict, model: str) -> int:
    """GPUs a fine-tuning run of `model` holds: its `gpus` (at least 1) if train.device is cuda,
    or auto with `gpus` set or a GPU here; else 0."""
    spec, device = finetune_model(config, model), config["finetune"]["train"]["device"]
    if device == "cpu" or (device == "auto" and not spec["gpus"] and not device_is_gpu(device)):
        return 0
    return max(1, spec["gpus"])


def finetune_base_gpus(config: dict) -> int:
    """GPUs the pre-training of a fine-tuning base model holds (0 or 1)."""
    return int(device_is_gpu(config["finetune"]["pretrain"]["train"]["device"]))


def finetune_ranks(config: dict, model: str) -> int:
    """Processes of a fine-tuning run of `model`: its `gpus` (torchrun: one per GPU on CUDA, gloo
    processes on a CPU, as the rehearsal runs GPT-2 L and XL), or one."""
    return max(1, finetune_model(config, model)["gpus"])


def finetune_launcher(config: dict, model: str) -> str:
    """`tapernorm`, or for a run of several ranks torchrun starting one process per rank."""
    n = finetune_ranks(config, model)
    if n == 1:
        return "tapernorm"
    return f"torchrun --standalone --nproc_per_node {n} -m tapernorm.cli"


def finetune_device(config: dict) -> str:
    """The configured device of the fine-tuning runs, their fold checks and evaluations: auto is
    passed on as it is and resolved where each job runs."""
    return config["finetune"]["train"]["device"]


def finetune_prepare_args(config: dict) -> str:
    """The `tapernorm prepare-data` arguments of the fine-tuning corpus (GPT-2 BPE)."""
    data = config["finetune"]["data"]
    args = [f"--corpus {data['corpus']}", "--tokenizer gpt2"]
    if data["corpus"] == "tinystories":
        args.append(f"--tinystories {data['tinystories']}")
    for key in ("local_path", "max_docs"):
        if data[key] is not None:
            args.append(f"--{key.replace('_', '-')} {shlex.quote(str(data[key]))}")
    return " ".join(args)


def prepare_eval_args(config: dict, eval_set: str, shards_dir: str) -> str:
    """The `tapernorm prepare-eval` arguments of one evaluation set."""
    ev = config["finetune"]["eval"]
    args = [f"--set {eval_set}", f"--row-len {ev['row_len']}"]
    args.append(f"--max-rows {'all' if ev['max_rows'] is None else ev['max_rows']}")
    if eval_set == "heldout":
        args.append(f"--shards {shlex.quote(shards_dir)}")
    elif ev["local_paths"].get(eval_set):
        args.append(f"--local-path {shlex.quote(ev['local_paths'][eval_set])}")
    return " ".join(args)


def _validate_finetune(config: dict) -> None:
    from .config import ConfigError

    ft = config["finetune"]
    if finetune_base_models(config) and ft["pretrain"] is None:
        raise ConfigError(
            f"config key finetune.pretrain: models {finetune_base_models(config)} have "
            "init: pretrain, so finetune.pretrain must say how to pre-train them"
        )
    names = finetune_models(config)
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
                f"config key {key}.gpus: {spec['gpus']} GPUs need grad_accum >= {spec['gpus']} "
                f"(one micro-batch per GPU and step at least), got {accum}"
            )
    if ft["pretrain"] is not None:
        pre = ft["pretrain"]
        if pre["model"]["n_embd"] % pre["model"]["n_head"]:
            raise ConfigError("config key finetune.pretrain.model.n_embd: not divisible by n_head")
        for model in finetune_base_models(config):
            finetune_base_config(config, model, "data")
    for name in finetune_runs(config):
        try:
            finetune_run_config(config, name, "data")
        except ConfigError as e:
            raise ConfigError(f"finetune run {name}: {e}") from e


# ---- inference benchmarks (Table 3, the decode table, fig5, claim 7) --------------------------------

BENCH_VARIANTS = ("baseline", "internal_aux")  # timed: the baseline, and the tapered run exported
BENCH_OPTIONAL = ("dyt",)  # timed too when pretrain.variants has it


def bench_runs(config: dict) -> dict[str, str]:
    """The pretrain runs the benchmarks time: each of BENCH_VARIANTS, and of BENCH_OPTIONAL those
    in pretrain.variants, at the figure width, seed 0."""
    width = figure_width(config)
    wanted = [*BENCH_VARIANTS, *(v for v in BENCH_OPTIONAL if v in config["pretrain"]["variants"])]
    return {variant: run_name(variant, width, 0) for variant in wanted}


def bench_inputs(config: dict) -> dict[str, str]:
    """What the benchmark rules wait for: the timed runs' eval.json and the tapered run's fold
    verification (a failed one stops the benchmarks; one skipped because the run diverged does
    not: `tapernorm bench` reads each run's eval.json and times the others); nothing with
    bench.random."""
    if config["bench"].get("random"):
        return {}
    runs = _bench_run_dirs(config)
    inputs = {
        "baseline": f"{runs['baseline']}/eval.json",
        "tapered": f"{runs['internal_aux']}/eval.json",
        "verify": f"results/fold/{runs['internal_aux'].rsplit('/', 1)[1]}/verify.json",
    }
    if "dyt" in runs:
        inputs["dyt"] = f"{runs['dyt']}/eval.json"
    return inputs


def _bench_run_dirs(config: dict) -> dict[str, str]:
    return {v: f"results/runs/pretrain/{name}" for v, name in bench_runs(config).items()}


def bench_model_args(config: dict) -> str:
    """The model arguments of `tapernorm bench forward|decode`: --random dWIDTH, or the run
    directories of bench_runs."""
    if config["bench"].get("random"):
        return f"--random {config['bench']['random']}"
    runs = _bench_run_dirs(config)
    args = f"--baseline {runs['baseline']} --tapered {runs['internal_aux']}"
    return args + (f" --dyt {runs['dyt']}" if "dyt" in runs else "")


def bench_args(config: dict, which: str) -> str:
    """The grid arguments of `tapernorm bench forward|decode` from the config's `bench` section."""
    b, part = config["bench"], config["bench"][which]
    args = [f"--device {b['device']}", f"--dtype {b['dtype']}"]
    args.append("--batch-sizes " + " ".join(map(str, part["batch_sizes"])))
    if which == "forward":
        args.append("--seq-lens " + " ".join(map(str, part["seq_lens"])))
    else:
        args.append("--prompt-lens " + " ".join(map(str, part["prompt_lens"])))
        args += [f"--new-tokens {part['new_tokens']}", "--modes " + " ".join(part["modes"])]
    args += [f"--warmup {part['warmup']}", f"--repeats {part['repeats']}"]
    return " ".join(args)


def _validate_bench(config: dict) -> None:
    from .config import ConfigError

    missing = [v for v in BENCH_VARIANTS if v not in config["pretrain"]["variants"]]
    if missing and not config["bench"].get("random"):
        raise ConfigError(
            f"config key bench: the benchmarks time pretrain runs {list(BENCH_VARIANTS)}, but "
            f"pretrain.variants lacks {missing} (set bench: null to skip the benchmarks)"
        )
    model, b = config["pretrain"]["model"], config["bench"]
    if model["style"] == "gpt2" and not b.get("random"):  # learned positions: no longer context
        block = model["block_size"]
        if max(b["forward"]["seq_lens"]) > block:
            raise ConfigError(f"config key bench.forward.seq_lens: longer than block_size {block}")
        if max(b["decode"]["prompt_lens"]) + b["decode"]["new_tokens"] > block:
            raise ConfigError(
                f"config key bench.decode: prompt_lens + new_tokens exceed block_size {block}"
            )


# ---- the workflow's wiring: wildcard constraints, targets, job records ------------------------------

# Snakemake wildcard constraints, from the run-name patterns above
RUN_WILDCARD = f"{wildcard_pattern(RUN_NAME)}|{wildcard_pattern(SWEEP_RUN_NAME)}"  # {run}
FINETUNE_RUN_WILDCARD = wildcard_pattern(FINETUNE_RUN_NAME)  # {ftrun}
FOLDED_FINETUNE_RUN_WILDCARD = wildcard_pattern(FINETUNE_RUN_NAME, protocol="all_taperln")
FINETUNE_MODEL_WILDCARD = wildcard_pattern(FINETUNE_MODEL_NAME)  # {ftmodel}

TABLE_FILES = ("csv", "md", "tex", "html")  # html: what the report shows
FIGURE_FILES = ("pdf", "png")  # png: what the report shows
PRETRAIN_TABLES = (1, 2, 5)  # of the pre-training runs (rules table1, table2, table5)
FINETUNE_TABLES = (4, 6)  # of the GPT-2 fine-tuning family (rules table4, table6)
# Snakemake's job records (benchmark:) of the long jobs, <rule>/<wildcards>.tsv; table job_times
JOB_RECORDS = "results/job_records"
BENCH_KINDS = ("forward", "decode")  # results/bench/<kind>.csv of rule bench_<kind>
MANIFEST = "results/manifest.json"  # rule manifest: the run's last job
REPORT_HOME = "results/report/home.rst"  # rule report_home: the report's home page after a run


def sweeps(config: dict) -> bool:
    """Whether the config trains the scale loss's dose-response (the anchor_sweep family)."""
    return bool(config.get("ablation") and config.get(SWEEP_FAMILY))


def families(config: dict) -> list[str]:
    """The training families of this config, which the rule train's {family} may be."""
    return (
        ["pretrain"]
        + (["ablation"] if config.get("ablation") else [])
        + ([SWEEP_FAMILY] if sweeps(config) else [])
    )


def figures(config: dict) -> list[str]:
    """The figures this config draws (each its rule and caption, workflow/report/<name>.rst)."""
    names = ["fig1_gate_schedule", "fig2_train_loss", "fig3_logit_norm", "fig4_grad_norms"]
    if config.get("ablation"):
        names += ["fig4b_ablation_grad_norms", "fig6_scale_anchor"]
    if sweeps(config):
        names.append("fig7_anchor_sweep")
    return names


def bench_csvs(config: dict) -> list[str]:
    """The inference benchmarks' measurements (none with bench: null)."""
    return [f"results/bench/{kind}.csv" for kind in BENCH_KINDS] if config.get("bench") else []


def all_targets(config: dict) -> list[str]:
    """Every file the workflow's default target (rule all) builds for this config."""

    def tables(*names: str) -> list[str]:
        return [f"results/tables/{t}.{ext}" for t in names for ext in TABLE_FILES]

    targets = [f"figures/{name}.{ext}" for name in figures(config) for ext in FIGURE_FILES]
    targets += tables(*(f"table{n}" for n in PRETRAIN_TABLES))
    targets += tables("table_anchor") if sweeps(config) else []
    if config.get("finetune"):
        targets += tables(*(f"table{n}" for n in FINETUNE_TABLES))
        exported = finetune_runs(config, ["all_taperln"])
        targets += [f"results/export/{run}/verify.json" for run in exported]
    if config.get("bench"):
        targets += tables("table3", "table_decode")
        targets += [f"figures/fig5_decode_speedup.{ext}" for ext in FIGURE_FILES]
    claims = ["results/claims.md", "results/claims.json", "results/claims.html", REPORT_HOME]
    return targets + claims + tables("job_times") + [MANIFEST]


def job_record(rule: str, *wildcards: str, root: str | None = JOB_RECORDS) -> str:
    """The job record (benchmark: file) of a job of `rule`: <root>/<rule>/<wildcards...>.tsv, or
    <root>/<rule>.tsv for a rule without wildcards; relative to JOB_RECORDS with root=None."""
    name = "/".join((rule, *wildcards)) + ".tsv"
    return name if root is None else f"{root}/{name}"


def timed_jobs(config: dict, root: str | None = JOB_RECORDS) -> list[str]:
    """Job records of this config's jobs that keep one (training, fine-tuning, the inference
    benchmarks), under `root` (None: relative to JOB_RECORDS, as `tapernorm job-times` takes them)."""
    records = []
    for family in families(config):
        names = sweep_runs(config) if family == SWEEP_FAMILY else family_runs(config, family)
        records += [job_record("train", family, name, root=root) for name in names]
    if config.get("finetune"):
        for model in finetune_base_models(config):
            records.append(job_record("pretrain_finetune_base", model, root=root))
        records += [job_record("finetune", run, root=root) for run in finetune_runs(config)]
    if config.get("bench"):
        records += [job_record(f"bench_{kind}", root=root) for kind in BENCH_KINDS]
    return records
