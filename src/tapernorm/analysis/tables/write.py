"""The writers every table uses: a table as <stem>.csv, .md, .tex and .html, one output set."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from ...runtime.markdown import pipe_table
from ...runtime.output_set import OutputSet, marker_path
from ...runtime.provenance import stamp
from ..html import markdown_page

_TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_TEX_SYMBOLS = {"±": r"$\pm$", "†": r"$^\dagger$", "—": "---", "×": r"$\times$", "≥": r"$\geq$"}


def tex_escape(text: str) -> str:
    """LaTeX-safe text: special characters escaped, the few symbols we use as math."""
    out = "".join(_TEX_ESCAPES.get(ch, ch) for ch in str(text))
    for symbol, tex in _TEX_SYMBOLS.items():
        out = out.replace(symbol, tex)
    return out


def to_markdown(df: pd.DataFrame, caption: str) -> str:
    """A caption line, then a GitHub markdown table."""
    return "\n".join([caption, "", *pipe_table(df.columns, df.itertuples(index=False))]) + "\n"


def to_latex(df: pd.DataFrame, caption: str) -> str:
    """A booktabs tabular, the caption as a comment above it."""
    align = "".join("r" if pd.api.types.is_numeric_dtype(df[c]) else "l" for c in df.columns)
    lines = [f"% {line}" for line in caption.splitlines()]
    lines += [rf"\begin{{tabular}}{{{align}}}", r"\toprule"]
    lines.append(" & ".join(tex_escape(c) for c in df.columns) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join(tex_escape(v) for v in row) + r" \\" for row in df.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_table(
    df: pd.DataFrame,
    out_stem: str | Path,
    caption: str,
    config_sha256: str | None = None,
    rehearsal: bool = False,
    data: pd.DataFrame | None = None,
    command: str = "tapernorm table",
    into: OutputSet | None = None,
) -> list[Path]:
    """Write <out_stem>.csv, .md, .tex and .html (the markdown as a page, which the Snakemake report
    shows inline) as one output set (runtime.output_set: staged, moved in together, the marker
    <out_stem>.set.json naming them, `command` the one to rerun); returns the four paths. With
    `into`, they are added to that set instead, for its caller to commit. The md, tex and html end
    with the stamp of what made them (provenance.stamp: the commit, the config's hash, and
    REHEARSAL for a rehearsal); the csv is data only (the run's manifest hashes it): `df`, or
    `data` where the shown table's cells are text made from numbers that the csv keeps as
    numbers."""
    stem = Path(out_stem)
    if stem.suffix in (".csv", ".md", ".tex", ".html"):
        stem = stem.with_suffix("")
    buf = io.StringIO()
    (df if data is None else data).to_csv(buf, index=False)
    made = f"Made by {stamp(config_sha256, rehearsal=rehearsal)}."
    md = to_markdown(df, caption) + f"\n{made}\n"
    texts = {
        ".csv": buf.getvalue(),
        ".md": md,
        ".tex": to_latex(df, caption) + f"% {made}\n",
        ".html": markdown_page(md, stem.name),
    }
    out = into if into is not None else OutputSet(marker_path(stem), command)
    paths = [out.add(stem.with_name(stem.name + sfx), text.encode()) for sfx, text in texts.items()]
    if into is None:
        out.commit()
    return paths
