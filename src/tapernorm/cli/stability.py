"""`tapernorm stability summary`: the stability study's summary from its records
(workflow/stability.py plans the runs; analysis/studies/stability.py says what the summary holds)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import allow_dirty_arg, force_arg

SUMMARY_FILES = ("summary.csv", "summary.md", "summary.json")
FACTOR_FILES = ("factors.csv", "factors.md")


def _cmd_summary(args: argparse.Namespace) -> int:
    from ..analysis.studies.stability import read_records, summarize, write_summary
    from ..runtime.out_files import claim_stability_summary

    claim_stability_summary(args.out, SUMMARY_FILES, args.force)
    summary = summarize(read_records(args.records))
    for path in write_summary(summary, args.out, args.made_by):
        print(f"wrote {path}")
    print((args.out / "summary.md").read_text())
    return 0


def _cmd_factors(args: argparse.Namespace) -> int:
    from ..analysis.studies.stability_factors import write_factor_table
    from ..runtime.out_files import claim_stability_summary

    claim_stability_summary(args.out, FACTOR_FILES, args.force)
    for path in write_factor_table(args.records, args.out):
        print(f"wrote {path}")
    print((args.out / "factors.md").read_text())
    return 0


def stability_parser(sub) -> None:
    g = sub.add_parser(
        "stability",
        help="the stability study: summarise its records (snakemake ... stability --configfile "
        "config/config.yaml config/stability.yaml)",
    )
    steps = g.add_subparsers(dest="step", required=True)
    s = steps.add_parser(
        "summary",
        help="summary.csv, summary.md and summary.json: per width and arm the runs that blew up, "
        "the clean rate's exact interval, Fisher's p against the baseline, the loss gaps, the "
        "init x data grid and whether blow-ups follow the data order or the initialisation",
    )
    s.add_argument("--records", type=Path, nargs="+", required=True,
                   help="the study's record directories (each config.json, eval.json, "
                   "metrics.jsonl)")  # fmt: skip
    s.add_argument("--out", type=Path, required=True, help="directory of the summary files")
    s.add_argument("--made-by", default="", help="the command that made the study")
    force_arg(s, "stability summary", ", ".join(SUMMARY_FILES))
    allow_dirty_arg(s)
    s.set_defaults(func=_cmd_summary)
    f = steps.add_parser(
        "factors",
        help="factors.csv and factors.md: the runs that blew up, each trained again with one "
        "change (family stability_factors): how each ended and its gap to the baseline",
    )
    f.add_argument("--records", type=Path, nargs="+", required=True,
                   help="the factor runs' record directories, their base runs' and the "
                   "baselines of the same seed pairs")  # fmt: skip
    f.add_argument("--out", type=Path, required=True, help="directory of the table's files")
    force_arg(f, "stability factors", ", ".join(FACTOR_FILES))
    allow_dirty_arg(f)
    f.set_defaults(func=_cmd_factors)
