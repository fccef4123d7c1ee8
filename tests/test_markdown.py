"""runtime.markdown: the one pipe-table writer, and its round trip through analysis.html."""

from tapernorm.analysis.html import table_cells
from tapernorm.runtime.markdown import cell, pipe_table


def test_a_table_is_its_header_a_separator_and_a_line_per_row():
    assert pipe_table(["a", "b"], [[1, "x"], [2.5, None]]) == [
        "| a | b |",
        "|---|---|",
        "| 1 | x |",
        "| 2.5 | None |",
    ]


def test_a_table_without_rows_is_its_header_and_separator():
    assert pipe_table(("Claim", "Width", "Steps"), []) == [
        "| Claim | Width | Steps |",
        "|---|---|---|",
    ]


def test_a_cell_escapes_its_bar_and_writes_a_newline_as_a_space():
    assert cell("a | b\nc") == "a \\| b c"
    assert cell(3) == "3"
    header, _, row = pipe_table(["x|y"], [["two\nlines"]])
    assert header == "| x\\|y |" and row == "| two lines |"


def test_html_reads_the_cells_back():
    lines = pipe_table(["a", "b"], [["p | q", "r\ns"]])
    assert table_cells(lines[0]) == ["a", "b"]
    assert table_cells(lines[2]) == ["p | q", "r s"]  # the bar a bar, not a third cell
