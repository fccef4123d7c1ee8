"""The scaling study's numbers: each claim's paired gap (or ratio) at every width and training
length, from the study's committed run records (workflow/scaling.py says where they lie).

Claims 1, 2 and DyT: the validation-loss gap of Internal-Taper (+aux), All-Taper (+aux) and DyT to
their matched baselines, paired by seed, mean and 95% t interval (stats.paired_gap), judged as the
claims are (claims.loss.within_verdict: inside +-2%). Claims 3 and 4 on the ablation's fresh seeds:
per seed, claim 3's ratio U (end logit norm of the unanchored runs without a final norm over the
runs that keep one) and claim 4's ratio A (All-Taper (+aux) over the baseline), each judged on its
own by the claims' criteria (claims.chasing); their geometric mean and a 95% t interval on log scale.

Blow-ups: every loss row follows claims.loss.BLOWUP_RULE, the rule of the default's claims 1
and 2: a run of either compared arm that blew up (diverged, or a finite spike: training/blowups.py;
the committed records, which predate the per-step check, scored on their logged steps) limits the
verdict, a yes becoming partly; the row's gap is over the seed pairs where neither run blew up,
and beside it is the gap with the blown-up runs counted at the validation loss of the weights they
kept. Each row counts the runs of its cell's arms (n_runs), those that finished clean (n_clean)
and those that blew up (n_blowup), and names the blow-ups (blew_up).

Extra records (the stability study's, `--extra-records`): a run whose init seed equals its data
seed, of a variant, width and length that a cell of the study has, is that cell's recipe trained
eager instead of compiled; such a cell takes it, and says so (extra_runs): it counts in the cell's
runs, and it pairs with the eager run of the other arm of its seed, a seed's gap being the mean of
its compiled and eager pairs (the seed stays the unit of the interval). Any other extra record is
not used, and a record of another recipe (LR, batch, schedule, data, model) is refused.

summary.csv has one row per (claim, width, tokens per parameter); per_seed.csv one row per seed of
every row, with its own verdict where a claim is judged per seed (and, for a gap, its value with
the blown-up runs at their last weights).

Each row also gives (STUDY_COLUMNS) its runs' passes over their training tokens (epochs.py: NaN,
"not measured", where the data directory's meta.json cannot be read) and the training tokens
they are over, and, for claims 1 and 2 at a width of Table 2, the paper's gap with its version
(paper.table2_gap: "paper v1, Table 2, d=64: +1.46%"). Each seed of per_seed.csv names the
host(s) its runs trained on (`hosts`, from each record's provenance) and whether a pair of them,
the two runs compared, was trained on two hosts (`split_hosts`): two hosts' runs of one seed are
two nearby trajectories, not one (docs/reproducibility.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...runtime.jsonio import read_json
from ...variants import VARIANTS, baseline_of, variants_with
from .. import comparable, paper
from ..claims.chasing import CHASE_YES, CLOSE_FACTOR, chase_verdict, suppression_verdict
from ..claims.loss import GAP_MAX_PCT, blown_runs_text, limit_by_blowups, within_verdict
from ..epochs import corpus_tokens, epochs, trained_tokens
from ..runs import blown_up, corpus_of, load_runs, val_records
from ..stats import VARIANT_LABELS, last_weights_gap, paired_gap, t_interval

# claim -> (variant, its baseline): claims 1, 2 and dyt (variants.VARIANTS' gap_claim role)
GAP_CLAIMS = {VARIANTS[v]["gap_claim"]: (v, baseline_of(v)) for v in variants_with("gap_claim")}
SUMMARY_COLUMNS = ("claim", "width", "tokens_per_param", "estimate", "ci_low", "ci_high")
SUMMARY_COLUMNS += ("n_seeds", "unit", "steps", "verdict", "criterion", "left_out")
# what the rows add after those (BLOWUP_RULE): the runs of the cell's arms, clean or blown up, and
# the gap with the blown-up runs at their last weights
BLOWUP_COLUMNS = ("n_runs", "n_clean", "n_blowup", "blew_up", "estimate_last_weights")
BLOWUP_COLUMNS += ("ci_low_last_weights", "ci_high_last_weights", "n_seeds_last_weights")
BLOWUP_COLUMNS += ("left_out_last_weights", "extra_runs")
# what the rows add after those: passes over the training tokens, the tokens they are over, and
# the paper's value of the row (Table 2's gap at the row's width, with its version and table)
STUDY_COLUMNS = ("epochs", "data_train_tokens", "paper_estimate", "paper_source")
SEED_COLUMNS = ("claim", "width", "steps", "seed", "value", "verdict", "value_last_weights")
SEED_COLUMNS += ("hosts", "split_hosts")
EXTRA_FAMILY = "stability"  # the study whose runs a cell may take (not its one-factor reruns)
# what an extra record must share with the cell it joins (the recipe; compile and name apart)
RECIPE = ("lr", "batch_size", "block_size", "warmup_steps", "taper_start", "taper_end", "corpus",
          "train_tokens", "n_layer", "n_head", "n_params", "anchor", "anchor_lam", "final_taper",
          "internal_taper", "grad_clip", "ema_mu", "mlp")  # fmt: skip
KEPT_NORM = ("baseline", "internal", "internal_aux")  # runs that keep a real final norm
UNANCHORED_FREE = ("final", "all")  # final norm tapered, no scale loss


@dataclass(frozen=True)
class StudyRuns:
    """The study's runs (load_runs' one row per run) with tokens_per_param; the ablation's apart."""

    runs: pd.DataFrame
    ablation: pd.DataFrame
    curves: pd.DataFrame  # validation curves of every run (runs.val_records) with its family
    extra_note: str = ""  # what the extra records gave (taken, or not used and why)
    corpus: str = ""  # what the runs trained on (runs.corpus_of: meta.json's name, else the dir)


