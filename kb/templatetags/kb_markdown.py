"""Template filters showing source Markdown as formatted, escaped HTML."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from kb import rendering
from kb.retrieval import heading_label as _heading_label

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    return rendering.render(str(text))


@register.filter
def heading_label(heading_path: str, source_title: str) -> str:
    """A stored heading path as shown: under the source's current title."""
    return _heading_label(str(source_title), str(heading_path))


@register.filter
def answer_piece(text: str) -> SafeString:
    """One sentence of an answer: inline Markdown, or a code block, a table row or
    paragraphs (an LLM's answer, between its markers) as such."""
    text = str(text)
    if rendering.is_table_row(text):
        return format_html('<div class="sentence">{}</div>', rendering.render_row(text))
    if text.lstrip().startswith(("```", "~~~")) or "\n\n" in text.strip():
        return format_html('<div class="sentence">{}</div>', rendering.render(text))
    return format_html(
        '<span class="sentence">{}</span>', rendering.render_inline(text)
    )
