"""Every paper number names the paper's version (v1 or v2) and where it is from, and carries it
where it is rendered: claims.md/claims.json, the scale card, the scaling study's rows and figure."""

import pandas as pd
import pytest

from tapernorm.analysis import paper
from tapernorm.analysis.claims.rows import ClaimInputs
from tapernorm.analysis.claims.scaling import study_note
from tapernorm.analysis.studies.scaling import paper_gap_text
from tapernorm.analysis.studies.scaling_figures import (
    PAPER_GID,
    WIDTH_COLORS,
    gap_axes,
    paper_points,
)

# paper.py's names that hold no paper number: the paper's name, its versions, the sources
NOT_NUMBERS = {"ARXIV", "V1", "V2", "VERSIONS", "SOURCE", "SOURCES"}


def test_every_paper_number_names_its_version_and_place():
    numbers = [
        name
        for name, value in vars(paper).items()
        if name.isupper() and name not in NOT_NUMBERS and not isinstance(value, paper.Source)
    ]
    assert len(numbers) > 25
    assert [n for n in numbers if n not in paper.SOURCES] == []
    assert set(paper.SOURCES) <= set(numbers)  # no source of a number that is not there
    assert {s.version for s in paper.SOURCES.values()} == {"v1", "v2"}
    assert all(c.source == paper.TABLE2_SOURCE for c in paper.TABLE2.values())
    # the tables are v1's; the KV-cached decode headline is v2's
    assert paper.source_of("TABLE2").version == paper.source_of("TABLE3").version == "v1"
    assert paper.source_of("DECODE_SPEEDUP").version == "v2"
    assert str(paper.TABLE2_SOURCE) == "arXiv 2602.10408 v1, Table 2"
    assert paper.tagged("+1.46%", paper.TABLE2_SOURCE) == "+1.46% (paper v1, Table 2)"
    with pytest.raises(ValueError, match="not one of v1, v2"):
        paper.Source("v3", "Table 9")
    with pytest.raises(KeyError, match="no source"):
        paper.source_of("TABLE9")


def test_claims_carry_the_version_of_their_paper_value():
    from tapernorm.analysis.claims.document import CLAIMS, claims_record

    assert [bool(c.sources) for c in CLAIMS] == [True] * 9 + [False]  # DyT's: not in the paper
    record = claims_record(ClaimInputs(), None, {})
    for row in record["claims"]:
        versions = {s["version"] for s in row["paper_sources"]}
        tags = [paper.Source(s["version"], s["where"]).tag for s in row["paper_sources"]]
        if tags:
            assert row["Paper"].endswith(f" ({'; '.join(tags)})"), row["Paper"]
        if row["Claim"].startswith("7."):
            assert versions == {"v1", "v2"}
        elif not row["Claim"].startswith("TaperNorm vs DyT"):
            assert versions == {"v1"}, row["Claim"]
        else:  # not in the paper: no version to give
            assert row["paper_sources"] == [] and "(paper v" not in row["Paper"]


def test_the_scale_cards_paper_values_carry_their_version(tmp_path):
    from test_scaling import _study

    from tapernorm.analysis.claims.scale_card import scale_card
    from tapernorm.analysis.studies.scaling import read_study

    _, dirs = _study(tmp_path / "r", {})
    card = scale_card(ClaimInputs(runs=read_study(dirs).runs))
    quoted = card[card["Paper"] != "—"]
    assert len(quoted) >= 5
    assert all(("(paper v1)" in t or "(paper v1, " in t) for t in quoted["Paper"]), list(
        quoted["Paper"]
    )
    missing = card.loc[card[""] == "Not tested at this scale", "Ours"].iloc[0]
    assert "paper v1, Table 5: d=64-512" in missing and "~273-4,096" in missing


def _summary(rows: list[tuple]) -> pd.DataFrame:
    """A scaling summary of (claim, width, tokens per parameter, estimate) rows."""
    frame = pd.DataFrame(rows, columns=["claim", "width", "tokens_per_param", "estimate"])
    frame["ci_low"], frame["ci_high"] = frame["estimate"] - 0.5, frame["estimate"] + 0.5
    frame["n_seeds"], frame["unit"], frame["verdict"], frame["left_out"] = 3, "%", "yes", ""
    frame["steps"] = (frame["tokens_per_param"] * 100).astype(int)
    return frame


def test_the_gap_figure_draws_the_papers_gap_at_each_of_its_widths():
    summary = _summary([("1", 32, 3.0, 1.0), ("1", 64, 3.0, 1.2), ("1", 64, 30.0, 1.4),
                        ("dyt", 64, 3.0, 9.0)])  # fmt: skip
    fig, axes, claims, points = gap_axes(summary)
    assert claims == ["1", "dyt"]
    assert list(points["width"]) == [64, 128, 256, 512] and set(points["claim"]) == {"1"}
    drawn = {
        line.get_gid(): (line.get_xdata()[0], line.get_ydata()[0], line.get_color())
        for ax in axes
        for line in ax.get_lines()
        if (line.get_gid() or "").startswith(PAPER_GID)
    }
    assert set(drawn) == {f"paper/1/d{w}" for w in (64, 128, 256, 512)}  # none on DyT's panel
    x, y, color = drawn["paper/1/d64"]
    assert x == pytest.approx(500_000 * 16 * 512 / 1e6) and y == pytest.approx(1.46)
    assert color == WIDTH_COLORS[1]  # d=64's line colour (d=32 is the first)
    x, y, color = drawn["paper/1/d512"]
    assert x == pytest.approx(1_000_000 * 16 * 512 / 30e6) and y == pytest.approx(0.71)
    assert color != WIDTH_COLORS[1]  # a width the study does not have: grey
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "paper v1 (Table 2), d=64-d=512" in legend
    assert paper_points(["2"])["gap_pct"].tolist() == [1.82, 1.78, 1.48, 0.78]


def test_the_studys_rows_and_the_claims_note_quote_the_papers_gap():
    assert paper_gap_text("1", 64) == "paper v1, Table 2, d=64: +1.46%"
    assert paper_gap_text("2", 64) == "paper v1, Table 2, d=64: +1.82%"
    assert paper_gap_text("1", 32) == paper_gap_text("dyt", 64) == ""  # the paper has none
    ours, _ = study_note(_summary([("2", 64, 3.0, -2.4), ("2", 64, 29.0, 1.74)]), "2")
    assert "paper v1, Table 2, d=64: +1.82%" in ours
    ours, _ = study_note(_summary([("1", 32, 3.0, 1.0)]), "1")
    assert "paper v" not in ours
