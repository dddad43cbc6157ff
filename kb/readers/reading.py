"""What every reader returns (`Reading`) and raises (`ReaderError`): apart from
the package's dispatch (kb/readers/__init__.py) so the readers, which the
dispatch imports, need not import it back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kb import decoding
from kb.parsing import Mark, ParseError


class ReaderError(ParseError):
    """The file cannot be read; the message names it and says why.

    A ParseError, so that every place that refuses a bad upload refuses these.
    """


@dataclass
class Reading:
    """A file's Markdown text and what the reader kept and lost.

    `pages` maps (page number, start, end) character ranges of `text` to the page
    they came from (PDF only, else None). `summary` counts headings, tables with
    and without a header row, list items, code blocks, images dropped and, for
    PDF, pages, running headers removed, characters per page and empty pages.
    `anchors` holds (offset, id) for each heading of `text` that had an id in the
    original (HTML only): where a citation of its section could link to
    (`file#id`); nothing stores them yet. `structure` says how CommonMark reads
    the top-level blocks of `text` (kb.parsing.parse takes it instead of
    parsing), or is None when the writer cannot vouch for a block.
    """

    text: str
    pages: list[tuple[int, int, int]] | None = None
    anchors: list[tuple[int, str]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    structure: list[Mark] | None = None

    def pages_of(self, start: int, end: int) -> tuple[int, int] | None:
        """First and last page of the text between `start` and `end`."""
        return pages_of(self.pages or (), start, end)


def pages_of(pages, start: int, end: int) -> tuple[int, int] | None:
    """First and last page of the text between `start` and `end`, by `pages`,
    (page, start, end) ranges of that text (Reading.pages, Source.page_map);
    None when no range holds it."""
    hit = [p for p, s, e in pages if s < max(end, start + 1) and e > start]
    return (min(hit), max(hit)) if hit else None


def decoded_html(name: str, data: bytes) -> str | None:
    """HTML with a byte order mark or NUL bytes decoded as a text upload is (by
    its mark, else UTF-8), or ReaderError saying why it cannot be; None for
    other HTML, whose <meta charset> the HTML parser reads itself."""
    if not data.startswith(decoding.BOMS) and b"\x00" not in data:
        return None
    try:
        text = decoding.decode_text(data, name)
    except ParseError as exc:
        raise ReaderError(str(exc)) from exc
    return text
