"""Source Markdown -> HTML for answers and passages (issue #17, item 6).

markdown-it-py's CommonMark preset plus tables, with raw HTML off: a source's
`<script>` is text, escaped like any other. Links keep only http(s), mailto and
relative targets and get rel="noopener nofollow"; images are not loaded (a
source could point them anywhere): they show as their alt text.

Quoted text is cut out of its document, so some Markdown arrives without its
other half: a reference link whose definition is elsewhere shows its text, a
bold span cut at a sentence boundary is closed, table rows without their header
are still rows, a quoted list item shows a bullet. MkDocs admonitions (`!!! note
"Title"`) show their title.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml, normalizeReference
from markdown_it.rules_block import StateBlock
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

SAFE_SCHEMES = frozenset({"http", "https", "mailto", ""})
# Block tokens that mark a cited range on the section page.
_LEAF_BLOCKS = frozenset({"paragraph_open", "fence", "code_block", "tr_open"})
# "[label]" of a reference link: no unescaped brackets inside.
_LABEL_RE = re.compile(r"\[((?:[^\[\]\\]|\\.){1,999})?\]")
# A link reference definition: "[label]: destination 'title'". The destination
# must look like one (a URL or path), so that "[Note]: read on" stays text.
_DEFINITION = (
    r"\[(?:[^\[\]\\]|\\.){1,999}\]:[ \t]*(?:<[^<>\n]*>|(?=\S*[/.:#])\S++)"
    r"""(?:[ \t]+(?:"[^"\n]*"|'[^'\n]*'|\([^()\n]*\)))?"""
)
_DEFINITIONS_RE = re.compile(rf"\s*{_DEFINITION}(?:\s+{_DEFINITION})*\s*")
# MkDocs (Material) admonitions and tabs: `!!! note "Title"`, `??? tip`,
# `???+ warning`, `=== "Tab"`; the body is indented by four spaces.
_MARKER = r"(?:!!!|\?\?\?\+?)[ \t]+(?P<kind>[\w-]+)"
_TITLE = r'(?:[ \t]+"(?P<title>[^"\n]*)")?'
_TAB = r'===\+?[ \t]+"(?P<tab>[^"\n]*)"'
_CLASSES = r"(?:[ \t]+[\w-]+)*"  # `!!! note inline end "Title"`
_ADMONITION_LINE_RE = re.compile(rf"(?:{_MARKER}{_CLASSES}{_TITLE}|{_TAB})[ \t]*")
# The marker opening a sentence (its lines joined): the body follows it.
_ADMONITION_START_RE = re.compile(rf"\s*(?:{_MARKER}{_TITLE}|{_TAB})(?:\s+|$)")
_BOLD_MARKERS = ("**", "__")
# A bullet list item's marker opening a sentence (an item quoted in an answer).
_BULLET_RE = re.compile(r"(\s*)[*+-][ \t]+(?=\S)")
_ENDS = frozenset(".!?:;)\"'")  # what a sentence ends with, before a closing **


_ORDERED_RE = re.compile(r"\s*\d{1,9}[.)][ \t]+(?=\S)")


def is_list_item(text: str) -> bool:
    """A quoted list item: a bullet or a number opening it."""
    return bool(_BULLET_RE.match(text) or _ORDERED_RE.match(text))


def _markdown() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark", {"html": False, "linkify": False, "typographer": False}
    )
    md.enable("table")
    md.block.ruler.after("table", "table_rows", _table_rows)
    md.block.ruler.after("table_rows", "admonition", _admonition)
    md.inline.ruler.after("image", "reference_text", _reference_text)

    def link_open(renderer, tokens, idx, options, env):
        token = tokens[idx]
        href = str(token.attrGet("href") or "")
        if urllib.parse.urlsplit(href).scheme.lower() not in SAFE_SCHEMES:
            token.attrs.pop("href", None)
        else:
            token.attrSet("rel", "noopener nofollow")
        return renderer.renderToken(tokens, idx, options, env)

    def image(renderer, tokens, idx, options, env):
        alt = renderer.renderInlineAsText(tokens[idx].children or [], options, env)
        return escapeHtml(f"[image: {alt}]" if alt.strip() else "[image]")

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    return md


