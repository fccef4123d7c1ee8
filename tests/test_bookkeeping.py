"""The bookkeeping fuzz: every file kind tapernorm reads back for its own bookkeeping (run lock,
GPU slot file, checkpoint state, run record, run result, manifest, Snakemake job record), damaged
every way (cut short, empty, a key of each wrong JSON type, a key missing, not an object): one
error of one line naming the file, through the kind's own reader too, and the file left as it was.
Then the readers that read these kinds, the data's meta.json and the environment lock through
their own code (run_summary, model_config, diverged, tails, replay, copy_record, the study's
records, lr-grid, TokenShards, EvalSet, check-env's reference): a few damaged files each, one
BookkeepingError of one line, nothing deleted or rewritten; the analysis's readers of meta.json
read a damaged one as not measured.
"""

import fcntl
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tapernorm.analysis.tables.job_times import read_record
from tapernorm.artifact.manifest import FORMAT, read_manifest
from tapernorm.cli import main
from tapernorm.cli.errors import one_line
from tapernorm.machine.gpu_slots import claim
from tapernorm.machine.job_resources import run_shape
from tapernorm.runtime import bookkeeping
from tapernorm.runtime.bookkeeping import BookkeepingError
from tapernorm.training.lock import run_lock
from tapernorm.training.state import read_state


def _locked_run(path: Path) -> None:
    with run_lock(path.parent):
        pass


def _held_slot(path: Path) -> None:
    holder = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        claim(1, ["0"], path.parent, wait=False)
    finally:
        os.close(holder)


# kind, where its file lies, a valid one, its required keys, its reader (raising on damage)
JSON_KINDS = {
    "run lock": (
        bookkeeping.RUN_LOCK,
        "run/train.lock",
        {"pid": 123, "host": "h"},
        ("pid", "host"),
        _locked_run,
    ),
    "gpu slot": (
        bookkeeping.GPU_SLOT,
        "slots/gpu-0.lock",
        {"pid": 123, "host": "h", "command": "tapernorm train"},
        ("pid", "host", "command"),
        _held_slot,
    ),
    "checkpoint state": (
        bookkeeping.CHECKPOINT_STATE,
        "run/ckpt/state.json",
        {"step": 3, "param_groups": [{"lr": 0.1}], "inputs": {}, "pruned": False},
        ("step", "param_groups"),
        lambda path: read_state(path.parent),
    ),
    "run record": (
        bookkeeping.RUN_RECORD,
        "run/config.json",
        {"model": {"block_size": 8}, "n_params": 10, "name": "r", "seed": 0, "train": {}},
        ("model",),
        run_shape,
    ),
    "run result": (
        bookkeeping.RUN_RESULT,
        "run/eval.json",
        {"val_loss": 4.0, "diverged": False, "steps": 5, "weights_step": 5, "diverged_step": None},
        ("val_loss", "diverged"),
        lambda path: bookkeeping.read(bookkeeping.RUN_RESULT, path),
    ),
    "manifest": (
        bookkeeping.MANIFEST,
        "results/manifest.json",
        {"format": FORMAT, "files": {}},
        ("format", "files"),
        read_manifest,
    ),
}
LIVE_EMPTY = {"run lock", "gpu slot"}  # an empty one is a claim being written: no error
COUNTS = {"pid", "step", "n_params", "steps", "weights_step", "diverged_step"}  # integers >= 0


def _wrong_values(key: str, valid: object) -> list:
    """JSON values of other types than `valid`'s (bool and int apart, int and float alike), and
    -1 for a count."""
    if isinstance(valid, bool):
        return [[1], 1, "true", None, {}]
    if isinstance(valid, int):
        return [[1], True, "1", 1.5, None, {}, *([-1] if key in COUNTS else [])]
    if isinstance(valid, float):
        return [[1], True, "4.0", {}]
    if valid is None:
        return [[1], True, "x", 1.5, *([-1] if key in COUNTS else [])]
    others = [[1], True, "x", 1, None, {"a": 1}]
    return [v for v in others if type(v) is not type(valid)]


