"""Tables 4 and 6 of the GPT-2 fine-tuning family (Sec. 6.4), and the numbers claim 8 is judged on.

Inputs are the eval JSON files of `tapernorm eval` on evaluation sets (one per run and set; each
carries the run's name, protocol, model, label and the folded model's loss for All-TaperLN) and the
fine-tuning run directories (their config.json gives the schedules of Table 6).

Table 4: mean CE per model, protocol and set, ours beside the paper's; the FakeLN row (Baroni et al.
2025) holds our rerun (the `fakeln` protocol, fakeln.py) where it ran, beside the published numbers
the paper quotes. Table 6: the schedules, ours (from the run configs) beside the paper's.

What the tables combine is checked first (analysis/comparable.py; check_runs, check_evals). A cell
is one model (meta.model): its runs, one per protocol, sit side by side in Table 4 and are given one
schedule in Table 6, so they share their config.json in every field but the seeds, those that do
not change numbers (comparable.IGNORED: meta among them) and those that make a protocol
(PROTOCOL_FIELDS: the taper, the norm, whether the scale loss is on, FakeLN's window); the data's
hash too, where recorded. Each run is given once (by content, and one run per model and protocol)
and its record complete. A row of Table 4 (a model and protocol) holds one eval file per set: all of
one run, by the run each names (its name, labels and outcome). `allow_mixed` lets a mix of
recipes, or of a row's runs, through and the caption says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ...runtime.digests import json_sha256
from ...runtime.jsonio import FileError, read_json
from ...training.divergence import diverged
from ...variants import PROTOCOLS
from .. import comparable, paper
from ..runs import load_runs
from .training import write_table

CELL = ("model", "protocol")  # a run of the family: its model's runs are compared by protocol
PROTOCOL_FIELDS = ("model.taper", "model.norm", "anchor.enabled")  # what makes a protocol (and
PROTOCOL_PREFIXES = ("fakeln.",)  # FakeLN's window): PROTOCOLS, workflow/finetune.run_config
NOT_OFFLINE = "not available offline"
NOT_RERUN = "published, not rerun"
NOT_RUN = "not run"
SET_NAMES = {"owt": "OWT", "pile": "Pile", "pile_filtered": "Pile-filtered"}


def _read(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"eval file {path} does not exist")
    try:
        obj = read_json(path)
    except FileError as e:  # not UTF-8 or not JSON (it names the file)
        raise ValueError(f"eval file {e}") from None
    if "set" not in obj or "run" not in obj:
        raise ValueError(f"eval file {path} is not an evaluation-set result of `tapernorm eval`")
    return obj


def table4_column(eval_set: str) -> str:
    """The paper's column an evaluation set fills: OWT for the fine-tuning corpus' held-out split
    (whatever the corpus: a stand-in off the paper's scale), else the set's own name."""
    return "owt" if eval_set == "heldout" else eval_set


def load_finetune_evals(paths: Sequence[str | Path]) -> pd.DataFrame:
    """One row per (run, evaluation set) from eval JSON files."""
    rows = []
    for p in paths:
        path = Path(p)
        obj = _read(path)
        meta = obj["run"].get("meta", {})
        if meta.get("protocol") not in PROTOCOLS:
            raise ValueError(f"eval file {path}: run {obj['run'].get('name')} has no protocol")
        set_meta = obj.get("set_meta", {})
        folded = obj.get("folded") or {}
        loss = obj.get("val_loss")
        diverged = bool(obj["run"].get("diverged", False))
        if diverged:  # scored as it was left (rolled back): not a fine-tuned model
            loss = None
        rows.append(
            {
                "file": str(path),
                "run": obj["run"].get("name"),
                "protocol": meta["protocol"],
                "model": meta["model"],
                "label": meta.get("label") or meta["model"],
                "paper": meta.get("paper"),
                "init": meta.get("init"),
                "set": obj["set"],
                "column": table4_column(obj["set"]),
                "corpus": set_meta.get("corpus"),
                "source": set_meta.get("source"),
                "row_len": set_meta.get("row_len"),
                "rows": obj.get("rows"),
                "loss": float(loss) if loss is not None and math.isfinite(loss) else math.nan,
                "folded_loss": folded.get("val_loss", math.nan),
                "fold_diff": folded.get("loss_diff", math.nan),
                "fold_skipped": folded.get("skipped", ""),
                "diverged": diverged,
                "diverged_step": obj["run"].get("diverged_step"),
                "diverged_note": obj.get("diverged_note", "") if diverged else "",
                "steps": obj["run"].get("steps"),
            }
        )
    df = pd.DataFrame(rows)
    if df.empty:
        raise ValueError("no eval files given")
    dup = df[df.duplicated(["model", "protocol", "set"])]
    if len(dup):
        raise ValueError(f"two eval files for {dup.iloc[0][['model', 'protocol', 'set']].tolist()}")
    return df


# what load_finetune_evals gives every row about divergence (for frames made elsewhere)
DIVERGENCE_COLUMNS = {
    "diverged": False,
    "diverged_step": None,
    "diverged_note": "",
    "fold_skipped": "",
}


def with_divergence(evals: pd.DataFrame) -> pd.DataFrame:
    """`evals` with the DIVERGENCE_COLUMNS it lacks at their defaults (nothing diverged)."""
    missing = {k: v for k, v in DIVERGENCE_COLUMNS.items() if k not in evals.columns}
    return evals.assign(**missing) if missing else evals


def paper_comparable(row: pd.Series) -> bool:
    """Whether our number is measured like the paper's: the paper's own hub model, on the paper's
    set (OWT held-out, The Pile or Pile-filtered)."""
    if row["paper"] is None or row["init"] != f"hf:{row['paper']}":
        return False
    return row["set"] != "heldout" or row["corpus"] == "openwebtext"


# ---- Table 4 ----------------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return "diverged" if x is None or not math.isfinite(x) else f"{x:.4f}"


def _loss_cell(cell: pd.DataFrame) -> str:
    """Our CE of one (model, protocol, set), or 'diverged at step N' for a diverged run."""
    row = cell.iloc[0]
    if row["diverged"]:
        step = row["diverged_step"]
        return "diverged" + (f" at step {int(step)}" if step is not None and step == step else "")
    return _fmt(row["loss"])


def diverged_runs(evals: pd.DataFrame) -> list[str]:
    """Why each diverged fine-tuning run is excluded, once per run."""
    evals = with_divergence(evals)
    rows = evals[evals["diverged"]].drop_duplicates(["model", "protocol"])
    return [
        r["diverged_note"] or f"{r['protocol']}-{r['model']} diverged at step {r['diverged_step']}"
        for _, r in rows.iterrows()
    ]


def _paper_cell(model: str | None, protocol: str, column: str) -> str:
    values = paper.TABLE4.get((model, protocol)) if model else None
    if values is None:
        return "—"
    text = f"{values[paper.TABLE4_SETS.index(column)]:.4f}"
    return (
        text + " (outlier-dominated)"
        if (model, protocol, column) in paper.TABLE4_OUTLIERS
        else text
    )


def _heldout_name(evals: pd.DataFrame) -> str:
    """What our OWT column holds: "OWT", or the stand-in corpus' held-out split in its place."""
    corpora = set(evals.loc[evals["set"] == "heldout", "corpus"].fillna("fine-tuning corpus"))
    if not corpora or corpora == {"openwebtext"}:
        return "OWT"
    return f"{'/'.join(sorted(corpora))} held-out, in OWT's place"


def table4(evals: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Mean CE per model and protocol on OWT / Pile / Pile-filtered, ours beside the paper's."""
    evals = with_divergence(evals)
    entries = []  # (our model or None, label, the paper's model or None)
    for model in dict.fromkeys(evals["model"]):
        first = evals[evals["model"] == model].iloc[0]
        entries.append((model, first["label"], first["paper"]))
    stand_ins = {paper_model for _, _, paper_model in entries}
    entries += [(None, name, p) for p, name in paper.GPT2_MODELS.items() if p not in stand_ins]
    rows, reran = [], "fakeln" in set(evals["protocol"])
    ours_name = {**SET_NAMES, "owt": _heldout_name(evals)}  # the OWT column may hold a stand-in
    for model, label, paper_model in entries:
        ran = set(evals[evals["model"] == model]["protocol"])
        for protocol in paper.TABLE4_PROTOCOLS:
            row = {
                "Model": label,
                "Paper model": paper.GPT2_MODELS.get(paper_model, "—"),
                "Protocol": PROTOCOLS[protocol]["label"] if protocol in PROTOCOLS else "FakeLN",
            }
            mine = evals[(evals["model"] == model) & (evals["protocol"] == protocol)]
            for column, name in SET_NAMES.items():
                cell = mine[mine["column"] == column]
                if protocol == "fakeln" and not reran:
                    ours = NOT_RERUN
                elif protocol not in ran:
                    ours = NOT_RUN
                elif cell.empty:
                    ours = NOT_OFFLINE
                else:
                    ours = _loss_cell(cell)
                row[f"{ours_name[column]} (ours)"] = ours
                row[f"{name} (paper)"] = _paper_cell(paper_model, protocol, column)
            diffs = mine["fold_diff"].dropna()
            row["Folded − unfolded (ours)"] = (
                f"max |ΔCE| {diffs.abs().max():.1e}"
                if len(diffs)
                else "not folded (diverged)"
                if (mine["fold_skipped"] != "").any()
                else "—"
            )
            rows.append(row)
    df = pd.DataFrame(rows)
    heldout = evals[evals["set"] == "heldout"]
    sets = []
    for corpus, group in heldout.groupby("corpus", dropna=False):
        what = "OWT held-out split (test_size=0.0005, seed=2357)"
        if corpus != "openwebtext":
            what = (
                f"the {corpus or 'fine-tuning corpus'} validation split (stands in for the OWT "
                "held-out split, which is not available offline)"
            )
        sets.append(
            f"OWT column: {what}, {int(group['rows'].max())} rows of "
            f"{int(group['row_len'].max())} tokens"
        )
    for name in ("pile", "pile_filtered"):
        got = evals[evals["set"] == name]
        if len(got):
            sets.append(
                f"{SET_NAMES[name]}: {got['source'].iloc[0]}, {int(got['rows'].max())} rows "
                f"of {int(got['row_len'].max())} tokens"
            )
        else:
            sets.append(f"{SET_NAMES[name]}: {NOT_OFFLINE} (not in this config's eval sets)")
    caption = (
        "**Table 4.** GPT-2 fine-tuning: mean cross-entropy at g=0 (each row of an evaluation set "
        "scored on its own) by model and protocol, ours beside "
        f"{paper.TABLE4_SOURCE}. " + "; ".join(sets) + ". " + _fakeln_note(reran) + " "
        f"'{NOT_RUN}': the paper's model has no run here. "
        "Folded − unfolded: the All-TaperLN model folded into its projections (untied head, "
        "output bias) scored on the same rows as the unfolded g=0 model."
    )
    if diverged := diverged_runs(evals):
        caption += (
            " Diverged (left out: the weights they kept are those they rolled back to, not a "
            "fine-tuned model; not folded either): " + "; ".join(diverged) + "."
        )
    return df, caption


def _fakeln_note(reran: bool) -> str:
    if not reran:
        return f"FakeLN: the published numbers of Baroni et al. (2025): {NOT_RERUN}."
    return (
        "FakeLN row: '(ours)' is FakeLN (ours), our rerun of Baroni et al. (2025)'s protocol (norms "
        "removed one at a time during fine-tuning, one average std per norm: docs/norm-free.md); "
        "'(paper)' is FakeLN (Baroni et al., published), as the paper quotes it."
    )


# ---- Table 6 ----------------------------------------------------------------------------------------


def _run_config(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"run directory {run_dir}: missing config.json (did it run?)")
    cfg = read_json(path)  # FileError naming it if it is not JSON
    if cfg.get("meta", {}).get("family") != "finetune":
        raise ValueError(f"run directory {run_dir} is not a fine-tuning run (meta.family)")
    return cfg


def _lr(lr: float, min_lr: float) -> str:
    return f"{lr:g} ({min_lr:g})"


def table6(run_dirs: Sequence[str | Path]) -> tuple[pd.DataFrame, str]:
    """Schedules per model: ours from the run configs, beside the paper's Table 6."""
    by_model: dict[str, list[dict]] = {}
    bad = [b.reason() for b in map(diverged, run_dirs) if b is not None]
    for d in run_dirs:
        cfg = _run_config(Path(d))
        by_model.setdefault(cfg["meta"]["model"], []).append(cfg)
    rows, ran = [], set()
    for model, cfgs in by_model.items():
        tapered = [c for c in cfgs if c["model"]["taper"] != "none"] or cfgs
        c = tapered[0]
        t, m = c["train"], c["model"]
        ref = paper.TABLE6.get(c["meta"].get("paper"))
        ran.add(c["meta"].get("paper"))
        row = {
            "Model": c["meta"].get("label") or model,
            "Paper model": paper.GPT2_MODELS.get(c["meta"].get("paper"), "—"),
            "Protocols (ours)": ", ".join(PROTOCOLS[x["meta"]["protocol"]]["label"] for x in cfgs),
            "Steps (ours)": f"{t['steps']} / {t['warmup_steps']} / {c['taper']['start']} / "
            f"{c['taper']['end']}",
            "LR (min) (ours)": _lr(t["lr"], t["min_lr"]),
            "λ (ours)": f"{c['anchor']['lam']:g}",
            "Tokens/step (ours)": f"{t['batch_size']} × {t['grad_accum']} × {m['block_size']} = "
            f"{t['batch_size'] * t['grad_accum'] * m['block_size']:,}",
        }
        row.update(_paper_schedule(ref))
        rows.append(row)
    for name, ref in paper.TABLE6.items():
        if name not in ran:
            row = {"Model": paper.GPT2_MODELS[name], "Paper model": paper.GPT2_MODELS[name]}
            row.update({k: NOT_RUN for k in rows[0] if k.endswith("(ours)")} if rows else {})
            row.update(_paper_schedule(ref))
            rows.append(row)
    caption = (
        "**Table 6.** Fine-tuning schedules: total steps / warmup end / taper start (last step at "
        "g=1) / taper end (first step at g=0), peak (min) learning rate, scale-loss weight λ and "
        f"tokens per optimizer step, ours from the run configs beside {paper.TABLE6_SOURCE} "
        f"(AdamW {paper.FINETUNE_BETAS}, weight decay {paper.FINETUNE_WEIGHT_DECAY:g}, clip 1.0, "
        f"EMA mu {paper.FINETUNE_EMA_MU:g}, ~2^19 tokens per step)."
    )
    if bad:
        caption += (
            f" Diverged (their schedules as configured; Table 4 leaves them out): {'; '.join(bad)}."
        )
    return pd.DataFrame(rows).fillna("—"), caption


def _paper_schedule(ref: paper.FinetuneSchedule | None) -> dict:
    if ref is None:
        keys = ("Steps (paper)", "LR (min) (paper)", "λ (paper)", "Tokens/step (paper)")
        return dict.fromkeys(keys, "—")
    return {
        "Steps (paper)": f"{ref.steps} / {ref.warmup_end} / {ref.taper_start} / {ref.taper_end}",
        "LR (min) (paper)": _lr(ref.lr, ref.min_lr),
        "λ (paper)": f"{ref.lam:g}",
        "Tokens/step (paper)": f"≈2^19 ({paper.FINETUNE_TOKENS_PER_STEP:,})",
    }


def _protocol_field(field: str) -> bool:
    return field in PROTOCOL_FIELDS or field.startswith(PROTOCOL_PREFIXES)


def check_runs(run_dirs: Sequence[str | Path], allow_mixed: bool = False) -> list[str]:
    """The fine-tuning runs checked as the module docstring says (a cell: one model, its runs
    paired by protocol); the notes of the mixes `allow_mixed` let through."""
    runs = load_runs(run_dirs)[0]
    metas = [_run_config(Path(r))["meta"] for r in runs["run"]]
    runs["model"] = [m.get("model") for m in metas]
    runs["protocol"] = [m.get("protocol") for m in metas]
    comparable.check_records(runs, CELL)
    return comparable.check_recipes(runs, CELL, allow_mixed, "protocol", _protocol_field)


def check_evals(eval_files: Sequence[str | Path], allow_mixed: bool = False) -> list[str]:
    """A row of Table 4 (a model and protocol) scored on one run: its eval files (one per set) name
    the same run (its name, labels and outcome, `tapernorm eval`'s run summary); the notes of the
    mixes `allow_mixed` let through."""
    rows: dict[tuple, dict[str, str]] = {}
    for p in eval_files:
        run = _read(Path(p))["run"]
        meta = run.get("meta") or {}
        rows.setdefault((meta.get("model"), meta.get("protocol")), {})[str(p)] = json_sha256(run)
    notes = []
    for (model, protocol), files in rows.items():
        if len(set(files.values())) > 1:
            named = ", ".join(Path(f).name for f in list(files)[: comparable.SHOWN])
            notes.append(
                f"eval files of one row (model={model}, protocol={protocol}) name different runs "
                f"(their run summaries differ: a run retrained after some sets were scored): {named}"
            )
    if notes and not allow_mixed:
        raise ValueError(f"{notes[0]}; {comparable.ALLOW.format('put')} in one row")
    return notes


def make_finetune_table(
    which: str,
    run_dirs: Sequence[str | Path],
    eval_files: Sequence[str | Path],
    out_stem: str | Path,
    config_sha256: str | None = None,
    rehearsal: bool = False,
    allow_mixed: bool = False,
) -> list[Path]:
    """Table 4 (from eval files) or 6 (from run directories) as csv/md/tex/html; the runs given
    (both tables) and Table 4's eval files checked first (check_runs, check_evals), a mix
    `allow_mixed` lets through said in the caption."""
    if which not in ("4", "6"):
        raise ValueError(f"not a fine-tuning table: {which!r}")
    if which == "4" and not eval_files:
        raise ValueError("table 4 needs --evals (eval JSON files of the fine-tuning runs)")
    if which == "6" and not run_dirs:
        raise ValueError("table 6 needs --runs (fine-tuning run directories)")
    notes = check_runs(run_dirs, allow_mixed) if run_dirs else []
    if which == "4":
        notes += check_evals(eval_files, allow_mixed)
        df, caption = table4(load_finetune_evals(eval_files))
    else:
        df, caption = table6(run_dirs)
    caption = comparable.with_mixed(caption, notes)
    return write_table(df, out_stem, caption, config_sha256, rehearsal)
