"""Which files a command writing to a file name the user gives (`--out FILE`, or a stem such as
`--out results/tables/table2` for table2.csv, .md, .tex and .html) may replace.

claim_outputs lets it replace a file that is absent, or recognisably an earlier output of the
command (by what the command writes into it: the provenance stamp, a JSON record's keys, a CSV's
header); any other file stops the command, before any work, with one line naming the file and the
fix. `--force` replaces such files all the same (only the files of the names the command writes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .out_dirs import PathInUse, json_with

# provenance.stamp's 'tapernorm <commit>' (12 hex digits, or 'commit unknown')
STAMP = re.compile(rb"tapernorm (?:[0-9a-f]{12}|commit unknown)")
TABLE_SUFFIXES = (".csv", ".md", ".tex", ".html")
FIGURE_SUFFIXES = (".pdf", ".png", ".html")


def claim_outputs(
    paths: Iterable[Path],
    command: str,
    is_own: Callable[[Path], bool],
    force: bool = False,
    option: str = "--out",
) -> None:
    """PathInUse for the first of `paths` that is a directory, or an existing file `is_own` does
    not recognise as `command`'s (unless `force`)."""
    for path in map(Path, paths):
        if path.is_dir():
            raise PathInUse(f"{option}: {path} is a directory: give a file name")
        if path.exists() and not force and not is_own(path):
            raise PathInUse(
                f"{option}: {path} exists and is not an earlier output of tapernorm {command}: "
                f"give another {option}, or add --force to replace it"
            )


def claim_marker(stem: Path, command: str) -> None:
    """PathInUse if <stem>.set.json, the marker of the output set the command writes
    (output_set), is a directory, a link or a file that is no set's marker (`--force` or not: the
    set's write would stop there, after the work)."""
    from .output_set import is_marker, marker_path

    marker = marker_path(stem)
    if marker.is_symlink() or marker.is_dir() or (marker.exists() and not is_marker(marker)):
        raise PathInUse(
            f"{marker} is in the way of the output set's marker that tapernorm {command} writes: "
            "move it away"
        )


def stamped(path: Path) -> bool:
    """Whether `path` holds provenance.stamp's text (UTF-8, Latin-1, or UTF-16 as a PDF's
    metadata holds it)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return False
    return bool(STAMP.search(data) or STAMP.search(data.replace(b"\0", b"")))


def stem_paths(stem: Path, suffixes: Sequence[str]) -> list[Path]:
    """The files <stem><suffix> a command writes (`stem` given with one of `suffixes`, or none)."""
    stem = Path(stem)
    if stem.suffix in suffixes:
        stem = stem.with_suffix("")
    return [stem.with_name(stem.name + suffix) for suffix in suffixes]


def own_table_file(path: Path) -> bool:
    """A table's .md, .tex or .html end with its stamp; its .csv (data only) is one if a stamped
    file was written beside it."""
    path = Path(path)
    if path.suffix == ".csv":
        return any(stamped(path.with_suffix(suffix)) for suffix in TABLE_SUFFIXES[1:])
    return stamped(path)


def claim_table(stem: Path, command: str, force: bool) -> None:
    """`table`, `job-times`: <stem>.csv, .md, .tex, .html and the set's marker."""
    paths = stem_paths(stem, TABLE_SUFFIXES)
    claim_outputs(paths, command, own_table_file, force)
    claim_marker(paths[0].with_suffix(""), command)


TAILS_JSON_KEYS = ("tails", "made_by", "models")  # `tails`'s JSON record


def own_tails_file(path: Path) -> bool:
    """`tails`'s files: its table's (own_table_file) and its JSON record (by its keys)."""
    path = Path(path)
    if path.suffix == ".json":
        return json_with(path, TAILS_JSON_KEYS)
    return own_table_file(path)


def claim_tails(stem: Path, force: bool) -> None:
    """`tails`: <stem>.csv, .md, .tex, .html and .json."""
    paths = stem_paths(stem, (*TABLE_SUFFIXES, ".json"))
    claim_outputs(paths, "tails", own_tails_file, force)
    claim_marker(paths[0].with_suffix(""), "tails")


def claim_figure(out: Path, force: bool, command: str = "figure") -> None:
    """`figure`: <stem>.pdf, .png and .html, each with its stamp."""
    paths = [Path(out).with_suffix(suffix) for suffix in FIGURE_SUFFIXES]
    claim_outputs(paths, command, stamped, force)
    claim_marker(Path(out).with_suffix(""), command)


def claim_claims(out: Path, force: bool) -> None:
    """`claims`: OUT (markdown), .html (both stamped) and .json (a claims record)."""
    out = Path(out)

    def own(path: Path) -> bool:
        if path == out.with_suffix(".json"):
            return json_with(path, ("stamp", "claims", "scale_card"))
        return stamped(path)

    paths = [out, out.with_suffix(".html"), out.with_suffix(".json")]
    claim_outputs(dict.fromkeys(paths), "claims", own, force)
    claim_marker(out.with_suffix(""), "claims")


def own_bench_csv(path: Path) -> bool:
    """A benchmark's CSV: its header begins with the `benchmark` column (empty: stopped before
    its first row)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return head == b"" or head.startswith(b"benchmark,")


def own_bench_json(path: Path) -> bool:
    """`bench train-step`'s JSON: a result (or a list of them) with `benchmark` and `results`."""
    from . import jsonio

    try:
        data = jsonio.read_json(path)
    except (OSError, ValueError):
        return False
    items = data if isinstance(data, list) else [data]
    return bool(items) and all(
        isinstance(x, dict) and "benchmark" in x and "results" in x for x in items
    )


SCALING_HEADS = {
    "summary.csv": b"claim,width,tokens_per_param,",
    "per_seed.csv": b"claim,width,steps,seed,",
    "summary.md": b"| Claim | Width | Steps |",
}


def own_scaling_file(path: Path) -> bool:
    """`scaling summary`'s files: summary.json by its keys, the others by how they begin."""
    path = Path(path)
    if path.name == "summary.json":
        return json_with(path, ("made_by", "rows", "trends"))
    try:
        with open(path, "rb") as f:
            return f.read(64).startswith(SCALING_HEADS[path.name])
    except OSError:
        return False


def claim_scaling_summary(out: Path, names: Iterable[str], force: bool) -> None:
    """`scaling summary`: the summary files `names` in the directory `out`."""
    claim_outputs([Path(out) / name for name in names], "scaling summary", own_scaling_file, force)
    claim_marker(Path(out) / "summary", "scaling summary")


STABILITY_HEADS = {
    "summary.csv": b"width,arm,label,",
    "summary.md": b"# The stability study",
    "factors.csv": b"base,factor,change,",
    "factors.md": b"# One change at a time",
}


def own_stability_file(path: Path) -> bool:
    """`stability summary`'s and `stability factors`' files: summary.json by its keys, the others
    by how they begin."""
    path = Path(path)
    if path.name == "summary.json":
        return json_with(path, ("made_by", "rows", "crossings"))
    try:
        with open(path, "rb") as f:
            return f.read(64).startswith(STABILITY_HEADS[path.name])
    except OSError:
        return False


def claim_stability_summary(out: Path, names: Iterable[str], force: bool) -> None:
    """`stability summary` or `factors`: its files `names` in the directory `out`."""
    paths = [Path(out) / name for name in names]
    command = "stability factors" if "factors.md" in names else "stability summary"
    claim_outputs(paths, command, own_stability_file, force)
    claim_marker(Path(out) / ("factors" if "factors.md" in names else "summary"), command)