def _json_cases() -> list:
    cases = []
    for name, (_, _, valid, required, _) in JSON_KINDS.items():
        text = json.dumps(valid)
        for cut in sorted({1, len(text) // 3, len(text) // 2, len(text) - 1}):
            cases.append((name, f"cut at {cut}", text[:cut]))
        if name not in LIVE_EMPTY:
            cases.append((name, "empty", ""))
        cases += [(name, f"top level {t}", t) for t in ("[1]", '"x"', "null", "3", "NaN")]
        for key, value in valid.items():
            for wrong in _wrong_values(key, value):
                cases.append((name, f"{key}={wrong!r}", json.dumps({**valid, key: wrong})))
        for key in required:
            rest = {k: v for k, v in valid.items() if k != key}
            cases.append((name, f"no {key}", json.dumps(rest)))
    return cases


def _write(tmp_path: Path, rel: str, text: str | bytes) -> Path:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _one_line_naming(e: BaseException, path: Path) -> str:
    reported = one_line(e)
    assert reported is not None, f"{type(e).__name__} would end in a traceback: {e}"
    message = str(e)
    assert "\n" not in message and str(path) in message
    return message


@pytest.mark.parametrize("name,case,text", _json_cases(), ids=lambda x: str(x)[:40])
def test_every_damaged_json_kind_is_one_line_and_left_as_it_is(tmp_path, name, case, text):
    kind, rel, _, _, reader = JSON_KINDS[name]
    path = _write(tmp_path, rel, text)
    with pytest.raises(BookkeepingError) as checked:
        bookkeeping.read(kind, path)
    _one_line_naming(checked.value, path)
    with pytest.raises(Exception) as raised:
        reader(path)
    _one_line_naming(raised.value, path)
    assert path.read_bytes() == text.encode()


@pytest.mark.parametrize("name", JSON_KINDS)
def test_a_valid_file_of_each_kind_is_read(tmp_path, name):
    kind, rel, valid, _, _ = JSON_KINDS[name]
    path = _write(tmp_path, rel, json.dumps(valid))
    assert bookkeeping.read(kind, path) == valid


def test_a_valid_file_passes_each_reader(tmp_path):
    assert run_shape(_write(tmp_path, "a/config.json", json.dumps(JSON_KINDS["run record"][2])))
    assert read_state(_write(tmp_path, "c/state.json", '{"step": 0, "param_groups": []}').parent)
    manifest = _write(tmp_path, "m.json", json.dumps(JSON_KINDS["manifest"][2]))
    assert read_manifest(manifest)["files"] == {}
    _write(tmp_path, "run/train.lock", "")  # (just created by another run_lock)
    _locked_run(tmp_path / "run" / "train.lock")
    assert not (tmp_path / "run" / "train.lock").exists()


def test_a_lock_holding_a_list_pid_is_one_line_not_a_type_error(tmp_path):
    lock = _write(tmp_path, "run/train.lock", '{"pid": [1], "host": "h"}')
    with pytest.raises(BookkeepingError) as e:
        _locked_run(lock)
    message = _one_line_naming(e.value, lock)
    assert "pid" in message and "a list, not an integer" in message
    assert "delete the file" in message
    assert lock.read_text() == '{"pid": [1], "host": "h"}'


def test_a_bool_is_not_an_integer(tmp_path):
    lock = _write(tmp_path, "run/train.lock", '{"pid": true, "host": "h"}')
    with pytest.raises(BookkeepingError, match="pid: it is true, not an integer"):
        bookkeeping.read(bookkeeping.RUN_LOCK, lock)


RECORD = "s\th:m:s\tmax_rss\n1.5\t0:00:01\t10\n"
TSV_CASES = [
    *[(f"cut at {cut}", RECORD[:cut]) for cut in (1, 3, 15, len(RECORD) - 4)],
    ("empty", ""),
    ("blank", "\n\n"),
    ("no s column", RECORD.replace("s\th:m:s", "x\th:m:s")),
    *[(f"s={v!r}", RECORD.replace("1.5\t", f"{v}\t")) for v in ("[1]", "true", "", "x", "nan")],
    ("negative", RECORD.replace("1.5\t", "-1\t")),
    ("a short row", RECORD + "2.0\n"),
    ("not UTF-8", b"s\th:m:s\n\xff\t0\n"),
]


@pytest.mark.parametrize("case,text", TSV_CASES, ids=[c for c, _ in TSV_CASES])
def test_every_damaged_job_record_is_one_line_and_left_as_it_is(tmp_path, case, text):
    path = _write(tmp_path, "records/train/run.tsv", text)
    with pytest.raises(BookkeepingError) as e:
        read_record(path)
    _one_line_naming(e.value, path)
    assert path.read_bytes() == (text.encode() if isinstance(text, str) else text)


def test_a_valid_job_record_is_read(tmp_path):
    assert read_record(_write(tmp_path, "r.tsv", RECORD + "2.5\t0:00:02\t10\n")) == 2.0


def test_the_cli_says_one_line_for_a_damaged_job_record(tmp_path, capsys):
    path = _write(tmp_path, "records/train/run.tsv", "s\th:m:s\n[1]\t0\n")
    assert main(["job-times", str(tmp_path / "records")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tapernorm job-times: error: ") and err.count("\n") == 1
    assert str(path) in err and "Traceback" not in err
    assert path.read_text() == "s\th:m:s\n[1]\t0\n"


def test_a_refused_hf_checkpoint_shows_no_load_report(tmp_path):
    transformers = pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    from tapernorm.interop.hf_import import load_hf

    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=32, n_positions=8)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**cfg, "n_layer": 2}))
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    root = logging.getLogger("transformers")
    root.addHandler(handler)
    before = hf_logging.get_verbosity()
    try:
        with pytest.raises(ValueError, match="do not match its config.json") as e:
            load_hf(str(tmp_path / "hf"))
    finally:
        root.removeHandler(handler)
    assert "\n" not in str(e.value)
    assert not [r for r in seen if "LOAD REPORT" in r.getMessage()]
    assert hf_logging.get_verbosity() == before


