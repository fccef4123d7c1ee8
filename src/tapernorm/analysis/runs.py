"""Run directories -> two DataFrames: one row per run, and the long table of training records.

A run directory (written by `tapernorm train`) holds config.json (the resolved run config),
metrics.jsonl (one JSON object per logged step) and eval.json (validation loss, divergence).

Blow-ups (training/blowups.py: a non-finite loss or gradient, or a finite spike): a run's row says
whether it blew up (`blew_up`; a diverged run always did), how many steps did (`blowups`), the
first (`first_blowup_step`, its kind and gate) and every step an event was recorded at
(`blowup_steps`), and how they were found (`blowups_checked`): "every step" where eval.json has
them (the training loop checks every step), "logged steps" for an older record, scored again by
blowups.rescore on the steps its metrics.jsonl logged (a spike between two logged steps is not in
such a record), its divergence added as an event where the record has none at that step.
"End" statistics are means over the last 10% of a run's logged training steps (at least one record),
so one noisy step does not decide a table cell; for a diverged run they describe the steps before the
divergence, and the run is flagged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..runtime import bookkeeping
from ..runtime.bookkeeping import RERUN_TRAIN
from ..schedules import gate_at
from ..training import blowups
from ..training.metrics_log import METRICS, read_records
from ..variants import VARIANTS

ANALYSIS_INPUTS = ("config.json", METRICS, "eval.json")  # what the analysis reads of a run
GRAD_COLUMNS = ("grad_attn_qkv", "grad_attn_out", "grad_mlp_in", "grad_mlp_out")
CLIPPED_COLUMNS = tuple(f"{c}_clipped" for c in GRAD_COLUMNS)  # the same after clipping
SCALE_COLUMNS = ("prelogit_scale", "final_c_r", "saturation", "margin_pos_frac", "grad_h_cos")
END_COLUMNS = ("loss", "logit_norm", "grad_norm", *GRAD_COLUMNS, *CLIPPED_COLUMNS, *SCALE_COLUMNS)
END_FRACTION = 0.1  # "end of training" = the last 10% of logged steps
REWRITE = f"; {RERUN_TRAIN}"  # how a run's damaged files are written again
# columns of the run table copied onto every training record
RUN_KEYS = ("run", "name", "variant", "label", "width", "seed", "steps", "final_taper", "anchor")
EVERY_STEP, LOGGED_STEPS = "every step", "logged steps"  # how a run's blow-ups were found
DIVERGED_KIND = "diverged"  # an older record's divergence, which its metrics.jsonl does not hold


def end_window(n: int) -> int:
    """How many of `n` logged steps are the end of training (END_FRACTION, at least one)."""
    return max(1, math.ceil(END_FRACTION * n))


def final_tapered(variant: str) -> bool:
    """Whether a Table 1 variant tapers the final norm (Final-Taper, All-Taper, All-Taper (+aux))."""
    return VARIANTS[variant]["taper"] in ("final", "all")


def variant_order(variants) -> list[str]:
    """The variants present, in Table 1's order."""
    present = set(variants)
    return [v for v in VARIANTS if v in present]


def _read_json(path: Path, run_dir: Path, kind: bookkeeping.Kind) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"run directory {run_dir}: missing {path.name}{_hint(run_dir)}")
    return bookkeeping.read(kind, path)


def _hint(run_dir: Path) -> str:
    if not run_dir.is_dir():
        return " (the directory does not exist)"
    inner = [p for p in run_dir.iterdir() if (p / "eval.json").is_file()]
    if inner:
        return f" (it holds {len(inner)} run directories: pass those, not their parent)"
    return " (did the run finish?)"


def _read_metrics(path: Path, run_dir: Path) -> list[dict]:
    """Every record of a run's metrics.jsonl (metrics_log.read_records: a torn last line dropped,
    a broken line elsewhere a ValueError naming the file and line)."""
    if not path.is_file():
        raise FileNotFoundError(f"run directory {run_dir}: missing {path.name}{_hint(run_dir)}")
    return read_records(path)


