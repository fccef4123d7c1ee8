"""The tails battery of one model: how its loss and residual stream behave on every validation
window, on noisy and outlying windows, and on the input a bounded search finds worst.

    inputs = battery_inputs(TokenShards("data/pretrain"), block_size=128)
    result = run_battery(model, inputs)          # a model with TaperNorm layers at g = 0

Groups of windows (battery_inputs; every window block_size tokens, the model's full context):
  clean          every non-overlapping validation window (at most max_windows, evenly spaced)
  noise_Xpct     the clean windows with X% of their tokens (1, 5, 20) replaced by ids uniform over
                 the tokenizer's other ids
  rare_5pct      5% of the tokens replaced by the n_rare least frequent ids of the training split
  unseen_5pct    ... by ids that never occur in the training split (when there are any)
  repeated       windows of one id repeated (the most frequent, the rarest, an unseen one, random)
  shifted        non-overlapping windows starting half a block off the clean ones
Replaced windows keep the clean windows' targets (the original next tokens). For each group and
dtype (float32, and bfloat16 under autocast): the per-window loss and the largest residual RMS
(h_L, the input of the final norm) over the window's positions, each as mean, p50, p99, p99.9,
max and the fraction of windows above twice the clean median (stats.summary), and for the window
of largest loss the residual RMS entering the first block and after each block (where it grows).
`first_position`: the loss and residual RMS at position 0 of the clean windows alone. `search`:
search.search_residual's window (found in float32), its residual RMS as a ratio to the median
over the clean windows' prefixes of the same length, in each dtype.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..data import TokenShards
from ..model import GPT
from . import windows as w
from .measure import DTYPES, Scores, at_gate, block_rms, residual_max, score_windows
from .search import SearchSettings, search_residual
from .stats import median, summary

Windows = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class BatterySettings:
    """How much the battery measures (the defaults take seconds at d=64, L=8, T=128)."""

    max_windows: int | None = 256  # clean (and shifted) windows; None: every one
    batch_size: int = 16  # windows a forward pass
    noise: tuple[float, ...] = (0.01, 0.05, 0.20)  # fractions of tokens replaced
    outlier_fraction: float = 0.05  # of tokens replaced by rare or unseen ids
    n_rare: int = 16  # the least frequent ids
    n_repeat: int = 16  # windows of one repeated id
    count_tokens: int | None = 1 << 26  # training tokens counted for rare and unseen ids
    seed: int = 0  # the noise, the ids drawn and the search
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    search: SearchSettings = field(default_factory=SearchSettings)

    def __post_init__(self) -> None:
        unknown = set(self.dtypes) - set(DTYPES)
        if unknown or not self.dtypes:
            raise ValueError(f"battery dtypes must be among {sorted(DTYPES)}, got {self.dtypes}")
        if (self.max_windows is not None and self.max_windows < 1) or self.batch_size < 1:
            raise ValueError("battery max_windows and batch_size must be >= 1")


@dataclass
class BatteryInputs:
    """The windows of every group (the same for each model probed), and how they were made."""

    block_size: int
    vocab: int  # the tokenizer's ids: [0, vocab)
    groups: dict[str, Windows]
    made: dict  # per group: how its windows were made; the ids counted
    suspects: torch.Tensor  # rare and unseen ids: the search tries them first


def noise_name(fraction: float) -> str:
    return f"noise_{fraction * 100:g}pct"


def battery_inputs(
    shards: TokenShards, block_size: int, settings: BatterySettings = BatterySettings()
) -> BatteryInputs:
    """Every group's windows from `shards` (module docstring), drawn with settings.seed."""
    s, gen = settings, torch.Generator().manual_seed(settings.seed)
    vocab = shards.vocab_size
    x, y = w.clean_windows(shards, block_size, s.max_windows)
    groups: dict[str, Windows] = {"clean": (x, y)}
    made: dict = {"clean": {"windows": len(x), "tokens": block_size}}
    for fraction in s.noise:
        groups[noise_name(fraction)] = (w.replace_tokens(x, fraction, gen, vocab=vocab)[0], y)
        made[noise_name(fraction)] = _replaced(fraction, block_size, f"uniform over {vocab} ids")
    counts = w.token_counts(shards, vocab, s.count_tokens)
    rare, unseen = w.rare_ids(counts, s.n_rare), w.unseen_ids(counts)
    pct = f"{s.outlier_fraction * 100:g}pct"
    for name, pool in (("rare", rare), ("unseen", unseen)):
        if len(pool):
            groups[f"{name}_{pct}"] = (
                w.replace_tokens(x, s.outlier_fraction, gen, pool=pool)[0],
                y,
            )
            how = f"{len(pool)} {name} ids: {pool[:8].tolist()}{' ...' if len(pool) > 8 else ''}"
            made[f"{name}_{pct}"] = _replaced(s.outlier_fraction, block_size, how)
    ids = w.repeat_ids(counts, s.n_repeat, gen)
    groups["repeated"] = w.repeated_windows(ids, block_size)
    made["repeated"] = {"windows": len(ids), "ids": ids}
    shifted = w.shifted_windows(shards, block_size, s.max_windows)
    if shifted is not None:
        groups["shifted"] = shifted
        made["shifted"] = {"windows": len(shifted[0]), "offset": max(1, block_size // 2)}
    made["training tokens counted"] = int(counts.sum())
    made["unseen ids"] = len(unseen)
    return BatteryInputs(block_size, vocab, groups, made, torch.cat([rare, unseen]))


def _replaced(fraction: float, block_size: int, how: str) -> dict:
    k = w.replaced_count(fraction, block_size)
    return {"fraction": fraction, "tokens_replaced": k, "of": block_size, "ids": how}


def group_result(model: GPT, x: torch.Tensor, scores: Scores, clean: Scores, dtype: str) -> dict:
    """A group's loss and residual statistics, and its worst window's residual through the blocks."""
    loss = scores.loss.nan_to_num(nan=float("inf"))
    worst = int(loss.argmax())
    return {
        "loss": summary(scores.loss, median(clean.loss)),
        "resid_rms": summary(scores.resid_max, median(clean.resid_max)),
        "worst": {
            "window": worst,
            "loss": float(scores.loss[worst]),
            "block_rms": block_rms(model, x[worst], dtype),
        },
    }


def first_position(clean: Scores) -> dict:
    """The loss and residual RMS at position 0 of the clean windows (one token of context)."""
    return {
        "loss": summary(clean.first_loss, median(clean.first_loss)),
        "resid_rms": summary(clean.resid[:, 0], median(clean.resid[:, 0])),
    }


def dtype_battery(model: GPT, inputs: BatteryInputs, batch_size: int, dtype: str) -> dict:
    """Every group of `inputs` scored under `dtype`; the clean Scores under "_clean" (not kept)."""
    clean_x, clean_y = inputs.groups["clean"]
    clean = score_windows(model, clean_x, clean_y, batch_size, dtype)
    out = {"_clean": clean}
    for name, (x, y) in inputs.groups.items():
        scores = clean if name == "clean" else score_windows(model, x, y, batch_size, dtype)
        out[name] = group_result(model, x, scores, clean, dtype)
    out["first_position"] = first_position(clean)
    return out


def search_result(
    model: GPT, tokens: torch.Tensor, clean: Scores, batch_size: int, dtype: str
) -> dict:
    """The found window under `dtype`: its residual RMS, the clean prefixes' median, their ratio."""
    rms = float(residual_max(model, tokens[None], batch_size, dtype)[0])
    reference = median(clean.resid[:, : len(tokens)].max(dim=1).values)
    return {
        "rms": rms,
        "clean_median": reference,
        "ratio": rms / reference if reference > 0 else float("inf"),
        "block_rms": block_rms(model, tokens, dtype),
    }


def run_battery(
    model: GPT,
    inputs: BatteryInputs,
    settings: BatterySettings = BatterySettings(),
    gate: float | None = 0.0,
) -> dict:
    """The battery of `model` on `inputs` with every TaperNorm at `gate` (default 0, as the
    project evaluates tapered models; None: as they are; restored afterwards): the module
    docstring's numbers per dtype ("fp32", "bf16"), the search, and the seconds it took."""
    started = time.perf_counter()
    if model.config.block_size < inputs.block_size:
        raise ValueError(
            f"the battery's windows have {inputs.block_size} tokens, the model's block_size is "
            f"only {model.config.block_size}"
        )
    with at_gate(model, gate):
        per_dtype = {
            d: dtype_battery(model, inputs, settings.batch_size, d) for d in settings.dtypes
        }
        found = _search(model, inputs, settings, per_dtype)
        for dtype, result in per_dtype.items():
            clean = result.pop("_clean")
            tokens = torch.tensor(found["tokens"])
            result["search"] = search_result(model, tokens, clean, settings.batch_size, dtype)
    out = {
        "gate": gate,
        "block_size": inputs.block_size,
        "windows": inputs.made["clean"]["windows"],
    }
    out.update({DTYPES[d]: r for d, r in per_dtype.items()})
    return {**out, "search": found, "seconds": time.perf_counter() - started}


def _search(model: GPT, inputs: BatteryInputs, settings: BatterySettings, per_dtype) -> dict:
    """search_residual from the clean windows' prefixes, in float32."""
    length = min(settings.search.length, inputs.block_size)
    prefixes = inputs.groups["clean"][0][:, :length]
    if "float32" in per_dtype:
        prefix_max = per_dtype["float32"]["_clean"].resid[:, :length].max(dim=1).values
    else:
        prefix_max = residual_max(model, prefixes, settings.batch_size)
    return search_residual(
        model,
        prefixes,
        prefix_max,
        inputs.suspects,
        inputs.vocab,
        settings.search,
        settings.seed,
        4 * settings.batch_size,
    )