# The readers that read these kinds (and the data's meta.json, the environment lock) through their
# own code: each, given a damaged file, raises BookkeepingError (one line naming the file; the CLI
# prints it as one) and leaves every file where it was, as it was.
RUN_CONFIG = {
    "model": {"n_embd": 8, "block_size": 8},
    "name": "r",
    "seed": 0,
    "train": {"steps": 2, "batch_size": 1},
}
RUN_EVAL = {"val_loss": 4.0, "diverged": True, "steps": 2, "weights_step": 0, "diverged_step": 1}
SHARDS = {"vocab_size": 64, "eot_id": 0, "train_tokens": 10, "val_tokens": 5, "tokenizer": {}}
EVAL_SET = {"n_rows": 2, "row_len": 9, "vocab_size": 64, "dtype": "uint16"}
STUDY_RECORD = {**RUN_CONFIG, "data": {"dir": "data/x"}}
ENV = {"made": {"distributions": {"torch": "2.0"}}}


def _summary(root: Path) -> object:
    from tapernorm.training.checkpoint import run_summary

    return run_summary(root / "run")


def _model_config(root: Path) -> object:
    from tapernorm.training.checkpoint import model_config

    return model_config(root / "run")


def _diverged(root: Path) -> object:
    from tapernorm.training.divergence import diverged

    return diverged(root / "run")


def _run_info(root: Path) -> object:
    from tapernorm.analysis.studies.tails import run_info

    return run_info(root / "run")


def _folded(root: Path) -> object:
    from tapernorm.analysis.studies.tails import folded_subject

    return folded_subject(root / "fold")


def _replay(root: Path) -> object:
    from tapernorm.training.replay import run_batch

    return run_batch(root / "run", 1)


def _copy_record(root: Path) -> object:
    from tapernorm.analysis.studies.scaling_io import copy_record

    return copy_record(root / "run", root / "record-out")


def _study_record(root: Path) -> object:
    from conftest import config_files

    from tapernorm.workflow import Plan, validate_pipeline_config
    from tapernorm.workflow.scaling import record_or_run

    schema = Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml"
    family = Plan(validate_pipeline_config(config_files("config.yaml"), str(schema))).pretrain
    return record_or_run(root / "record", family, family.runs()[0])


