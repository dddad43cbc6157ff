"""Where sentences, list items, table rows and code blocks begin and end in
Markdown text: the units an answer quotes and a cited range covers whole (a
sentence continues across a soft line break, never ends inside inline code or a
link). Pure text functions: the answerer splits passages with them and the
retrieval's windows grow to them."""

from __future__ import annotations

import bisect
import functools
import re

MAX_ROW_WORDS = 60  # a longer table row is answered by its sentences
MAX_ITEM_WORDS = 60  # a list item up to this long is one unit ("`x` - Does y.
# Defaults to `False`.": its last sentence means nothing without its name)
CODE_INDENT = 4  # columns that make a line after a blank line an indented code block
MAX_WIDEN = 1500  # characters a location grows by to reach whole sentences

# A sentence's end: its mark, closing quotes and marks, space, and what the next
# one opens with: a capital of any alphabet, a digit or code ("... ID. Это",
# "... élément. À noter", "¿Qué pasa? ¡Nada!", "«первый». «Второй»"), also on
# a quote's next line ("verticalement.\n> La ..."). _sentences checks the
# capital. (The match opens with the mark, not a lookbehind: the engine skips to
# a character of a class, where it tries a lookbehind at every position, 4x
# slower.)
_SENTENCE_END_RE = re.compile(
    r"[.!?\u2026]([\"')\]*_\u00bb\u201d\u2019]*)(?:[ \t]*\n[ \t]*>)*\s+"
    r"(?=[\"'(\[*_\u00ab\u201c\u201e\u00bf\u00a1]*([\w`]))"
)
# A list item's marker ("1.", "2)", "a.", "-", "*", "+"): never a sentence of its own.
_LIST_MARKER_RE = re.compile(r"(?:[-*+]|\d{1,9}[.)]|[A-Za-z][.)])(?=\s|$)")
_WORD_CHAR_RE = re.compile(r"\w")


def _line(text: str, pos: int) -> tuple[int, int]:
    """Start and end (before its newline) of the line holding `pos`."""
    end = text.find("\n", pos)
    return text.rfind("\n", 0, pos) + 1, len(text) if end < 0 else end


def widened(text: str, lo: int, hi: int) -> tuple[int, int]:
    """[lo, hi) grown to the start and end of the paragraph lines it cuts into.

    Only running text is crossed: blank lines, headings, fences, table rows,
    shortcodes and the start of a list item bound a paragraph. At most
    MAX_WIDEN characters each way.
    """
    if hi <= lo:
        return lo, hi
    floor, ceiling = max(0, lo - MAX_WIDEN), min(len(text), hi + MAX_WIDEN)
    start, _ = _line(text, lo)
    if _kind(text, start) in ("text", "item", "quote", "row"):
        lo = max(start, floor)
        while lo > floor and _kind(text, lo) in ("text", "quote"):
            prev, _ = _line(text, lo - 1)
            if prev < floor or _kind(text, prev) not in ("text", "item", "quote"):
                break
            lo = prev
    start, end = _line(text, hi - 1)
    if _kind(text, start) in ("text", "item", "quote", "row"):
        hi = min(max(hi, end), ceiling)
        while hi < ceiling and _kind(text, hi + 1) in ("text", "quote"):
            hi = min(_line(text, hi + 1)[1], ceiling)
    return lo, hi


