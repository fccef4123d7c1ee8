"""An aggregate is only as good as what it averages: the one check of the runs a table, figure or
claim is built from (runs.load_runs' table), before any number is averaged or paired.

1. One recipe per cell (`check_recipes`): the runs of one cell (the columns `by` that the aggregate
   groups on: width and variant for Tables 1, 2 and 5, the figures and the claims; the scale-loss
   weight and form too for the sweep) share their config.json in every field but the seeds; and the
   cells of one width, whose seeds are paired (variant vs baseline at seed s), share it in every
   field but those that make the variant (VARIANT_FIELDS). The data's bytes are part of the recipe:
   config.json's meta.provenance.data_sha256 (the sha256 of meta.json, train.bin, val.bin and the
   tokenizer, written at training time since it was added) is compared among the runs that record
   it; a record without it (older) is not refused, and "data hash not recorded" is logged once
   (`check_data`: the hash alone, for the scaling and stability summaries, one corpus each). A
   difference is an error naming the field and the runs; `allow_mixed` (the commands'
   --allow-mixed) lets a deliberate mix through, and the notes it returns say so in the output.
2. No run twice (`check_records`): two run directories with the same metrics.jsonl and eval.json
   bytes and config.json (but its name and provenance) are one run (a backup copy, renamed or
   not), and two runs of one cell and seed pair are one seed counted twice; a run's variant must
   be the one its model trained as (a config.json edited by hand).
3. Complete records (`check_records`): a run that did not diverge has training records up to its
   final step (train.steps, eval.json's `steps`: the training loop logs it; a record whose
   eval.json has no `steps`, older or written by hand, may end one logging interval before); a
   non-finite number in a training record, or a non-finite validation loss, is an event only in
   a run whose eval.json records the divergence or blow-up (`diverged`, `blew_up`); elsewhere it
   is an error. 2 and 3 are never allowed.

Fields not compared (they do not change a run's numbers, or change them by no more than noise):
  seed, data_seed   the seeds, which the cell averages over
  name              the run's name (it carries the seed)
  meta              provenance: commit, host, versions, start and finish times, resumed_from_step
  init.trunk        the trunk a run branched from (one per seed: the stability study)
  n_params, weights_step, diverged_step   results written back into config.json
  train.device      where it ran ("auto" in the default config)
  train.compile     eager vs torch.compile: the same computation, equal to float noise (the scaling
                    study's extra records, trained eager, join cells trained compiled on purpose)
  log.every, log.eval_every, log.ckpt_every, log.geometry   how often a run logs, evaluates and
                    checkpoints, and whether it logs geometry: what is recorded, not what is trained
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pandas as pd

from ..runtime import bookkeeping
from ..runtime.digests import json_sha256
from ..training.metrics_log import METRICS, read_records
from ..variants import VARIANTS
from .runs import shards_meta

log = logging.getLogger(__name__)

SEED_FIELDS = ("seed", "data_seed")
IGNORED = (
    "name",
    "meta",
    "init.trunk",
    "n_params",
    "weights_step",
    "diverged_step",
    "train.device",
    "train.compile",
    "log.every",
    "log.eval_every",
    "log.ckpt_every",
    "log.geometry",
)
# what makes a variant (variants.VARIANTS: taper, anchor, norm, model keys): differs across a width
VARIANT_FIELDS = ("variant", "model.taper", "model.norm", "model.tie_embeddings", "model.emb_scale")
VARIANT_PREFIXES = ("anchor.", "model.dyt_")
CELL = ("width", "variant")  # what Tables 1, 2 and 5, the figures and the claims group on
# a cell of the scale-loss sweep (its table, figure 7, the claims' sweep): one arm at one weight
SWEEP_CELL = ("width", "variant", "anchor_lam", "anchor_form")
DATA_FIELD = "data sha256"  # the recipe's pseudo-field of meta.provenance.data_sha256 (short)
ALLOW = "pass --allow-mixed to {} them anyway"
SHOWN = 4  # runs named in a message


def _flat(obj: object, prefix: str = "") -> dict[str, object]:
    if isinstance(obj, dict):
        out: dict[str, object] = {}
        for key, value in obj.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tuple(obj) if isinstance(obj, list) else obj}


def _ignored(field: str) -> bool:
    return field in SEED_FIELDS or any(field == f or field.startswith(f + ".") for f in IGNORED)


def _variant_field(field: str) -> bool:
    return field in VARIANT_FIELDS or field.startswith(VARIANT_PREFIXES)


def recipe(config: dict) -> dict[str, object]:
    """A run's config.json flattened ('train.steps': 40), without the fields that are not compared
    (module docstring)."""
    return {k: v for k, v in _flat(config).items() if not _ignored(k)}


def _short(run: str) -> str:
    return Path(run).name


def _config(run: str) -> dict:
    return bookkeeping.read(bookkeeping.RUN_RECORD, Path(run) / "config.json")


def _data_digest(config: dict) -> str | None:
    """The short sha256 of a run's meta.provenance.data_sha256 (None: not recorded)."""
    hashes = ((config.get("meta") or {}).get("provenance") or {}).get("data_sha256")
    return json_sha256(hashes)[:12] if isinstance(hashes, dict) else None