def _lr_grid(root: Path) -> object:
    from tapernorm.analysis.studies.lr_grid import read_runs

    return read_runs([root / "run"])


def _shards(root: Path) -> object:
    from tapernorm.data import TokenShards

    return TokenShards(str(root / "data"))


def _shards_meta(root: Path) -> object:  # (export_run's tokenizer reads it so)
    from tapernorm.data.shards import read_meta

    return read_meta(root / "data")


def _eval_set(root: Path) -> object:
    from tapernorm.data.evalsets import EvalSet

    return EvalSet(root / "evalset")


def _env(name: str) -> Callable[[Path], object]:
    from tapernorm.machine.env_lock import reference_of

    return lambda root: reference_of(root / name)


GRID = {"command": "tapernorm lr-grid", "made": {}, "scale": None, "cells": [], "gaps": []}
REFERENCE = Path(__file__).resolve().parents[1] / "results/reference"
# a claims record as `tapernorm claims` writes it: a committed reference run's
CLAIMS = json.loads(sorted(REFERENCE.glob("*/results/claims.json"))[-1].read_text())


def _claims_grid(root: Path) -> object:
    from tapernorm.analysis.claims.document import load_lr_grid

    return load_lr_grid(root / "lr_grid/lr_grid.json")


def _beside_grid(root: Path) -> object:  # the committed grid beside a committed study
    from tapernorm.analysis.studies.lr_context import committed_grid

    (root / "scaling").mkdir(exist_ok=True)
    return committed_grid(root / "scaling")


def _grid_figure(root: Path) -> object:
    from tapernorm.analysis.figures.summary import fig_lr_grid

    return fig_lr_grid(root / "lr_grid/lr_grid.json")


def _study_lrs(root: Path) -> object:
    from tapernorm.analysis.studies.lr_context import study_lrs

    return study_lrs(root / "scaling", "dyt")


def _claims_figure(root: Path) -> object:
    from tapernorm.analysis.figures.summary import fig_claim_gaps

    return fig_claim_gaps(root / "results/claims.json")


def _home_page(root: Path) -> object:
    from tapernorm.analysis.report_home import write_home_page

    return write_home_page(root / "results/claims.json", root / "results/index.html", "rerun")


METRICS_LINE = '{"step": 1}\n'
# reader: (the damaged file, a valid one, the other files it reads beside, its reader)
READERS = {
    "run_summary config": ("run/config.json", RUN_CONFIG, {}, _summary),
    "run_summary eval": ("run/eval.json", RUN_EVAL, {"run/config.json": RUN_CONFIG}, _summary),
    "model_config": ("run/config.json", RUN_CONFIG, {}, _model_config),
    "diverged eval": ("run/eval.json", RUN_EVAL, {}, _diverged),
    "diverged config": ("run/config.json", RUN_CONFIG, {"run/eval.json": RUN_EVAL}, _diverged),
    "tails run config": ("run/config.json", RUN_CONFIG, {}, _run_info),
    "tails run eval": ("run/eval.json", RUN_EVAL, {"run/config.json": RUN_CONFIG}, _run_info),
    "tails folded": ("fold/folded/config.json", RUN_CONFIG, {}, _folded),
    "replay": ("run/config.json", {**RUN_CONFIG, "data": {"dir": "d"}}, {}, _replay),
    "copy_record eval": (
        "run/eval.json",
        RUN_EVAL,
        {"run/config.json": RUN_CONFIG, "run/metrics.jsonl": METRICS_LINE},
        _copy_record,
    ),
    "copy_record config": (
        "run/config.json",
        RUN_CONFIG,
        {"run/eval.json": RUN_EVAL, "run/metrics.jsonl": METRICS_LINE},
        _copy_record,
    ),
    "study record": (
        "record/config.json",
        STUDY_RECORD,
        {"record/eval.json": RUN_EVAL, "record/metrics.jsonl": METRICS_LINE},
        _study_record,
    ),
    "lr grid": ("run/config.json", RUN_CONFIG, {"run/eval.json": RUN_EVAL}, _lr_grid),
    "token shards": ("data/meta.json", SHARDS, {}, _shards),
    "shards meta": ("data/meta.json", SHARDS, {}, _shards_meta),
    "evaluation set": ("evalset/meta.json", EVAL_SET, {}, _eval_set),
    "env record": ("ref.json", ENV, {}, _env("ref.json")),
    "lr grid record (claims)": ("lr_grid/lr_grid.json", GRID, {}, _claims_grid),
    "lr grid record (beside a study)": ("lr_grid/lr_grid.json", GRID, {}, _beside_grid),
    "lr grid record (figure)": ("lr_grid/lr_grid.json", GRID, {}, _grid_figure),
    "study record's lr": (
        "scaling/runs/scaling/dyt-d64-s0-n600/config.json",
        {**STUDY_RECORD, "train": {"lr": 0.001}},
        {},
        _study_lrs,
    ),
    "claims record (figure)": ("results/claims.json", CLAIMS, {}, _claims_figure),
    "claims record (home page)": ("results/claims.json", CLAIMS, {}, _home_page),
}


