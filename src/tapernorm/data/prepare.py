"""Corpus -> tokenizer -> shards, as one step (`tapernorm prepare-data`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .hf_datasets import load_hf_text
from .shakespeare import load_shakespeare
from .shards import write_shards
from .tokenizers import Tokenizer, gpt2_tokenizer, train_sentencepiece

HF_CORPORA = {  # name -> (HF dataset, train split, validation split or None: split off the train)
    "tinystories": ("roneneldan/TinyStories", "train", "validation"),
    "openwebtext": ("Skylion007/openwebtext", "train", None),
}
OWT_TEST_SIZE, OWT_SPLIT_SEED = 0.0005, 2357  # the OpenWebText held-out split of the paper


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
