"""Markdown tables, as the benchmark commands print them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(
    header: Sequence[str], align: str, rows: Iterable[Sequence[object]]
) -> str:
    """A Markdown table; `align` has one letter per column: "l" left, "r" right."""
    rule = {"l": "---", "r": "---:"}
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(rule[a] for a in align) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
