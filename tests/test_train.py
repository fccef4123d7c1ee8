"""The training loop: learning, schedules, determinism, resume, divergence, errors."""

import json
import logging
import subprocess
import sys
from contextlib import contextmanager

import pytest
import torch
from conftest import blow_up_at, tiny_run

from tapernorm.data import TokenShards
from tapernorm.model import GPT, GPTConfig
from tapernorm.schedules import gate_at, lr_at
from tapernorm.training.cadence import Cadence
from tapernorm.training.checkpoint import CheckpointError, load_model, load_tensors
from tapernorm.training.evaluation import evaluate
from tapernorm.training.loop import recorded_event, train


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_training_lowers_validation_loss_and_follows_schedules(shards_dir, tmp_path):
    cfg = tiny_run(shards_dir, variant="internal_aux", train={"steps": 40})
    torch.manual_seed(cfg.seed)
    shards = TokenShards(str(shards_dir))
    init = GPT(GPTConfig(**cfg.model.gpt_fields(shards.vocab_size)))
    before = evaluate(init, shards, 16, 16)
    result = train(cfg, tmp_path / "run")
    assert not result["diverged"]
    assert result["val_loss"] < before - 0.5
    rows = [r for r in read_metrics(tmp_path / "run") if "gate" in r]
    assert [r["step"] for r in rows] == list(range(1, 41))
    for r in rows:
        assert r["gate"] == pytest.approx(gate_at(r["step"], 3, 40))
        assert r["lr"] == pytest.approx(lr_at(r["step"], 3e-3, 3, 40))
        for key in (
            "loss",
            "aux_loss",
            "logit_norm",
            "grad_attn_qkv",
            "grad_mlp_out",
            "tokens_per_s",
        ):
            assert key in r
    start = [r for r in rows if "c" in r]
    assert len(start) == 1 and start[0]["step"] == 4  # first step with g < 1
    assert set(start[0]["c"]) == {f"blocks.{i}.ln_{j}" for i in range(2) for j in (1, 2)}
    assert start[0]["s_tgt"] > 0
    assert all(r["aux_loss"] == 0 for r in rows if r["step"] < 4)
    assert rows[-1]["gate"] == 0.0
    saved = load_model(tmp_path / "run")
    assert all(
        float(m.c) == start[0]["c"][n] for n, m in saved.named_modules() if n in start[0]["c"]
    )


def test_the_cadence_says_what_acts_at_each_step():
    cadence = Cadence(steps=12, log_every=4, eval_every=6, ckpt_every=5, stop_after=7)
    acts = {k: cadence.at(k, events=k == 3) for k in range(1, 13)}
    assert [k for k, a in acts.items() if a.logged] == [1, 3, 4, 8, 12]  # 3: an event
    assert [k for k, a in acts.items() if a.evaluated] == [6]  # (12's is the final one)
    assert [k for k, a in acts.items() if a.checkpointed] == [5, 10, 12]
    assert [k for k, a in acts.items() if a.stopped] == list(range(7, 13))
    assert [k for k, a in acts.items() if not a.boundary] == [2]
    assert not Cadence(12, 4, 0, 5).at(6, events=False).evaluated  # eval_every 0: none
    assert not recorded_event({"step": 3, "lr": 1e-3, "gate": 0.5})
    assert recorded_event({"step": 3, "lr": 1e-3, "gate": 0.5, "c": {}})
    assert recorded_event({"step": 3, "lr": 1e-3, "gate": 1.0, "fakeln_removed": {}})


def _strip_timing(rows):
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]


def test_same_seed_same_metrics(shards_dir, tmp_path):
    cfg = tiny_run(shards_dir, variant="all", train={"steps": 12})
    train(cfg, tmp_path / "a")
    train(cfg, tmp_path / "b")
    assert _strip_timing(read_metrics(tmp_path / "a")) == _strip_timing(
        read_metrics(tmp_path / "b")
    )
    other = tiny_run(shards_dir, variant="all", train={"steps": 12}, seed=1)
    train(other, tmp_path / "c")
    assert read_metrics(tmp_path / "a")[0]["loss"] != read_metrics(tmp_path / "c")[0]["loss"]