def _with_data(runs: Sequence[str]) -> dict[str, dict]:
    """Each run's recipe, with DATA_FIELD where its record has the data's hash; logs once when some
    record has none (an older one: its data bytes are not compared)."""
    recipes, unrecorded = {}, []
    for run in runs:
        config = _config(run)
        recipes[run] = recipe(config)
        digest = _data_digest(config)
        if digest is None:
            unrecorded.append(_short(run))
        else:
            recipes[run][DATA_FIELD] = digest
    if unrecorded:
        shown = ", ".join(unrecorded[:SHOWN]) + (" ..." if len(unrecorded) > SHOWN else "")
        log.warning(
            "data hash not recorded in %d run(s) (%s: older records): their data bytes are not "
            "compared",
            len(unrecorded),
            shown,
        )
    return recipes


def _differences(recipes: dict[str, dict], skip=lambda field: False) -> list[tuple[str, dict]]:
    """(field, {run: value}) for every field on which the runs' recipes differ (DATA_FIELD: among
    the runs that record it)."""
    fields = sorted({f for r in recipes.values() for f in r if not skip(f)})
    out = []
    for field in fields:
        values = {run: r.get(field, "(absent)") for run, r in recipes.items()}
        if field == DATA_FIELD:
            values = {run: r[field] for run, r in recipes.items() if field in r}
        if len({json_sha256(v) for v in values.values()}) > 1:
            out.append((field, values))
    return out


def _one_per_value(values: dict[str, object]) -> str:
    """'a (40), b (80)': the first run of each distinct value."""
    seen: dict[str, str] = {}
    for run, value in values.items():
        seen.setdefault(json_sha256(value), f"{_short(run)} ({value})")
    return ", ".join(list(seen.values())[:SHOWN])


def _describe(where: str, diffs: list[tuple[str, dict]]) -> str:
    field, values = diffs[0]
    more = f" (and {len(diffs) - 1} more field(s): {', '.join(f for f, _ in diffs[1:4])})"
    return f"{where} differ in {field}: {_one_per_value(values)}" + (more if len(diffs) > 1 else "")


def _cell_name(row: dict, by: Sequence[str]) -> str:
    parts = []
    for column in by:
        value = row[column]
        parts.append(f"d={value}" if column == "width" else f"{column}={value}")
    return ", ".join(parts)