def _damaged(valid: dict) -> list[tuple[str, str]]:
    """A few damaged versions of the JSON object `valid`: cut short, empty, not an object, a NaN,
    each key of it a list and missing."""
    text = json.dumps(valid)
    cases = [("cut", text[: len(text) // 2]), ("cut at the end", text[:-1]), ("empty", "")]
    cases += [("a list", "[1]"), ("NaN", text.replace("{", '{"x": NaN, ', 1))]
    for key in valid:
        cases.append((f"{key}=[1]", json.dumps({**valid, key: [1]})))
    return cases


def _reader_cases() -> list:
    cases = []
    for name, (_, valid, _, _) in READERS.items():
        cases += [(name, case, text) for case, text in _damaged(valid)]
    lock = [("empty", ""), ("cut", "tor"), ("no pins", "# a comment\n"), ("bytes", b"\xff==1\n")]
    cases += [("env lock", case, text) for case, text in lock]
    cases += [("env record", "names none", '{"made": {}}')]
    nested = {  # a key missing below the top level: the readers that read it say so in one line
        "claims record (home page)": {**CLAIMS, "made": {}},
        "claims record (figure)": {**CLAIMS, "claims": [{"grade": "yes"}]},
        "lr grid record (figure)": {**GRID, "cells": [{"lr": 0.1}]},
    }
    cases += [(name, "nested key missing", json.dumps(obj)) for name, obj in nested.items()]
    return cases


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _setup(root: Path, name: str, text: str | bytes) -> tuple[Path, Callable[[Path], object]]:
    if name == "env lock":
        return _write(root, "constraints.txt", text), _env("constraints.txt")
    rel, _, others, reader = READERS[name]
    for other, content in others.items():
        _write(root, other, content if isinstance(content, str) else json.dumps(content))
    return _write(root, rel, text), reader


@pytest.mark.parametrize("name,case,text", _reader_cases(), ids=lambda x: str(x)[:30])
def test_every_reader_of_a_damaged_file_is_one_line_and_deletes_nothing(tmp_path, name, case, text):
    path, reader = _setup(tmp_path, name, text)
    before = _tree(tmp_path)
    with pytest.raises(BookkeepingError) as raised:
        reader(tmp_path)
    _one_line_naming(raised.value, path)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("name", READERS)
def test_each_readers_valid_file_is_of_its_kind(tmp_path, name):
    """(So the damage above, not the valid file, is what each reader refuses.)"""
    path, reader = _setup(tmp_path, name, json.dumps(READERS[name][1]))
    try:
        reader(tmp_path)
    except BookkeepingError as e:
        raise AssertionError(f"{name}: the valid file refused: {e}") from None
    except (OSError, ValueError, RuntimeError):
        pass  # (a later file or check of the reader; not the bookkeeping file's)


def test_the_readers_take_valid_files(tmp_path):
    from tapernorm.training.checkpoint import run_summary

    _write(tmp_path, "run/config.json", json.dumps(RUN_CONFIG))
    _write(tmp_path, "run/eval.json", json.dumps(RUN_EVAL))
    assert run_summary(tmp_path / "run")["diverged_step"] == 1
    assert _diverged(tmp_path).step == 1
    assert _shards_meta(_write(tmp_path, "data/meta.json", json.dumps(SHARDS)).parent.parent)
    assert _env("ref.json")(_write(tmp_path, "ref.json", json.dumps(ENV)).parent) == {
        "torch": "2.0"
    }
    assert _env("c.txt")(_write(tmp_path, "c.txt", "torch==2.0\n").parent) == {"torch": "2.0"}


def test_a_damaged_model_config_is_fingerprinted_by_its_bytes(tmp_path):
    """The identity of a run's init model reads its config.json as its kind; a damaged one is
    identified by its bytes (loading it then says what is wrong), and left as it is."""
    from tapernorm.training.checkpoint import model_config
    from tapernorm.training.identity import fingerprint

    path = _write(tmp_path, "m/config.json", '{"model": [1]}')
    assert set(fingerprint("model", path)) == {"sha256"}
    path.write_text(json.dumps(RUN_CONFIG))
    assert fingerprint("model", path) == {"model": RUN_CONFIG["model"]}
    path.write_text('{"model": [1]}')
    with pytest.raises(BookkeepingError):
        model_config(tmp_path / "m")
    assert path.read_text() == '{"model": [1]}'


def test_the_cli_says_one_line_for_a_damaged_environment_record(tmp_path, capsys):
    path = _write(tmp_path, "ref.json", '{"made": [1]}')
    assert main(["check-env", "--against", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err
    assert path.read_text() == '{"made": [1]}'


@pytest.mark.parametrize("case,text", _damaged(SHARDS), ids=lambda x: str(x)[:30])
def test_the_analysis_reads_a_damaged_meta_json_as_not_measured(tmp_path, case, text):
    """The analysis reads the data's meta.json as its kind too, but a run's data directory may be
    elsewhere: a damaged one is not measured (the directory's name, no passes, no scale entry),
    never a traceback, and left as it is."""
    import pandas as pd

    from tapernorm.analysis.claims.scale_card import data_meta
    from tapernorm.analysis.comparable import unread_data
    from tapernorm.analysis.epochs import data_train_tokens
    from tapernorm.analysis.runs import corpus_of

    path = _write(tmp_path, "data/meta.json", text)
    runs = pd.DataFrame({"corpus": [str(path.parent)]})
    assert data_train_tokens(path.parent) is None and data_meta(runs) == {}
    assert corpus_of(runs) == str(path.parent) and unread_data(runs) == [str(path.parent)]
    assert path.read_bytes() == text.encode()


MARKER = {"output_set": "t", "command": "tapernorm table 1", "stamp": "0" * 16, "members": {}}


def _marker_cases() -> list:
    cases = _damaged(MARKER)
    cases += [("members a list", json.dumps({**MARKER, "members": ["t.csv"]}))]
    cases += [("members of numbers", json.dumps({**MARKER, "members": {"t.csv": 1}}))]
    cases += [("members a string", json.dumps({**MARKER, "members": "t.csv"}))]
    return cases


@pytest.mark.parametrize("case,text", _marker_cases(), ids=[c for c, _ in _marker_cases()])
def test_a_damaged_set_marker_is_an_incomplete_set_in_one_line(tmp_path, case, text):
    """An output set's marker is bookkeeping too (bookkeeping.SET_MARKER): damaged, the set and
    each member read through it are incomplete, in one line naming the marker; nothing removed."""
    from tapernorm.runtime.output_set import IncompleteSet, check_member, check_set

    member = _write(tmp_path, "t.csv", "a\n1\n")
    marker = _write(tmp_path, "t.set.json", text)
    before = _tree(tmp_path)
    for check in (lambda: check_set(marker), lambda: check_member(member)):
        with pytest.raises(IncompleteSet) as raised:
            check()
        assert "\n" not in str(raised.value) and str(marker) in str(raised.value)
    assert _tree(tmp_path) == before
