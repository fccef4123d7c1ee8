"""A run directory: resumed only under the identity it was trained with, its record kept whole
across resumes, one writer at a time."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from conftest import tiny_run
from test_errors import one_line, run_cli
from test_train import _strip_timing, logging_to_stderr, read_metrics

from tapernorm.training.checkpoint import load_model
from tapernorm.training.identity import differences, run_identity
from tapernorm.training.lock import LOCK_NAME, RunLocked, run_lock
from tapernorm.training.loop import train
from tapernorm.training.metrics_log import read_records, restore_metrics


def same_weights(a, b) -> bool:
    return all(
        torch.equal(p, q)
        for p, q in zip(
            load_model(a).state_dict().values(), load_model(b).state_dict().values(), strict=True
        )
    )


@pytest.fixture
def own_shards(shards_dir, tmp_path):
    """A copy of the shards that a test may change in place."""
    return shutil.copytree(shards_dir, tmp_path / "data")


def short_run(shards_dir):
    return tiny_run(shards_dir, train={"steps": 14}, log={"every": 1, "ckpt_every": 10})


@pytest.fixture(scope="module")
def reference(shards_dir, tmp_path_factory):
    """An uninterrupted short_run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    train(short_run(shards_dir), out)
    return out


def test_data_changed_in_place_starts_the_run_over(own_shards, reference, tmp_path, capfd):
    cfg = short_run(own_shards)
    train(cfg, tmp_path / "run", stop_after=12)  # checkpoint at step 10
    meta = json.loads((own_shards / "meta.json").read_text())
    (own_shards / "meta.json").write_text(json.dumps({**meta, "corpus": "other"}))
    with logging_to_stderr(logging.INFO):
        train(cfg, tmp_path / "run")
    err = capfd.readouterr().err
    assert f"checkpoint in {tmp_path / 'run'} is from other data (meta.json): starting over" in err
    assert "resumed" not in err
    assert same_weights(tmp_path / "run", reference)  # (the same tokens: a fresh run's result)
    assert _strip_timing(read_metrics(tmp_path / "run")) == _strip_timing(read_metrics(reference))


def test_identity_names_each_part_that_differs(own_shards, tmp_path):
    cfg = tiny_run(own_shards)
    before = run_identity(cfg)
    assert differences(before, run_identity(cfg)) == []
    with open(own_shards / "val.bin", "r+b") as f:  # same size, other content
        f.write(b"\x01\x00")
    other = tiny_run(own_shards, train={"lr": 1e-3}, init={"from": str(tmp_path / "m")})
    assert differences(before, run_identity(other)) == [
        "another config (train.lr)",  # (init.from is compared by what it names: the third part)
        "other data (val.bin)",
        "another init checkpoint",
    ]
    assert differences({"config": cfg.to_dict()}, run_identity(cfg)) == [
        "other data (not recorded)",
        "another init checkpoint (not recorded)",
    ]


def test_retrained_init_model_starts_a_finetuning_run_over(shards_dir, tmp_path):
    base = tiny_run(shards_dir, train={"steps": 4})
    train(base, tmp_path / "base")
    ft = tiny_run(shards_dir, train={"steps": 20}, init={"from": str(tmp_path / "base")})
    train(ft, tmp_path / "ft", stop_after=12)
    retrained = tiny_run(shards_dir, train={"steps": 4}, seed=1)
    train(retrained, tmp_path / "base", force=True)  # base retrained (a finished run: --force)
    train(ft, tmp_path / "ft")
    train(ft, tmp_path / "ft_fresh")
    assert same_weights(tmp_path / "ft", tmp_path / "ft_fresh")


def test_a_restart_leaves_nothing_of_the_old_run(shards_dir, tmp_path):
    a = tiny_run(shards_dir, train={"steps": 12})
    train(a, tmp_path / "run")
    (tmp_path / "run" / ".eval.json.abcd1234.tmp").write_text("{")  # a write a kill cut short
    b = tiny_run(shards_dir, train={"steps": 12, "lr": 1e-3})
    train(b, tmp_path / "run", stop_after=5, force=True)  # B (--force: A finished), interrupted
    # before its first checkpoint
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert names == {"config.json", "metrics.jsonl"}  # no eval.json or weights of run A
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["lr"] == 1e-3
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("lost", ["missing", "short", "torn"])
def test_a_resume_restores_the_record_up_to_its_checkpoint(
    lost, shards_dir, reference, tmp_path, capfd
):
    cfg = short_run(shards_dir)
    train(cfg, tmp_path / "run", stop_after=12)  # killed after step 12, checkpoint at 10
    metrics = tmp_path / "run" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    if lost == "missing":  # Snakemake deletes a job's outputs before rerunning it
        metrics.unlink()
    elif lost == "short":
        metrics.write_text("".join(lines[:3]))
    else:  # a crash mid-write, after two records past the checkpoint
        metrics.write_text("".join(lines) + lines[0][:25])
    with logging_to_stderr(logging.INFO):
        train(cfg, tmp_path / "run")
    err = capfd.readouterr().err
    restored = lost in ("missing", "short")
    assert ("(metrics.jsonl restored: 10 records)" in err) == restored, err
    full, run = read_metrics(reference), read_metrics(tmp_path / "run")
    assert [r["step"] for r in run] == list(range(1, 15))
    assert _strip_timing(full) == _strip_timing(run)
    assert same_weights(reference, tmp_path / "run")


