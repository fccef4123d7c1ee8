"""The inputs of the tails battery, built from token shards: every non-overlapping validation
window, the same windows with tokens replaced (random noise, rare or unseen ids), windows of one
repeated id, and windows shifted off the multiples of the block size.

Every replaced window keeps its ORIGINAL targets: the model is scored on predicting the text as
written from a corrupted context, so a clean model loses a little and a brittle one a lot.
"""

from __future__ import annotations

import numpy as np
import torch

from ..data import TokenShards

COUNT_CHUNK = 1 << 22  # tokens counted per np.bincount call


def spread(starts: list[int], n: int | None) -> list[int]:
    """At most `n` of `starts`, evenly spaced over them (all when n is None or enough)."""
    if n is None or len(starts) <= n:
        return list(starts)
    picks = np.linspace(0, len(starts) - 1, n).round().astype(np.int64)
    return [starts[i] for i in picks]


def clean_windows(
    shards: TokenShards, block_size: int, max_windows: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every non-overlapping validation window of `block_size` tokens (val_windows(None, T)), at
    most `max_windows` of them evenly spaced: inputs x and next-token targets y, (N, T) int64."""
    x, y = shards.val_windows(None, block_size)
    keep = spread(list(range(len(x))), max_windows)
    return x[keep], y[keep]


def shifted_windows(
    shards: TokenShards, block_size: int, max_windows: int | None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Non-overlapping validation windows that start half a block off the clean ones (at T//2 +
    kT, at least 1), at most `max_windows`; None if the split holds none."""
    last = len(shards.tokens("val")) - block_size - 1
    starts = list(range(max(1, block_size // 2), last + 1, block_size))
    if not starts:
        return None
    return shards.windows("val", spread(starts, max_windows), block_size)


def replaced_count(fraction: float, block_size: int) -> int:
    """Tokens replaced per window: round(fraction * T), at least 1 for a fraction above 0."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"a replaced fraction must lie in [0, 1], got {fraction}")
    return 0 if fraction == 0 else max(1, min(block_size, round(fraction * block_size)))


def replace_tokens(
    x: torch.Tensor,
    fraction: float,
    generator: torch.Generator,
    vocab: int | None = None,
    pool: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of windows x (N, T) with replaced_count(fraction, T) positions of each window, chosen
    uniformly without replacement, given new ids; returns (new x, the boolean mask of the chosen
    positions). The new id is uniform over the `vocab` ids other than the one it replaces (so
    exactly that many tokens change), or, with `pool`, uniform over the ids of `pool`."""
    if (vocab is None) == (pool is None):
        raise ValueError("replace_tokens: give either vocab or pool")
    n, t = x.shape
    k = replaced_count(fraction, t)
    order = torch.rand(n, t, generator=generator).argsort(dim=1)
    mask = torch.zeros(n, t, dtype=torch.bool)
    mask.scatter_(1, order[:, :k], True)
    if pool is None:
        if vocab < 2:
            raise ValueError("replace_tokens: a vocabulary of fewer than 2 ids has no noise")
        shift = 1 + torch.randint(0, vocab - 1, (n, t), generator=generator)
        new = (x + shift) % vocab
    else:
        new = pool[torch.randint(0, len(pool), (n, t), generator=generator)]
    return torch.where(mask, new, x), mask


def token_counts(shards: TokenShards, vocab: int, max_tokens: int | None) -> np.ndarray:
    """How often each id in [0, vocab) occurs in the first `max_tokens` tokens (all: None) of the
    training split."""
    data = shards.tokens("train")
    end = len(data) if max_tokens is None else min(len(data), max_tokens)
    counts = np.zeros(vocab, dtype=np.int64)
    for lo in range(0, end, COUNT_CHUNK):
        chunk = np.asarray(data[lo : min(end, lo + COUNT_CHUNK)])
        counts += np.bincount(chunk, minlength=vocab)[:vocab]
    return counts


def rare_ids(counts: np.ndarray, n: int) -> torch.Tensor:
    """The `n` least frequent ids that occur at least once (ties: the smaller id first)."""
    seen = np.flatnonzero(counts > 0)
    order = np.lexsort((seen, counts[seen]))  # by count, then id
    return torch.from_numpy(seen[order[:n]].astype(np.int64))


def unseen_ids(counts: np.ndarray) -> torch.Tensor:
    """Every id that never occurs in the counted tokens."""
    return torch.from_numpy(np.flatnonzero(counts == 0).astype(np.int64))


def repeated_windows(ids: list[int], block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One window per id, every token that id; targets the same id (what follows a repeat)."""
    x = torch.tensor(ids, dtype=torch.int64)[:, None].expand(len(ids), block_size).contiguous()
    return x, x.clone()


def repeat_ids(counts: np.ndarray, n: int, generator: torch.Generator) -> list[int]:
    """Up to `n` distinct ids to repeat: the most frequent, the rarest seen, the first unseen (if
    any), then ids drawn uniformly from the vocabulary."""
    vocab = len(counts)
    chosen = [int(counts.argmax()), int(rare_ids(counts, 1)[0])]
    unseen = unseen_ids(counts)
    if len(unseen):
        chosen.append(int(unseen[0]))
    for i in torch.randperm(vocab, generator=generator).tolist():
        if len(chosen) >= min(n, vocab):
            break
        if i not in chosen:
            chosen.append(i)
    return list(dict.fromkeys(chosen))[:n]
