"""Token shards: `train.bin` / `val.bin` hold uint16 token ids, documents joined by the end-of-text
token; `meta.json` describes them and is written last, so its presence means the shards are complete.

    write_shards(train_docs, val_docs, tokenizer, out_dir) -> TokenShards(out_dir).batch(...)
    write_split_shards(docs, tokenizer, out_dir, test_size, seed)   (a held-out split of one corpus)
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from ..runtime import bookkeeping
from ..runtime.atomic import atomic_open
from ..runtime.jsonio import write_json
from .encoding import Encoded, encode_to_file
from .tokenizers import Tokenizer

log = logging.getLogger(__name__)

# How a user creates shards; named in errors when they are missing.
PREPARE_HINT = "`tapernorm prepare-data` (the Snakemake `prepare_data` rule)"


META_KEYS = (  # meta.json's own keys, in order; extra_meta adds others after them
    "vocab_size",
    "eot_id",
    "tokenizer",
    "dtype",
    "train_tokens",
    "val_tokens",
    "train_docs",
    "val_docs",
)


def _start(out_dir: str, tokenizer: Tokenizer, extra_meta: dict | None) -> Path:
    """The shards directory, created, without its meta.json (written last, by _finish)."""
    if tokenizer.vocab_size > 1 << 16:
        raise ValueError(
            f"vocab_size {tokenizer.vocab_size} does not fit the uint16 shards (at most 65536)"
        )
    clash = set(META_KEYS) & set(extra_meta or {})
    if clash:
        raise ValueError(f"extra_meta may not override {sorted(clash)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").unlink(missing_ok=True)
    return out


def _write_split(
    docs: Iterable[str], tokenizer: Tokenizer, path: Path, workers: int, desc: str
) -> Encoded:
    """Encode docs (skipping empty ones), EOT after each, into a uint16 file."""
    with atomic_open(path) as f:
        return encode_to_file(docs, tokenizer, f, workers=workers, desc=desc)


def _finish(
    out: Path, tokenizer: Tokenizer, train: tuple[int, int], val: tuple[int, int], extra_meta
) -> dict:
    """meta.json (written last) for shards of (tokens, docs) in train and val."""
    meta = {
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "tokenizer": _beside(tokenizer.meta(), out),
        "dtype": "uint16",
        "train_tokens": train[0],
        "val_tokens": val[0],
        "train_docs": train[1],
        "val_docs": val[1],
    }
    meta.update(extra_meta or {})
    write_json(out / "meta.json", meta)
    return meta


def write_shards(
    train_docs: Iterable[str],
    val_docs: Iterable[str],
    tokenizer: Tokenizer,
    out_dir: str,
    extra_meta: dict | None = None,
    workers: int = 1,
) -> dict:
    """Tokenize documents into out_dir/{train,val}.bin (uint16, EOT after each doc) + meta.json.

    The documents may be any iterables (streamed: read once, in order); `workers` processes
    tokenize them (the same bytes for any number). Every file is written under a temporary name
    and renamed; an old meta.json is removed first and the new one written last, so meta.json
    exists only when the shards beside it are complete. Empty documents are skipped. Returns the
    meta dict.
    """
    out = _start(out_dir, tokenizer, extra_meta)
    train = _write_split(train_docs, tokenizer, out / "train.bin", workers, "train")
    val = _write_split(val_docs, tokenizer, out / "val.bin", workers, "val")
    return _finish(out, tokenizer, (train.tokens, train.docs), (val.tokens, val.docs), extra_meta)


def held_out_order(n: int, test_size: float | int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) document indices of a deterministic split, in their order: the rows and order
    of Hugging Face `Dataset.train_test_split(test_size, seed=seed)` (a permutation of the n
    documents; a float test_size takes ceil(test_size * n) of them, an int that many)."""
    n_test = math.ceil(test_size * n) if isinstance(test_size, float) else int(test_size)
    if not 0 < n_test < n:
        raise ValueError(f"test_size={test_size} gives {n_test} of {n} documents; need 0 < k < n")
    perm = np.random.default_rng(seed).permutation(n)
    return perm[n_test:], perm[:n_test]


GATHER_DOCS = 1 << 16


