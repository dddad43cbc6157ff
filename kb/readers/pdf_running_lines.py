"""Running headers, footers and page numbers dropped from a PDF's pages, and
the entries of its table of contents and index.

Lines of the top and bottom margins repeated on many pages (digits aside), page
numbers, and rows that carry the page number (their number less the page's
index recurs: "Chapter 2: Naming 3") are dropped, walking in from the page's
edge only: body text repeated at the same place on two pages stays.
"""

from __future__ import annotations

import re
from collections import Counter

from kb.readers.pdf_lines import Line, baseline_rows
from kb.readers.writer import clean

MARGIN_SHARE = 0.1  # top and bottom share of a page searched for running lines
_PAGE_NUMBER_RE = re.compile(
    r"^(page\s+)?(\d{1,5}|[ivxlcdm]{1,7})(\s*(/|of)\s*\d{1,5})?$", re.I
)
_FOLIO_RE = re.compile(r"^(\d{1,4})\s+\S.*|.*\S\s+(\d{1,4})$")


def _margin_key(line: Line, height: float) -> str | None:
    """Running lines repeat with the same words (digits aside), size and place."""
    text = re.sub(r"\d+", "#", clean(line.text).lower())
    return f"{round(line.size * 2)} {round(line.y / 5)} {text}"


def _margin_rows(lines: list[Line]) -> dict[int, str]:
    """The text of each row of a page's margin lines, left to right."""
    rows: dict[int, list[Line]] = {}
    for ln in lines:
        rows.setdefault(round(ln.y), []).append(ln)
    return {
        y: " ".join(ln.text for ln in sorted(row, key=lambda ln: ln.x0))
        for y, row in rows.items()
    }


def _folio_offset(text: str, index: int) -> int | None:
    """A row's leading or trailing number less the page's index, if any."""
    found = _FOLIO_RE.fullmatch(text.strip())
    return found and int(found.group(1) or found.group(2)) - index


