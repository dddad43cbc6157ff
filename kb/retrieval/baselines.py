"""The baselines the tuned pipeline is measured against (issue #17), and the
strategy names runs record: "sections" (the best SECTIONS_K sections whole,
structure-first chunks of SECTIONS_CHUNK_TOKENS) and "fixed" (fixed-size chunks,
the top k as they are).
"""

from __future__ import annotations

from django.db import connection

from kb.models import Chunk, Collection
from kb.retrieval.passages import (
    Hit,
    Location,
    Passage,
    TextWindow,
    context_tokens,
    cut_to_tokens,
)
from kb.retrieval.rows import with_lead
from kb.retrieval.sections import chunk_indexes

# Retrieval strategies by name, as kb_eval, the dashboard and runs record them:
# "default" (the pipeline, pipeline.py, over structure-first chunks), "sections" (the
# strongest simple baseline below) and "fixed" (fixed-size chunks, top k as they
# are; Collection.Strategy.FIXED).
DEFAULT, SECTIONS, FIXED = "default", "sections", "fixed"
STRATEGIES = (DEFAULT, SECTIONS, FIXED)
SECTIONS_CHUNK_TOKENS = 120  # the baseline's structure-first chunk budget
SECTIONS_HITS = 20  # chunk hits grouped by section
SECTIONS_K = 3  # whole sections handed on, best first
FIXED_CHUNK_TOKENS = 800  # the fixed-size baseline's chunk budget

_BASELINE_SECTIONS = """
SELECT t.id, t.source_id, s.title, s.file_name, t.heading_path, t.start, t."end",
       substr(t.body, 1, %(chars)s)
FROM kb_section t JOIN kb_source s ON s.id = t.source_id
WHERE t.id = ANY(%(ids)s)
"""


def strategy_of(collection: Collection, strategy: str | None = None) -> str:
    """The strategy name a run over this collection records."""
    if strategy:
        return strategy
    fixed = collection.chunk_strategy == Collection.Strategy.FIXED
    return FIXED if fixed else DEFAULT


def sections_baseline(
    hits: list[Hit], budget: int, k: int = SECTIONS_K
) -> list[Passage]:
    """The strongest simple baseline: the top SECTIONS_HITS chunk hits grouped by
    section (a section ranks by its best hit), the best k sections whole, in rank
    order, the last one that does not fit cut to the budget (from its start)."""
    ranked: dict[int, list[Hit]] = {}
    for hit in hits[:SECTIONS_HITS]:
        ranked.setdefault(hit.section_id, []).append(hit)
    best = list(ranked.items())[:k]
    if not best:
        return []
    with connection.cursor() as cursor:
        # A token is at least one character: no longer section text can fit.
        params = {"ids": [sid for sid, _ in best], "chars": budget * 40}
        cursor.execute(_BASELINE_SECTIONS, params)
        rows = {row[0]: row for row in cursor.fetchall()}
    indexes = chunk_indexes(list(rows))
    passages, remaining = [], budget
    for section_id, section_hits in best:
        if section_id not in rows or remaining <= 0:
            continue
        _, source_id, title, file_name, path, start, end, body = rows[section_id]
        text = cut_to_tokens(body, remaining)
        if not text.strip():
            continue
        end = start + len(text)
        remaining -= context_tokens(text)
        passages.append(
            Passage(
                source_id=source_id,
                source_title=title,
                file_name=file_name,
                start=start,
                end=end,
                text=text,
                score=section_hits[0].score,
                matched={h.matched for h in section_hits},
                locations=[
                    Location(section_id, path, start, end, indexes.get(section_id, []))
                ],
            )
        )
    # Sections of one source that touch merge (passages.merge): they read one text.
    parts: dict[int, list[tuple[int, str]]] = {}
    for p in passages:
        parts.setdefault(p.source_id, []).append((p.start, p.text))
    for p in passages:
        p.source_text = TextWindow(parts[p.source_id])
    return passages


# --- the fixed-size baseline ------------------------------------------------


def chunk_passages(hits: list[Hit]) -> list[Passage]:
    """Each hit's chunk as a passage of its own, in the hits' order."""
    chunks = (
        Chunk.objects.select_related("source", "section")
        .defer(
            "embedding",
            "source__text",
            "source__stats",
            "section__embedding",
            "section__body",
        )
        .in_bulk([h.chunk_id for h in hits])
    )
    # A fixed-size chunk can reach across sections: its own text and lead cover it.
    parts: dict[int, list[tuple[int, str]]] = {}
    for chunk in chunks.values():
        parts.setdefault(chunk.source_id, []).append(with_lead(chunk))
    texts = {source_id: TextWindow(found) for source_id, found in parts.items()}
    passages = []
    for hit in hits:
        chunk = chunks[hit.chunk_id]
        location = Location(
            chunk.section_id,
            chunk.section.heading_path,
            chunk.start,
            chunk.end,
            [chunk.chunk_index],
        )
        passages.append(
            Passage(
                source_id=chunk.source_id,
                source_title=chunk.source.title,
                file_name=chunk.source.file_name,
                start=chunk.start,
                end=chunk.end,
                text=chunk.text,
                score=hit.score,
                matched={hit.matched},
                locations=[location],
                metadata=dict(chunk.metadata),
                source_text=texts[chunk.source_id],
            )
        )
    return passages


def within_budget(passages: list[Passage], budget: int) -> list[Passage]:
    """The first passages within `budget` tokens (the first always)."""
    kept, used = [], 0
    for passage in passages:
        tokens = context_tokens(passage.text)
        if kept and used + tokens > budget:
            break
        kept.append(passage)
        used += tokens
    return kept
