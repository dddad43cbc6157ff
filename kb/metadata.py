"""Metadata policy: which fields are embedded, which are only returned, which ignored.

Each field of a chunk's metadata has one policy per collection:
  embed     prefixed to the text the model embeds (helps when it names the topic),
  retrieve  stored on the chunk, returned with results and citations, never embedded
            (paths, ids and counters pollute vectors),
  ignore    neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kb import dates

EMBED = "embed"
RETRIEVE = "retrieve"
IGNORE = "ignore"
CHOICES = [(EMBED, "Embed"), (RETRIEVE, "Retrieve only"), (IGNORE, "Ignore")]

# field -> (label used in the embedded prefix, default policy)
BUILTIN_FIELDS: dict[str, tuple[str, str]] = {
    "title": ("Title", EMBED),
    "heading_path": ("Section", EMBED),
    "file_name": ("File", RETRIEVE),
    "url": ("URL", RETRIEVE),
    "author": ("Author", RETRIEVE),
    "tags": ("Tags", RETRIEVE),
    "version": ("Version", RETRIEVE),
    # A record's date (kb/dates.py), found in its text unless an editor sets it:
    # embedded, it tells apart reports that share a title (issue #29).
    "date": ("Date", EMBED),
    "deprecated": ("Deprecated", RETRIEVE),
    "section_id": ("Section id", RETRIEVE),
    "chunk_index": ("Chunk", RETRIEVE),
    "total_chunks": ("Total chunks", RETRIEVE),
}
# Fields that decide what is searched, not what a chunk says: always stored.
CONTROL_FIELDS = ("deprecated",)
# Source-level fields editors fill in (title and file name have their own columns).
SOURCE_FIELDS = ["url", "author", "tags", "version", "deprecated"]
# Built-in fields found in the text, which an editor may set as key=value instead.
FOUND_FIELDS = ("date",)
FREE_FIELD_DEFAULT = RETRIEVE
HEADING_CHARS = 80  # per heading in an embedded heading path


def current_sql(alias: str) -> str:
    """SQL condition on `alias`.metadata: not marked deprecated."""
    return f"NOT {deprecated_sql(alias)}"


def deprecated_sql(alias: str) -> str:
    """SQL condition on `alias`.metadata: marked deprecated (the condition of
    the partial index source_deprecated, kb.models.Source)."""
    return f"""{alias}.metadata @> '{{"deprecated": true}}'"""


@dataclass(frozen=True)
class Policy:
    """The effective policy of a collection: every known field has a decision."""

    decisions: dict[str, str]

    @classmethod
    def build(cls, overrides: dict[str, str], free_keys: list[str] = ()) -> Policy:
        decisions = {name: default for name, (_, default) in BUILTIN_FIELDS.items()}
        decisions.update({key: FREE_FIELD_DEFAULT for key in free_keys})
        decisions.update(
            {k: v for k, v in overrides.items() if v in (EMBED, RETRIEVE, IGNORE)}
        )
        return cls(decisions)

    def of(self, field: str) -> str:
        return self.decisions.get(field, FREE_FIELD_DEFAULT)

    def prefix(self, values: dict[str, Any]) -> str:
        """The lines put in front of a chunk's own text before it is embedded."""
        lines = []
        path = values.get("heading_path") or ""
        for field, value in values.items():
            if self.of(field) != EMBED or _is_empty(value):
                continue
            if (
                field == "title"
                and self.of("heading_path") == EMBED
                and (path == value or path.startswith(f"{value} > "))
            ):
                continue  # the heading path already starts with the title
            if field == "heading_path":
                lines.append(_short_path(str(value)))
            elif field == "date":
                lines.append(f"{label(field)}: {dates.spoken(str(value))}")
            else:
                lines.append(f"{label(field)}: {_format(value)}")
        return "\n".join(lines) + "\n\n" if lines else ""

    def shortens_heading(self, values: dict[str, Any]) -> bool:
        """Whether the prefix cuts a heading of the chunk's path to HEADING_CHARS
        (counted in the source's statistics: the model does not read it whole)."""
        path = str(values.get("heading_path") or "")
        return self.of("heading_path") == EMBED and _short_path(path) != path

    def retrieved(self, values: dict[str, Any]) -> dict[str, Any]:
        """The fields stored on the chunk and returned with results; a deprecated
        source's flag whatever its policy: the searches read it on every chunk
        to keep the source out of answers (current_sql)."""
        return {
            k: v
            for k, v in values.items()
            if (self.of(k) in (EMBED, RETRIEVE) or k in CONTROL_FIELDS)
            and not _is_empty(v)
        }


def _short_path(path: str) -> str:
    """A heading path for the prefix, each heading cut to HEADING_CHARS.

    A "heading" can be a long line (a paragraph underlined with === is a setext
    heading); only the prefix is shortened, never the chunk's own text.
    """
    parts = [
        p if len(p) <= HEADING_CHARS else p[: HEADING_CHARS - 1].rstrip() + "…"
        for p in path.split(" > ")
    ]
    return " > ".join(parts)


def label(field: str) -> str:
    if field in BUILTIN_FIELDS:
        return BUILTIN_FIELDS[field][0]
    return field.replace("_", " ").capitalize()


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value is False


def _format(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if value is True:
        return "yes"
    return str(value)


def chunk_values(
    *,
    title: str,
    file_name: str,
    source_metadata: dict[str, Any],
    heading_path: str,
    section_id: int | str,
    chunk_index: int,
    total_chunks: int,
    found_date: str = "",
) -> dict[str, Any]:
    """Every metadata value a chunk has, before the policy decides; the date
    found in the document's text stands unless the source's metadata has one."""
    values: dict[str, Any] = {"title": title, "heading_path": heading_path}
    if found_date:
        values["date"] = found_date
    for key, value in source_metadata.items():
        if key == "date":  # an editor's "6 Sept 2022" is searched as 2022-09-06
            value = dates.first_date(str(value)) or value
        if key not in ("title", "heading_path"):
            values[key] = value
    values.update(
        file_name=file_name,
        section_id=section_id,
        chunk_index=chunk_index,
        total_chunks=total_chunks,
    )
    return values
