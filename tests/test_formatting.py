"""Table cells: one rule for missing, infinite and non-numeric values."""

from evalharness.formatting import format_cell, markdown_table


def test_format_cell_rules():
    assert format_cell(None, "{:.2f}") == "-"
    assert format_cell(1.23456, "{:.2f}") == "1.23"
    assert format_cell("1.5", "{:.2f}x") == "1.50x"  # numeric strings (MLflow params) as numbers
    assert format_cell(float("inf"), "{:.2f}") == "inf"
    assert format_cell(1.7976931348623157e308, "{:.2f}") == "inf"  # MLflow's stored inf
    assert format_cell("hit", "{:.2f}") == "hit"
    assert format_cell("40") == "40"


def test_markdown_table():
    table = markdown_table([{"a": 1.0, "b": None}], [("A", "a", "{:.1f}"), ("B", "b", "{}")])
    assert table.splitlines() == ["| A | B |", "|---|---|", "| 1.0 | - |"]
