"""Hugging Face datasets, from the Hub (or its cache) or from a local copy.

A local copy is a `save_to_disk` directory, .txt files (documents separated by <|endoftext|>
lines) or .jsonl/.json/.parquet files. With no network, loading from the Hub fails in seconds with
DataUnavailableError, whose message says how to make and use a local copy.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .. import hub
from ..jsonio import read_text

if TYPE_CHECKING:
    import datasets


class DataUnavailableError(RuntimeError):
    """A dataset could not be loaded (no network and no local copy)."""


@contextlib.contextmanager
def _hub_offline_mode() -> Iterator[None]:
    """Temporarily put `datasets` and `huggingface_hub` in offline mode (cache only, no retries)."""
    import datasets
    import huggingface_hub.constants as hub_constants

    saved = []
    for module, attr in (
        (hub_constants, "HF_HUB_OFFLINE"),
        (datasets.config, "HF_HUB_OFFLINE"),
        (datasets.config, "HF_DATASETS_OFFLINE"),
    ):
        if hasattr(module, attr):
            saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, True)
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


def _unavailable_message(
    name: str, split: str, err: BaseException, key: str = "data.local_path", take: int | None = None
) -> str:
    load = f"datasets.load_dataset('{name}')"
    if take is not None:  # a slice of a big dataset: stream its first rows
        load = (
            f"datasets.Dataset.from_list(list(datasets.load_dataset('{name}', split='{split}', "
            f"streaming=True).take({take})))"
        )
    return (
        f"Could not load the Hugging Face dataset '{name}' (split '{split}'): no network access to "
        f"the Hub was possible and no cached copy was found ({type(err).__name__}: {err}).\n"
        "To use a local copy: on a machine with internet run\n"
        f"    python -c \"import datasets; {load}.save_to_disk('PATH')\"\n"
        f"copy PATH to this machine and set the config key `{key}: PATH` "
        "(or pass `--local-path PATH`)."
    )


def text_column(ds, text_field: str, max_docs: int | None, source: str = "dataset") -> list[str]:
    """The non-empty values of a Dataset's text column (the first `max_docs` rows, or all).
    `source` (its files) is named in the error for a value that is not UTF-8."""
    if text_field not in ds.column_names:
        raise ValueError(f"{source} has no column '{text_field}' (columns: {ds.column_names})")
    if max_docs is not None:
        ds = ds.select(range(min(max_docs, len(ds))))
    column = ds.with_format("arrow")[text_field]  # far faster than row-by-row access
    try:
        return [t for t in column.to_pylist() if t]
    except UnicodeDecodeError as e:
        row = next(i for i, value in enumerate(column) if not _decodes(value))
        raise ValueError(
            f"{source}: record {row + 1} (its '{text_field}') is not UTF-8 text ({e.reason} at "
            f"byte {e.start}); fix or drop that record"
        ) from None


def _decodes(value) -> bool:
    try:
        value.as_py()
    except UnicodeDecodeError:
        return False
    return True


_SPLIT_ALIASES = {
    "train": ("train",),
    "validation": ("validation", "valid", "val"),
    "test": ("test",),
}


def _names_split(filename: str, split: str) -> bool:
    words = re.split(r"[^a-z0-9]+", filename.lower())
    return any(a in words for a in _SPLIT_ALIASES.get(split, (split,)))


def _txt_documents(path: Path) -> list[str]:
    """A .txt file is one document, or several separated by lines holding only <|endoftext|>."""
    text = read_text(path)  # (not UTF-8: an error naming the file and line)
    parts = re.split(r"^\s*<\|endoftext\|>\s*$", text, flags=re.MULTILINE)
    return [p.strip("\n") for p in parts if p.strip()]


_SAVED_MARKERS = ("dataset_dict.json", "state.json", "dataset_info.json")
_DATA_SUFFIXES = (".txt", ".jsonl", ".json", ".parquet")


def _load_saved(path: Path, split: str):
    """A `save_to_disk` directory (Dataset, or DatasetDict: its `split`) as a Dataset."""
    import datasets

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"{path} has splits {list(ds)}, not '{split}'")
        ds = ds[split]
    return ds


def _local_files(path: Path, split: str) -> list[Path]:
    """The data files of `split` under a local copy: the file itself, or the directory's .txt,
    .jsonl/.json or .parquet files (one kind; only `split`'s if the file names name splits)."""
    if path.is_file():
        files = [path]
    else:
        files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in _DATA_SUFFIXES)
        known = [s for s in _SPLIT_ALIASES if any(_names_split(f.name, s) for f in files)]
        if known:  # the files are named by split: keep the requested one
            files = [f for f in files if _names_split(f.name, split)]
    kinds = {f.suffix for f in files}
    if not files or not kinds <= set(_DATA_SUFFIXES) or len(kinds) > 1:
        raise ValueError(
            f"{path}: expected a `save_to_disk` directory, or .txt, .jsonl/.json or .parquet "
            f"files (one kind) for split '{split}'; found {[f.name for f in files]}"
        )
    return files