def test_killed_and_resumed_equals_uninterrupted(shards_dir, tmp_path):
    cfg = tiny_run(shards_dir, variant="internal_aux", train={"steps": 25})
    train(cfg, tmp_path / "full")
    partial = train(cfg, tmp_path / "resumed", stop_after=14)  # "killed" after step 14
    assert partial == {"stopped_at": 14}
    assert not (tmp_path / "resumed" / "eval.json").exists()
    train(cfg, tmp_path / "resumed")  # resumes from the step-10 checkpoint
    a, b = load_model(tmp_path / "full"), load_model(tmp_path / "resumed")
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    assert _strip_timing(read_metrics(tmp_path / "full")) == _strip_timing(
        read_metrics(tmp_path / "resumed")
    )


def test_divergence_stops_and_keeps_last_good_checkpoint(shards_dir, tmp_path, monkeypatch):
    blow_up_at(monkeypatch, 7)  # the loss of step 7 is non-finite
    cfg = tiny_run(shards_dir, train={"steps": 30}, log={"every": 1, "ckpt_every": 5})
    result = train(cfg, tmp_path / "run")
    assert result["diverged"] and result["diverged_step"] == 7
    assert result["weights_step"] == 5  # the last checkpoint before the divergence
    eval_json = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert eval_json["diverged_step"] == 7 and eval_json["val_loss"] is not None
    records = read_metrics(tmp_path / "run")
    assert max(r["step"] for r in records if "gate" in r) == 6  # no training record of step 7
    assert [(r["step"], r["blowup"]["kind"]) for r in records if "blowup" in r] == [
        (7, "nonfinite_loss")
    ]  # its blow-up event
    assert eval_json["blew_up"] and eval_json["blowups"] == 1
    assert eval_json["first_blowup_step"] == 7
    saved = load_model(tmp_path / "run")  # model.safetensors holds the step-5 checkpoint's weights
    ckpt = load_tensors(tmp_path / "run" / "ckpt" / "state.safetensors")
    assert torch.equal(saved.tok_emb.weight, ckpt["model.tok_emb.weight"])
    assert torch.isfinite(saved.tok_emb.weight).all()


