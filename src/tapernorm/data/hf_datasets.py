"""Hugging Face datasets, from the Hub (or its cache) or from a local copy.

A local copy is a `save_to_disk` directory, .txt files (documents separated by <|endoftext|>
lines) or .jsonl/.json/.parquet files. With no network, loading from the Hub fails in seconds with
DataUnavailableError, whose message says how to make and use a local copy.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..interop import hub
from .documents import arrow_texts, jsonl_texts, txt_documents

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


def _load_call(
    name: str, split: str, take: int | None, revision: str | None, script: bool = False
) -> str:
    rev = f", revision='{revision}'" if revision else ""
    if script:  # (only a datasets release before 4.0 runs a loading script)
        rev += ", trust_remote_code=True"
    if take is not None:  # a slice of a big dataset: stream its first rows
        return (
            f"datasets.Dataset.from_list(list(datasets.load_dataset('{name}', split='{split}'"
            f"{rev}, streaming=True).take({take})))"
        )
    return f"datasets.load_dataset('{name}'{rev})"


def _unavailable_message(
    name: str,
    split: str,
    err: BaseException,
    key: str = "data.local_path",
    take: int | None = None,
    revision: str | None = None,
) -> str:
    if script_refused(err):
        cause = (
            f"it is a loading-script dataset at this revision, which datasets "
            f"{_datasets_version()} refuses ({type(err).__name__}: {err})"
        )
    else:
        cause = (
            "no network access to the Hub was possible and no cached copy was found "
            f"({type(err).__name__}: {err})"
        )
    script = script_refused(err) and revision is None
    where = "on a machine with internet"
    if script:
        where += ", with a datasets release before 4.0 (pip install 'datasets<4'),"
    call = _load_call(name, split, take, revision, script)
    return (
        f"Could not load the Hugging Face dataset '{name}' (split '{split}'): {cause}.\n"
        f"To use a local copy: {where} run\n"
        f'    python -c "import datasets; {call}'
        ".save_to_disk('PATH')\"\n"
        f"copy PATH to this machine and set the config key `{key}: PATH` "
        "(or pass `--local-path PATH`)."
    )


def script_refused(err: BaseException) -> bool:
    """Whether `err` is `datasets` (4.0 on) refusing a dataset's loading script."""
    return isinstance(err, RuntimeError) and "Dataset scripts are no longer supported" in str(err)


def _datasets_version() -> str:
    import datasets

    return datasets.__version__


ROWS_PER_BATCH = 1000


def text_column(ds, text_field: str, max_docs: int | None, source: str = "dataset") -> list[str]:
    """The non-empty values of a Dataset's text column (the first `max_docs` rows, or all).
    `source` (its files) is named in the error for a value that is not UTF-8."""
    return list(dataset_texts(ds, text_field, max_docs, source))


def dataset_texts(
    ds, text_field: str, max_docs: int | None = None, source: str = "dataset"
) -> Iterator[str]:
    """The non-empty values of the text column of a Dataset or IterableDataset (the first
    `max_docs` rows, or all), read a batch of rows at a time."""
    if ds.column_names is not None and text_field not in ds.column_names:
        raise ValueError(f"{source} has no column '{text_field}' (columns: {ds.column_names})")
    batches = ds.with_format("arrow").iter(batch_size=ROWS_PER_BATCH)
    return arrow_texts(batches, text_field, max_docs, source)


_SPLIT_ALIASES = {
    "train": ("train",),
    "validation": ("validation", "valid", "val"),
    "test": ("test",),
}


def _names_split(filename: str, split: str) -> bool:
    words = re.split(r"[^a-z0-9]+", filename.lower())
    return any(a in words for a in _SPLIT_ALIASES.get(split, (split,)))


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


def _load_files(files: list[Path], streaming: bool = False):
    """.jsonl/.json or .parquet files as one Dataset (read as it is iterated, if streaming)."""
    import datasets

    builder = "parquet" if files[0].suffix == ".parquet" else "json"
    data_files = [str(f) for f in files]
    return datasets.load_dataset(builder, data_files=data_files, split="train", streaming=streaming)


def _iter_local_text(
    local_path: str, split: str, text_field: str, max_docs: int | None
) -> Iterator[str]:
    path = Path(local_path)
    if not path.exists():
        raise FileNotFoundError(f"data.local_path {local_path} does not exist")
    if path.is_dir() and any((path / f).exists() for f in _SAVED_MARKERS):
        yield from dataset_texts(_load_saved(path, split), text_field, max_docs, str(path))
        return
    files = _local_files(path, split)
    if files[0].suffix == ".txt":
        docs = (d for f in files for d in txt_documents(f))
        yield from itertools.islice(docs, max_docs)
        return
    names = str(files[0]) if len(files) == 1 else f"{path} ({len(files)} files)"
    if files[0].suffix == ".jsonl":
        yield from jsonl_texts(files, text_field, max_docs, names)
        return
    yield from dataset_texts(_load_files(files, streaming=True), text_field, max_docs, names)


