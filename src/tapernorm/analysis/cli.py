"""`tapernorm table | figure | claims`: the analysis subcommands, added to the main parser."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_table(args: argparse.Namespace) -> int:
    from .tables import make_table

    for path in make_table(args.which, args.runs, args.out):
        print(path)
    return 0


def _cmd_figure(args: argparse.Namespace) -> int:
    from .figures import make_figure

    for path in make_figure(args.which, args.runs, args.out, width=args.width):
        print(path)
    return 0


def _cmd_claims(args: argparse.Namespace) -> int:
    from .claims import write_claims

    out = write_claims(
        args.out, runs=args.runs, ablation_runs=args.ablation_runs, verify_files=args.verify
    )
    print(out)
    return 0


def add_subcommands(subparsers) -> None:
    """Add `table`, `figure` and `claims` to the `tapernorm` parser's subparsers."""
    runs_help = "run directories (each with config.json, metrics.jsonl, eval.json)"

    t = subparsers.add_parser("table", help="paper table from run directories -> .csv/.md/.tex")
    t.add_argument("which", choices=["1", "2", "5"], help="table number")
    t.add_argument("--runs", type=Path, nargs="+", required=True, help=runs_help)
    t.add_argument(
        "--out", type=Path, required=True, help="output stem, e.g. results/tables/table2"
    )
    t.set_defaults(func=_cmd_table)

    f = subparsers.add_parser("figure", help="paper figure from run directories -> .pdf and .png")
    f.add_argument("which", choices=["fig1", "fig2", "fig3", "fig4", "fig6"])
    f.add_argument("--runs", type=Path, nargs="+", required=True, help=runs_help)
    f.add_argument("--out", type=Path, required=True, help="e.g. figures/fig3_logit_norm.pdf")
    f.add_argument("--width", type=int, help="model width for figs 2-4 (default: the largest)")
    f.set_defaults(func=_cmd_figure)

    c = subparsers.add_parser("claims", help="results/claims.md: paper's claims vs ours")
    c.add_argument("--runs", type=Path, nargs="+", default=[], help="pre-training " + runs_help)
    c.add_argument(
        "--ablation-runs", type=Path, nargs="+", default=[], help="scale-anchor ablation runs"
    )
    c.add_argument("--verify", type=Path, nargs="+", default=[], help="verify.json files of fold")
    c.add_argument("--out", type=Path, required=True, help="markdown file, e.g. results/claims.md")
    c.set_defaults(func=_cmd_claims)
