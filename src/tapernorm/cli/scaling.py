"""`tapernorm scaling record|summary|figure`: the scaling study's records, summary and figures
(workflow/scaling.py plans the runs; docs/scaling.md says what they show)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import allow_dirty_arg, force_arg

SUMMARY_FILES = ("summary.csv", "per_seed.csv", "summary.md", "summary.json")
FIGURES = ("fig_scaling_gaps", "fig_scaling_curves")


def _cmd_record(args: argparse.Namespace) -> int:
    from ..analysis.studies.scaling_io import copy_record

    for path in copy_record(args.run, args.out):
        print(f"wrote {path}")
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from ..analysis.studies.scaling import read_study, summarize
    from ..analysis.studies.scaling_io import write_summary
    from ..runtime.out_files import claim_scaling_summary

    claim_scaling_summary(args.out, SUMMARY_FILES, args.force)
    study = read_study(args.records, args.extra_records or ())
    summary, per_seed = summarize(study)
    for path in write_summary(summary, per_seed, args.out, args.made_by, study.extra_note):
        print(f"wrote {path}")
    print((args.out / "summary.md").read_text())
    return 0


def _cmd_figure(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..analysis.studies.scaling import read_study
    from ..analysis.studies.scaling_figures import curves_figure, gap_figure
    from ..runtime import provenance
    from ..runtime.out_files import claim_figure

    claim_figure(args.out, args.force, "scaling figure")
    stamp = provenance.stamp(args.config_hash, rehearsal=args.rehearsal)
    if args.name == "fig_scaling_gaps":
        if args.summary is None:
            raise ValueError("fig_scaling_gaps draws summary.csv: give --summary")
        paths = gap_figure(pd.read_csv(args.summary, dtype={"claim": str}), args.out, stamp)
    else:
        if not args.records:
            raise ValueError("fig_scaling_curves draws the runs' records: give --records")
        paths = curves_figure(read_study(args.records), args.out, stamp)
    for path in paths:
        print(f"wrote {path}")
    return 0


def scaling_parser(sub) -> None:
    g = sub.add_parser(
        "scaling",
        help="the scaling study: copy a run's records, summarise them, draw its figures "
        "(snakemake ... scaling --configfile config/config.yaml config/scaling.yaml)",
    )
    steps = g.add_subparsers(dest="step", required=True)
    r = steps.add_parser("record", help="copy a finished run's config.json, eval.json and "
                         "metrics.jsonl into the study's record directory")  # fmt: skip
    r.add_argument("--run", type=Path, required=True, help="the finished run's directory")
    r.add_argument("--out", type=Path, required=True, help="its record directory")
    r.set_defaults(func=_cmd_record)
    s = steps.add_parser("summary", help="summary.csv, per_seed.csv, summary.md and .json")
    s.add_argument("--records", type=Path, nargs="+", required=True,
                   help="the study's record directories (every run of the grid)")  # fmt: skip
    s.add_argument("--extra-records", type=Path, nargs="+",
                   help="records of the stability study: a run whose init seed equals its data "
                   "seed is a cell's recipe trained eager, and that cell takes it (said in its "
                   "row); the others are not used")  # fmt: skip
    s.add_argument("--out", type=Path, required=True, help="directory of the summary files")
    s.add_argument("--made-by", default="", help="the command that made the study")
    force_arg(s, "scaling summary", ", ".join(SUMMARY_FILES))
    allow_dirty_arg(s)
    s.set_defaults(func=_cmd_summary)
    f = steps.add_parser("figure", help="one of the study's figures (.pdf, .png, .html)")
    f.add_argument("name", choices=FIGURES)
    f.add_argument("--summary", type=Path, help="summary.csv (fig_scaling_gaps)")
    f.add_argument("--records", type=Path, nargs="+", help="record directories (curves)")
    f.add_argument("--config-hash", help="the study config's sha256, in the provenance stamp")
    f.add_argument("--rehearsal", action="store_true", help="a rehearsal's figure: says so")
    f.add_argument("--out", type=Path, required=True, help="output path without extension")
    force_arg(f, "scaling figure", "the figure's .pdf, .png and .html")
    allow_dirty_arg(f)
    f.set_defaults(func=_cmd_figure)
