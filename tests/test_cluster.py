"""The cluster path: a runtime per training run from the config's step-time estimates, a CUDA
environment for the rules that may hold a GPU, and analysis rules that never queue for one."""

import re
from pathlib import Path

import yaml

from tapernorm import pipeline as tp

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def _config(name: str) -> dict:
    return tp.validate_pipeline_config(yaml.safe_load((ROOT / name).read_text()), SCHEMA)


def test_training_runtime_follows_width_and_steps():
    paper = _config("config/paper.yaml")
    minutes = {
        width: tp.train_runtime(paper, "pretrain", f"internal_aux-d{width}-s0")
        for width in (64, 128, 256, 512)
    }
    # 1.5 x steps x ms + 15 min: 500k x 10 ms, 500k x 10 ms, 750k x 10 ms, 1M x 16 ms
    assert minutes == {64: 140, 128: 140, 256: 203, 512: 415}
    assert tp.train_runtime(paper, "ablation", "all-d64-s0") == 20  # 20k steps
    assert tp.train_runtime(paper, tp.SWEEP_FAMILY, tp.sweep_runs(paper)[0]) == 20
    ci = _config("config/ci.yaml")  # no estimate: the profile's default
    assert tp.train_runtime(ci, "pretrain", "baseline-d32-s0", default=30) == 30


def test_gpu_rules_get_the_cuda_environment_when_the_config_uses_cuda():
    assert tp.gpu_rules_env(_config("config/paper.yaml")) == "../envs/tapernorm-cuda.yaml"
    assert tp.gpu_rules_env(_config("config/ci.yaml")) == "../envs/tapernorm.yaml"
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
    """Every rule whose command builds a table, figure, the claims, job times or the manifest is local."""
    analysis = re.compile(r'"tapernorm (table|figure|claims|job-times|manifest|report-home)\b')
    seen = 0
    for smk in (ROOT / "workflow/rules").glob("*.smk"):
        for name, block in _rules(smk.read_text()).items():
            if analysis.search(block):
                seen += 1
                assert "localrule: True" in block, f"{smk.name}: rule {name}"
            else:
                assert "localrule" not in block, f"{smk.name}: rule {name}"
    assert seen >= 8
