"""The workflow plans without torch and decides no device on the planning host: config/paper.yaml,
planned where torch cannot even be imported (a cluster's login node without CUDA), gives every GPU
job the GPUs its config states; `import tapernorm.workflow` and planning leave torch unimported."""

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
NO_TORCH = "import sys; sys.modules['torch'] = None\n"  # `import torch` raises ImportError


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_planning_the_paper_config_imports_no_torch():
    code = (
        "import sys, yaml\n"
        "import tapernorm.workflow as wf\n"
        "cfg = wf.validate_pipeline_config(yaml.safe_load(open('config/paper.yaml')), "
        f"{SCHEMA!r})\n"
        "plan = wf.Plan(cfg)\n"
        "targets = plan.all_targets()\n"
        "[f.run_config(r, 'data') for f in plan.families() for r in f.runs()]\n"
        "print(len(targets), 'torch' in sys.modules)\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[1] == "False"


def _gpus_by_rule(dry_run: str) -> dict[str, list[tuple[str, int]]]:
    """{rule: [(wildcards, gpu)]} of a `snakemake -n` plan (gpu -1: no gpu resource)."""
    jobs: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", dry_run):
        m = re.match(r"(?:local)?rule (\S+):", block)
        if m is None:
            continue
        wildcards = re.search(r"^    wildcards: (.*)$", block, re.M)
        gpu = re.search(r"^    resources: .*\bgpu=(\d+)", block, re.M)
        jobs[m[1]].append((wildcards[1] if wildcards else "", int(gpu[1]) if gpu else -1))
    return jobs


def test_the_paper_config_planned_without_torch_asks_for_every_jobs_gpus():
    code = NO_TORCH + (
        "from snakemake.cli import main\n"
        "main(['-n', '--forceall', '--cores', '2', '--configfile', 'config/paper.yaml'])\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    jobs = _gpus_by_rule(proc.stdout + proc.stderr)
    paper = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    gpus = {m["name"]: max(1, m["gpus"]) for m in paper["finetune"]["models"]}
    assert len(jobs["train"]) == 214 and {g for _, g in jobs["train"]} == {1}
    assert len(jobs["finetune"]) == 16
    for wildcards, gpu in jobs["finetune"]:
        model = wildcards.removeprefix("ftrun=").split("-", 1)[1]
        assert gpu == gpus[model], wildcards
    assert {g for _, g in jobs["fold_finetune"] + jobs["eval_finetune"]} == {1}
    assert [g for _, g in jobs["bench_forward"] + jobs["bench_decode"]] == [1, 1]
    assert {g for _, g in jobs["fold"] + jobs["export_hf_finetune"]} == {-1}  # on the CPU


def test_gpus_follow_the_stated_device():
    import pytest

    from tapernorm.config import ConfigError
    from tapernorm.workflow.devices import job_gpus

    assert [job_gpus("cuda", None, "k"), job_gpus("cuda", 4, "k"), job_gpus("cuda", 0, "k")] == [
        1,
        4,
        1,
    ]
    assert [job_gpus("cpu", 2, "k"), job_gpus("auto", 0, "k"), job_gpus("auto", None, "k")] == [
        0,
        0,
        0,
    ]
    with pytest.raises(
        ConfigError, match=r"^config key a.device: .* but a.gpus asks for 2: write a.device: cuda$"
    ):
        job_gpus("auto", 2, "a.device", "a.gpus")
