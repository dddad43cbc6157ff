"""Citation links: the cited range on its section's page (citation_url) and,
for a source with a web address, the cited place in the original (original_url,
text_fragment_url).

A link to a section's page gives the range as offsets into the source's text,
with the source and the version of the text its index was built from, so that
it outlives a re-index. Pure functions: no database.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlsplit

from django.urls import reverse


def citation_url(
    section_id: int,
    start: int,
    end: int,
    source_id: int | None = None,
    version: int | None = None,
) -> str:
    """The cited range on its section's page. With the source and the version of
    its text that was indexed, the link outlives a re-index, which replaces the
    sections: views.section finds the range in the source's current index."""
    url = reverse("kb:section", args=[section_id])
    query = f"start={start}&end={end}"
    if source_id is not None:
        query += f"&source={source_id}"
        if version is not None:
            query += f"&v={version}"
    return f"{url}?{query}#cited"


def _web_address(url: Any) -> str:
    """`url` without its own fragment, or "" when it is not a web address: a
    link the page shows must not run script (javascript:)."""
    if not isinstance(url, str):
        return ""
    base = url.strip().split("#", 1)[0]
    return base if urlsplit(base).scheme.lower() in ("http", "https") else ""


def original_url(url: Any, anchor: str) -> str:
    """`url` at `anchor`, or "" when it is not a web address."""
    base = _web_address(url)
    return f"{base}#{quote(anchor, safe='()._-,~:')}" if base and anchor else ""


FRAGMENT_WORDS = 4  # words of the cited text's start and end in a text fragment
_MARKUP_RE = re.compile(r"\]\([^)]*\)|[*`#>|\\\[\]]+")  # a link's target too


def text_fragment_url(url: Any, cited: str) -> str:
    """`url` with a text fragment (#:~:text=start,end) that browsers scroll to
    and highlight: the cited text's first and last words, its Markdown marks
    dropped; "" when `url` is not a web address or nothing is cited."""
    base = _web_address(url)
    if not base or not cited.strip():
        return ""
    words = _MARKUP_RE.sub(" ", cited).split()
    if not words:
        return ""

    def part(chosen: list[str]) -> str:  # ",", "&" and "-" are the syntax's own
        return quote(" ".join(chosen), safe="").replace("-", "%2D")

    if len(words) <= 2 * FRAGMENT_WORDS:
        return f"{base}#:~:text={part(words)}"
    head, tail = words[:FRAGMENT_WORDS], words[-FRAGMENT_WORDS:]
    return f"{base}#:~:text={part(head)},{part(tail)}"
