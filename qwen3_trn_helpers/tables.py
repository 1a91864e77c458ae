"""Small tables for notebook cells, the CLI and the planner's reports (no pandas needed;
HTML in Jupyter, aligned text elsewhere; escapes its input)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    # a line break inside a cell (a model's sampled text) would split its row in the text
    # form and vanish into a space in HTML: shown as a mark instead, in both
    return str(value).replace("\r\n", "\n").replace("\n", "⏎")


class Table:
    """Rows of dicts, shown as HTML in Jupyter and as aligned text elsewhere."""

    def __init__(self, rows: Sequence[Mapping[str, object]], columns: Sequence[str] = ()):
        self.rows = list(rows)
        # every key of every row, in order of first appearance: a column only some rows
        # have (experts, for the MoE presets) is still shown
        self.columns = list(columns) or list(dict.fromkeys(k for r in self.rows for k in r))

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{escape(_fmt(r.get(c, '')))}</td>" for c in self.columns)
            + "</tr>"
            for r in self.rows
        )
        return f"<table><tr>{head}</tr>{body}</table>"

    def __str__(self) -> str:
        cells = [[_fmt(r.get(c, "")) for c in self.columns] for r in self.rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
        return "\n".join(lines)

    __repr__ = __str__
