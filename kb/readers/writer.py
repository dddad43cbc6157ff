"""The canonical Markdown every reader writes, block by block, with a page map.

Readers call `Writer` methods in reading order; `Writer.render()` joins the
blocks into the text the source stores and, for paged formats, the character
range of that text each page produced; `Writer.anchors()` says where each
heading that had an anchor in the original (an HTML id) starts in that text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kb import languages
from kb.parsing import Mark, Span

# Text that Markdown would read as structure at the start of a block: a heading,
# quote, bullet, fence, table row or thematic break (escaped by a backslash), or
# an ordered list item (its "." or ")" escaped).
# A ":" and a space open a definition (kb.parsing reads "Term" over ": text"
# as one). Two hyphens alone make a thematic break of a "- " item's line.
_BLOCK_START_RE = re.compile(
    r"^(#{1,6}(\s|$)|>|[-+*](\s|$)|```|~~~|\||:\s|([-*_])([ \t]*\4){2,}[ \t]*$"
    r"|--[ \t]*$)"
)
_ORDERED_START_RE = re.compile(r"^(\d{1,9})([.)](\s|$))")
_CLOSING_HASHES_RE = re.compile(r"(^|\s)(#+)$")
# Inline markup in text, as CommonMark (markdown-it, raw HTML off) reads it. The
# text is one node of a document, so its ends may touch anything: a character is
# escaped unless its neighbours inside the text prove it inert.
_INLINE_RE = re.compile(
    r"[`\[]"  # code spans, links, images, reference definitions
    r"|\\(?=[!-/:-@\[-`{-~]|$)"  # a backslash that would escape what follows
    r"|(?<!\s)\*|\*(?!\s)"  # emphasis, unless spaces on both sides
    r"|(?<![^\W_])_|_(?![^\W_])"  # emphasis, unless inside a word
    r"|<(?!\s)"  # autolinks
    r"|&(?=#?\w+;|$)"  # entities
)
# The characters _INLINE_RE starts at: one class is read ten times faster than
# its alternatives at each position, and most text nodes hold none of them.
_INLINE_CHARS_RE = re.compile(r"[`\[\\*_<&]")
_FENCE_RE = re.compile(r"^(`{3,}|~{3,})", re.M)
SURROGATE_RE = re.compile("[\ud800-\udfff]")
LIST_INDENT = "    "  # enough for any marker up to "99. " to nest under


def clean(text: str) -> str:
    """One line of text: whitespace runs (newlines and no-break spaces
    included: what str.isspace() calls a space) as single spaces."""
    return " ".join(text.split())


def escape(text: str) -> str:
    """Text of the document, its Markdown markup escaped so that it renders as
    written (readers escape text nodes, then add their own markup)."""
    if _INLINE_CHARS_RE.search(text) is None:  # most text nodes
        return text
    return _INLINE_RE.sub(r"\\\g<0>", text)


def _escape_start(text: str) -> str:
    if _BLOCK_START_RE.match(text):
        return "\\" + text
    return _ORDERED_START_RE.sub(r"\1\\\2", text, count=1)


def _cell(text: str) -> str:
    return clean(text).replace("|", "\\|")


MAX_HEADING_LEVEL = 6  # Markdown's deepest heading


@dataclass
class Repeats:
    """The text of a merged table cell for each further cell it spans, while the
    repeats stay within twice the table's own text (plus a little): an empty
    cell after that, so that output stays linear in the input."""

    left: int = 10_000

    def read(self, text: str) -> str:
        """A cell's own text, which earns its repeats."""
        self.left += 2 * len(text)
        return text

    def again(self, text: str) -> str:
        if len(text) > self.left:
            return ""
        self.left -= len(text)
        return text


@dataclass
class _Block:
    text: str
    page: int | None
    tight: bool = False  # joined to the previous block by one newline (list items)
    anchor: str = ""  # a heading's id in the original, if it had one
    # where a later page begins inside it: (offset in `text`, page)
    turns: tuple[tuple[int, int], ...] = ()
    kind: str = "paragraph"  # heading, item, table, code or blockquote
    level: int = 0  # a heading's level, an item's depth, a code fence's length
    number: int | None = None  # an ordered item's


