"""Synthetic corpora of any size, reproducible from a seed, to time and test data preparation.

    python -m tapernorm.data.synthetic tinystories --out DIR --mb 300 [--seed 0]
    python -m tapernorm.data.synthetic openwebtext --out FILE.jsonl --mb 300 [--seed 0]

TinyStories-like: short stories (about 0.8 kB: a few paragraphs of short sentences from the 8,000
most frequent words of the embedded Shakespeare, children's names, dialogue), as the dataset
repository's two v2 files (stories separated by <|endoftext|> lines). OpenWebText-like: longer
documents (log-normal lengths, median about 3 kB, mean about 4.5 kB as OpenWebText's 38 GB over 8M
documents) of every word of the plays by their frequency, with numbers and capitalized words, as
.jsonl records {"text": ...}. The words are English, so tokenizers split them much as they split
real text; the text is not meant to be read.
"""

from __future__ import annotations

import argparse
import collections
import math
import random
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..runtime import jsonio
from .shakespeare import shakespeare_plays
from .tinystories import TINYSTORIES_FILES

NAMES = (
    "Lily Ben Tom Sue Max Mia Tim Anna Sam Lucy Jack Emma Leo Zoe Ella Jake Amy Dan Rosa Kim "
    "Finn Ava Noah Ruby Bob Jill Pip Molly Spot Daisy"
).split()
OPENERS = ("Once upon a time,", "One day,", "Then", "After that,", "The next day,", "Soon", "But")


class _Words:
    """Words drawn by their frequency in the plays (the `top` most frequent, or all), a block of
    draws at a time."""

    def __init__(self, seed: int, top: int | None = None) -> None:
        counts: collections.Counter = collections.Counter()
        for text in shakespeare_plays().values():
            counts.update(w.lower() for w in re.findall(r"[A-Za-z]+(?:'[a-z]+)?", text))
        common = counts.most_common(top)
        self.words = [w for w, _ in common]
        p = np.array([n for _, n in common], dtype=np.float64)
        self.p = p / p.sum()
        self.rng = np.random.default_rng(seed)
        self._block: list[str] = []
        self._at = 0

    def take(self, n: int) -> list[str]:
        if self._at + n > len(self._block):
            draws = self.rng.choice(len(self.words), size=max(n, 1 << 18), p=self.p)
            self._block = [self.words[i] for i in draws.tolist()]
            self._at = 0
        self._at += n
        return self._block[self._at - n : self._at]


def _sentence(words: list[str], end: str) -> str:
    text = " ".join(words)
    return text[:1].upper() + text[1:] + end


def tinystories_like(seed: int = 0) -> Iterator[str]:
    """An endless stream of TinyStories-like stories."""
    rng = random.Random(seed)
    words = _Words(seed, top=8000)
    while True:
        name, friend = rng.sample(NAMES, 2)
        paragraphs = []
        for p in range(rng.randint(3, 6)):
            sentences = []
            for _ in range(rng.randint(2, 5)):
                body = words.take(rng.randint(4, 11))
                body.insert(rng.randint(0, len(body)), name if rng.random() < 0.6 else friend)
                if rng.random() < 0.2:
                    sentences.append(f'"{_sentence(body, "!")}" said {friend}.')
                else:
                    sentences.append(_sentence(body, "." if rng.random() < 0.9 else "!"))
            if p == 0:
                sentences[0] = f"{rng.choice(OPENERS[:2])} {sentences[0]}"
            paragraphs.append(" ".join(sentences))
        yield "\n\n".join(paragraphs)


def openwebtext_like(seed: int = 0) -> Iterator[str]:
    """An endless stream of OpenWebText-like documents."""
    rng = random.Random(seed)
    words = _Words(seed)
    ends = (".", ".", ".", "?", ":")
    while True:
        target = min(int(rng.lognormvariate(math.log(3000), 0.85)), 100_000)
        paragraphs, size = [], 0
        while size < target:
            sentences = []
            for _ in range(rng.randint(2, 6)):
                body = words.take(rng.randint(6, 29))
                for _ in range(rng.randint(0, 2)):
                    i = rng.randrange(len(body))
                    body[i] = body[i].capitalize()
                if rng.random() < 0.3:
                    body.insert(rng.randrange(len(body)), f"{rng.randint(1, 10**5):,}")
                if rng.random() < 0.3:
                    body[rng.randrange(len(body))] += ","
                sentences.append(_sentence(body, rng.choice(ends)))
            paragraphs.append(" ".join(sentences))
            size += len(paragraphs[-1]) + 2
        yield "\n\n".join(paragraphs)


def write_txt(path: Path, docs: Iterator[str], n_bytes: int) -> tuple[int, int]:
    """Documents separated by <|endoftext|> lines until the file holds n_bytes; (docs, bytes)."""
    n = size = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        while size < n_bytes:
            record = f"{next(docs)}\n<|endoftext|>\n"
            f.write(record)
            size += len(record.encode("utf-8"))
            n += 1
    return n, size


def write_jsonl(path: Path, docs: Iterator[str], n_bytes: int) -> tuple[int, int]:
    """{"text": doc} records until the documents' text totals n_bytes; (docs, bytes of text)."""
    n = size = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        while size < n_bytes:
            doc = next(docs)
            f.write(jsonio.dumps({"text": doc}) + "\n")
            size += len(doc.encode("utf-8"))
            n += 1
    return n, size


def write_tinystories_copy(
    out_dir: Path, train_bytes: int, valid_bytes: int, seed: int = 0, version: str = "v2"
) -> dict[str, tuple[int, int]]:
    """A local copy of TinyStories `version` in the dataset repository's layout: its train and
    validation files (different stories); {split: (stories, bytes)}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stories = tinystories_like(seed)
    sizes = {"train": train_bytes, "validation": valid_bytes}
    return {
        split: write_txt(out_dir / name, stories, sizes[split])
        for split, name in TINYSTORIES_FILES[version].items()
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("kind", choices=["tinystories", "openwebtext"])
    p.add_argument("--out", type=Path, required=True, help="directory (tinystories) or .jsonl")
    p.add_argument("--mb", type=float, required=True, help="MB (1e6 bytes) of training text")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    n_bytes = int(args.mb * 1e6)
    if args.kind == "tinystories":
        made = write_tinystories_copy(args.out, n_bytes, max(n_bytes // 100, 10_000), args.seed)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        made = {"train": write_jsonl(args.out, openwebtext_like(args.seed), n_bytes)}
    for split, (docs, size) in made.items():
        print(f"{split}: {docs} documents, {size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
