"""The tails battery of many models side by side (`tapernorm tails`, rule tails): tapernorm.probe's
battery (run_battery, in float32 and under bfloat16 autocast) of every run and folded model given,
on the same windows of one set of token shards, as one table (one row per model) and one JSON
record (everything each battery returned), which figures.tails draws.

    records = measure(subjects(runs, folded), TokenShards("data/pretrain"), BatterySettings())
    write_tails(records, "results/tables/table_tails", header)

A model with TaperNorm layers is measured at g = 0, as the project evaluates it and as `tapernorm
probe` does; a folded model (fold's folded/), DyT and the baselines have no gate and are measured as
they are. Each row says what the model is (its run, variant, width, seed, steps and tokens per
parameter: steps x batch x block size over the parameter count, from its run's config.json and
eval.json; a folded model's from the run it was folded from) and what its tails are: the clean
window loss (mean, p99, max), the worst window and the fraction of windows above twice the clean
median with 5% and with 20% of the tokens random, the worst window with 5% rare or unseen ids, the
residual search's ratio and the largest residual RMS after any block (the worst window of any group,
or the searched one); float32 and bfloat16 each in the CSV, the shown table giving bfloat16's beside
float32's where they differ at 3 significant digits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from ...data import TokenShards
from ...norms import taper_norms
from ...probe import BatterySettings, battery_inputs, run_battery
from ...probe.battery import BatteryInputs
from ...probe.measure import DTYPES
from ...probe.verdict import check_vocab
from ...runtime import bookkeeping
from ...runtime.jsonio import NON_FINITE, read_json
from ...runtime.output_set import OutputSet, check_member, json_bytes, marker_path
from ...runtime.provenance import stamp
from ...training.checkpoint import load_model
from ...variants import VARIANTS
from .. import comparable
from ..runs import load_runs
from ..tables.write import write_table

DTYPE_KEYS = tuple(DTYPES.values())  # run_battery's keys of float32 and bfloat16 autocast
NOISE, HEAVY_NOISE, OUTLIERS = "noise_5pct", "noise_20pct", ("rare_5pct", "unseen_5pct")
CELL = ("width", "variant", "steps")  # the runs of one row group (check_runs)
KINDS = ("run", "folded", "model")  # a run directory, fold's folded/, any other model directory
INFO_KEYS = ("run", "kind", "variant", "label", "width", "seed", "steps", "weights_step")
INFO_KEYS += ("batch_size", "block_size", "n_params", "tokens", "tokens_per_param", "diverged")
# the CSV's measured columns, each once per dtype (<name>_fp32, <name>_bf16)
METRICS = (
    "clean_loss_mean",
    "clean_loss_p99",
    "clean_loss_max",
    "noise_5pct_loss_max",
    "noise_5pct_above_2x",
    "noise_20pct_loss_max",
    "noise_20pct_above_2x",
    "rare_5pct_loss_max",
    "unseen_5pct_loss_max",
    "search_ratio",
    "worst_block_rms",
)
# the shown table's measured columns: (header, metric, how a value is written)
SHOWN = (
    ("Clean loss mean", "clean_loss_mean", "loss"),
    ("Clean p99", "clean_loss_p99", "loss"),
    ("Clean max", "clean_loss_max", "loss"),
    ("5%-noisy max", "noise_5pct_loss_max", "loss"),
    ("5%-noisy >2x med", "noise_5pct_above_2x", "fraction"),
    ("20%-noisy max", "noise_20pct_loss_max", "loss"),
    ("20%-noisy >2x med", "noise_20pct_above_2x", "fraction"),
    ("Rare-id max", "rare_5pct_loss_max", "loss"),
    ("Unseen-id max", "unseen_5pct_loss_max", "loss"),
    ("Search ratio", "search_ratio", "loss"),
    ("Worst block RMS", "worst_block_rms", "loss"),
)


@dataclass
class Subject:
    """A model to measure: its directory (None where there is nothing to load: a fold that was
    skipped because its run diverged, `skipped` saying so) and what it is (INFO_KEYS)."""

    model_dir: Path | None
    info: dict
    skipped: str | None = None


# ---- what each model is ----------------------------------------------------------------------


def _tokens(info: dict) -> dict:
    """tokens (the weights' steps x batch x block size) and tokens_per_param, where known."""
    parts = (info.get("weights_step"), info.get("batch_size"), info.get("block_size"))
    tokens = math.prod(parts) if all(p is not None for p in parts) else None
    n = info.get("n_params")
    per = tokens / n if tokens is not None and n else None
    return {"tokens": tokens, "tokens_per_param": per}


def model_info(model_dir: Path, config: dict, kind: str = "model") -> dict:
    """What a model directory without a run config is: its name and width, nothing of training."""
    info = dict.fromkeys(INFO_KEYS)
    m = config.get("model", {})
    info.update(run=model_dir.name, kind=kind, label=model_dir.name, diverged=False)
    info.update(width=m.get("n_embd"), block_size=m.get("block_size"))
    return info


def run_info(run_dir: Path) -> dict:
    """What a run directory is (INFO_KEYS) from its config.json and eval.json (a directory with no
    run config in its config.json: model_info)."""
    run_dir = Path(run_dir)
    config = bookkeeping.read(bookkeeping.MODEL_CONFIG, run_dir / "config.json")
    if "train" not in config:
        return model_info(run_dir, config)
    outcome = run_dir / "eval.json"
    result = bookkeeping.read(bookkeeping.RUN_RESULT, outcome) if outcome.is_file() else {}
    m, t, variant = config["model"], config["train"], config.get("variant")
    name = run_dir.resolve().name  # (the config's name may carry its family: pretrain/<name>)
    info = {
        "run": name,
        "kind": "run",
        "variant": variant if variant in VARIANTS else None,
        "label": VARIANTS[variant]["label"] if variant in VARIANTS else name,
        "width": int(m["n_embd"]),
        "seed": config.get("seed"),
        "steps": int(t["steps"]),
        "weights_step": result.get("weights_step", int(t["steps"])),
        "batch_size": int(t["batch_size"]) * int(t.get("grad_accum", 1)),
        "block_size": int(m["block_size"]),
        "n_params": result.get("n_params", config.get("n_params")),
        "diverged": bool(result.get("diverged", False)),
    }
    return {**info, **_tokens(info)}


def _fold_paths(path: Path) -> tuple[Path, Path]:
    """(fold's output directory, its folded/) of `path`, given as either."""
    path = Path(path)
    if (path / "folded").is_dir() or (path / "verify.json").is_file():
        return path, path / "folded"
    return path.parent, path


def folded_subject(path: Path) -> Subject:
    """The folded model of fold's output directory or of its folded/ (`path`): what it is is its
    source run's (the run it was folded from), kind "folded"; a fold skipped for a diverged run is
    a Subject with nothing to load."""
    fold_dir, folded = _fold_paths(path)
    verify = read_json(fold_dir / "verify.json") if (fold_dir / "verify.json").is_file() else {}
    record = folded / "config.json"
    config = bookkeeping.read(bookkeeping.MODEL_CONFIG, record) if record.is_file() else None
    if config is None and not verify.get("skipped"):
        raise FileNotFoundError(
            f"{path}: no folded model (no {folded / 'config.json'}): give a directory "
            "`tapernorm fold` wrote, or its folded/"
        )
    source = (config or {}).get("source") or verify.get("model")
    if source and (Path(source) / "config.json").is_file():
        info = run_info(Path(source))
    else:  # the run it came from is not here: what the fold's own files say
        info = model_info(fold_dir, config or {}, "folded")
    info["kind"], info["label"] = "folded", f"{info['label']}, folded"
    if config is None:
        return Subject(None, info, skipped=str(verify["skipped"]))
    return Subject(folded, info)


def subjects(runs: Sequence[Path], folded: Sequence[Path] = ()) -> list[Subject]:
    """The models of `runs` (run or model directories) and `folded` (fold's output directories or
    their folded/), in that order."""
    found = [Subject(Path(r), run_info(Path(r))) for r in runs]
    found += [folded_subject(Path(f)) for f in folded]
    if not found:
        raise ValueError("tails: no model given (--runs, --folded)")
    return found


def check_runs(found: Sequence[Subject], allow_mixed: bool = False) -> str:
    """The training runs among `found` (kind run: a run config with `train`) checked as any
    aggregate checks what it puts side by side (comparable.check): a cell is a width, variant and
    length (CELL: the table shows training lengths side by side on purpose, and fig_tails draws a
    variant's seeds at its longest length as one group), its runs one recipe but the seed; the
    variants of one width and length paired at one recipe but what makes them; each run once and
    complete. Folded and other model directories have no training record and are not checked.
    Returns the note of a mix `allow_mixed` let through ('' when none)."""
    dirs = [s.model_dir for s in found if s.info["kind"] == "run" and s.model_dir is not None]
    if not dirs:
        return ""
    return comparable.mixed_note(comparable.check(load_runs(dirs)[0], CELL, allow_mixed))


# ---- the batteries ---------------------------------------------------------------------------


def _progress(i: int, n: int, record: dict) -> str:
    head = f"tails: [{i}/{n}] {record['label']} ({record['run']})"
    if record.get("battery") is None:
        return f"{head}: not measured ({record['skipped']})"
    fp32, seconds = record["battery"]["fp32"], record["battery"]["seconds"]
    return (
        f"{head}: {seconds:.1f} s; 5%-noisy max window loss {fp32[NOISE]['loss']['max']:.4g}, "
        f"search ratio {fp32['search']['ratio']:.4g}"
    )


def measure_one(
    subject: Subject, shards: TokenShards, settings: BatterySettings, inputs: dict, device
) -> dict:
    """The record of one subject: what it is, the gate it was measured at, its battery (on the
    windows of `inputs`, {block size: BatteryInputs}, made here on first need)."""
    if subject.model_dir is None:
        return {**subject.info, "model_dir": None, "skipped": subject.skipped, "battery": None}
    model = load_model(subject.model_dir, device)
    check_vocab(shards, model, f"model {subject.model_dir}")
    block = model.config.block_size
    if block not in inputs:
        inputs[block] = battery_inputs(shards, block, settings)
    gate = 0.0 if any(True for _ in taper_norms(model)) else None
    info = dict(subject.info)
    if info.get("n_params") is None:  # an older record, or no run config: count them
        info["n_params"] = model.num_params()
        info.update(_tokens(info))
    battery = run_battery(model, inputs[block], settings, gate)
    return {**info, "model_dir": str(subject.model_dir), "gate": gate, "battery": battery}


def measure(
    found: Sequence[Subject],
    shards: TokenShards,
    settings: BatterySettings,
    device="cpu",
    log: Callable[[str], None] = print,
) -> tuple[list[dict], dict[int, BatteryInputs]]:
    """(the record of each subject, the battery's inputs by block size), `log` told of each."""
    records, inputs = [], {}
    for i, subject in enumerate(found, 1):
        records.append(measure_one(subject, shards, settings, inputs, device))
        log(_progress(i, len(found), records[-1]))
    return records, inputs


# ---- the table -------------------------------------------------------------------------------


def _inf(value) -> float:
    """A battery number as a float, NaN and None (not measured) kept as NaN."""
    return math.nan if value is None else float(value)


def worst_block(result: dict) -> float:
    """The largest residual RMS entering the first block or after any block, over the worst window
    of every group and the searched window, of one dtype's results (NaN counted as +inf)."""
    lists = [g["worst"]["block_rms"] for g in result.values() if "worst" in g]
    lists.append(result["search"]["block_rms"])
    values = [math.inf if math.isnan(v) else v for values in lists for v in values]
    return max(values) if values else math.nan


def dtype_metrics(result: dict) -> dict:
    """METRICS of one dtype's results (NaN where the battery has no such group)."""

    def loss(group: str, key: str = "max") -> float:
        return _inf(result[group]["loss"][key]) if group in result else math.nan

    def tail(group: str) -> float:
        return _inf(result[group]["loss"]["above_2x_median"]) if group in result else math.nan

    return {
        "clean_loss_mean": loss("clean", "mean"),
        "clean_loss_p99": loss("clean", "p99"),
        "clean_loss_max": loss("clean"),
        "noise_5pct_loss_max": loss(NOISE),
        "noise_5pct_above_2x": tail(NOISE),
        "noise_20pct_loss_max": loss(HEAVY_NOISE),
        "noise_20pct_above_2x": tail(HEAVY_NOISE),
        "rare_5pct_loss_max": loss(OUTLIERS[0]),
        "unseen_5pct_loss_max": loss(OUTLIERS[1]),
        "search_ratio": _inf(result["search"]["ratio"]),
        "worst_block_rms": worst_block(result),
    }


def table_row(record: dict) -> dict:
    """The CSV's row of a record: what the model is, then each metric per dtype."""
    row = {key: record.get(key) for key in INFO_KEYS}
    battery = record.get("battery")
    row["gate"] = battery["gate"] if battery else None
    for key in DTYPE_KEYS:
        values = dtype_metrics(battery[key]) if battery and key in battery else {}
        row.update({f"{m}_{key}": values.get(m, math.nan) for m in METRICS})
    row["seconds"] = battery["seconds"] if battery else math.nan
    row["note"] = _note(record)
    row["model_dir"] = record.get("model_dir")
    return row


def _note(record: dict) -> str:
    if record.get("skipped"):
        return f"not measured: {record['skipped']}"
    if record.get("diverged"):
        return f"diverged; the weights of step {record.get('weights_step')}"
    return ""


def number(value: float, kind: str) -> str:
    """A cell: a loss or ratio in 3 significant digits (inf and nan spelled), a fraction in %."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan"
    if math.isinf(value):
        return "inf"
    if kind == "fraction":
        return f"{100 * value:.3g}%"
    return f"{value:,.0f}" if 1e3 <= abs(value) < 1e6 else f"{value:#.3g}"


def both(row: dict, metric: str, kind: str) -> str:
    """float32's value, and bfloat16's after a slash where it reads differently."""
    a = number(row[f"{metric}_fp32"], kind)
    b = number(row.get(f"{metric}_bf16", math.nan), kind)
    return a if b in (a, "nan") else f"{a} / {b}"


def _optional(value, fmt: str = "{}") -> str:
    return (
        "—"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else fmt.format(value)
    )


def shown_row(row: dict) -> dict:
    """The shown table's row of a CSV row."""
    out = {
        "Model": row["run"] + (", folded" if row["kind"] == "folded" else ""),
        "Variant": row["label"],
        "Width": _optional(row["width"]),
        "Seed": _optional(row["seed"]),
        "Steps": _optional(row["steps"], "{:,}"),
        "Tokens/param": _optional(row["tokens_per_param"], "{:.3g}"),
    }
    if row["note"].startswith("not measured"):
        return {**out, **{header: "—" for header, _, _ in SHOWN}}
    return {**out, **{header: both(row, metric, kind) for header, metric, kind in SHOWN}}


def arm_order(record: dict) -> tuple:
    """Rows in Table 1's order of variants, the folded models after the runs, then by width,
    steps and seed."""
    variants = list(VARIANTS)
    v = record.get("variant")
    return (
        KINDS.index(record["kind"]),
        variants.index(v) if v in variants else len(variants),
        record.get("label") or "",
        record.get("width") or 0,
        record.get("steps") or 0,
        record.get("seed") if record.get("seed") is not None else -1,
    )


def _dtypes_said(dtypes: Sequence[str]) -> str:
    """What a cell holds: float32's value, and bfloat16's where the battery measured it."""
    if "bfloat16" not in dtypes:
        return "Each cell is float32's (bfloat16 was not measured: `tapernorm tails --dtypes`)."
    if "float32" not in dtypes:
        return "Each cell is bfloat16 autocast's (float32 was not measured)."
    return (
        "Each cell is float32's, then bfloat16 autocast's after a slash where it reads differently."
    )


def caption(header: dict, rows: Sequence[dict]) -> str:
    """The table's caption: what was measured, on which windows, what each column is."""
    s = header["settings"]
    dtypes = s.get("dtypes", tuple(DTYPES))  # (a record from before the setting measured both)
    windows = ", ".join(
        f"{made['clean']['windows']} of {t} tokens" for t, made in header["inputs"].items()
    )
    text = (
        "**Tails battery** (not in the paper; `tapernorm probe`'s battery, src/tapernorm/probe/): "
        "each model at g = 0 (a tapered one with every TaperNorm at 0; a folded model, DyT and the "
        f"baselines as they are) on the validation windows of {header['data']} ({windows}). "
        "Window loss: the mean next-token loss of a window. 5%- and 20%-noisy: the same windows with "
        "that fraction of their tokens replaced by uniform random ids, scored against the clean "
        "next tokens; >2x med: the fraction of those windows whose loss is above twice the clean "
        f"windows' median. Rare-id and unseen-id: 5% of the tokens replaced by the {s['n_rare']} "
        "least frequent ids of the training split, or by ids it never holds (— where it holds "
        "every id). Search ratio: the largest RMS of the final norm's input that a greedy search "
        f"of {s['search']['budget']:,} forwarded windows of {s['search']['length']} tokens finds "
        "(seed fixed), over the median of the clean windows' prefixes. Worst block RMS: the "
        "largest residual RMS entering the first block or after any block, in the worst window of "
        f"any group or the searched one. {_dtypes_said(dtypes)} "
        "Tokens/param: the weights' steps x batch x block size "
        "over the parameter count. `tapernorm probe` fails a model past 2x its reference's "
        "5%-noisy max or 10x its search ratio."
    )
    notes = [
        f"{r['run']}{', folded' if r['kind'] == 'folded' else ''}: {r['note']}"
        for r in rows
        if r["note"]
    ]
    mixed = [header["mixed inputs allowed"]] if header.get("mixed inputs allowed") else []
    return text + (" " + "; ".join(notes) + "." if notes else "") + "".join(f" {m}" for m in mixed)


def header_of(shards: TokenShards, settings: BatterySettings, inputs: dict) -> dict:
    """What the JSON record says of the measurement: the data, the settings, each block size's
    inputs (how its windows were made)."""
    return {
        "data": str(shards.data_dir),
        "settings": asdict(settings),
        "inputs": {str(block): made.made for block, made in sorted(inputs.items())},
    }


def write_tails(
    records: Sequence[dict],
    out_stem: str | Path,
    header: dict,
    config_sha256: str | None = None,
    rehearsal: bool = False,
) -> list[Path]:
    """Write <stem>.csv (one numeric row per model), .md, .tex, .html (the shown table) and .json
    (the header, every record with its battery and its row); returns the paths."""
    records = sorted(records, key=arm_order)
    rows = [table_row(r) for r in records]
    data = pd.DataFrame(rows)
    shown = pd.DataFrame([shown_row(r) for r in rows])
    stem = Path(out_stem)
    if stem.suffix in (".csv", ".md", ".tex", ".html", ".json"):
        stem = stem.with_suffix("")
    out = OutputSet(marker_path(stem), "tapernorm tails")
    paths = write_table(
        shown, stem, caption(header, rows), config_sha256, rehearsal, data=data, into=out
    )
    made_by = stamp(config_sha256, rehearsal=rehearsal)
    models = [{**r, "row": row} for r, row in zip(records, rows, strict=True)]
    record = {"tails": "tails battery", "made_by": made_by, **header, "models": models}
    json_path = out.add(stem.with_name(stem.name + ".json"), json_bytes(record))
    out.commit()
    return [*paths, json_path]


# ---- reading the record back -----------------------------------------------------------------


def restored(obj: dict) -> dict:
    """A JSON object as written, its non-finite numbers (null, named under NON_FINITE) back."""
    spelled = obj.get(NON_FINITE) or {}
    out = {k: v for k, v in obj.items() if k != NON_FINITE}
    out.update({k: float(v) for k, v in spelled.items() if k in out and out[k] is None})
    return out


def read_rows(path: str | Path) -> pd.DataFrame:
    """The rows of a `tapernorm tails` JSON record (one per model, table_row's columns)."""
    check_member(path)  # the table and the record written together
    record = read_json(path)
    if not isinstance(record, dict) or not all(k in record for k in ("tails", "models")):
        raise ValueError(f"{path} is not the JSON record of `tapernorm tails`")
    rows = [restored(m["row"]) for m in record["models"]]
    if not rows:
        raise ValueError(f"{path}: no models")
    return pd.DataFrame(rows)


def make_tails(
    runs: Sequence[Path],
    folded: Sequence[Path],
    data: Path,
    out_stem: Path,
    settings: BatterySettings,
    device="cpu",
    config_sha256: str | None = None,
    rehearsal: bool = False,
    log: Callable[[str], None] = print,
    allow_mixed: bool = False,
) -> list[Path]:
    """The batteries of `runs` and `folded` on token shards `data`, written (write_tails); the runs
    checked first (check_runs: a mix `allow_mixed` lets through is said in the caption)."""
    found = subjects(runs, folded)
    mixed = check_runs(found, allow_mixed)
    shards = TokenShards(data)
    records, inputs = measure(found, shards, settings, device, log)
    if not inputs:
        raise ValueError("tails: none of the models given could be measured")
    header = header_of(shards, settings, inputs)
    if mixed:
        header["mixed inputs allowed"] = mixed
    return write_tails(records, out_stem, header, config_sha256, rehearsal)
