"""Corpus -> tokenizer -> shards, as one step (`tapernorm prepare-data`), streamed.

A corpus is read as a stream of documents, twice at most (the SentencePiece tokenizer trains on
its first `tokenizer_chars` characters, then every document is tokenized), by `workers` processes;
memory does not grow with its size.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .documents import txt_documents
from .encoding import available_cpus
from .hf_datasets import iter_hf_text
from .shakespeare import load_shakespeare
from .shards import held_out_order, write_shards, write_split_shards
from .tinystories import tinystories_files
from .tokenizers import Tokenizer, gpt2_tokenizer, train_sentencepiece

log = logging.getLogger(__name__)

HF_CORPORA = {  # name -> (HF dataset, train split, validation split or None: split off the train)
    "tinystories": ("roneneldan/TinyStories", "train", "validation"),
    "openwebtext": ("Skylion007/openwebtext", "train", None),
}
OWT_TEST_SIZE, OWT_SPLIT_SEED = 0.0005, 2357  # the OpenWebText held-out split of the paper
# OpenWebText on the Hub is a loading script that `datasets` 4 and later refuse; this revision of
# the same repository holds it as 80 parquet files (8,013,769 documents), which they read.
OWT_REVISION = "79d93d786212f7344586290adb811d4ae6a1762c"
HUB_REVISIONS = {"Skylion007/openwebtext": OWT_REVISION}
OWT_KEYS = "finetune.data.local_path"  # where the paper config reads OpenWebText


def split_documents(
    docs: Sequence[str], test_size: float, seed: int
) -> tuple[list[str], list[str]]:
    """A deterministic (train, test) split of a corpus that ships only a train split.

    Same rows and order as Hugging Face `Dataset.train_test_split(test_size, seed=seed)`: a float
    test_size takes ceil(test_size * n) documents, an int takes that many. (prepare_shards splits
    a streamed corpus by the same indices, held_out_order, without holding it.)
    """
    train, test = held_out_order(len(docs), test_size, seed)
    return [docs[i] for i in train], [docs[i] for i in test]


@dataclass(frozen=True)
class Corpus:
    """A corpus as streams of documents: `train()` and `val()` start a fresh pass each call.
    `val` None: the validation documents are held out of train by `held_out` (test_size, seed),
    over all of train's documents, before `max_train_docs` keeps the first of the rest."""

    train: Callable[[], Iterator[str]]
    val: Callable[[], Iterator[str]] | None
    held_out: tuple[float, int] | None = None
    max_train_docs: int | None = None


def corpus_source(
    name: str,
    local_path: str | None = None,
    max_docs: int | None = None,
    val_fraction: float = 0.05,
    tinystories: str = "v2",
) -> Corpus:
    """ "shakespeare" (embedded), "tinystories" (version `tinystories`, v1 or v2) or
    "openwebtext" as streams; `max_docs` keeps the first N training documents."""
    if name == "shakespeare":
        train, val = load_shakespeare(val_fraction=val_fraction)
        return Corpus(lambda: iter(train[:max_docs]), lambda: iter(val))
    if name == "tinystories":
        files = tinystories_files(tinystories, local_path)
        return Corpus(
            lambda: itertools.islice(txt_documents(files["train"]), max_docs),
            lambda: txt_documents(files["validation"]),
        )
    if name == "openwebtext":
        dataset, train_split, _ = HF_CORPORA[name]
        revision = HUB_REVISIONS[dataset]

        def docs() -> Iterator[str]:
            return iter_hf_text(
                dataset, train_split, local_path=local_path, revision=revision, key=OWT_KEYS
            )

        return Corpus(docs, None, (OWT_TEST_SIZE, OWT_SPLIT_SEED), max_docs)
    choices = ["shakespeare", *HF_CORPORA]
    raise ValueError(f"unknown corpus {name!r}; choose one of {choices}")


def load_corpus(
    name: str,
    local_path: str | None = None,
    max_docs: int | None = None,
    val_fraction: float = 0.05,
    tinystories: str = "v2",
) -> tuple[list[str], list[str]]:
    """(train, val) documents of a corpus as lists: for small corpora and tests (prepare_shards
    streams them instead)."""
    c = corpus_source(name, local_path, max_docs, val_fraction, tinystories)
    if c.val is not None:
        return list(c.train()), list(c.val())
    docs = list(c.train())
    train, val = held_out_order(len(docs), *c.held_out)
    return [docs[i] for i in np.asarray(train)[: c.max_train_docs]], [docs[i] for i in val]


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
    workers: int | None = None,
    tinystories: str = "v2",
) -> dict:
    """Stream a corpus, train (SentencePiece, on its first `tokenizer_chars` characters) or build
    (GPT-2 BPE) its tokenizer, write the shards with `workers` processes (default: every CPU this
    process may use). The bytes written do not depend on `workers`.

    The SentencePiece model is written beside the shards as out_dir/tokenizer.model.
    """
    src = corpus_source(corpus, local_path, max_docs, tinystories=tinystories)
    workers = available_cpus() if workers is None else workers
    if tokenizer == "sentencepiece":
        start = time.perf_counter()
        tok: Tokenizer = train_sentencepiece(
            src.train(),
            vocab_size,
            str(Path(out_dir) / "tokenizer"),
            seed=seed,
            max_chars=tokenizer_chars,
            byte_fallback=byte_fallback,
        )
        log.info(
            "tokenizer: SentencePiece %d trained in %.1f s", vocab_size, time.perf_counter() - start
        )
    elif tokenizer == "gpt2":
        tok = gpt2_tokenizer()
    else:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; choose 'sentencepiece' or 'gpt2'")
    meta = {"corpus": corpus}
    if src.val is None:
        test_size, split_seed = src.held_out
        return write_split_shards(
            src.train(), tok, out_dir, test_size, split_seed, src.max_train_docs, meta, workers
        )
    return write_shards(src.train(), src.val(), tok, out_dir, extra_meta=meta, workers=workers)