def _tokens(runs: pd.DataFrame) -> pd.DataFrame:
    runs["tokens_per_param"] = trained_tokens(runs) / runs["n_params"].astype(float)
    runs["epochs"] = epochs(runs)
    runs["data_train_tokens"] = corpus_tokens(runs)
    runs["host"] = [host_of(r) for r in runs["run"]]
    return runs


def host_of(run_dir: str | Path) -> str:
    """The host a run was trained on, from its config.json's provenance ('AMD EPYC (2 cores, Linux
    6.18.44-fc-v1147)'); '' where the record has none."""
    try:
        host = read_json(Path(run_dir) / "config.json")["meta"]["provenance"]["host"]
        cpu, cores, system = host.get("cpu"), host.get("cores"), host.get("system")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    about = ", ".join(x for x in (f"{cores} cores" if cores else "", system or "") if x)
    return f"{cpu or 'unknown CPU'}" + (f" ({about})" if about else "")


def read_study(
    record_dirs: list[str | Path], extra_dirs: list[str | Path] | tuple = ()
) -> StudyRuns:
    """The study's record directories (<family>/<run>/ with config.json, eval.json, metrics.jsonl),
    and `extra_dirs`: records of other studies that cells may take (module docstring)."""
    runs, _ = load_runs(record_dirs)
    comparable.check_records(runs, by=None)  # complete, each once; a cell's recipe: RECIPE
    comparable.check_data(runs, "the study's records")  # one corpus, by its bytes
    runs = _tokens(runs)
    ablation = runs["family"] == "scaling_ablation"
    curves = val_records(runs).merge(runs[["run", "family"]], on="run")
    main = runs[~ablation].copy()
    main["extra"] = False
    note = ""
    if extra_dirs:
        extra = _tokens(load_runs(extra_dirs)[0])
        comparable.check_records(extra, by=None)
        taken = cell_extras(main, extra)
        unused = len(extra) - len(taken)
        note = (
            f"{len(taken)} of {len(extra)} extra records taken (a cell's recipe, trained "
            f"{_modes(taken)})"
            + (f"; {unused} not a cell's recipe (not the stability family's, init seed != data "
               "seed, or no such cell)" if unused else "")
        )  # fmt: skip
        main = pd.concat([main, taken.assign(extra=True)], ignore_index=True)
        comparable.check_data(main, "the study's records and the extra records it takes")
    return StudyRuns(main, runs[ablation].copy(), curves, note, corpus_of(main))


def _modes(runs: pd.DataFrame) -> str:
    modes = sorted({"compiled" if c else "eager" for c in runs["compiled"]})
    return " and ".join(modes) or "-"


