"""Raw documents -> sections and blocks with exact character offsets (issue #4).

No ORM here: text in, dataclasses out. Every `start`/`end` is an offset into
the text that was parsed, so `text[start:end]` is exactly the evidence.
Malformed input is either parsed sensibly or refused with `ParseError`;
nothing else escapes `parse()`. An upload's bytes become text in kb.decoding;
the plain text of a heading (links, escapes) is kb.markup_text's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePath

from django.utils.translation import gettext
from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.token import Token

from kb.markup_text import heading_text, html_text

MARKDOWN_EXTENSIONS = (".md", ".markdown")
TEXT_EXTENSIONS = (".txt",)
# Read into Markdown by kb.readers (issue #16); their stored text is Markdown.
CONVERTED_EXTENSIONS = (".html", ".htm", ".docx", ".pdf")
# markdown-it skips the rest of the document once its maxNesting is reached
# inside a list (its default, 20, at ~10 levels). Containers (lists, quotes)
# stop opening at this token level instead: deeper lines are read as text of
# the deepest item, later headings are kept, and recursion stays bounded.
MAX_NESTING = 128
# Room above MAX_NESTING for the blocks inside the deepest container (a table
# takes four levels), so markdown-it's own limit is never reached.
_NESTING_ROOM = 16

LINE_BREAK_RE = re.compile(r"\r\n?|\n")
_FRONT_MATTER_RE = re.compile(
    r"\A---[ \t]*\n(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S
)
_FRONT_MATTER_TITLE_RE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.M)
_BLANK_LINES_RE = re.compile(r"\n[ \t]*\n")
_TOP_LEVEL_KINDS = {
    "paragraph_open": "paragraph",
    "bullet_list_open": "list",
    "ordered_list_open": "list",
    "blockquote_open": "blockquote",
    "table_open": "table",
    "fence": "code",
    "code_block": "code",
    "html_block": "html",
    "hr": "rule",
    "heading_open": "heading",
}


class ParseError(Exception):
    """The input cannot be turned into a document; the message says why."""


@dataclass
class Span:
    start: int
    end: int


@dataclass
class TableCell:
    text: str
    start: int
    end: int


@dataclass
class TableRow:
    """One table line; `start`/`end` cover the whole row, pipes included."""

    start: int
    end: int
    cells: list[TableCell] = field(default_factory=list)


@dataclass
class Block:
    """A top-level block of a section.

    kind is one of paragraph, list, blockquote, table, code, html, rule,
    heading or text (content markdown-it did not claim, kept for coverage).
    """

    kind: str
    start: int
    end: int
    # Lists: the top-level items (nested lists stay inside their item).
    items: list[Span] = field(default_factory=list)
    # Tables: the header row and the body rows.
    header: TableRow | None = None
    rows: list[TableRow] = field(default_factory=list)
    # Code: the fence language and the span of the lines between the fences
    # (an unterminated fence runs to the end of the document).
    language: str = ""
    inner: Span | None = None
    # Headings: the level (1-6) and the raw heading text.
    level: int = 0
    text: str = ""


@dataclass(frozen=True)
class Mark:
    """A top-level block of a Markdown text as the code that wrote it knows it
    (kb.readers.writer): what CommonMark reads there, so that a reader's text
    need not be parsed again (`parse(structure=...)`). A list names the span
    of each of its top-level items."""

    kind: str  # heading, paragraph, list, table, code or blockquote
    start: int
    end: int
    level: int = 0  # a heading's
    items: tuple[Span, ...] = ()


@dataclass
class SectionData:
    """A heading and its own text, up to the next heading of any level.

    `start` is the heading line; `body_start` is just after it. The section
    before the first heading has level 0 and the document title as heading.
    """

    index: int
    parent: int | None
    heading: str
    heading_path: str
    level: int
    start: int
    end: int
    body_start: int
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    title: str
    sections: list[SectionData] = field(default_factory=list)


def parse(
    text: str,
    filename: str,
    title: str | None = None,
    structure: list[Mark] | None = None,
) -> Document:
    """Parse by file extension: Markdown (.md, .markdown) or plain text (.txt).

    `structure`, a reader's account of the Markdown it wrote (Reading.structure),
    stands for parsing it: the same document, without markdown-it's pass.
    """
    if not text.strip():
        raise ParseError(gettext("%(file)s is empty") % {"file": filename})
    suffix = PurePath(filename).suffix.lower()
    if suffix in MARKDOWN_EXTENSIONS + CONVERTED_EXTENSIONS:
        fallback = title_from_filename(filename)
        if structure is not None and not _FRONT_MATTER_RE.match(text):
            return structured_markdown(text, structure, title, fallback)
        return parse_markdown(text, title, fallback_title=fallback)
    if suffix in TEXT_EXTENSIONS:
        return parse_text(text, title or title_from_filename(filename))
    raise ParseError(
        gettext(
            "%(file)s: unsupported file type %(suffix)s; use .md, .markdown, .txt, "
            ".html, .htm, .docx or .pdf"
        )
        % {"file": filename, "suffix": suffix or gettext("(none)")}
    )


def title_from_filename(filename: str) -> str:
    stem = PurePath(filename).stem
    words = re.sub(r"[-_]+", " ", stem).strip()
    return (words[:1].upper() + words[1:]) if words else "Untitled"


def markdown_title(text: str, structure: list[Mark] | None = None) -> str:
    """The front matter title, else the first heading if it is a level-1 one."""
    front, masked, _ = _mask_front_matter(text)
    if front:
        return front
    if structure is not None:
        return _structure_h1(text, structure)
    try:
        return _first_h1(parse_tokens(masked))
    except ParseError:
        return ""


def _mask_front_matter(text: str) -> tuple[str, str, int]:
    """(front matter title or "", text with the front matter blanked, its end).

    Blanking (newlines kept) keeps every offset valid.
    """
    match = _FRONT_MATTER_RE.match(text)
    if not match:
        return "", text, 0
    found = _FRONT_MATTER_TITLE_RE.search(match.group(1))
    title = _yaml_scalar(found.group(1)) if found else ""
    masked = re.sub(r"[^\n]", " ", LINE_BREAK_RE.sub("\n", text[: match.end()]))
    return title, masked + text[match.end() :], match.end()


def _yaml_scalar(value: str) -> str:
    """A one-line YAML scalar's text: 'l''élément' is "l'élément" (a quote
    doubled inside single quotes), "say \\"hi\\"" is 'say "hi"'."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'").strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\([\\\"/])", r"\1", value[1:-1]).strip()
    return value.strip("\"'").strip()


_HTML_H1_RE = re.compile(r"<h1\b[^<>]*>", re.I)
HTML_TITLE_SCAN = 4000  # characters of an HTML block read for its <h1>


def _html_h1(html: str) -> str:
    """The text of the first <h1> of an HTML block not inside a comment."""
    found = _HTML_H1_RE.search(html)
    if found is None or html.rfind("<!--", 0, found.start()) > html.rfind(
        "-->", 0, found.start()
    ):
        return ""
    close = html.lower().find("</h1", found.end())
    if close == -1:
        return ""
    return " ".join(html_text(html[found.end() : close]).split())


def _first_h1(tokens: list[Token]) -> str:
    """The document's first heading when it is a level-1 one; a README's HTML
    `<h1 align="center">Name</h1>` above any Markdown heading counts too."""
    for index, token in enumerate(tokens):
        if token.type == "html_block" and token.level == 0:
            if text := _html_h1(token.content[:HTML_TITLE_SCAN]):
                return text
            continue
        if token.type == "heading_open" and token.level == 0:
            return heading_text(tokens[index + 1].content) if token.tag == "h1" else ""
    return ""


def parse_text(text: str, title: str) -> Document:
    """Plain text: one section whose blocks are the blank-line paragraphs."""
    if not text.strip():
        raise ParseError(gettext("%(file)s is empty") % {"file": title})
    blocks = []
    position = 0
    for match in [*_BLANK_LINES_RE.finditer(text), None]:
        stop = match.start() if match else len(text)
        span = _strip_span(text, position, stop)
        if span:
            blocks.append(Block("paragraph", span.start, span.end))
        position = match.end() if match else len(text)
    section = SectionData(
        0, None, title, title, 0, blocks[0].start, blocks[-1].end, 0, blocks
    )
    return Document(title, [section])


def parse_markdown(
    text: str, title: str | None = None, fallback_title: str = "Untitled"
) -> Document:
    """CommonMark + tables -> a section tree whose offsets index `text`.

    Headings nested in lists or block quotes do not open sections. YAML front
    matter is metadata, not evidence: it belongs to no section. Without `title`,
    the front matter's title, else a first level-1 heading, else `fallback_title`.
    """
    if not text.strip():
        raise ParseError(
            gettext("%(file)s is empty") % {"file": title or fallback_title}
        )
    front, masked, body_start = _mask_front_matter(text)
    tokens = parse_tokens(masked)
    title = title or front or _first_h1(tokens) or fallback_title
    blocks = _definition_lists(_top_level_blocks(tokens, text, _LineIndex(text)), text)
    sections = _build_sections(blocks, text, title, body_start)
    if not sections:
        raise ParseError(
            gettext("%(file)s has no content besides its front matter")
            % {"file": title}
        )
    return Document(title, sections)


def structured_markdown(
    text: str, structure: list[Mark], title: str | None, fallback_title: str
) -> Document:
    """`parse_markdown(text)` for a text whose top-level blocks are known
    (`structure`, in document order): each block as markdown-it reads it."""
    blocks = []
    for mark in structure:
        block = Block(mark.kind, mark.start, mark.end)
        if mark.kind == "heading":
            block.level = mark.level
            block.text = _heading_content(text, mark)
        elif mark.kind == "list":
            block.items = list(mark.items)
        elif mark.kind == "table":
            _fill_written_table(block, text)
        elif mark.kind == "code":
            _fill_written_code(block, text)
        blocks.append(block)
    title = title or _structure_h1(text, structure) or fallback_title
    return Document(
        title, _build_sections(_definition_lists(blocks, text), text, title, 0)
    )


def _heading_content(text: str, mark: Mark) -> str:
    """An ATX heading's text (its writer leaves no closing sequence)."""
    return heading_text(text[mark.start + mark.level : mark.end].strip())


def _structure_h1(text: str, structure: list[Mark]) -> str:
    first = next((m for m in structure if m.kind == "heading"), None)
    return _heading_content(text, first) if first and first.level == 1 else ""


def _fill_written_table(block: Block, text: str) -> None:
    """A pipe table of one line per row: the header, its delimiter, the body."""
    for number, (start, end) in enumerate(_line_spans(text, block.start, block.end)):
        if number == 1:  # the delimiter row
            continue
        row = _table_row(text, Span(start, end))
        if number == 0:
            block.header = row
        else:
            block.rows.append(row)


def _fill_written_code(block: Block, text: str) -> None:
    """A closed fenced block: its language and the lines between its fences."""
    first_end = text.index("\n", block.start, block.end)
    opening = text[block.start : first_end]
    info = opening[len(opening) - len(opening.lstrip(opening[0])) :].strip()
    block.language = info.split(" ")[0] if info else ""
    closing = text.rindex("\n", block.start, block.end)
    block.inner = _strip_newlines(text, first_end + 1, closing + 1)


def parse_tokens(text: str) -> list[Token]:
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING + _NESTING_ROOM})
    md.enable("table")
    for rule in md.block.ruler.__rules__:
        if rule.name in ("list", "blockquote"):
            md.block.ruler.at(rule.name, _shallow(rule.fn), {"alt": rule.alt})
    # We only need block structure and raw inline content: skipping inline
    # parsing avoids its worst cases (e.g. thousands of unmatched `*`).
    md.disable(["inline", "text_join"])
    try:
        return md.parse(text)
    except RecursionError as exc:
        raise ParseError(gettext("the document is nested too deeply to parse")) from exc


