"""The scale card: at what scale our numbers were measured, beside the paper's, and what this scale
cannot test. It heads results/claims.md, the README's results and the report's home page, so that
no verdict is read without it. Every entry is computed from the runs' configs and outputs; the
passes over the training tokens (epochs.py) from the configs and the data directory's meta.json
("not measured" where it cannot be read), the scaling study's from its summary. Every paper value
carries the paper's version and where it is from (paper.Source.tag: "(paper v1, Table 5)").
"""

from __future__ import annotations

import math

import pandas as pd

from ...variants import PAPER_VARIANTS
from .. import comparable, paper
from ..epochs import (
    NOT_MEASURED,
    corpus_tokens,
    epochs,
    epochs_text,
    meaning,
    paper_passes,
    trained_tokens,
)
from ..runs import corpus_of, pick_width, shards_meta
from ..tables.inference import places
from .dyt import grid_mismatch, grid_source
from .finetune import fine_tuned_models
from .rows import ClaimInputs, variant_label

COLUMNS = ("", "Ours", "Paper")


def data_meta(runs: pd.DataFrame) -> dict:
    """meta.json of the runs' token shards ({} where it cannot be read)."""
    metas = (shards_meta(d) for d in sorted(set(runs["corpus"])))
    return next((m for m in metas if m is not None), {})