def test_a_finished_run_rerun_without_its_outputs_gives_them_back_bit_identical(
    shards_dir, tmp_path
):
    """What `snakemake -f` does to a finished train job: outputs deleted, the command rerun."""
    cfg = tiny_run(shards_dir, train={"steps": 12}, log={"every": 2, "ckpt_every": 5})
    train(cfg, tmp_path / "run")
    run = tmp_path / "run"
    before = {
        n: (run / n).read_bytes() for n in ("eval.json", "model.safetensors", "metrics.jsonl")
    }
    for name in before:
        (run / name).unlink()
    train(cfg, run)
    assert {n: (run / n).read_bytes() for n in before} == before


def test_records_torn_last_line_dropped_once_broken_line_elsewhere_an_error(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    with caplog.at_level(logging.WARNING, logger="tapernorm"):
        assert read_records(path) == [{"step": 1}, {"step": 2}]
    assert [r.getMessage() for r in caplog.records] == [
        f'{path}: dropped its torn last line 3 (\'{{"step": 3, "lo\'...)'
    ]
    path.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
    with pytest.raises(ValueError, match=f"{path} line 2 is not a metrics record"):
        read_records(path)
    path.write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not a metrics record .*integer 'step'"):
        read_records(path)
    ckpt = tmp_path / "ckpt"  # a checkpoint without a saved record: the live file, cut
    ckpt.mkdir()
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "lo')
    assert restore_metrics(path, ckpt, 2) is None
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_a_second_writer_is_refused_naming_the_owner_and_a_dead_ones_lock_taken_over(
    shards_dir, tmp_path, capsys
):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from tapernorm.training.lock import run_lock\n"
            "with run_lock(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(60)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        cfg = tmp_path / "run.yaml"
        cfg.write_text(
            f"data: {{dir: {shards_dir}}}\n"
            "model: {n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}\n"
            "train: {steps: 4, batch_size: 2}\nlog: {every: 2, eval_windows: 2}\n"
        )
        argv = ["train", "--config", str(cfg), "--out", str(out)]
        status, err = run_cli(argv, capsys)
        assert status == 2
        assert f"is being written by another tapernorm train (pid {holder.pid} on host " in (
            one_line(err)
        )
        assert not (out / "config.json").exists()
        os.kill(holder.pid, signal.SIGKILL)  # the owner dies: its lock file stays, its lock not
        holder.wait()
        assert (out / LOCK_NAME).exists()
        status, err = run_cli(argv, capsys)
        assert status == 0
        assert f"took over the lock of pid {holder.pid} on host " in err
        assert "(that process is gone)" in err
        assert not (out / LOCK_NAME).exists()  # released at the end
        assert json.loads((out / "eval.json").read_text())["steps"] == 4
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_one_per_directory_and_released(tmp_path):
    with run_lock(tmp_path / "a"):
        with pytest.raises(RunLocked, match=f"pid {os.getpid()} on host "):
            with run_lock(tmp_path / "a"):
                pass
        with run_lock(tmp_path / "b"):
            pass
    with run_lock(tmp_path / "a"):
        assert json.loads((tmp_path / "a" / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_train_is_bit_reproducible_at_its_default_threads(shards_dir, tmp_path, capsys):
    """At d=256 two CPU threads split sums differently from run to run; the default is 1."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        f"data: {{dir: {shards_dir}}}\n"
        "model: {n_layer: 2, n_head: 4, n_embd: 256, block_size: 32}\n"
        "train: {steps: 3, batch_size: 8, device: cpu}\nlog: {every: 1, eval_windows: 4}\n"
    )
    threads = torch.get_num_threads()
    for out in ("a", "b"):
        assert (
            run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / out)], capsys)[0] == 0
        )
    assert torch.get_num_threads() == threads  # put back after the command
    assert _strip_timing(read_metrics(tmp_path / "a")) == _strip_timing(
        read_metrics(tmp_path / "b")
    )
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (
        tmp_path / "b" / "model.safetensors"
    ).read_bytes()


def test_train_threads_default_and_option(shards_dir, tmp_path, monkeypatch, capsys):
    import tapernorm.training.loop

    seen = []
    monkeypatch.setattr(
        tapernorm.training.loop,
        "train",
        lambda cfg, out, wait, **kw: seen.append(torch.get_num_threads()) or {},
    )
    base = ["train", "--set", f"data.dir={shards_dir}", "--set", "train.steps=1"]
    base += ["--set", "train.device=cpu", "--out", str(tmp_path)]
    assert run_cli(base, capsys)[0] == 0
    assert run_cli([*base, "--threads", "2"], capsys)[0] == 0
    assert seen == [1, 2]
