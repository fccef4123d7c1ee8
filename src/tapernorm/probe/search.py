"""A bounded search for the input that most inflates the residual stream.

Greedy coordinate search with restarts over the token ids of a short window (S tokens): each
restart holds a window; every round, each restart picks one position (uniformly) and tries K
candidate ids there (half drawn from the `suspects`, the rare and unseen ids whose embedding rows
training barely touched, half uniform over the vocabulary), all restarts' candidates in one
batched forward, and keeps the best candidate if it raises its window's objective. The objective
is the largest RMS over positions of h_L, the last block's output (the input of the final norm).

Half the restarts start from the clean windows' prefixes with the largest objective, the others
from uniformly random ids. The budget counts windows forwarded (starts included) and is never
exceeded; everything random comes from one torch.Generator seeded with `seed`, so the same model,
starts, budget and seed give the same result.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model import GPT
from .measure import residual_max


@dataclass(frozen=True)
class SearchSettings:
    budget: int = 2048  # windows forwarded in all, starts included
    length: int = 32  # tokens of the searched window (at most the block size)
    restarts: int = 4
    candidates: int = 8  # ids tried per restart per round


def _starts(
    clean_prefixes: torch.Tensor, prefix_max: torch.Tensor, vocab: int, s: SearchSettings, gen
) -> torch.Tensor:
    """The restarts' first windows: the clean prefixes with the largest objective, then random."""
    n_clean = min((s.restarts + 1) // 2, len(clean_prefixes))
    best = prefix_max.argsort(descending=True)[:n_clean]
    random = torch.randint(0, vocab, (s.restarts - n_clean, clean_prefixes.shape[1]), generator=gen)
    return torch.cat([clean_prefixes[best], random])


def _candidates(suspects: torch.Tensor, vocab: int, shape: tuple[int, int], gen) -> torch.Tensor:
    """Candidate ids (R, K): a fair coin per candidate between a suspect and a uniform id."""
    uniform = torch.randint(0, vocab, shape, generator=gen)
    if len(suspects) == 0:
        return uniform
    pick = suspects[torch.randint(0, len(suspects), shape, generator=gen)]
    return torch.where(torch.rand(shape, generator=gen) < 0.5, pick, uniform)


def _objective(model: GPT, windows: torch.Tensor, batch_size: int) -> torch.Tensor:
    """residual_max in float32, NaN counted as +inf (as bad as an overflow)."""
    got = residual_max(model, windows, batch_size)
    return got.nan_to_num(nan=float("inf"), posinf=float("inf"))


def search_residual(
    model: GPT,
    clean_prefixes: torch.Tensor,
    prefix_max: torch.Tensor,
    suspects: torch.Tensor,
    vocab: int,
    settings: SearchSettings = SearchSettings(),
    seed: int = 0,
    batch_size: int = 64,
) -> dict:
    """Search windows of clean_prefixes' length (S) for the largest max-over-positions RMS of h_L
    (float32) with `seed`; `prefix_max` is each clean prefix's own value. Returns the best window's `tokens`,
    its `rms`, the windows forwarded (`evals`) and the settings."""
    s, gen = settings, torch.Generator().manual_seed(seed)
    windows = _starts(clean_prefixes, prefix_max, vocab, s, gen)
    if s.budget < len(windows):
        raise ValueError(f"search budget {s.budget} is below its {len(windows)} restarts")
    value = _objective(model, windows, batch_size)
    evals, r, length = len(windows), len(windows), windows.shape[1]
    while (k := min(s.candidates, (s.budget - evals) // r)) > 0:
        pos = torch.randint(0, length, (r,), generator=gen)
        ids = _candidates(suspects, vocab, (r, k), gen)
        trial = windows[:, None, :].repeat(1, k, 1)
        trial[torch.arange(r)[:, None], torch.arange(k)[None, :], pos[:, None]] = ids
        got = _objective(model, trial.view(r * k, length), batch_size).view(r, k)
        evals += r * k
        top, at = got.max(dim=1)
        better = top > value
        windows[better] = trial[torch.arange(r), at][better]
        value = torch.where(better, top, value)
    best = int(value.argmax())
    return {
        "rms": float(value[best]),
        "tokens": windows[best].tolist(),
        "evals": evals,
        "budget": s.budget,
        "length": length,
        "restarts": r,
        "candidates": s.candidates,
        "seed": seed,
    }
