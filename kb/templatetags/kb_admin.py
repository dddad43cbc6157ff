"""Template tags for admin pages that Django's own views render, and for the
Admin link in the site's header."""

from __future__ import annotations

from django import template
from django.contrib import admin

from kb import golden, index_config, reindexing
from kb.models import Collection, GoldenCase, Source

register = template.Library()


@register.simple_tag
def golden_cases_using(sources) -> list[GoldenCase]:
    """The golden cases with spans in a source (or in any of several): the admin's
    delete confirmation cannot list them itself, as spans name files, not rows."""
    return golden.cases_using([sources] if isinstance(sources, Source) else sources)


@register.simple_tag
def index_differences(collection: Collection) -> list[str]:
    """How the collection's index differs from its settings (empty: up to date)."""
    return index_config.index_differences(collection)


@register.simple_tag
def open_shadow(collection: Collection) -> dict | None:
    """The collection's shadow index not yet swapped or ended, with its changes."""
    shadow = reindexing.open_shadow(collection)
    if shadow is None:
        return None
    return {"shadow": shadow, "changes": reindexing.changed_settings(shadow)}


@register.simple_tag(takes_context=True)
def has_admin_pages(context) -> bool:
    """Whether the user may open any admin list: staff without any permission
    would only be told there is nothing for them."""
    request = context.get("request")
    return bool(request and request.user.is_staff and admin.site.get_app_list(request))


@register.simple_tag
def sync_states(collection: Collection) -> list[dict]:
    """The collection's sync sources and their last runs (kb.sync.runs.states)."""
    from kb.sync import runs

    return runs.states(collection)
