"""A PDF page's lines and tables in reading order: top to bottom; where two
columns of running text stand side by side, the left one first."""

from __future__ import annotations

from kb.readers.pdf_lines import Line
from kb.readers.pdf_tables import Table


def reading_order(lines: list[Line], tables: list[Table]) -> list[Line | Table]:
    """Top to bottom; where two columns run side by side, the left one first."""
    items: list[Line | Table] = [*lines, *tables]
    if not items:
        return []
    x0 = min(it.x0 for it in items)
    x1 = max(it.x1 for it in items)
    mid = (x0 + x1) / 2
    items.sort(key=lambda it: (-it.top, it.x0))
    _left_to_right(items)

    def side(it) -> str:
        if it.x1 <= mid + 2:
            return "left"
        if it.x0 >= mid - 2:
            return "right"
        return "full"

    ordered: list[Line | Table] = []
    band: list[Line | Table] = []

    def flush() -> None:
        lefts = [it for it in band if side(it) == "left"]
        rights = [it for it in band if side(it) == "right"]
        if (
            len(lefts) >= 2
            and len(rights) >= 2
            and _fills(lefts, mid - x0)
            and _fills(rights, x1 - mid)
        ):
            ordered.extend(lefts + rights)
        else:
            ordered.extend(band)
        band.clear()

    for it in items:
        if side(it) == "full":
            flush()
            ordered.append(it)
        else:
            band.append(it)
    flush()
    return ordered


def _fills(items: list, width: float) -> bool:
    """Whether a half of the page holds a column of running text: lines that
    fill it, two at least (headings, list items and a paragraph's last line
    in it are short; the cells of a table without rules all are)."""
    return sum(it.x1 - it.x0 >= 0.6 * width for it in items) >= 2


def _left_to_right(items: list[Line | Table]) -> None:
    """Lines on one baseline in the order of their left edges: a line in a
    smaller font ("-u fd" beside its description) stands lower at its top."""
    start = 0
    for i in range(1, len(items) + 1):
        first, it = items[start], items[i] if i < len(items) else None
        if (
            isinstance(it, Line)
            and isinstance(first, Line)
            and abs(it.y - first.y) <= 0.2 * min(it.size, first.size)
        ):
            continue
        if i - start > 1:
            items[start:i] = sorted(items[start:i], key=lambda ln: ln.x0)
        start = i
