"""The probe's result in words: a table per dtype for the terminal (format_report), and the few
lines an exported model card carries (card_entries)."""

from __future__ import annotations

import math

from .measure import DTYPES

COLUMNS = ("mean", "p50", "p99", "p99_9", "max")
HEAD = (
    f"{'':<17}{'':<11}"
    + "".join(f"{c.replace('_', '.'):>10}" for c in COLUMNS)
    + f"{'>2x med':>9} |{'resid p99':>10}{'max':>10}{'>2x med':>9}"
)


def num(value: float | None) -> str:
    """A number in at most 4 significant digits; inf and nan spelled."""
    if value is None or math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def _row(group: str, who: str, entry: dict) -> str:
    loss, resid = entry["loss"], entry["resid_rms"]
    cells = "".join(f"{num(loss[c]):>10}" for c in COLUMNS)
    tail = f"{loss['above_2x_median']:>9.1%} |{num(resid['p99']):>10}{num(resid['max']):>10}"
    return f"  {group:<15}{who:<11}{cells}{tail}{resid['above_2x_median']:>9.1%}"


def dtype_table(result: dict, key: str) -> list[str]:
    """The loss and residual statistics of every group under one dtype, model then reference."""
    model, reference = result["model"][key], result["reference"][key]
    lines = [f"{key}: window loss (left) and largest residual RMS per window (right)", HEAD]
    groups = [g for g in model if g not in ("search",)]
    for group in groups:
        lines.append(_row(group, "model", model[group]))
        lines.append(_row("", "reference", reference[group]))
    for who, r in (("model", model), ("reference", reference)):
        s = r["search"]
        lines.append(
            f"  residual search, {who}: RMS {num(s['rms'])} = {num(s['ratio'])}x the clean "
            f"median ({num(s['clean_median'])})"
        )
    return lines


def blocks_line(who: str, values: list[float]) -> str:
    shown = " ".join(num(v) for v in values)
    return f"  {who:<10} embedding, then after each block: {shown}"


def growth_lines(result: dict, key: str = "fp32") -> list[str]:
    """Where the residual grows: its RMS through the blocks for the worst 5%-noisy window and for
    the searched window."""
    lines = []
    for title, pick in (
        ("worst noise_5pct window", lambda r: r["noise_5pct"]["worst"]["block_rms"]),
        ("searched window", lambda r: r["search"]["block_rms"]),
    ):
        lines.append(f"{key}: residual RMS (max over tokens) through the blocks, {title}")
        for who in ("model", "reference"):
            if "noise_5pct" in result[who].get(key, {}):
                lines.append(blocks_line(who, pick(result[who][key])))
    return lines


def check_line(c: dict) -> str:
    sign = "<=" if c["ok"] else ">"
    return (
        f"  {'ok' if c['ok'] else 'PAST':<5}{c['check']} ({c['dtype']}): {num(c['value'])} {sign} "
        f"{c['factor']:g} x reference {num(c['reference'])} = {num(c['limit'])}"
    )


def format_report(result: dict, model: str, reference: str) -> str:
    """The whole result as text: what ran, a table per dtype, the growth, the verdict."""
    search = result["model"]["search"]
    lines = [
        f"tails battery of {model} (g={result['model']['gate']}) against {reference} "
        f"(g={result['reference']['gate']}): {result['model']['windows']} validation windows of "
        f"{result['block_size']} tokens of {result['data']}; residual search over "
        f"{search['length']} tokens, {search['evals']} forwards, seed {search['seed']}",
        "",
    ]
    for key in DTYPES.values():
        if key in result["model"]:
            lines += dtype_table(result, key) + [""]
    key = next(k for k in DTYPES.values() if k in result["model"])
    lines += growth_lines(result, key) + [""]
    verdict = result["verdict"]
    head = (
        "within thresholds" if verdict["ok"] else "PAST thresholds: " + ", ".join(verdict["failed"])
    )
    return "\n".join(lines + [f"verdict: {head}"] + [check_line(c) for c in verdict["checks"]])


def _pair(result: dict, who: str, pick) -> str:
    keys = [k for k in DTYPES.values() if k in result[who]]
    return " / ".join(f"{num(pick(result[who][k]))} ({k})" for k in keys)


def card_entries(result: dict, reference: str) -> dict[str, str]:
    """The probe's numbers as model card entries (one line each)."""
    verdict, t = result["verdict"], result["thresholds"]
    noisy = lambda r: r["noise_5pct"]["loss"]["max"]  # noqa: E731
    clean = lambda r: r["clean"]["loss"]["max"]  # noqa: E731
    ratio = lambda r: r["search"]["ratio"]  # noqa: E731
    state = "within" if verdict["ok"] else "PAST (" + ", ".join(verdict["failed"]) + ")"
    return {
        "tails probe": f"{state} its thresholds against {reference} (tapernorm probe, "
        f"{result['model']['windows']} validation windows of {result['block_size']} tokens)",
        "tails probe, largest window loss, clean": f"{_pair(result, 'model', clean)}; "
        f"{reference}: {_pair(result, 'reference', clean)}",
        "tails probe, largest window loss, 5% of tokens random": f"{_pair(result, 'model', noisy)}"
        f"; {reference}: {_pair(result, 'reference', noisy)} (limit {t['loss_ratio']:g}x)",
        "tails probe, residual search (largest final-norm input RMS / clean median)": (
            f"{_pair(result, 'model', ratio)}; {reference}: {_pair(result, 'reference', ratio)} "
            f"(limit {t['search_ratio']:g}x)"
        ),
    }
