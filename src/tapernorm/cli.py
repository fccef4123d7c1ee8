"""The `tapernorm` command line: every step of the pipeline, usable without Snakemake."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


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
    )
    print(json.dumps(meta, indent=2))
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from .config import load_run_config
    from .train import train

    if args.config_json is not None:
        from .config import resolve_run_config

        cfg = resolve_run_config(json.loads(args.config_json))
        if args.set:
            raise ValueError("--set cannot be combined with --config-json")
    else:
        cfg = load_run_config(args.config, args.set)
    result = train(cfg, args.out)
    print(json.dumps(result, indent=2))
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from .checkpoint import load_model, write_json
    from .data import TokenShards
    from .train import evaluate

    model = load_model(args.model)
    val = evaluate(model, TokenShards(args.data), args.windows, args.batch_size)
    result = {"model": str(args.model), "data": str(args.data), "val_loss": val, "eval": "g=0"}
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return 0


def _cmd_fold(args: argparse.Namespace) -> int:
    from .checkpoint import load_model, save_model, write_json
    from .data import TokenShards
    from .fold import export_explicit_scaling, fold_model, verify_fold
    from .norms import set_gate
    from .train import evaluate

    model = load_model(args.model).eval()
    set_gate(model, 0.0)
    folded, scaled = fold_model(model), export_explicit_scaling(model)
    shards = TokenShards(args.data)
    x, y = shards.val_windows(args.windows, model.config.block_size)
    report = {"model": str(args.model), "rtol": args.rtol}
    for name, exported in (("folded", folded), ("scaled", scaled)):
        check = verify_fold(model, exported, x, y, rtol=args.rtol)  # raises beyond tolerance
        report[name] = check
    val_ref = evaluate(model, shards, args.eval_windows, 16)
    val_folded = evaluate(folded, shards, args.eval_windows, 16)
    report["val_loss_reference"], report["val_loss_folded"] = val_ref, val_folded
    report["val_loss_diff"] = val_folded - val_ref
    out = Path(args.out)
    save_model(folded, out / "folded", {"source": str(args.model), "export": "folded"})
    save_model(scaled, out / "scaled", {"source": str(args.model), "export": "explicit scaling"})
    write_json(out / "verify.json", report)  # written last: its presence means success
    print(json.dumps(report, indent=2))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from . import bench
    from .checkpoint import write_json

    if args.which == "train-step":
        result = bench.bench_train_step(
            n_embd=args.n_embd,
            n_head=args.n_head,
            n_layer=args.n_layer,
            vocab_size=args.vocab,
            block_size=args.block_size,
            batch_size=args.batch_size,
            repeats=args.repeats,
            with_hf=not args.no_hf,
        )
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tapernorm", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser(
        "prepare-data", help="corpus -> tokenizer -> uint16 token shards + meta.json"
    )
    d.add_argument(
        "--corpus", required=True, help="shakespeare (embedded) | tinystories | openwebtext"
    )
    d.add_argument("--out", type=Path, required=True, help="shards directory")
    d.add_argument("--tokenizer", default="sentencepiece", choices=["sentencepiece", "gpt2"])
    d.add_argument("--vocab-size", type=int, default=512, help="SentencePiece vocabulary size")
    d.add_argument(
        "--local-path", help="local copy of a Hugging Face corpus (save_to_disk, jsonl, ...)"
    )
    d.add_argument("--max-docs", type=int, help="keep only the first N training documents")
    d.add_argument(
        "--tokenizer-chars", type=int, help="train SentencePiece on at most N characters"
    )
    d.add_argument(
        "--no-byte-fallback",
        action="store_true",
        help="SentencePiece without the 256 byte pieces (closed corpora, tiny vocabularies)",
    )
    d.set_defaults(func=_cmd_prepare_data)

    t = sub.add_parser("train", help="train (or resume) one run from a YAML run config")
    t.add_argument(
        "--config", type=Path, help="run config YAML (see tapernorm/schemas/run.schema.yaml)"
    )
    t.add_argument("--config-json", help="the run config as a JSON string (used by the workflow)")
    t.add_argument("--out", type=Path, required=True, help="run directory")
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set train.steps=100 (repeatable)",
    )
    t.set_defaults(func=_cmd_train)

    e = sub.add_parser("eval", help="validation loss of a model at g=0")
    e.add_argument("--model", type=Path, required=True, help="run or model directory")
    e.add_argument("--data", type=Path, required=True, help="token shards directory")
    e.add_argument("--windows", type=int, default=64)
    e.add_argument("--batch-size", type=int, default=16)
    e.add_argument("--out", type=Path, help="write the result as JSON here")
    e.set_defaults(func=_cmd_eval)

    f = sub.add_parser("fold", help="export a g=0 model as explicit scaling and folded, and verify")
    f.add_argument("--model", type=Path, required=True, help="run or model directory")
    f.add_argument("--data", type=Path, required=True, help="token shards (verification windows)")
    f.add_argument("--out", type=Path, required=True, help="writes folded/, scaled/, verify.json")
    f.add_argument("--windows", type=int, default=8, help="windows for the logit comparison")
    f.add_argument("--eval-windows", type=int, default=64, help="windows for the loss comparison")
    f.add_argument("--rtol", type=float, default=1e-5, help="max |dz| / max |z| allowed")
    f.set_defaults(func=_cmd_fold)
    from .analysis.cli import add_subcommands  # table, figure, claims

    add_subcommands(sub)

    b = sub.add_parser("bench", help="benchmarks (medians of interleaved repeats, ratios)")
    b.add_argument("which", choices=["train-step"])
    b.add_argument("--n-layer", type=int, default=8)
    b.add_argument("--n-head", type=int, default=16)
    b.add_argument("--n-embd", type=int, default=128)
    b.add_argument("--vocab", type=int, default=4096)
    b.add_argument("--block-size", type=int, default=256)
    b.add_argument("--batch-size", type=int, default=16)
    b.add_argument("--repeats", type=int, default=7)
    b.add_argument("--no-hf", action="store_true", help="skip the transformers comparison")
    b.add_argument("--out", type=Path, help="write the result as JSON here")
    b.set_defaults(func=_cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        if os.environ.get("TAPERNORM_TRACEBACK"):
            raise
        print(f"tapernorm {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
