"""The Snakemake report's home page, generated after a run (results/report/home.rst): what made
the run, the scale card and every claim's verdict first, then where the tables and figures are and
how to rerun each item. The Snakefile uses it as the report's home page once it exists (before a
run, workflow/report/workflow.rst stands in).

Snakemake renders the page through Jinja and docutils: the whole page is inside `{% raw %}` and the
tables are HTML (the same renderer as the claims page), so no text of a claim is read as markup.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from ..runtime import bookkeeping
from ..runtime.atomic import atomic_write_bytes
from ..runtime.markdown import pipe_table
from ..runtime.output_set import check_member
from ..runtime.provenance import REHEARSAL_NOTE
from .claims.rows import GRADE_CLASS
from .html import render_table

STYLE = """
.tapernorm table { border-collapse: collapse; margin: 0.6em 0 1.2em; }
.tapernorm th, .tapernorm td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left;
  vertical-align: top; font-size: 0.95em; }
.tapernorm th { background: #eef1f5; }
.tapernorm td.yes { background: #e3f4e3; } .tapernorm td.no { background: #fbe3e3; }
.tapernorm td.mixed { background: #fdf2dc; } .tapernorm td.unjudged { background: #eeeeee; }
"""


def _html_table(rows: list[dict], columns: list[str], verdicts: Sequence[str] = ()) -> str:
    import pandas as pd

    table = pd.DataFrame(rows, columns=columns)  # as a frame: a missing key is a NaN cell
    return render_table(pipe_table(columns, table.itertuples(index=False)), verdicts)


def home_page(record: dict, rerun: str) -> str:
    """The page's reStructuredText from a claims record (claims.json)."""
    made = record["made"]
    verdicts = [
        {"Claim": r["Claim"], "Ours": r["Ours"], "Holds?": r["Holds?"]} for r in record["claims"]
    ]
    grades = [GRADE_CLASS[r["grade"]] for r in record["claims"]]
    body = (
        f"<style>{STYLE}</style>\n<div class='tapernorm'>\n"
        "<h3>The scale of these numbers</h3>\n"
        + _html_table(record["scale_card"], ["", "Ours", "Paper"])
        + "\n<h3>The paper's claims, and whether they hold here</h3>\n"
        + _html_table(verdicts, ["Claim", "Ours", "Holds?"], grades)
        + "\n</div>"
    )
    indented = "\n".join(f"   {line}" for line in body.splitlines())
    host = made["host"]
    banner = f"**{_rst(REHEARSAL_NOTE)}**\n\n" if record.get("rehearsal") else ""
    return f"""{{% raw %}}
{banner}**Made by** {_rst(record["stamp"])} on {_rst(host["cpu"])} ({host["cores"]} cores),
torch {_rst(made["versions"].get("torch", "?"))}, {_rst(made["written"])}. The config's full
text and the sha256 of every file of the run are in ``results/manifest.json``
(``tapernorm check-manifest results/manifest.json`` checks a tree, or a copy, against it).

.. raw:: html

{indented}

**Where to look.** *Claims* has every row with its criterion and comment. *Tables* are the paper's
tables (and ours: the decode protocol, the scale-loss sweep, job times) with the paper's numbers
beside ours; *Figures* are the paper's figures redrawn from these runs. Each item's caption says
what it shows and ends with the command that rebuilds it.

**Rerun.** The whole run: ``{_rst(rerun)}``; one item: ``snakemake --cores all --forcerun
<rule>`` (the rule is named in each caption); this report: ``snakemake --cores 1 --report
report.html`` (add the run's ``--configfile``).
{{% endraw %}}
"""


def _rst(text: str) -> str:
    """Plain text safe inside reStructuredText prose."""
    out = str(text)
    for ch in ("\\", "*", "`", "|", "_"):
        out = out.replace(ch, "\\" + ch)
    return html.unescape(out)


def write_home_page(claims_json: str | Path, out: str | Path, rerun: str) -> Path:
    # claims.md, .html and .json written together
    record = bookkeeping.read(bookkeeping.CLAIMS_RECORD, check_member(claims_json))
    with bookkeeping.consuming(bookkeeping.CLAIMS_RECORD, claims_json):
        page = home_page(record, rerun)
    atomic_write_bytes(out, page.encode())
    return Path(out)
