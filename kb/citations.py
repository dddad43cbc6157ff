"""Citation links: where an answer's citation points, and where the text it cited
is after its source moved on.

A citation links to the cited range on its section's page (citation_url): the
range as offsets into the source's text, with the source and the version of the
text its index was built from, so that the link outlives a re-index. The
original of a source with a web address is linked at the cited place too
(original_url, text_fragment_url).

A re-index replaces the sections, an edit moves or removes text, a deletion
takes the source. resolve() reads a link (Link: what its query says, which the
section view reads) against the current index and returns what its page shows,
as a value:

- Shown: a section and the cited range in it (start == end: nothing marked);
  for a link made from another version of the text, that version, the text as
  the answer cited it (the question log keeps it) and whether only part of it
  is still there;
- Elsewhere: another section holds the cited place (the link's section was
  replaced) or the cited text (it moved): that section's page, told where the
  text was found (`at`) so that it need not search again;
- Gone: no section to show, and the message saying what is gone.

It reads sections, sources and the question log, and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from django.http import QueryDict
from django.urls import reverse
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from kb import rendering, spans
from kb.markup_text import shown_text
from kb.models import Collection, Question, Section, Source
from kb.readers.reading import pages_of
from kb.sentences import units

Range = tuple[int, int]

# --- the links ------------------------------------------------------------------


def citation_url(
    section_id: int,
    start: int,
    end: int,
    source_id: int | None = None,
    version: int | None = None,
) -> str:
    """The cited range on its section's page. With the source and the version of
    its text that was indexed, the link outlives a re-index, which replaces the
    sections: resolve() finds the range in the source's current index."""
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


def text_fragment_url(url: Any, cited: str) -> str:
    """`url` with a text fragment (#:~:text=start,end) that browsers scroll to
    and highlight: the cited text's first and last words as the page shows
    them (markup_text.shown_text: "`env::var()`." is "env::var()."); "" when
    `url` is not a web address or nothing is cited."""
    base = _web_address(url)
    if not base or not cited.strip():
        return ""
    words = shown_text(cited).split()
    if not words:
        return ""

    def part(chosen: list[str]) -> str:  # ",", "&" and "-" are the syntax's own
        return quote(" ".join(chosen), safe="").replace("-", "%2D")

    if len(words) <= 2 * FRAGMENT_WORDS:
        return f"{base}#:~:text={part(words)}"
    head, tail = words[:FRAGMENT_WORDS], words[-FRAGMENT_WORDS:]
    return f"{base}#:~:text={part(head)},{part(tail)}"


@dataclass(frozen=True)
class Link:
    """What a citation link's query says (citation_url writes it; the section
    page reads it); None where a value is absent or not a number.

    `start` and `end` are offsets (digits only) to look the cited text up by;
    `span` is the range a page marks, any whole numbers, clamped to its section.
    """

    start: int | None = None
    end: int | None = None
    source_id: int | None = None
    version: int | None = None  # of the source's text the citation was made from
    at: Range | None = None  # where another section's page found the cited text
    span: Range | None = None


# --- what a link shows ----------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """A section's page: `section` (its source and collection loaded) with
    start-end marked, an empty range marking nothing. For a link made from
    another version of the source's text (`cited_version`): `was`, the text as
    cited, when the log keeps it, and `partly`, when only part of it is still
    in the source (what is, is marked)."""

    section: Section
    start: int
    end: int
    cited_version: int | None = None
    was: str | None = None
    partly: bool = False

    def _cut(self, start: int, end: int) -> str:
        base = self.section.start
        return self.section.body[start - base : end - base]

    @property
    def cited(self) -> str:
        return self._cut(self.start, self.end)

    @property
    def formatted(self) -> SafeString:
        """The section formatted, the blocks holding the cited range marked."""
        base = self.section.start
        return rendering.render_cited(
            self.section.body, self.start - base, self.end - base
        )

    @property
    def edited_since(self) -> bool:
        """The source's text has been edited since the section was indexed: the
        page shows the indexed text, the one the citation's offsets are of."""
        body, base = self.section.body, self.section.start
        return self.section.source.text[base : base + len(body)] != body

    @property
    def cited_pages(self) -> Range | None:
        """The first and last page of the original the cited range is on (PDF)."""
        if self.start >= self.end:
            return None
        return pages_of(self.section.source.page_map, self.start, self.end)

    @property
    def original(self) -> str:
        """The section's entry in the original web page (a Javadoc member), else
        the cited text in it (a synced page or repository file); "" if none."""
        url = self.section.source.metadata.get("url")
        return original_url(url, self.section.anchor) or text_fragment_url(
            url, self.cited
        )

    def context(self) -> dict[str, Any]:
        """The section page's template context."""
        return {
            "section": self.section,
            "cited_version": self.cited_version,
            "was": self.was,
            "partly": self.partly,
            "before": self._cut(self.section.start, self.start),
            "cited": self.cited,
            "after": self._cut(self.end, self.section.end),
            "formatted": self.formatted,
            "start": self.start,
            "end": self.end,
            "edited_since": self.edited_since,
            "cited_pages": self.cited_pages,
            "original": self.original,
        }