def _reference_text(state: StateInline, silent: bool) -> bool:
    """`[text][label]` or `[text][]` whose definition is not in the text rendered
    (the source defines it elsewhere, usually at its end): the text, as the HTML
    and DOCX readers give it; `![alt][label]` an image. Runs after the link rule,
    which takes the defined ones.

    Not `x[0][1]` (indexing, right after a word) nor `[1][2]` (citation
    markers); a lone `[text]` is no reference without its definition."""
    if silent:
        # Only link labels are scanned silently: `[the [x][y] guide](url)` stays
        # one link (with "x" inside), as without this rule.
        return False
    src, pos, maximum = state.src, state.pos, state.posMax
    image = src[pos] == "!"
    start = pos + 1 if image else pos
    if start >= maximum or src[start] != "[":
        return False
    if not image and pos and (src[pos - 1].isalnum() or src[pos - 1] in "_)]"):
        return False
    text_end = state.md.helpers.parseLinkLabel(state, start, not image)
    if text_end < 0:
        return False
    label = _LABEL_RE.match(src, text_end + 1, maximum)
    text = src[start + 1 : text_end]
    if label is None or not text.strip() or text.strip().isdigit():
        return False
    references = state.env.get("references", {})
    if normalizeReference(label.group(1) or text) in references:
        return False  # defined after all: the link rule's (it failed otherwise)
    if image:
        token = state.push("image", "img", 0)
        token.attrs = {"src": "", "alt": ""}
        token.children = []
        state.md.inline.parse(text, state.md, state.env, token.children)
    else:
        # A span keeps emphasis inside the text apart, as a link's tag would.
        state.push("reference_open", "span", 1).attrSet("class", "reference")
        state.pos, state.posMax = start + 1, text_end
        state.linkLevel += 1
        state.md.inline.tokenize(state)
        state.linkLevel -= 1
        state.push("reference_close", "span", -1)
    state.pos, state.posMax = label.end(), maximum
    return True