def test_missing_and_truncated_checkpoints_are_clear_errors(shards_dir, tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    cfg = tiny_run(shards_dir, train={"steps": 4})
    train(cfg, tmp_path / "run")
    weights = tmp_path / "run" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated"):
        load_model(tmp_path / "run")


def test_cli_rejects_bad_config_before_any_work(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("data: {dir: x}\ntrain: {steps: 10}\nvariant: half\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tapernorm.cli",
            "train",
            "--config",
            str(cfg),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "config key variant" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_checkpoint_of_another_config_is_not_resumed(shards_dir, tmp_path):
    cfg = tiny_run(shards_dir, train={"steps": 20})
    train(cfg, tmp_path / "run", stop_after=10)
    changed = tiny_run(shards_dir, train={"steps": 20, "lr": 1e-3})
    train(changed, tmp_path / "run")
    train(changed, tmp_path / "fresh")
    a, b = load_model(tmp_path / "run"), load_model(tmp_path / "fresh")
    assert torch.equal(a.tok_emb.weight, b.tok_emb.weight)


@contextmanager
def logging_to_stderr(level: int):
    """The `tapernorm` logger as the command line sets it up: one handler, on (pytest's current)
    stderr, format %(message)s, at `level` (any handler an earlier test left is set aside)."""
    logger = logging.getLogger("tapernorm")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    old_handlers, old_level = logger.handlers, logger.level
    logger.handlers = [handler]
    logger.setLevel(level)  # (setLevel, not .level =: it clears the loggers' cached levels)
    try:
        yield
    finally:
        logger.handlers = old_handlers
        logger.setLevel(old_level)


def test_progress_and_resume_are_logged_lines(shards_dir, tmp_path, capfd):
    cfg = tiny_run(shards_dir, train={"steps": 12}, log={"every": 4, "ckpt_every": 5})
    with logging_to_stderr(logging.INFO):
        train(cfg, tmp_path / "run", stop_after=7)
        train(cfg, tmp_path / "run")  # resumes from the step-5 checkpoint
    lines = capfd.readouterr().err.splitlines()
    assert lines[2] == "[tiny] resumed from step 5"
    logged = [r for r in read_metrics(tmp_path / "run") if "loss" in r]
    assert [r["step"] for r in logged] == [1, 4, 8, 12]
    progress = lines[:2] + lines[3:]  # steps 1 and 4 before the kill; 8 and 12 after the resume
    assert len(progress) == 4
    for line, r in zip(progress, logged, strict=True):
        start = (
            f"[tiny] step {r['step']}/12 loss {r['loss']:.4f} g {r['gate']:.3f} lr {r['lr']:.2e} | "
        )
        assert line.startswith(start) and " tok/s, elapsed " in line and ", ETA " in line, line
    assert progress[-1].endswith("ETA 0:00")

    changed = tiny_run(shards_dir, train={"steps": 12, "lr": 1e-3}, log={"every": 4})
    with logging_to_stderr(logging.INFO):
        train(changed, tmp_path / "run", stop_after=1, force=True)  # (the run finished: --force)
    assert capfd.readouterr().err.splitlines()[:2] == [
        f"[tiny] --force: replacing the finished run in {tmp_path / 'run'} (another config "
        "(train.lr, log.ckpt_every))",
        f"[tiny] checkpoint in {tmp_path / 'run'} is from another config "
        "(train.lr, log.ckpt_every): starting over",
    ]


def test_a_library_call_at_level_warning_writes_nothing(shards_dir, tmp_path, capfd):
    cfg = tiny_run(shards_dir, train={"steps": 6}, log={"every": 2, "ckpt_every": 3})
    with logging_to_stderr(logging.WARNING):
        train(cfg, tmp_path / "run", stop_after=4)
        train(cfg, tmp_path / "run")  # resumed
    assert capfd.readouterr().err == ""
    with logging_to_stderr(logging.INFO):
        train(cfg, tmp_path / "again")
    assert "[tiny] step 6/6 loss " in capfd.readouterr().err


def test_seeds_are_paired_across_variants(shards_dir, tmp_path):
    """Seed s of every variant starts from the same weights (where the variants share a weight)
    and draws the same batches, so a variant's gap to the baseline at one seed is a paired
    measurement (claims 1 and 2, Tables 1 and 2)."""
    from tapernorm.training.distributed import World
    from tapernorm.training.run import batch_generator, set_up
    from tapernorm.training.run_dir import RunDir

    def start(variant, seed):
        cfg = tiny_run(shards_dir, variant=variant, seed=seed)
        run_dir = RunDir(tmp_path / f"{variant}-{seed}")
        return set_up(cfg, run_dir, World.from_env(), torch.device("cpu"))

    for seed in (0, 1):
        runs = {v: start(v, seed) for v in ("baseline", "internal_aux", "all_aux", "final")}
        base = runs["baseline"].model.state_dict()
        for variant, run in runs.items():
            shared = {k: v for k, v in run.model.state_dict().items() if k in base}
            assert len(shared) == len(base), variant  # every baseline weight, same name
            for name, tensor in shared.items():
                assert torch.equal(tensor, base[name]), (variant, seed, name)
        batches = {
            v: run.shards.batch("train", 4, 32, batch_generator(seed, 7, 0))[0]
            for v, run in runs.items()
        }
        assert all(torch.equal(b, batches["baseline"]) for b in batches.values())
    other = start("baseline", 1).model.state_dict()
    assert not torch.equal(
        other["tok_emb.weight"], start("baseline", 0).model.state_dict()["tok_emb.weight"]
    )