def _gather(source: int, starts: np.ndarray, lengths: np.ndarray, order, path: Path) -> int:
    """Copy documents' token runs (starts, lengths in tokens) of the uint16 file open as
    descriptor `source` into `path`, in `order`, one document at a time; the tokens written."""
    written = 0
    with atomic_open(path) as f:
        for lo in range(0, len(order), GATHER_DOCS):
            chunk = order[lo : lo + GATHER_DOCS]
            for start, n in zip(starts[chunk].tolist(), lengths[chunk].tolist(), strict=True):
                run = os.pread(source, 2 * n, 2 * start)
                if len(run) != 2 * n:
                    raise OSError(f"short read of the temporary token file for {path}")
                f.write(run)
                written += n
    return written


def write_split_shards(
    docs: Iterable[str],
    tokenizer: Tokenizer,
    out_dir: str,
    test_size: float | int,
    seed: int,
    max_train_docs: int | None = None,
    extra_meta: dict | None = None,
    workers: int = 1,
) -> dict:
    """Shards of a corpus that ships one split: its non-empty documents held out as by
    held_out_order (the first `max_train_docs` of the train order kept, if given).

    The documents are read once and tokenized in their order into a temporary file beside the
    shards (its per-document token counts kept, 8 bytes a document); the shards then gather each
    document's tokens in the split's order. Same bytes as tokenizing
    split_documents(list(docs), test_size, seed), without holding the texts.
    """
    out = _start(out_dir, tokenizer, extra_meta)
    fd, name = tempfile.mkstemp(prefix=".source-order.", suffix=".tmp", dir=out)
    try:
        with os.fdopen(fd, "wb") as f:
            encoded = encode_to_file(
                docs, tokenizer, f, workers=workers, keep_lengths=True, desc="corpus"
            )
        lengths = encoded.lengths
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        train_order, val_order = held_out_order(len(lengths), test_size, seed)
        if max_train_docs is not None:
            train_order = train_order[:max_train_docs]
        start = time.perf_counter()
        source = os.open(name, os.O_RDONLY)
        try:
            n_train = _gather(source, starts, lengths, train_order, out / "train.bin")
            n_val = _gather(source, starts, lengths, val_order, out / "val.bin")
        finally:
            os.close(source)
        log.info(
            "held-out split (test_size=%s, seed=%d): %d train and %d val documents gathered "
            "in %.1f s",
            test_size,
            seed,
            len(train_order),
            len(val_order),
            time.perf_counter() - start,
        )
    finally:
        os.unlink(name)
    train, val = (n_train, len(train_order)), (n_val, len(val_order))
    return _finish(out, tokenizer, train, val, extra_meta)


def _beside(spec: dict, out: Path) -> dict:
    """The tokenizer spec with a model file inside `out` named relative to it (load_tokenizer's
    base_dir), so the shards' meta.json, and the runs' data fingerprints, do not change when the
    work directory is moved or cloned elsewhere."""
    model = spec.get("model")
    if model and Path(model).resolve().is_relative_to(out.resolve()):
        return {**spec, "model": Path(model).resolve().relative_to(out.resolve()).as_posix()}
    return spec


def read_meta(data_dir: str | Path) -> dict:
    """The meta.json of the token shards in `data_dir`, checked as its kind
    (bookkeeping.SHARDS_META: BookkeepingError naming it if it is damaged)."""
    return bookkeeping.read(bookkeeping.SHARDS_META, Path(data_dir) / "meta.json")


