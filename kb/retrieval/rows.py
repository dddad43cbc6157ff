"""What the sections stage loads and expansion reads: a section's row, its
chunks' rows, and a section chosen for the context with the chunks that brought
it there.

Pure: no database here (tests/test_retrieval_stages.py checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kb.retrieval.passages import Hit, TextWindow

MAX_WHOLE_SECTION_TOKENS = 4000  # longer sections load only a window of chunks


class SectionRow(NamedTuple):
    """The columns of a section (and its source) that expansion and citation read."""

    id: int
    source_id: int
    source_title: str
    file_name: str
    heading_path: str
    order: int
    start: int
    end: int
    tokens: int
    body: str  # "" for a section too long to read whole (is_long)


class ChunkRow(NamedTuple):
    """The columns of a chunk that expansion and citation read."""

    id: int
    section_id: int
    source_id: int
    chunk_index: int
    start: int
    end: int
    text_tokens: int
    text: str
    lead: str
    kind: str


@dataclass
class Selected:
    """A section chosen for the context and the chunks that brought it there."""

    section: SectionRow
    hits: list[Hit]
    score: float
    chunks: list[ChunkRow] = field(default_factory=list)
    text: TextWindow = field(default_factory=TextWindow)  # the loaded source text
    before: SectionRow | None = None  # the section just before it in the source
    metadata: dict[str, Any] = field(default_factory=dict)  # of its best hit
    region_tokens: dict[tuple[int, int], int] = field(default_factory=dict)
    # chunk position -> (start, end) of the header line of the table it is a row of
    headers: dict[int, tuple[int, int]] = field(default_factory=dict)


def is_long(section: SectionRow) -> bool:
    """Too long to load whole: retrieval reads a window of its chunks."""
    return section.tokens > MAX_WHOLE_SECTION_TOKENS


def with_lead(chunk) -> tuple[int, str]:
    """(start, text) of a chunk with the text between it and its predecessor."""
    return lead_start(chunk), chunk.lead + chunk.text


def lead_start(chunk) -> int:
    """Where the text between a chunk and its predecessor (its lead) starts."""
    return chunk.start - len(chunk.lead)


def next_to(chunks: list[ChunkRow], j: int, i: int) -> bool:
    """Whether loaded chunk j exists and directly neighbours loaded chunk i.

    Loaded chunks of a long section come in windows with gaps between them.
    """
    return (
        0 <= j < len(chunks) and abs(chunks[j].chunk_index - chunks[i].chunk_index) == 1
    )