def cell_extras(main: pd.DataFrame, extra: pd.DataFrame) -> pd.DataFrame:
    """The runs of `extra` that are a cell of `main`'s recipe: runs of the stability family (not
    its one-factor reruns) whose init seed = data seed, with a run of `main` of that variant,
    width, length and seed. ValueError where one differs from it in the
    recipe (RECIPE): its numbers could not be compared."""
    taken = []
    key = ["variant", "width", "steps", "seed"]
    family = extra["name"].astype(str).str.split("/").str[0]
    mine = extra[(extra["seed"] == extra["data_seed"]) & (family == EXTRA_FAMILY)]
    for r in mine.to_dict("records"):
        twin = main[(main[key] == pd.Series({k: r[k] for k in key})).all(axis=1)]
        if twin.empty:
            continue
        t = twin.iloc[0]
        differs = [c for c in RECIPE if c in t and not _same(t[c], r[c])]
        if differs:
            raise ValueError(
                f"extra record {r['run']} is not the recipe of {t['run']}: {', '.join(differs)} "
                f"differ ({', '.join(f'{r[c]} vs {t[c]}' for c in differs)}): not comparable"
            )
        if t["compiled"] == r["compiled"]:
            raise ValueError(
                f"extra record {r['run']} is trained as {t['run']} is (both "
                f"{'compiled' if r['compiled'] else 'eager'}): give it once"
            )
        taken.append(r)
    return pd.DataFrame(taken, columns=extra.columns)


def _same(a, b) -> bool:
    if pd.isna(a) and pd.isna(b):
        return True
    return bool(a == b)


def cell_tokens(runs: pd.DataFrame, against: str) -> float:
    """Tokens per parameter of a cell: its reference arm's (the baseline's parameters)."""
    return float(runs.loc[runs["variant"] == against, "tokens_per_param"].mean())


def cell_passes(runs: pd.DataFrame) -> dict:
    """epochs and data_train_tokens of a cell's runs (NaN where not measured: epochs.py)."""
    return {
        "epochs": float(runs["epochs"].mean()),
        "data_train_tokens": float(runs["data_train_tokens"].mean()),
    }


def paper_gap(claim: str, width: int) -> tuple[float, paper.Source] | None:
    """The paper's gap of a gap claim at `width` (Table 2) with its source; None where the paper
    has none (DyT, a width not in Table 2)."""
    if claim not in GAP_CLAIMS:
        return None
    variant, against = GAP_CLAIMS[claim]
    return paper.table2_gap(width, variant) if against == "baseline" else None


def paper_gap_text(claim: str, width: int) -> str:
    """'paper v1, Table 2, d=64: +1.46%', or '' where the paper has no such gap."""
    found = paper_gap(claim, width)
    if found is None:
        return ""
    value, source = found
    return f"{source.tag}, d={int(width)}: {value:+.2f}%"


def paper_columns(claim: str, width: int) -> dict:
    found = paper_gap(claim, width)
    return {
        "paper_estimate": found[0] if found else math.nan,
        "paper_source": str(found[1]) if found else "",
    }


def seed_hosts(runs: pd.DataFrame, keys: tuple[str, ...] = ("data_seed", "compiled")) -> dict:
    """`hosts` and `split_hosts` of one seed's runs: the hosts they trained on (each with the runs
    on it where there are several), and whether two runs compared with each other (the same
    `keys`: a pair of a compiled or of an eager run) were trained on two hosts."""
    known = runs[runs["host"] != ""]
    hosts = sorted(set(known["host"]))
    if len(hosts) <= 1:
        return {"hosts": hosts[0] if hosts else "", "split_hosts": False}
    modes = known["compiled"].nunique() > 1
    by_host = {
        h: ", ".join(
            sorted(  # in a fixed order, whatever order the records were given in
                VARIANT_LABELS.get(r.variant, r.variant)
                + ((" compiled" if r.compiled else " eager") if modes else "")
                for r in known[known["host"] == h].itertuples()
            )
        )
        for h in hosts
    }
    keys = [k for k in keys if k in known]
    split = any(group["host"].nunique() > 1 for _, group in known.groupby(keys or "seed"))
    return {"hosts": "; ".join(f"{h}: {v}" for h, v in by_host.items()), "split_hosts": split}


