"""Tables: the header line of the table each loaded row belongs to, so a window
of rows comes with its column names (the header is in no chunk's range).

Pure: no database here (tests/test_retrieval_stages.py checks it); the sections
stage loads the first rows of tables that windows start inside (sections.py).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from kb.chunking import ChunkKind
from kb.retrieval.rows import ChunkRow, lead_start, next_to

_DELIMITER_RE = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?")
_CELL_SPLIT_RE = re.compile(r"(?<!\\)\|")


class FirstRow(NamedTuple):
    source_id: int
    start: int
    lead: str


def is_delimiter_line(line: str) -> bool:
    """A table's delimiter line (`| --- | :-: |`, `---|---`)."""
    return bool(_DELIMITER_RE.fullmatch(line.strip()))


def header_line(lead: str, lead_at: int) -> tuple[int, int] | None:
    """(start, end) of the header line in the text before a table's first row:
    the line above its delimiter line (`| --- | :-: |`, `---|---`), over the
    group rows between them (chunking.group_rows: in no chunk's range)."""
    lines = lead.rstrip().split("\n")
    while len(lines) > 2 and _is_row_line(lines[-1]):
        lines.pop()
    if len(lines) < 2 or not lines[-2].strip():
        return None
    if not is_delimiter_line(lines[-1]):
        return None
    header = lines[-2]
    offset = lead_at + sum(len(line) + 1 for line in lines[:-2])
    start = offset + len(header) - len(header.lstrip())
    return start, offset + len(header.rstrip())


def is_group_line(line: str) -> bool:
    """A table line whose first cell alone has text ("| Class 23 — … |  |"): as
    chunking.group_rows reads it, the label of the rows below it."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    cells = [cell.strip() for cell in _CELL_SPLIT_RE.split(line)]
    return len(cells) > 1 and bool(cells[0]) and not any(cells[1:])


def _is_row_line(line: str) -> bool:
    return "|" in line and not is_delimiter_line(line)


def continues_table(lead: str) -> bool:
    """Whether the text before a table row chunk is only the line break after
    the row above, or group rows ("| Class 23 — … | |"), which are in no chunk."""
    return all(_is_row_line(line) for line in lead.split("\n") if line.strip())


def mid_table_start(chunks: list[ChunkRow], i: int) -> bool:
    """Loaded chunk i continues a table whose rows before it were not loaded."""
    c = chunks[i]
    if c.kind != ChunkKind.TABLE_ROW or not continues_table(c.lead):
        return False
    return not (
        i and chunks[i - 1].kind == ChunkKind.TABLE_ROW and next_to(chunks, i - 1, i)
    )


def table_headers(
    chunks: list[ChunkRow], first_rows: dict[tuple[int, int], FirstRow]
) -> dict[int, tuple[int, int]]:
    """Chunk position -> header line of its table, for every loaded table row.

    A table's first row holds the header and delimiter lines in its lead; the
    rows after it (and the parts of a split row) have only whitespace there. A
    window of a long section can start mid-table: `first_rows` has the first row
    of that table, by (section id, chunk index) of the window's first row.
    """
    headers: dict[int, tuple[int, int]] = {}
    current: tuple[int, int] | None = None
    for i, c in enumerate(chunks):
        if c.kind != ChunkKind.TABLE_ROW:
            current = None
            continue
        if not continues_table(c.lead):
            current = header_line(c.lead, lead_start(c))
        elif mid_table_start(chunks, i):
            first = first_rows.get((c.section_id, c.chunk_index))
            current = first and header_line(first.lead, lead_start(first))
        if current:
            headers[i] = current
    return headers