def training_records(records: list[dict]) -> list[dict]:
    """The training records among a run's metrics records (periodic {"step", "val_loss"} and
    blow-up {"step", "blowup"} records left out)."""
    return [r for r in records if "gate" in r]


def _number(x) -> float:
    """A JSON number of a blow-up event ("inf" and "nan" written as strings) as a float."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def run_blowups(config: dict, result: dict, records: list[dict]) -> dict:
    """The blow-up columns of a run's row (module docstring) from its config.json, eval.json and
    every record of its metrics.jsonl."""
    if "blew_up" in result:  # checked at every step by the training loop
        events = blowups.events_of(records) or list(result.get("blowup_events") or [])
        count = int(result.get("blowups", len(events)))
        checked = str(result.get("blowups_checked", EVERY_STEP))
    else:  # an older record: the rule applied again to its logged steps
        clip = float(config["train"].get("grad_clip") or 0.0)
        events = blowups.rescore(records, clip if clip > 0 else math.inf)
        step = result.get("diverged_step")
        if result.get("diverged") and step is not None and step not in {e["step"] for e in events}:
            taper = config["taper"]
            gate = gate_at(int(step), int(taper["start"]), int(taper["end"]))
            events.append({"step": int(step), "blowup": {"kind": DIVERGED_KIND, "gate": gate}})
        events.sort(key=lambda e: e["step"])
        count, checked = len(events), LOGGED_STEPS
    first = events[0]["blowup"] if events else {}
    return {
        "blew_up": bool(count or events or result.get("diverged")),
        "blowups": max(count, int(bool(result.get("diverged")))),
        "first_blowup_step": (
            int(events[0]["step"])
            if events
            else result.get("first_blowup_step", result.get("diverged_step"))
        ),
        "first_blowup_kind": first.get("kind", DIVERGED_KIND if result.get("diverged") else None),
        "first_blowup_gate": _number(first.get("gate")) if events else math.nan,
        "blowup_steps": tuple(int(e["step"]) for e in events),
        "blowups_checked": checked,
    }


def _run_row(
    run_dir: Path, config: dict, result: dict, records: list[dict], every: list[dict] | None = None
) -> dict:
    """A run's row of the run table: `records` its training records, `every` all its metrics
    records (blow-up events included; `records` where not given)."""
    missing = [k for k in ("seed", "model", "train", "taper", "anchor", "data") if k not in config]
    if missing:
        raise ValueError(
            f"run directory {run_dir}: config.json lacks the run config keys {missing} "
            f"(it must be the resolved run config that `tapernorm train` writes){REWRITE}"
        )
    if not records and not result.get("diverged"):
        raise ValueError(f"run directory {run_dir}: metrics.jsonl has no training records{REWRITE}")
    m, t = config["model"], config["train"]
    variant = config.get("variant")
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"run directory {run_dir}: unknown variant {variant!r}")
    val = result.get("val_loss")
    row = {
        "run": str(run_dir),
        "family": run_dir.parent.name,
        "name": config.get("name", run_dir.name),
        "variant": variant,
        "label": VARIANTS[variant]["label"] if variant else config.get("name", run_dir.name),
        "width": int(m["n_embd"]),
        "n_layer": int(m["n_layer"]),
        "n_head": int(m["n_head"]),
        "seed": int(config["seed"]),
        "data_seed": int(
            config["seed"] if config.get("data_seed") is None else config["data_seed"]
        ),
        "compiled": bool(t.get("compile", False)),
        "steps": int(t["steps"]),
        "batch_size": int(t["batch_size"]) * int(t["grad_accum"]),
        "block_size": int(m["block_size"]),
        "vocab_size": m.get("vocab_size"),  # None where the data's tokenizer sets it
        "warmup_steps": int(t["warmup_steps"]),
        "lr": float(t["lr"]),
        "taper_start": config["taper"]["start"],
        "taper_end": config["taper"]["end"],
        "ema_mu": config["taper"].get("ema_mu"),
        "grad_clip": t.get("grad_clip"),
        "mlp": m.get("mlp") or ("gelu" if m.get("style") == "gpt2" else "swiglu"),  # (older)
        "corpus": config["data"]["dir"],
        "train_tokens": config["data"].get("train_tokens"),
        "final_taper": m["taper"] in ("final", "all"),
        "internal_taper": m["taper"] in ("internal", "all"),
        "anchor": bool(config["anchor"]["enabled"]),
        "anchor_form": config["anchor"].get("form", "eq5"),
        "anchor_lam": float(config["anchor"].get("lam", math.nan)),
        "s_tgt": next((r["s_tgt"] for r in records if "s_tgt" in r), math.nan),
        "val_loss": float(val) if val is not None and math.isfinite(val) else math.nan,
        "diverged": bool(result.get("diverged", False)),
        "diverged_step": result.get("diverged_step"),
        "weights_step": result.get("weights_step"),
        "n_params": result.get("n_params", config.get("n_params")),
        "last_step": int(records[-1]["step"]) if records else 0,
        "geometry": bool(records) and all("grad_h_cos" in r for r in records),
        **run_blowups(config, result, records if every is None else every),
    }
    tail = records[-end_window(len(records)) :]
    for col in END_COLUMNS:
        values = [r[col] for r in tail if col in r and r[col] is not None]
        row[f"{col}_end"] = sum(values) / len(values) if values else math.nan
    return row


def load_runs(run_dirs: Sequence[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, metrics): one row per run, and every training record with the run's columns joined.

    Raises FileNotFoundError / ValueError naming the run directory when a file is missing or corrupt.
    """
    if not run_dirs:
        raise ValueError("no run directories given")
    rows, frames = [], []
    for d in run_dirs:
        run_dir = Path(d)
        cfg = _read_json(run_dir / "config.json", run_dir, bookkeeping.RUN_RECORD)
        result = _read_json(run_dir / "eval.json", run_dir, bookkeeping.RUN_RESULT)
        every = _read_metrics(run_dir / METRICS, run_dir)
        records = training_records(every)
        row = _run_row(run_dir, cfg, result, records, every)
        rows.append(row)
        if not records:  # diverged at step 1: nothing was logged
            continue
        frame = pd.DataFrame([{k: v for k, v in r.items() if k != "c"} for r in records])
        for key in RUN_KEYS:
            frame[key] = row[key]
        frames.append(frame)
    runs = pd.DataFrame(rows)
    for col in ("diverged_step", "first_blowup_step"):
        runs[col] = runs[col].astype("Int64")  # stays an integer beside NaNs
    dup = runs["run"][runs["run"].duplicated()]
    if len(dup):
        raise ValueError(f"run directory {dup.iloc[0]} given twice")
    frames = frames or [pd.DataFrame(columns=["step", *RUN_KEYS])]  # every run diverged at step 1
    return runs, pd.concat(frames, ignore_index=True)


