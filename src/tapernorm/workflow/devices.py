"""GPUs a job asks for, from the device its config states: the host that plans the jobs tests no
CUDA (a cluster's login node has none). `auto` is resolved where the job runs."""

from __future__ import annotations

from ..config import ConfigError

CUDA_ENV = "../envs/tapernorm-cuda.yaml"  # relative to workflow/rules/
CPU_ENV = "../envs/tapernorm.yaml"


def job_gpus(device: str, gpus: int | None, device_key: str, gpus_key: str = "") -> int:
    """GPUs a job on `device` (auto | cpu | cuda) holds: on cuda its `gpus` (None: one); on cpu
    none; auto holds none, and auto where `gpus` asks for some is refused in one line naming the
    config keys (`device_key`, `gpus_key`) and what to write."""
    if device == "cuda":
        return 1 if gpus is None else max(1, gpus)
    if device == "auto" and gpus:
        raise ConfigError(
            f"config key {device_key}: auto holds no GPUs (it is resolved where a job runs, not "
            f"where jobs are planned), but {gpus_key} asks for {gpus}: write {device_key}: cuda"
        )
    return 0


def gpu_prefix(gpus: int, device: str, ranks: int = 1) -> str:
    """The command prefix that gives a job its GPUs on a workstation: `tapernorm gpus` (claims
    `gpus` free GPUs, Snakemake's granted resources.gpu, and shows the command only them; refuses a
    command of more `ranks` than that; tapernorm.machine.gpu_slots); "" for a job that holds none."""
    if gpus <= 0 or device == "cpu":
        return ""
    ranks_option = f" --ranks {ranks}" if ranks > 1 else ""
    return f"tapernorm gpus --device {device}{ranks_option} {gpus} --"


def rules_env(devices: list[str]) -> str:
    """The conda environment file of the rules that may hold a GPU: the CUDA build of torch when
    any of `devices` is cuda, else the CPU build."""
    return CUDA_ENV if "cuda" in devices else CPU_ENV
