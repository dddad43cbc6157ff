"""Source Markdown -> HTML for answers and passages (issue #17, item 6).

markdown-it-py's CommonMark preset plus tables, with raw HTML off: a source's
`<script>` is text, escaped like any other. Links keep only http(s), mailto and
relative targets and get rel="noopener nofollow"; images are not loaded (a
source could point them anywhere), their alt text stays as a link.
"""

from __future__ import annotations

import re
import urllib.parse

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.token import Token

SAFE_SCHEMES = frozenset({"http", "https", "mailto", ""})
# Block tokens that mark a cited range on the section page.
_LEAF_BLOCKS = frozenset({"paragraph_open", "fence", "code_block", "tr_open"})


def _markdown() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark", {"html": False, "linkify": False, "typographer": False}
    )
    md.enable("table")
    md.disable("image")  # "![alt](src)" reads as "!" and a link to src

    def link_open(renderer, tokens, idx, options, env):
        token = tokens[idx]
        href = str(token.attrGet("href") or "")
        if urllib.parse.urlsplit(href).scheme.lower() not in SAFE_SCHEMES:
            token.attrs.pop("href", None)
        else:
            token.attrSet("rel", "noopener nofollow")
        return renderer.renderToken(tokens, idx, options, env)

    md.add_render_rule("link_open", link_open)
    return md


_MD = _markdown()


def render(text: str) -> SafeString:
    """A Markdown text as block HTML; everything in it escaped."""
    return mark_safe(_MD.render(text))  # noqa: S308 - markdown-it escapes (html off)


def render_inline(text: str) -> SafeString:
    """One sentence's inline Markdown (code, emphasis, links) as HTML."""
    return mark_safe(_MD.renderInline(text))  # noqa: S308 - as render()


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
    line, kb.answering._answer_text) as a table.

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