class TokenShards:
    """Memory-mapped train/val token shards written by `write_shards`."""

    SPLITS = ("train", "val")

    def __init__(self, data_dir: str, train_tokens: int | None = None) -> None:
        """`train_tokens` keeps only the first N training tokens (a small slice trained for many
        epochs: the memorization regime of the scale-anchor ablation)."""
        self.data_dir = str(data_dir)
        meta_path = Path(data_dir) / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"no token shards in {data_dir}: {meta_path} is missing (written last, so the "
                f"shards are absent or incomplete). Create them with {PREPARE_HINT}."
            )
        self._meta = read_meta(data_dir)
        if self._meta.get("dtype", "uint16") != "uint16":
            raise ValueError(f"{meta_path}: unsupported dtype {self._meta['dtype']!r}")
        self._tokens: dict[str, np.ndarray] = {}
        for split in self.SPLITS:
            path = Path(data_dir) / f"{split}.bin"
            expected = int(self._meta[f"{split}_tokens"])
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path} is missing although {meta_path} exists; recreate the shards with "
                    f"{PREPARE_HINT}."
                )
            size = path.stat().st_size
            if size != 2 * expected:
                raise ValueError(
                    f"{path} has {size} bytes but {meta_path} says {expected} uint16 tokens "
                    f"({2 * expected} bytes): the file is truncated or stale; recreate the shards "
                    f"with {PREPARE_HINT}."
                )
            if expected == 0:
                self._tokens[split] = np.zeros(0, dtype=np.uint16)
            else:
                self._tokens[split] = np.memmap(path, dtype=np.uint16, mode="r")
        if train_tokens is not None:
            self._tokens["train"] = self._tokens["train"][:train_tokens]

    @property
    def meta(self) -> dict:
        return self._meta

    @property
    def vocab_size(self) -> int:
        return int(self._meta["vocab_size"])

    @property
    def eot_id(self) -> int:
        return int(self._meta["eot_id"])

    def tokens(self, split: str) -> np.ndarray:
        """The whole split as a read-only uint16 array (memory-mapped)."""
        if split not in self._tokens:
            raise ValueError(f"split must be one of {self.SPLITS}, got {split!r}")
        return self._tokens[split]

    def _check_fits(self, split: str, block_size: int) -> np.ndarray:
        data = self.tokens(split)
        if len(data) < block_size + 1:
            raise ValueError(
                f"the {split} split of {self.data_dir} has {len(data)} tokens, fewer than "
                f"block_size + 1 = {block_size + 1}: lower model.block_size or use more data"
            )
        return data

    def check_fits(self, block_size: int) -> None:
        """Both splits hold a window of block_size + 1 tokens (a run checks before its first step,
        not at the first batch or the final evaluation)."""
        for split in self.SPLITS:
            self._check_fits(split, block_size)

    def _windows(self, data: np.ndarray, starts: Iterable[int], block_size: int):
        rows = np.stack([data[s : s + block_size + 1] for s in starts]).astype(np.int64)
        if int(rows.max()) >= self.vocab_size:  # (an embedding lookup would end in an IndexError)
            raise ValueError(
                f"the shards in {self.data_dir} hold token id {int(rows.max())}, beyond the "
                f"vocab_size {self.vocab_size} of their meta.json: they do not belong together; "
                f"recreate them with {PREPARE_HINT}."
            )
        w = torch.from_numpy(rows)
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def batch(
        self, split: str, batch_size: int, block_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random contiguous windows: x (B, T) and targets y = x shifted by one; int64, CPU."""
        starts = self.batch_starts(split, batch_size, block_size, generator)
        return self._windows(self.tokens(split), starts, block_size)

    def batch_starts(
        self, split: str, batch_size: int, block_size: int, generator: torch.Generator
    ) -> list[int]:
        """The start of each window `batch` draws with `generator` (which this advances)."""
        data = self._check_fits(split, block_size)
        starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
        return starts.tolist()

    def windows(
        self, split: str, starts: list[int], block_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows of `split` starting at `starts` (a batch drawn again: tapernorm replay)."""
        data = self._check_fits(split, block_size)
        if any(not 0 <= s <= len(data) - block_size - 1 for s in starts):
            raise ValueError(
                f"window starts outside the {split} split of {self.data_dir} ({len(data)} tokens, "
                f"windows of {block_size} + 1): another data set than the run's?"
            )
        return self._windows(data, starts, block_size)

    def val_windows(
        self, n_windows: int | None, block_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed set of validation windows: `n_windows` evenly spaced starts from the first to the
        last possible one (overlapping if the split is short); None or 0 takes every
        non-overlapping window."""
        data = self._check_fits("val", block_size)
        last = len(data) - block_size - 1
        if not n_windows:
            starts = range(0, last + 1, block_size)
        else:
            starts = np.linspace(0, last, n_windows).round().astype(np.int64).tolist()
        return self._windows(data, starts, block_size)