@dataclass(frozen=True)
class Elsewhere:
    """The link leads to another section's page: the one now holding the cited
    place, or, `at` the range found, the cited text."""

    section_id: int
    at: Range | None = None

    def url(self, query: QueryDict) -> str:
        """That page, with the link's `query` and where the text was found."""
        query = query.copy()
        if self.at is not None:
            query["at"] = "{}-{}".format(*self.at)
        url = reverse("kb:section", args=[self.section_id])
        return f"{url}?{query.urlencode()}#cited"


@dataclass(frozen=True)
class Gone:
    """No section to show. `source`: the cited source, still there, with no
    indexed section at the cited place; else `source_id`, the one the link
    names (if any), and `logged`, its title and file ({"source", "file"}) as
    the question log names them when it was deleted."""

    source: Source | None = None
    source_id: int | None = None
    logged: dict[str, str] | None = None

    @property
    def message(self) -> str:
        if self.source is not None:
            return gettext(
                "“%(title)s” has no indexed section at the cited place any more."
            ) % {"title": self.source.title}
        if self.source_id is None:
            return gettext(
                "The cited section is no longer in the index, and this link does "
                "not say which source it cites."
            )
        if self.logged is None:
            # No logged answer names it: deleted, or a number no source ever had.
            return gettext(
                "The source this link cites (source %(id)s) is not in the "
                "knowledge base: it was deleted, or the link is wrong."
            ) % {"id": self.source_id}
        return gettext(
            "The source this link cites, “%(source)s” (%(file)s), has been deleted."
        ) % {"source": self.logged["source"], "file": self.logged["file"]}


def resolve(user, section_id: int, link: Link) -> Shown | Elsewhere | Gone | None:
    """What `link`, to section `section_id`, shows `user` now; None when the
    section is in a collection the user may not see (no page, as for none)."""
    section = (
        Section.objects.select_related("source__collection")
        .filter(pk=section_id)
        .first()
    )
    if section is None:  # re-indexed since the link was made, or deleted
        return _replaced(user, link)
    if not section.source.collection.is_visible_to(user):
        return None
    return _shown(section, link)


def _replaced(user, link: Link) -> Elsewhere | Gone:
    """A link whose section is gone: the section of the source's current index
    holding the cited start, when the link names a source the user may see;
    else what is gone."""
    source = None
    if link.source_id is not None:
        rows = Source.objects.select_related("collection")
        source = rows.filter(pk=link.source_id).first()
    if source is not None and not source.collection.is_visible_to(user):
        source = None
    if source is not None and link.start is not None:
        sections = Section.objects.filter(source=source, start__lte=link.start)
        current = sections.order_by("-start").only("pk").first()
        if current is not None:
            return Elsewhere(current.pk)
    if source is not None or link.source_id is None:
        return Gone(source, link.source_id)
    # Deleted, or in a collection the user may not see: told apart from nothing.
    return Gone(None, link.source_id, cited_source(user, link.source_id))


def _shown(section: Section, link: Link) -> Shown | Elsewhere:
    """`section`'s page for `link`: the cited range as the link gives it, or,
    for a link made from another version of the text, where the text is now."""
    version = link.version
    if version is None or version == section.source.indexed_version:
        return Shown(section, *_clamped(section, link.span))
    return _from_version(section, link, version)