def _millions(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n < 1e7 else f"{n / 1e6:.0f}M"


def _range(values, fmt) -> str:
    values = sorted(set(values))
    return fmt(values[0]) if len(values) == 1 else f"{fmt(values[0])}-{fmt(values[-1])}"


def _seeds(runs: pd.DataFrame) -> str:
    """'3 (Baseline, ...), 2 (...)' : seeds per variant, grouped by count."""
    per = runs.groupby("variant")["seed"].nunique()
    groups: dict[int, list[str]] = {}
    for variant in per.index:
        groups.setdefault(int(per[variant]), []).append(variant_label(variant))
    return "; ".join(f"{n} ({', '.join(vs)})" for n, vs in sorted(groups.items(), reverse=True))


def _lr_row(runs: pd.DataFrame, grid: dict | None) -> str:
    lrs = sorted(set(runs["lr"]))
    text = ", ".join(f"{lr:g}" for lr in lrs)
    if not grid:
        return text + " (no LR grid at this scale given: how far from the optimum is not measured)"
    unread = comparable.unread_data(runs)
    if unread:  # the grid's corpus cannot be matched to the runs'
        return (
            text
            + f" (whether the {grid_source(grid)} is at this scale is "
            + (comparable.unread_data_text(unread) + ")")
        )
    mismatch = grid_mismatch(grid, runs[runs["variant"] == "baseline"], corpus_of(runs))
    if mismatch:
        return text + f" (the {grid_source(grid)} is at another scale)"
    cells = [c for c in grid.get("cells", []) if c["variant"] == "baseline_untied"]
    finite = [c for c in cells if c.get("val_loss_mean") is not None]
    if not finite:
        return text
    best = min(finite, key=lambda c: c["val_loss_mean"])
    shared = next((c for c in finite if c["lr"] in lrs), None)
    text += f"; the untied-head baseline's best LR in the {grid_source(grid)} is {best['lr']:g}"
    if shared is not None and best["lr"] not in lrs:
        text += (
            f" (validation loss {best['val_loss_mean']:.4f} there vs {shared['val_loss_mean']:.4f} "
            f"at {shared['lr']:g}): the baselines train far from their best LR, which the tapered "
            "variants do not survive (config/README.md)"
        )
    return text


def _ablation_row(ablation: pd.DataFrame) -> str:
    a = ablation
    tokens = sorted(set(a["train_tokens"].dropna().astype(int)))
    if not tokens:
        return "the full training split"
    passes = epochs(a)
    vocab = data_meta(a).get("vocab_size") or next((int(v) for v in a["vocab_size"].dropna()), None)
    val = a["val_loss"].dropna()
    text = (
        f"the first {tokens[0]:,} training tokens, {_range(a['steps'], lambda s: f'{s:,}')} steps "
        f"of {_range(a['batch_size'], str)} x {_range(a['block_size'], str)} "
        f"(~{epochs_text(passes.mean())} epochs), L={_range(a['n_layer'], str)}"
    )
    if "margin_pos_frac_end" in a and a["margin_pos_frac_end"].notna().any():
        text += (
            f": {100 * a['margin_pos_frac_end'].mean():.0f}% of training tokens end with a "
            "positive margin (the premise of logit chasing, Prop. 4.2)"
        )
    if vocab and len(val):
        uniform = math.log(vocab)
        worse = (val > uniform).mean()
        text += (
            f"; it memorises its slice: validation loss {val.min():.1f}-{val.max():.1f}"
            + (f", worse than a uniform guess (ln {vocab} = {uniform:.2f})" if worse else "")
            + "; margins are measured on training batches"
        )
    return text


def _finetune_row(evals: pd.DataFrame) -> str:
    sets = ", ".join(sorted(set(evals["set"])))
    return f"{fine_tuned_models(evals)}; one run per cell; sets: {sets}"


def _passes(at: pd.DataFrame, study: pd.DataFrame | None) -> str:
    """'0.54 epochs (the scaling study: up to 5.45)'."""
    mean = epochs(at).mean()
    text = f"{epochs_text(mean)} epochs" if pd.notna(mean) else f"epochs {NOT_MEASURED}"
    if study is not None and "epochs" in study:
        most = pd.to_numeric(study["epochs"], errors="coerce")
        gaps = most[study["unit"] == "%"].dropna() if "unit" in study else most.dropna()
        if len(gaps):
            text += f" (the scaling study: up to {epochs_text(float(gaps.max()))})"
    return text


def _passes_row(at: pd.DataFrame, study: pd.DataFrame | None) -> str:
    """What the runs' passes mean beside the paper's (epochs.meaning), the scaling study's too."""
    also = ""
    if study is not None and "epochs" in study and "unit" in study:
        rows = study[study["unit"] == "%"]
        passes = pd.to_numeric(rows["epochs"], errors="coerce").dropna()
        if len(passes):
            also = (
                f"the scaling study's runs: {epochs_text(float(passes.min()))}-"
                f"{epochs_text(float(passes.max()))} passes"
            )
    return meaning(epochs(at), corpus_tokens(at), _corpus_name(at), also, with_paper=False)


def _corpus_name(runs: pd.DataFrame) -> str:
    if comparable.unread_data(runs):
        return ", ".join(sorted(set(map(str, runs["corpus"]))))
    return corpus_of(runs)


def _paper_scale() -> tuple[str, str]:
    """The paper's widths ('d=64-512') and tokens per parameter ('~273-4,096'), from paper.py."""
    widths = sorted(paper.TABLE5_STEPS)
    per_param = [paper.tokens_per_param(w) for w in widths]
    return f"d={widths[0]}-{widths[-1]}", f"~{min(per_param):,.0f}-{max(per_param):,.0f}"


def untested(inp: ClaimInputs) -> list[str]:
    """What these inputs cannot test of the paper's claims."""
    out = []
    runs = inp.runs
    study = inp.scaling if inp.scaling is not None else pd.DataFrame()
    paper_widths, paper_per_param = _paper_scale()
    tag = paper.source_of("TABLE5_STEPS").tag
    if not runs.empty and runs["width"].nunique() == 1:
        widths = sorted(set(study["width"]) - {int(runs["width"].iloc[0])}) if len(study) else []
        more = f"; the scaling study adds d={', '.join(map(str, widths))}" if widths else ""
        out.append(
            f"the trend over model size (one width, d={int(runs['width'].iloc[0])}{more}; "
            f"{tag}: {paper_widths})"
        )
    if not runs.empty:
        per_param = (trained_tokens(runs) / runs["n_params"].astype(float)).median()
        if per_param < 100:
            most = study["tokens_per_param"].max() if len(study) else None
            longer = f"; the scaling study up to ~{most:.0f}" if most else ""
            out.append(
                f"converged training (~{per_param:.0f} tokens per parameter{longer}; {tag}: "
                f"{paper_per_param})"
            )
    if not inp.bench.empty and set(inp.bench["device"]) == {"cpu"}:
        out.append("GPU speed (claim 7's timings are a CPU's; the paper's are an H100's)")
    if not inp.finetune.empty:
        from ..tables.finetune import paper_comparable

        if not inp.finetune.apply(paper_comparable, axis=1).any():
            out.append("the paper's GPT-2 models and evaluation sets (claim 8 runs a stand-in)")
    if inp.ablation.empty:
        out.append("logit chasing where margins are positive (no ablation given)")
    return out


def _tagged(text: str, name: str) -> str:
    """`text`, the paper's value held by paper.`name`, with its version (paper.SOURCES)."""
    return paper.tagged(text, paper.source_of(name))


def _pretraining_rows(runs: pd.DataFrame, inp: ClaimInputs) -> list[tuple[str, str, str]]:
    """The card's rows of the pre-training runs: corpus, model, training and its passes over
    the training tokens, seeds, learning rate."""
    meta = data_meta(runs)
    width = pick_width(runs, None)
    at = runs[runs["width"] == width]
    vocab = meta.get("vocab_size") or next((int(v) for v in runs["vocab_size"].dropna()), None)
    tokenizer = (meta.get("tokenizer") or {}).get("kind", "tokenizer unknown")
    unread = comparable.unread_data(runs)
    corpus = (
        comparable.unread_data_text(unread)
        if unread or "train_tokens" not in meta
        else f"{corpus_of(runs)} ({meta['train_tokens']:,} training tokens), "
        f"{tokenizer}, vocabulary {vocab}"
    )
    params = at["n_params"].astype(float)
    tokens = trained_tokens(at)
    per_param = tokens / params
    paper_seeds = _seeds(runs[runs["variant"].isin(PAPER_VARIANTS)])
    beyond = runs[~runs["variant"].isin(PAPER_VARIANTS)]
    return [
        ("Corpus, tokenizer", corpus, _tagged(f"{paper.CORPUS}, {paper.TOKENIZER}", "CORPUS")),
        (
            "Model (pre-training)",
            f"d={_range(runs['width'], str)}, L={_range(runs['n_layer'], str)}, "
            f"{_range(runs['n_head'], str)} heads, T={_range(runs['block_size'], str)}: "
            f"{_range(params, _millions)} parameters at d={width}",
            _tagged(paper.MODEL, "MODEL"),
        ),
        (
            "Training",
            f"{_range(at['steps'], lambda s: f'{s:,}')} steps x {_range(at['batch_size'], str)}"
            f" x {_range(at['block_size'], str)} = {_range(tokens, _millions)} tokens per run:"
            f" {_range(per_param.round(1), lambda x: f'{x:.1f}')} tokens per parameter, "
            + _passes(at, inp.scaling),
            _tagged(paper.TRAINING, "TRAINING"),
        ),
        (
            "Passes over the training tokens",
            _passes_row(at, inp.scaling),
            _tagged(paper_passes(), "PASSES"),
        ),
        (
            "Seeds per variant",
            paper_seeds + (f"; beyond the paper: {_seeds(beyond)}" if len(beyond) else ""),
            _tagged(f"{paper.TABLE5_SEEDS}", "TABLE5_SEEDS"),
        ),
        ("Peak learning rate", _lr_row(runs, inp.lr_grid), _tagged(paper.LR, "LR")),
    ]


def scale_card(inp: ClaimInputs) -> pd.DataFrame:
    """Rows (aspect, ours, the paper's) of the scale card of these inputs."""
    runs = inp.runs[inp.runs["variant"].notna()] if not inp.runs.empty else inp.runs
    rows = _pretraining_rows(runs, inp) if not runs.empty else []
    if not inp.ablation.empty:
        rows.append(("Scale-anchor ablation (claims 3-5)", _ablation_row(inp.ablation), "—"))
    if not inp.finetune.empty:
        rows.append(
            (
                "GPT-2 fine-tuning (claim 8)",
                _finetune_row(inp.finetune),
                _tagged(paper.FINETUNE, "FINETUNE"),
            )
        )
    if not inp.bench.empty or inp.bench_skipped:
        bench = places(inp.bench) if not inp.bench.empty else "nothing timed"
        if inp.bench_skipped:
            bench += "; not timed: " + "; ".join(inp.bench_skipped)
        rows.append(
            (
                "Inference benchmarks (claim 7)",
                bench,
                _tagged(paper.TABLE3_SETUP, "TABLE3_SETUP"),
            )
        )
    missing = untested(inp)
    if missing:
        rows.append(("Not tested at this scale", "; ".join(missing), "—"))
    return pd.DataFrame(rows, columns=list(COLUMNS))
