"""Template tags for golden cases on pages of other models."""

from __future__ import annotations

from django import template

from kb import evaluation
from kb.models import GoldenCase, Source

register = template.Library()


@register.simple_tag
def golden_cases_using(sources) -> list[GoldenCase]:
    """The golden cases with spans in a source (or in any of several): the admin's
    delete confirmation cannot list them itself, as spans name files, not rows."""
    return evaluation.cases_using([sources] if isinstance(sources, Source) else sources)
