"""Resources of the workflow's jobs that load a fine-tuned model whole (its fold check, evaluation
and stock-HF export), sized from the model's parameter count, and where the Hugging Face caches go.

Estimates from arithmetic, not measured on a GPU (tests/test_cluster.py prints the paper config's).
"""

from __future__ import annotations

import math
from pathlib import Path

from ..runtime import bookkeeping
from ..workflow import finetune as wft

# GPT-2's hub sizes (layers, width), its vocabulary and context
GPT2_SIZES = {
    "gpt2": (12, 768),
    "gpt2-medium": (24, 1024),
    "gpt2-large": (36, 1280),
    "gpt2-xl": (48, 1600),
}
GPT2_VOCAB, GPT2_CONTEXT = 50257, 1024


def gpt2_params(
    n_layer: int, n_embd: int, vocab: int = GPT2_VOCAB, context: int = GPT2_CONTEXT
) -> int:
    """Parameters of a GPT-2 with a tied head: token and position embeddings; per layer attention
    and a 4x MLP with biases and two LayerNorms (12 d^2 + 13 d); the final LayerNorm."""
    d = n_embd
    return (vocab + context) * d + n_layer * (12 * d * d + 13 * d) + 2 * d


def finetune_shape(config: dict, model: str) -> tuple[int, int]:
    """(parameters, context) of fine-tuning model `model`: the base pre-trained here from its
    config; a hub model by its GPT-2 size (hf:gpt2-xl, or a local copy named so), else the size of
    the paper row it stands for (`paper`), else GPT-2 XL's (the largest)."""
    spec = wft.model(config["finetune"], model)
    if spec["init"] == "pretrain":
        m = config["finetune"]["pretrain"]["model"]
        return gpt2_params(m["n_layer"], m["n_embd"], context=m["block_size"]), m["block_size"]
    name = spec["init"].removeprefix("hf:").rstrip("/").rsplit("/", 1)[-1]
    size = name if name in GPT2_SIZES else spec["paper"] or "gpt2-xl"
    return gpt2_params(*GPT2_SIZES[size]), GPT2_CONTEXT


# The jobs that load a fine-tuned model whole (fold_finetune, eval_finetune, export_hf_finetune),
# sized by its parameter count P and the sequences each runs through it. Estimates from this
# arithmetic, not measured on a GPU (tests/test_cluster.py prints the paper config's):
FOLD_WINDOWS, FOLD_EVAL_WINDOWS = 8, 64  # tapernorm fold's --windows and --eval-windows defaults
EXPORT_WINDOWS = 4  # tapernorm export-hf's --windows default
EVAL_ROWS = 10_000  # rows of an evaluation set without finetune.eval.max_rows (the paper's count)
MODEL_COPIES = {"fold": 4, "eval": 3, "export": 4}  # fp32 copies in host memory at once (below)
MODEL_FILES = {"fold": 3, "eval": 2, "export": 3}  # model-sized files read or written
HOST_BASE_MB = {"cpu": 1000, "gpu": 3000}  # Python and torch; on a GPU, CUDA's host side too
FLOPS = {"cpu": 2e10, "gpu": 2e13}  # one CPU thread in float32; one GPU in float32 (A100's peak)
DISK_BYTES_S = 1e8  # a slow shared filesystem


def run_shape(run_config_json: str | Path) -> tuple[int, int] | None:
    """(parameters, context) of a trained run from its config.json (n_params, model.block_size),
    or None before the run exists (then finetune_shape estimates them)."""
    path = Path(run_config_json)
    if not path.is_file():
        return None
    record = bookkeeping.read(bookkeeping.RUN_RECORD, path, need=("n_params",))
    block_size = record["model"].get("block_size")
    if not bookkeeping.NATURAL.test(block_size):
        raise bookkeeping.fail(bookkeeping.RUN_RECORD, path, "has no valid model.block_size")
    return record["n_params"], block_size


def model_job_resources(
    config: dict, model: str, job: str, shape: tuple[int, int] | None = None
) -> dict[str, int]:
    """mem_mb and runtime (minutes) of a `job` on fine-tuned model `model`: fold (the run, its
    folded and explicit-scaling exports and a load buffer in memory; 4 forward passes over
    FOLD_WINDOWS and 2 over FOLD_EVAL_WINDOWS; reads one model file, writes two), eval (one
    evaluation set, the run and its folded twin: 2 passes over its rows) or export (on one CPU
    thread: ours, the Hugging Face model, the one loaded back to verify: 2 passes over
    EXPORT_WINDOWS). Runtime: 1.5x (2 P flops a token + the files at DISK_BYTES_S) + 15 minutes,
    as a training job's. `shape`: the run's (parameters, context) where known (run_shape), else
    estimated from the config (finetune_shape: a local checkpoint named gpt2-xl counts as GPT-2
    XL, so the rehearsal's stand-ins are sized once their runs exist)."""
    params, context = shape or finetune_shape(config, model)
    ev = config["finetune"]["eval"]
    sequences, length = {
        "fold": (4 * FOLD_WINDOWS + 2 * FOLD_EVAL_WINDOWS, context),
        "eval": (2 * (ev["max_rows"] or EVAL_ROWS), ev["row_len"]),
        "export": (2 * EXPORT_WINDOWS, context),
    }[job]
    where = "gpu" if job != "export" and wft.model_gpus(config["finetune"], model) else "cpu"
    seconds = 2 * params * sequences * length / FLOPS[where]
    seconds += MODEL_FILES[job] * 4 * params / DISK_BYTES_S
    return {
        "mem_mb": math.ceil(HOST_BASE_MB[where] + MODEL_COPIES[job] * 4 * params / 2**20),
        "runtime": math.ceil(1.5 * seconds / 60) + 15,
    }


HF_CACHE_ENVS = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE")
HF_HOME_DEFAULT = "data/hf_home"  # in the work directory, beside the shards made from it


def hf_cache_env(environ: dict, workdir: str) -> dict[str, str]:
    """{"HF_HOME": WORKDIR/data/hf_home} for the workflow's jobs, unless the environment already
    says where the Hugging Face caches go (HF_HOME or one of the caches' own variables): hub
    models (up to 6 GB each) and datasets (OpenWebText, the Pile sets: far more) then land on the
    work directory's disk, not in the home directory."""
    if any(environ.get(k) for k in HF_CACHE_ENVS):
        return {}
    return {"HF_HOME": f"{workdir.rstrip('/')}/{HF_HOME_DEFAULT}"}