def _hub_offline() -> bool:
    return hub.offline("HF_DATASETS_OFFLINE") or not hub.reachable()


def _unavailable(err: BaseException, offline: bool) -> bool:
    """Whether `err`, loading from the Hub, means the dataset cannot be had here (rather than a
    bug or a wrong argument)."""
    hub_error = type(err).__module__.split(".")[0] in {"huggingface_hub", "requests", "httpx"}
    network = isinstance(err, (ConnectionError, OSError, TimeoutError))
    return offline or hub_error or network or script_refused(err)


def _hub_dataset(
    name: str,
    split: str,
    key: str = "data.local_path",
    take: int | None = None,
    revision: str | None = None,
):
    """`split` of a Hub dataset (or its cached copy); with `take`, only its first `take` records,
    streamed. DataUnavailableError when neither is reachable, or when the dataset is a loading
    script that `datasets` refuses (its message names the config `key` that takes a local copy and
    the command that makes one)."""
    import datasets

    offline = _hub_offline()
    try:
        with _hub_offline_mode() if offline else contextlib.nullcontext():
            if take is None:
                return datasets.load_dataset(name, split=split, revision=revision)
            stream = datasets.load_dataset(name, split=split, revision=revision, streaming=True)
            return datasets.Dataset.from_list(list(stream.take(take)))
    except Exception as err:
        if _unavailable(err, offline):
            message = _unavailable_message(name, split, err, key, take, revision)
            raise DataUnavailableError(message) from err
        raise


def _iter_hub_text(
    name: str, split: str, text_field: str, max_docs: int | None, revision: str | None, key: str
) -> Iterator[str]:
    """The texts of a Hub dataset: streamed when the Hub is reachable (nothing stored), from the
    cache (`datasets`' Arrow files, memory-mapped) when it is not. Errors of the Hub, while it
    is opened or read, are DataUnavailableError."""
    import datasets

    offline = _hub_offline()
    try:
        if offline:
            with _hub_offline_mode():
                ds = datasets.load_dataset(name, split=split, revision=revision)
        else:
            ds = datasets.load_dataset(name, split=split, revision=revision, streaming=True)
        yield from dataset_texts(ds, text_field, max_docs)
    except Exception as err:
        if _unavailable(err, offline):
            message = _unavailable_message(name, split, err, key, None, revision)
            raise DataUnavailableError(message) from err
        raise


def hub_file(repo: str, filename: str, recipe: str, key: str = "data.local_path") -> Path:
    """A file of a Hub dataset repository, downloaded to (or found in) the Hub cache.
    DataUnavailableError, with `recipe` (how to make a local copy) and the config `key` that takes
    it, when it cannot be had."""
    import datasets  # noqa: F401  (the hf extra: its absence is named as such)
    import huggingface_hub

    offline = _hub_offline()
    try:
        path = huggingface_hub.hf_hub_download(
            repo, filename, repo_type="dataset", local_files_only=offline
        )
    except Exception as err:
        if _unavailable(err, offline):
            raise DataUnavailableError(
                f"Could not get {filename} of the Hugging Face dataset '{repo}': no network "
                f"access to the Hub was possible and no cached copy was found "
                f"({type(err).__name__}: {err}).\n"
                f"To use a local copy: on a machine with internet run\n    {recipe}\n"
                f"copy PATH to this machine and set the config key `{key}: PATH` "
                "(or pass `--local-path PATH`)."
            ) from err
        raise
    return Path(path)


def iter_hf_text(
    name: str,
    split: str,
    local_path: str | None = None,
    text_field: str = "text",
    max_docs: int | None = None,
    revision: str | None = None,
    key: str = "data.local_path",
) -> Iterator[str]:
    """Documents of a Hugging Face text dataset, one at a time (never all in memory), from
    `local_path` if given, else the Hub (at `revision`, if given) or its cache.

    `local_path` may be a `save_to_disk` directory (Dataset or DatasetDict), a .txt file or a
    directory of .txt files (documents separated by <|endoftext|> lines), or .jsonl/.json/.parquet
    files; in a directory whose file names name splits (train, validation/valid/val, test) only
    `split` is read. `max_docs` keeps the first N documents (of a table, the first N rows).
    Raises DataUnavailableError, saying how to supply a local copy (config `key`), when the Hub
    cannot be reached or refuses the dataset.
    """
    if local_path:
        return _iter_local_text(local_path, split, text_field, max_docs)
    return _iter_hub_text(name, split, text_field, max_docs, revision, key)


def load_hf_text(
    name: str,
    split: str,
    local_path: str | None = None,
    text_field: str = "text",
    max_docs: int | None = None,
    revision: str | None = None,
) -> list[str]:
    """iter_hf_text's documents as a list (for small datasets)."""
    return list(iter_hf_text(name, split, local_path, text_field, max_docs, revision))


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
