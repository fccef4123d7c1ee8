"""The files tapernorm reads back for its own bookkeeping, each checked against its kind's
declaration: which keys it must hold and of which JSON types (a bool is never an integer).

A file that is missing, empty, cut short, not JSON, not an object or not of its kind is a
BookkeepingError with one line: the file, what is wrong with it and what to do. Reading never
deletes or rewrites the file: what to do with it is the user's call.

The kinds (KINDS): run locks, GPU slot files, checkpoint state, run and model config.json, eval.json,
manifests, Snakemake job records, the scaling study's run records, token shards' and evaluation
sets' meta.json, the environment references of check-env (a JSON record or the lock, a pip
constraints file, read by lines: read_lines), output sets' markers, the LR grid's record and
the claims record.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .jsonio import FileError, read_text


class BookkeepingError(FileError):
    """A bookkeeping file that cannot be read as its kind; the message is one line naming it."""


@dataclass(frozen=True)
class Type:
    name: str
    test: Callable[[object], bool]


def of(name: str, *types: type) -> Type:
    """The values of `types`; a bool only where bool is one of them."""
    return Type(name, lambda v: isinstance(v, types) and (bool in types or not isinstance(v, bool)))


def nullable(t: Type) -> Type:
    return Type(f"{t.name} or null", lambda v: v is None or t.test(v))


INT, STR, BOOL = of("an integer", int), of("a string", str), of("true or false", bool)
OBJECT, LIST, NUMBER = of("an object", dict), of("a list", list), of("a number", int, float)
NATURAL = Type("an integer >= 0", lambda v: INT.test(v) and v >= 0)
OBJECTS = Type(
    "a list of objects", lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v)
)


@dataclass(frozen=True)
class Kind:
    """A file kind: `keys` it must hold, `optional` ones checked where present, and `fix`, what
    the user does with a damaged one."""

    what: str
    keys: Mapping[str, Type]
    fix: str
    optional: Mapping[str, Type] = field(default_factory=dict)


RUN_LOCK = Kind(
    "a run's lock file (train.lock)",
    {"pid": NATURAL, "host": STR},
    "if no tapernorm train is writing this run, delete the file and run the command again",
)
GPU_SLOT = Kind(
    "a GPU slot file",
    {"pid": NATURAL, "host": STR, "command": STR},
    "if no job is using this GPU, delete the file and run the command again",
)
CHECKPOINT_STATE = Kind(
    "a checkpoint's state.json",
    {"step": NATURAL, "param_groups": LIST},
    "not a checkpoint's state as tapernorm train writes it, damaged?",
    {"run_config": OBJECT, "inputs": OBJECT, "metrics": OBJECT, "pruned": BOOL},
)
# how a run's damaged record is written again: train resumes from the run's checkpoint
RERUN_TRAIN = (
    "rerun `tapernorm train` on the run (it writes them again, from its checkpoint if kept), or "
    "leave it out"
)
RUN_RECORD = Kind(
    "a run's or model's config.json",
    {"model": OBJECT},
    RERUN_TRAIN,
    {
        **dict.fromkeys(("train", "taper", "anchor", "data", "meta"), OBJECT),
        "name": STR,
        "seed": INT,
        "n_params": NATURAL,
    },
)
RUN_RESULT = Kind(
    "a run's eval.json",
    {"val_loss": nullable(NUMBER), "diverged": BOOL},
    RERUN_TRAIN,
    {"steps": NATURAL, "weights_step": NATURAL, "diverged_step": nullable(NATURAL)},
)
MANIFEST = Kind(
    "a manifest",
    {"format": STR, "files": OBJECT},
    "make it again with tapernorm manifest, or restore it from where it came from",
)
JOB_RECORD = Kind(
    "a Snakemake job record (benchmark TSV)",
    {"s": NUMBER},
    "rerun the job, or delete the record to count the job as without one",
)
MODEL_CONFIG = Kind(
    "a model directory's config.json",
    {"model": OBJECT},
    "not a model directory tapernorm wrote? give a run's directory, or fold's folded/ or scaled/; "
    "if it is one, it is damaged: rerun what wrote it",
    RUN_RECORD.optional,
)
STUDY_RECORD = Kind(
    "a study's run record config.json",
    {"model": OBJECT, "data": OBJECT},
    "restore it from git, or delete the record's directory to make it again from its run",
    RUN_RECORD.optional,
)
PREPARE = "recreate the shards with `tapernorm prepare-data` (the Snakemake `prepare_data` rule)"
SHARDS_META = Kind(
    "token shards' meta.json",
    dict.fromkeys(("vocab_size", "eot_id", "train_tokens", "val_tokens"), NATURAL),
    PREPARE,
    {"tokenizer": OBJECT, "dtype": STR, "corpus": STR, "train_docs": NATURAL, "val_docs": NATURAL},
)
EVAL_SET_META = Kind(
    "an evaluation set's meta.json",
    dict.fromkeys(("n_rows", "row_len", "vocab_size"), NATURAL),
    "recreate it with `tapernorm prepare-eval` (the Snakemake `prepare_eval` rule)",
    {"dtype": STR},
)
ENV_RECORD = Kind(
    "a JSON record naming an environment (manifest, study, run config.json)",
    {},
    "give another --against, or the lock requirements/constraints-cpu.txt",
    {"made": OBJECT, "meta": OBJECT},
)
ENV_LOCK = Kind(
    "an environment lock (pip constraints file of name==version lines)",
    {},
    "restore it from git, or make it again with tapernorm lock-env",
)
SET_MARKER = Kind(
    "an output set's marker (<name>.set.json)",
    {
        **dict.fromkeys(("output_set", "command", "stamp"), STR),
        "members": Type(
            "an object of file names to sha256 hashes",
            lambda v: isinstance(v, dict) and all(isinstance(h, str) for h in v.values()),
        ),
    },
    "rerun the command that wrote the set: it writes the set and its marker again",
)
LR_GRID = Kind(
    "an LR grid's record (lr_grid.json)",
    {"command": STR, "made": OBJECT, "cells": OBJECTS, "gaps": OBJECTS, "scale": nullable(OBJECT)},
    "make it again with tapernorm lr-grid (the Snakemake `lr_grid` rule), or restore it from git",
)
CLAIMS_RECORD = Kind(
    "a claims record (claims.json)",
    {"claims": OBJECTS},
    "make it again with tapernorm claims (the Snakemake `claims` rule), or restore it from git",
    {
        **{"made": OBJECT, "stamp": STR, "inputs": OBJECT, "scale_card": OBJECTS},
        **{"config_sha256": nullable(STR), "rehearsal": BOOL},
    },
)
KINDS = (
    *(RUN_LOCK, GPU_SLOT, CHECKPOINT_STATE, RUN_RECORD, RUN_RESULT, MANIFEST, JOB_RECORD),
    *(MODEL_CONFIG, STUDY_RECORD, SHARDS_META, EVAL_SET_META, ENV_RECORD, ENV_LOCK),
    *(SET_MARKER, LR_GRID, CLAIMS_RECORD),
)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
    names |= {float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _line(kind: Kind, message: str) -> BookkeepingError:
    return BookkeepingError(" ".join(f"{message} ({kind.what}: {kind.fix})".split()))


def fail(kind: Kind, path: str | Path, problem: str) -> BookkeepingError:
    """The error of `path` with `problem`, on one line, with the kind's fix."""
    return _line(kind, f"{path} {problem}")


