"""`tapernorm eval`, `fold`, `export-hf` and `taper-hf`: what is done with a trained model."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import section_defaults
from ..runtime import jsonio
from .args import (
    NON_NEGATIVE_FLOAT,
    POSITIVE,
    POSITIVE_FLOAT,
    allow_dirty_arg,
    device_arg,
    force_arg,
)


def _cmd_eval(args: argparse.Namespace) -> int:
    from ..runtime.out_dirs import claim_file, json_with, refuse_inside
    from ..training.checkpoint import write_json
    from ..training.evaluation import evaluate_model

    if args.out:
        inputs = {"model (--model)": args.model, "data (--data)": args.data}
        refuse_inside(args.out, {**inputs, "folded export (--folded)": args.folded})
        own = lambda path: json_with(path, ("model", "data", "eval"))  # noqa: E731
        claim_file(args.out, "eval", own, args.force)
    result = evaluate_model(
        args.model,
        args.data,
        args.windows,
        args.batch_size,
        args.max_rows,
        args.dtype,
        args.folded,
        args.device,
    )
    if args.out:
        write_json(args.out, result)
    print(jsonio.dumps(result, indent=2))
    return 0


def eval_parser(sub) -> None:
    e = sub.add_parser("eval", help="validation loss of a model at g=0")
    e.add_argument("--model", type=Path, required=True, help="run or model directory")
    e.add_argument(
        "--data",
        type=Path,
        required=True,
        help="token shards (val windows) or an evaluation set of prepare-eval (its rows)",
    )
    e.add_argument("--windows", type=POSITIVE, default=64, help="token shards: validation windows")
    e.add_argument("--batch-size", type=POSITIVE, default=16, help="sequences per forward pass")
    e.add_argument("--max-rows", type=POSITIVE, help="evaluation set: score the first N rows only")
    e.add_argument(
        "--dtype", default="float32", choices=["auto", "float32", "bfloat16"], help="evaluation set"
    )
    e.add_argument("--folded", type=Path, help="evaluation set: also score this folded export")
    device_arg(e)
    e.add_argument("--out", type=Path, help="write the result as JSON here")
    e.add_argument(
        "--force", action="store_true", help="replace an --out that is not an earlier result"
    )
    allow_dirty_arg(e, only_with_out=True)
    e.set_defaults(func=_cmd_eval)


def _cmd_fold(args: argparse.Namespace) -> int:
    from ..training.fold_run import fold_run

    report = fold_run(
        args.model,
        args.data,
        args.out,
        args.windows,
        args.eval_windows,
        args.rtol,
        args.device,
        force=args.force,
    )
    print(jsonio.dumps(report, indent=2))
    return 0


def fold_parser(sub) -> None:
    f = sub.add_parser("fold", help="export a g=0 model as explicit scaling and folded, and verify")
    f.add_argument("--model", type=Path, required=True, help="run or model directory")
    f.add_argument("--data", type=Path, required=True, help="token shards (verification windows)")
    f.add_argument("--out", type=Path, required=True, help="writes folded/, scaled/, verify.json")
    f.add_argument("--windows", type=POSITIVE, default=8, help="windows for the logit comparison")
    f.add_argument(
        "--eval-windows", type=POSITIVE, default=64, help="windows for the loss comparison"
    )
    f.add_argument(
        "--rtol",
        type=POSITIVE_FLOAT,
        default=section_defaults("fold")["rtol"],  # fold.FOLD_RTOL
        help="max |dz| / max |z| allowed",
    )
    device_arg(f)
    force_arg(f, "fold", "folded/'s and scaled/'s model files and verify.json")
    allow_dirty_arg(f)
    f.set_defaults(func=_cmd_fold)


def _cmd_export_hf(args: argparse.Namespace) -> int:
    from ..runtime.device import resolve_device
    from ..training.export_run import export_run

    device = resolve_device(args.device, setting="--device").type
    report = export_run(
        args.model, args.out, args.data, args.windows, args.rtol, device, force=args.force
    )
    print(jsonio.dumps(report, indent=2))
    return 0


def export_hf_parser(sub) -> None:
    x = sub.add_parser(
        "export-hf",
        help="export a norm-free g=0 model as a stock Hugging Face checkpoint, and verify it",
    )
    x.add_argument("--model", type=Path, required=True, help="run or model directory")
    x.add_argument("--out", type=Path, required=True, help="save_pretrained dir + verify.json")
    x.add_argument("--data", type=Path, help="token shards to verify on (default: the run's)")
    x.add_argument("--windows", type=POSITIVE, default=4, help="validation windows to verify on")
    x.add_argument("--rtol", type=POSITIVE_FLOAT, default=1e-4, help="max |dz| / max |z| allowed")
    device_arg(x)
    force_arg(
        x, "export-hf", "the export's files (config.json, model.safetensors, verify.json, ...)"
    )
    allow_dirty_arg(x)
    x.set_defaults(func=_cmd_export_hf)


def _cmd_taper_hf(args: argparse.Namespace) -> int:
    from ..runtime.device import resolve_device
    from ..training.export_run import taper_hf

    device = resolve_device(args.device, setting="--device").type
    result = taper_hf(
        args.model,
        args.data,
        args.out,
        args.steps,
        args.lr,
        args.batch_size,
        args.lam,
        device,
        force=args.force,
    )
    print(jsonio.dumps(result, indent=2))
    return 0


def taper_hf_parser(sub) -> None:
    h = sub.add_parser(
        "taper-hf",
        help="taper every norm of a HF model: import, fine-tune, fold-verify, export-hf",
    )
    h.add_argument("--model", required=True, help="save_pretrained directory (or hub id)")
    h.add_argument("--data", type=Path, required=True, help="token shards in the model's tokens")
    h.add_argument("--out", type=Path, required=True, help="writes run/, fold_verify.json, hf/")
    h.add_argument(
        "--steps", type=POSITIVE, default=200, help="fine-tuning steps (taper: 1/4 to 3/4)"
    )
    h.add_argument("--lr", type=POSITIVE_FLOAT, default=1e-4, help="peak learning rate")
    h.add_argument("--batch-size", type=POSITIVE, default=8, help="sequences per step")
    h.add_argument("--lam", type=NON_NEGATIVE_FLOAT, default=0.1, help="scale loss weight")
    device_arg(h)
    force_arg(h, "taper-hf", "run/'s, hf/'s and fold_verify.json")
    allow_dirty_arg(h)
    h.set_defaults(func=_cmd_taper_hf)
