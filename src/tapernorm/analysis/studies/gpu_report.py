"""The first-GPU check's report, afterwards, on any machine, from the files the check returned
(summary.md, env.json, results.tar.gz): Table 3 and the decode table (csv/md/tex/html), figure 5,
and the GPU-hours of the paper config's pre-training grid recomputed from the measured training
step (`tapernorm gpu-report DIR`, written to DIR/report/). The check itself:
benchmarks/gpu_check.sh and tapernorm.machine.gpu_check.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

# the training step the paper config's variants take (bench train-step's model names): the tapered
# ones mid-taper, both branches computed, their most expensive phase
GPU_REPORT = "tapernorm gpu-report"  # the command its output sets' markers say to rerun
TIMED_AS = {
    "baseline": "ours_rmsnorm",
    "internal": "ours_taper_g0.5",
    "internal_aux": "ours_taper_g0.5",
    "final": "ours_taper_g0.5",
    "all": "ours_taper_g0.5",
    "all_aux": "ours_taper_g0.5",
    "dyt": "ours_dyt",
    "baseline_untied": "ours_rmsnorm",  # an untied head costs the tied one's matrix product
    "internal_aux_untied": "ours_taper_g0.5",
}


def extract_results(directory: Path) -> Path:
    """DIR/results/, unpacked from DIR/results.tar.gz if not yet (members checked to stay inside)."""
    results = directory / "results"
    archive = directory / "results.tar.gz"
    if not results.is_dir():
        if not archive.is_file():
            raise FileNotFoundError(f"{directory} has neither results.tar.gz nor results/")
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                target = (directory / member.name).resolve()
                if not target.is_relative_to(results.resolve()) or member.issym() or member.islnk():
                    raise ValueError(
                        f"{archive}: member {member.name!r} is not under results/ (only that "
                        "directory is unpacked, beside what DIR holds): give the archive "
                        "benchmarks/gpu_check.sh wrote"
                    )
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(directory, **safe)
    return results


def _csvs(results: Path, pattern: str, rerun: Path | None = None) -> list[Path]:
    """The CSVs matching `pattern` with at least one data row (a step killed early leaves none); a
    CSV of the same name in `rerun` (a step run again on its own) takes the place of the check's."""
    found = {p.name: p for p in sorted(results.glob(pattern))}
    if rerun is not None and rerun.is_dir():
        found |= {p.name: p for p in sorted(rerun.glob(pattern))}
    return [p for _, p in sorted(found.items()) if len(p.read_text().splitlines()) > 1]


def gpu_bench(directory: str | Path) -> tuple[object, str]:
    """(rows, where): the timed forward and decode rows of a check's output (a rerun in place of
    its step, as gpu_report), as tables.inference.load_bench reads benchmark CSVs, and one phrase
    naming the device, dtype and directory."""
    from ..tables import inference as inference_tables

    directory = Path(directory)
    results, rerun = extract_results(directory), directory / "rerun"
    files = _csvs(results, "forward.csv", rerun) + _csvs(results, "decode_*.csv", rerun)
    if not files:
        raise ValueError(f"{directory}: the check timed no forward or decode cell (summary.md)")
    rows = inference_tables.load_bench(files)
    first = rows.iloc[0]
    where = f"{first['device_name']}, {first['dtype']}, torch {first['torch']}; {directory}"
    return inference_tables.timed(rows), where


