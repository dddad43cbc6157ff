"""Choosing sections: the k best sections by their best hit (at most SIBLINGS
under one parent heading), loaded as expansion reads them: a section short
enough whole, a longer one as windows of chunks around its hits, the header
lines of tables those windows start inside; and, with budget left after
expansion, the section just before each one taken whole.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.db import connection

from kb.chunking import ChunkKind
from kb.retrieval.expansion import HIT_CHUNKS, is_keyword_seed, section_passage
from kb.retrieval.passages import Hit, Passage, TextWindow
from kb.retrieval.rows import (
    MAX_WHOLE_SECTION_TOKENS,
    ChunkRow,
    SectionRow,
    Selected,
    is_long,
    lead_start,
    with_lead,
)
from kb.retrieval.tables import FirstRow, mid_table_start, table_headers

WINDOW_CHUNKS = 8  # chunks loaded around a hit of a section too long to take whole
SIBLINGS = 3  # of the k sections, at most this many under one parent heading

_SECTION_COLUMNS = """
t.id, t.source_id, s.title, s.file_name, t.heading_path, t."order", t.start, t."end",
t.tokens, CASE WHEN t.tokens <= %(whole)s THEN t.body ELSE '' END
"""
# The chosen sections, then the one before each (UNION ALL: each half uses an index).
_SECTIONS = f"""
SELECT {_SECTION_COLUMNS}, true FROM kb_section t JOIN kb_source s ON s.id = t.source_id
WHERE t.id = ANY(%(ids)s)
UNION ALL
SELECT {_SECTION_COLUMNS}, false FROM kb_section chosen
JOIN kb_section t ON t.source_id = chosen.source_id AND t."order" = chosen."order" - 1
JOIN kb_source s ON s.id = t.source_id
WHERE chosen.id = ANY(%(ids)s)
"""
_CHUNK_COLUMNS = """
c.id, c.section_id, c.source_id, c.chunk_index, c.start, c."end", c.text_tokens,
c.text, c.lead, c.kind, CASE WHEN c.id = ANY(%(best)s) THEN c.metadata::text END
"""
# Every chunk of a section read whole, windows of chunks of a long one; the
# metadata of each section's best hit.
_CHUNKS = f"""
SELECT {_CHUNK_COLUMNS} FROM kb_chunk c WHERE c.section_id = ANY(%(whole)s)
UNION ALL
SELECT {_CHUNK_COLUMNS} FROM kb_chunk c
JOIN unnest(%(window_sections)s::bigint[], %(window_starts)s::int[],
            %(window_ends)s::int[]) AS w(section_id, first, last)
    ON c.section_id = w.section_id AND c.chunk_index BETWEEN w.first AND w.last