_HEADING_RE = re.compile(r"#{1,6}(?:\s|$)")
# The opening line of a container, no sentence: MkDocs' admonitions (`!!! note
# "Title"`, `??? tip`) and content tabs (`=== "Tab"`), whose content is indented
# under them and is text, not code; pymdownx blocks (`/// version-added | 2.1`);
# Docusaurus' and VuePress' admonitions (`:::tip`, `::: warning Title`).
# Quarto's and Pandoc's fenced divs (`::: {.callout-note}`) too. A line of prose
# opening with them ("/// is a doc comment", "::: is the scope operator") is text.
_CONTAINER_RE = re.compile(
    r"(?:!!!|\?\?\?\+?|===)(?:[ \t]|$)"
    r"|///(?:[ \t]++[\w-]++[ \t]*+(?:\|.*)?)?$"
    r"|:{3,}+[ \t]*+(?:\{[^{}]*+\}|[A-Za-z][\w.-]*+(?:[ \t]*+[\[{\"'A-Z].*)?)$"
)
# An MDX page's ECMAScript (`import Tabs from '@theme/Tabs';`, `export function
# Clock() {`): a statement opening a paragraph at the line's start, which goes
# on to the next blank line.
# (Each quantifier is possessive or bounded: the match is linear in the line.)
_ESM_RE = re.compile(
    r"import[ \t]++(?:[\w*{][^'\"]{0,300}?[ \t]from[ \t]++)?['\"][^'\"]++['\"];?$"
    r"|export[ \t]++(?:default|const|let|var|function|async[ \t]++function|class)\b"
)
# A link reference definition (`[docs]: https://…`): a target, no sentence.
_DEFINITION_RE = re.compile(r"\[[^\]]{1,200}\]:[ \t]*\S")
_RULE_RE = re.compile(r"(?:[-:| ]+|=+|([*_])(?:\s*\1){2,}\s*)$")
# A list item's first line: its marker, then text (or nothing).
_ITEM_RE = re.compile(r"(?:[-*+]|\d{1,9}[.)]|[A-Za-z][.)])(?:[ \t]|$)")


# A line of only an MDN macro: `{{Compat}}`, `{{EmbedLiveSample("x", 600)}}`
_MACRO_LINE_RE = re.compile(r"\{\{[^{}\n]*\}\}")


def _kind(text: str, pos: int) -> str:
    """What the line starting at `pos` is, as far as sentences care."""
    start, end = _line(text, pos)
    return _line_kind(text[start:end].strip())


def _line_kind(line: str) -> str:
    """What a line (stripped) is: _kind."""
    if not line:
        return "blank"
    if line.startswith(("```", "~~~")):
        return "fence"
    if _HEADING_RE.match(line):
        return "heading"
    if _RULE_RE.match(line):
        return "rule"  # a table's separator row, a thematic break, a setext line
    if line.startswith("|"):
        return "row"
    if line.startswith(("{{<", "{{%", "<!--")) or _MACRO_LINE_RE.fullmatch(line):
        return "markup"  # Hugo shortcodes, MDN macros, comments: no sentence
    if _CONTAINER_RE.match(line) or _DEFINITION_RE.match(line):
        return "markup"
    if line.startswith(">"):
        return "quote"
    if _ITEM_RE.match(line):
        return "item"
    return "text"


def is_list_item(unit: str) -> bool:
    """Whether a unit (units()) is a list item: its marker, then its text; or
    an item of a definition list (is_definition_item)."""
    return bool(_ITEM_RE.match(unit.lstrip())) or is_definition_item(unit)


# A definition list's item (PHP Markdown Extra, pandoc, Hugo; kb.parsing reads
# them as a list): a term's line over ": definition" lines. CommonMark reads a
# run of them as one paragraph.
_DEFINITION_LINE_RE = re.compile(r"[ \t]{0,3}:[ \t]+\S")
MAX_TERM_WORDS = 8


def is_definition_item(unit: str) -> bool:
    """Whether a unit opens with a term's line and a ": definition" line."""
    first = unit.find("\n")
    return (
        0 < first
        and _is_term_line(unit[:first])
        and bool(_DEFINITION_LINE_RE.match(unit, first + 1))
    )


def _is_term_line(line: str) -> bool:
    line = line.strip()
    return (
        bool(line)
        and len(line.split()) <= MAX_TERM_WORDS
        and not line.endswith((".", ":", "!", "?", ","))
        and not _DEFINITION_LINE_RE.match(line)
    )


