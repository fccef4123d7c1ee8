"""The `tapernorm` command line: every step of the pipeline, usable without Snakemake."""

# Each command is a `_cmd_NAME` function with, beside it, a `NAME_parser(sub)` declaring its
# arguments, in the module of its group: data, train, models, machine, scaling, stability;
# build_parser (below) registers them in the order of `tapernorm --help`, with bench's `bench
# train-step|forward|decode`, analysis's table, figure, claims, job-times and record's.
# What they share is in args; which errors end in one line is errors'.

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator

from .. import __version__
from ..runtime.provenance import writing_results
from .args import Parser
from .data import prepare_data_parser, prepare_eval_parser, rehearsal_inputs_parser
from .errors import one_line
from .machine import (
    check_config_parser,
    check_env_parser,
    env_parser,
    gpu_report_parser,
    lock_env_parser,
    runs_sheet_parser,
    selftest_parser,
)
from .models import eval_parser, export_hf_parser, fold_parser, taper_hf_parser
from .probe import probe_parser
from .replay import replay_parser
from .scaling import scaling_parser
from .stability import stability_parser
from .train import gpus_parser, lr_grid_parser, train_parser

# ---- the parser -----------------------------------------------------------------------------------


def _bench_parser(sub) -> None:
    from .bench import add_subcommand  # train-step, forward, decode

    add_subcommand(sub)


def _analysis_parsers(sub) -> None:
    from .analysis import add_subcommands  # make, table, figure, tails, claims, job-times

    add_subcommands(sub)


def _record_parsers(sub) -> None:
    from .record import add_subcommands  # manifest, check-manifest, snapshot, docs

    add_subcommands(sub)


COMMANDS = (  # in the order of `tapernorm --help`
    prepare_data_parser,
    train_parser,
    gpus_parser,
    prepare_eval_parser,
    eval_parser,
    fold_parser,
    export_hf_parser,
    taper_hf_parser,
    probe_parser,
    selftest_parser,
    _analysis_parsers,
    _record_parsers,
    _bench_parser,
    check_config_parser,
    runs_sheet_parser,
    env_parser,
    check_env_parser,
    lock_env_parser,
    gpu_report_parser,
    lr_grid_parser,
    scaling_parser,
    stability_parser,
    replay_parser,
    rehearsal_inputs_parser,
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="tapernorm", description=__doc__)
    p.add_argument("--version", action="version", version=f"tapernorm {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return p


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


def _results_check(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """provenance.writing_results around a command that writes results (args.allow_dirty_arg's
    writes_results says so), which refuses code that differs from its commit unless allowed."""
    writes = getattr(args, "writes_results", None)
    if writes is None or not writes(args):
        return contextlib.nullcontext()
    return writing_results(args.allow_dirty)


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors the user can act on (bad input, missing files, the project's own
    errors, Ctrl-C: cli.errors) end in one line (set TAPERNORM_TRACEBACK=1 to see the traceback),
    any other keeps its traceback. A command that writes results is refused, before it starts,
    where the code differs from its commit, unless --allow-dirty (_results_check)."""
    args = build_parser().parse_args(argv)
    if getattr(args, "expand", None):  # `make NAME ...`: the output's own command
        args = build_parser().parse_args(args.expand(args))
    try:
        with _library_logs_to_stderr(), _results_check(args):
            return args.func(args)
    except (Exception, KeyboardInterrupt) as e:
        reported = one_line(e, args.command)
        if reported is None or os.environ.get("TAPERNORM_TRACEBACK"):
            raise
    message, status = reported
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 speaks for all
        below_bar = "\n" if status == 130 and sys.stderr.isatty() else ""  # (and the ^C)
        print(f"{below_bar}tapernorm {args.command}: {message}", file=sys.stderr)
    return status
