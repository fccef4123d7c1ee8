"""Bad input and interruptions end in one clear line and a non-zero exit, never a traceback."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tapernorm
import tapernorm.training.loop
import tapernorm.training.run
from tapernorm.cli import build_parser, main
from tapernorm.config import (
    ConfigError,
    check_yaml_files,
    load_run_config,
    section_defaults,
    yaml_load,
)


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


def test_a_yaml_error_in_the_workflow_config_names_its_line(tmp_path):
    """Snakemake's own message for a broken config file names no line; the Snakefile checks the
    default config first, and `tapernorm check-config` any other (test_cli)."""
    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "Snakefile", tmp_path / "Snakefile")
    shutil.copytree(root / "workflow", tmp_path / "workflow")
    shutil.copytree(root / "config", tmp_path / "config")
    config = tmp_path / "config/config.yaml"
    config.write_text(config.read_text().replace("pretrain:\n", "pretrain: [\n", 1))
    with pytest.raises(ConfigError, match="invalid YAML at line") as expected:
        check_yaml_files([config])
    line = str(expected.value).split("invalid YAML at ", 1)[1]  # "line 17, column 3: ..."
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert f"config file config/config.yaml: invalid YAML at {line}" in out.stdout + out.stderr


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
    command = argv[0]
    if argv[0] == "bench":
        argv, command = argv[:4], " ".join(argv[:2])  # the benchmark's own parser says it
    status, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == 2 and message in line and line.endswith(f"(see tapernorm {command} --help)")


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
    commands = dict(build_parser()._subparsers._group_actions[0].choices)
    benchmarks = commands.pop("bench")._subparsers._group_actions[0].choices
    commands.update({f"bench {name}": command for name, command in benchmarks.items()})
    defaults = {
        name: action.default
        for name, command in commands.items()
        for action in command._actions
        if action.dest == "device"
    }
    assert set(defaults) >= {"eval", "fold", "export-hf", "taper-hf", "bench forward"}
    assert set(defaults) >= {"bench train-step", "bench decode"}
    from_config = {"bench forward", "bench decode"}  # None: the bench section's default applies
    assert {defaults[name] for name in from_config} == {None}
    assert {v for name, v in defaults.items() if name not in from_config} == {"auto"}
    assert section_defaults("bench")["device"] == "auto"


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
    lr_at = tapernorm.training.loop.lr_at

    def interrupted(k, *args):
        if k == step:
            raise KeyboardInterrupt
        return lr_at(k, *args)

    monkeypatch.setattr(tapernorm.training.loop, "lr_at", interrupted)


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


@pytest.mark.parametrize(
    "override, key",
    [
        ("train.lr=.inf", "train.lr: inf is not a finite number"),
        ("train.weight_decay=.nan", "train.weight_decay: nan is not a finite number"),
        ("taper.ema_mu=.nan", "taper.ema_mu: nan is not a finite number"),
        ("anchor.lam=.inf", "anchor.lam: inf is not a finite number"),
        ("train.grad_clip=.nan", "train.grad_clip: nan is not a finite number"),
        ("train.betas=[0.9, .nan]", "train.betas.1: nan is not a finite number"),
        ("train.steps=15.5", "train.steps: 15.5 is not of type 'integer'"),
        ("model.block_size=100000", "the val split of"),
        ("data.train_tokens=10", "the train split of"),
    ],
)
def test_bad_values_are_refused_before_the_first_step(override, key, shards_dir, tmp_path, capsys):
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir)
    argv = ["train", "--config", cfg, "--set", override, "--out", str(tmp_path / "o")]
    status, err = run_cli(argv, capsys)
    assert status == 2 and key in one_line(err)
    assert not (tmp_path / "o").exists()  # no config.json, no empty metrics


def test_integers_written_as_floats_are_read_exactly(tmp_path):
    cfg = load_run_config(None, ["data.dir=x", "train.steps=1e3", "log.every=2.0e1"])
    assert cfg.train.steps == 1000 and type(cfg.train.steps) is int
    assert cfg.log.every == 20 and type(cfg.log.every) is int
    assert type(cfg.train.lr) is float


def test_a_full_disk_is_one_line_naming_the_file(shards_dir, tmp_path, monkeypatch, capsys):
    import errno

    import tapernorm.runtime.atomic

    class FullDisk:
        def __init__(self, *args):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tapernorm.runtime.atomic, "open", FullDisk, raising=False)
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir)
    status, err = run_cli(["train", "--config", cfg, "--out", str(tmp_path / "o")], capsys)
    assert status == 2
    assert one_line(err) == (
        f"tapernorm train: error: no space left on device writing {tmp_path / 'o' / 'config.json'}"
        ": free some space and rerun the command"
    )
    assert not list((tmp_path / "o").glob(".*.tmp"))


def test_a_full_disk_during_a_checkpoint_is_one_line(shards_dir, tmp_path, monkeypatch, capsys):
    from safetensors import SafetensorError

    import tapernorm.training.checkpoint

    def save_file(*args, **kwargs):
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
            'space left on device" })'
        )

    monkeypatch.setattr(tapernorm.training.checkpoint, "save_file", save_file)
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir)
    status, err = run_cli(["train", "--config", cfg, "--out", str(tmp_path / "o")], capsys)
    line = err.strip().splitlines()[-1]  # (after the progress lines of steps 1-10)
    assert status == 2
    assert f"could not write {tmp_path / 'o' / 'ckpt.tmp' / 'state.safetensors'}: " in line
    assert line.endswith("(is the disk full?)")


def _trained(shards_dir, tmp_path, capsys) -> tuple[str, Path]:
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir, steps=10)
    assert run_cli(["train", "--config", cfg, "--out", str(tmp_path / "o")], capsys)[0] == 0
    return cfg, tmp_path / "o"


def test_broken_run_files_are_one_line_naming_the_file(shards_dir, tmp_path, capsys):
    cfg, out = _trained(shards_dir, tmp_path, capsys)
    (out / "eval.json").unlink()  # not finished: a rerun resumes (a finished run is left alone)
    train = ["train", "--config", cfg, "--out", str(out)]
    state = out / "ckpt" / "state.safetensors"
    good = state.read_bytes()
    state.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")  # SafetensorError
    status, err = run_cli(train, capsys)
    line = one_line(err)
    assert status == 2 and f"checkpoint file {state} is unreadable" in line
    assert line.endswith(f"delete {out / 'ckpt'} to start the run over")
    state.write_bytes(good)
    meta = json.loads((out / "ckpt" / "state.json").read_text())
    (out / "ckpt" / "state.json").write_text(json.dumps({**meta, "param_groups": []}))
    status, err = run_cli(train, capsys)  # a state.json whose groups do not match the model
    assert status == 2 and f"checkpoint {out / 'ckpt'} does not match the run" in one_line(err)
    weights = out / "model.safetensors"
    weights.write_bytes(b"junk")
    model_cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**model_cfg, "model": {"n_embd": 16}}))
    argv = ["eval", "--model", str(out), "--data", str(shards_dir), "--windows", "2"]
    status, err = run_cli(argv, capsys)  # (a KeyError or TypeError from GPTConfig before)
    assert status == 2 and f"{out / 'config.json'}: invalid 'model' entry" in one_line(err)


def test_broken_or_mismatched_shards_are_one_line(shards_dir, tmp_path, capsys):
    import shutil

    data = Path(shutil.copytree(shards_dir, tmp_path / "data"))
    cfg = tiny_yaml(tmp_path / "run.yaml", data)
    train = ["train", "--config", cfg, "--out", str(tmp_path / "o")]
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text('{"vocab_size": 512, "eot')
    status, err = run_cli(train, capsys)
    assert status == 2 and f"{data / 'meta.json'} is not valid JSON (truncated?)" in one_line(err)
    assert "recreate the shards with" in one_line(err)
    (data / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "eot_id"}))
    status, err = run_cli(train, capsys)
    assert (
        status == 2
        and f"{data / 'meta.json'} has no valid eot_id: eot_id: it is missing" in one_line(err)
    )
    (data / "meta.json").write_text(json.dumps({**meta, "vocab_size": 100}))  # ids up to 511
    status, err = run_cli(train, capsys)  # (an IndexError in the embedding before)
    assert status == 2 and "beyond the vocab_size 100 of their meta.json" in one_line(err)


def test_a_model_of_a_smaller_vocabulary_is_not_evaluated_on_these_shards(
    shards_dir, tmp_path, capsys
):
    cfg, out = _trained(shards_dir, tmp_path, capsys)
    model_cfg = json.loads((out / "config.json").read_text())
    assert model_cfg["model"]["vocab_size"] == 512
    import shutil

    data = Path(shutil.copytree(shards_dir, tmp_path / "data"))
    meta = json.loads((data / "meta.json").read_text())
    (data / "meta.json").write_text(json.dumps({**meta, "vocab_size": 1000}))
    status, err = run_cli(["eval", "--model", str(out), "--data", str(data)], capsys)
    assert status == 2 and "a vocabulary of 1000, the model only 512" in one_line(err)


def test_out_of_memory_is_one_line(shards_dir, tmp_path, monkeypatch, capsys):
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(tapernorm.training.run, "build_model", no_memory)
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir)
    status, err = run_cli(["train", "--config", cfg, "--out", str(tmp_path / "o")], capsys)
    assert status == 2 and one_line(err).startswith("tapernorm train: error: out of memory: ")
    assert not (tmp_path / "o").exists()


def test_the_traceback_is_there_when_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPERNORM_TRACEBACK", "1")
    with pytest.raises(ConfigError):
        main(["train", "--set", "data.dir=x", "--set", "train.steps=1e400", "--out", str(tmp_path)])


@pytest.mark.parametrize(
    "damage,problem",
    [
        (b'{"set": "heldout", "run": ', " is not valid JSON (truncated?)"),
        (b'{"set": "held\xffout"}', ": not UTF-8 text (byte 0xff at line 1, column 14"),
    ],
)
def test_a_damaged_json_input_of_a_table_or_claim_names_the_file(tmp_path, damage, problem):
    """The analysis readers read JSON through jsonio: the error names the file and what is wrong."""
    import re

    from tapernorm.analysis import runs
    from tapernorm.analysis.claims import document as claims
    from tapernorm.analysis.tables import finetune
    from tapernorm.runtime import bookkeeping

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / "config.json"
    path.write_bytes(damage)
    readers = {
        "verify file ": lambda: claims.read_verify(path),
        "eval file ": lambda: finetune.load_finetune_evals([path]),
        "": lambda: finetune.table6([run_dir]),
    }
    for kind, read in readers.items():
        with pytest.raises(ValueError, match="^" + re.escape(f"{kind}{path}{problem}")):
            read()
    with pytest.raises(ValueError, match="^" + re.escape(f"{path}{problem}")) as e:
        runs.load_runs([run_dir])
    assert bookkeeping.RERUN_TRAIN in str(e.value)  # (the file kind's fix)
