"""Integrity end to end: a run judged by its content, never its spelling; a record that cannot
vanish; inputs pinned for the whole run; outputs that are strictly valid and checked; every
failure one line that names the file."""

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import blow_up_at, tiny_hf_gpt2, tiny_run
from test_errors import one_line, run_cli, tiny_yaml
from test_train import _strip_timing, logging_to_stderr, read_metrics

import tapernorm.runtime.atomic
import tapernorm.training.evaluation
import tapernorm.training.loop
import tapernorm.training.metrics_log
from tapernorm.runtime import jsonio
from tapernorm.training.checkpoint import load_tensors, save_tensors
from tapernorm.training.identity import InputChanged
from tapernorm.training.lock import LOCK_NAME, WAIT_ENV
from tapernorm.training.loop import train
from tapernorm.training.metrics_log import METRICS, read_records

ROOT = Path(__file__).resolve().parents[1]


def short_run(data, steps: int = 14):
    return tiny_run(data, train={"steps": steps}, log={"every": 1, "ckpt_every": 10})


@pytest.fixture(scope="module")
def reference(shards_dir, tmp_path_factory):
    """An uninterrupted short_run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    train(short_run(shards_dir), out)
    return out


def same_run(a: Path, b: Path) -> bool:
    """Whether two run directories hold the same results: weights, record (tokens/s aside),
    eval.json."""
    wa, wb = load_tensors(a / "model.safetensors"), load_tensors(b / "model.safetensors")
    return (
        wa.keys() == wb.keys()
        and all(torch.equal(wa[k], wb[k]) for k in wa)
        and _strip_timing(read_metrics(a)) == _strip_timing(read_metrics(b))
        and (a / "eval.json").read_bytes() == (b / "eval.json").read_bytes()
    )


def at_step(monkeypatch, step: int, action) -> None:
    """Call action() once, right after optimizer step `step` of a run started from step 0."""
    done = {"n": 0}
    step_done = tapernorm.training.loop.Progress.step_done

    def hooked(self, tokens):
        step_done(self, tokens)
        done["n"] += 1
        if done["n"] == step:
            action()

    monkeypatch.setattr(tapernorm.training.loop.Progress, "step_done", hooked)


# ---- identity by content -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["./data for data", "moved, named absolutely", "copied"])
def test_the_same_data_named_otherwise_resumes_bit_identically(
    how, shards_dir, reference, tmp_path, monkeypatch, capfd
):
    work = tmp_path / "work"
    shutil.copytree(shards_dir, work / "data")
    if how == "./data for data":
        monkeypatch.chdir(work)
        first, then, out = "data", "./data", Path("run")
    else:
        first, out = str(work / "data"), work / "run"
    train(short_run(first), out, stop_after=12)  # checkpoint at step 10
    if how == "moved, named absolutely":
        shutil.move(work, tmp_path / "moved")
        then, out = str(tmp_path / "moved" / "data"), tmp_path / "moved" / "run"
    elif how == "copied":  # (new files: other inodes and mtimes, the same bytes)
        shutil.copytree(work / "data", tmp_path / "copy", copy_function=shutil.copyfile)
        shutil.rmtree(work / "data")
        then = str(tmp_path / "copy")
    capfd.readouterr()
    with logging_to_stderr(logging.INFO):
        train(short_run(then), out)
    err = capfd.readouterr().err
    assert "resumed from step 10" in err and "starting over" not in err, err
    assert same_run(Path(out).resolve(), reference)


def test_an_init_model_written_again_is_the_same_init(shards_dir, tmp_path, capfd):
    """config.json's provenance (host, times) changes each time a model is written; the init's
    identity is its model entry and its tensors."""
    base = tiny_run(shards_dir, train={"steps": 4})
    train(base, tmp_path / "base")
    ft = tiny_run(shards_dir, train={"steps": 20}, init={"from": str(tmp_path / "base")})
    train(ft, tmp_path / "ft_fresh")
    train(ft, tmp_path / "ft", stop_after=12)
    config = json.loads((tmp_path / "base" / "config.json").read_text())
    for name in ("eval.json", "model.safetensors"):  # the base's job rerun (snakemake -f)
        (tmp_path / "base" / name).unlink()
    train(base, tmp_path / "base")
    again = json.loads((tmp_path / "base" / "config.json").read_text())
    assert again["meta"]["provenance"] != config["meta"]["provenance"]
    capfd.readouterr()
    with logging_to_stderr(logging.INFO):
        train(ft, tmp_path / "ft")
    assert "resumed from step 10" in capfd.readouterr().err
    assert same_run(tmp_path / "ft", tmp_path / "ft_fresh")


@pytest.mark.parametrize(
    "damage,named",
    [
        (lambda text: text[:50], "is not valid JSON"),  # cut short
        (lambda text: "{}", "has no valid step or param_groups"),  # (not 'another config')
        (lambda text: text.replace('"step"', '"stop"'), "has no valid step:"),
    ],
)
def test_an_unreadable_state_json_is_one_line_and_deletes_nothing(
    shards_dir, tmp_path, capsys, damage, named
):
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir, steps=20)
    out = tmp_path / "o"
    argv = ["train", "--config", cfg, "--out", str(out)]
    assert run_cli(argv, capsys)[0] == 0
    state = out / "ckpt" / "state.json"
    state.write_text(damage(state.read_text()))
    (out / "eval.json").unlink()
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    status, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == 2 and f"{state} {named}" in line
    assert f"delete {out / 'ckpt'} to start the run over" in line and "left as it is" in line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_finished_run_is_left_as_it_is(shards_dir, tmp_path, capfd):
    cfg = tiny_run(shards_dir, train={"steps": 6})
    first = train(cfg, tmp_path / "run")
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run").iterdir()}
    capfd.readouterr()
    with logging_to_stderr(logging.INFO):
        assert train(cfg, tmp_path / "run") == first
    assert "holds this run, finished: nothing to do" in capfd.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run").iterdir()} == stamps


# ---- a record that cannot vanish -----------------------------------------------------------------


def _written_over(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"step": 2,', b'"step": 9,'))  # in place, the same size


@pytest.mark.parametrize("how", ["deleted", "cut short in place", "written over in place"])
def test_a_record_lost_while_training_is_put_back(
    how, shards_dir, reference, tmp_path, monkeypatch, capfd
):
    out = tmp_path / "run"
    lose = {
        "deleted": lambda: (out / METRICS).unlink(),
        "cut short in place": lambda: os.truncate(out / METRICS, 10),
        "written over in place": lambda: _written_over(out / METRICS),
    }[how]
    at_step(monkeypatch, 5, lose)
    with logging_to_stderr(logging.INFO):
        train(short_run(shards_dir), out)
    err = capfd.readouterr().err
    assert f"{out / METRICS} was deleted or changed while the run was training: put back" in err
    assert same_run(out, reference)
    assert [r["step"] for r in read_records(out / "ckpt" / METRICS)] == list(range(1, 15))


@pytest.mark.parametrize("lost", ["both", "copy, live short"])
def test_a_resume_says_when_the_record_is_gone_or_short(lost, shards_dir, tmp_path, capfd):
    out = tmp_path / "run"
    train(short_run(shards_dir), out, stop_after=12)
    (out / "ckpt" / METRICS).unlink()
    if lost == "both":
        (out / METRICS).unlink()
    else:
        lines = (out / METRICS).read_text().splitlines(keepends=True)
        (out / METRICS).write_text("".join(lines[:3]))
    capfd.readouterr()
    with logging_to_stderr(logging.INFO):
        train(short_run(shards_dir), out)
    err = capfd.readouterr().err
    if lost == "both":
        assert "resumed from step 10 with no record of the steps before it" in err
        assert [r["step"] for r in read_metrics(out)] == [11, 12, 13, 14]
    else:
        assert "resumed from step 10 with 3 of the 10 records before it" in err


def test_a_damaged_copy_of_the_record_is_one_line(shards_dir, tmp_path, capsys):
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir, steps=20)
    out = tmp_path / "o"
    argv = ["train", "--config", cfg, "--out", str(out)]
    assert run_cli(argv, capsys)[0] == 0
    (out / "eval.json").unlink()
    copy = out / "ckpt" / METRICS
    copy.write_text(copy.read_text().replace('"step": 5', '"step": 6'))
    status, err = run_cli(argv, capsys)
    assert status == 2 and f"{copy} does not match the sha256 in" in one_line(err)


def test_a_second_writer_waits_with_wait(shards_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from tapernorm.training.lock import run_lock\n"
            "with run_lock(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(5)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir, steps=4)
        monkeypatch.setenv(WAIT_ENV, "1")  # as the workflow sets it
        status, err = run_cli(["train", "--config", cfg, "--out", str(out)], capsys)
        assert status == 0 and f"waiting for pid {holder.pid} on host " in err
        assert holder.wait(timeout=30) == 0
        assert (out / "eval.json").is_file() and not (out / LOCK_NAME).exists()
    finally:
        holder.kill()
        holder.wait()


# ---- inputs pinned -------------------------------------------------------------------------------


def test_data_changed_mid_run_stops_it_naming_the_file(
    shards_dir, reference, tmp_path, monkeypatch, capsys
):
    data = Path(shutil.copytree(shards_dir, tmp_path / "data"))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(json.dumps(short_run(str(data), 30).to_dict()))
    original = (data / "train.bin").read_bytes()

    def overwrite():  # in place: the same size, the same tokens in another order
        with open(data / "train.bin", "r+b") as f:
            f.write(original[2:4096] + original[:2])

    at_step(monkeypatch, 12, overwrite)
    status, err = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "o")], capsys)
    line = err.strip().splitlines()[-1]
    assert status == 2
    assert f"{data / 'train.bin'} (data of the run) changed (its content) while" in line
    assert json.loads((tmp_path / "o" / "ckpt" / "state.json").read_text())["step"] == 10
    assert not (tmp_path / "o" / "eval.json").exists()
    monkeypatch.undo()
    (data / "train.bin").write_bytes(original)  # put back: the run resumes from step 10
    with pytest.raises(InputChanged):  # (a library call raises it)
        at_step(monkeypatch, 3, overwrite)
        train(short_run(str(data), 30), tmp_path / "o")
    monkeypatch.undo()
    (data / "train.bin").write_bytes(original)
    result = train(short_run(str(data), 30), tmp_path / "o")
    assert result["weights_step"] == 30


def test_an_init_model_changed_mid_run_stops_it(shards_dir, tmp_path, monkeypatch):
    train(tiny_run(shards_dir, train={"steps": 4}), tmp_path / "base")
    weights = tmp_path / "base" / "model.safetensors"
    tensors = load_tensors(weights)
    ft = tiny_run(shards_dir, train={"steps": 20}, init={"from": str(tmp_path / "base")})
    other = {k: v + 1 for k, v in tensors.items()}
    at_step(monkeypatch, 3, lambda: save_tensors(weights, other))
    with pytest.raises(InputChanged, match=f"{weights} \\(init model of the run\\) changed"):
        train(ft, tmp_path / "ft")


# ---- strict, checked outputs ---------------------------------------------------------------------


def _strict_lines(path: Path) -> list:
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [jsonio.loads_strict(line) for line in text.splitlines()]
    return [jsonio.loads_strict(text)]


def test_the_json_writer_is_strict():
    text = jsonio.dumps({"a": float("nan"), "b": [1.0, float("-inf")], "c": {"d": float("inf")}})
    assert jsonio.loads_strict(text) == {
        "a": None,
        "b": [1.0, None],
        "c": {"d": None, "non_finite": {"d": "inf"}},
        "non_finite": {"a": "nan", "b.1": "-inf"},
    }
    with pytest.raises(ValueError, match="NaN is not a JSON number"):
        jsonio.loads_strict('{"a": NaN}')
    with pytest.raises(ValueError, match="outside an object"):
        jsonio.dumps([float("nan")])


def test_no_json_is_written_but_through_the_strict_writer():
    """Every json.dump(s) in the package and the benchmark scripts is jsonio's (or a digest's)."""
    allowed = {"jsonio.py", "digests.py", "provenance.py"}  # (the last two hash canonical JSON)
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
        if path.name not in allowed
        for i, line in enumerate(path.read_text().splitlines(), start=1)
        if "json.dump(" in line or "json.dumps(" in line
    ]
    assert not found, found


def test_every_json_a_run_and_its_commands_write_parses_strictly(
    shards_dir, tmp_path, monkeypatch, capsys
):
    """A run whose mid-run evaluation is infinite and whose loss diverges later, then the commands
    that write JSON (eval --out, fold, prepare-data, prepare-eval, env --out): every file parses
    with a parser that refuses NaN and Infinity, and so does every line they print."""
    evaluate = tapernorm.training.evaluation.evaluate
    calls = {"n": 0}

    def first_infinite(*args, **kwargs):
        calls["n"] += 1
        return float("inf") if calls["n"] == 1 else evaluate(*args, **kwargs)

    monkeypatch.setattr(tapernorm.training.loop, "evaluate", first_infinite)
    blow_up_at(monkeypatch, 14)
    run = tmp_path / "run"
    cfg = tiny_run(
        shards_dir, train={"steps": 20}, log={"every": 1, "ckpt_every": 5, "eval_every": 5}
    )
    result = train(cfg, run)
    assert result["diverged"] and result["diverged_step"] == 14
    records = [r for r in read_metrics(run) if "val_loss" in r]
    assert records[0] == {
        "step": 5,
        "val_loss": None,
        "val_gate": 1.0,  # the gate the run held when it was evaluated
        "non_finite": {"val_loss": "inf"},
    }
    monkeypatch.undo()
    commands = [
        ["eval", "--model", str(run), "--data", str(shards_dir), "--windows", "2",
         "--out", str(tmp_path / "eval.json")],
        ["fold", "--model", str(run), "--data", str(shards_dir), "--out", str(tmp_path / "fold"),
         "--windows", "2", "--eval-windows", "2"],
        ["prepare-data", "--corpus", "shakespeare", "--vocab-size", "256", "--no-byte-fallback",
         "--max-docs", "3", "--out", str(tmp_path / "data")],
        ["prepare-eval", "--set", "heldout", "--shards", str(tmp_path / "data"), "--row-len", "64",
         "--out", str(tmp_path / "evalset")],
        ["env", "--device", "cpu", "--out", str(tmp_path / "env.json")],
    ]  # fmt: skip
    for argv in commands:
        status, _ = run_cli(argv, capsys)
        assert status in (0, 1), argv  # (fold: 1 when the check fails; it still writes)
    written = [p for p in tmp_path.rglob("*") if p.suffix in (".json", ".jsonl")]
    assert {p.name for p in written} >= {"config.json", "eval.json", "metrics.jsonl", "state.json",
                                         "meta.json", "verify.json", "env.json"}  # fmt: skip
    for path in written:
        _strict_lines(path)


def test_damaged_weights_are_one_line_naming_the_file(shards_dir, tmp_path, capsys):
    train(tiny_run(shards_dir, train={"steps": 3}), tmp_path / "run")
    weights = tmp_path / "run" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x40  # one bit of the last tensor
    weights.write_bytes(bytes(data))
    argv = ["eval", "--model", str(tmp_path / "run"), "--data", str(shards_dir), "--windows", "2"]
    status, err = run_cli(argv, capsys)
    assert status == 2 and f"checkpoint file {weights} is damaged: its tensors' sha256" in (
        one_line(err)
    )


def test_a_config_that_does_not_fit_its_weights_is_refused_before_loading(
    shards_dir, tmp_path, capsys
):
    train(tiny_run(shards_dir, train={"steps": 3}), tmp_path / "run")
    config = tmp_path / "run" / "config.json"
    cfg = json.loads(config.read_text())
    config.write_text(json.dumps({**cfg, "model": {**cfg["model"], "n_layer": 3}}))
    argv = ["eval", "--model", str(tmp_path / "run"), "--data", str(shards_dir), "--windows", "2"]
    status, err = run_cli(argv, capsys)
    line = one_line(err)
    assert status == 2 and f"{tmp_path / 'run' / 'model.safetensors'} does not match" in line
    assert f"the 'model' entry of {config}: missing ['blocks.2." in line


def test_a_hf_checkpoint_is_checked_against_its_config(shards_dir, tmp_path):
    from tapernorm.interop.hf_import import load_hf

    hf = tiny_hf_gpt2(tmp_path / "hf", 512)
    more = Path(shutil.copytree(hf, tmp_path / "more"))
    cfg = json.loads((more / "config.json").read_text())
    (more / "config.json").write_text(json.dumps({**cfg, "n_layer": 3}))
    with pytest.raises(ValueError, match="do not match its config.json .3 layers.*missing"):
        load_hf(str(more))  # (transformers would initialise layer 3 at random)
    weights = hf / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(ValueError, match=f"{weights} is truncated or damaged"):
        load_hf(str(hf))


# ---- one line naming the file and the key --------------------------------------------------------


def test_a_full_disk_at_a_metrics_write_names_the_record(shards_dir, tmp_path, monkeypatch, capsys):
    real_open = open

    class FullDisk:
        def __init__(self, *args, **kwargs):
            self.file = real_open(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.file, name)

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tapernorm.training.metrics_log, "open", FullDisk, raising=False)
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir)
    status, err = run_cli(["train", "--config", cfg, "--out", str(tmp_path / "o")], capsys)
    assert status == 2
    assert err.strip().splitlines()[-1] == (
        f"tapernorm train: error: no space left on device writing {tmp_path / 'o' / METRICS}: "
        "free some space and rerun the command"
    )


def test_a_full_disk_at_the_copy_of_the_record_names_the_copy(
    shards_dir, tmp_path, monkeypatch, capsys
):
    real_open = open

    def full_for_the_copy(path, *args):
        file = real_open(path, *args)
        if Path(path).parent.name == "ckpt.tmp" and Path(path).name.startswith(f".{METRICS}."):
            file.close()
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return file

    monkeypatch.setattr(tapernorm.runtime.atomic, "open", full_for_the_copy, raising=False)
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir)
    status, err = run_cli(["train", "--config", cfg, "--out", str(tmp_path / "o")], capsys)
    assert status == 2
    copy = tmp_path / "o" / "ckpt.tmp" / METRICS
    assert f"no space left on device writing {copy}: " in err.strip().splitlines()[-1]


def test_invalid_utf8_is_one_line_naming_the_file_and_line(shards_dir, tmp_path, capsys):
    from tapernorm.data import load_hf_text

    cfg = tmp_path / "run.yaml"
    cfg.write_bytes(b"train:\n  steps: 5\nname: caf\xe9\n")
    status, err = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "o")], capsys)
    assert status == 2 and one_line(err) == (
        f"tapernorm train: error: config file {cfg}: not UTF-8 text (byte 0xe9 at line 3, "
        "column 10: invalid continuation byte)"
    )
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"one\n<|endoftext|>\ntwo \xff\n")
    with pytest.raises(ValueError, match=f"{text}: not UTF-8 text .byte 0xff at line 3"):
        load_hf_text("toy", "train", local_path=str(text))
    pytest.importorskip("datasets")
    records = tmp_path / "train.jsonl"
    records.write_bytes(b'{"text": "fine"}\n{"text": "bad \xff"}\n')
    with pytest.raises(ValueError, match=f"{records}: record 2 .its 'text'. is not UTF-8"):
        load_hf_text("toy", "train", local_path=str(records))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config-json", "[1, 2]"], "--config-json: top level must be an object, not list"),
        (["--config-json", '{"data": {"dir": "d"}, "train": {"steps": 2}, "variant": [1]}'],
         "config key variant: [1] is not one of"),
        (["--set", "data.dir=d", "--set", "train.steps=1e30"],
         "config key train.steps: 1000000000000000019884624838656 does not fit a 64-bit integer"),
        (["--set", "data.dir=d", "--set", "train.steps=2", "--set", "seed=4294967296"],
         "config key seed: 4294967296 is greater than the maximum of 4294967295"),
        (["--set", "data.dir=d", "--set", "train.steps=2", "--set", "anchor.lam=1e39"],
         "config key anchor.lam: 1e+39 overflows float32"),
    ],
)  # fmt: skip
def test_bad_run_configs_are_one_line_naming_the_key(argv, message, tmp_path, capsys):
    status, err = run_cli(["train", *argv, "--out", str(tmp_path / "o")], capsys)
    assert status == 2 and message in one_line(err)
    assert not (tmp_path / "o").exists()


def test_too_many_eval_windows_are_refused_before_step_1(shards_dir, tmp_path, capsys):
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir)
    argv = [
        "train",
        "--config",
        cfg,
        "--set",
        "log.eval_windows=1e12",
        "--out",
        str(tmp_path / "o"),
    ]
    status, err = run_cli(argv, capsys)
    assert status == 2 and "the largest first (log.eval_windows;" in one_line(err)
    assert not (tmp_path / "o").exists()


def test_an_evaluation_out_of_memory_names_its_batch_size(
    shards_dir, tmp_path, monkeypatch, capsys
):
    def no_memory(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")

    train(tiny_run(shards_dir, train={"steps": 3}), tmp_path / "run")
    monkeypatch.setattr(tapernorm.training.evaluation, "mean_ce", no_memory)
    argv = ["eval", "--model", str(tmp_path / "run"), "--data", str(shards_dir), "--windows", "4"]
    status, err = run_cli(argv, capsys)
    assert status == 2 and one_line(err) == (
        "tapernorm eval: error: out of memory evaluating 4 windows of 32 tokens in batches of 16: "
        "lower --batch-size"
    )
    cfg = tiny_yaml(tmp_path / "run.yaml", shards_dir, steps=2)
    status, err = run_cli(["train", "--config", cfg, "--out", str(tmp_path / "o")], capsys)
    assert status == 2 and err.strip().splitlines()[-1].endswith("lower log.eval_batch_size")


def test_a_target_after_configfile_is_named_as_such(tmp_path):
    from tapernorm.config import ConfigError
    from tapernorm.workflow import check_config_files

    schema = str(ROOT / "workflow/schemas/config.schema.yaml")
    check_config_files([str(ROOT / "config/ci.yaml")], schema)
    target = tmp_path / "eval.json"
    target.write_text(json.dumps({"name": "x", "val_loss": 1.0}))
    with pytest.raises(ConfigError, match=f"config file {target}: not a workflow config .*put "):
        check_config_files([str(ROOT / "config/ci.yaml"), str(target)], schema)
    typo = tmp_path / "typo.yaml"
    typo.write_text("data: {}\npretrian: {}\n")
    with pytest.raises(ConfigError, match=f"config file {typo}: config key pretrian: unknown"):
        check_config_files([str(typo)], schema)


def test_the_workflow_jobs_wait_for_a_runs_lock():
    """The workflow sets the variable that makes `tapernorm train` wait (docs/usage.md)."""
    common = (ROOT / "workflow/rules/common.smk").read_text()
    assert 'os.environ.setdefault(WAIT_ENV, "1")' in common
    from tapernorm.cli import build_parser

    os.environ.pop(WAIT_ENV, None)
    assert build_parser().parse_args(["train", "--out", "x"]).wait is False
    os.environ[WAIT_ENV] = "1"
    try:
        assert build_parser().parse_args(["train", "--out", "x"]).wait is True
        assert build_parser().parse_args(["train", "--out", "x", "--no-wait"]).wait is False
    finally:
        del os.environ[WAIT_ENV]