def _cells(runs: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    runs = runs.copy()
    if "variant" in by:  # a run without a Table 1 variant: its name without the seed
        stem = runs["name"].astype(str).str.replace(r"-s\d+$", "", regex=True)
        runs["variant"] = runs["variant"].fillna(stem)
    return runs


def check_recipes(
    runs: pd.DataFrame,
    by: Sequence[str] = CELL,
    allow_mixed: bool = False,
    pair: str = "variant",
    pair_field: Callable[[str], bool] = _variant_field,
) -> list[str]:
    """Part 1 of the module docstring. Returns the notes of the mixes allowed (none when the
    recipes agree); ValueError on the first mix unless `allow_mixed`. `pair`: the column of `by`
    whose values are compared side by side (variants; a fine-tuning table's protocols), the runs
    of the other columns' cells sharing their recipe but the fields `pair_field` names."""
    if runs.empty:
        return []
    runs = _cells(runs, by)
    recipes = _with_data(list(runs["run"]))
    notes, verb = [], "average"
    for key, cell in runs.groupby(list(by), sort=True, dropna=False):
        diffs = _differences({r: recipes[r] for r in cell["run"]})
        if diffs:
            where = f"runs of one cell ({_cell_name(dict(zip(by, key, strict=True)), by)})"
            notes.append(_describe(where, diffs))
    across = [c for c in by if c != pair]
    if pair in by:
        for key, group in runs.groupby(across or (lambda _: 0), sort=True, dropna=False):
            diffs = _differences({r: recipes[r] for r in group["run"]}, pair_field)
            if diffs:
                key = key if isinstance(key, tuple) else (key,)
                name = _cell_name(dict(zip(across, key, strict=True)), across) if across else "all"
                notes.append(_describe(f"runs paired across {pair}s ({name})", diffs))
                verb = verb if len(notes) > 1 else "compare"
    if notes and not allow_mixed:
        raise ValueError(f"{notes[0]}; {ALLOW.format(verb)}")
    return notes


def check_data(runs: pd.DataFrame, where: str) -> None:
    """The data's hash alone (part 1), over all of `runs` (a study whose summary checks its
    recipes by its own columns: the scaling and stability summaries, one corpus each): ValueError
    naming two runs on other data bytes; records without it are not compared (logged once)."""
    if runs.empty:
        return
    diffs = _differences(_with_data(list(runs["run"])), lambda field: field != DATA_FIELD)
    if diffs:
        raise ValueError(
            f"{_describe(where, diffs)}: runs trained on other data bytes cannot be compared; "
            "give the records of one corpus"
        )


def _content_hash(run: str, config: dict) -> str:
    """sha256 of a run's metrics.jsonl and eval.json bytes and its config.json but its name and
    provenance (a copy renamed, or copied at another time, is the same run)."""
    digest = hashlib.sha256()
    for name in (METRICS, "eval.json"):
        digest.update((Path(run) / name).read_bytes())
    kept = {k: v for k, v in config.items() if k not in ("name", "meta")}
    digest.update(json_sha256(kept).encode())
    return digest.hexdigest()


def _nonfinite(record: dict) -> str | None:
    for key, value in record.items():
        if isinstance(value, float) and not math.isfinite(value):
            return key
    return None


def _complete(run: dict, config: dict, result: dict) -> None:
    """Part 3 of the module docstring for one run (a row of load_runs' table)."""
    name, steps = _short(run["run"]), int(config["train"]["steps"])
    recorded = bool(result.get("diverged") or result.get("blew_up"))
    if "steps" in result and int(result["steps"]) != steps:
        raise ValueError(
            f"run {name}: eval.json says {result['steps']} steps, config.json {steps}: a record "
            "of another run; rerun it or leave it out"
        )
    for rec in read_records(Path(run["run"]) / METRICS):
        key = _nonfinite(rec) if "gate" in rec else None
        if key is not None and not recorded:
            raise ValueError(
                f"run {name}: metrics.jsonl step {rec.get('step')} holds a non-finite {key} but "
                "eval.json records no divergence or blow-up: a broken record; rerun the run or "
                "leave it out"
            )
    val = result.get("val_loss")
    if not result.get("diverged"):
        if val is None or not math.isfinite(float(val)):
            raise ValueError(
                f"run {name}: eval.json's val_loss is {val} but the run is not marked diverged: "
                "a broken record; rerun the run or leave it out"
            )
        # eval.json's `steps` (the trainer's record): its final step is logged; else (an older or
        # hand-written record) within one logging interval of it
        every = 0 if "steps" in result else int((config.get("log") or {}).get("every") or 1)
        if int(run["last_step"]) < steps - every:
            raise ValueError(
                f"run {name}: metrics.jsonl ends at step {run['last_step']} of its {steps} "
                "(eval.json says the run finished): a cut record; rerun `tapernorm train` on it "
                "or leave it out"
            )


def _variant_matches(run: dict, config: dict) -> None:
    variant = config.get("variant")
    if variant is None or variant not in VARIANTS:
        return
    spec, model = VARIANTS[variant], config["model"]
    trained = {
        "model.taper": (model.get("taper"), spec["taper"]),
        "anchor.enabled": (bool(config["anchor"]["enabled"]), spec["anchor"]),
        "model.norm": (model.get("norm", "default"), spec.get("norm", "default")),
    }
    for field, (got, want) in trained.items():
        if got != want:
            raise ValueError(
                f"run {_short(run['run'])}: config.json says variant {variant!r} but {field} is "
                f"{got!r} ({variant} trains with {want!r}): a config.json edited by hand; give "
                "the run's own record"
            )


def check_records(runs: pd.DataFrame, by: Sequence[str] | None = CELL) -> None:
    """Parts 2 and 3 of the module docstring; ValueError naming the run(s). `by`: the cell whose
    seed pairs must be distinct (None: not checked)."""
    seen: dict[str, str] = {}
    for run in runs.to_dict("records"):
        config = _config(run["run"])
        result = bookkeeping.read(bookkeeping.RUN_RESULT, Path(run["run"]) / "eval.json")
        _variant_matches(run, config)
        _complete(run, config, result)
        digest = _content_hash(run["run"], config)
        if digest in seen:
            raise ValueError(
                f"runs {seen[digest]} and {run['run']} are one run (the same metrics.jsonl, "
                "eval.json and config.json): a copy counts its seed twice; give each run once"
            )
        seen[digest] = run["run"]
    if by is not None and not runs.empty:
        cells = _cells(runs, by)
        twice = cells[cells.duplicated([*by, "seed", "data_seed"], keep=False)]
        if len(twice):
            names = ", ".join(_short(r) for r in twice["run"].head(SHOWN))
            raise ValueError(
                f"two runs of one cell and seed: {names} ({_cell_name(twice.iloc[0], by)}, "
                f"seed {twice['seed'].iloc[0]}): one seed counted twice; give each run once"
            )


def check(runs: pd.DataFrame, by: Sequence[str] = CELL, allow_mixed: bool = False) -> list[str]:
    """Every check of the module docstring on load_runs' table; the notes of the mixes allowed."""
    check_records(runs, by)
    return check_recipes(runs, by, allow_mixed)


def mixed_note(notes: Iterable[str]) -> str:
    """'Mixed inputs allowed (--allow-mixed): ...' ('' when none)."""
    notes = list(notes)
    return ("Mixed inputs allowed (--allow-mixed): " + "; ".join(notes) + ".") if notes else ""


def with_mixed(caption: str, notes: Iterable[str]) -> str:
    """A caption with mixed_note(notes) after it, where there is one."""
    mixed = mixed_note(notes)
    return f"{caption} {mixed}" if mixed else caption


def unread_data(runs: pd.DataFrame) -> list[str]:
    """The runs' data directories (config data.dir, the `corpus` column) whose meta.json cannot be
    read from here (a relative data.dir read away from the repository root): what was trained on
    is then not measured."""
    dirs = sorted(set(runs["corpus"])) if "corpus" in runs else []
    return [str(d) for d in dirs if shards_meta(d) is None]


def unread_data_text(dirs: Sequence[str]) -> str:
    """'not measured: ...' for the data directories of unread_data."""
    return (
        f"not measured: the runs' data directory {', '.join(dirs)} (config data.dir) has no "
        "readable meta.json from here; run where it resolves (the repository root)"
    )
