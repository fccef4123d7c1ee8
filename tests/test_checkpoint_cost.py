"""What long runs cost besides their steps: a finished run's checkpoint is pruned to what a rerun
reads (the optimizer's moments dropped; a diverged run keeps all of it), and torchrun's process
group waits long enough for rank 0 to write a GPT-2 XL checkpoint to a slow filesystem."""

import json
import logging
from datetime import timedelta

import pytest
import torch
import yaml
from conftest import blow_up_at, tiny_run
from test_cluster import ROOT, SCHEMA

from tapernorm.machine import job_resources as jr
from tapernorm.training import distributed
from tapernorm.training.checkpoint import load_tensors
from tapernorm.training.loop import train
from tapernorm.training.state import OPTIMIZER_PREFIX, PRUNED_KEY
from tapernorm.workflow import validate_pipeline_config

OUTPUTS = ("model.safetensors", "metrics.jsonl", "eval.json")


def files(run) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in OUTPUTS}


def checkpoint(run) -> tuple[dict, dict[str, torch.Tensor]]:
    ckpt = run / "ckpt"
    return json.loads((ckpt / "state.json").read_text()), load_tensors(ckpt / "state.safetensors")


def optimizer_tensors(tensors: dict) -> list[str]:
    return [k for k in tensors if k.startswith(OPTIMIZER_PREFIX)]


def test_a_finished_runs_checkpoint_keeps_only_what_a_rerun_reads(shards_dir, tmp_path, caplog):
    cfg = tiny_run(shards_dir, variant="all_aux", train={"steps": 12}, log={"ckpt_every": 5})
    run = tmp_path / "run"
    train(cfg, run, stop_after=11)  # killed after its step-10 checkpoint: kept whole
    meta, whole = checkpoint(run)
    assert optimizer_tensors(whole) and PRUNED_KEY not in meta
    size_whole = (run / "ckpt/state.safetensors").stat().st_size
    result = train(cfg, run)  # resumed, finished
    meta, kept = checkpoint(run)
    assert meta[PRUNED_KEY] is True and meta["step"] == 12 and not optimizer_tensors(kept)
    assert sorted(p.name for p in (run / "ckpt").iterdir()) == [
        "metrics.jsonl",
        "state.json",
        "state.safetensors",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no ckpt.tmp or ckpt.old left
    assert any(k.startswith("anchor.") for k in kept)  # the scale anchor's statistics
    assert (run / "ckpt/state.safetensors").stat().st_size < 0.5 * size_whole
    final = load_tensors(run / "model.safetensors")  # the weights: the finished run's
    assert {k.removeprefix("model.") for k in kept if k.startswith("model.")} == set(final)
    for name, value in final.items():
        assert torch.equal(kept[f"model.{name}"], value), name
    # a resumed-then-finished run is bit for bit the uninterrupted one (which is pruned too)
    train(cfg, tmp_path / "whole")
    assert files(run)["model.safetensors"] == files(tmp_path / "whole")["model.safetensors"]
    assert not optimizer_tensors(checkpoint(tmp_path / "whole")[1])
    # a rerun finds it finished and leaves it as it is
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with caplog.at_level(logging.INFO, logger="tapernorm"):
        assert train(cfg, run) == result
    assert "holds this run, finished: nothing to do" in caplog.text
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_forced_rerun_writes_the_same_outputs_from_the_pruned_checkpoint(
    shards_dir, tmp_path, caplog
):
    """`snakemake -f` deletes the outputs: the run resumes at its last step and writes them again
    (no step taken: the optimizer's moments are not needed)."""
    cfg = tiny_run(shards_dir, variant="internal_aux", train={"steps": 10})
    run = tmp_path / "run"
    train(cfg, run)
    reference = files(run)
    for name in OUTPUTS:
        (run / name).unlink()
    with caplog.at_level(logging.INFO, logger="tapernorm"):
        train(cfg, run)
    assert "resumed from step 10 (metrics.jsonl restored: " in caplog.text
    assert files(run) == reference


def test_a_diverged_run_keeps_its_checkpoint_whole(shards_dir, tmp_path, monkeypatch):
    blow_up_at(monkeypatch, 7)
    cfg = tiny_run(shards_dir, train={"steps": 30}, log={"every": 1, "ckpt_every": 5})
    result = train(cfg, tmp_path / "run")
    assert result["diverged"] and result["weights_step"] == 5
    meta, tensors = checkpoint(tmp_path / "run")
    assert PRUNED_KEY not in meta and optimizer_tensors(tensors)  # what a rerun trains on from


def test_a_finished_run_left_unpruned_is_pruned_by_the_next_rerun(
    shards_dir, tmp_path, monkeypatch
):
    """A run that ended between eval.json and the pruning (or before pruning existed)."""
    cfg = tiny_run(shards_dir, train={"steps": 6})
    run = tmp_path / "run"
    monkeypatch.setattr("tapernorm.training.run_dir.prune_checkpoint", lambda ckpt: False)
    train(cfg, run)
    assert optimizer_tensors(checkpoint(run)[1])
    monkeypatch.undo()
    reference = files(run)
    train(cfg, run)
    meta, tensors = checkpoint(run)
    assert meta[PRUNED_KEY] and not optimizer_tensors(tensors) and files(run) == reference


# ---- torchrun's process group ---------------------------------------------------------------------


def test_the_process_group_waits_for_a_slow_checkpoint(monkeypatch):
    """Rank 0 writes GPT-2 XL's checkpoint (fp32 weights and AdamW's two moments) and reads it
    back for its digest while the other ranks wait: at 50 MB/s that is over NCCL's default
    10 minutes, and within the group's timeout."""
    calls = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(
        distributed.dist, "init_process_group", lambda *a, **kw: calls.append((a, kw))
    )
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: None)
    with distributed.process_group(distributed.World(0, 2, 0), torch.device("cpu")):
        pass
    assert calls == [(("gloo",), {"timeout": distributed.PROCESS_GROUP_TIMEOUT})]
    paper = validate_pipeline_config(
        yaml.safe_load((ROOT / "config/paper.yaml").read_text()), SCHEMA
    )
    xl = jr.finetune_shape(paper, "gpt2-xl")[0]
    write_and_read = timedelta(seconds=2 * 3 * 4 * xl / 50e6)
    assert timedelta(minutes=10) < write_and_read < distributed.PROCESS_GROUP_TIMEOUT


@pytest.mark.parametrize("world", [distributed.World(), distributed.World(1, 2, 1)])
def test_one_process_or_a_group_made_before_is_not_joined_again(world, monkeypatch):
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: world.size > 1)
    monkeypatch.setattr(
        distributed.dist, "init_process_group", lambda *a, **kw: pytest.fail("joined again")
    )
    with distributed.process_group(world, torch.device("cpu")):
        pass
