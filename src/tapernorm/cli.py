"""The `tapernorm` command line: every step of the pipeline, usable without Snakemake."""

# Each command is a `_cmd_NAME` function with, beside it, a `_NAME_parser(sub)` declaring its
# arguments; build_parser (at the end) registers them, bench.cli's `bench train-step|forward|decode`
# and analysis.cli's table, figure, claims, job-times. What they share is in cli_args.

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from . import __version__, jsonio
from .cli_args import (
    DEVICE_HELP,
    DEVICES,
    NON_NEGATIVE,
    NON_NEGATIVE_FLOAT,
    POSITIVE,
    POSITIVE_FLOAT,
    Parser,
    device_arg,
    number,
)
from .run_lock import WAIT_ENV

EXTRAS = {"transformers": "hf", "datasets": "hf", "huggingface_hub": "hf"}  # module -> extra


# ---- data and training ----------------------------------------------------------------------------


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


def _prepare_data_parser(sub) -> None:
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


def _cmd_train(args: argparse.Namespace) -> int:
    import torch

    from .device import resolve_device
    from .train import train

    cfg = _train_config(args)
    threads = args.threads
    if (
        threads is None
        and resolve_device(cfg["train"]["device"], setting="train.device").type == "cpu"
    ):
        threads = 1  # bit-reproducible: more threads split sums differently from run to run
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        result = train(cfg, args.out, wait=args.wait)
    except KeyboardInterrupt:
        from .training_state import resume_step

        step = resume_step(cfg, args.out)
        where = f"from step {step} (its last checkpoint)" if step else "from the start"
        raise KeyboardInterrupt(f"the same command resumes the run {where}") from None
    finally:
        torch.set_num_threads(previous)  # (main may be called again in one process)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 speaks for all
        print(jsonio.dumps(result, indent=2))
    return 0


def _train_config(args: argparse.Namespace) -> dict:
    """The resolved run config of --config-json, or of --config with its --set overrides."""
    from .config import load_run_config, resolve_run_config

    if args.config_json is None:
        return load_run_config(args.config, args.set)
    if args.config is not None or args.set:
        raise ValueError("--config-json is the whole config: give no --config or --set with it")
    try:
        config = json.loads(args.config_json)
    except json.JSONDecodeError as e:
        raise ValueError(f"--config-json is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"--config-json: top level must be an object, not {type(config).__name__}")
    return resolve_run_config(config)


def _train_parser(sub) -> None:
    t = sub.add_parser("train", help="train (or resume) one run from a YAML run config")
    t.add_argument(
        "--config", type=Path, help="run config YAML (see tapernorm/schemas/run.schema.yaml)"
    )
    t.add_argument(
        "--config-json",
        help="the run config as a JSON string, instead of --config (the workflow's)",
    )
    t.add_argument("--out", type=Path, required=True, help="run directory")
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set train.steps=100 (repeatable)",
    )
    t.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get(WAIT_ENV, "") not in ("", "0"),
        help="if another tapernorm train is writing --out, wait for it to end instead of stopping "
        f"(default: no, unless {WAIT_ENV} is set, as the workflow sets it for its jobs)",
    )
    t.add_argument(
        "--threads",
        type=POSITIVE,
        help="torch CPU threads (default: 1 when training on the CPU, where runs are then "
        "bit-reproducible; with more they differ in the last bits from run to run)",
    )
    t.set_defaults(func=_cmd_train)


def _cmd_gpus(args: argparse.Namespace) -> int:
    from .gpu_slots import run_on_gpus

    if args.argv[:1] and args.argv[0].startswith("-"):
        raise ValueError(
            f"{args.argv[0]}: options go before N (tapernorm gpus [--device D] [--ranks R] N -- "
            "COMMAND ...)"
        )
    run_on_gpus(args.gpus, args.argv, args.device, args.ranks, wait=not args.no_wait)
    return 0  # (not reached: the command took this process's place)


