"""`tapernorm make | table | figure | tails | claims | report-home | job-times`: the analysis
subcommands, added to the main parser. `make NAME` builds any output of the registry
(workflow/outputs.py) by its name: it is the output's own command (make_argv)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..analysis import builder
from ..workflow import outputs
from .args import POSITIVE, allow_dirty_arg, device_arg
from .probe import battery_args

RUNS_HELP = "run directories (each with config.json, metrics.jsonl, eval.json)"
BENCH_HELP = "CSVs written by `tapernorm bench forward|decode`"
Subparsers = argparse._SubParsersAction  # what ArgumentParser.add_subparsers returns


def _bench_csvs(args: argparse.Namespace) -> list[Path]:
    if args.runs:
        raise ValueError(f"{args.command} {args.which} is built from --bench CSVs, not --runs")
    if not args.bench:
        raise ValueError(f"{args.command} {args.which} needs --bench (tapernorm bench CSVs)")
    return args.bench


def _input(args: argparse.Namespace, name: str) -> object:
    """The value of option `name` that the output reads (a figure needs each of its inputs)."""
    if name == "bench":
        return _bench_csvs(args)
    value = getattr(args, name)
    if args.command == "figure" and not value:
        raise ValueError(f"figure {args.which} needs --{name.replace('_', '-')}")
    return value


def _build(args: argparse.Namespace, *stamp: object, **keywords: object) -> int:
    """Build output `args.which` of kind `args.command` by its builder in the registry."""
    entry = outputs.by_cli_id(args.command, args.which)
    which = (args.which,) if entry.by_id else ()
    inputs = [_input(args, name) for name in entry.reads]
    options = {name: getattr(args, name) for name in entry.options}
    for path in builder(entry)(*which, *inputs, args.out, *stamp, **keywords, **options):
        print(path)
    return 0


def _cmd_table(args: argparse.Namespace) -> int:
    from ..runtime.out_files import claim_table

    claim_table(args.out, "table", args.force)
    return _build(args, args.config_hash, args.rehearsal)  # what each table's stamp names


def _cmd_figure(args: argparse.Namespace) -> int:
    from ..runtime import provenance
    from ..runtime.out_files import claim_figure

    claim_figure(args.out, args.force)
    return _build(args, stamp=provenance.stamp(args.config_hash, rehearsal=args.rehearsal))


def _cmd_tails(args: argparse.Namespace) -> int:
    import torch

    from ..analysis.studies.tails import make_tails
    from ..probe import BatterySettings, SearchSettings
    from ..runtime.device import resolve_device
    from ..runtime.out_dirs import refuse_inside
    from ..runtime.out_files import TABLE_SUFFIXES, claim_tails, stem_paths

    inputs = [("run directory (--runs)", p) for p in args.runs]
    inputs += [("folded model (--folded)", p) for p in args.folded]
    for path in stem_paths(args.out, (*TABLE_SUFFIXES, ".json")):
        for label, source in [*inputs, ("token shards (--data)", args.data)]:
            refuse_inside(path, {label: source})
    claim_tails(args.out, args.force)
    search = SearchSettings(budget=args.search_budget, length=args.search_length)
    settings = BatterySettings(
        max_windows=args.windows,
        batch_size=args.batch_size,
        seed=args.seed,
        dtypes=tuple(dict.fromkeys(args.dtypes)),
        search=search,
    )
    device = resolve_device(args.device, setting="--device")
    threads = args.threads or (1 if device.type == "cpu" else None)  # (as `tapernorm probe`)
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        paths = make_tails(
            args.runs, args.folded, args.data, args.out, settings, device, args.config_hash,
            args.rehearsal, log=lambda line: print(line, flush=True),
            allow_mixed=args.allow_mixed,
        )  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    for path in paths:
        print(path)
    return 0


def _cmd_claims(args: argparse.Namespace) -> int:
    from ..analysis.claims.document import write_claims
    from ..runtime.out_files import claim_claims

    claim_claims(args.out, args.force)
    out = write_claims(
        args.out,
        runs=args.runs,
        ablation_runs=args.ablation_runs,
        sweep_runs=args.sweep_runs,
        verify_files=args.verify,
        finetune_evals=args.finetune_evals,
        bench_files=args.bench,
        lr_grid=args.lr_grid,
        config_sha256=args.config_hash,
        rehearsal=args.rehearsal,
        scaling=args.scaling,
        gpu=args.gpu,
        stability=args.stability,
        allow_mixed=args.allow_mixed,
        bench_pool=args.bench_pool,
    )
    print(out)
    return 0


def _cmd_report_home(args: argparse.Namespace) -> int:
    from ..analysis.report_home import write_home_page
    from ..runtime.out_dirs import refuse_inside
    from ..runtime.out_files import claim_outputs, stamped

    refuse_inside(args.out, {"claims record (--claims)": args.claims})
    own = lambda path: stamped(path) and b"**Made by**" in path.read_bytes()  # noqa: E731
    claim_outputs([args.out], "report-home", own, args.force)
    print(write_home_page(args.claims, args.out, args.rerun))
    return 0


def _cmd_job_times(args: argparse.Namespace) -> int:
    from ..analysis.tables.job_times import (
        job_times_table,
        load_job_times,
        require_records,
        write_job_times,
    )
    from ..analysis.tables.write import to_markdown
    from ..runtime.out_files import claim_table

    if args.out is None:
        records, missing = load_job_times(args.records, args.jobs)
        require_records(records, missing, args.records)
        print(to_markdown(*job_times_table(records, missing)), end="")
        return 0
    claim_table(args.out, "job-times", args.force)
    for path in write_job_times(
        args.records, args.out, args.jobs, args.config_hash, args.rehearsal
    ):
        print(path)
    return 0


def _force_option(parser: argparse.ArgumentParser, files: str) -> None:
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace {files} even where one exists that is not an earlier output of the command",
    )


def _allow_mixed_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="average or pair runs whose recipes differ (steps, LR, data, model shape, ...: "
        "analysis/comparable.py) on purpose; without it such a mix is an error, with it the "
        "output says which inputs were mixed",
    )


def _config_hash_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-hash",
        metavar="SHA256",
        help="the workflow config's sha256 (tapernorm.runtime.provenance.config_hash), named in the stamp "
        "of what made the output beside the commit",
    )
    parser.add_argument(
        "--rehearsal",
        action="store_true",
        help="the inputs come from a rehearsal on stand-ins (config/rehearsal.yaml): the stamp and "
        "the text say so",
    )


def _cmd_make(args: argparse.Namespace) -> int:
    """`make NAME ARGS` from a parsed command line: the output's own command, parsed and run
    (tapernorm.cli.main parses the expanded command line itself, make_argv, under its checks)."""
    parser = argparse.ArgumentParser(prog="tapernorm")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    command = parser.parse_args(make_argv(args))
    return command.func(command)


def make_argv(args: argparse.Namespace) -> list[str]:
    """`tapernorm make NAME ARGS` as the command line it stands for: the output's own command
    (`table 2`, `figure fig3`, `claims`, `tails`, `job-times`) and ARGS."""
    return [*outputs.BY_NAME[args.name].argv(), *args.args]


def add_subcommands(subparsers: Subparsers) -> None:
    """Add `make`, `table`, `figure`, `tails`, `claims`, `report-home` and `job-times` to the
    `tapernorm` parser's subparsers."""
    _add_make(subparsers)
    _add_table(subparsers)
    _add_figure(subparsers)
    _add_tails(subparsers)
    _add_claims(subparsers)
    _add_report_home(subparsers)
    _add_job_times(subparsers)


