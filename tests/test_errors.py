"""Bad input and interruptions end in one clear line and a non-zero exit, never a traceback."""

import sys
from pathlib import Path

import pytest

import tapernorm
import tapernorm.train
from tapernorm.cli import build_parser, main
from tapernorm.config import ConfigError, check_yaml_files, load_run_config, yaml_load


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, stderr) of `tapernorm argv`, whether it returns or exits."""
    try:
        status = main(argv)
    except SystemExit as e:
        status = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def tiny_yaml(path, shards_dir, steps: int = 20) -> str:
    path.write_text(
        f"data: {{dir: {shards_dir}}}\n"
        "model: {n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}\n"
        f"train: {{steps: {steps}, batch_size: 2, warmup_steps: 2}}\n"
        "log: {every: 5, ckpt_every: 10, eval_windows: 2}\n"
    )
    return str(path)


def test_yaml_syntax_error_names_file_and_line(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("train:\n  steps: [1, 2\nmodel: {}\n")
    status, err = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "o")], capsys)
    assert status == 2
    assert f"config file {cfg}: invalid YAML at line 3" in one_line(err)
    assert "<unicode string>" not in err


def test_duplicate_keys_are_an_error_naming_the_key(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("train: {steps: 5, lrr: 1}\nmodel: {n_layer: 1}\ntrain: {steps: 6}\n")
    status, err = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "o")], capsys)
    assert status == 2
    assert "duplicate key 'train' (first at line 1)" in one_line(err)
    with pytest.raises(ConfigError, match="line 3, column 3: duplicate key 'lr'"):
        yaml_load("train:\n  lr: 1\n  lr: 2\n")
    assert yaml_load("a: &a {x: 1}\nb:\n  <<: *a\n  x: 2\n")["b"] == {"x": 2}  # merges may override
    with pytest.raises(ConfigError, match="override 'train.steps=\\[1': invalid YAML"):
        load_run_config(None, ["train.steps=[1"])


def test_workflow_config_files_are_checked_for_duplicate_keys(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("pretrain: {seeds: 1}\nbench: null\n")
    bad.write_text("pretrain:\n  seeds: 1\n  widths: [64]\n  seeds: 2\n")
    check_yaml_files([good])
    with pytest.raises(ConfigError, match=f"config file {bad}: .*line 4.*duplicate key 'seeds'"):
        check_yaml_files([good, bad])


def test_config_and_config_json_are_exclusive(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("train: {steps: 5}\n")
    argv = ["train", "--config", str(cfg), "--config-json", "{}", "--out", str(tmp_path / "o")]
    status, err = run_cli(argv, capsys)
    assert status == 2 and "give no --config or --set with it" in one_line(err)
    argv = ["train", "--config-json", "{not json", "--out", str(tmp_path / "o")]
    status, err = run_cli(argv, capsys)
    assert status == 2 and "--config-json is not valid JSON" in one_line(err)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "--windows", "-3"], "argument --windows: expected int >= 1, got '-3'"),
        (["fold", "--rtol", "0"], "argument --rtol: expected float > 0, got '0'"),
        (["bench", "decode", "--warmup", "x"], "argument --warmup: expected int >= 0, got 'x'"),
        (["eval", "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    ],
)
def test_bad_arguments_are_one_line(argv, message, tmp_path, capsys):
    argv += ["--model", str(tmp_path), "--data", str(tmp_path), "--out", str(tmp_path)]
    if argv[0] == "bench":
        argv = argv[:4]
    status, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == 2 and message in line and line.endswith(f"(see tapernorm {argv[0]} --help)")


def test_version_help_defaults_and_device_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert (
        e.value.code == 0
        and capsys.readouterr().out.strip() == f"tapernorm {tapernorm.__version__}"
    )
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(default: 64)" in help_text and "(default: auto)" in help_text
    assert "(default: None)" not in help_text
    commands = build_parser()._subparsers._group_actions[0].choices
    defaults = {
        name: action.default
        for name, command in commands.items()
        for action in command._actions
        if action.dest == "device"
    }
    assert set(defaults) >= {"eval", "fold", "export-hf", "taper-hf", "bench"}
    assert set(defaults.values()) == {"auto"}


def test_missing_optional_dependency_names_the_extra(shards_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    status, err = run_cli(
        ["prepare-data", "--corpus", "tinystories", "--out", str(tmp_path / "d")], capsys
    )
    assert status == 2
    assert one_line(err) == (
        "tapernorm prepare-data: error: datasets is not installed: pip install -e '.[hf]' "
        "(in this checkout)"
    )
    argv = ["taper-hf", "--model", "gpt2", "--data", str(shards_dir), "--out", str(tmp_path / "t")]
    status, err = run_cli(argv + ["--device", "cpu"], capsys)
    assert status == 2 and "transformers is not installed: pip install -e '.[hf]'" in one_line(err)


def _interrupt_at(step: int, monkeypatch) -> None:
    """Make training raise KeyboardInterrupt (as Ctrl-C does) when it reaches optimizer step `step`."""
    lr_at = tapernorm.train.lr_at

    def interrupted(k, *args):
        if k == step:
            raise KeyboardInterrupt
        return lr_at(k, *args)

    monkeypatch.setattr(tapernorm.train, "lr_at", interrupted)


@pytest.mark.parametrize(
    "step, resumes", [(15, "from step 10 (its last checkpoint)"), (5, "from the start")]
)
def test_ctrl_c_during_train_says_where_a_rerun_resumes(
    step, resumes, shards_dir, tmp_path, monkeypatch, capsys
):
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir)
    _interrupt_at(step, monkeypatch)
    status, err = run_cli(["train", "--config", cfg, "--out", str(tmp_path / "o")], capsys)
    assert status == 130
    last = err.strip().splitlines()[-1]
    assert last == f"tapernorm train: interrupted; the same command resumes the run {resumes}"


def test_off_tty_progress_lines_show_rate_elapsed_and_eta(shards_dir, tmp_path, capsys):
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir, steps=10)
    assert main(["train", "--config", cfg, "--out", str(tmp_path / "o")]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if " step 10/10 " in ln]
    assert len(lines) == 1
    assert " tok/s, elapsed " in lines[0] and lines[0].endswith("ETA 0:00")


def test_shipped_yaml_files_have_no_duplicate_keys():
    root = Path(__file__).resolve().parents[1]
    paths = [*root.glob("config/*.yaml"), *root.glob("workflow/**/*.yaml")]
    assert len(paths) > 3
    check_yaml_files(paths)
