"""The probe: the tails battery of a model and of a reference model on the same windows, and a
verdict against two thresholds (Thresholds), each checked in float32 and under bfloat16 autocast:

  loss    the largest window loss on the 5%-noisy windows (noise_5pct: 5% of each validation
          window's tokens replaced by uniform random ids) may be at most 2x the reference's.
          Measured on the default pipeline's final models (d=64, 600 steps): the baselines' worst
          5%-noisy window stays at 4.9 (clean windows: 4.8-4.9), while three All-Taper (+aux)
          seeds reached 59, 1,575 and 30,624. A model that merely generalises a little worse moves
          its worst window by percents; 2x sits far above that and far below the failures.
  search  the residual search's ratio (the largest RMS of h_L, the final norm's input, that
          search.search_residual finds, over the clean windows' median) may be at most 10x the
          reference's. A pre-norm reference bounds each block's input, so the search moves its
          residual by a few x at most; a model whose residual is free to grow (Internal-Taper
          (+aux): 1e4 to 8e12 on noisy windows, against 2 for the baseline) is orders of magnitude
          past 10x, which a search of a few thousand forwards reaches.

A value that is not finite counts as +inf: it fails unless the reference's is infinite too.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..data import TokenShards
from ..model import GPT
from .battery import BatterySettings, battery_inputs, noise_name, run_battery
from .measure import DTYPES

VERDICT_NOISE = 0.05  # the noise level the loss threshold reads


@dataclass(frozen=True)
class Thresholds:
    loss_ratio: float = 2.0  # noise_5pct max window loss / the reference's
    search_ratio: float = 10.0  # residual search ratio / the reference's

    def __post_init__(self) -> None:
        if not (self.loss_ratio > 0 and self.search_ratio > 0):
            raise ValueError(f"probe thresholds must be > 0, got {self}")


def _finite_or_inf(value: float | None) -> float:
    return math.inf if value is None or math.isnan(value) else value


def _check(name: str, dtype: str, value, reference, factor: float) -> dict:
    value, reference = _finite_or_inf(value), _finite_or_inf(reference)
    limit = factor * reference
    return {
        "check": name,
        "dtype": dtype,
        "value": value,
        "reference": reference,
        "factor": factor,
        "limit": limit,
        "ok": value <= limit,
    }


def judge(model: dict, reference: dict, thresholds: Thresholds = Thresholds()) -> dict:
    """The verdict on two batteries (run_battery's results): each check with its value, the
    reference's, the limit and whether it holds; `ok` when every one does, `failed` naming
    those that do not."""
    noise = noise_name(VERDICT_NOISE)
    checks = []
    for key in (k for k in DTYPES.values() if k in model and k in reference):
        m, r = model[key], reference[key]
        if noise not in m or noise not in r:
            raise ValueError(f"the verdict reads the {noise} windows; the battery has none")
        checks.append(
            _check(
                f"{noise} max window loss",
                key,
                m[noise]["loss"]["max"],
                r[noise]["loss"]["max"],
                thresholds.loss_ratio,
            )
        )
        checks.append(
            _check(
                "residual search ratio",
                key,
                m["search"]["ratio"],
                r["search"]["ratio"],
                thresholds.search_ratio,
            )
        )
    failed = [f"{c['check']} ({c['dtype']})" for c in checks if not c["ok"]]
    return {"ok": not failed, "failed": failed, "checks": checks}


def check_vocab(shards: TokenShards, model: GPT, what: str) -> None:
    """ValueError naming both if the shards' ids may exceed `model`'s vocabulary."""
    if shards.vocab_size > model.config.vocab_size:
        raise ValueError(
            f"the token shards {shards.data_dir} have a vocabulary of {shards.vocab_size}, the "
            f"{what} only {model.config.vocab_size}: give shards of its own tokenizer (--data)"
        )


def probe_models(
    model: GPT,
    reference: GPT,
    shards: TokenShards,
    settings: BatterySettings | None = None,
    thresholds: Thresholds = Thresholds(),
    model_gate: float | None = 0.0,
    reference_gate: float | None = 0.0,
) -> dict:
    """The battery of `model` (TaperNorms at `model_gate`) and of `reference` (at
    `reference_gate`; it may be the same model at another gate) on the same windows of `shards`,
    of the smaller of their block sizes, and the verdict (judge). `settings`: default
    BatterySettings()."""
    settings = settings or BatterySettings()
    check_vocab(shards, model, "model")
    check_vocab(shards, reference, "reference")
    block_size = min(model.config.block_size, reference.config.block_size)
    inputs = battery_inputs(shards, block_size, settings)
    result = run_battery(model, inputs, settings, model_gate)
    against = run_battery(reference, inputs, settings, reference_gate)
    return {
        "data": shards.data_dir,
        "block_size": block_size,
        "inputs": inputs.made,
        "settings": asdict(settings),
        "thresholds": asdict(thresholds),
        "verdict": judge(result, against, thresholds),
        "model": result,
        "reference": against,
    }
