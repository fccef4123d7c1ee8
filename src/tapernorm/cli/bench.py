"""`tapernorm bench train-step | forward | decode`: one subcommand per benchmark, each with only its
own options, added to the main parser (tapernorm.cli)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..bench.settings import SECTION, BenchRuns, BenchSettings, bench_settings
from ..config import section_defaults
from ..runtime import jsonio
from ..runtime.out_files import claim_outputs, own_bench_csv, own_bench_json
from .args import (
    DEVICE_HELP,
    DEVICES,
    NON_NEGATIVE,
    POSITIVE,
    allow_dirty_arg,
    config_json,
    device_arg,
)


def add_subcommand(sub) -> None:
    b = sub.add_parser(
        "bench",
        help="benchmarks (medians of interleaved repeats, ratios): train-step, forward, decode",
        description="Medians of interleaved repeats, and ratios to the baseline. train-step: "
        "seconds per training step. forward (paper Table 3) and decode: the baseline and the "
        "tapered model exported as explicit scaling and folded (verified against the g=0 model "
        "first), and a DyT model. `tapernorm bench BENCHMARK --help` lists its options.",
    )
    benchmarks = b.add_subparsers(
        dest="which", required=True, metavar="{train-step,forward,decode}"
    )
    for add in (_bench_train_step_parser, _bench_forward_parser, _bench_decode_parser):
        add(benchmarks)
    _reject_misplaced(b, benchmarks.choices)


class _Misplaced(argparse.Action):
    """An option this parser does not take (`tapernorm bench` once took every benchmark's options):
    hidden from its help, it stops the parse with a one-line `message` saying where it goes. Being
    declared, it also keeps abbreviations as they were: a misplaced --batch-size is this error, not
    an abbreviation of --batch-sizes."""

    def __init__(self, option_strings, dest, message: str = "", **kwargs):
        super().__init__(
            option_strings,
            argparse.SUPPRESS,
            nargs="*",
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )
        self.message = message

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(self.message)


def _reject_misplaced(bench: argparse.ArgumentParser, benchmarks: dict) -> None:
    """Declare on each benchmark's parser the other benchmarks' options as _Misplaced, naming the
    benchmarks that take them; and on `bench` itself every option (it goes after the name)."""
    owners: dict[str, list[str]] = {}  # option -> the benchmarks that take it
    for name, parser in benchmarks.items():
        for option in parser._option_string_actions:
            if option not in ("-h", "--help"):
                owners.setdefault(option, []).append(name)
    for option, names in owners.items():
        where = f"{bench.prog} {', '.join(names[:-1])}{' and ' if names[:-1] else ''}{names[-1]}"
        for name, parser in benchmarks.items():
            if option not in parser._option_string_actions:
                message = f"{option} is an option of {where}, not of {name}"
                parser.add_argument(option, action=_Misplaced, message=message)
        message = (
            f"options go after the benchmark's name: {bench.prog} {'|'.join(names)} {option} ..."
        )
        bench.add_argument(option, action=_Misplaced, message=message)


def _cmd_bench_train_step(args: argparse.Namespace) -> int:
    from ..bench.train_step import bench_train_steps
    from ..training.checkpoint import write_json

    csv_out = args.out is not None and args.out.suffix == ".csv"
    if args.out is not None:
        own = own_bench_csv if csv_out else own_bench_json
        claim_outputs([args.out], "bench train-step", own, args.force)
    results = bench_train_steps(
        args.n_embd,
        args.out if csv_out else None,
        n_head=args.n_head,
        n_layer=args.n_layer,
        vocab_size=args.vocab,
        block_size=args.block_size,
        batch_size=args.batch_size,
        repeats=args.repeats,
        with_hf=not args.no_hf,
        device=args.device,
        dtype=args.dtype,
        with_dyt=args.with_dyt,
        warmup=args.warmup,
        compile=args.compile,
    )
    result = results[0] if len(results) == 1 else results
    if args.out and not csv_out:
        write_json(args.out, result)
    print(jsonio.dumps(result, indent=2))
    return 0


def _bench_train_step_parser(benchmarks) -> None:
    t = benchmarks.add_parser(
        "train-step",
        help="seconds per training step: baseline, mid-taper, DyT, transformers' LLaMA",
        description="Seconds per training step (forward, backward, clip, AdamW) of our baseline, "
        "our model mid-taper (0 < g < 1, both branches computed), with --with-dyt a DyT model, and "
        "transformers' LlamaForCausalLM on the same sizes, at each width in turn. The result as "
        "JSON on stdout; --out FILE.csv appends rows per width as each is timed.",
    )
    t.add_argument(
        "--n-embd", type=POSITIVE, nargs="+", default=[128], help="width(s), timed in turn"
    )
    t.add_argument("--n-layer", type=POSITIVE, default=8, help="layers")
    t.add_argument("--n-head", type=POSITIVE, default=16, help="attention heads")
    t.add_argument("--vocab", type=POSITIVE, default=4096, help="vocabulary size")
    t.add_argument("--block-size", type=POSITIVE, default=256, help="tokens per sequence")
    t.add_argument("--batch-size", type=POSITIVE, default=16, help="sequences per step")
    t.add_argument("--no-hf", action="store_true", help="skip transformers' LLaMA")
    t.add_argument("--with-dyt", action="store_true", help="also time a DyT model (every norm)")
    t.add_argument("--warmup", type=NON_NEGATIVE, default=2, help="untimed rounds")
    t.add_argument("--repeats", type=POSITIVE, default=7, help="timed rounds")
    t.add_argument(
        "--compile",
        action="store_true",
        help="each model's forward under torch.compile, as train.compile (warmup: >= 2 rounds)",
    )
    device_arg(t)
    t.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="bfloat16: the step under bf16 autocast (as training)",
    )
    t.add_argument("--out", type=Path, help="FILE.csv: rows per width; any other name: the JSON")
    _force_arg(t)
    allow_dirty_arg(t, only_with_out=True)
    t.set_defaults(func=_cmd_bench_train_step)


def _cmd_bench_forward(args: argparse.Namespace) -> int:
    return _bench_inference(args)


def _cmd_bench_decode(args: argparse.Namespace) -> int:
    return _bench_inference(args)


def inference_settings(args: argparse.Namespace) -> BenchSettings:
    """The settings of `bench forward|decode` (args.which): the --config-json `bench:` section (or
    the schema's defaults), each flag given replacing its key."""
    which = args.which
    lengths = "seq_lens" if which == "forward" else "prompt_lens"
    overrides = {
        "device": args.device,
        "dtype": args.dtype,
        "random": args.random,
        f"{which}.batch_sizes": args.batch_sizes,
        f"{which}.{lengths}": getattr(args, lengths),
        f"{which}.warmup": args.warmup,
        f"{which}.repeats": args.repeats,
    }
    if which == "decode":
        overrides.update({"decode.new_tokens": args.new_tokens, "decode.modes": args.modes})
    sizes = {"n_layer": args.n_layer, "n_head": args.n_head, "vocab_size": args.vocab}
    return bench_settings(
        config_json(args.config_json),
        overrides,
        random_dyt=not args.no_dyt,
        sizes={field: value for field, value in sizes.items() if value is not None},
    )


def _force_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force", action="store_true", help="replace an --out that is not an earlier benchmark's"
    )


def _bench_inference(args: argparse.Namespace) -> int:
    """bench forward or decode (args.which)."""
    from ..bench.grid import run_inference_bench, summary_table

    if args.out is not None:
        claim_outputs([args.out], f"bench {args.which}", own_bench_csv, args.force)
    df = run_inference_bench(
        args.which,
        inference_settings(args),
        BenchRuns(args.baseline, args.tapered, args.dyt),
        threads=args.threads,
        out=args.out,
    )
    print(summary_table(df))
    return 0


def _bench_forward_parser(benchmarks) -> None:
    f = benchmarks.add_parser(
        "forward",
        help="paper Table 3: one forward pass over B x T tokens (CSV)",
        description="Paper Table 3: one forward pass over B x T tokens, last-token logits, of "
        "the baseline, the tapered model exported as explicit scaling and folded (verified "
        "against the g=0 model first) and a DyT model, per batch size and sequence length (CSV).",
    )
    defaults = section_defaults(SECTION)
    grid = _bench_inference_args(f, defaults["forward"]["batch_sizes"])
    grid.add_argument(
        "--seq-lens",
        type=POSITIVE,
        nargs="+",
        help=f"sequence lengths (default: {_shown(defaults['forward']['seq_lens'])})",
    )
    _bench_rounds_args(f, grid, defaults, "forward")
    allow_dirty_arg(f, only_with_out=True)
    f.set_defaults(func=_cmd_bench_forward)


def _bench_decode_parser(benchmarks) -> None:
    d = benchmarks.add_parser(
        "decode",
        help="greedy decoding with a KV cache, prefill and decode timed apart (CSV)",
        description="Greedy decoding with a KV cache, prefill and decode timed apart, eager "
        "and/or compiled, of the baseline, the tapered model exported as explicit scaling and "
        "folded (verified against the g=0 model first) and a DyT model, per batch size and prompt "
        "length (CSV).",
    )
    defaults = section_defaults(SECTION)
    decode = defaults["decode"]
    grid = _bench_inference_args(d, decode["batch_sizes"])
    grid.add_argument(
        "--prompt-lens",
        type=POSITIVE,
        nargs="+",
        help=f"prompt lengths (default: {_shown(decode['prompt_lens'])})",
    )
    grid.add_argument(
        "--new-tokens",
        type=POSITIVE,
        help=f"decode steps after the prefill (default: {decode['new_tokens']})",
    )
    grid.add_argument(
        "--modes",
        nargs="+",
        choices=["eager", "compiled"],
        help="eager and/or compiled (torch.compile; slow to compile on a CPU) "
        f"(default: {_shown(decode['modes'])})",
    )
    _bench_rounds_args(d, grid, defaults, "decode")
    allow_dirty_arg(d, only_with_out=True)
    d.set_defaults(func=_cmd_bench_decode)


def _shown(values: list) -> str:
    return " ".join(map(str, values))


def _bench_inference_args(p: argparse.ArgumentParser, batch_sizes: list[int]):
    """forward's and decode's --config-json and models (and --random's sizes); returns the grid
    group, begun with --batch-sizes (the default, `batch_sizes`, is the schema's)."""
    p.add_argument(
        "--config-json",
        metavar="JSON",
        help="the workflow config's bench: section as a JSON object (device, dtype, random, "
        "forward, decode; a key left out takes its default); an option given too replaces its key",
    )
    models = p.add_argument_group(
        "models",
        "a run whose eval.json says it diverged is not timed: the others are, and the CSV gives "
        "its columns a row with why (column skipped); if the baseline diverged, nothing is timed",
    )
    models.add_argument("--baseline", type=Path, help="trained baseline run (or model) directory")
    models.add_argument(
        "--tapered", type=Path, help="trained tapered run directory (exported at g=0 twice)"
    )
    models.add_argument("--dyt", type=Path, help="trained DyT run directory (timed as it is)")
    models.add_argument(
        "--random", metavar="dWIDTH", help="random weights at the paper's config, e.g. d512"
    )
    models.add_argument(
        "--no-dyt", action="store_true", help="with --random: no DyT model beside the others"
    )
    paper = "with --random: instead of the paper config's ({})"
    models.add_argument("--n-layer", type=POSITIVE, help=paper.format(8))
    models.add_argument("--n-head", type=POSITIVE, help=paper.format(16))
    models.add_argument("--vocab", type=POSITIVE, help=paper.format(10000))
    grid = p.add_argument_group("grid")
    grid.add_argument(
        "--batch-sizes",
        type=POSITIVE,
        nargs="+",
        help=f"batch sizes (default: {_shown(batch_sizes)})",
    )
    return grid


def _bench_rounds_args(p: argparse.ArgumentParser, grid, defaults: dict, which: str) -> None:
    """forward's and decode's rounds, device, dtype, threads and --out; the defaults, stated, are
    the schema's (`defaults`: its bench section)."""
    rounds = defaults[which]
    grid.add_argument(
        "--warmup", type=NON_NEGATIVE, help=f"untimed rounds (default: {rounds['warmup']})"
    )
    grid.add_argument(
        "--repeats", type=POSITIVE, help=f"timed rounds (default: {rounds['repeats']})"
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        help=f"{DEVICE_HELP} (default: {defaults['device']})",
    )
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        help=f"model weights (default: {defaults['dtype']})",
    )
    p.add_argument("--threads", type=POSITIVE, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--out", type=Path, help="CSV, each cell's rows written as soon as it is timed")
    _force_arg(p)
