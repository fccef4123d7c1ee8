"""`tapernorm train`, `gpus` and `lr-grid`: training runs, the GPUs they hold, and the summary of
the learning-rate grid's runs."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..config.run import RunConfig
from ..runtime import jsonio
from ..training.lock import WAIT_ENV
from .args import (
    DEVICES,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_FLOAT,
    allow_dirty_arg,
    config_json,
    force_arg,
)


def _cmd_train(args: argparse.Namespace) -> int:
    import torch

    from ..runtime.allocator import keep_freed_memory
    from ..runtime.device import resolve_device
    from ..training.loop import train, train_trunk

    cfg = _train_config(args)
    threads = args.threads
    if resolve_device(cfg.train.device, setting="train.device").type == "cpu":
        keep_freed_memory()  # no page faults on each step's activations (runtime/allocator.py)
        if threads is None:
            threads = 1  # bit-reproducible: more threads split sums differently from run to run
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        if args.trunk:
            result = train_trunk(cfg, args.out, wait=args.wait, force=args.force)
        else:
            result = train(cfg, args.out, wait=args.wait, force=args.force)
    except KeyboardInterrupt:
        from ..training.state import resume_step

        step = resume_step(cfg, args.out)
        where = f"from step {step} (its last checkpoint)" if step else "from the start"
        raise KeyboardInterrupt(f"the same command resumes the run {where}") from None
    finally:
        torch.set_num_threads(previous)  # (main may be called again in one process)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 speaks for all
        print(jsonio.dumps(result, indent=2))
    return 0


def _train_config(args: argparse.Namespace) -> RunConfig:
    """The resolved run config of --config-json, or of --config with its --set overrides."""
    from ..config import load_run_config, resolve_run_config

    if args.config_json is None:
        return load_run_config(args.config, args.set)
    if args.config is not None or args.set:
        raise ValueError("--config-json is the whole config: give no --config or --set with it")
    return resolve_run_config(config_json(args.config_json))


def train_parser(sub) -> None:
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
        "--force",
        action="store_true",
        help="train into an --out that holds other files: the run's files (config.json, "
        "metrics.jsonl, eval.json, model.safetensors, ckpt/) are replaced, every other is kept; "
        "and replace a finished run of another config, data or init there (refused without it, "
        "naming what differs; recorded as meta.provenance.replaced in the new config.json)",
    )
    t.add_argument(
        "--trunk",
        action="store_true",
        help="train the run's trunk into --out instead of the run: its steps before the taper, "
        "which every variant of the run shares, checkpointed at the taper start; a run with "
        "init.trunk set to that directory starts there (tapernorm/training/trunk.py)",
    )
    t.add_argument(
        "--threads",
        type=POSITIVE,
        help="torch CPU threads (default: 1 when training on the CPU, where runs are then "
        "bit-reproducible; with more they differ in the last bits from run to run)",
    )
    allow_dirty_arg(t)
    t.set_defaults(func=_cmd_train)


def _cmd_gpus(args: argparse.Namespace) -> int:
    from ..machine.gpu_slots import run_on_gpus

    if args.argv[:1] and args.argv[0].startswith("-"):
        raise ValueError(
            f"{args.argv[0]}: options go before N (tapernorm gpus [--device D] [--ranks R] N -- "
            "COMMAND ...)"
        )
    run_on_gpus(args.gpus, args.argv, args.device, args.ranks, wait=not args.no_wait)
    return 0  # (not reached: the command took this process's place)


def gpus_parser(sub) -> None:
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


def _cmd_lr_grid(args: argparse.Namespace) -> int:
    from ..analysis.studies.lr_grid import (
        check_grid,
        grid_scale,
        read_runs,
        summarize,
        write_summary,
    )
    from ..runtime.out_dirs import claim_dir, json_with, refuse_inside

    for run in args.runs:
        refuse_inside(args.out, {"run directory (--runs)": run})
    own = lambda out: json_with(out / "lr_grid.json", ("cells",))  # noqa: E731
    claim_dir(args.out, "lr-grid", own, args.force)
    runs = read_runs(args.runs)
    check_grid(runs, args.shared_lr)
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


def lr_grid_parser(sub) -> None:
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
    force_arg(g, "lr-grid", "lr_grid.json, .md and .csv")
    allow_dirty_arg(g)
    g.set_defaults(func=_cmd_lr_grid)