def val_records(runs: pd.DataFrame) -> pd.DataFrame:
    """The validation curve of every run of `runs` (load_runs' table): each periodic evaluation
    (log.eval_every: {"step", "val_loss", "val_gate"}, at the gate the run held then) and the final
    one at g = 0 (eval.json, at its weights' step), with the run's columns (RUN_KEYS) joined."""
    rows = []
    for run in runs.to_dict("records"):
        for rec in read_records(Path(run["run"]) / METRICS):
            if "val_loss" in rec and rec["val_loss"] is not None:
                rows.append({"step": rec["step"], "val_loss": rec["val_loss"], **_keys(run)})
        if math.isfinite(run["val_loss"]) and run["weights_step"] is not None:
            rows.append({"step": run["weights_step"], "val_loss": run["val_loss"], **_keys(run)})
    frame = pd.DataFrame(rows, columns=["step", "val_loss", *RUN_KEYS])
    return frame.drop_duplicates(["run", "step"], keep="last").reset_index(drop=True)


def _keys(run: dict) -> dict:
    return {key: run[key] for key in RUN_KEYS}


def diverged_text(runs: pd.DataFrame) -> str:
    """'all_aux-d64-s2 at step 4, final-d64-s0 at step 1 (nothing logged)' of the diverged runs
    among `runs`, in their order ('' when none)."""
    out = []
    for r in runs[runs["diverged"]].to_dict("records"):
        step = r.get("diverged_step")
        text = r["name"] + (f" at step {step}" if step is not None and not pd.isna(step) else "")
        out.append(text + ("" if r.get("last_step", 1) else " (nothing logged)"))
    return ", ".join(out)