# What CommonMark could read otherwise than the writer meant (`Writer.structure`
# leaves such a text to the parser): a raw HTML block or a link reference
# definition opening a paragraph, a heading's closing sequence, a line in code
# closing its fence early. (Inside a list item or a quote they change nothing
# the parser reports: the container's extent stays.)
_OTHER_START_RE = re.compile(r"<|\[(?:\\.|[^\]\\])*\]:")
_CLOSING_SEQUENCE_RE = re.compile(r"[ \t]#+[ \t]*$")  # after the opening "#"s
_INDENTED_FENCE_RE = re.compile(r"^ {1,3}(`{3,})[ \t]*$", re.M)
MAX_ITEM_NUMBER = 99  # LIST_INDENT nests items under wider numbers no more


# What a document's footnotes section is named in its language.
FOOTNOTES = {
    "en": "Footnotes",
    "fr": "Notes",
    "es": "Notas",
    "pt": "Notas",
    "it": "Note",
    "de": "Fußnoten",
    "nl": "Voetnoten",
    "ru": "Примечания",
    "uk": "Примітки",
    "pl": "Przypisy",
}
FOOTNOTE_SAMPLE_BLOCKS = 200  # blocks read to tell the language


@dataclass
class Writer:
    """Collects Markdown blocks and the structure counts of the summary."""

    page: int | None = None
    blocks: list[_Block] = field(default_factory=list)
    counts: dict[str, int] = field(
        default_factory=lambda: {
            "headings": 0,
            "paragraphs": 0,
            "list_items": 0,
            "tables_with_header": 0,
            "tables_without_header": 0,
            "code_blocks": 0,
            "block_quotes": 0,
            "links": 0,
            "images_dropped": 0,
        }
    )
    level: int = 0  # of the last heading written (0: none yet)
    heading_text: str = ""  # and its text
    _in_list: bool = False
    _reopen: tuple[int, str] | None = None

    def footnotes_heading(self) -> None:
        """The heading of the notes a page or document ends with, in the
        language of what was written so far: "Footnotes" over Debian's Spanish
        and Russian manuals was an English section in each."""
        sample = "\n\n".join(b.text for b in self.blocks[:FOOTNOTE_SAMPLE_BLOCKS])
        language = languages.detect(sample)
        self.heading(2, FOOTNOTES.get(language, FOOTNOTES["en"]))

    def _add(self, text: str, tight: bool = False, anchor: str = "", **shape) -> None:
        if self._reopen and text.strip():
            level, heading, self._reopen = *self._reopen, None
            self.heading(level, heading)
        if text.strip():
            block = _Block(text, self.page, tight and self._in_list, anchor, **shape)
            self.blocks.append(block)
            self._in_list = tight

    def heading(self, level: int, text: str, anchor: str = "") -> None:
        # a permalink's pilcrow (Sphinx pages converted to DOCX keep it as text)
        text = clean(text).removesuffix("¶").rstrip()
        self._reopen = None
        if text:
            self.counts["headings"] += 1
            self.level = max(1, min(level, MAX_HEADING_LEVEL))
            self.heading_text = text
            text = _CLOSING_HASHES_RE.sub(r"\1\\\2", text)  # not a closing sequence
            self._add(
                "#" * self.level + " " + text,
                anchor=anchor,
                kind="heading",
                level=self.level,
            )

    def continue_heading(self, text: str) -> None:
        """The last block, a heading, goes on with `text` (a heading wrapped
        over two lines), and so does the heading a reopen writes again."""
        self.blocks[-1].text += " " + text
        self.heading_text += " " + text

    def enclosing(self) -> tuple[int, str]:
        """(level, text) of the heading the next text would belong to."""
        return self._reopen or (self.level, self.heading_text)

    def reopen(self, level: int, text: str) -> None:
        """Write this heading again before any further text: what follows a list
        of terms, each written as a heading, belongs to the heading above them."""
        self._reopen = (level, text) if text else None

    def paragraph(self, text: str, turns: list[tuple[str, int]] | None = None) -> None:
        """`turns`: (the text of its first line, page) for each line after which
        a later page begins (a PDF paragraph going on over a page break), so
        that each part of it maps to its own page."""
        text = clean(text)
        if text:
            self.counts["paragraphs"] += 1
            text = _escape_start(text)
            self._add(text, turns=_page_turns(text, turns or []))

    def item(
        self,
        depth: int,
        text: str,
        number: int | None = None,
        turns: list[tuple[str, int]] | None = None,
    ) -> None:
        """A list item at `depth` (0 = top); `number` for ordered lists;
        `turns` as for a paragraph."""
        text = _escape_start(clean(text)) or "\u200b"  # an empty item holds its place
        marker = f"{number}." if number is not None else "-"
        self.counts["list_items"] += 1
        line = LIST_INDENT * max(depth, 0) + f"{marker} {text}"
        self._add(
            line,
            tight=True,
            kind="item",
            level=max(depth, 0),
            number=number,
            turns=_page_turns(line, turns or []),
        )

    def definition(self, term: str, definitions: list[str]) -> None:
        """A term over its definitions, as pandoc and PHP Markdown Extra write
        them ("Term\n: definition"): kb.parsing reads each as one list item."""
        term = _escape_start(clean(term))
        lines = [clean(text) for text in definitions if clean(text)]
        if not term or not lines:
            for text in [term, *lines]:
                self.paragraph(text)
            return
        self.counts["list_items"] += 1
        self._add(term + "".join(f"\n: {line}" for line in lines))

    def end_list(self) -> None:
        self._in_list = False

    def table(self, rows: list[list[str]], header: bool) -> None:
        """A pipe table; without a header row, one named by column position."""
        rows = [[_cell(c) for c in row] for row in rows if any(clean(c) for c in row)]
        if not rows:
            return
        width = max(len(row) for row in rows)
        rows = [row + [""] * (width - len(row)) for row in rows]
        if header:
            head, body = rows[0], rows[1:]
            self.counts["tables_with_header"] += 1
        else:
            head, body = [f"Column {i + 1}" for i in range(width)], rows
            self.counts["tables_without_header"] += 1
        lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * width]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        self._add("\n".join(lines), kind="table")

    def code(self, text: str, language: str = "") -> None:
        text = text.strip("\n")
        if not text.strip():
            return
        longest = max((len(m.group(1)) for m in _FENCE_RE.finditer(text)), default=2)
        fence = "`" * max(3, longest + 1)
        self.counts["code_blocks"] += 1
        self._add(
            f"{fence}{clean(language)}\n{text}\n{fence}", kind="code", level=len(fence)
        )

    def quote(self, paragraphs: list[str]) -> None:
        paragraphs = [_escape_start(clean(p)) for p in paragraphs if clean(p)]
        if paragraphs:
            self.counts["block_quotes"] += 1
            self._add("\n>\n".join("> " + p for p in paragraphs), kind="blockquote")

    def render(self) -> tuple[str, list[tuple[int, int, int]] | None]:
        """The Markdown text, and (page, start, end) ranges when pages were set."""
        parts: list[str] = []
        ranges: list[tuple[int, int, int]] = []
        for block, start, end in self._placed():
            if parts:
                parts.append("\n" if block.tight else "\n\n")
            parts.append(block.text)
            if block.page is None:
                continue
            bounds = [start + at for at, _ in block.turns] + [end]
            pages = [block.page] + [page for _, page in block.turns]
            for page, lo, hi in zip(pages, [start, *bounds[:-1]], bounds, strict=True):
                if ranges and ranges[-1][0] == page:
                    ranges[-1] = (page, ranges[-1][1], hi)
                else:
                    ranges.append((page, lo, hi))
        text = "".join(parts) + "\n" if parts else ""
        # valid Unicode whatever a library handed out: a lone UTF-16 surrogate
        # (which no encoder or tokenizer takes) as U+FFFD, one for one, so that
        # the page ranges hold (issue #26)
        text = SURROGATE_RE.sub("\ufffd", text)
        paged = any(b.page is not None for b in self.blocks)
        return text, (ranges if paged else None)

    def structure(self, text: str) -> list[Mark] | None:
        """The top-level blocks of `text` (what `render()` returned) as
        CommonMark reads them, so that it need not be parsed again; None when
        a block might read otherwise than meant (_OTHER_START_RE...; a fence's
        language with a "|" over a "---" line reads as a table)."""
        if "\r" in text or "\x00" in text:  # markdown-it rewrites them
            return None
        marks: list[Mark] = []
        items: list[list[int]] = []  # the open list's top-level items
        ordered = False
        for block, start, end in self._placed():
            if block.kind == "item":
                if not 0 <= (block.number or 0) <= MAX_ITEM_NUMBER:
                    return None
                if block.level:
                    if not items:
                        return None  # indented after another block: code
                    items[-1][1] = end
                    continue
                if items and (block.number is not None) != ordered:
                    marks.append(_list_mark(items))  # another kind of marker
                    items = []
                items.append([start, end])
                ordered = block.number is not None
                continue
            if items:
                marks.append(_list_mark(items))
                items = []
            mark = _mark(block, start, end)
            if mark is None:
                return None
            marks.append(mark)
        if items:
            marks.append(_list_mark(items))
        return marks

    def anchors(self) -> list[tuple[int, str]]:
        """(offset in the rendered text, anchor) of each heading with an anchor."""
        return [(start, b.anchor) for b, start, _ in self._placed() if b.anchor]

    def _placed(self) -> Iterator[tuple[_Block, int, int]]:
        """Each block with its start and end in the rendered text."""
        offset = 0
        for i, block in enumerate(self.blocks):
            if i:
                offset += 1 if block.tight else 2
            yield block, offset, offset + len(block.text)
            offset += len(block.text)

    def summary(self, **extra: Any) -> dict[str, Any]:
        return {**self.counts, **extra}


