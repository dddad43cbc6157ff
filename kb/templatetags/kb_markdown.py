"""Template filters showing source Markdown as formatted, escaped HTML."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from kb import rendering
from kb.retrieval import heading_label as _heading_label
from kb.sentences import block_around, code_blocks

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    return rendering.render(str(text))


@register.filter
def passage_markdown(passage) -> SafeString:
    """A retrieved passage as formatted HTML. A passage can start or end inside a
    code block (chunks split long code at lines): that piece shows as code, not
    its closing fence as the opening of a block running to the end."""
    text = str(passage.text)
    inside = code_edges(passage)
    if inside[0]:
        text = f"```\n{text}"
    if inside[1]:
        text = f"{text}\n```"
    return rendering.render(text)


def code_edges(passage) -> tuple[bool, bool]:
    """Whether the passage starts, and ends, inside a fenced code block of the
    text retrieval loaded around it (a piece of an indented one reads as code
    as it is)."""
    found = passage.source_text.part_holding(passage.start, passage.end)
    if found is None:
        return False, False
    base, part = found
    fenced = [
        (s, e)
        for s, e in code_blocks(part)
        if part[s:e].lstrip().startswith(("```", "~~~"))
    ]
    return (
        block_around(fenced, passage.start - base) is not None,
        block_around(fenced, passage.end - base) is not None,
    )


@register.filter
def heading_label(heading_path: str, source_title: str) -> str:
    """A stored heading path as shown: under the source's current title."""
    return _heading_label(str(source_title), str(heading_path))


@register.filter
def answer_piece(text: str) -> SafeString:
    """One sentence of an answer: inline Markdown, or a code block, a table row, a
    quoted list or paragraphs (an LLM's answer, between its markers) as such."""
    text = str(text)
    if rendering.is_table_row(text):
        return format_html('<div class="sentence">{}</div>', rendering.render_row(text))
    stripped = text.strip()
    lines = stripped.split("\n")
    # The items a "...:" sentence introduces, quoted after its marker: a list
    # (rendered inline, items after the first would run on after "- ").
    items = len(lines) > 1 and all(map(rendering.is_list_item, lines))
    if stripped.startswith(("```", "~~~")) or "\n\n" in stripped or items:
        # A code block's lines keep their indentation: no space before its fence.
        block = rendering.render(text.strip(" \n"))
        return format_html('<div class="sentence">{}</div>', block)
    if rendering.is_list_item(text):  # each quoted item on a line of its own
        return format_html(
            '<div class="sentence item">{}</div>', rendering.render_inline(text)
        )
    return format_html(
        '<span class="sentence">{}</span>', rendering.render_inline(text)
    )