def _definition_items(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """A paragraph's definition items, when it opens with one (a term's line
    over a ": definition" line): each term with its definitions; else []."""
    lines = []
    position = start
    while position < end:
        stop = text.find("\n", position, end)
        stop = end if stop < 0 else stop
        lines.append((position, stop))
        position = stop + 1
    is_definition = [bool(_DEFINITION_LINE_RE.match(text, a, b)) for a, b in lines]
    terms = [
        i
        for i in range(len(lines) - 1)
        if is_definition[i + 1]
        and not is_definition[i]
        and _is_term_line(text[slice(*lines[i])])
    ]
    if not terms or terms[0] != 0:
        return []
    ends = [lines[i - 1][1] for i in terms[1:]] + [end]
    return [(lines[i][0], stop) for i, stop in zip(terms, ends, strict=True)]


def units(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The units of text[start:end] (_scan)."""
    return _scan(text, start, end)[0]


def code_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of every code block of `text`, fenced or indented, in order:
    a window that starts or ends inside one holds only a piece of it."""
    return _scan(text, 0, len(text))[1]


def block_around(blocks: list[tuple[int, int]], pos: int) -> tuple[int, int] | None:
    """The block of `blocks` (code_blocks, in order) that `pos` lies strictly
    inside, if any."""
    i = bisect.bisect_right(blocks, (pos, pos)) - 1  # the last starting before
    if i >= 0 and blocks[i][0] < pos < blocks[i][1]:
        return blocks[i]
    return None


def _scan(
    text: str, start: int, end: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The answerable units of text[start:end], as (start, end) offsets into text.

    A paragraph's sentences (a single line break inside a paragraph continues the
    sentence), a list item whole (a long one's sentences), a table row (a long
    one's sentences), a whole code block: fenced, or indented after a blank line
    (not the content of a list item or an admonition, which is indented too).
    """
    found: list[tuple[int, int]] = []
    codes: set[int] = set()  # starts of the code blocks found
    para: tuple[int, int] | None = None  # start and end of the open paragraph
    para_kind = ""  # the kind of the open paragraph's first line
    fence: tuple[int, str] | None = None  # start and marker of an open code block
    code: tuple[int, int] | None = None  # an open indented code block
    blank_before = start == 0 or not text[_line(text, start - 1)[0] : start].strip()
    # the last line indented less: "item", "container", "block"
    context = _context_above(text, start) if start else "block"
    esm = False  # inside an MDX import or export statement
    table = _html_table_around(text, start)  # an open HTML table block's start
    pos = start
    while pos < end:
        line_start, full_end = pos, _line(text, pos)[1]
        line_end = min(full_end, end)
        pos = line_end + 1
        line = text[line_start:line_end]
        stripped = line.strip()
        lead = line_start + len(line) - len(line.lstrip())
        tail = line_start + len(line.rstrip())
        if fence is not None:
            mark = fence[1]
            if stripped.startswith(mark) and not stripped.strip(mark[0]):
                found.append((fence[0], tail))
                codes.add(fence[0])
                fence = None
            continue
        indented = stripped and _indent(line) >= CODE_INDENT
        if table is not None:  # an HTML block goes on to a blank line
            if stripped:
                continue
            found.extend(_html_rows(text, table, line_start, start))
            table = None
        elif code is None and not indented and _HTML_TABLE_RE.match(stripped):
            if para is not None:  # (an HTML block interrupts a paragraph)
                _add_paragraph(found, text, *para, para_kind)
                para = None
            table = line_start
            continue
        if code is not None:
            if not stripped or indented:
                code = (code[0], tail) if stripped else code
                continue
            found.append(code)
            codes.add(code[0])
            code = None
        if indented and blank_before and para is None and context == "block":
            code = (line_start, tail)
            blank_before = False
            continue
        blank_before = not stripped
        # the whole line's kind, also where the range starts or ends inside it
        whole = full_end <= end and (line_start == 0 or text[line_start - 1] == "\n")
        kind = _line_kind(stripped) if whole else _kind(text, line_start)
        if esm:  # an MDX import or export goes on to the next blank line
            esm = bool(stripped)
            if esm:
                continue
        if (
            kind == "text"
            and whole
            and lead == line_start
            and para is None
            and _ESM_RE.match(stripped)
        ):
            esm = True  # code the page runs, no sentence
            continue
        if stripped and not indented:
            context = "item" if kind == "item" else "block"
            if _CONTAINER_RE.match(stripped):
                context = "container"
        if kind == "fence":  # its marker from the whole line: the range may cut it
            full = text[_line(text, line_start)[0] : full_end].strip()
            fence = (lead, full[: len(full) - len(full.lstrip(full[0]))])
        if kind in ("text", "quote") and para is not None:
            if kind == "text" or para_kind == "quote":
                para = (para[0], tail)
                continue
        if para is not None:
            _add_paragraph(found, text, *para, para_kind)
            para = None
        if kind in ("text", "quote", "item"):
            para, para_kind = (lead, tail), kind
        if kind == "row" and len(line.split()) <= MAX_ROW_WORDS:
            found.append((lead, tail))
        elif kind == "row":  # a row of paragraphs: its sentences, as in the text
            found.extend(_sentences(text, lead, tail))
    if para is not None:
        _add_paragraph(found, text, *para, para_kind)
    if table is not None:
        found.extend(_html_rows(text, table, end, start))
    if fence is not None:
        found.append((fence[0], end))
        codes.add(fence[0])
    if code is not None:
        found.append(code)
        codes.add(code[0])
    blocks = sorted((s, e) for s, e in found if s in codes)
    found = [(s, e) for s, e in found if e > s and _has_words(text, s, e)]
    return found, blocks


# An HTML table in Markdown (MDN's older pages, READMEs): CommonMark passes it
# on as raw HTML up to the next blank line. Its rows are its units, not the
# tag soup between full stops.
_HTML_TABLE_RE = re.compile(r"<table(?:[\s>]|$)", re.IGNORECASE)
_HTML_ROW_RE = re.compile(r"<tr\b", re.IGNORECASE)
_HTML_ROW_END_RE = re.compile(r"</tr\s*>|</t(?:able|body|head|foot)\s*>", re.IGNORECASE)


MAX_TABLE_LOOK_BACK = 20_000  # characters read up from a range to its table
_BLANK_LINE_RE = re.compile(r"\n[ \t]*\n")


_TABLE_TAG_RE = re.compile("<table|<TABLE")


@functools.lru_cache(maxsize=2)
def _table_tags(text: str) -> list[int]:
    """Where "<table" or "<TABLE" starts in `text`: found once for a document
    whose chunks are each scanned (the cache holds the last two texts)."""
    return [m.start() for m in _TABLE_TAG_RE.finditer(text)]


def _html_table_around(text: str, pos: int) -> int | None:
    """The start of the HTML table block `pos` lies in (a range that starts
    inside one: its rows are still rows), if any: the last <table opening a
    line above `pos`, with no blank line between."""
    floor = max(0, pos - MAX_TABLE_LOOK_BACK)
    tags = _table_tags(text)
    i = bisect.bisect_right(tags, pos - len("<table")) - 1  # the last before pos
    if i < 0 or tags[i] < floor:
        return None
    at = tags[i]
    newline = text.rfind("\n", floor, at)
    if newline < 0 and floor > 0:
        return None  # its line starts above what is read
    line_start = newline + 1
    if text[line_start:at].strip(" ") or _BLANK_LINE_RE.search(text, at, pos):
        return None  # not a block's first line, or the block ended above
    return line_start


def _html_rows(
    text: str, table: int, end: int, start: int = 0
) -> list[tuple[int, int]]:
    """Each row of the HTML table from `table` to `end`, from its <tr> to its
    </tr> (or to the next row: HTML may leave it out), of those starting at
    `start` or after. Linear."""
    opens = [m.start() for m in _HTML_ROW_RE.finditer(text, max(table, start), end)]
    rows: list[tuple[int, int]] = []
    for lo, hi in zip(opens, [*opens[1:], end][: len(opens)], strict=True):
        close = _HTML_ROW_END_RE.search(text, lo, hi)
        if close is None:
            stop = hi
        elif close.group()[:4].lower() == "</tr":
            stop = close.end()
        else:
            stop = close.start()  # "</table>" of a last row left open
        while stop > lo and text[stop - 1].isspace():
            stop -= 1
        rows.append((lo, stop))
    # Text after the table, in the same block (no blank line between): its
    # sentences, as CommonMark shows them ("</table>\nSee also ...").
    after = max(text.rfind("</table>", table, end), text.rfind("</TABLE>", table, end))
    if after >= 0 and max(table, start) <= after:
        rest = after + len("</table>")
        while rest < end and text[rest].isspace():
            rest += 1
        stop = end
        while stop > rest and text[stop - 1].isspace():
            stop -= 1
        if rest < stop and _WORD_CHAR_RE.search(text, rest, stop):
            rows += _sentences(text, rest, stop)
    return rows


def is_html_row(unit: str) -> bool:
    """Whether a unit is a row of an HTML table (`<tr>...</tr>`; not a
    sentence about `<track>`)."""
    return bool(_HTML_ROW_RE.match(unit))


MAX_CONTEXT_LOOK_BACK = 4000  # characters read up from a range to its list item
# The last line indented less than CODE_INDENT before where the match ends.
_LAST_SHALLOW_LINE_RE = re.compile(r"(?s)(?:.*\n)?([ ]{0,3}\S[^\n]*)")


def _context_above(text: str, pos: int) -> str:
    """What the last line above `pos` indented less than CODE_INDENT opens
    ("item", "container" or "block"): a range starting in a list item's
    indented paragraph reads it as text, not as an indented code block."""
    floor = max(0, pos - MAX_CONTEXT_LOOK_BACK)
    found = _LAST_SHALLOW_LINE_RE.match(text, floor, pos)
    if found is None:
        return "block"
    line = found.group(1).strip()
    if _CONTAINER_RE.match(line):
        return "container"
    return "item" if _line_kind(line) == "item" else "block"


def _indent(line: str) -> int:
    expanded = line.expandtabs(CODE_INDENT)
    return len(expanded) - len(expanded.lstrip())


# MDN's definition lists: a term's item, then its definition as an item
# opening with ":" nested under it ("- `open`\n\n  - : This attribute ...").
_DEFINITION_ITEM_RE = re.compile(r"[-*+][ \t]+:[ \t]")


def _add_paragraph(
    found: list[tuple[int, int]], text: str, start: int, end: int, kind: str
) -> None:
    """A paragraph's units added to `found`; an MDN definition's first unit
    joined to its term's item right above (a short item of one line)."""
    units = _paragraph(text, start, end, kind)
    if (
        kind == "item"
        and found
        and _DEFINITION_ITEM_RE.match(text, start, end)
        and _ITEM_RE.match(text, found[-1][0], found[-1][1])
        and "\n" not in text[found[-1][0] : found[-1][1]]
        and len(text[found[-1][0] : found[-1][1]].split()) <= MAX_TERM_WORDS
        and not text[found[-1][1] : start].strip()
    ):
        units[0] = (found.pop()[0], units[0][1])
    found.extend(units)


def _paragraph(text: str, start: int, end: int, kind: str) -> list[tuple[int, int]]:
    """A paragraph's sentences (`kind`: its first line's); a short list item
    whole, and a short item of a definition list (each of a paragraph's)."""
    if kind == "item" and len(text[start:end].split()) <= MAX_ITEM_WORDS:
        return [(start, end)]
    if kind == "text" and (items := _definition_items(text, start, end)):
        return [
            unit
            for lo, hi in items
            for unit in (
                [(lo, hi)]
                if len(text[lo:hi].split()) <= MAX_ITEM_WORDS
                else _sentences(text, lo, hi)
            )
        ]
    return _sentences(text, start, end)


def _has_words(text: str, start: int, end: int) -> bool:
    """Words besides a list marker: "1." or "..." alone answers nothing."""
    marker = _LIST_MARKER_RE.match(text, start, end)
    return bool(_WORD_CHAR_RE.search(text, marker.end() if marker else start, end))


# Inline code (a run of n backticks up to the next run of exactly n), links and
# their targets, autolinks and bare URLs: a sentence never ends inside one.
_BACKTICKS_RE = re.compile(r"`+")
# (The lookahead of first characters lets the engine skip to them: 2.7x faster.)
_LINK_RE = re.compile(
    r"(?=[!\[<h])(?:!?\[[^\]]{0,500}\](?:\([^)]{0,500}\)|\[[^\]]{0,200}\])?"
    r"|<[a-z][a-z0-9+.-]{1,31}:[^\s<>]*>"
    r"|\bhttps?://[^\s<>]*[^\s<>.,;:!?)\]'\"])",
    re.IGNORECASE,
)
_ABBREVIATIONS = frozenset(
    (
        "e.g. i.e. etc. vs. cf. approx. no. fig. mr. ms. dr."
        # French, Spanish, Russian
        " ex. av. apr. p.ex. cf. chap. vol. nº. n°. mme. mlle. st."
        " ej. p.ej. sr. sra. srta. dra. núm. pág. aprox. vol. ud. uds."
        " т.е. т.д. т.п. т.к. см. др. пр. ср. напр. рис. стр. гл. г. гг. им."
        " т. е. д. п. к. ч."  # "т. е.", "и т. д." with a space
    ).split()
)


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    inside = _merged(_inline_spans(text, start, end))
    starts = [lo for lo, _ in inside]
    spans, last = [], start
    for match in _SENTENCE_END_RE.finditer(text, start, end):
        opens = match.group(2)
        if not (opens.isupper() or opens.isdigit() or opens == "`"):
            continue  # "Prix 5 p. ex. chez", "version 2. la suite"
        full_stop = match.start() + 1  # just after the full stop
        at = bisect.bisect_left(starts, full_stop) - 1  # the last span opening before
        if at >= 0 and full_stop <= inside[at][1]:
            continue  # inside `code`, a [link](...) or a URL
        word_start = full_stop  # the word before the stop (each is read once)
        while word_start > last and not text[word_start - 1].isspace():
            word_start -= 1
        word = text[word_start:full_stop].lstrip("(\"'*_")
        if word.lower() in _ABBREVIATIONS or _is_initial(word):
            continue  # "e.g. The", "J. Smith", "т. е. Это"
        if _LIST_MARKER_RE.fullmatch(text, last, full_stop):
            continue  # "1. Announce…": the marker stays with its item's text
        spans.append((last, match.end(1)))  # its closing quotes and marks too
        last = match.end()
    spans.append((last, end))
    return spans


def _is_initial(word: str) -> bool:
    """A capital and a full stop, of any alphabet: "J." of "J. Smith" (not
    "x." of "the size of x. The loop")."""
    return len(word) == 2 and word[1] == "." and word[0].isupper()


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans sorted and merged where they overlap (a link around code)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _inline_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = start
    while (run := _BACKTICKS_RE.search(text, pos, end)) is not None:
        pos = run.end()
        closing = _BACKTICKS_RE.search(text, pos, end)
        while closing is not None and len(closing.group()) != len(run.group()):
            closing = _BACKTICKS_RE.search(text, closing.end(), end)
        if closing is not None:
            spans.append((run.start(), closing.end()))
            pos = closing.end()
    for link in _LINK_RE.finditer(text, start, end):
        if not any(s <= link.start() < e for s, e in spans):  # not in code
            spans.append((link.start(), link.end()))
    return spans