def _list_mark(items: list[list[int]]) -> Mark:
    spans = tuple(Span(start, end) for start, end in items)
    return Mark("list", items[0][0], items[-1][1], items=spans)


def _mark(block: _Block, start: int, end: int) -> Mark | None:
    """A block other than a list item as CommonMark reads it, or None when it
    might read otherwise."""
    text = block.text
    if block.kind == "heading":
        if _CLOSING_SEQUENCE_RE.search(text, block.level):
            return None
        return Mark("heading", start, end, level=block.level)
    if block.kind == "code":
        fence = block.level
        language = text[fence : text.index("\n")]
        if (
            "`" in language
            or "|" in language
            or any(
                len(found.group(1)) >= fence
                for found in _INDENTED_FENCE_RE.finditer(text)
            )
        ):
            return None
        return Mark("code", start, end)
    if block.kind in ("blockquote", "table"):
        return Mark(block.kind, start, end)
    return None if _OTHER_START_RE.match(text) else Mark("paragraph", start, end)


TURN_NEEDLE = 24  # characters of a line's start looked for in its paragraph


def _page_turns(text: str, turns: list[tuple[str, int]]) -> tuple[tuple[int, int], ...]:
    """Where each line that begins a later page starts in `text` (the
    paragraph as written), found by its first characters in order; a line not
    found (its start written otherwise) leaves its page to the line before."""
    found: list[tuple[int, int]] = []
    cursor = 0
    for line, page in turns:
        needle = clean(line)[:TURN_NEEDLE]
        at = text.find(needle, cursor) if needle else -1
        if at > cursor:
            found.append((at, page))
            cursor = at
    return tuple(found)