def check(kind: Kind, path: str | Path, obj: object, need: Iterable[str] = ()) -> dict:
    """`obj`, read from `path`, if it is an object of `kind` (with the optional keys `need`)."""
    if not isinstance(obj, dict):
        raise fail(kind, path, f"holds {_json_type(obj)}, not an object")
    declared = {**kind.optional, **kind.keys}
    required = {*kind.keys, *need}
    bad = []
    for key, t in declared.items():
        if key not in obj:
            if key in required:
                bad.append((key, "it is missing"))
        elif not t.test(obj[key]):
            bad.append((key, f"it is {_json_type(obj[key])}, not {t.name}"))
    if bad:
        names = " or ".join(k for k, _ in bad)
        raise fail(kind, path, f"has no valid {names}: {bad[0][0]}: {bad[0][1]}")
    return obj


def parse(kind: Kind, path: str | Path, text: str | bytes, need: Iterable[str] = ()) -> dict:
    """The object of `kind` in `text`, the contents of `path`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(kind, path, "is not UTF-8 text") from None
    if not text.strip():
        raise fail(kind, path, "is empty")
    try:
        obj = json.loads(text, parse_constant=_not_a_number)
    except ValueError as e:
        raise fail(kind, path, f"is not valid JSON (truncated?): {e}") from None
    return check(kind, path, obj, need)


def _not_a_number(token: str):
    raise ValueError(f"{token} is not a JSON number")


def read_lines(kind: Kind, path: str | Path) -> list[str]:
    """The lines of the text file `path` of `kind`; BookkeepingError naming it if it is missing,
    not a file, not UTF-8 or empty."""
    text = _text(kind, Path(path))
    if not text.strip():
        raise fail(kind, path, "is empty")
    return text.splitlines()


def _text(kind: Kind, path: Path) -> str:
    if path.exists() and not path.is_file():
        raise fail(kind, path, "is not a file")
    try:
        return read_text(path)
    except FileError as e:
        raise _line(kind, str(e)) from None


def read(kind: Kind, path: str | Path, need: Iterable[str] = ()) -> dict:
    """The object of `kind` in the file `path`; BookkeepingError naming it if it is not one."""
    return parse(kind, Path(path), _text(kind, Path(path)), need)


@contextmanager
def consuming(kind: Kind, path: str | Path) -> Iterator[None]:
    """Around code that reads the nested fields of a file of `kind` (checked at its top level
    only): a key missing there or a value of another type is the file's one-line error."""
    try:
        yield
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise fail(kind, path, f"has no valid nested field ({type(e).__name__}: {e})") from None


def _number(kind: Kind, path: Path, row: int, key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise fail(
            kind, path, f"has no valid {key} in row {row}: {value!r} is not a number"
        ) from None


def read_tsv(kind: Kind, path: str | Path) -> list[dict]:
    """The rows of the TSV of `kind` in `path`, its declared (number) columns as floats: at least
    one row, every row as long as the header."""
    path = Path(path)
    lines = list(csv.reader(io.StringIO(_text(kind, path)), delimiter="\t"))
    if not lines or not any(lines[0]):
        raise fail(kind, path, "is empty")
    header, rows = lines[0], [r for r in lines[1:] if r]
    missing = [k for k in kind.keys if k not in header]
    if missing:
        raise fail(kind, path, f"has no {' or '.join(map(repr, missing))} column")
    if not rows:
        raise fail(kind, path, "has a header and no rows (truncated?)")
    out = []
    for i, row in enumerate(rows, 1):
        if len(row) != len(header):
            raise fail(
                kind, path, f"row {i} has {len(row)} fields, the header {len(header)} (truncated?)"
            )
        record = dict(zip(header, row, strict=True))
        out.append({**record, **{k: _number(kind, path, i, k, record[k]) for k in kind.keys}})
    return out
