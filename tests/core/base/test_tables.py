"""The notebooks' tables: a value's line break does not split its row (notebook 03's
sampled text once held a newline and broke the table), in text or in HTML."""

from __future__ import annotations

from qwen3_trn_helpers.tables import Table


def test_a_line_break_in_a_cell_keeps_the_row_whole():
    table = Table([{"model": "pretrained", "sampled": " the city\nof the\r\nriver"}])
    text = str(table).splitlines()
    assert len(text) == 2 and text[1].rstrip().endswith("the city⏎of the⏎river")
    html = table._repr_html_()
    assert "<td> the city⏎of the⏎river</td>" in html and "\n" not in html


def test_numbers_and_missing_columns():
    table = Table([{"a": 1234567, "b": 0.123456}, {"a": True, "c": "<x>"}])
    assert table.columns == ["a", "b", "c"]
    assert "1,234,567" in str(table) and "0.1235" in str(table)
    assert "&lt;x&gt;" in table._repr_html_()  # escaped