def _gpus_parser(sub) -> None:
    g = sub.add_parser(
        "gpus",
        help="run a command on N GPUs of its own: claimed on this machine, CUDA_VISIBLE_DEVICES",
        description="Claim N free GPUs of this machine (exclusive locks in $TAPERNORM_GPU_SLOTS, "
        "default /tmp/tapernorm-gpu-slots), held while COMMAND runs, and run COMMAND with only "
        "them visible. Nothing is claimed for N=0, on the CPU, or where a scheduler already "
        "granted the GPUs (CUDA_VISIBLE_DEVICES in a SLURM job). The workflow's GPU jobs run "
        "through it: tapernorm gpus [--device D] [--ranks R] N -- COMMAND ...",
    )
    g.add_argument(
        "--device",
        default="auto",
        choices=DEVICES,
        help="the command's device: cpu claims nothing, auto only where torch sees a GPU",
    )
    g.add_argument(
        "--ranks",
        type=POSITIVE,
        default=1,
        help="processes COMMAND starts, one per GPU (torchrun's --nproc_per_node): refused if "
        "more than the GPUs the job holds",
    )
    g.add_argument("--no-wait", action="store_true", help="fail instead of waiting for free GPUs")
    g.add_argument("gpus", type=NON_NEGATIVE, metavar="N", help="GPUs the job holds")
    g.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    g.set_defaults(func=_cmd_gpus)


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


def _prepare_eval_parser(sub) -> None:
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


# ---- evaluation, folding, export ------------------------------------------------------------------


def _cmd_eval(args: argparse.Namespace) -> int:
    from .checkpoint import write_json
    from .evaluation import evaluate_model

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


def _eval_parser(sub) -> None:
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
    e.set_defaults(func=_cmd_eval)


def _cmd_fold(args: argparse.Namespace) -> int:
    from .fold import fold_run

    report = fold_run(
        args.model, args.data, args.out, args.windows, args.eval_windows, args.rtol, args.device
    )
    print(jsonio.dumps(report, indent=2))
    return 0


def _fold_parser(sub) -> None:
    f = sub.add_parser("fold", help="export a g=0 model as explicit scaling and folded, and verify")
    f.add_argument("--model", type=Path, required=True, help="run or model directory")
    f.add_argument("--data", type=Path, required=True, help="token shards (verification windows)")
    f.add_argument("--out", type=Path, required=True, help="writes folded/, scaled/, verify.json")
    f.add_argument("--windows", type=POSITIVE, default=8, help="windows for the logit comparison")
    f.add_argument(
        "--eval-windows", type=POSITIVE, default=64, help="windows for the loss comparison"
    )
    f.add_argument("--rtol", type=POSITIVE_FLOAT, default=1e-5, help="max |dz| / max |z| allowed")
    device_arg(f)
    f.set_defaults(func=_cmd_fold)


def _cmd_export_hf(args: argparse.Namespace) -> int:
    from .device import resolve_device
    from .export import export_run

    device = resolve_device(args.device, setting="--device").type
    report = export_run(args.model, args.out, args.data, args.windows, args.rtol, device)
    print(jsonio.dumps(report, indent=2))
    return 0


def _export_hf_parser(sub) -> None:
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
    x.set_defaults(func=_cmd_export_hf)


def _cmd_taper_hf(args: argparse.Namespace) -> int:
    from .device import resolve_device
    from .export import taper_hf

    device = resolve_device(args.device, setting="--device").type
    result = taper_hf(
        args.model, args.data, args.out, args.steps, args.lr, args.batch_size, args.lam, device
    )
    print(jsonio.dumps(result, indent=2))
    return 0


def _taper_hf_parser(sub) -> None:
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
    h.set_defaults(func=_cmd_taper_hf)


# ---- a new machine --------------------------------------------------------------------------------


def _cmd_selftest(args: argparse.Namespace) -> int:
    from .selftest import run_selftest

    results = run_selftest(args.device, args.dtype, args.compile, args.only)
    return 1 if any(r.status == "fail" for r in results) else 0


def _selftest_parser(sub) -> None:
    st = sub.add_parser(
        "selftest",
        help="a few training steps of every model family, fold, decode: run first on a new machine",
        description="Before spending GPU-hours: a few optimizer steps of every model family and "
        "training feature the paper config uses, the training loop with a resume, fold and verify, "
        "KV-cache decoding. One line per check; exit status 1 if any fails. On --device meta it "
        "checks device placement and that a training step reads nothing back from the device.",
    )
    st.add_argument(
        "--device", default="auto", choices=[*DEVICES, "meta"], help=DEVICE_HELP + "; meta: shapes"
    )
    st.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="training dtype (auto: bf16 autocast on CUDA, float32 elsewhere)",
    )
    st.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--compile: also compiled decoding and train.compile; --no-compile: neither "
        "(default: compiled decoding on CUDA only)",
    )
    st.add_argument("--only", metavar="TEXT", help="run only the checks whose name contains TEXT")
    st.set_defaults(func=_cmd_selftest)


