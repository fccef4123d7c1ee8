"""The command line: eval and fold on a trained run, clear errors on bad input."""

import json
import logging

import torch
from conftest import tiny_run

from tapernorm import set_gate
from tapernorm.checkpoint import load_model
from tapernorm.cli import main
from tapernorm.train import train


def test_fold_and_eval_commands(shards_dir, tmp_path, capsys):
    train(tiny_run(shards_dir, variant="all_aux", train={"steps": 12}), tmp_path / "run")
    out = tmp_path / "fold"
    assert (
        main(
            [
                "fold",
                "--model",
                str(tmp_path / "run"),
                "--data",
                str(shards_dir),
                "--out",
                str(out),
                "--windows",
                "4",
                "--eval-windows",
                "8",
            ]
        )
        == 0
    )
    verify = json.loads((out / "verify.json").read_text())
    assert verify["folded"]["ok"] and verify["scaled"]["ok"]
    assert abs(verify["val_loss_diff"]) < 1e-4
    reference, folded = load_model(tmp_path / "run"), load_model(out / "folded")
    set_gate(reference, 0.0)
    x = torch.randint(0, reference.config.vocab_size, (2, 16))
    assert torch.allclose(reference.eval()(x), folded(x), atol=1e-5)
    assert not folded.config.tie_embeddings  # the final TaperNorm was folded into the head

    assert (
        main(
            [
                "eval",
                "--model",
                str(out / "folded"),
                "--data",
                str(shards_dir),
                "--windows",
                "8",
                "--out",
                str(tmp_path / "e.json"),
            ]
        )
        == 0
    )
    ev = json.loads((tmp_path / "e.json").read_text())
    assert abs(ev["val_loss"] - verify["val_loss_folded"]) < 1e-5

    # --folded compares on an evaluation set's rows; token shards have none to compare on
    args = ["eval", "--model", str(tmp_path / "run"), "--data", str(shards_dir)]
    assert main([*args, "--folded", str(out / "folded")]) == 2
    assert "--folded needs an evaluation set of prepare-eval" in capsys.readouterr().err


def test_missing_model_is_a_clear_error(shards_dir, tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path / "nope"), "--data", str(shards_dir)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_missing_shards_is_a_clear_error(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"data: {{dir: {tmp_path / 'nodata'}}}\ntrain: {{steps: 5}}\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "prepare-data" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_commands_print_library_logs_and_the_logger_can_be_silenced(monkeypatch, capsys):
    """A command shows the library's log records as bare lines on stderr (its result stays on
    stdout), once per call however often main runs; a level set on `tapernorm` silences them."""
    from tapernorm import fold

    def fold_run(*args, **kwargs):
        logging.getLogger("tapernorm.fold").info("folding %s", "the run")
        logging.getLogger("tapernorm.fold").debug("below INFO")
        return {"ok": True}

    monkeypatch.setattr(fold, "fold_run", fold_run)
    argv = ["fold", "--model", "run", "--data", "shards", "--out", "out"]
    logger = logging.getLogger("tapernorm")
    for _ in range(2):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert err == "folding the run\n" and json.loads(out) == {"ok": True}
        assert not logger.handlers and logger.propagate  # as it was before the command
    logger.setLevel(logging.WARNING)
    try:
        assert main(argv) == 0
    finally:
        logger.setLevel(logging.NOTSET)
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out) == {"ok": True}
