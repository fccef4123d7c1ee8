"""`tapernorm replay`: a run's training batch of one step through a model, block by block
(training/replay.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import POSITIVE, allow_dirty_arg, force_arg


def _gate(text: str) -> float | None:
    """A gate in [0, 1], or "trained": the gate the model holds."""
    if text == "trained":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a gate in [0, 1] or 'trained', got {text!r}")
    return value


def _cmd_replay(args: argparse.Namespace) -> int:
    from ..runtime import jsonio
    from ..runtime.out_dirs import claim_file, json_with, refuse_inside
    from ..training.checkpoint import write_json
    from ..training.replay import DTYPES, replay_report, report_lines

    if args.out:
        refuse_inside(args.out, {"run (RUN_DIR)": args.run, "model (--model)": args.model})
        own = lambda path: json_with(path, ("run", "step", "rows"))  # noqa: E731
        claim_file(args.out, "replay", own, args.force)
    unknown = [d for d in args.dtype if d not in DTYPES]
    if unknown:
        raise ValueError(f"--dtype {unknown[0]}: one of {', '.join(DTYPES)}")
    report = replay_report(args.run, args.step, args.model, args.gate, args.dtype, args.data)
    if args.out:
        write_json(args.out, report)
    print("\n".join(report_lines(report)))
    if args.json:
        print(jsonio.dumps(report, indent=2))
    return 0


def replay_parser(sub) -> None:
    r = sub.add_parser(
        "replay",
        help="a run's training batch of one step through a model at chosen gates and dtypes: "
        "the residual stream's RMS after each block, each sequence's loss",
    )
    r.add_argument("run", type=Path, help="the run directory whose batch is replayed")
    r.add_argument("--step", type=POSITIVE, required=True, help="the optimizer step of the batch")
    r.add_argument("--model", type=Path, help="run or model directory (default: the run's own)")
    r.add_argument(
        "--gate",
        type=_gate,
        nargs="+",
        default=[None],
        help="gates to set on the model's TaperNorms ('trained': the gate it holds)",
    )
    r.add_argument("--dtype", nargs="+", default=["float32"], help="float32 and/or float64")
    r.add_argument("--data", type=Path, help="token shards (default: the run's data.dir)")
    r.add_argument("--out", type=Path, help="write the report as JSON here")
    r.add_argument("--json", action="store_true", help="also print the report as JSON")
    force_arg(r, "replay", "--out")
    allow_dirty_arg(r, only_with_out=True)
    r.set_defaults(func=_cmd_replay)
