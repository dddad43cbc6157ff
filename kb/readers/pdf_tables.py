"""A PDF page's lines -> tables, and the lines that are none.

`ruled_tables`: lines inside cells between the page's drawn rules become
tables; the first row is the header when bold, and a row cut by a page break
stays open (OPEN) for the assembler to join with the next page's.
`unruled_tables`: runs of at least three rows whose runs of text fall into the
same two or more columns become tables; lists, contents, code and columns of
running text are told apart by their first column, font and fill. Each returns
the lines it did not take, and the tables.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from kb.readers.pdf_lines import (
    BULLETS,
    OPEN,
    WORD_RE,
    Line,
    Rules,
    baseline_rows,
    join_texts,
)

COLUMN_GAP_EMS = 0.75  # columns of a table stand this far apart at least (the
# spaces of justified text reach ~0.6)
MIN_CELL = 4  # rules closer than this (PDF units) bound no cell between them
WRAP_EMS = 1.35  # the widest line step inside a table cell whose text wraps
PROSE_COLUMN_EMS = 15  # a column of running text is at least this wide
LONG_RUN = 8  # rows of a run that is not a table, skipped as a whole
_MARKER_RE = re.compile(rf"^([{BULLETS}]|\d{{1,3}}[.)]|[a-zA-Z][.)]|\d+(\.\d+)+\.?)$")
_LEADER_RE = re.compile(r"(\.\s?){5}")
_Chunk = tuple[float, float, str]


@dataclass
class Table:
    page: int
    x0: float
    x1: float
    top: float
    rows: list[list[str]]
    header: bool
    open_top: bool = False  # its first row began on the previous page
    open_bottom: bool = False  # its last row goes on on the next page
    ruled: bool = False  # drawn with rules: a table, whatever its columns hold
    sizes: Counter = field(default_factory=Counter)  # characters per font size
    words: set[str] = field(default_factory=set)  # of its page, for hyphenation


def _framed_code(cells: dict[tuple, list[Line]]) -> list[Line]:
    """The lines of code in a frame of rules (Sphinx's LaTeX boxes every code
    block): a cell alone in its row holding only monospaced lines is no table
    of one column. They leave `cells`, each frame's lines sharing a box of
    its own (a negative number: not one of the page's shaded boxes)."""
    rows: dict[tuple, int] = {}
    for _, _, top, bottom in cells:
        rows[top, bottom] = rows.get((top, bottom), 0) + 1
    framed: list[Line] = []
    frames = 0
    for box, members in list(cells.items()):
        if rows[box[2], box[3]] == 1 and all(ln.is_mono() for ln in members):
            frames += 1
            for ln in members:
                ln.box = -frames
            framed += members
            del cells[box]
    return framed


def ruled_tables(lines: list[Line], rules: Rules, page: int):
    """Lines inside ruled cells become tables; the other lines are returned."""
    if not rules.vertical or not rules.horizontal:
        return lines, []
    free: list[Line] = []
    cells: dict[tuple[float, float, float, float], list[Line]] = {}
    for line in lines:
        box = rules.cell(line)
        if box is None:
            free.append(line)
        else:
            cells.setdefault(box, []).append(line)
    framed = _framed_code(cells)
    free += framed
    if not cells:
        return free if framed else lines, []
    words = {w.lower() for ln in lines for w in WORD_RE.findall(ln.text)}
    rows: dict[tuple[float, float], dict[float, list[Line]]] = {}
    for (lx, rx, top, bottom), members in cells.items():
        rows.setdefault((top, bottom), {})[lx] = members
    tables: list[Table] = []
    current: Table | None = None
    last_bottom = None
    columns: tuple | None = None
    for top, bottom in sorted(rows, key=lambda k: -k[0]):
        row = rows[(top, bottom)]
        # the row's columns from its rules, so that empty cells keep their place
        xs = _columns(rules, (top + bottom) / 2) or tuple(sorted(row))
        texts = [
            join_texts(
                [
                    ln.text
                    for x in row
                    if abs(x - left) <= 2
                    for ln in sorted(row[x], key=lambda ln: (-ln.y, ln.x0))
                ],
                words,
            )
            for left in xs
        ]
        adjacent = last_bottom is not None and abs(last_bottom - top) < 4
        if current is None or not adjacent or len(xs) != len(columns or ()):
            all_lines = [ln for x in row for ln in row[x]]
            header = all(ln.is_bold() for ln in all_lines)
            current = Table(
                page,
                min(xs),
                max(ln.x1 for ln in all_lines),
                min(top, OPEN - 1),
                [],
                False,
                ruled=True,
            )
            current.header = header and top != OPEN
            current.open_top = top == OPEN
            current.words = words
            tables.append(current)
            columns = xs
        current.rows.append(texts)
        for x in row:
            for ln in row[x]:
                current.sizes[round(ln.size, 1)] += len(ln.text)
        current.open_bottom = bottom == -OPEN
        last_bottom = bottom
    return free, [t for t in tables if t.rows]


def _columns(rules: Rules, y: float) -> tuple[float, ...]:
    """Left edges of the cells in a row: the vertical rules across it, less the
    rightmost one."""
    xs: list[float] = []
    for x in sorted(round(x) for x, lo, hi in rules.vertical if lo - 2 <= y <= hi + 2):
        if xs and x - xs[-1] <= MIN_CELL:
            xs[-1] = x  # a double rule (a table's border beside its cells'):
            # the inner one is the cell's edge
        else:
            xs.append(x)
    return tuple(xs[:-1])


# --- tables without rules -----------------------------------------------------------


def unruled_tables(lines: list[Line], page: int):
    """Runs of at least three rows of lines whose runs of text (parted by gaps
    wider than a word space) fall into the same two or more columns, columns
    being what stays apart when the rows' runs are laid over each other (left,
    centred or right aligned alike), become tables; the other lines are
    returned. Prose, whose lines fill the width, leaves no gap; lists, code
    and two-column pages are told apart by their first column, font and fill."""
    candidates = [ln for ln in lines if ln.box is None]  # code in a box aside
    rows = baseline_rows(candidates)
    words = {w.lower() for ln in lines for w in WORD_RE.findall(ln.text)}
    tables: list[Table] = []
    taken: set[int] = set()
    i = done = 0
    while i < len(rows):
        end, columns = _run(rows, i)
        start = _run_start(rows, i, done, columns)
        if start < i:  # the columns with the rows above
            spans = [c[:2] for row in rows[start:end] for c in _row_chunks(row)]
            columns = _merged(spans, _text_size(rows, i))
        table = _unruled_table(rows[start:end], columns, page, words)
        if table is None:
            # past a long run (columns of text, a list): each row is looked at a
            # bounded number of times, and the work stays linear
            i = end - 1 if end - i > LONG_RUN else i + 1
            continue
        tables.append(table)
        taken.update(id(ln) for row in rows[start:end] for ln in row)
        i = done = end
    return [ln for ln in lines if id(ln) not in taken], tables


def _row_chunks(row: list[Line]) -> list[_Chunk]:
    return [chunk for ln in row for chunk in ln.chunks() if chunk[2]]


def _merged(spans: list[tuple[float, float]], size: float) -> list[tuple[float, float]]:
    """Spans merged where they overlap or leave less than a column gap: what
    stays apart are the columns."""
    out: list[tuple[float, float]] = []
    for x0, x1 in sorted(spans):
        if out and x0 - out[-1][1] < COLUMN_GAP_EMS * size:
            out[-1] = (out[-1][0], max(out[-1][1], x1))
        else:
            out.append((x0, x1))
    return out


def _run(rows: list[list[Line]], i: int) -> tuple[int, list[tuple[float, float]]]:
    """The end of the run of rows from `i` that keeps its columns apart (a row
    that bridges two of them, a larger step down or another font size ends it),
    and the columns."""
    first = _row_chunks(rows[i])
    size = _text_size(rows, i)
    columns = _merged([(x0, x1) for x0, x1, _ in first], size)
    if len(columns) < 2 or _mixed_sizes(rows[i], size):
        # a heading beside a line of text: a page's columns, not a table's
        return i + 1, columns
    bottom = min(ln.y for ln in rows[i])
    code = _code_row(rows[i])
    steps: list[float] = []
    end = i + 1
    while end < len(rows):
        row = rows[end]
        step = bottom - max(ln.y for ln in row)
        usual = statistics.median(steps) + 0.6 * size if steps else 0
        limit = max(usual, 2.2 * size if len(steps) < 2 else 1.9 * size)
        if step > limit or _mixed_sizes(row, size) or _code_row(row) != code:
            break
        spans = [(x0, x1) for x0, x1, _ in _row_chunks(row)]
        merged = _merged(columns + spans, size)
        if len(merged) < len(columns):
            break
        columns = merged
        steps.append(step)
        bottom = min(ln.y for ln in row)
        end += 1
    return end, columns


def _code_row(row: list[Line]) -> bool:
    """A row of code alone (a code block's line, whatever its size), not a row
    of a table's cells; a header row of code cells is set in bold."""
    return all(ln.is_mono() and not ln.is_bold() for ln in row)


def _mixed_sizes(row: list[Line], size: float) -> bool:
    """Whether a line of the row is set in another size than `size`. Cells in a
    code font may be set somewhat smaller than the text, beside cells of text
    or in bold (a header row); a row of code alone is a code block's line."""
    code_cells = any(ln.is_bold() or not ln.is_mono() for ln in row)
    return any(
        not (code_cells and ln.is_mono() and 0.75 * size <= ln.size <= size)
        and abs(ln.size - size) > 0.1 * size
        for ln in row
    )


def _text_size(rows: list[list[Line]], i: int) -> float:
    """The text size of row `i`: of its first line not in a code font, else of
    the next row's (a header row of code-font cells above rows of text)."""
    for row in rows[i : i + 2]:
        for ln in row:
            if not ln.is_mono():
                return ln.size
    return rows[i][0].size


def _run_start(rows: list[list[Line]], i: int, done: int, columns) -> int:
    """The first row of the run that row `i` starts: the line or two above it
    of a header cell that wraps (centred, it begins higher than the others)."""
    size = _text_size(rows, i)
    first = max(done, i - 2, 0)
    while (
        i > first
        and min(ln.y for ln in rows[i - 1]) - max(ln.y for ln in rows[i])
        <= WRAP_EMS * size
        and not _mixed_sizes(rows[i - 1], size)
        and _code_row(rows[i - 1]) == _code_row(rows[i])
        and len(_merged(columns + [c[:2] for c in _row_chunks(rows[i - 1])], size))
        == len(columns)
    ):
        i -= 1
    return i


def _unruled_table(
    rows: list[list[Line]], columns: list[tuple[float, float]], page: int, words
) -> Table | None:
    """The table the rows make, or None when they do not make one."""
    if len(rows) < 3 or len(columns) < 2:
        return None
    if all(ln.is_mono() for row in rows for ln in row):
        return None  # code aligned in columns, not a table
    cells: list[dict[int, list[str]]] = []  # per line row: column -> texts
    for row in rows:
        placed: dict[int, list[str]] = {}
        for x0, x1, text in _row_chunks(row):
            k = next(k for k, (c0, c1) in enumerate(columns) if c0 - 1 <= x0 <= c1)
            placed.setdefault(k, []).append(text)
        cells.append(placed)
    if sum(len(placed) >= 2 for placed in cells) < 3:
        return None
    firsts = [" ".join(placed[0]) for placed in cells if 0 in placed]
    if all(_MARKER_RE.match(text) for text in firsts):
        return None  # a list (markers, items) or contents (section numbers)
    if any(
        _LEADER_RE.search(t) for placed in cells for ts in placed.values() for t in ts
    ):
        return None  # a table of contents: titles and pages joined by dots
    if _prose_columns(rows, columns):
        return None
    groups = _table_rows(rows, cells, len(columns))
    table_rows: list[list[list[str]]] = []
    for group in groups:
        table_rows.append([[] for _ in columns])
        for r in group:
            for k, texts in cells[r].items():
                table_rows[-1][k].extend(texts)
    first_lines = [ln for r in groups[0] for ln in rows[r]]
    table = Table(
        page,
        columns[0][0],
        columns[-1][1],
        max(ln.top for ln in first_lines),
        [[join_texts(texts, words) for texts in row] for row in table_rows],
        all(ln.is_bold() for ln in first_lines),
    )
    table.words = words
    for row in rows:
        for ln in row:
            table.sizes[round(ln.size, 1)] += len(ln.text)
    return table


def _table_rows(
    rows: list[list[Line]], cells: list[dict[int, list[str]]], width: int
) -> list[list[int]]:
    """The rows of lines that make each table row. A cell's text wraps over
    lines one line step apart; rows stand further apart (their cells'
    padding). The wrapped lines of each column make a cell, and cells that
    overlap in height make a row, whether the row's cells are aligned to its
    top or centred in it. Without wrapped cells every row of lines is a row."""
    if all(0 in placed for placed in cells):
        return [[r] for r in range(len(rows))]
    size = statistics.median(ln.size for row in rows for ln in row)
    bottoms = [min(ln.y for ln in row) for row in rows]
    tops = [max(ln.top for ln in row) for row in rows]
    bold = [all(ln.is_bold() for ln in row) for row in rows]  # a header's cells
    blocks: list[list[int]] = []
    for k in range(width):
        block: list[int] = []
        for r in (r for r, placed in enumerate(cells) if k in placed):
            if block and (
                bottoms[block[-1]] - bottoms[r] > WRAP_EMS * size
                or bold[block[-1]] != bold[r]
            ):
                blocks.append(block)
                block = []
            block.append(r)
        if block:
            blocks.append(block)
    blocks.sort(key=lambda block: -tops[block[0]])
    groups: list[set[int]] = []
    low = 0.0
    for block in blocks:
        if groups and tops[block[0]] > low + 0.1 * size:
            groups[-1].update(block)
            low = min(low, bottoms[block[-1]])
        else:
            groups.append(set(block))
            low = bottoms[block[-1]]
    if len(groups) < 2:  # no telling rows apart by height: a row starts in column 1
        starts = [r for r, placed in enumerate(cells) if 0 in placed or r == 0]
        ends = [*starts[1:], len(rows)]
        return [list(range(a, b)) for a, b in zip(starts, ends, strict=True)]
    return [sorted(group) for group in groups]


def _prose_columns(rows: list[list[Line]], columns) -> bool:
    """Whether the columns are a page's columns of running text: wide, and
    their lines fill them (a table's cells vary in length)."""
    size = _text_size(rows, 0)
    for c0, c1 in columns:
        if c1 - c0 < PROSE_COLUMN_EMS * size:
            return False
        widths = [
            x1 - x0
            for row in rows
            for x0, x1, _ in _row_chunks(row)
            if c0 - 1 <= x0 <= c1
        ]
        if not widths or statistics.median(widths) < 0.75 * (c1 - c0):
            return False
    return True