def blowup_counts(runs: pd.DataFrame) -> dict:
    """n_runs, n_clean, n_blowup and the blow-ups named (blew_up) of `runs`."""
    blown = blown_up(runs)
    return {
        "n_runs": len(runs),
        "n_clean": int((~blown).sum()),
        "n_blowup": int(blown.sum()),
        "blew_up": blown_runs_text(runs),
    }


def gap_rows(study: StudyRuns) -> tuple[list[dict], list[dict]]:
    """(summary rows, per-seed rows) of claims 1, 2 and DyT at every (width, steps) that has both
    arms."""
    rows, seeds = [], []
    runs = study.runs
    for (width, steps), cell in runs.groupby(["width", "steps"]):
        for claim, (variant, against) in GAP_CLAIMS.items():
            if not {variant, against} <= set(cell["variant"]):
                continue
            arms = cell[cell["variant"].isin([variant, against])]
            gap = paired_gap(cell, int(width), variant, against, clean=True)
            full = last_weights_gap(cell, int(width), variant, against)
            counts = blowup_counts(arms)
            verdict, _ = within_verdict(gap)
            extra = arms[arms["extra"].astype(bool)] if "extra" in arms else arms.iloc[:0]
            rows.append(
                {
                    "claim": claim,
                    "width": int(width),
                    "tokens_per_param": cell_tokens(cell, against),
                    "estimate": gap.mean,
                    "ci_low": gap.lo,
                    "ci_high": gap.hi,
                    "n_seeds": gap.n,
                    "unit": "%",
                    "steps": int(steps),
                    "verdict": limit_by_blowups(verdict, counts["n_blowup"]),
                    "criterion": f"95% interval inside ±{GAP_MAX_PCT:g}%",
                    "left_out": "; ".join(gap.left_out),
                    **counts,
                    "estimate_last_weights": full.mean,
                    "ci_low_last_weights": full.lo,
                    "ci_high_last_weights": full.hi,
                    "n_seeds_last_weights": full.n,
                    "left_out_last_weights": "; ".join(full.left_out),
                    "extra_runs": extra_text(extra),
                    **cell_passes(arms),
                    **paper_columns(claim, int(width)),
                }
            )
            for s in sorted(set(gap.per_seed) | set(full.per_seed)):
                seeds.append(
                    {"claim": claim, "width": int(width), "steps": int(steps), "seed": s,
                     "value": gap.per_seed.get(s, math.nan), "verdict": "",
                     "value_last_weights": full.per_seed.get(s, math.nan),
                     **seed_hosts(arms[arms["seed"] == s])}
                )  # fmt: skip
    return rows, seeds


def extra_text(extra: pd.DataFrame) -> str:
    """What a row says of the extra runs it took ('' when none)."""
    if extra.empty:
        return ""
    fams = ", ".join(sorted({str(n).split("/")[0] for n in extra["name"]}))
    seeds = ", ".join(str(s) for s in sorted(set(extra["seed"])))
    return (
        f"{len(extra)} {_modes(extra)} runs of the {fams} study (seeds {seeds}: init seed = data "
        "seed, the cell's recipe) taken too: in the counts, and paired with the other arm's run "
        "trained alike; a seed's gap is the mean of its compiled and eager pairs"
    )


def chasing_per_seed(ablation: pd.DataFrame) -> pd.DataFrame:
    """Per ablation seed: claim 3's U and each unanchored variant's ratio, claim 4's A, and each
    claim's verdict on that seed alone (claims.chasing's criteria)."""
    ok = ablation[~ablation["diverged"]]
    out = []
    for seed, runs in ok.groupby("seed"):
        by = runs.groupby("variant")["logit_norm_end"].mean()
        kept = [v for v in KEPT_NORM if v in by]
        free = [v for v in UNANCHORED_FREE if v in by]
        if not kept or not free or "baseline" not in by:
            continue
        ref = float(np.mean([by[v] for v in kept]))
        each = {v: by[v] / ref for v in free}
        chase = float(np.mean([by[v] for v in free])) / ref
        row = {
            "seed": int(seed),
            "U": chase,
            "claim3": chase_verdict(min(each.values()), chase),
            **{f"U_{v}": r for v, r in each.items()},
        }
        if "all_aux" in by:
            a = by["all_aux"] / by["baseline"]
            u_base = float(np.mean([by[v] for v in free])) / by["baseline"]
            row.update(A=a, claim4=suppression_verdict(a, u_base))
        out.append(row)
    return pd.DataFrame(out)


