"""`tapernorm selftest`, `check-config`, `runs-sheet`, `env`, `check-env`, `lock-env` and `gpu-report`: a new
machine, its configs, its installed versions against the reference's, and what its GPU check
measured."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..runtime import jsonio
from .args import (
    DEVICE_HELP,
    DEVICES,
    allow_dirty_arg,
    device_arg,
)


def _cmd_selftest(args: argparse.Namespace) -> int:
    from ..machine.selftest import run_selftest

    results = run_selftest(args.device, args.dtype, args.compile, args.only)
    return 1 if any(r.status == "fail" for r in results) else 0


def selftest_parser(sub) -> None:
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
    from ..workflow import read_config_files, validate_pipeline_config

    validate_pipeline_config(read_config_files(args.configs, args.schema), str(args.schema))
    print(f"{' + '.join(map(str, args.configs))}: valid")
    return 0


def check_config_parser(sub) -> None:
    c = sub.add_parser(
        "check-config",
        help="check workflow config files: YAML syntax (naming the line), duplicate keys, schema",
        description="Check workflow config files as the pipeline will read them: each file's YAML "
        "(a syntax error or a key given twice named with its line; Snakemake's own message for a "
        "--configfile names none), then the files merged in order, as `snakemake --configfile A "
        "B` merges them, against the schema, every training run resolved.",
    )
    c.add_argument(
        "configs", type=Path, nargs="+", help="e.g. config/paper.yaml config/rehearsal.yaml"
    )
    _schema_arg(c)
    c.set_defaults(func=_cmd_check_config)


def _schema_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--schema",
        type=Path,
        default=Path("workflow/schemas/config.schema.yaml"),
        help="the workflow's config schema (default: %(default)s, from the repository root)",
    )


def _cmd_runs_sheet(args: argparse.Namespace) -> int:
    from ..workflow import read_config_files, validated_plan
    from ..workflow.sheet import runs_sheet, sheet_tsv

    plan = validated_plan(read_config_files(args.configfile, args.schema), str(args.schema))
    print(sheet_tsv(runs_sheet(plan)), end="")
    return 0


def runs_sheet_parser(sub) -> None:
    c = sub.add_parser(
        "runs-sheet",
        help="the training runs of a workflow config as a TSV table, one line per run",
        description="Every run that rule train trains for a config: its family, run, variant, "
        "width, seeds, steps, trunk, device, GPUs, minutes, priority and the sha256 of its run "
        "config (what `tapernorm train --config-json` takes), as the workflow plans them.",
    )
    c.add_argument(
        "--configfile",
        type=Path,
        nargs="+",
        default=[Path("config/config.yaml")],
        help="workflow config files, merged in order as Snakemake's --configfile (default: "
        "%(default)s)",
    )
    _schema_arg(c)
    c.set_defaults(func=_cmd_runs_sheet)


def _cmd_env(args: argparse.Namespace) -> int:
    from ..machine.gpu_check import environment_report
    from ..runtime.out_dirs import json_with
    from ..runtime.out_files import claim_outputs
    from ..training.checkpoint import write_json

    if args.out:
        own = lambda path: json_with(path, ("device", "torch", "tapernorm", "packages"))  # noqa: E731
        claim_outputs([args.out], "env", own, args.force)
    report = environment_report(args.device)
    if args.out:
        write_json(args.out, report)
    print(jsonio.dumps(report, indent=2))
    return 0


def env_parser(sub) -> None:
    n = sub.add_parser("env", help="this machine's device, versions and nvidia-smi as JSON")
    device_arg(n)
    n.add_argument("--out", type=Path, help="write the JSON here too")
    n.add_argument(
        "--force", action="store_true", help="replace an --out that is not an earlier env JSON"
    )
    n.set_defaults(func=_cmd_env)


def _cmd_check_env(args: argparse.Namespace) -> int:
    from ..machine.env_lock import differences, reference_of
    from ..runtime.provenance import distributions

    reference = reference_of(args.against)
    found = differences(reference, distributions())
    for difference in found:
        print(difference)
    print(
        f"{args.against}: {len(reference) - len(found)} distributions match"
        + (f", {len(found)} differ" if found else "")
    )
    return 1 if found else 0


def check_env_parser(sub) -> None:
    from ..machine.env_lock import CONSTRAINTS

    c = sub.add_parser(
        "check-env",
        help="compare this environment's installed distributions with the reference's; exit 1 "
        "naming each that differs",
    )
    c.add_argument(
        "--against",
        type=Path,
        default=CONSTRAINTS,
        help="a constraints file, or a manifest.json, lr_grid.json or run config.json that "
        "records its distributions (default: %(default)s, from the repository root)",
    )
    c.set_defaults(func=_cmd_check_env)


def _cmd_lock_env(args: argparse.Namespace) -> int:
    from ..machine.env_lock import is_lock_file, write_lock
    from ..runtime.out_files import claim_outputs

    claim_outputs([args.out], "lock-env", is_lock_file, args.force)
    pins = write_lock(args.out)
    print(f"{args.out}: {pins} distributions pinned")
    return 0


def lock_env_parser(sub) -> None:
    from ..machine.env_lock import CONSTRAINTS

    c = sub.add_parser(
        "lock-env",
        help="write this environment's distributions as a pip constraints file (run in a clean "
        "install of .[dev]: docs/reproducibility.md)",
    )
    c.add_argument("--out", type=Path, default=CONSTRAINTS, help="default: %(default)s")
    c.add_argument(
        "--force",
        action="store_true",
        help="replace an --out that is not a constraints file lock-env wrote",
    )
    c.set_defaults(func=_cmd_lock_env)


def _cmd_gpu_report(args: argparse.Namespace) -> int:
    from ..analysis.studies.gpu_report import gpu_report

    for line in gpu_report(args.dir, args.config, args.force):
        print(line)
    return 0


def gpu_report_parser(sub) -> None:
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
    r.add_argument(
        "--force",
        action="store_true",
        help="replace files in DIR/report/ that an earlier gpu-report did not write",
    )
    allow_dirty_arg(r)
    r.set_defaults(func=_cmd_gpu_report)
