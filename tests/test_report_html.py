"""The HTML pages of the analysis' markdown (what Snakemake's report shows inline)."""

import base64

import pandas as pd
import pytest

from tapernorm.analysis.claims import rows
from tapernorm.analysis.html import STYLE, figure_page, markdown_page, table_cells
from tapernorm.analysis.tables.write import to_markdown


def test_a_table_renders_as_an_html_table_with_its_caption():
    df = pd.DataFrame({"Variant": ["Baseline", "a|b"], "Ours": ["3.92 ± 0.01", "4.00"]})
    page = markdown_page(to_markdown(df, "**Table 2.** Validation loss (`g=0`)."), "table2")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "<p><strong>Table 2.</strong> Validation loss (<code>g=0</code>).</p>" in page
    assert "<th>Variant</th><th>Ours</th>" in page
    assert "<td>a|b</td><td>4.00</td>" in page  # the escaped bar is a bar again, not a new cell
    assert page.count("<tr>") == 3


def test_claims_blocks_verdict_colours_and_escaping(tmp_path):
    md = tmp_path / "claims.md"
    md.write_text(
        "# Claims\n\nIntro line one\nline two <x>.\n\n"
        "| Claim | Holds? |\n|---|---|\n| 1. A | yes; on the other host: no |\n| 2. B | no |\n"
        "| 3. C | partly |\n| 4. D | not measured |\n\n## Inputs\n\n- runs: 16\n- bench: 2\n"
    )
    grades = [rows.YES, rows.NO, rows.PARTLY, rows.NOT_MEASURED]
    page = markdown_page(md.read_text(), "claims", [rows.GRADE_CLASS[g] for g in grades])
    assert "<h1>Claims</h1>" in page and "<h2>Inputs</h2>" in page
    assert "<p>Intro line one line two &lt;x&gt;.</p>" in page
    for verdict, cls in (
        ("yes; on the other host: no", "yes"),  # the grade's colour, whatever the cell says
        ("no", "no"),
        ("partly", "mixed"),
        ("not measured", "unjudged"),
    ):
        assert f'<td class="{cls}">{verdict}</td>' in page
    assert "<ul><li>runs: 16</li><li>bench: 2</li></ul>" in page
    with pytest.raises(ValueError, match="needs the grade of each row"):
        markdown_page(md.read_text(), "claims", ["yes"])


def test_every_grade_has_a_colour_of_the_pages_style():
    assert set(rows.GRADE_CLASS) == set(rows.GRADES)
    assert all(f"td.{cls} " in STYLE for cls in rows.GRADE_CLASS.values())


def test_table_cells_keeps_empty_cells():
    assert table_cells("| a |  | c |") == ["a", "", "c"]


def test_a_figure_page_holds_the_png_then_its_caption_as_text():
    png = b"\x89PNG\r\n\x1a\n not really an image <&>"
    caption = '**Figure 3.** Logit norm "x" <y>.\n\n- **Key.** Baseline: black.\n- **Paper.** 2e5.'
    page = figure_page(png, caption + "\n\n**Provenance.** tapernorm 0123", "fig3_logit_norm")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    src = f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}"'
    assert src in page
    assert 'alt="Figure 3. Logit norm &quot;x&quot; &lt;y&gt;."' in page  # the first paragraph
    body = page[page.index("<img") :]
    assert body.index("<p><strong>Figure 3.</strong>") < body.index("<li><strong>Key.</strong>")
    assert "<ul><li><strong>Key.</strong> Baseline: black.</li><li><strong>Paper.</strong>" in body
    assert body.rstrip().endswith(
        "<p><strong>Provenance.</strong> tapernorm 0123</p>\n</body>\n</html>"
    )