ORDER BY chunk_index
"""


def select(
    hits: list[Hit],
    k: int,
    named: list[list[str]] = (),
    records: set[int] = frozenset(),
    holders: set[int] = frozenset(),
) -> list[Selected]:
    """The k best sections by their best hit; each keeps all of its hits. When
    the question compares two things (`named`, question.named_terms), the best
    section headed by each comes first. When it asks which of several records
    something holds for, `records` are the candidate sources that are records
    (search.records): the best section of each comes first, those of the
    records holding the question's rarest word (`holders`, section ids,
    search.rarest_holders) before the others.

    Reads no whole source: a section that can be taken whole brings its body, a
    longer one the chunks (and the text between them) around its best hits.
    """
    by_section: dict[int, list[Hit]] = {}
    for hit in hits:
        by_section.setdefault(hit.section_id, []).append(hit)
    # A section ranks by its best hit: summing hits favoured long tables (issue #7).
    best = sorted(by_section.items(), key=lambda kv: -kv[1][0].score)
    best = diverse(_named_first(best, named), k)
    best = _each_record(best, records, k, holders)[:k]
    sections, before = _sections([sid for sid, _ in best])
    parts: dict[int, list[tuple[int, str]]] = {}
    for section in [*sections.values(), *before.values()]:
        if not is_long(section):
            parts.setdefault(section.source_id, []).append(
                (section.start, section.body)
            )
    chunks: dict[int, list[ChunkRow]] = {}
    metadata: dict[int, dict[str, Any]] = {}
    for *columns, found in _chunk_rows(best, sections):
        chunk = ChunkRow(*columns)
        chunks.setdefault(chunk.section_id, []).append(chunk)
        if found is not None:
            metadata[chunk.id] = json.loads(found)
        if is_long(sections[chunk.section_id]):
            parts.setdefault(chunk.source_id, []).append(with_lead(chunk))
    first_rows = _first_rows(chunks, sections)
    for row in first_rows.values():  # their leads hold the header lines
        parts.setdefault(row.source_id, []).append((lead_start(row), row.lead))
    texts = {source_id: TextWindow(found) for source_id, found in parts.items()}
    return [
        Selected(
            section,
            section_hits,
            section_hits[0].score,
            chunks.get(sid, []),
            texts.get(section.source_id, TextWindow()),
            before.get((section.source_id, section.order - 1)),
            metadata.get(section_hits[0].chunk_id) or {},
            headers=table_headers(chunks.get(sid, []), first_rows),
        )
        for sid, section_hits in best
        if (section := sections.get(sid)) is not None
    ]


# For windows of long sections that start mid-table: the table's first row (the
# nearest earlier chunk that is not a row continuing a table), if it is a row.
_FIRST_ROWS = f"""
SELECT w.section_id, w.chunk_index, f.source_id, f.start, f.lead
FROM unnest(%(sections)s::bigint[], %(indexes)s::int[]) AS w(section_id, chunk_index)
CROSS JOIN LATERAL (
    SELECT c.kind, c.source_id, c.start, c.lead FROM kb_chunk c
    WHERE c.section_id = w.section_id AND c.chunk_index < w.chunk_index
      AND (c.kind <> '{ChunkKind.TABLE_ROW}' OR btrim(c.lead, E' \\t\\n') <> '')
    ORDER BY c.chunk_index DESC LIMIT 1
) f
WHERE f.kind = '{ChunkKind.TABLE_ROW}'
"""


def _first_rows(
    chunks: dict[int, list[ChunkRow]], sections: dict[int, SectionRow]
) -> dict[tuple[int, int], FirstRow]:
    """The first rows of the tables that windows of long sections start inside,
    by (section id, chunk index) of the window's first chunk: their leads hold
    the header lines (tables.table_headers)."""
    starts = [
        (c.section_id, c.chunk_index)
        for section_id, loaded in chunks.items()
        if is_long(sections[section_id])
        for i, c in enumerate(loaded)
        if mid_table_start(loaded, i)
    ]
    if not starts:
        return {}
    params = {"sections": [s for s, _ in starts], "indexes": [i for _, i in starts]}
    with connection.cursor() as cursor:
        cursor.execute(_FIRST_ROWS, params)
        return {(s, i): FirstRow(*rest) for s, i, *rest in cursor.fetchall()}


def _sections(
    ids: list[int],
) -> tuple[dict[int, SectionRow], dict[tuple[int, int], SectionRow]]:
    """The sections by id, and the section before each by (source id, order);
    bodies only of sections short enough to read whole."""
    params = {"ids": ids, "whole": MAX_WHOLE_SECTION_TOKENS}
    with connection.cursor() as cursor:
        cursor.execute(_SECTIONS, params)
        rows = cursor.fetchall()
    sections: dict[int, SectionRow] = {}
    before: dict[tuple[int, int], SectionRow] = {}
    for *columns, chosen in rows:
        row = SectionRow(*columns)
        if chosen:
            sections[row.id] = row
        else:
            before[row.source_id, row.order] = row
    return sections, before


def _chunk_rows(best: list[tuple[int, list[Hit]]], sections: dict) -> list[tuple]:
    """All chunks of a section that fits the budget, else windows around its hits.

    Sections of unstructured text can hold hundreds of chunks; no context budget
    reaches further than WINDOW_CHUNKS from a hit that gets a seat (step 2 of
    expansion.expand).
    """
    whole: list[int] = []
    windows: list[tuple[int, int, int]] = []  # section id, first and last index
    for section_id, hits in best:
        section = sections.get(section_id)
        if section is None:
            continue
        if not is_long(section):
            whole.append(section_id)
            continue
        seeds = {h.chunk_index for h in hits[:HIT_CHUNKS]}
        seeds |= {h.chunk_index for h in hits if is_keyword_seed(h)}
        near = {
            i
            for centre in seeds
            for i in range(centre - WINDOW_CHUNKS, centre + WINDOW_CHUNKS + 1)
        }
        for first, last in _runs(sorted(near)):
            windows.append((section_id, first, last))
    params = {
        "best": [h[0].chunk_id for _, h in best],
        "whole": whole,
        "window_sections": [w[0] for w in windows],
        "window_starts": [w[1] for w in windows],
        "window_ends": [w[2] for w in windows],
    }
    with connection.cursor() as cursor:
        cursor.execute(_CHUNKS, params)
        return cursor.fetchall()


def diverse(ranked: list[tuple[int, list[Hit]]], k: int) -> list[tuple[int, list[Hit]]]:
    """At most SIBLINGS of the top k sections under one parent heading.

    Sibling sections ("Vision", "Dental", "Medical Insurance") are alike and rank
    together; a question about two things lost its second part behind them
    (issue #7). Sections past the cap move behind the others, not out.
    """
    pool = ranked[: k * 4]
    seen: dict[str, int] = {}
    first, later = [], []
    for sid, hits in pool:
        path = hits[0].heading_path
        parent = path.rsplit(" > ", 1)[0] if " > " in path else None
        if parent is not None:
            seen[parent] = seen.get(parent, 0) + 1
        crowded = parent is not None and seen[parent] > SIBLINGS
        (later if crowded else first).append((sid, hits))
    return first + later + ranked[k * 4 :]


def _each_record(
    ranked: list[tuple[int, list[Hit]]],
    records: set[int],
    k: int,
    holders: set[int] = frozenset(),
) -> list[tuple[int, list[Hit]]]:
    """The best section of each record among the first k * 4 candidates first,
    in their order, then the others: "Which incidents involved a LimitRange?"
    is answered by one section of each report that names one, not by five of
    the report that names it most (issue #29). Nothing moves without records."""
    if len(records) < 2:
        return ranked
    pool = ranked[: k * 4]
    seen: set[int] = set()
    first, later = [], []
    for sid, hits in pool:
        source = hits[0].source_id
        (later if source in seen or source not in records else first).append(
            (sid, hits)
        )
        seen.add(source)
    if holders:  # stable: in their order among themselves
        first.sort(key=lambda item: item[0] not in holders)
    return first + later + ranked[k * 4 :]


def _named_first(
    ranked: list[tuple[int, list[Hit]]], named: list[list[str]]
) -> list[tuple[int, list[Hit]]]:
    """The best section headed by each compared thing first ("Taint or
    toleration?": the "Taint" entry and the "Toleration" entry), when every one
    of them heads a section among the candidates; else the order as it is."""
    if len(named) < 2:
        return ranked
    chosen: list[int] = []
    for words in named:
        found = next(
            (
                i
                for i, (_, hits) in enumerate(ranked)
                if i not in chosen and _heads(hits[0].heading_path, words)
            ),
            None,
        )
        if found is None:
            return ranked
        chosen.append(found)
    chosen.sort()
    return [ranked[i] for i in chosen] + [
        item for i, item in enumerate(ranked) if i not in chosen
    ]


def _heads(path: str, words: list[str]) -> bool:
    """Whether the section's own heading names the thing (one of `words`, as a
    whole word or the heading's start: "isBlank" heads "isBlank(CharSequence)")."""
    heading = path.rsplit(" > ", 1)[-1].casefold()
    return any(
        re.search(rf"(?<!\w){re.escape(w.casefold())}(?!\w)", heading) for w in words
    )


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    """Sorted integers as (first, last) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def preceding(kept: list[Selected], remaining: int) -> list[Passage]:
    """With budget left, the section just before each chosen one, whole.

    A rule is usually stated before its exceptions and details: a hit in "Paging
    exceptions" or "Rollback exceptions" needs the rule above it. The passage
    merges with the chosen one (both whole, they touch), so k is unchanged.
    """
    chosen = {item.section.id for item in kept}
    taken: list[tuple[Selected, SectionRow]] = []
    for item in kept:
        section = item.before
        if section is None or section.id in chosen or not section.tokens:
            continue
        if section.tokens > remaining or is_long(section):
            continue
        remaining -= section.tokens
        chosen.add(section.id)
        taken.append((item, section))
    indexes = chunk_indexes([section.id for _, section in taken])
    added = []
    for item, section in taken:
        context = Selected(section, item.hits[:1], item.score * 0.5, text=item.text)
        passage = section_passage(
            context,
            section.start,
            section.end,
            indexes.get(section.id, []),
            section.tokens,
        )
        passage.matched = {"context"}
        added.append(passage)
    return added


def chunk_indexes(section_ids: list[int]) -> dict[int, list[int]]:
    """Each section's chunk indexes, in one query."""
    if not section_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT section_id, array_agg(chunk_index ORDER BY chunk_index) "
            "FROM kb_chunk WHERE section_id = ANY(%s) GROUP BY section_id",
            [section_ids],
        )
        return dict(cursor.fetchall())
