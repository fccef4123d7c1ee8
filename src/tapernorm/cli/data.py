"""`tapernorm prepare-data`, `prepare-eval` and `rehearsal-inputs`: the data a run reads, written
once (token shards, evaluation sets, offline stand-ins)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import section_defaults
from ..runtime import jsonio
from ..runtime.out_dirs import claim_dir, is_temporary, json_with, only_names, refuse_inside
from .args import POSITIVE, force_arg, number, section_settings, with_default

SHARD_FILES = ("train.bin", "val.bin", "tokenizer.model", "tokenizer.vocab", "meta.json")
EVAL_SET_FILES = ("rows.bin", "meta.json")


def is_shards_dir(out: Path) -> bool:
    """Whether `out` holds prepare-data's earlier output: its meta.json, or only its other files
    (an interrupted preparation's: meta.json is written last)."""
    return json_with(out / "meta.json", ("vocab_size", "train_tokens")) or only_names(
        out, lambda name: name in SHARD_FILES[:-1] or is_temporary(name)
    )


def is_eval_set_dir(out: Path) -> bool:
    """Whether `out` holds prepare-eval's earlier output (or an interrupted one's files)."""
    return json_with(out / "meta.json", ("n_rows", "row_len")) or only_names(
        out, lambda name: name in EVAL_SET_FILES[:-1] or is_temporary(name)
    )


DATA_KEYS = {  # the config's data: keys -> the prepare-data options that set them
    "corpus": "corpus",
    "tokenizer": "tokenizer",
    "vocab_size": "vocab_size",
    "byte_fallback": "byte_fallback",
    "tinystories": "tinystories",
    "local_path": "local_path",
    "max_docs": "max_docs",
    "tokenizer_chars": "tokenizer_chars",
}


def data_settings(args: argparse.Namespace) -> dict:
    """The data: section prepare-data makes shards of: --config-json (or the schema's defaults),
    each option given replacing its key."""
    flags = {key: getattr(args, dest) for key, dest in DATA_KEYS.items()}
    return section_settings(args.config_json, "data", flags)


def _cmd_prepare_data(args: argparse.Namespace) -> int:
    from ..data import prepare_shards

    data = data_settings(args)
    refuse_inside(args.out, {"corpus copy (local_path)": data["local_path"]})
    claim_dir(args.out, "prepare-data", is_shards_dir, args.force)
    meta = prepare_shards(
        data["corpus"],
        str(args.out),
        tokenizer=data["tokenizer"],
        vocab_size=data["vocab_size"],
        local_path=data["local_path"],
        max_docs=data["max_docs"],
        tokenizer_chars=data["tokenizer_chars"],
        byte_fallback=data["byte_fallback"],
        workers=args.workers,
        tinystories=data["tinystories"],
    )
    print(jsonio.dumps(meta, indent=2))
    return 0


def prepare_data_parser(sub) -> None:
    defaults = section_defaults("data")
    d = sub.add_parser(
        "prepare-data",
        help="corpus -> tokenizer -> uint16 token shards + meta.json",
        description="Stream a corpus, train or build its tokenizer, write token shards. The "
        "corpus is the workflow config's data: section, given as --config-json or by the options "
        "below (an option given with --config-json replaces its key).",
    )
    d.add_argument(
        "--config-json",
        metavar="JSON",
        help="the config's data: section as a JSON object (corpus, tokenizer, vocab_size, ...; a "
        "key left out takes its default); the fine-tuning corpus: finetune.data's keys and "
        '"tokenizer": "gpt2"',
    )
    d.add_argument(
        "--corpus",
        help=with_default("shakespeare (embedded) | tinystories | openwebtext", defaults["corpus"]),
    )
    d.add_argument("--out", type=Path, required=True, help="shards directory")
    d.add_argument(
        "--tokenizer",
        choices=["sentencepiece", "gpt2"],
        help=with_default(
            "sentencepiece: trained on the corpus; gpt2: GPT-2's BPE", defaults["tokenizer"]
        ),
    )
    d.add_argument(
        "--vocab-size",
        type=POSITIVE,
        help=with_default("SentencePiece vocabulary size", defaults["vocab_size"]),
    )
    d.add_argument(
        "--local-path", help="local copy of a Hugging Face corpus (save_to_disk, jsonl, ...)"
    )
    d.add_argument("--max-docs", type=POSITIVE, help="keep only the first N training documents")
    d.add_argument(
        "--tokenizer-chars", type=POSITIVE, help="train SentencePiece on at most N characters"
    )
    d.add_argument(
        "--byte-fallback",
        action=argparse.BooleanOptionalAction,
        help="--no-byte-fallback: SentencePiece without the 256 byte pieces (closed corpora, "
        f"tiny vocabularies) (default: {'yes' if defaults['byte_fallback'] else 'no'})",
    )
    d.add_argument(
        "--tinystories",
        choices=["v1", "v2"],
        help=with_default(
            "TinyStories version: v2 (GPT-4 stories) or v1; only its files are read",
            defaults["tinystories"],
        ),
    )
    d.add_argument(
        "--workers",
        type=POSITIVE,
        help="processes tokenizing the corpus (default: every CPU this process may use); "
        "the shards are the same for any number",
    )
    force_arg(d, "prepare-data", f"its files ({', '.join(SHARD_FILES)})")
    d.set_defaults(func=_cmd_prepare_data)


ALL_ROWS = "all"  # --max-rows all: every row (the config's max_rows: null)


def eval_settings(args: argparse.Namespace) -> dict:
    """What prepare-eval writes: row_len, max_rows and the set's local_path, from --config-json
    (the config's finetune.eval: section) or the schema's defaults, each option given replacing
    its key."""
    flags = {"row_len": args.row_len, "max_rows": args.max_rows}
    ev = section_settings(args.config_json, "finetune.eval", flags)
    local_path = args.local_path or ev["local_paths"].get(args.set)
    max_rows = None if ev["max_rows"] == ALL_ROWS else ev["max_rows"]
    return {"row_len": ev["row_len"], "max_rows": max_rows, "local_path": local_path}


def _cmd_prepare_eval(args: argparse.Namespace) -> int:
    from ..data import prepare_eval_set

    ev = eval_settings(args)
    refuse_inside(
        args.out, {"token shards (--shards)": args.shards, "local copy": ev["local_path"]}
    )
    claim_dir(args.out, "prepare-eval", is_eval_set_dir, args.force)
    meta = prepare_eval_set(
        args.set,
        str(args.out),
        row_len=ev["row_len"],
        shards_dir=args.shards,
        local_path=ev["local_path"],
        max_rows=ev["max_rows"],
    )
    print(jsonio.dumps(meta, indent=2))
    return 0


def _rows(text: str) -> int | str:
    return ALL_ROWS if text == ALL_ROWS else POSITIVE(text)


def prepare_eval_parser(sub) -> None:
    from ..data import EVAL_SETS

    defaults = section_defaults("finetune.eval")
    v = sub.add_parser(
        "prepare-eval", help="an evaluation set (Table 4) -> rows of GPT-2 token ids + meta.json"
    )
    v.add_argument(
        "--config-json",
        metavar="JSON",
        help="the config's finetune.eval: section as a JSON object (row_len, max_rows, "
        "local_paths: the set's is read; a key left out takes its default); an option given too "
        "replaces its key",
    )
    v.add_argument("--set", required=True, choices=list(EVAL_SETS))
    v.add_argument("--out", type=Path, required=True, help="evaluation set directory")
    v.add_argument("--shards", help="heldout: the token shards whose val split is held out")
    v.add_argument("--local-path", help="pile sets: a local copy (save_to_disk, jsonl, parquet)")
    v.add_argument(
        "--row-len", type=number(int, 2), help=with_default("tokens per row", defaults["row_len"])
    )
    v.add_argument(
        "--max-rows",
        type=_rows,
        metavar="N|all",
        help=with_default("keep the first N rows (all: every row)", defaults["max_rows"]),
    )
    force_arg(v, "prepare-eval", f"its files ({', '.join(EVAL_SET_FILES)})")
    v.set_defaults(func=_cmd_prepare_eval)


def _cmd_rehearsal_inputs(args: argparse.Namespace) -> int:
    from ..data.standins import MARKER, make_standins

    claim_dir(args.out, "rehearsal-inputs", lambda out: (out / MARKER).is_file(), args.force)
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
    force_arg(r, "rehearsal-inputs", "the stand-ins' files and directories")
    r.set_defaults(func=_cmd_rehearsal_inputs)
