"""The markdown the analysis writes (tables: a caption and a pipe table; claims.md: headings,
paragraphs, a pipe table, bullet lists; figure captions) as a self-contained HTML page, which
Snakemake's report shows inline (a .md or .csv there is only a download). tables.write_table and
claims.write_claims write one beside each markdown file, figures.style.save_figure one per figure:
the PNG inline, its caption below it as text.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 1em 1.5em; max-width: 110em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: 0.8em 0; width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.55em; text-align: left; vertical-align: top; }
th { background: #eef1f5; position: sticky; top: 0; }
tr:nth-child(even) td { background: #fafafa; }
td { min-width: 5em; } td.long { width: 45%; }
code { background: #f3f3f3; padding: 0 0.2em; }
td.yes { background: #e3f4e3 !important; } td.no { background: #fbe3e3 !important; }
td.mixed { background: #fdf2dc !important; } td.unjudged { background: #eeeeee !important; }
img { max-width: 100%; height: auto; display: block; margin: 0.5em 0 1em; }
"""
VERDICT_COLUMN = "Holds?"
HEADING = re.compile(r"^(#{1,3}) (.*)")
LONG_CELL = 120  # mean characters: the column of longest cells, past this, gets the most width


def inline(text: str) -> str:
    """Escaped text with **bold** and `code` spans."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)


def table_cells(line: str) -> list[str]:
    """The cells of one pipe-table row (`\\|` is a literal bar, as runtime.markdown writes it)."""
    line = line.strip().removeprefix("|").removesuffix("|")
    cells = re.split(r"(?<!\\)\|", line)
    return [c.strip().replace("\\|", "|") for c in cells]


def longest_column(body: list[list[str]]) -> int | None:
    """The index of the column of longest cells (mean length), if over LONG_CELL characters."""
    if not body:
        return None
    width = max(len(r) for r in body)
    means = [sum(len(r[i]) for r in body if i < len(r)) / len(body) for i in range(width)]
    best = max(range(width), key=means.__getitem__)
    return best if means[best] > LONG_CELL else None


def render_table(rows: list[str], verdicts: Sequence[str] = ()) -> str:
    """A header row, the --- separator, body rows -> <table>. `verdicts`: the colour class of each
    body row's 'Holds?' cell, in order (claims.rows.GRADE_CLASS of the row's grade: the cell's
    text is never read for it); a table with that column needs one per row."""
    header = table_cells(rows[0])
    body = [table_cells(r) for r in rows[2:]]
    if VERDICT_COLUMN in header and len(verdicts) != len(body):
        raise ValueError(
            f"a table with a {VERDICT_COLUMN!r} column of {len(body)} rows needs the grade of each "
            f"row (got {len(verdicts)})"
        )
    long_col = longest_column(body)
    out = ["<table>", "<tr>" + "".join(f"<th>{inline(h)}</th>" for h in header) + "</tr>"]
    for r, row in enumerate(body):
        cells = []
        for i, cell in enumerate(row):
            classes = ["long"] if i == long_col else []
            if i < len(header) and header[i] == VERDICT_COLUMN:
                classes.append(verdicts[r])
            attr = f' class="{" ".join(classes)}"' if classes else ""
            cells.append(f"<td{attr}>{inline(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out + ["</table>"])


def block_kind(line: str) -> str:
    return "table" if line.startswith("|") else "list" if line.startswith("- ") else "para"


def markdown_body(text: str, verdicts: Sequence[str] = ()) -> str:
    """Blocks of the analysis' markdown -> HTML: #/## headings, pipe tables, - lists, paragraphs
    (`verdicts`: render_table's, for the tables with a 'Holds?' column)."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        heading = HEADING.match(line)
        if not line.strip():
            i += 1
        elif heading:
            level = len(heading[1])
            blocks.append(f"<h{level}>{inline(heading[2])}</h{level}>")
            i += 1
        else:
            kind, j = block_kind(line), i + 1
            while (
                j < len(lines)
                and lines[j].strip()
                and not HEADING.match(lines[j])
                and block_kind(lines[j]) == kind
            ):
                j += 1
            chunk, i = lines[i:j], j
            if kind == "table":
                blocks.append(render_table(chunk, verdicts))
            elif kind == "list":
                items = "".join(f"<li>{inline(x[2:])}</li>" for x in chunk)
                blocks.append(f"<ul>{items}</ul>")
            else:
                blocks.append(f"<p>{inline(' '.join(chunk))}</p>")
    return "\n".join(blocks)


def page(body: str, title: str) -> str:
    """A self-contained HTML page (inline style, no scripts) around the HTML `body`."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"{body}\n</body>\n</html>\n"
    )


def markdown_page(text: str, title: str, verdicts: Sequence[str] = ()) -> str:
    """A self-contained HTML page (inline style, no scripts) of the analysis' markdown `text`
    (`verdicts`: render_table's)."""
    return page(markdown_body(text, verdicts), title)


def plain(text: str) -> str:
    """Markdown `text` without its **bold** and `code` marks."""
    return re.sub(r"\*\*(.+?)\*\*|`([^`]+)`", lambda m: m[1] or m[2], text)


def figure_page(png: bytes, caption: str, title: str) -> str:
    """A self-contained page of a figure: the PNG inline (base64), then its markdown `caption` as
    text; the image's alt text is the caption's first paragraph."""
    alt = html.escape(plain(caption.split("\n\n")[0]))
    data = base64.b64encode(png).decode()
    image = f'<img src="data:image/png;base64,{data}" alt="{alt}">'
    return page(f"{image}\n{markdown_body(caption)}", title)
