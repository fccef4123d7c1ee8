"""Token shards: `train.bin` / `val.bin` hold uint16 token ids, documents joined by the end-of-text
token; `meta.json` describes them and is written last, so its presence means the shards are complete.

    write_shards(train_docs, val_docs, tokenizer, out_dir) -> TokenShards(out_dir).batch(...)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..atomic import atomic_open
from ..jsonio import write_json
from .tokenizers import Tokenizer

# How a user creates shards; named in errors when they are missing.
PREPARE_HINT = "`tapernorm prepare-data` (the Snakemake `prepare_data` rule)"


def _doc_batches(docs: Sequence[str], max_chars: int = 1 << 22) -> Iterator[list[str]]:
    batch: list[str] = []
    chars = 0
    for doc in docs:
        batch.append(doc)
        chars += len(doc)
        if chars >= max_chars or len(batch) >= 4096:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _write_split(
    docs: Sequence[str], tokenizer: Tokenizer, path: Path, num_threads: int, desc: str
) -> tuple[int, int]:
    """Encode docs (skipping empty ones), EOT after each, into a uint16 file; (tokens, docs)."""
    n_tokens = n_docs = 0
    with tqdm(total=len(docs), desc=desc, unit="doc", disable=None) as bar, atomic_open(path) as f:
        for batch in _doc_batches(docs):
            texts = [d for d in batch if d]
            encoded = tokenizer.encode_batch(texts, num_threads=num_threads) if texts else []
            out = np.empty(sum(len(ids) + 1 for ids in encoded), dtype=np.uint16)
            pos = 0
            for ids in encoded:
                out[pos : pos + len(ids)] = ids
                out[pos + len(ids)] = tokenizer.eot_id
                pos += len(ids) + 1
            f.write(out.tobytes())
            n_tokens += len(out)
            n_docs += len(encoded)
            bar.update(len(batch))
    return n_tokens, n_docs


def write_shards(
    train_docs: Sequence[str],
    val_docs: Sequence[str],
    tokenizer: Tokenizer,
    out_dir: str,
    extra_meta: dict | None = None,
    num_threads: int = 2,
) -> dict:
    """Tokenize documents into out_dir/{train,val}.bin (uint16, EOT after each doc) + meta.json.

    Every file is written under a temporary name and renamed; an old meta.json is removed first and
    the new one written last, so meta.json exists only when the shards beside it are complete.
    Empty documents are skipped. Returns the meta dict.
    """
    if tokenizer.vocab_size > 1 << 16:
        raise ValueError(
            f"vocab_size {tokenizer.vocab_size} does not fit the uint16 shards (at most 65536)"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "meta.json"
    meta_path.unlink(missing_ok=True)
    n_train, d_train = _write_split(train_docs, tokenizer, out / "train.bin", num_threads, "train")
    n_val, d_val = _write_split(val_docs, tokenizer, out / "val.bin", num_threads, "val")
    meta = {
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "tokenizer": _beside(tokenizer.meta(), out),
        "dtype": "uint16",
        "train_tokens": n_train,
        "val_tokens": n_val,
        "train_docs": d_train,
        "val_docs": d_val,
    }
    clash = set(meta) & set(extra_meta or {})
    if clash:
        raise ValueError(f"extra_meta may not override {sorted(clash)}")
    meta.update(extra_meta or {})
    write_json(meta_path, meta)
    return meta


def _beside(spec: dict, out: Path) -> dict:
    """The tokenizer spec with a model file inside `out` named relative to it (load_tokenizer's
    base_dir), so the shards' meta.json, and the runs' data fingerprints, do not change when the
    work directory is moved or cloned elsewhere."""
    model = spec.get("model")
    if model and Path(model).resolve().is_relative_to(out.resolve()):
        return {**spec, "model": Path(model).resolve().relative_to(out.resolve()).as_posix()}
    return spec


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
        try:
            self._meta = json.loads(meta_path.read_text(encoding="utf-8"))
            for key in ("vocab_size", "eot_id", "train_tokens", "val_tokens"):
                int(self._meta[key])
        except (ValueError, KeyError, TypeError) as e:
            problem = f"no {e} entry" if isinstance(e, KeyError) else f"not valid ({e})"
            raise ValueError(
                f"{meta_path}: {problem}; recreate the shards with {PREPARE_HINT}."
            ) from None
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
        data = self._check_fits(split, block_size)
        starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
        return self._windows(data, starts.tolist(), block_size)

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