def _clamped(section: Section, span: Range | None) -> Range:
    """`span` within the section; empty when there is none."""
    if span is None:
        return section.start, section.start
    start, end = max(span[0], section.start), min(span[1], section.end)
    return (start, end) if start < end else (section.start, section.start)


def _from_version(section: Section, link: Link, version: int) -> Shown | Elsewhere:
    """The cited text of `version` found in the indexed one: marked here, or the
    section holding it; nothing marked when it is gone or unknown."""
    base = section.start
    if link.start is None or link.end is None or link.source_id != section.source_id:
        return Shown(section, base, base, version)
    was = cited_text(section.source, version, link.start, link.end)
    if not was:
        return Shown(section, base, base, version, was)
    at = link.at
    if at and section.start <= at[0] < at[1] <= section.end:  # found by a page
        if section.body[at[0] - base : at[1] - base] == was:
            return _marked(section, at, version, was)
    if (moved := cited_now(section.source, was, link.start)) is None:
        return Shown(section, base, base, version, was)
    found, now, partly = moved
    if found.pk != section.pk:
        return Elsewhere(found.pk, now)
    return _marked(section, now, version, was, partly)


def _marked(
    section: Section, now: Range, version: int, was: str, partly: bool = False
) -> Shown:
    """The cited text found at `now` in `section`, marked within its body."""
    end = min(now[1], section.start + len(section.body))
    return Shown(section, now[0], end, version, was, partly)


# --- the cited text, as logged and now ------------------------------------------


def cited_text(source, version: int, start: int, end: int) -> str | None:
    """The text a citation link (source, version, start, end) cited, as logged
    with the answer that made it; None when no logged answer holds it (pruned,
    or the log is off)."""
    cite = {"source_id": source.pk, "start": start, "end": end}
    rows = Question.objects.filter(
        collection_id=source.collection_id, citations__contains=[cite]
    ).order_by("-created", "-pk")
    for logged, printed in rows.values_list("citations", "fingerprint")[:20]:
        at = (printed or {}).get("sources", {}).get(str(source.pk), version)
        for c in logged:
            same = all(c.get(k) == v for k, v in cite.items())
            if same and at == version and c.get("text"):
                return c["text"]
    return None


def cited_now(source, cited: str, start: int) -> tuple[Section, Range, bool] | None:
    """Where `cited`, cited at `start` of an older version of the source, is in its
    indexed text (spans.relocate): the section holding it, its range, and whether
    only part of it is still there; None when all of it is gone.

    When the whole is not found, each of its sentences is looked for: a citation
    of two sentences of which one was deleted marks the one still there (from
    the first found to the last, in the section holding most of them)."""
    rows = list(source.sections.order_by("start").only("pk", "start", "body"))
    if not rows:
        return None
    # The indexed text: the bodies tile it from the first section's start.
    text = " " * rows[0].start + "".join(r.body for r in rows)

    def section_at(position: int) -> Section:
        return next(r for r in reversed(rows) if r.start <= position)

    now = spans.relocate(cited, text, start)
    if now is not None:
        return section_at(now[0]), now, False
    pieces = units(cited, 0, len(cited))
    if len(pieces) < 2:
        return None
    found: dict[int, list[Range]] = {}
    for lo, hi in pieces:
        if (piece := spans.relocate(cited[lo:hi], text, start + lo)) is not None:
            found.setdefault(section_at(piece[0]).pk, []).append(piece)
    if not found:
        return None
    pk, kept = max(found.items(), key=lambda kv: sum(e - s for s, e in kv[1]))
    section = next(r for r in rows if r.pk == pk)
    return section, (min(s for s, _ in kept), max(e for _, e in kept)), True


def cited_source(user, source_id: int) -> dict[str, str] | None:
    """The title and file of a source cited in the log the user may see (the
    source itself may be gone): {"source", "file"}, or None."""
    # The log's entries the user may see, as questions.visible_to (which this
    # module cannot import: kb.questions links citations with citation_url).
    visible = Question.objects.filter(collection__in=Collection.objects.open_to(user))
    rows = visible.filter(citations__contains=[{"source_id": source_id}])
    logged = rows.order_by("-created", "-pk").values_list("citations", flat=True)
    for c in logged.first() or []:
        if c.get("source_id") == source_id:
            return {"source": c.get("source", ""), "file": c.get("file", "")}
    return None