def blown_up(runs: pd.DataFrame) -> pd.Series:
    """Whether each run of `runs` blew up (diverged or spiked); a table without the blow-up
    columns (built by hand) knows only its divergences."""
    column = runs["blew_up"] if "blew_up" in runs.columns else runs["diverged"]
    return column.fillna(False).astype(bool) | runs["diverged"].fillna(False).astype(bool)


KIND_TEXT = {
    "nonfinite_loss": "non-finite loss",
    "nonfinite_grad": "non-finite gradient",
    "loss_spike": "loss spike",
    "grad_spike": "gradient spike",
    DIVERGED_KIND: "divergence",
}


def blowup_text(run: dict) -> str:
    """'a loss spike at step 1,750 (g=0.077; 3 steps blew up)' of a run row that blew up."""
    kind = run.get("first_blowup_kind")
    step = run.get("first_blowup_step")
    text = "a " + (KIND_TEXT.get(kind, str(kind)) if kind else "blow-up")
    if step is not None and not pd.isna(step):
        text += f" at step {int(step):,}"
    gate = run.get("first_blowup_gate")
    extra = [f"g={gate:.3f}"] if gate is not None and not pd.isna(gate) else []
    count = run.get("blowups")
    if count is not None and not pd.isna(count) and int(count) > 1:
        extra.append(f"{int(count)} steps blew up")
    if run.get("diverged"):
        extra.append("diverged")
    return text + (f" ({'; '.join(extra)})" if extra else "")


def corpus_of(runs: pd.DataFrame) -> str:
    """The corpus the runs trained on: the name in their data directory's meta.json (written by
    `tapernorm prepare-data`), else the directory."""
    names = [(shards_meta(d) or {}).get("corpus") or str(d) for d in sorted(set(runs["corpus"]))]
    return ", ".join(dict.fromkeys(names))


def shards_meta(data_dir: str | Path) -> dict | None:
    """meta.json of the token shards in `data_dir` (`tapernorm prepare-data`), or None where it
    cannot be read from here."""
    try:
        return bookkeeping.read(bookkeeping.SHARDS_META, Path(data_dir) / "meta.json")
    except (OSError, ValueError):
        return None


def describe_scale(runs: pd.DataFrame) -> str:
    """Where numbers were measured, from the configs: widths, steps, seeds per variant, corpus."""
    if runs.empty:
        return "no runs"
    widths = ", ".join(f"d={w}" for w in sorted(runs["width"].unique()))
    steps = ", ".join(f"{s:,}" for s in sorted(runs["steps"].unique()))
    per_cell = runs.groupby(["width", runs["variant"].fillna(runs["name"])]).size()
    lo, hi = int(per_cell.min()), int(per_cell.max())
    seeds = f"{lo}" if lo == hi else f"{lo}-{hi}"
    corpus = corpus_of(runs)
    text = f"{widths}; {steps} steps; {seeds} seed(s)/variant; corpus {corpus}"
    tokens = runs["train_tokens"].dropna().unique()
    if len(tokens):
        text += " (first " + ", ".join(f"{int(n):,}" for n in sorted(tokens)) + " train tokens)"
    return text


def pick_width(runs: pd.DataFrame, width: int | None) -> int:
    """`width` if runs have it, else (None) the largest width present."""
    widths = sorted(runs["width"].unique())
    if width is None:
        return int(widths[-1])
    if width not in widths:
        raise ValueError(f"no runs at width {width} (widths present: {widths})")
    return int(width)
