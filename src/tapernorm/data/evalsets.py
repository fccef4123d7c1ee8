"""Evaluation sets (Table 4): fixed rows of token ids, each row scored on its own.

`rows.bin` holds the rows (uint16, n_rows x row_len); `meta.json`, written last, describes them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..runtime import bookkeeping
from ..runtime.atomic import atomic_write_bytes
from ..runtime.jsonio import write_json
from .hf_datasets import load_hf_dataset, text_column
from .shards import TokenShards
from .tokenizers import GPT2_EOT_ID, gpt2_tokenizer

EVAL_SETS = {  # name -> (Hugging Face dataset, split); "heldout" is the fine-tuning shards' val split
    "heldout": None,
    "pile": ("apollo-research/monology-pile-uncopyrighted-tokenizer-gpt2", "train"),
    "pile_filtered": ("lucabaroni/apollo-pile-filtered-10k", "train"),
}
TOKEN_COLUMNS = ("input_ids", "tokens")  # columns of pre-tokenized datasets, in this order
EVAL_ROW_LEN = 1024
PREPARE_EVAL_HINT = "`tapernorm prepare-eval` (the Snakemake `prepare_eval` rule)"


def rows_from_stream(tokens: np.ndarray, row_len: int) -> np.ndarray:
    """A 1-D token stream cut into non-overlapping rows of `row_len` tokens (the tail dropped)."""
    n = len(tokens) // row_len
    return np.asarray(tokens[: n * row_len]).reshape(n, row_len)


def rows_from_sequences(values: np.ndarray, lengths: np.ndarray, row_len: int) -> np.ndarray:
    """Pre-tokenized sequences (concatenated `values`, one length each) as rows of `row_len`
    tokens: a sequence gives its first floor(len / row_len) rows, so a row never spans two."""
    rows, start = [], 0
    for n in lengths.tolist():
        k = n // row_len
        if k:
            rows.append(values[start : start + k * row_len].reshape(k, row_len))
        start += n
    if not rows:
        return np.zeros((0, row_len), dtype=np.int64)
    return np.concatenate(rows)


def _dataset_rows(ds, row_len: int, name: str) -> tuple[np.ndarray, dict]:
    """Rows of a dataset with a token column (read as is) or a text column (GPT-2 BPE, EOT after
    each document, documents joined and cut into rows); returns (rows, how they were made)."""
    import pyarrow.compute as pc

    column = next((c for c in TOKEN_COLUMNS if c in ds.column_names), None)
    if column is not None:
        col = ds.with_format("arrow")[column]
        values = np.asarray(pc.list_flatten(col), dtype=np.int64)
        lengths = np.asarray(pc.list_value_length(col), dtype=np.int64)
        rows = rows_from_sequences(values, lengths, row_len)
        return rows, {"column": column, "tokenization": "pre-tokenized (ids read as stored)"}
    if "text" not in ds.column_names:
        raise ValueError(
            f"{name}: no token column {list(TOKEN_COLUMNS)} and no 'text' column "
            f"(columns: {ds.column_names})"
        )
    tok = gpt2_tokenizer()
    docs = text_column(ds, "text", None)
    stream = [t for ids in tok.encode_batch(docs) for t in (*ids, tok.eot_id)]
    rows = rows_from_stream(np.asarray(stream, dtype=np.int64), row_len)
    return rows, {"column": "text", "tokenization": "gpt2 BPE, EOT after each document"}


def write_eval_set(rows: np.ndarray, vocab_size: int, out_dir: str, extra_meta: dict) -> dict:
    """out_dir/rows.bin (uint16, n_rows x row_len) and meta.json, written last."""
    rows = np.asarray(rows)
    if rows.ndim != 2 or len(rows) == 0:
        raise ValueError(f"an evaluation set needs a non-empty 2-D array of rows, got {rows.shape}")
    if vocab_size > 1 << 16:
        raise ValueError(f"vocab_size {vocab_size} does not fit uint16 rows")
    if rows.min() < 0 or rows.max() >= vocab_size:
        raise ValueError(f"token ids outside [0, {vocab_size}): {rows.min()}..{rows.max()}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "meta.json"
    meta_path.unlink(missing_ok=True)
    atomic_write_bytes(out / "rows.bin", rows.astype(np.uint16).tobytes())
    meta = {
        "n_rows": int(rows.shape[0]),
        "row_len": int(rows.shape[1]),
        "vocab_size": int(vocab_size),
        "dtype": "uint16",
        **extra_meta,
    }
    write_json(meta_path, meta)
    return meta


def prepare_eval_set(
    name: str,
    out_dir: str,
    row_len: int = EVAL_ROW_LEN,
    shards_dir: str | None = None,
    local_path: str | None = None,
    max_rows: int | None = None,
) -> dict:
    """Write evaluation set `name` (see EVAL_SETS) as rows of `row_len` GPT-2 token ids.

    "heldout": the val split of the token shards in `shards_dir` (for OpenWebText the paper's
    test_size=0.0005, seed=2357 split), cut into non-overlapping rows. "pile", "pile_filtered":
    the Hugging Face sets (already tokenized, 1024 tokens a row), from `local_path` if given, else
    the Hub; a set with a text column instead is tokenized with GPT-2 BPE, EOT after each document.
    `max_rows` keeps the first N rows (of a Hub set only the first N records are streamed: the
    Pile set holds tens of millions). Returns the meta dict.
    """
    if name not in EVAL_SETS:
        raise ValueError(f"unknown evaluation set {name!r}; choose one of {list(EVAL_SETS)}")
    if row_len < 2:
        raise ValueError(f"row_len must be >= 2, got {row_len}")
    if name == "heldout":
        if shards_dir is None:
            raise ValueError("the 'heldout' evaluation set needs the shards directory (--shards)")
        shards = TokenShards(shards_dir)
        rows = rows_from_stream(shards.tokens("val"), row_len)
        vocab_size = shards.vocab_size
        info = {"source": str(shards_dir), "corpus": shards.meta.get("corpus"), "split": "val"}
        info["tokenization"] = f"{shards.meta['tokenizer']['name']}, EOT after each document"
    else:
        hf_name, split = EVAL_SETS[name]
        key = f"finetune.eval.local_paths.{name}"
        ds = load_hf_dataset(hf_name, split, local_path, key=key, take=max_rows)
        rows, info = _dataset_rows(ds, row_len, hf_name)
        vocab_size = GPT2_EOT_ID + 1
        info.update(source=hf_name, split=split, local_path=local_path)
    if max_rows is not None:
        rows = rows[:max_rows]
    if len(rows) == 0:
        raise ValueError(f"evaluation set {name!r} has no complete row of {row_len} tokens")
    return write_eval_set(rows, vocab_size, out_dir, {"set": name, **info})


class EvalSet:
    """An evaluation set written by `write_eval_set`: rows scored one by one (x = row[:-1],
    targets = row[1:])."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = str(data_dir)
        meta_path = Path(data_dir) / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"no evaluation set in {data_dir}: {meta_path} is missing (written last, so the "
                f"set is absent or incomplete). Create it with {PREPARE_EVAL_HINT}."
            )
        self.meta = bookkeeping.read(bookkeeping.EVAL_SET_META, meta_path)
        n_rows, row_len = self.meta["n_rows"], self.meta["row_len"]
        path = Path(data_dir) / "rows.bin"
        expected = 2 * n_rows * row_len
        if not path.is_file() or path.stat().st_size != expected:
            raise ValueError(
                f"{path} is missing or has the wrong size (expected {expected} bytes): recreate "
                f"it with {PREPARE_EVAL_HINT}."
            )
        self._rows = np.memmap(path, dtype=np.uint16, mode="r").reshape(-1, row_len)

    @property
    def n_rows(self) -> int:
        return len(self._rows)

    @property
    def row_len(self) -> int:
        return self._rows.shape[1]

    def rows(self, max_rows: int | None = None) -> torch.Tensor:
        """The first `max_rows` rows (all if None) as int64 (n, row_len)."""
        return torch.from_numpy(self._rows[:max_rows].astype(np.int64))