def gpu_hours(train_step: Path, config: Path) -> tuple[object, str]:
    """(table, caption): the paper config's pre-training grid and the ablation (variants x seeds x
    steps per width) at the measured ms per training step of the model each variant trains as."""
    import pandas as pd

    from ...config import yaml_load
    from ...workflow.training import seeds_of

    cfg = yaml_load(config.read_text(), f"config file {config}")
    steps = pd.read_csv(train_step)
    ms = {(r.variant, int(r.n_embd)): float(r.ms_per_step) for r in steps.itertuples()}
    models = ("ours_rmsnorm", "ours_taper_g0.5", "ours_dyt")
    rows, total, missing = [], 0.0, []
    for grid in ("pretrain", "ablation"):
        part = cfg.get(grid)
        for width in part["widths"] if part else []:
            n_steps = part["steps"][width] if isinstance(part["steps"], dict) else part["steps"]
            seeds = [seeds_of(part, v) for v in part["variants"]]
            timed = [TIMED_AS[v] for v in part["variants"]]
            timed = [m if (m, width) in ms or m != "ours_dyt" else "ours_rmsnorm" for m in timed]
            row = {
                "grid": grid,
                "width": str(width),
                "steps": f"{n_steps:,}",
                "runs": str(sum(seeds)),
                **{
                    f"ms/step {m}": f"{ms[(m, width)]:.2f}" if (m, width) in ms else "—"
                    for m in models
                },
            }
            if all((m, width) in ms for m in timed):
                hours = sum(
                    n * n_steps * ms[(m, width)] / 3.6e6 for m, n in zip(timed, seeds, strict=True)
                )
                total += hours
                row["GPU-hours"] = f"{hours:,.1f}"
            else:
                missing.append(f"{grid} d={width}")
                row["GPU-hours"] = "not measured"
            rows.append(row)
    rows.append({"grid": "total", "GPU-hours": f"{total:,.1f}" + (" (partial)" if missing else "")})
    first = steps.iloc[0].to_dict()
    caption = (
        f"**Pre-training GPU-hours of {config.name}**, from the training step measured by `tapernorm "
        f"bench train-step` on {first['device_name']} ({first['device']}), {first['dtype']}, torch "
        f"{first['torch']}, batch {first['batch_size']} x {first['block_size']}, L={first['n_layer']}, "
        f"{first['n_head']} heads, vocab {first['vocab_size']} (median of {first['repeats']} "
        "interleaved steps: forward, backward, clip, AdamW; eager). A run's hours: its steps x the ms "
        "per step of the model it trains as: the baseline as ours_rmsnorm, every tapered variant as "
        "ours_taper_g0.5 (mid-taper, both branches computed: its costliest phase; the scale loss's "
        "small term left out), DyT as ours_dyt (as ours_rmsnorm where DyT was not timed). Not "
        "counted: start-up, data loading, checkpoints, the final evaluation, the anchor sweep, GPT-2 "
        "fine-tuning; one job per GPU at a time."
    )
    if missing:
        caption += f" Not measured, left out of the total: {', '.join(missing)}."
    pre = cfg.get("pretrain") or {}
    paper = {
        "n_layer": pre.get("model", {}).get("n_layer"),
        "n_head": pre.get("model", {}).get("n_head"),
        "block_size": pre.get("model", {}).get("block_size"),
        "batch_size": pre.get("train", {}).get("batch_size"),
        "vocab_size": cfg.get("data", {}).get("vocab_size"),
    }
    other = {k: v for k, v in paper.items() if v is not None and int(first[k]) != v}
    if other:
        caption += (
            " NOT THE PAPER CONFIG'S SIZES: measured at "
            + ", ".join(f"{k}={first[k]} (config: {v})" for k, v in other.items())
            + ", so these hours do not cost it."
        )
    return pd.DataFrame(rows).fillna(""), caption


def _at(table: tuple[object, str], stem: Path) -> tuple[object, Path, str]:
    """(table, caption) and a stem as write_table's arguments."""
    return table[0], stem, table[1]


def gpu_report(
    directory: str | Path, config: str | Path = "config/paper.yaml", force: bool = False
) -> list[str]:
    """Build DIR/report/{table3, table_decode}.{csv,md,tex,html}, fig5_decode_speedup.{pdf,png,html} and
    gpu_hours.{csv,md,tex,html} from the check's files in DIR; returns one line per output (its path, or
    why it was not built: a step that failed or ran out of time leaves its part out). A step's CSV
    in DIR/rerun/ (that step run again on its own, same arguments) replaces the check's, said in a
    line. A file of those names that an earlier gpu-report did not write is refused (out_files),
    unless `force`."""
    from ...runtime.out_files import claim_figure, claim_table
    from ..figures.speedups import make_fig5
    from ..tables.inference import make_bench_table
    from ..tables.write import write_table

    directory = Path(directory)
    report = directory / "report"
    for stem in ("table3", "table_decode", "gpu_hours"):
        claim_table(report / stem, "gpu-report", force)
    claim_figure(report / "fig5_decode_speedup.pdf", force, "gpu-report")
    results = extract_results(directory)
    report.mkdir(exist_ok=True)
    rerun = directory / "rerun"
    forward = _csvs(results, "forward.csv", rerun)
    decode = _csvs(results, "decode_*.csv", rerun)
    train = _csvs(results, "train_step.csv", rerun)
    jobs = {
        "table3": (
            forward,
            lambda: make_bench_table("3", forward, report / "table3", command=GPU_REPORT),
        ),
        "table_decode": (
            decode,
            lambda: make_bench_table("decode", decode, report / "table_decode", command=GPU_REPORT),
        ),
        "fig5": (
            decode,
            lambda: make_fig5(decode, report / "fig5_decode_speedup.pdf", command=GPU_REPORT),
        ),
        "gpu_hours": (
            train,
            lambda: write_table(
                *_at(gpu_hours(train[0], Path(config)), report / "gpu_hours"),
                command=GPU_REPORT,
            ),
        ),
    }
    lines = [
        f"{p.name}: from {rerun.name}/, in place of {results.name}/{p.name}"
        for p in forward + decode + train
        if p.parent == rerun
    ]
    for name, (inputs, build) in jobs.items():
        if not inputs:
            lines.append(f"{name}: not built (no rows in {results.name}/; see summary.md)")
            continue
        try:
            lines += [str(p) for p in build()]
        except (ValueError, KeyError, OSError) as e:
            lines.append(f"{name}: not built ({e})")
    return lines
