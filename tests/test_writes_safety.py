"""Never through a link, never before checking (issue 55, items 3 and 5): the project's own files
are not written through symbolic links, a run directory is checked whole before anything in it is
removed, a finished run is replaced only with --force, a tokenizer is checked against its recorded
sha256, concurrent exports are locked and their leftovers removed, arguments that are not text and
configs that cannot fit are refused before any work; each in one line, nothing lost."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import tiny_run

from tapernorm.cli import main
from tapernorm.runtime.links import LinkRefused
from tapernorm.training.lock import LOCK_NAME, run_lock
from tapernorm.training.loop import train
from tapernorm.training.state import RunDirError

RUN_FILES = ("config.json", "eval.json", "metrics.jsonl", "model.safetensors")


@pytest.fixture(scope="module")
def finished(shards_dir, tmp_path_factory):
    """A finished tiny run (4 steps) and its config."""
    cfg = tiny_run(shards_dir, train={"steps": 4}, log={"every": 1, "ckpt_every": 2})
    out = tmp_path_factory.mktemp("finished") / "run"
    train(cfg, out)
    return cfg, out


def _copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def _snapshot(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# ---- never through a link ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "what"),
    [
        (LOCK_NAME, "the run's lock file"),
        ("metrics.jsonl", "the run's metrics.jsonl"),
        ("config.json", "the run's config.json"),
        ("eval.json", "the run's eval.json"),
        ("ckpt/state.json", "a file of the run's checkpoint"),
        ("ckpt", "the run's checkpoint"),
    ],
)
def test_a_run_file_that_is_a_link_is_refused_and_its_target_kept(finished, tmp_path, name, what):
    cfg, src = finished
    out = _copy_run(src, tmp_path / "run")
    target = tmp_path / "precious.txt"
    target.write_text("mine\n")
    if (out / name).is_dir():
        import shutil

        shutil.rmtree(out / name)
    (out / name).unlink(missing_ok=True)
    (out / name).symlink_to(target)
    before = _snapshot(out)
    other = tiny_run(cfg.data.dir, train={"steps": 4, "lr": 1e-3})  # would start over
    for config in (cfg, other):
        with pytest.raises(LinkRefused, match=f"{out / name}, {what}, is a symbolic link"):
            train(config, out, force=True)
    assert target.read_text() == "mine\n"
    assert _snapshot(out) == before


@pytest.mark.parametrize("dangling", [False, True])
def test_the_lock_never_writes_through_a_link(tmp_path, dangling):
    target = tmp_path / ("absent" if dangling else "precious.txt")
    if not dangling:
        target.write_text("mine\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(target)
    with pytest.raises(LinkRefused, match="is a symbolic link"), run_lock(out):
        pass
    assert (target.read_text() == "mine\n") if not dangling else not target.exists()
    assert (out / LOCK_NAME).is_symlink()


def test_a_gpu_slot_file_that_is_a_link_is_refused(tmp_path):
    from tapernorm.machine.gpu_slots import _open_slot

    target = tmp_path / "precious.txt"
    target.write_text("mine\n")
    slots = tmp_path / "slots"
    slots.mkdir()
    (slots / "gpu-0.lock").symlink_to(target)
    with pytest.raises(LinkRefused, match="gpu-0.lock, a GPU slot file, is a symbolic link"):
        _open_slot(slots, "0")
    assert target.read_text() == "mine\n"


# ---- a directory checked whole before anything in it is removed --------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [("ckpt", "file"), ("ckpt.old", "file"), ("eval.json", "dir"), ("model.safetensors", "dir")],
)
def test_a_run_name_of_the_wrong_kind_is_one_line_and_nothing_is_removed(
    finished, tmp_path, name, kind
):
    cfg, src = finished
    out = _copy_run(src, tmp_path / "run")
    path = out / name
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if kind == "file":
        path.write_text("not a checkpoint\n")
        wanted = "is a file, not a directory"
    else:
        path.mkdir()
        (path / "mine.txt").write_text("mine\n")
        wanted = "is a directory, not a file"
    before = _snapshot(out)
    other = tiny_run(cfg.data.dir, train={"steps": 4, "lr": 1e-3})  # would start over
    for config in (cfg, other):
        with pytest.raises(RunDirError, match=f"{path}, .*, {wanted}: tapernorm train removes"):
            train(config, out, force=True)
    assert _snapshot(out) == before


# ---- a finished run is replaced only with --force ----------------------------------------------


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"train": {"steps": 4, "lr": 1e-3}}, "another config (train.lr)"),
        ({"model": {"n_layer": 1}}, "another config (model.n_layer)"),
        ({"seed": 3}, "another config (seed)"),
    ],
)
def test_a_finished_run_is_not_replaced_by_another_config_without_force(
    finished, tmp_path, change, named
):
    cfg, src = finished
    out = _copy_run(src, tmp_path / "run")
    before = _snapshot(out)
    sections = {"train": {"steps": 4}, "log": {"every": 1, "ckpt_every": 2}}
    other = tiny_run(cfg.data.dir, **{**sections, **change})
    with pytest.raises(RunDirError) as e:
        train(other, out)
    line = str(e.value)
    assert line == (
        f"{out} holds a finished run of {named}: give a new --out, or add --force to replace "
        "it (its weights, record and eval.json are removed)"
    )
    assert _snapshot(out) == before
    assert train(cfg, out)["steps"] == 4  # the run itself: found finished, left as it is
    assert _snapshot(out) == before
    train(other, out, force=True)
    record = json.loads((out / "config.json").read_text())
    assert record["meta"]["provenance"]["replaced"] == f"a finished run of {named} (--force)"


def test_a_finished_run_without_its_checkpoint_is_compared_by_its_record(finished, tmp_path):
    import shutil

    cfg, src = finished
    out = _copy_run(src, tmp_path / "run")
    shutil.rmtree(out / "ckpt")
    other = tiny_run(cfg.data.dir, train={"steps": 4, "lr": 1e-3}, log={"ckpt_every": 2})
    with pytest.raises(RunDirError, match=r"finished run of another config \(train.lr\)"):
        train(other, out)
    assert (out / "eval.json").is_file()


def test_the_cli_refuses_a_finished_run_of_another_config_in_one_line(finished, tmp_path, capsys):
    cfg, src = finished
    out = _copy_run(src, tmp_path / "run")
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(cfg.to_dict()))
    args = ["train", "--config", str(config), "--out", str(out), "--set", "train.lr=0.002"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"tapernorm train: error: {out} holds a finished run of another config (train.lr): give "
        "a new --out, or add --force to replace it (its weights, record and eval.json are removed)"
    ]
    assert (out / "eval.json").is_file()
    assert main([*args, "--force"]) == 0
    assert "replaced" in json.loads((out / "config.json").read_text())["meta"]["provenance"]


def test_an_unfinished_run_of_another_config_still_starts_over(shards_dir, tmp_path):
    """(what the workflow relies on: Snakemake deletes a job's outputs, eval.json among them,
    before it reruns the job with a changed config)"""
    cfg = tiny_run(shards_dir, train={"steps": 4}, log={"every": 1, "ckpt_every": 2})
    train(cfg, tmp_path / "run")
    os.unlink(tmp_path / "run" / "eval.json")
    other = tiny_run(shards_dir, train={"steps": 4, "lr": 1e-3}, log={"ckpt_every": 2})
    assert train(other, tmp_path / "run")["steps"] == 4


# ---- a tokenizer is checked against its recorded sha256 ---------------------------------------


def _own_copy(shards_dir: Path, to: Path) -> Path:
    """A copy of the shards with a copy of their tokenizer model inside (named relative to them),
    which a test may spoil."""
    import shutil

    out = shutil.copytree(shards_dir, to)
    meta = json.loads((out / "meta.json").read_text())
    model = Path(shards_dir) / meta["tokenizer"]["model"]
    shutil.copyfile(model, out / "tokenizer.model")
    meta["tokenizer"]["model"] = "tokenizer.model"
    (out / "meta.json").write_text(json.dumps(meta))
    return out


@pytest.fixture
def own_shards(shards_dir, tmp_path):
    return _own_copy(shards_dir, tmp_path / "data")


def _spoil_tokenizer(shards: Path, how: str) -> Path:
    """The shards' tokenizer model replaced (garbage, cut short, or another valid model)."""
    meta = json.loads((shards / "meta.json").read_text())
    model = shards / meta["tokenizer"]["model"]
    assert model.parent == shards  # (never the shared shards' own)
    data = model.read_bytes()
    spoiled = {"garbage": b"not a sentencepiece model\n", "short": data[: len(data) // 2]}
    model.write_bytes(spoiled.get(how, data + b"\0"))
    return model


@pytest.mark.parametrize("how", ["garbage", "short", "appended"])
def test_a_tokenizer_not_the_recorded_one_is_one_line_naming_both_hashes(own_shards, how):
    from tapernorm.data.tokenizers import TokenizerChanged, load_tokenizer
    from tapernorm.runtime.digests import file_sha256

    meta = json.loads((own_shards / "meta.json").read_text())
    model = _spoil_tokenizer(own_shards, how)
    wanted = (
        f"tokenizer model {model} has sha256 {file_sha256(model)}, but the shards' meta.json "
        f"recorded {meta['tokenizer']['sha256']}"
    )
    with pytest.raises(TokenizerChanged, match=wanted):
        load_tokenizer(meta, str(own_shards))
    with pytest.raises(TokenizerChanged, match=wanted):  # training pins it with the data
        train(tiny_run(own_shards, train={"steps": 4}), own_shards.parent / "run")
    assert not (own_shards.parent / "run" / "config.json").exists()


def test_a_tokenizer_record_without_a_hash_is_read_as_it_is(own_shards):
    from tapernorm.data.tokenizers import load_tokenizer

    meta = json.loads((own_shards / "meta.json").read_text())
    del meta["tokenizer"]["sha256"]  # (shards made before the hash was recorded)
    assert load_tokenizer(meta, str(own_shards)).vocab_size == meta["vocab_size"]


def test_export_of_a_run_whose_tokenizer_changed_is_one_line(shards_dir, tmp_path, capsys):
    shards = _own_copy(shards_dir, tmp_path / "data")
    run = tmp_path / "run"
    train(tiny_run(shards, variant="all_aux", train={"steps": 4}), run)
    _spoil_tokenizer(shards, "garbage")
    assert main(["export-hf", "--model", str(run), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "but the shards' meta.json recorded" in err[0], err
    assert not (tmp_path / "hf").exists()


# ---- NaN in a record is an event, not a number -------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        '{"step": 3, "gate": 1.0, "loss": null, "non_finite": {"loss": "nan"}}',
        '{"step": 3, "gate": 1.0, "loss": NaN}',
        '{"step": 3, "gate": 1.0, "loss": -Infinity}',
    ],
)
def test_a_non_finite_loss_in_a_record_is_not_in_the_spike_reference(line):
    from tapernorm.training.blowups import MIN_REFERENCE, SpikeDetector

    records = [{"step": s, "gate": 1.0, "loss": 2.0} for s in range(MIN_REFERENCE)]
    detector = SpikeDetector.from_records(1.0, [*records, json.loads(line)])
    assert list(detector.losses) == [2.0] * MIN_REFERENCE and detector.reference() == 2.0


@pytest.mark.parametrize(
    ("val", "shown"),
    [("NaN", None), ("Infinity", None), ('null, "non_finite": {"val_loss": "nan"}', "not finite")],
)
def test_an_exported_runs_non_finite_loss_is_an_event_or_an_error(finished, tmp_path, val, shown):
    from tapernorm.runtime.bookkeeping import BookkeepingError
    from tapernorm.training.export_run import loss_text, run_outcome

    _, src = finished
    run = _copy_run(src, tmp_path / "run")
    (run / "eval.json").write_text(f'{{"val_loss": {val}, "diverged": false, "steps": 4}}')
    if shown is None:
        with pytest.raises(BookkeepingError, match=f"{run / 'eval.json'} is not valid JSON"):
            run_outcome(run)
    else:
        assert loss_text(run_outcome(run)) == "not finite (nan)"


# ---- exports: one at a time into a directory, and no leftovers --------------------------------


@pytest.fixture(scope="module")
def tapered(shards_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tapered") / "run"
    train(tiny_run(shards_dir, variant="all_aux", train={"steps": 4}), out)
    return out


@pytest.mark.parametrize("out_name", ["hf", "export dir"])
def test_a_second_export_into_one_directory_is_refused_while_one_runs(tapered, tmp_path, out_name):
    from tapernorm.training.export_run import export_run
    from tapernorm.training.lock import RunLocked, export_lock, export_lock_path

    out = tmp_path / out_name
    with export_lock(out):  # an export into `out` running (its lock held)
        with pytest.raises(RunLocked, match=f"--out {out} is being written by another tapernorm"):
            export_run(tapered, out)
        assert not out.exists()
        export_run(tapered, tmp_path / "other")  # another directory is free
    export_run(tapered, out)
    assert json.loads((out / "verify.json").read_text())["ok"]
    assert not export_lock_path(out).exists()  # released


def test_a_killed_exports_hidden_copies_are_removed_by_the_next_and_only_they(tapered, tmp_path):
    from tapernorm.training.export_run import export_run

    out = tmp_path / "hf"
    killed = [tmp_path / ".hf.0badc0de.tmp", tmp_path / ".hf.12345678.tmp"]
    for i, left in enumerate(killed):
        left.mkdir()
        (left / "model.safetensors").write_bytes(b"x" * 100)
        if i:
            (left / "config.json").write_text("{}")
    kept = {
        tmp_path / ".hf.abcdef01.tmp": "notes.txt",  # holds a file no export writes
        tmp_path / ".hf.abcdef01.failed": "verify.json",  # a failed export, kept on purpose
        tmp_path / ".other.abcdef01.tmp": "config.json",  # beside another directory
        tmp_path / ".hf.nothex!.tmp": "config.json",
    }
    for path, name in kept.items():
        path.mkdir()
        (path / name).write_text("mine\n")
    export_run(tapered, out)
    assert not any(p.exists() for p in killed)
    assert all((p / name).read_text() == "mine\n" for p, name in kept.items())
    assert {p.name for p in tmp_path.iterdir()} == {"hf", *(p.name for p in kept)}


# ---- arguments that are not text --------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [b"export-hf", b"--model", b"run", b"--out", b"caf\xe9"],
        [b"train", b"--config", b"x.yaml", b"--out", b"r\xff\xfeun"],
        [b"table", b"2", b"--runs", b"a\x80b", b"--out", b"t"],
        [b"fold", b"--model", b"\xc3(", b"--out", b"f"],
    ],
)
def test_an_argument_that_is_not_utf8_is_one_line_naming_it(tmp_path, argv):
    import subprocess
    import sys

    bad = next(a for a in argv if not _utf8(a))
    script = "import sys; from tapernorm.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable.encode(), b"-c", script.encode(), *argv],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    shown = repr(bad)[2:-1]
    assert lines == [
        f"tapernorm: error: argument '{shown}' is not valid UTF-8 text: give it a UTF-8 name "
        "(see tapernorm --help)"
    ]
    assert list(tmp_path.iterdir()) == []


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_a_lone_surrogate_is_refused_too(capsys):
    with pytest.raises(SystemExit) as e:
        main(["export-hf", "--model", "m", "--out", "x\ud800y"])
    assert e.value.code == 2
    assert "argument 'x\\ud800y' is not valid UTF-8 text" in capsys.readouterr().err


# ---- a run that cannot fit is refused before its first step ------------------------------------


@pytest.mark.parametrize(
    ("sections", "named"),
    [
        ({"train": {"steps": 4, "batch_size": 100_000_000}}, "train.batch_size 100000000"),
        ({"model": {"n_embd": 4_000_000, "n_head": 2}}, "model.n_embd 4000000"),
        ({"model": {"block_size": 2_000_000_000}}, "model.block_size 2000000000"),
        ({"log": {"eval_windows": 10**12}}, "log.eval_windows 1000000000000 validation windows"),
    ],
)
def test_a_run_that_cannot_fit_is_one_line_before_anything(shards_dir, tmp_path, sections, named):
    import torch

    from tapernorm.training.memory import TooLarge, check_fits

    cfg = tiny_run(shards_dir, **sections)
    with pytest.raises(TooLarge, match=f"run tiny needs at least .*{named}"):
        check_fits(cfg, torch.device("cpu"), free=64 << 30)  # a 64 GiB machine
    with pytest.raises(TooLarge, match="cpu has .* GiB free: lower those sizes"):
        train(cfg, tmp_path / "run")  # this machine
    assert not (tmp_path / "run").exists()


def test_the_tiny_runs_fit_and_the_bound_is_below_what_a_step_takes(shards_dir):
    import torch

    from tapernorm.training.memory import check_fits

    cfg = tiny_run(shards_dir)
    est = check_fits(cfg, torch.device("cpu"), free=64 << 20)  # fits in 64 MiB
    assert 0 < est.total < 64 << 20
    assert est.params <= 32 * 512 + 2 * 12 * 32 * 32  # (the model's own count is larger)


def test_the_record_is_never_appended_through_a_link(tmp_path):
    """(a link put in place of metrics.jsonl after the run directory was checked)"""
    from tapernorm.training.metrics_log import MetricsLog

    target = tmp_path / "precious.txt"
    target.write_text("mine\n")
    (tmp_path / "metrics.jsonl").symlink_to(target)
    with pytest.raises(LinkRefused, match="metrics.jsonl, the run's metrics.jsonl, is a symbolic"):
        MetricsLog(tmp_path / "metrics.jsonl", "tiny")
    assert target.read_text() == "mine\n"
