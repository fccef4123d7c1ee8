"""The mechanism table of the stability study: runs that blew up, trained again with one change each
(workflow/stability.py FACTORS, family studies.stability_factors), same init and data. Which change
removes the blow-up, and what does it cost in validation loss?

Each cell is one run: how it ended (clean, a finite spike at step k, diverged at step k) and its
validation loss at g = 0 as a gap to the baseline of the same width, init and data seed (a change
that removes a blow-up but costs more loss than the tapered run had is no cure). A change made after
the taper starts (no_aux, plateau) meets the very weights and batches the run met until then; the
others change the trajectory from step 1, so a blow-up gone there is one draw.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...runtime.markdown import pipe_table
from ...runtime.output_set import OutputSet, marker_path
from ...variants import VARIANTS
from ...workflow.names import parse_factor_run
from ...workflow.stability import FACTORS
from ..runs import blown_up, load_runs
from ..stats import gap_pct

FAMILY = "stability_factors"
NONE = "none"  # the row of the runs themselves, as the study trained them


def _outcome(run: dict) -> str:
    if run["diverged"]:
        return f"diverged at {int(run['diverged_step']):,}"
    if run["blew_up"]:
        return f"spike at {int(run['first_blowup_step']):,}"
    return "clean"


def factor_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (base run, factor): the base runs (factor "none") and each change of them; with
    the baseline of the same width and seed pair, where the records hold it, the gap in %."""
    names = runs["name"].astype(str)
    changed = runs[names.str.startswith(f"{FAMILY}/")]
    if changed.empty:
        raise ValueError(f"no run of {FAMILY} among the records: nothing to tabulate")
    study = runs[~names.str.startswith(f"{FAMILY}/")]
    study = study.set_index(study["name"].astype(str).str.split("/").str[-1])
    rows = []
    for run in changed.to_dict("records"):
        base, factor = parse_factor_run(run["name"].split("/", 1)[1])
        if base not in study.index:
            raise ValueError(f"{run['name']}: the records lack its base run stability/{base}")
        for which, r in ((NONE, study.loc[base].to_dict()), (factor, run)):
            rows.append(_row(base, which, r, _baseline(study, r)))
    frame = pd.DataFrame(rows).drop_duplicates(["base", "factor"])
    order = {f: i for i, f in enumerate([NONE, *FACTORS])}
    frame["order"] = frame["factor"].map(order)
    return frame.sort_values(["base", "order"]).drop(columns="order").reset_index(drop=True)


def _baseline(study: pd.DataFrame, run: dict) -> dict | None:
    same = study[
        (study["variant"] == "baseline")
        & (study["width"] == run["width"])
        & (study["seed"] == run["seed"])
        & (study["data_seed"] == run["data_seed"])
    ]
    return same.iloc[0].to_dict() if len(same) else None


def _row(base: str, factor: str, run: dict, baseline: dict | None) -> dict:
    gap = float("nan")
    if baseline is not None and pd.notna(run["val_loss"]) and pd.notna(baseline["val_loss"]):
        gap = gap_pct(run["val_loss"], baseline["val_loss"])
    return {
        "base": base,
        "factor": factor,
        "change": "as trained" if factor == NONE else FACTORS[factor][0],
        "variant": run["variant"],
        "width": run["width"],
        "seed": run["seed"],
        "data_seed": run["data_seed"],
        "outcome": _outcome(run),
        "blew_up": bool(blown_up(pd.DataFrame([run])).iloc[0]),
        "blowups": run["blowups"],
        "weights_step": run["weights_step"],
        "val_loss": run["val_loss"],
        "gap_to_baseline_pct": gap,
    }


def factor_markdown(rows: pd.DataFrame) -> str:
    """The table: a row per change, a column per base run; each cell the outcome and the gap."""
    bases = list(dict.fromkeys(rows["base"]))
    labels = []
    for base in bases:
        r = rows[rows["base"] == base].iloc[0]
        label = VARIANTS[r["variant"]]["label"] if r["factor"] == NONE else base
        labels.append(f"{label} d={r['width']} init {r['seed']}, data {r['data_seed']}")
    table = []
    for factor in dict.fromkeys(rows["factor"]):
        cells, removed, tried = [], 0, 0
        for base in bases:
            hit = rows[(rows["base"] == base) & (rows["factor"] == factor)]
            if hit.empty:
                cells.append("—")
                continue
            r = hit.iloc[0]
            gap = "" if pd.isna(r["gap_to_baseline_pct"]) else f", {r['gap_to_baseline_pct']:+.2f}%"
            cells.append(f"{r['outcome']}{gap}")
            if factor != NONE:
                tried += 1
                removed += not r["blew_up"]
        change = rows[rows["factor"] == factor].iloc[0]["change"]
        name = "none (the run as the study trained it)" if factor == NONE else f"{factor}: {change}"
        tally = "—" if factor == NONE else f"{removed}/{tried}"
        table.append([name, *cells, tally])
    return "\n".join(pipe_table(["Change", *labels, "Removed the blow-up"], table)) + "\n"


def write_factor_table(record_dirs: list[str | Path], out: Path) -> list[Path]:
    """factors.csv and factors.md in `out` from the study's and the factor runs' records, as one
    output set (factors.set.json)."""
    rows = factor_rows(load_runs(record_dirs)[0])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = OutputSet(marker_path(out / "factors"), "tapernorm stability factors")
    files.add(out / "factors.csv", rows.to_csv(index=False).encode())
    head = (
        "# One change at a time: which removes the blow-up?\n\n"
        "Each column a run of the stability study that blew up, each row one change of it (same "
        "init and data); each cell how the run ended and its validation loss at g = 0 as a gap to "
        "the baseline of the same width and seed pair. no_aux and plateau change the run after "
        "its taper starts (the same weights and batches until then); the others change it from "
        "step 1, so a blow-up gone there is one draw, not a cure.\n\n"
    )
    files.add(out / "factors.md", (head + factor_markdown(rows)).encode())
    return files.commit()