def _cmd_check_config(args: argparse.Namespace) -> int:
    from .config import check_yaml_files, yaml_load
    from .pipeline import validate_pipeline_config

    for path in args.configs:
        check_yaml_files([path])  # syntax and duplicate keys, naming the line
        validate_pipeline_config(
            yaml_load(path.read_text(), f"config file {path}"), str(args.schema)
        )
        print(f"{path}: valid")
    return 0


def _check_config_parser(sub) -> None:
    c = sub.add_parser(
        "check-config",
        help="check workflow config files: YAML syntax (naming the line), duplicate keys, schema",
        description="Check workflow config files as the pipeline will read them. Snakemake's own "
        "message for a YAML syntax error in a --configfile names no line; this one does.",
    )
    c.add_argument("configs", type=Path, nargs="+", help="e.g. config/paper.yaml")
    c.add_argument(
        "--schema",
        type=Path,
        default=Path("workflow/schemas/config.schema.yaml"),
        help="the workflow's config schema (default: %(default)s, from the repository root)",
    )
    c.set_defaults(func=_cmd_check_config)


def _cmd_env(args: argparse.Namespace) -> int:
    from .checkpoint import write_json
    from .gpu_check import environment_report

    report = environment_report(args.device)
    if args.out:
        write_json(args.out, report)
    print(jsonio.dumps(report, indent=2))
    return 0


def _env_parser(sub) -> None:
    n = sub.add_parser("env", help="this machine's device, versions and nvidia-smi as JSON")
    device_arg(n)
    n.add_argument("--out", type=Path, help="write the JSON here too")
    n.set_defaults(func=_cmd_env)


def _cmd_rehearsal_inputs(args: argparse.Namespace) -> int:
    from .data.standins import make_standins

    record = make_standins(args.out, seed=args.seed)
    print(jsonio.dumps(record, indent=2))
    return 0


def _rehearsal_inputs_parser(sub) -> None:
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


def _cmd_gpu_report(args: argparse.Namespace) -> int:
    from .gpu_check import gpu_report

    for line in gpu_report(args.dir, args.config):
        print(line)
    return 0


def _gpu_report_parser(sub) -> None:
    r = sub.add_parser(
        "gpu-report",
        help="tables 3 and decode, figure 5 and the GPU-hours from benchmarks/gpu_check.sh's output",
    )
    r.add_argument("dir", type=Path, help="the check's output (summary.md, results.tar.gz, ...)")
    r.add_argument(
        "--config",
        type=Path,
        default=Path("config/paper.yaml"),
        help="the pipeline config whose pre-training grid is costed",
    )
    r.set_defaults(func=_cmd_gpu_report)


# ---- learning-rate grid ---------------------------------------------------------------------------


def _cmd_lr_grid(args: argparse.Namespace) -> int:
    from .lr_grid import grid_scale, read_runs, summarize, write_summary

    runs = read_runs(args.runs)
    cells, gaps = summarize(runs, args.shared_lr)
    command = args.made_by or (
        f"tapernorm lr-grid --runs {' '.join(map(str, args.runs))} --shared-lr {args.shared_lr:g} "
        f"--data {args.data} --out {args.out}"
    )
    scale = grid_scale(runs, str(args.data))
    args.out.mkdir(parents=True, exist_ok=True)
    for path in write_summary(cells, gaps, args.out, command, scale):
        print(f"wrote {path}")
    print((args.out / "lr_grid.md").read_text())
    return 0


def _lr_grid_parser(sub) -> None:
    g = sub.add_parser(
        "lr-grid",
        help="summarise the learning-rate grid's finished runs: gaps at the shared and at each "
        "arm's best LR (the workflow trains them: docs/norm-free.md)",
    )
    g.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        required=True,
        help="the grid's run directories (results/runs/lr_grid/*), each with config.json and "
        "eval.json",
    )
    g.add_argument(
        "--shared-lr",
        type=POSITIVE_FLOAT,
        required=True,
        help="the LR the comparison shares (the pretrain family's train.lr)",
    )
    g.add_argument(
        "--data",
        type=Path,
        default=Path("data/pretrain"),
        help="the runs' token shards (their corpus is named in the summary's scale)",
    )
    g.add_argument("--made-by", help="the command that made the runs, named in the summary")
    g.add_argument("--out", type=Path, default=Path("results/lr_grid"), help="summary directory")
    g.set_defaults(func=_cmd_lr_grid)


# ---- the parser -----------------------------------------------------------------------------------