def _table_rows(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """Table rows without their header and delimiter line (a passage or section
    cut inside a table) as rows of a table, not a paragraph of pipes."""
    line = start
    while line < end and _is_row_line(state, line):
        if line + 1 < end and _is_delimiter_line(state, line + 1):
            break  # a table starts here: the table rule's
        line += 1
    if line == start:
        return False
    if silent:
        return True
    state.push("table_open", "table", 1).map = [start, line]
    state.push("tbody_open", "tbody", 1).map = [start, line]
    for row in range(start, line):
        state.push("tr_open", "tr", 1).map = [row, row + 1]
        for cell in _cells(_line_text(state, row))[0]:
            state.push("td_open", "td", 1)
            token = state.push("inline", "", 0)
            token.content = cell.replace(ESCAPED_PIPE, "|")
            token.map = [row, row + 1]
            token.children = []
            state.push("td_close", "td", -1)
        state.push("tr_close", "tr", -1)
    state.push("tbody_close", "tbody", -1)
    state.push("table_close", "table", -1)
    state.line = line
    return True


def _line_text(state: StateBlock, line: int) -> str:
    return state.src[state.bMarks[line] + state.tShift[line] : state.eMarks[line]]


def _is_row_line(state: StateBlock, line: int) -> bool:
    if not 0 <= state.sCount[line] - state.blkIndent < 4:
        return False
    text = _line_text(state, line).rstrip()
    return is_table_row(text) and bool(_cells(text)[0])


def _is_delimiter_line(state: StateBlock, line: int) -> bool:
    text = _line_text(state, line).rstrip()
    return is_table_row(text) and _cells(text) == ([], True)


def _admonition(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """A MkDocs admonition or tab: its title in bold (`!!! note` without one:
    "Note"), then its body, the lines indented under it, as Markdown."""
    if state.sCount[start] - state.blkIndent >= 4:
        return False
    match = _ADMONITION_LINE_RE.fullmatch(_line_text(state, start))
    if match is None:
        return False
    if silent:
        return True
    indent, line, last = state.sCount[start] + 4, start + 1, start + 1
    while line < end and (state.isEmpty(line) or state.sCount[line] >= indent):
        line += 1
        if not state.isEmpty(line - 1):
            last = line  # trailing blank lines are not the body's
    kind = match["kind"] or "tab"
    token = state.push("admonition_open", "div", 1)
    token.attrSet("class", f"admonition {kind}")
    token.map = [start, last]
    if title := _admonition_title(match):
        state.push("paragraph_open", "p", 1).map = [start, start + 1]
        token = state.push("inline", "", 0)
        token.map = [start, start + 1]
        token.children = [Token("strong_open", "strong", 1), Token("text", "", 0)]
        token.children[1].content = title
        token.children.append(Token("strong_close", "strong", -1))
        state.push("paragraph_close", "p", -1)
    old_indent, old_max = state.blkIndent, state.lineMax
    state.blkIndent, state.lineMax = indent, last
    state.md.block.tokenize(state, start + 1, last)
    state.blkIndent, state.lineMax = old_indent, old_max
    state.push("admonition_close", "div", -1)
    state.line = last
    return True


def _admonition_title(match: re.Match) -> str:
    """The title shown: the quoted one, else the kind ("note" -> "Note"); an
    empty quoted title shows none, as in MkDocs."""
    if match["tab"] is not None:
        return match["tab"]
    if match["title"] is not None:
        return match["title"]
    return match["kind"].replace("-", " ").capitalize()


_MD = _markdown()


def render(text: str) -> SafeString:
    """A Markdown text as block HTML; everything in it escaped."""
    return mark_safe(_MD.render(text))  # noqa: S308 - markdown-it escapes (html off)


def render_inline(text: str) -> SafeString:
    """One sentence's inline Markdown (code, emphasis, links) as HTML.

    A sentence quoting only link reference definitions shows nothing (as they
    show in a passage); an admonition's marker opening it shows as its title; a
    bold span it was cut out of (`**First. Second.**`) is closed at its end; a
    list item's bullet ("* " or "- ") is a bullet."""
    if _DEFINITIONS_RE.fullmatch(text):
        return mark_safe("")  # noqa: S308 - nothing to escape
    head = ""
    if match := _ADMONITION_START_RE.match(text):
        title = _admonition_title(match)
        lead = text[: len(text) - len(text.lstrip())]  # the space after a marker
        head = format_html("{}<strong>{}</strong> ", lead, title) if title else lead
        text = text[match.end() :]
    elif match := _BULLET_RE.match(text):
        head, text = f"{match[1]}\N{BULLET} ", text[match.end() :]
    return mark_safe(head + _MD.renderInline(_bold_closed(text)))  # noqa: S308


def _bold_closed(text: str) -> str:
    """`text` with a `**`/`__` left open at its start (or closed at its end) by
    the sentence boundary that cut a bold span, matched at its other end."""
    stripped = text.strip()
    if stripped[:2] not in _BOLD_MARKERS and stripped[-2:] not in _BOLD_MARKERS:
        return text
    children = _inline_tokens(stripped)
    # A cut falls between sentences: the span's first one opens a sentence (not
    # "**kwargs are ..."), its last one ends at a full stop or the like.
    marker, closed = stripped[:2], stripped
    if marker in _BOLD_MARKERS and not stripped[2:3].islower():
        if _literal_at(children[0], marker, str.startswith):
            closed = stripped + marker
    elif (marker := stripped[-2:]) in _BOLD_MARKERS and stripped[-3:-2] in _ENDS:
        if _literal_at(children[-1], marker, str.endswith):
            closed = marker + stripped
    if closed is stripped:
        return text
    children = _inline_tokens(closed)
    if children[0].type != "strong_open" or children[-1].type != "strong_close":
        return text  # no bold span either way ("** x"): left as it is
    lead = text[: len(text) - len(text.lstrip())]
    return lead + closed + text[len(lead) + len(stripped) :]


def _inline_tokens(text: str) -> list[Token]:
    """The inline tokens of `text`, without the empty text ones at its edges."""
    if not text:
        return []
    children = _MD.parseInline(text)[0].children or []
    return [t for t in children if t.type != "text" or t.content]


def _literal_at(token: Token, marker: str, at: Callable[[str, str], bool]) -> bool:
    """Whether an edge token is text showing `marker` (a delimiter left unused)."""
    return token.type == "text" and at(token.content, marker)


CELL_SPLIT_RE = re.compile(r"(?<!\\)\|")  # a cell ends at a pipe not escaped
ESCAPED_PIPE = "\\|"
_DELIMITER_RE = re.compile(r"^\s*:?-+:?\s*$")


def is_table_row(text: str) -> bool:
    """Whether a piece of text is Markdown table rows ("| a | b |"), one a line."""
    lines = [line.strip() for line in text.strip().split("\n")]
    return all(
        len(line) > 1 and line.startswith("|") and line.endswith("|") for line in lines
    )


def render_row(text: str) -> SafeString:
    """Table rows quoted in an answer (a row under its header line and delimiter
    line, kb.answerer.answer_text) as a table.

    Alone, "| a | b |" is no table to Markdown and showed as raw pipes. A line
    followed by a delimiter line, or quoted with it on one line ("| A | B |
    |---|---|"), gives header cells. Cells are inline Markdown, escaped as
    everywhere.
    """
    lines = [_cells(line) for line in text.strip().split("\n")]
    rows = []
    for i, (cells, header) in enumerate(lines):
        if not cells:
            continue  # the delimiter line
        below = lines[i + 1] if i + 1 < len(lines) else ([], False)
        tag = "th" if header or below == ([], True) else "td"
        rows.append(
            "<tr>"
            + "".join(
                f"<{tag}>{_MD.renderInline(cell.replace(ESCAPED_PIPE, '|'))}</{tag}>"
                for cell in cells
            )
            + "</tr>"
        )
    return mark_safe(f'<table class="quoted-row">{"".join(rows)}</table>')  # noqa: S308


def _cells(line: str) -> tuple[list[str], bool]:
    """A row's cells, and whether a delimiter line ended it (none: all it held)."""
    cells = [c.strip() for c in CELL_SPLIT_RE.split(line.strip())[1:-1]]
    header = False
    while cells and _DELIMITER_RE.match(cells[-1]):
        cells.pop()
        header = True
    while cells and not cells[-1]:  # "| A | |---|" leaves empty cells between
        cells.pop()
    return cells, header


def render_cited(body: str, start: int, end: int) -> SafeString:
    """`body` as HTML, the blocks holding body[start:end] given class "cited".

    Markup cannot be cut at arbitrary characters, so the formatted view marks
    whole paragraphs, list items, table rows and code blocks; the exact range
    is marked in the source text shown beside it.
    """
    tokens = _MD.parse(body)
    if start < end:
        first = body.count("\n", 0, start)
        last = body.count("\n", 0, max(start, end - 1))
        items: list[Token] = []
        for token in tokens:
            if token.type == "list_item_open":
                items.append(token)
            elif token.type == "list_item_close":
                items.pop()
            if token.type not in _LEAF_BLOCKS or not token.map:
                continue
            if token.map[0] <= last and token.map[1] > first:
                # A tight list's paragraphs are hidden: mark their item.
                target = items[-1] if token.hidden and items else token
                target.attrJoin("class", "cited")
    return mark_safe(_MD.renderer.render(tokens, _MD.options, {}))  # noqa: S308
