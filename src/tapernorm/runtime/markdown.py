"""Markdown pipe tables: the one writer of them (analysis.html.table_cells reads them back).

A cell is its value as text with `|` escaped as `\\|` and a newline written as a space, so every
row is one line of as many cells as the header; headers are cells too. Captions and headings
around a table are its caller's.
"""

from __future__ import annotations

from collections.abc import Iterable


def cell(value: object) -> str:
    """A value as one table cell: `|` as `\\|`, a newline as a space."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def table_row(values: Iterable[object]) -> str:
    """One row: `| a | b |`."""
    return "| " + " | ".join(cell(v) for v in values) + " |"


def pipe_table(header: Iterable[object], rows: Iterable[Iterable[object]]) -> list[str]:
    """The table's lines: the header, its `|---|---|` separator, then a line per row."""
    header = list(header)
    return [table_row(header), "|" + "---|" * len(header), *(table_row(r) for r in rows)]