def _bench_parser(sub) -> None:
    from .bench.cli import add_subcommand  # train-step, forward, decode

    add_subcommand(sub)


def _analysis_parsers(sub) -> None:
    from .analysis.cli import add_subcommands  # table, figure, claims, job-times

    add_subcommands(sub)


def _record_parsers(sub) -> None:
    from .record_cli import add_subcommands  # manifest, check-manifest, snapshot, docs

    add_subcommands(sub)


COMMANDS = (  # in the order of `tapernorm --help`
    _prepare_data_parser,
    _train_parser,
    _gpus_parser,
    _prepare_eval_parser,
    _eval_parser,
    _fold_parser,
    _export_hf_parser,
    _taper_hf_parser,
    _selftest_parser,
    _analysis_parsers,
    _record_parsers,
    _bench_parser,
    _check_config_parser,
    _env_parser,
    _gpu_report_parser,
    _lr_grid_parser,
    _rehearsal_inputs_parser,
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="tapernorm", description=__doc__)
    p.add_argument("--version", action="version", version=f"tapernorm {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return p


def _missing_extra(e: ImportError) -> str | None:
    """'error: <module> is not installed: pip install ...' if `e` is an optional dependency's absence."""
    while e is not None and not getattr(e, "name", None):
        e = e.__cause__ if isinstance(e.__cause__, ImportError) else None
    module = (e.name or "").split(".")[0] if e is not None else ""
    if module not in EXTRAS:
        return None
    return (
        f"error: {module} is not installed: pip install -e '.[{EXTRAS[module]}]' (in this checkout)"
    )


def _out_of_memory(e: BaseException) -> bool:
    if not isinstance(e, (MemoryError, RuntimeError)):
        return False
    if "torch" not in sys.modules:  # (then no torch error can be out of memory)
        return isinstance(e, MemoryError)
    from .device import is_out_of_memory

    return is_out_of_memory(e)


def _memory_advice(e: BaseException, command: str) -> str:
    """What to lower: what the error names (an evaluation's OutOfMemory), else by command."""
    if type(e).__name__ == "OutOfMemory":
        return f"error: {e}"
    if command == "train":
        return (
            "error: out of memory: use a smaller model (model.n_embd, n_layer, vocab_size), "
            "batch (train.batch_size) or context (model.block_size), or a larger machine"
        )
    return (
        "error: out of memory: lower the command's sizes (--batch-size, --windows, ... where it "
        "has them), or use a larger machine"
    )


def _one_line(e: BaseException, command: str = "") -> tuple[str, int] | None:
    """The message and exit status of an error the user can act on; None for a bug (a traceback)."""
    if isinstance(e, KeyboardInterrupt):
        return f"interrupted{'; ' + str(e) if str(e) else ''}", 130
    if isinstance(e, ImportError):
        missing = _missing_extra(e)
        return None if missing is None else (missing, 2)
    if _out_of_memory(e):
        return _memory_advice(e, command), 2
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        where = f" writing {e.filename}" if e.filename else ""
        return f"error: no space left on device{where}: free some space and rerun the command", 2
    if isinstance(e, (ValueError, RuntimeError, OSError)) or type(e).__name__ == "SafetensorError":
        return f"error: {' '.join(str(e).split()) if chr(10) in str(e) else e}", 2
    return None


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler writing to sys.stderr as it is when a record comes (tests swap it)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


@contextlib.contextmanager
def _library_logs_to_stderr() -> Iterator[None]:
    """For one command: the library's log records (logger `tapernorm`) as bare lines on stderr, at
    INFO unless a level was set, not passed on to the root logger (no duplicates). Nothing is
    changed where the logger already has a handler (an embedding program configured it), and
    everything is put back afterwards, so calling main again adds nothing twice."""
    logger = logging.getLogger("tapernorm")
    if logger.handlers:
        yield
        return
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level or logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors (bad input, missing files, Ctrl-C) end in one line, never a traceback
    (set TAPERNORM_TRACEBACK=1 to see it)."""
    args = build_parser().parse_args(argv)
    try:
        with _library_logs_to_stderr():
            return args.func(args)
    except (Exception, KeyboardInterrupt) as e:
        reported = _one_line(e, args.command)
        if reported is None or os.environ.get("TAPERNORM_TRACEBACK"):
            raise
    message, status = reported
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 speaks for all
        below_bar = "\n" if status == 130 and sys.stderr.isatty() else ""  # (and the ^C)
        print(f"{below_bar}tapernorm {args.command}: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
