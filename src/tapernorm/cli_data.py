"""`tapernorm prepare-data`, `prepare-eval` and `rehearsal-inputs`: the data a run reads, written
once (token shards, evaluation sets, offline stand-ins)."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import jsonio
from .cli_args import (
    POSITIVE,
    number,
)


def _cmd_prepare_data(args: argparse.Namespace) -> int:
    from .data import prepare_shards

    meta = prepare_shards(
        args.corpus,
        str(args.out),
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        local_path=args.local_path,
        max_docs=args.max_docs,
        tokenizer_chars=args.tokenizer_chars,
        byte_fallback=not args.no_byte_fallback,
        workers=args.workers,
        tinystories=args.tinystories,
    )
    print(jsonio.dumps(meta, indent=2))
    return 0


def prepare_data_parser(sub) -> None:
    d = sub.add_parser(
        "prepare-data", help="corpus -> tokenizer -> uint16 token shards + meta.json"
    )
    d.add_argument(
        "--corpus", required=True, help="shakespeare (embedded) | tinystories | openwebtext"
    )
    d.add_argument("--out", type=Path, required=True, help="shards directory")
    d.add_argument(
        "--tokenizer",
        default="sentencepiece",
        choices=["sentencepiece", "gpt2"],
        help="sentencepiece: trained on the corpus; gpt2: GPT-2's BPE",
    )
    d.add_argument("--vocab-size", type=POSITIVE, default=512, help="SentencePiece vocabulary size")
    d.add_argument(
        "--local-path", help="local copy of a Hugging Face corpus (save_to_disk, jsonl, ...)"
    )
    d.add_argument("--max-docs", type=POSITIVE, help="keep only the first N training documents")
    d.add_argument(
        "--tokenizer-chars", type=POSITIVE, help="train SentencePiece on at most N characters"
    )
    d.add_argument(
        "--no-byte-fallback",
        action="store_true",
        help="SentencePiece without the 256 byte pieces (closed corpora, tiny vocabularies)",
    )
    d.add_argument(
        "--tinystories",
        choices=["v1", "v2"],
        default="v2",
        help="TinyStories version: v2 (GPT-4 stories, default) or v1; only its files are read",
    )
    d.add_argument(
        "--workers",
        type=POSITIVE,
        help="processes tokenizing the corpus (default: every CPU this process may use); "
        "the shards are the same for any number",
    )
    d.set_defaults(func=_cmd_prepare_data)


def _cmd_prepare_eval(args: argparse.Namespace) -> int:
    from .data import prepare_eval_set

    meta = prepare_eval_set(
        args.set,
        str(args.out),
        row_len=args.row_len,
        shards_dir=args.shards,
        local_path=args.local_path,
        max_rows=args.max_rows,
    )
    print(jsonio.dumps(meta, indent=2))
    return 0


def prepare_eval_parser(sub) -> None:
    from .data import EVAL_SETS

    v = sub.add_parser(
        "prepare-eval", help="an evaluation set (Table 4) -> rows of GPT-2 token ids + meta.json"
    )
    v.add_argument("--set", required=True, choices=list(EVAL_SETS))
    v.add_argument("--out", type=Path, required=True, help="evaluation set directory")
    v.add_argument("--shards", help="heldout: the token shards whose val split is held out")
    v.add_argument("--local-path", help="pile sets: a local copy (save_to_disk, jsonl, parquet)")
    v.add_argument("--row-len", type=number(int, 2), default=1024, help="tokens per row")
    v.add_argument("--max-rows", type=POSITIVE, help="keep the first N rows")
    v.set_defaults(func=_cmd_prepare_eval)


def _cmd_rehearsal_inputs(args: argparse.Namespace) -> int:
    from .data.standins import make_standins

    record = make_standins(args.out, seed=args.seed)
    print(jsonio.dumps(record, indent=2))
    return 0


def rehearsal_inputs_parser(sub) -> None:
    r = sub.add_parser(
        "rehearsal-inputs",
        help="offline stand-ins of the paper config's data sets and GPT-2 checkpoints "
        "(config/rehearsal.yaml)",
    )
    r.add_argument(
        "--out", type=Path, required=True, help="writes the stand-ins, standins.json last"
    )
    r.add_argument("--seed", type=int, default=0, help="fixes every stand-in (default: 0)")
    r.set_defaults(func=_cmd_rehearsal_inputs)