def log_interval(values: np.ndarray) -> tuple[float, float, float]:
    """Geometric mean of positive ratios and its 95% t interval on log scale (NaN with < 2)."""
    mean, lo, hi = t_interval(np.log(values))
    return math.exp(mean), math.exp(lo), math.exp(hi)


def chasing_rows(study: StudyRuns) -> tuple[list[dict], list[dict]]:
    """(summary rows, per-seed rows) of claims 3 and 4 on the ablation's fresh seeds."""
    per_seed = chasing_per_seed(study.ablation)
    if per_seed.empty:
        return [], []
    abl = study.ablation
    width = int(abl["width"].iloc[0])
    tokens = cell_tokens(abl, "baseline")
    steps = int(abl["steps"].iloc[0])
    left_out = "; ".join(
        f"seed {int(r.seed)} ({VARIANT_LABELS.get(r.variant, r.variant)} diverged)"
        for r in abl[abl["diverged"]].sort_values(["seed", "variant"]).itertuples()
    )
    rows, seeds = [], []
    close = f"A within 1/{CLOSE_FACTOR:g}-{CLOSE_FACTOR:g}x while U >= {CHASE_YES:g}x"
    specs = (
        ("3", "U", "claim3", f"each unanchored variant >= {CHASE_YES:g}x"),
        ("4", "A", "claim4", close),
    )
    for claim, column, verdict_col, criterion in specs:
        if column not in per_seed:
            continue
        judged = per_seed.dropna(subset=[column])
        mean, lo, hi = log_interval(judged[column].to_numpy(dtype=float))
        verdicts = judged[verdict_col].tolist()
        held = sum(v == "yes" for v in verdicts)
        rows.append(
            {"claim": claim, "width": width, "tokens_per_param": tokens, "estimate": mean,
             "ci_low": lo, "ci_high": hi, "n_seeds": len(judged), "unit": "x", "steps": steps,
             "verdict": f"holds on {held}/{len(verdicts)} seeds", "criterion": criterion,
             "left_out": left_out, **blowup_counts(abl), "left_out_last_weights": "",
             "extra_runs": "", **cell_passes(abl), **paper_columns(claim, width)}
        )  # fmt: skip
        seeds += [
            {"claim": claim, "width": width, "steps": steps, "seed": int(r.seed),
             "value": getattr(r, column), "verdict": getattr(r, verdict_col),
             **seed_hosts(abl[abl["seed"] == r.seed], keys=())}
            for r in judged.itertuples()
        ]  # fmt: skip
    return rows, seeds


def summarize(study: StudyRuns) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, per_seed) frames of the study, rows sorted by claim, width and tokens."""
    gap_summary, gap_seeds = gap_rows(study)
    chase_summary, chase_seeds = chasing_rows(study)
    columns = [*SUMMARY_COLUMNS, *BLOWUP_COLUMNS, *STUDY_COLUMNS]
    summary = pd.DataFrame(gap_summary + chase_summary, columns=columns)
    summary["data_train_tokens"] = summary["data_train_tokens"].round().astype("Int64")
    summary.attrs["corpus"] = study.corpus  # (write_summary names it)
    order = {c: i for i, c in enumerate(["1", "2", "dyt", "3", "4"])}
    summary = summary.sort_values(
        ["claim", "width", "tokens_per_param"],
        key=lambda s: s.map(order) if s.name == "claim" else s,
    ).reset_index(drop=True)
    per_seed = pd.DataFrame(gap_seeds + chase_seeds, columns=list(SEED_COLUMNS))
    return summary, per_seed


def trend(summary: pd.DataFrame, claim: str, width: int) -> str:
    """How a gap claim's estimate moves from the shortest to the longest training at one width,
    relative to the paper's +-2% criterion: 'toward', 'away from' or 'along' the band."""
    rows = summary[(summary["claim"] == claim) & (summary["width"] == width)]
    rows = rows.sort_values("tokens_per_param")
    if len(rows) < 2:
        return "one length"
    first, last = rows.iloc[0]["estimate"], rows.iloc[-1]["estimate"]
    dist = [max(0.0, abs(x) - GAP_MAX_PCT) for x in (first, last)]
    if dist[0] == dist[1] == 0.0:
        return "inside the band throughout"
    return "toward the band" if dist[1] < dist[0] else "away from the band"