def drop_running_lines(pages) -> int:
    """Drop lines of the top and bottom margins repeated on many pages, and page
    numbers there; return how many lines were dropped."""
    tops = [max((ln.top for ln in lines), default=0) for lines, _ in pages]
    bottoms = [min((ln.y for ln in lines), default=0) for lines, _ in pages]
    height = max(tops, default=0) - min(bottoms, default=0) or 1

    def in_margin(line: Line, i: int) -> bool:
        return (
            line.top >= tops[i] - MARGIN_SHARE * height
            or line.y <= bottoms[i] + MARGIN_SHARE * height
        )

    seen: Counter[str] = Counter()
    for i, (lines, _) in enumerate(pages):
        seen.update({_margin_key(ln, height) for ln in lines if in_margin(ln, i)})
    threshold = max(2, len(pages) // 2) if len(pages) > 1 else 10**9
    # Running heads that change by chapter ("Chapter 2: Naming 3") repeat on few
    # pages, but carry the page number: its offset to the page's index recurs.
    sizes: Counter[float] = Counter()
    for lines, _ in pages:
        for ln in lines:
            sizes[round(ln.size, 1)] += len(ln.text)
    body = sizes.most_common(1)[0][0] if sizes else 0.0
    # no bigger than the body text: a chapter's heading ("2 Naming") is no folio
    rows = [
        _margin_rows(
            [ln for ln in lines if in_margin(ln, i) and ln.size <= body * 1.05]
        )
        for i, (lines, _) in enumerate(pages)
    ]
    offsets = Counter(
        off
        for i, page_rows in enumerate(rows)
        for off in {_folio_offset(text, i) for text in page_rows.values()}
        if off is not None
    )
    folios = {off for off, n in offsets.items() if n >= 3}
    removed = 0
    for i, (lines, _) in enumerate(pages):

        def running(ln: Line, i: int = i) -> bool:
            return in_margin(ln, i) and bool(
                seen[_margin_key(ln, height)] >= threshold
                or _PAGE_NUMBER_RE.match(ln.text)
                or _folio_offset(rows[i].get(round(ln.y), ""), i) in folios
            )

        # Only the rows between the page's edge and its body: walking in from
        # the top and from the bottom, a row that is not all running (the page
        # number beside a line of text aside) ends the walk, so body text
        # repeated at the same place on two pages stays.
        drop: set[int] = set()
        by_baseline = baseline_rows(lines)
        for walk in (by_baseline, by_baseline[::-1]):
            for row in walk:
                found = [ln for ln in row if running(ln)]
                drop.update(id(ln) for ln in found)
                if len(found) < len(row):
                    break
        removed += len(drop)
        lines[:] = [ln for ln in lines if id(ln) not in drop]
    return removed


# An entry of a table of contents or an index: a leader of dots, spaced as TeX
# and word processors set them or dense, then (or on its own beside) the page
# number: "3.4.2 Special Parameters . . . . . . 23", "read . . . . . 70", a
# long title's short leader ("License . . 174"), an index entry's pages.
_FOLIO = r"(?:\d{1,5}|[ivxlcdm]{1,7})"
_PAGES = rf"{_FOLIO}(?:,\s*{_FOLIO})*"  # an index entry's "8, 86"
_LEADER_RE = re.compile(
    rf"(?:(?:\. ){{4,}}\.?\s*(?:{_PAGES})?|(?:\. ){{2,}}\.?\s*{_PAGES}"
    rf"|\.{{5,}}\s*{_PAGES})$",
    re.IGNORECASE,
)


# An index entry without a leader, as LaTeX sets them: "latex.index.tool, 39 ,
# 70 , 71", "preface.tocdepth, 18 , 68 -71"
_INDEX_ENTRY_RE = re.compile(
    r"[^\W\d_].{0,80}?,\s+\d{1,4}(?:\s*(?:,\s+|-|–)\s*\d{1,4})*\s*$"
)  # a word, then pages after ", " (not "2,50", "12,345": prices and numbers)
INDEX_PAGE_ENTRIES = 8  # index entries a page holds at least to be an index's
INDEX_PAGE_SHARE = 0.6  # ... and this share of its lines and table cells


def drop_contents_lines(pages) -> int:
    """Drop the lines of a table of contents or an index (a dot leader and a page
    number, which may be a line of its own on the same baseline; or, on a page
    made mostly of them, an entry ending in its pages, in lines or in the cells
    of the table its columns make): they say where the text is, and read as
    headings and sentences otherwise. Returns how many lines (and table cells)
    were dropped."""
    removed = 0
    for lines, tables in pages:
        removed += _drop_index_entries(lines, tables)
        led = {id(ln) for ln in lines if _LEADER_RE.search(ln.text)}
        removed += _drop_leaderless_entries(lines, len(led))
        rows = {round(ln.y) for ln in lines if id(ln) in led}
        if not rows:
            continue
        kept = [
            ln
            for ln in lines
            if round(ln.y) not in rows
            or not (id(ln) in led or _PAGE_NUMBER_RE.match(ln.text))
        ]
        removed += len(lines) - len(kept)
        lines[:] = kept
    return removed


CONTENTS_PAGE_ENTRIES = 6  # entries without leaders a page holds to be contents
CONTENTS_PAGE_SHARE = 0.5  # ... and this share of its lines, numbers included


def _drop_leaderless_entries(lines, led: int) -> int:
    """On a page that is mostly a table of contents, drop its entries without
    leaders (each title, then its page number alone on the same baseline, to
    its right: the chapters of Debian Edu's manual, among their sections'
    entries with leaders, `led` of the page's lines): each title read as a
    heading, each page number as another. Returns how many lines."""
    numbers: dict[int, list] = {}
    for ln in lines:
        if _PAGE_NUMBER_RE.match(ln.text):
            numbers.setdefault(round(ln.y), []).append(ln)
    entries = [
        ln
        for ln in lines
        if not _PAGE_NUMBER_RE.match(ln.text)
        and any(n.x0 > ln.x1 for n in numbers.get(round(ln.y), ()))
    ]
    # a chapter's entry, bold without a leader, among its sections' with one
    if (
        len(entries) < 2
        or len(entries) + led < CONTENTS_PAGE_ENTRIES
        or 2 * len(entries) + led < CONTENTS_PAGE_SHARE * len(lines)
    ):
        return 0
    rows = {round(ln.y) for ln in entries}
    drop = {id(ln) for ln in entries} | {
        id(n) for y in rows for n in numbers.get(y, ())
    }
    lines[:] = [ln for ln in lines if id(ln) not in drop]
    return len(drop)


def _drop_index_entries(lines, tables) -> int:
    """On a page that is mostly an index's entries without leaders, drop them:
    the lines, and the tables whose cells they fill."""
    cells = [cell for table in tables for row in table.rows for cell in row if cell]
    texts = [ln.text for ln in lines] + cells
    entries = sum(bool(_INDEX_ENTRY_RE.match(text)) for text in texts)
    if entries < INDEX_PAGE_ENTRIES or entries < INDEX_PAGE_SHARE * len(texts):
        return 0
    kept = [ln for ln in lines if not _INDEX_ENTRY_RE.match(ln.text)]
    dropped = len(lines) - len(kept)
    lines[:] = kept
    for table in list(tables):
        filled = [cell for row in table.rows for cell in row if cell]
        if sum(bool(_INDEX_ENTRY_RE.match(c)) for c in filled) >= 0.8 * len(filled):
            tables.remove(table)
            dropped += len(filled)
    return dropped
