"""torchrun data parallel (DistributedDataParallel, gloo, 2 CPU processes): the same steps, record
and weights as one process with the same global batch, for a plain and a tapered (+aux) model,
one and two micro-batches per rank (grad_accum 2 and 4: DDP's no_sync on all but the last); and
the single process trains the bare model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_run

from tapernorm.config.run import RunConfig
from tapernorm.training.checkpoint import load_model
from tapernorm.training.distributed import World, data_parallel
from tapernorm.training.run import set_up
from tapernorm.training.run_dir import RunDir

# What two processes may differ from one by, relative to max(1, |value|): each rank sums its own
# micro-batches' gradients before gloo sums the ranks', an order one process does not take, so the
# last bit can differ (measured: 1 ulp of c ~ 44, 3.8e-6; weights 6e-8; the losses 4e-7 of ~6).
# Averaging instead of summing, a missed sync or a buffer clobbered would be off by far more.
REL_TOL = 1e-6


def _train(cfg: RunConfig, out: Path, processes: int) -> None:
    """`tapernorm train` on `cfg` in `out`: one process, or `processes` under torchrun (gloo)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "tapernorm.cli", "train"]
    if processes > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc_per_node", str(processes), "-m", "tapernorm.cli", "train"]
    cmd += ["--config-json", cfg.to_json(), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _numbers(record: dict, prefix: str = "") -> dict[str, float]:
    """The numeric entries of a metrics record, nested ones as a.b (timing left out)."""
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(_numbers(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and key != "tokens_per_s":
            out[prefix + key] = float(value)
    return out


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return ((x - y).abs() / x.abs().clamp(min=1.0)).max().item()


def max_weight_diff(a: Path, b: Path) -> float:
    """The largest difference between two runs' weights and buffers, relative to max(1, |a|)."""
    sa, sb = load_model(a).state_dict(), load_model(b).state_dict()
    assert sa.keys() == sb.keys()
    return max(_rel(sa[k], sb[k]) for k in sa)


def max_record_diff(a: Path, b: Path) -> float:
    """The largest difference between two runs' metrics records (same steps, same keys), relative
    to max(1, |a|)."""
    ra, rb = _records(a), _records(b)
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    diffs = [0.0]
    for x, y in zip(ra, rb, strict=True):
        nx, ny = _numbers(x), _numbers(y)
        assert nx.keys() == ny.keys(), x["step"]
        diffs += [abs(nx[k] - ny[k]) / max(1.0, abs(nx[k])) for k in nx]
    return max(diffs)


def _config(shards_dir: Path, variant: str, accum: int) -> RunConfig:
    return tiny_run(
        shards_dir,
        name=f"ddp-{variant}",
        variant=variant,
        train={"steps": 12, "batch_size": 4, "grad_accum": accum, "device": "cpu"},
        taper={"start": 4, "end": 8},  # g = 1, 0 < g < 1 and g = 0 (gamma_tilde, then gamma unused)
        log={"every": 1, "ckpt_every": 6, "eval_windows": 8, "geometry": True},
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variant", "accum"), [("baseline", 2), ("internal_aux", 2), ("all_aux", 4)]
)
def test_two_processes_take_the_steps_of_one(shards_dir, tmp_path, variant, accum):
    cfg = _config(shards_dir, variant, accum)
    _train(cfg, tmp_path / "one", 1)
    _train(cfg, tmp_path / "two", 2)
    one, two = tmp_path / "one", tmp_path / "two"
    assert max_weight_diff(one, two) <= REL_TOL  # weights, c, the EMAs, s_tgt
    assert max_record_diff(one, two) <= REL_TOL  # losses, gradient norms, c, s_tgt, geometry
    result_one, result_two = (json.loads((d / "eval.json").read_text()) for d in (one, two))
    training = [r for r in _records(two) if "blowup" not in r]
    assert result_two["processes"] == 2 and len(training) == 12  # rank 0 alone writes
    # the blow-ups of the step each process checks (this tiny All-Taper run spikes) are recorded
    # once, as one process records them
    events = lambda run: [(r["step"], r["blowup"]["kind"]) for r in _records(run) if "blowup" in r]  # noqa: E731
    assert events(two) == events(one)
    assert abs(result_one["val_loss"] - result_two["val_loss"]) <= REL_TOL * result_one["val_loss"]


def test_one_process_trains_the_bare_model(shards_dir, tmp_path):
    """No DDP without torchrun: the single-process step is the one it always was."""
    cfg = _config(shards_dir, "internal_aux", 2)
    run = set_up(cfg, RunDir(tmp_path / "run"), World(), torch.device("cpu"))
    assert run.ddp is None and run.forward is run.model and run.ddp_hidden is None
    assert data_parallel(run.model, World(), torch.device("cpu")) is None