def _add_make(subparsers: Subparsers) -> None:
    names = "\n".join(f"  {o.name:<26} tapernorm {' '.join(o.argv())}" for o in outputs.OUTPUTS)
    m = subparsers.add_parser(
        "make",
        help="build any table, figure or the claims by its name (the file stem and Snakemake's "
        "target): `make table2 --runs ... --out ...` is `table 2 --runs ... --out ...`",
        description="Build one output of the pipeline by its name. The options are those of the "
        "output's own command (see its --help):\n\n" + names,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m.add_argument("name", choices=list(outputs.BY_NAME), metavar="NAME", help="the output")
    m.add_argument("args", nargs=argparse.REMAINDER, help="the options of the output's command")
    m.set_defaults(func=_cmd_make, expand=make_argv)


def _add_table(subparsers: Subparsers) -> None:
    t = subparsers.add_parser(
        "table", help="paper table from run directories or benchmark CSVs -> .csv/.md/.tex/.html"
    )
    t.add_argument(
        "which",
        choices=outputs.cli_ids("table"),
        help="table number, decode (3, decode: from --bench), or anchor (the scale-loss sweep)",
    )
    t.add_argument("--runs", type=Path, nargs="+", default=[], help=RUNS_HELP)
    t.add_argument(
        "--bench", type=Path, nargs="+", default=[], help="tables 3, decode: " + BENCH_HELP
    )
    t.add_argument(
        "--evals", type=Path, nargs="+", default=[], help="table 4: eval JSON files (eval sets)"
    )
    t.add_argument(
        "--out", type=Path, required=True, help="output stem, e.g. results/tables/table2"
    )
    _allow_mixed_option(t)
    _config_hash_option(t)
    _force_option(t, "the stem's .csv, .md, .tex and .html")
    allow_dirty_arg(t)
    t.set_defaults(func=_cmd_table)


def _add_figure(subparsers: Subparsers) -> None:
    f = subparsers.add_parser(
        "figure",
        help="paper figure from run directories or benchmark CSVs -> .pdf, .png and .html (the "
        "PNG with its caption as text), each stamped with the commit and config hash",
    )
    f.add_argument(
        "which",
        choices=outputs.cli_ids("figure"),
        help="a paper figure, claim_gaps (the claims' paired gaps, from --claims), lr_grid (the "
        "LR grid, from --lr-grid) or tails (the tails battery side by side, from --tails)",
    )
    f.add_argument("--runs", type=Path, nargs="+", default=[], help=RUNS_HELP)
    f.add_argument("--bench", type=Path, nargs="+", default=[], help="fig5: decode " + BENCH_HELP)
    f.add_argument("--claims", type=Path, help="claim_gaps: results/claims.json")
    f.add_argument("--lr-grid", type=Path, help="lr_grid: lr_grid.json of `tapernorm lr-grid`")
    f.add_argument("--tails", type=Path, help="tails: STEM.json of `tapernorm tails`")
    f.add_argument("--out", type=Path, required=True, help="e.g. figures/fig3_logit_norm.pdf")
    f.add_argument("--width", type=int, help="model width for figs 2-4 (default: the largest)")
    _allow_mixed_option(f)
    _config_hash_option(f)
    _force_option(f, "the stem's .pdf, .png and .html")
    allow_dirty_arg(f)
    f.set_defaults(func=_cmd_figure)


def _add_tails(subparsers: Subparsers) -> None:
    t = subparsers.add_parser(
        "tails",
        help="the tails battery (tapernorm probe's, in float32 and bfloat16) of run directories and "
        "folded "
        "models side by side -> .csv/.md/.tex/.html (one row per model) and .json (every number)",
        epilog="A model with TaperNorm layers is measured at g = 0; a folded model, DyT and "
        "baselines as they are. `tapernorm figure tails --tails STEM.json` draws the result.",
    )
    t.add_argument(
        "--runs", type=Path, nargs="+", default=[], metavar="DIR", help="run directories"
    )
    t.add_argument(
        "--folded",
        type=Path,
        nargs="+",
        default=[],
        metavar="DIR",
        help="folded models: `tapernorm fold`'s --out directories or their folded/ (a fold skipped "
        "for a diverged run is a row that says so)",
    )
    t.add_argument("--data", type=Path, required=True, help="token shards (validation windows)")
    t.add_argument(
        "--out", type=Path, required=True, help="output stem, e.g. results/tables/table_tails"
    )
    battery_args(t)
    t.add_argument(
        "--dtypes",
        nargs="+",
        choices=("float32", "bfloat16"),
        default=["float32", "bfloat16"],
        help="the battery's dtypes (default: both; bfloat16 is autocast, emulated and several "
        "times slower on a CPU without native bfloat16)",
    )
    t.add_argument(
        "--threads",
        type=POSITIVE,
        help="torch CPU threads (default: 1 on the CPU, as `tapernorm probe`: bit-reproducible, "
        "and many small forward passes run fastest on a busy machine)",
    )
    device_arg(t)
    _config_hash_option(t)
    _force_option(t, "the stem's .csv, .md, .tex, .html and .json")
    _allow_mixed_option(t)
    allow_dirty_arg(t)
    t.set_defaults(func=_cmd_tails)


def _add_claims(subparsers: Subparsers) -> None:
    c = subparsers.add_parser("claims", help="results/claims.md: paper's claims vs ours")
    c.add_argument("--runs", type=Path, nargs="+", default=[], help="pre-training " + RUNS_HELP)
    c.add_argument(
        "--ablation-runs", type=Path, nargs="+", default=[], help="scale-anchor ablation runs"
    )
    c.add_argument(
        "--sweep-runs",
        type=Path,
        nargs="+",
        default=[],
        help="anchor_sweep runs: All-Taper (+aux) of the ablation at other scale-loss weights",
    )
    c.add_argument("--verify", type=Path, nargs="+", default=[], help="verify.json files of fold")
    c.add_argument("--bench", type=Path, nargs="+", default=[], help=BENCH_HELP + " (claim 7)")
    c.add_argument(
        "--bench-pool",
        type=Path,
        nargs="+",
        default=[],
        help="other runs' benchmark directories (e.g. results/reference/*/results/bench): "
        "the speed rule of claim 7 and DyT's speed half pools those of --bench's host class "
        "with it (analysis/speed_rule.py)",
    )
    c.add_argument(
        "--finetune-evals",
        type=Path,
        nargs="+",
        default=[],
        help="eval JSON files of the GPT-2 fine-tuning runs (claim 8)",
    )
    c.add_argument(
        "--lr-grid",
        type=Path,
        help="lr_grid.json of `tapernorm lr-grid` at the runs' scale (TaperNorm vs DyT at each "
        "arm's best LR; the scale card's LR line)",
    )
    c.add_argument(
        "--scaling",
        type=Path,
        help="summary.csv of the scaling study (results/cpu/scaling): each claim as training "
        "grows, in claims 1-4 and DyT's rows and the scale card",
    )
    c.add_argument(
        "--gpu",
        type=Path,
        help="a first-GPU check's directory (results/gpu/DIR, benchmarks/README.md): claim 7's "
        "speedups on that GPU too, judged by the same criterion",
    )
    c.add_argument(
        "--stability",
        type=Path,
        help="summary.csv of the stability study (results/cpu/stability): the stability row, "
        "judged on it (the pretrain runs as context)",
    )
    c.add_argument(
        "--out",
        type=Path,
        required=True,
        help="markdown file, e.g. results/claims.md (.html and .json are written beside it)",
    )
    _allow_mixed_option(c)
    _config_hash_option(c)
    _force_option(c, "--out and the .html and .json beside it")
    allow_dirty_arg(c)
    c.set_defaults(func=_cmd_claims)


def _add_report_home(subparsers: Subparsers) -> None:
    r = subparsers.add_parser(
        "report-home",
        help="the Snakemake report's home page (reStructuredText) from claims.json: what made the "
        "run, the scale card and every verdict first",
    )
    r.add_argument("--claims", type=Path, required=True, help="results/claims.json")
    r.add_argument("--rerun", default="snakemake --cores all", help="the command that reran it")
    r.add_argument("--out", type=Path, required=True, help="e.g. results/report/home.rst")
    _force_option(r, "--out")
    allow_dirty_arg(r)
    r.set_defaults(func=_cmd_report_home)


def _add_job_times(subparsers: Subparsers) -> None:
    j = subparsers.add_parser(
        "job-times",
        help="wall time per rule and family from Snakemake's job records -> .csv/.md/.tex/.html",
    )
    j.add_argument(
        "records", type=Path, help="job records directory (<rule>/<wildcards>.tsv inside)"
    )
    j.add_argument(
        "--jobs",
        type=Path,
        nargs="+",
        help="only these records (relative to the directory); absent ones are counted, not an error",
    )
    j.add_argument("--out", type=Path, help="output stem (default: the markdown on stdout)")
    _config_hash_option(j)
    _force_option(j, "the stem's .csv, .md, .tex and .html")
    allow_dirty_arg(j, only_with_out=True)
    j.set_defaults(func=_cmd_job_times)
