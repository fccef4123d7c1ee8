"""The cluster path: a runtime per training run from the config's step-time estimates, a CUDA
environment for the rules that may hold a GPU, and analysis rules that never queue for one; the
GPU jobs' devices, GPUs and sizes on a workstation and on SLURM (slow: dry runs, and a CPU
rehearsal of the fine-tuning family under torchrun)."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tapernorm.config import ConfigError
from tapernorm.machine import job_resources as jr
from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow import finetune as wft
from tapernorm.workflow.devices import gpu_prefix
from tapernorm.workflow.names import finetune_run_name, parse_finetune_run
from tapernorm.workflow.training import SWEEP

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def _config(name: str) -> dict:
    return validate_pipeline_config(yaml.safe_load((ROOT / name).read_text()), SCHEMA)


def test_training_runtime_follows_width_and_steps():
    paper = Plan(_config("config/paper.yaml"))

    def minutes(family, run: str) -> int | None:
        return family.minutes(family.run_config(run, ""))

    by_width = {w: minutes(paper.pretrain, f"internal_aux-d{w}-s0") for w in (64, 128, 256, 512)}
    # 1.5 x steps x ms + 15 min: 500k x 31 ms, 500k x 31 ms, 750k x 27 ms, 1M x 29 ms
    assert by_width == {64: 403, 128: 403, 256: 522, 512: 740}
    assert minutes(paper.ablation, "all-d64-s0") == 31  # 20k steps x 31 ms
    assert minutes(paper.sweep, paper.sweep.runs()[0]) == 31
    ci = Plan(_config("config/ci.yaml"))  # no estimate: the profile's default
    assert minutes(ci.pretrain, "baseline-d32-s0") == 30


def test_gpu_rules_get_the_cuda_environment_when_the_config_uses_cuda():
    assert Plan(_config("config/paper.yaml")).gpu_rules_env() == "../envs/tapernorm-cuda.yaml"
    assert Plan(_config("config/ci.yaml")).gpu_rules_env() == "../envs/tapernorm.yaml"
    cuda_env = (ROOT / "workflow/envs/tapernorm-cuda.yaml").read_text()
    assert "torch==" in cuda_env and "whl/cpu" not in cuda_env


def _rules(text: str) -> dict[str, str]:
    """Rule name -> its block, for the rules of a .smk file (the figure loop's rule included)."""
    blocks = re.split(r"\n(?=(?:    )?rule\b)", text)
    out = {}
    for block in blocks:
        m = re.match(r"\s*rule\s*(\w*):", block)
        if m:
            out[m.group(1) or "figure rules"] = block
    return out


def test_analysis_rules_run_on_the_submitting_host():
    """Every rule whose command builds a table, figure, the claims, job times, the LR grid's, the
    scaling or stability study's summary or records, or the manifest is local."""
    analysis = re.compile(
        r'"tapernorm (make|table|figure|claims|job-times|manifest|report-home|lr-grid|scaling|stability)\b'
    )
    seen = 0
    for smk in (ROOT / "workflow/rules").glob("*.smk"):
        for name, block in _rules(smk.read_text()).items():
            if analysis.search(block):
                seen += 1
                assert "localrule: True" in block, f"{smk.name}: rule {name}"
            else:
                assert "localrule" not in block, f"{smk.name}: rule {name}"
    assert seen >= 8


# ---- devices, GPUs and the size of the jobs around a fine-tuned model (issue 30) ---------------------


def _auto_config(gpus: int | None = None) -> dict:
    """The paper config with finetune.train.device auto (and every model's `gpus`, if given)."""
    paper = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    paper["finetune"]["train"]["device"] = "auto"
    for spec in paper["finetune"]["models"] if gpus is not None else []:
        spec["gpus"] = gpus
    return validate_pipeline_config(paper, SCHEMA)


def test_fine_tuning_jobs_pass_the_configured_device_on():
    """auto goes to the command as auto (resolved where the job runs: a CPU rehearsal's fold
    and evaluation must not ask for cuda) and holds no GPU; auto where a model asks for GPUs is
    refused in one line that says what to write (the planning host cannot know the GPUs)."""
    with pytest.raises(ConfigError, match=r"finetune.train.device: .*write .*: cuda"):
        _auto_config()
    auto = wft.finetune(_auto_config(gpus=0))
    assert auto.device == "auto"
    assert {m: wft.model_gpus(auto.section, m) for m in ("gpt2", "gpt2-large", "gpt2-xl")} == {
        "gpt2": 0,
        "gpt2-large": 0,
        "gpt2-xl": 0,
    }
    assert wft.ranks(auto, finetune_run_name("all_taperln", "gpt2-large")) == 1
    assert gpu_prefix(2, "auto", 2) == "tapernorm gpus --device auto --ranks 2 2 --"
    paper = Plan(_config("config/paper.yaml"))
    assert paper.finetune.device == "cuda"
    assert wft.finetune(_config("config/ci.yaml")).device == "cpu"
    assert paper.family(SWEEP).device == "cuda"  # the ablation's


def test_only_jobs_holding_gpus_claim_them():
    assert gpu_prefix(0, "cuda") == ""  # a CPU job's command is left as it is
    assert gpu_prefix(1, "cpu") == ""
    assert gpu_prefix(1, "cuda") == "tapernorm gpus --device cuda 1 --"
    # Snakemake granted 1 of a gpu=4 request: the prefix says 4 ranks, `tapernorm gpus` refuses
    assert gpu_prefix(1, "cuda", 4) == "tapernorm gpus --device cuda --ranks 4 1 --"


def test_parameter_counts_of_the_fine_tuned_models():
    import torch

    from tapernorm.model import GPT, GPTConfig

    paper = _config("config/paper.yaml")
    counts = {m: jr.finetune_shape(paper, m)[0] for m in wft.models(paper["finetune"])}
    # Hugging Face's GPT2LMHeadModel counts (tied head once)
    assert counts == {
        "gpt2": 124_439_808,
        "gpt2-medium": 354_823_168,
        "gpt2-large": 774_030_080,
        "gpt2-xl": 1_557_611_200,
    }
    ci = _config("config/ci.yaml")  # the stand-in pre-trained here, counted from its config
    (model,) = wft.models(ci["finetune"])
    base = wft.finetune_base(ci).run_config(model, "data").model
    with torch.device("meta"):
        built = GPT(GPTConfig(**base.gpt_fields(jr.GPT2_VOCAB)))
    assert jr.finetune_shape(ci, model) == (built.num_params(), base.block_size)


def test_fold_eval_and_export_are_sized_by_the_model():
    """export_hf_finetune of GPT-2 XL took one CPU and the default 30 minutes; every job that
    loads a fine-tuned model whole now asks for memory and time that grow with it."""
    paper = _config("config/paper.yaml")
    sized = {
        (m, job): jr.model_job_resources(paper, m, job)
        for m in wft.models(paper["finetune"])
        for job in ("fold", "eval", "export")
    }
    for job in ("fold", "eval", "export"):
        mems = [sized[m, job]["mem_mb"] for m in wft.models(paper["finetune"])]
        minutes = [sized[m, job]["runtime"] for m in wft.models(paper["finetune"])]
        assert mems == sorted(mems) and minutes == sorted(minutes) and mems[0] < mems[-1]
    xl = 4 * 1_557_611_200 / 2**20  # MB of one fp32 copy of GPT-2 XL
    assert sized["gpt2-xl", "export"]["runtime"] > 30
    assert sized["gpt2-xl", "export"]["mem_mb"] > 3 * xl
    assert sized["gpt2-xl", "eval"]["runtime"] > sized["gpt2", "eval"]["runtime"] + 60
    # the fine-tune's own requests (4 processes) are not the single-process jobs'
    assert sized["gpt2-xl", "fold"]["mem_mb"] < wft.model(paper["finetune"], "gpt2-xl")["mem_mb"]
    ci = _config("config/ci.yaml")
    (model,) = wft.models(ci["finetune"])
    assert jr.model_job_resources(ci, model, "eval")["mem_mb"] < 1100  # a tiny model on a CPU


def test_the_sizing_uses_the_commands_defaults():
    import inspect

    from tapernorm.training.export_run import export_run
    from tapernorm.training.fold_run import fold_run

    fold = inspect.signature(fold_run).parameters
    assert (jr.FOLD_WINDOWS, jr.FOLD_EVAL_WINDOWS) == (
        fold["windows"].default,
        fold["eval_windows"].default,
    )
    assert jr.EXPORT_WINDOWS == inspect.signature(export_run).parameters["windows"].default
    rules = {
        name: block
        for smk in ("finetune.smk", "export.smk")
        for name, block in _rules((ROOT / "workflow/rules" / smk).read_text()).items()
    }
    assert "--windows" not in rules["fold_finetune"] + rules["export_hf_finetune"]
    for rule, job in (
        ("fold_finetune", "fold"),
        ("eval_finetune", "eval"),
        ("export_hf_finetune", "export"),
    ):
        assert f'mem_mb=ft_job("{job}", "mem_mb")' in rules[rule], rule
        assert f'runtime=ft_job("{job}", "runtime")' in rules[rule], rule


def test_the_hugging_face_cache_goes_to_the_work_directory_unless_set():
    assert jr.hf_cache_env({}, "/scratch/me/tapernorm/") == {
        "HF_HOME": "/scratch/me/tapernorm/data/hf_home"
    }
    for var in jr.HF_CACHE_ENVS:
        assert jr.hf_cache_env({var: "/big/disk/hf"}, "/work") == {}
    assert jr.hf_cache_env({"HF_HOME": ""}, "/work") == {"HF_HOME": "/work/data/hf_home"}


# ---- the workflow's GPU jobs (slow: Snakemake dry runs, one CPU rehearsal) -------------------------


def _snakemake(cwd: Path, *args: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture
def workdir(tmp_path) -> Path:
    """A copy of the workflow (not the results) of this checkout."""
    shutil.copy(ROOT / "Snakefile", tmp_path)
    for name in ("workflow", "config"):
        shutil.copytree(ROOT / name, tmp_path / name)
    return tmp_path


def _jobs(dry_run: str, rule: str) -> list[str]:
    """The blocks of a `snakemake -n -p` output's jobs of `rule`, each with its shell command."""
    return [b for b in re.split(r"\n(?=\[[A-Z][a-z]{2} )", dry_run) if f"rule {rule}:" in b]


def _resources(job: str) -> dict:
    line = re.search(r"^    resources: (.*)$", job, re.M)[1]
    pairs = (kv.split("=", 1) for kv in line.split(", "))
    return {k: int(v) if v.isdigit() else v for k, v in pairs}


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
    reason="snakemake-executor-plugin-slurm not installed",
)
def test_slurm_asks_for_one_node_for_torchrun_and_sized_checks(workdir):
    """GPT-2 XL's 4 GPUs on one node (torchrun --standalone), as the plugin's sbatch line says;
    its fold check, evaluations and export sized by the model."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    class Resources(dict):
        __getattr__ = dict.__getitem__

    class Job:
        def __init__(self, resources: dict):
            self.resources, self.threads = Resources(resources), 1

    out = _snakemake(
        workdir,
        "-n",
        "-p",
        "--profile",
        "workflow/profiles/slurm",
        "--configfile",
        "config/paper.yaml",
    )
    paper = _config("config/paper.yaml")
    (xl,) = [j for j in _jobs(out, "finetune") if "ftrun=all_taperln-gpt2-xl" in j]
    resources = _resources(xl)
    assert (resources["gpu"], resources["nodes"]) == (4, 1)
    params = dict.fromkeys(("run_uuid", "slurm_logfile", "comment_str", "account", "workdir"), "")
    call = get_submit_command(Job(resources), {**params, "partition": "-p gpu"})
    call += set_gres_string(Job(resources))
    assert " --nodes=1" in call and " --gpus=4" in call
    for rule, job in (("fold_finetune", "fold"), ("eval_finetune", "eval")):
        for block in _jobs(out, rule):
            model = parse_finetune_run(re.search(r"ftrun=([\w.-]+)", block)[1])[1]
            expected = jr.model_job_resources(paper, model, job)
            got = _resources(block)
            assert (got["mem_mb"], got["runtime"]) == (expected["mem_mb"], expected["runtime"])
    (export,) = [j for j in _jobs(out, "export_hf_finetune") if "gpt2-xl" in j]
    assert (
        _resources(export)["runtime"]
        == jr.model_job_resources(paper, "gpt2-xl", "export")["runtime"]
    )


@pytest.mark.slow
def test_a_workstation_gives_each_gpu_job_its_gpus(workdir):
    """The workstation profile with its GPU count: every job that holds GPUs claims them
    (`tapernorm gpus`); a gpu=4 job on a 1-GPU machine is granted 1 and so says --ranks 4 1,
    which `tapernorm gpus` refuses (test_gpu_slots.py)."""
    out = _snakemake(
        workdir,
        "-n",
        "-p",
        "--workflow-profile",
        "workflow/profiles/default",
        "--resources",
        "gpu=1",
        "--configfile",
        "config/paper.yaml",
    )
    for rule in ("train", "finetune", "fold_finetune", "eval_finetune", "bench_forward"):
        jobs = _jobs(out, rule)
        assert jobs and all(
            "Shell command: OMP_NUM_THREADS=1 tapernorm gpus --device cuda" in j for j in jobs
        ), rule
    (xl,) = [j for j in _jobs(out, "finetune") if "ftrun=vanilla-gpt2-xl" in j]
    assert _resources(xl)["gpu"] == 1
    assert "tapernorm gpus --device cuda --ranks 4 1 -- torchrun --standalone" in xl
    assert all("tapernorm gpus" not in j for j in _jobs(out, "export_hf_finetune"))


@pytest.mark.slow
def test_a_cpu_rehearsal_runs_torchrun_and_its_checks_on_the_cpu(workdir):
    """finetune.train.device cpu with gpus: 2: the fine-tune runs as two gloo processes under
    torchrun, holding no GPU, and its fold check and evaluation run on the CPU; the same with
    device auto is refused when the workflow is planned (auto holds no GPUs: write cuda)."""
    ci = yaml.safe_load((workdir / "config/ci.yaml").read_text())
    models = [{**m, "gpus": 2} for m in ci["finetune"]["models"]]
    (model,) = (m["name"] for m in models)
    target = f"results/finetune/eval/all_taperln-{model}/heldout.json"
    configs = ("--configfile", "config/ci.yaml", "cpu.yaml")
    for device in ("auto", "cpu"):
        override = {"finetune": {"models": models, "train": {"device": device}}}
        (workdir / "cpu.yaml").write_text(yaml.safe_dump(override))
        if device == "auto":
            with pytest.raises(AssertionError, match="finetune.train.device: cuda"):
                _snakemake(workdir, "-n", "-p", target, *configs)
    plan = _snakemake(workdir, "-n", "-p", target, *configs)
    (finetune,) = [j for j in _jobs(plan, "finetune") if f"all_taperln-{model}" in j]
    assert (
        "torchrun --standalone --nproc_per_node 2" in finetune and "tapernorm gpus" not in finetune
    )
    assert _resources(finetune)["gpu"] == 0
    for rule in ("fold_finetune", "eval_finetune"):
        (job,) = _jobs(plan, rule)
        assert "--device cpu" in job and "tapernorm gpus" not in job, rule
    _snakemake(workdir, "--cores", "2", target, *configs)
    run = json.loads((workdir / f"results/runs/finetune/all_taperln-{model}/eval.json").read_text())
    assert run["processes"] == 2
    scores = json.loads((workdir / target).read_text())
    assert abs(scores["folded"]["loss_diff"]) < 1e-5


def test_a_run_that_exists_is_sized_by_its_own_parameters(tmp_path):
    """The rehearsal's stand-in named gpt2-xl is estimated as GPT-2 XL while its run does not
    exist, and sized by its own config.json (n_params, block_size) once it does."""
    paper = _config("config/paper.yaml")
    run = tmp_path / "config.json"
    assert jr.run_shape(run) is None
    run.write_text(json.dumps({"n_params": 3_500_000, "model": {"block_size": 128}}))
    assert jr.run_shape(run) == (3_500_000, 128)
    estimate = jr.model_job_resources(paper, "gpt2-xl", "fold")
    own = jr.model_job_resources(paper, "gpt2-xl", "fold", jr.run_shape(run))
    assert own["mem_mb"] < 4000 < 20_000 < estimate["mem_mb"]