def _shallow(rule: Callable[..., bool]) -> Callable[..., bool]:
    """A container rule that opens nothing at MAX_NESTING or deeper."""

    def shallow_rule(state: StateBlock, start: int, end: int, silent: bool) -> bool:
        return state.level < MAX_NESTING and rule(state, start, end, silent)

    return shallow_rule


class _LineIndex:
    """Line number -> character offset, with markdown-it's idea of a line."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in LINE_BREAK_RE.finditer(text)]
        self.length = len(text)

    def offset(self, line: int) -> int:
        return self.starts[line] if line < len(self.starts) else self.length

    def span(self, token_map: list[int]) -> Span:
        return Span(self.offset(token_map[0]), self.offset(token_map[1]))


def _strip_span(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Span(start, end) if start < end else None


def _top_level_blocks(tokens: list[Token], text: str, lines: _LineIndex) -> list[Block]:
    blocks = []
    for index, token in enumerate(tokens):
        kind = _TOP_LEVEL_KINDS.get(token.type)
        if kind is None or token.level != 0 or not token.map:
            continue
        raw = lines.span(token.map)
        span = _strip_span(text, raw.start, raw.end)
        if span is None:
            continue
        block = Block(kind, span.start, span.end)
        if kind == "list":
            block.items = _list_items(tokens, index, text, lines)
        elif kind == "table":
            _fill_table(block, tokens, index, text, lines)
        elif kind == "code":
            _fill_code(block, token, text, lines)
        elif kind == "heading":
            block.level = int(token.tag[1:])
            block.text = heading_text(tokens[index + 1].content)
        blocks.append(block)
    return blocks


def _list_items(
    tokens: list[Token], index: int, text: str, lines: _LineIndex
) -> list[Span]:
    items = []
    for token in _following(tokens, index):
        if token.level == 0:
            break
        if token.type == "list_item_open" and token.level == 1 and token.map:
            raw = lines.span(token.map)
            span = _strip_span(text, raw.start, raw.end)
            if span:
                items.append(span)
    return items


# Definition lists (issue #29), which CommonMark reads as paragraphs: "Term" over
# ": definition" lines (PHP Markdown Extra, pandoc; the DOCX reader writes a
# document's terms so), and runs of "**term**: definition" (or " — ") lines or
# paragraphs, two or more (one is a paragraph that opens in bold, "**Note:**").
# Each becomes a list of one item per term, so the chunker keeps a term with its
# definition. "- **term**: definition" items are list items already.
_DEFINITION_LINE_RE = re.compile(r" {0,3}:[ \t]+\S")
_BOLD_TERM_RE = re.compile(
    r" {0,3}(\*\*|__)\S[^\n]{0,120}?(?::\1|(?<=\S)\1[ \t]*(?::|\u2014|\u2013|-[ \t]))"
)


def _definition_lists(blocks: list[Block], text: str) -> list[Block]:
    """`blocks` with each run of definition paragraphs of one form (_definitions)
    as one "list" block."""
    out: list[Block] = []
    run: list[Span] = []  # the open run's items
    form = ""  # the open run's form
    for block in [*blocks, None]:
        found = (
            _definitions(block, text) if block and block.kind == "paragraph" else None
        )
        if found and found[0] == "more" and (run or (out and _is_term(out[-1], text))):
            if not run:  # the term, a paragraph of its own above
                term = out.pop()
                run, form = [Span(term.start, term.end)], "colon"
            run[-1] = Span(run[-1].start, block.end)
            continue
        if found and found[0] in ("colon", form or "bold"):
            run += found[1]
            form = found[0]
            continue
        out += _definition_run(run, form)
        run, form = (found[1], found[0]) if found and found[0] != "more" else ([], "")
        if block is not None and not run:
            out.append(block)
    return out


def _is_term(block: Block, text: str) -> bool:
    return block.kind == "paragraph" and "\n" not in text[block.start : block.end]


def _definition_run(run: list[Span], form: str) -> list[Block]:
    """The run as a list block; a lone bold-term paragraph stays a paragraph."""
    if not run:
        return []
    if len(run) == 1 and form == "bold":
        return [Block("paragraph", run[0].start, run[0].end)]
    return [Block("list", run[0].start, run[-1].end, items=run)]


def _definitions(block: Block, text: str) -> tuple[str, list[Span]] | None:
    """A paragraph's definitions: ("colon" or "bold", one span per term), ("more",
    []) for ": definition" lines that continue the term above; else None. A
    paragraph that introduces what follows ("**Note:** check these:") is none."""
    lines = _line_spans(text, block.start, block.end)
    is_definition = [bool(_DEFINITION_LINE_RE.match(text, a, b)) for a, b in lines]
    if is_definition[0]:
        return "more", []
    starts = [
        i
        for i in range(len(lines) - 1)
        if is_definition[i + 1] and not is_definition[i]
    ]
    form = "colon"
    if not starts or starts[0] != 0:
        starts = [
            i for i, (a, b) in enumerate(lines) if _BOLD_TERM_RE.match(text, a, b)
        ]
        form = "bold"
        if not starts or starts[0] != 0 or text[block.end - 1] == ":":
            return None
    ends = [lines[i - 1][1] for i in starts[1:]] + [block.end]
    spans = [
        _strip_span(text, lines[i][0], end) for i, end in zip(starts, ends, strict=True)
    ]
    return form, [span for span in spans if span]


def _line_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans, position = [], start
    while position < end:
        stop = text.find("\n", position, end)
        stop = end if stop == -1 else stop
        spans.append((position, stop))
        position = stop + 1
    return spans


def _following(tokens: list[Token], index: int) -> Iterator[Token]:
    """The tokens after `index`, without copying (or skipping over) the list's
    head: a document of many lists or tables is read once, not once per block."""
    for position in range(index + 1, len(tokens)):
        yield tokens[position]


def _fill_table(
    block: Block, tokens: list[Token], index: int, text: str, lines: _LineIndex
) -> None:
    in_head = False
    for token in _following(tokens, index):
        if token.type == "table_close" and token.level == 0:
            break
        if token.type in ("thead_open", "thead_close"):
            in_head = token.type == "thead_open"
        if token.type == "tr_open" and token.map:
            row = _table_row(text, lines.span(token.map))
            if row is None:
                continue
            if in_head:
                block.header = row
            else:
                block.rows.append(row)


def _table_row(text: str, raw: Span) -> TableRow | None:
    span = _strip_span(text, raw.start, raw.end)
    if span is None:
        return None
    return TableRow(span.start, span.end, _split_cells(text, span))


def _split_cells(text: str, span: Span) -> list[TableCell]:
    """Cells between unescaped pipes; the outer pipes are optional (GFM)."""
    bounds = [span.start - 1]
    position = span.start
    while position < span.end:
        char = text[position]
        if char == "\\":
            position += 2
            continue
        if char == "|":
            bounds.append(position)
        position += 1
    bounds.append(span.end)
    cells = []
    for left, right in zip(bounds, bounds[1:], strict=False):
        cell = _strip_span(text, left + 1, right)
        if cell is not None:
            cells.append(TableCell(text[cell.start : cell.end], cell.start, cell.end))
        elif left + 1 != span.start and right != span.end:
            cells.append(TableCell("", left + 1, left + 1))  # an empty inner cell
    return cells


def _fill_code(block: Block, token: Token, text: str, lines: _LineIndex) -> None:
    first, last = token.map
    if token.type == "fence":
        block.language = token.info.strip().split(" ")[0] if token.info else ""
        closing = text[lines.offset(last - 1) : lines.offset(last)].strip()
        fence = token.markup
        is_closed = (
            last - first >= 2
            and closing.startswith(fence)
            and set(closing) == {fence[0]}
        )
        first, last = first + 1, (last - 1 if is_closed else last)
    inner = _strip_newlines(text, lines.offset(first), lines.offset(last))
    block.inner = inner


def _strip_newlines(text: str, start: int, end: int) -> Span:
    """Trim blank lines only: indentation inside code is content."""
    while end > start and text[end - 1] in "\r\n":
        end -= 1
    return Span(start, end)


def _build_sections(
    blocks: list[Block], text: str, title: str, body_start: int
) -> list[SectionData]:
    """One pass over the blocks (which come in document order): each heading
    closes the section before it and opens its own."""
    headings: list[Block] = []
    owned: list[list[Block]] = [[]]  # the preamble's blocks, then each heading's
    for block in blocks:
        if block.kind == "heading":
            headings.append(block)
            owned.append([])
        elif headings or block.start >= body_start:
            owned[-1].append(block)
    bounds = [h.start for h in headings] + [len(text)]
    sections: list[SectionData] = []
    preamble = _section_blocks(text, owned[0], body_start, bounds[0])
    if preamble:
        sections.append(
            SectionData(
                0,
                None,
                title,
                title,
                0,
                preamble[0].start,
                bounds[0],
                preamble[0].start,
                preamble,
            )
        )
    stack: list[SectionData] = []
    for heading, inside, end in zip(headings, owned[1:], bounds[1:], strict=True):
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        name = heading.text or "Untitled section"
        parent = stack[-1] if stack else None
        path = f"{parent.heading_path} > {name}" if parent else _root_path(title, name)
        section = SectionData(
            index=len(sections),
            parent=parent.index if parent else None,
            heading=name,
            heading_path=path,
            level=heading.level,
            start=heading.start,
            end=end,
            body_start=heading.end,
            blocks=_section_blocks(text, inside, heading.end, end),
        )
        sections.append(section)
        stack.append(section)
    for section in sections:
        section.end = section.blocks[-1].end if section.blocks else section.body_start
    return sections


def _root_path(title: str, heading: str) -> str:
    """Every path starts with the document title, which is often the # heading."""
    if " ".join(title.split()).casefold() == heading.casefold():
        return heading
    return f"{title} > {heading}"


def _section_blocks(
    text: str, inside: list[Block], start: int, end: int
) -> list[Block]:
    """`inside` (a section's non-heading blocks, all within [start, end)), plus
    any text between them.

    markdown-it emits no token for some content (link reference definitions);
    such gaps become "text" blocks so no evidence is dropped.
    """
    result: list[Block] = []
    position = start
    for block in [*inside, None]:
        gap = _strip_span(text, position, block.start if block else end)
        if gap:
            result.append(Block("text", gap.start, gap.end))
        if block:
            result.append(block)
            position = block.end
    return result