def _load_files(files: list[Path]):
    """.jsonl/.json or .parquet files as one Dataset."""
    import datasets

    builder = "parquet" if files[0].suffix == ".parquet" else "json"
    return datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train")


def _load_local_text(local_path: str, split: str, text_field: str, max_docs: int | None):
    path = Path(local_path)
    if not path.exists():
        raise FileNotFoundError(f"data.local_path {local_path} does not exist")
    if path.is_dir() and any((path / f).exists() for f in _SAVED_MARKERS):
        return text_column(_load_saved(path, split), text_field, max_docs, str(path))
    files = _local_files(path, split)
    if files[0].suffix == ".txt":
        docs = [d for f in files for d in _txt_documents(f)]
        return docs[:max_docs] if max_docs is not None else docs
    names = str(files[0]) if len(files) == 1 else f"{path} ({len(files)} files)"
    return text_column(_load_files(files), text_field, max_docs, names)


def _hub_dataset(name: str, split: str, key: str = "data.local_path", take: int | None = None):
    """`split` of a Hub dataset (or its cached copy); with `take`, only its first `take` records,
    streamed. DataUnavailableError when neither is reachable (its message names the config `key`
    that takes a local copy)."""
    import datasets

    offline = hub.offline("HF_DATASETS_OFFLINE") or not hub.reachable()
    try:
        with _hub_offline_mode() if offline else contextlib.nullcontext():
            if take is None:
                return datasets.load_dataset(name, split=split)
            stream = datasets.load_dataset(name, split=split, streaming=True).take(take)
            return datasets.Dataset.from_list(list(stream))
    except Exception as err:
        hub_error = type(err).__module__.split(".")[0] in {"huggingface_hub", "requests", "httpx"}
        if offline or hub_error or isinstance(err, (ConnectionError, OSError, TimeoutError)):
            message = _unavailable_message(name, split, err, key, take)
            raise DataUnavailableError(message) from err
        raise


def load_hf_text(
    name: str,
    split: str,
    local_path: str | None = None,
    text_field: str = "text",
    max_docs: int | None = None,
) -> list[str]:
    """Documents of a Hugging Face text dataset, from `local_path` if given, else the Hub or cache.

    `local_path` may be a `save_to_disk` directory (Dataset or DatasetDict), a .txt file or a
    directory of .txt files (documents separated by <|endoftext|> lines), or .jsonl/.json/.parquet
    files; in a directory whose file names name splits (train, validation/valid/val, test) only
    `split` is read.
    Raises DataUnavailableError, saying how to supply a local copy, when the Hub cannot be reached.
    """
    if local_path:
        return _load_local_text(local_path, split, text_field, max_docs)
    return text_column(_hub_dataset(name, split), text_field, max_docs)


def load_hf_dataset(
    name: str,
    split: str,
    local_path: str | None = None,
    key: str = "data.local_path",
    take: int | None = None,
) -> datasets.Dataset:
    """`split` of a Hugging Face dataset as a `datasets.Dataset`: from `local_path` (a
    `save_to_disk` directory, or .jsonl/.json/.parquet files) if given, else the Hub or its cache.
    `take` keeps the first N records (from the Hub, streamed: big datasets are not downloaded).
    Raises DataUnavailableError, naming the config `key` for a local copy, when the Hub cannot be
    reached."""
    if not local_path:
        return _hub_dataset(name, split, key, take)
    path = Path(local_path)
    if not path.exists():
        raise FileNotFoundError(f"local copy {local_path} of {name} does not exist")
    if path.is_dir() and any((path / f).exists() for f in _SAVED_MARKERS):
        ds = _load_saved(path, split)
    else:
        files = _local_files(path, split)
        if files[0].suffix == ".txt":
            raise ValueError(
                f"{local_path}: {name} needs a `save_to_disk` directory or .jsonl/.parquet"
            )
        ds = _load_files(files)
    return ds if take is None else ds.select(range(min(take, len(ds))))
