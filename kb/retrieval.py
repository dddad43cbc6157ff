"""Question -> the context handed to the answerer: search small, answer big.

1. Embed the question; take the nearest chunks by cosine (pgvector) and the best
   keyword matches (PostgreSQL full-text search), wide.
2. Fuse both rankings with reciprocal rank fusion; apply metadata filters.
3. Group hits by section, keeping each section's best score; take the top k.
4. Expand each to its whole section when the token budget allows, otherwise to the
   neighbourhood of its hits (adjacent chunks, nearest first).
5. Merge passages of one source that overlap or touch, keeping every location.
"""

from __future__ import annotations

import bisect
import json
import re
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from pgvector import Vector

from kb import embedding, keywords, metadata, reranking
from kb.models import Chunk, Collection

CANDIDATES = 80  # chunks taken from each ranking before fusion
RRF_K = 60  # reciprocal rank fusion constant (Cormack et al.)
# Keyword ranks count less than vector ranks (chosen by evaluation, see issue #7).
KEYWORD_WEIGHT = 0.3
MAX_WHOLE_SECTION_TOKENS = 4000  # longer sections load only a window of chunks
WINDOW_CHUNKS = 8  # chunks loaded around a hit of a section too long to take whole
PRECEDING_CONTEXT = True  # the section before a whole chosen one, if budget is left
HNSW_EF_SEARCH = 100
# Collections of fewer chunks are searched exactly, without the HNSW index
# (searched_exactly, issue #15). Exact costs about 2-5 us per chunk (20,160
# chunks: 107 ms); a filtered HNSW scan about ef_search x (all chunks / the
# collection's) tuples (504 chunks beside 40,000: 38 ms, and some searches ended
# at hnsw.max_scan_tuples with no rows). They cross near 2,000 chunks beside
# 40,000 and 10,000 beside a million; exact also never comes back short.
# The threshold is settings.KB_EXACT_SEARCH_CHUNKS (5,000).
HIT_CHUNKS = 4  # hit chunks per section taken before expansion (issue #7)
# The collection's best keyword match is taken with its section's best chunk.
KEYWORD_SEED = 1
SIBLINGS = 3  # of the k sections, at most this many under one parent heading
MAX_QUESTION_CHARS = 1000


class QuestionError(ValueError):
    """The question cannot be asked as given (empty, too long)."""


@dataclass
class Hit:
    chunk_id: int
    source_id: int
    section_id: int
    chunk_index: int
    start: int
    end: int
    vector_rank: int | None = None
    keyword_rank: int | None = None
    score: float = 0.0
    heading_path: str = ""

    @property
    def matched(self) -> str:
        if self.vector_rank is not None and self.keyword_rank is not None:
            return "both"
        return "vector" if self.vector_rank is not None else "keyword"


@dataclass
class Location:
    """One original place a passage stands for: exact enough to cite."""

    section_id: int
    heading_path: str
    start: int
    end: int
    chunk_indexes: list[int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "section_id": self.section_id,
            "heading_path": self.heading_path,
            "start": self.start,
            "end": self.end,
            "chunk_indexes": self.chunk_indexes,
        }


class TextWindow:
    """The parts of a source's text retrieval read, sliced by offsets into the whole.

    Built from section bodies, which tile the document: a source can be one long
    document, and loading all of it for a few sections cost more than the search
    (issue #8). Slicing outside the loaded parts raises IndexError.
    """

    def __init__(self, parts: Iterable[tuple[int, str]] = ()) -> None:
        self.parts: list[tuple[int, str]] = []
        for start, text in sorted(parts):
            if self.parts:
                last_start, last = self.parts[-1]
                if start <= last_start + len(last):
                    tail = text[last_start + len(last) - start :]
                    self.parts[-1] = (last_start, last + tail)
                    continue
            self.parts.append((start, text))
        self._starts = [start for start, _ in self.parts]

    def __getitem__(self, key: slice) -> str:
        lo, hi = key.start, key.stop
        i = bisect.bisect_right(self._starts, lo) - 1
        if i >= 0:
            start, text = self.parts[i]
            if hi <= start + len(text):
                return text[lo - start : hi - start]
        raise IndexError(f"{lo}:{hi} of the source was not loaded")


def heading_label(source_title: str, heading_path: str) -> str:
    """Source › heading path, without the title twice (paths start with it)."""
    path = heading_path.replace(" > ", " › ")
    if heading_path.split(" > ")[0] == source_title:
        return path
    return f"{source_title} › {path}"


@dataclass
class Passage:
    source_id: int
    source_title: str
    file_name: str
    start: int
    end: int
    text: str
    score: float
    matched: set[str]
    locations: list[Location]
    tokens: int = 0
    rank: int = 0  # 1-based position in the context
    metadata: dict[str, Any] = field(default_factory=dict)
    source_text: TextWindow = field(default_factory=TextWindow, repr=False)

    @property
    def heading_path(self) -> str:
        return self.locations[0].heading_path if self.locations else ""

    @property
    def label(self) -> str:
        return heading_label(self.source_title, self.heading_path)

    @property
    def chunk_indexes(self) -> list[int]:
        return sorted({i for loc in self.locations for i in loc.chunk_indexes})

    @property
    def matched_label(self) -> str:
        # A table's header line merged into a passage says nothing of how it matched.
        matched = self.matched - {"header"} or self.matched
        return (
            "both"
            if "both" in matched or len(matched) > 1
            else (next(iter(matched), ""))
        )

    @property
    def is_header(self) -> bool:
        """Only a table's header line, for the rows after it (_regions)."""
        return self.matched == {"header"}

    @property
    def sections_merged(self) -> int:
        return len({loc.section_id for loc in self.locations})

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.rank,
            "source_id": self.source_id,
            "source": self.source_title,
            "file": self.file_name,
            "heading_path": self.heading_path,
            "chunk_indexes": self.chunk_indexes,
            "start": self.start,
            "end": self.end,
            "score": round(self.score, 5),
            "matched": self.matched_label,
            "tokens": self.tokens,
            "text": self.text,
            "locations": [loc.as_dict() for loc in self.locations],
            "metadata": self.metadata,
        }


@dataclass
class Result:
    question: str
    passages: list[Passage]
    context_tokens: int
    budget_tokens: int
    k: int
    mode: str
    timings_ms: dict[str, float]
    hits: list[Hit] = field(default_factory=list)
    # Cosine similarity of the nearest chunk to the question (None without vector
    # search): how close the collection comes to the question at all.
    top_similarity: float | None = None
    # What the cross-encoder did to the top sections (None: no reranker set).
    reranking: reranking.Report | None = None
    # The question's embedding (None without vector search): the question log keeps
    # it to group similar questions (kb/questions.py).
    vector: Any = field(default=None, repr=False)


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
    body: str  # "" for a section too long to read whole (_long)


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
class _Selected:
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


_SURROGATE_RE = re.compile("[\\ud800-\\udfff]")


def clean_question(question: str) -> str:
    question = " ".join((question or "").split())
    if not question:
        raise QuestionError("Please type a question.")
    if "\x00" in question:  # PostgreSQL text cannot hold it
        raise QuestionError(
            "The question contains a NUL character (\\x00); remove it and ask again."
        )
    if _SURROGATE_RE.search(question):  # from JSON's "\ud800": no UTF-8 for it
        raise QuestionError(
            "The question contains a lone surrogate (such as \\ud800), which is "
            "no character; remove it and ask again."
        )
    if len(question) > MAX_QUESTION_CHARS:
        raise QuestionError(
            f"The question is {len(question)} characters long; the limit is "
            f"{MAX_QUESTION_CHARS}. Ask about one thing at a time."
        )
    return question


def retrieve(
    collection: Collection,
    question: str,
    *,
    k: int | None = None,
    budget: int | None = None,
    mode: str | None = None,
    include_deprecated: bool = False,
    strategy: str | None = None,
) -> Result:
    """`strategy` "sections": the simple baseline's packing (sections_baseline)
    instead of the default's; "default" or None: as the collection is set up."""
    question = clean_question(question)
    k = k or collection.top_k
    budget = budget or collection.context_budget
    mode = mode or collection.retrieval_mode
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    vector = None
    vector_ids: list[int] = []
    similarity: float | None = None
    section_ranks: dict[int, int] = {}
    if mode in ("vector", "hybrid"):
        vector = _embed_question(question)
        clock = _lap(timings, "embed", clock)
        with hnsw_scan(collection):
            vector_ids, similarity = _vector_ids(collection, vector, include_deprecated)
            clock = _lap(timings, "vector_search", clock)
            section_ranks = _section_ranks(collection, vector, include_deprecated)
            clock = _lap(timings, "section_search", clock)
    keyword_ids: list[int] = []
    if mode in ("keyword", "hybrid"):
        keyword_ids = keywords.search(
            collection, question, CANDIDATES, include_deprecated=include_deprecated
        )
        clock = _lap(timings, "keyword_search", clock)

    hits = _fuse(vector_ids, keyword_ids, section_ranks)
    reranked: reranking.Report | None = None
    if strategy == SECTIONS:
        passages = _merge(sections_baseline(hits, budget))
    elif collection.chunk_strategy == Collection.Strategy.FIXED:
        # The baseline as commonly built: the top-k chunks as they are, no expansion,
        # held to the same context budget (the first chunk always goes in).
        passages = _merge(_within_budget(_chunk_passages(hits[:k]), budget))
    else:
        selected = _select_sections(hits, reranking.pool_size(k))
        selected, reranked = reranking.rerank_sections(question, selected, k)
        passages = _merge(_expand(selected, budget))
    for rank, passage in enumerate(passages, 1):
        passage.rank = rank
        passage.tokens = _tokens(passage.text)  # exact, after merging
    _lap(timings, "expand", clock)
    if reranked:  # its own entry, out of "expand"
        timings["rerank"] = reranked.ms
        timings["expand"] -= reranked.ms
    timings["total"] = sum(timings.values())
    return Result(
        question=question,
        passages=passages,
        context_tokens=sum(p.tokens for p in passages),
        budget_tokens=budget,
        k=k,
        mode=mode,
        timings_ms={key: round(v, 2) for key, v in timings.items()},
        hits=hits,
        top_similarity=similarity,
        reranking=reranked,
        vector=vector,
    )


def _lap(timings: dict[str, float], name: str, since: float) -> float:
    now = time.perf_counter()
    timings[name] = (now - since) * 1000
    return now


def check_question(question: str) -> str:
    """The question as asked, or QuestionError for one the ask path refuses:
    empty, too long, or over the model's window (golden cases are checked so)."""
    question = clean_question(question)
    _check_window(question)
    return question


def _check_window(question: str) -> None:
    embedder = embedding.get_embedder()
    count = embedder.count_tokens(question)
    if count > embedder.window:
        raise QuestionError(
            f"The question has {count} tokens; the model reads {embedder.window}."
        )


def _embed_question(question: str):
    _check_window(question)
    return embedding.get_embedder().embed([question], origins=["the question"])[0]


# Hot path (issue #8): plain SQL, as ORM query building cost more than the queries.
# The collection's sources as an array: a filter on the row itself, which the
# HNSW scan checks without a join, and an index condition for the exact search.
_CHUNK_DISTANCES = """
SELECT c.id, c.embedding <=> %(vector)s::vector AS distance FROM kb_chunk c
WHERE c.source_id = ANY(ARRAY(
        SELECT s.id FROM kb_source s WHERE s.collection_id = %(collection)s))
    AND c.embedding IS NOT NULL {current}
"""
_SECTION_DISTANCES = """
SELECT t.id, t.embedding <=> %(vector)s::vector AS distance FROM kb_section t
WHERE t.source_id = ANY(ARRAY(
        SELECT s.id FROM kb_source s WHERE s.collection_id = %(collection)s
        {current}))
    AND t.embedding IS NOT NULL
"""
# Approximate: the HNSW index, read until enough rows pass the collection filter
# (hnsw_scan); relaxed_order can return them slightly out of order, so they are
# sorted again (as pgvector's README advises).
_HNSW_NEAREST = """
WITH nearest AS MATERIALIZED ({distances} ORDER BY distance LIMIT %(limit)s)
SELECT id, distance FROM nearest ORDER BY distance, id
"""
# Exact: every vector of the collection, found through its sources; the planner
# cannot order a materialised CTE by the HNSW index (issue #15).
_EXACT_NEAREST = """
WITH scored AS MATERIALIZED ({distances})
SELECT id, distance FROM scored ORDER BY distance, id LIMIT %(limit)s
"""


@contextmanager
def hnsw_scan(collection: Collection | None = None):
    """A transaction for vector searches: HNSW scans go on reading the graph until
    enough rows pass the collection filter (pgvector 0.8 iterative scans).

    For `collection`, the plan is also fixed by its size, not left to the
    planner, which estimates a collection's rows from its number of sources:
    beside one 20,000-chunk source it read the index for 504 chunks in 24
    sources (vector search 56 ms, exact 8) and sorted a 20,000-chunk collection
    (147 ms, the index 2). Exact: no sequential scan of all collections' rows.
    Above the threshold: no sort, so the index. A collection never counted is
    left to the planner."""
    counted = collection is not None and collection.terms_counted is not None
    exact = counted and searched_exactly(collection)
    index = counted and not exact
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.ef_search', %s, true), "
            "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
            "set_config('enable_seqscan', %s, true), "
            "set_config('enable_sort', %s, true)",
            [str(HNSW_EF_SEARCH), "off" if exact else "on", "off" if index else "on"],
        )
        yield


def searched_exactly(collection: Collection) -> bool:
    """Whether the collection's vectors are compared one by one rather than found
    through the HNSW index, which is shared by all collections: a small one's
    nearest chunks are reached only after the other collections' neighbours
    (532 chunks beside two collections of 20,000: vector search 4.7 -> 66-97 ms,
    issue #15). Sized by the chunk count of the last keyword count (kb.keywords),
    which runs after every ingestion; never counted, the planner chooses."""
    return (
        collection.terms_counted is not None
        and collection.terms_chunks < settings.KB_EXACT_SEARCH_CHUNKS
    )


def nearest_query(
    collection: Collection, vector, include_deprecated: bool = False, sections=False
) -> tuple[str, dict[str, Any]]:
    """The SQL and parameters of the nearest-chunks (or -sections) search, to run
    inside hnsw_scan(collection); the benchmark EXPLAINs the very same statement."""
    sql, table = (_SECTION_DISTANCES, "s") if sections else (_CHUNK_DISTANCES, "c")
    current = "" if include_deprecated else f"AND {metadata.current_sql(table)}"
    plan = _EXACT_NEAREST if searched_exactly(collection) else _HNSW_NEAREST
    params = {
        "collection": collection.pk,
        "vector": Vector._to_db(vector),
        "limit": CANDIDATES,
    }
    return plan.format(distances=sql.format(current=current)), params


def _nearest(
    collection: Collection, vector, include_deprecated: bool, sections: bool = False
) -> list[tuple]:
    query = nearest_query(collection, vector, include_deprecated, sections)
    with connection.cursor() as cursor:
        cursor.execute(*query)
        return cursor.fetchall()


def _vector_ids(
    collection: Collection, vector, include_deprecated: bool
) -> tuple[list[int], float | None]:
    """The chunks nearest to the question vector by cosine, best first, and the
    cosine similarity of the nearest (None when the collection has no vectors)."""
    rows = _nearest(collection, vector, include_deprecated)
    return [row[0] for row in rows], (1.0 - rows[0][1] if rows else None)


def _section_ranks(
    collection: Collection, vector, include_deprecated: bool
) -> dict[int, int]:
    """Sections by the cosine of their centroid (mean of their chunk vectors)."""
    rows = _nearest(collection, vector, include_deprecated, sections=True)
    return {row[0]: rank for rank, row in enumerate(rows, 1)}


_HIT_ROWS = """
SELECT c.id, c.source_id, c.section_id, c.chunk_index, c.start, c."end",
       t.heading_path
FROM kb_chunk c JOIN kb_section t ON t.id = c.section_id
WHERE c.id = ANY(%s)
"""


def _fuse(
    vector_ids: list[int], keyword_ids: list[int], section_ranks: dict[int, int]
) -> list[Hit]:
    """Reciprocal rank fusion of chunk ranks, plus the rank of the chunk's section.

    The section term lifts chunks of sections that are about the question as a
    whole, though no single chunk of theirs ranks high (issue #7's measurements).
    It weighs KB_SECTION_WEIGHT (0.5): at 1.0 the vector model spoke twice, through
    a chunk and through its section, and a chunk both legs found ranked below one
    only the vector leg and its section's centroid put first (issue #17).
    """
    scores: dict[int, dict[str, int]] = {}
    for rank, chunk_id in enumerate(vector_ids, 1):
        scores.setdefault(chunk_id, {})["vector"] = rank
    for rank, chunk_id in enumerate(keyword_ids, 1):
        scores.setdefault(chunk_id, {})["keyword"] = rank
    with connection.cursor() as cursor:
        cursor.execute(_HIT_ROWS, [list(scores)])
        rows = cursor.fetchall()
    section_weight = settings.KB_SECTION_WEIGHT
    hits = []
    for chunk_id, source_id, section_id, index, start, end, path in rows:
        ranks = scores[chunk_id]
        hit = Hit(
            chunk_id=chunk_id,
            source_id=source_id,
            section_id=section_id,
            chunk_index=index,
            start=start,
            end=end,
            vector_rank=ranks.get("vector"),
            keyword_rank=ranks.get("keyword"),
            heading_path=path,
        )
        hit.score = sum(
            (KEYWORD_WEIGHT if kind == "keyword" else 1.0) / (RRF_K + r)
            for kind, r in ranks.items()
        )
        if section_id in section_ranks:
            hit.score += section_weight / (RRF_K + section_ranks[section_id])
        hits.append(hit)
    hits.sort(key=lambda h: (-h.score, h.chunk_id))
    return hits


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
WHERE chosen.id = ANY(%(ids)s) AND %(before)s
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


def _select_sections(hits: list[Hit], k: int) -> list[_Selected]:
    """The k best sections by their best hit; each keeps all of its hits.

    Reads no whole source: a section that can be taken whole brings its body, a
    longer one the chunks (and the text between them) around its best hits.
    """
    by_section: dict[int, list[Hit]] = {}
    for hit in hits:
        by_section.setdefault(hit.section_id, []).append(hit)
    # A section ranks by its best hit: summing hits favoured long tables (issue #7).
    best = sorted(by_section.items(), key=lambda kv: -kv[1][0].score)
    best = _diverse(best, k)[:k]
    sections, before = _sections([sid for sid, _ in best])
    parts: dict[int, list[tuple[int, str]]] = {}
    for section in [*sections.values(), *before.values()]:
        if not _long(section):
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
        if _long(sections[chunk.section_id]):
            parts.setdefault(chunk.source_id, []).append(_with_lead(chunk))
    first_rows = _first_rows(chunks, sections)
    for row in first_rows.values():  # their leads hold the header lines
        parts.setdefault(row.source_id, []).append((_lead_start(row), row.lead))
    texts = {source_id: TextWindow(found) for source_id, found in parts.items()}
    return [
        _Selected(
            section,
            section_hits,
            section_hits[0].score,
            chunks.get(sid, []),
            texts.get(section.source_id, TextWindow()),
            before.get((section.source_id, section.order - 1)),
            metadata.get(section_hits[0].chunk_id) or {},
            headers=_table_headers(chunks.get(sid, []), first_rows),
        )
        for sid, section_hits in best
        if (section := sections.get(sid)) is not None
    ]


# For windows of long sections that start mid-table: the table's first row (the
# nearest earlier chunk that is not a row continuing a table), if it is a row.
_FIRST_ROWS = """
SELECT w.section_id, w.chunk_index, f.source_id, f.start, f.lead
FROM unnest(%(sections)s::bigint[], %(indexes)s::int[]) AS w(section_id, chunk_index)
CROSS JOIN LATERAL (
    SELECT c.kind, c.source_id, c.start, c.lead FROM kb_chunk c
    WHERE c.section_id = w.section_id AND c.chunk_index < w.chunk_index
      AND (c.kind <> 'table_row' OR btrim(c.lead, E' \\t\\n') <> '')
    ORDER BY c.chunk_index DESC LIMIT 1
) f
WHERE f.kind = 'table_row'
"""


class FirstRow(NamedTuple):
    source_id: int
    start: int
    lead: str


def _first_rows(
    chunks: dict[int, list[ChunkRow]], sections: dict[int, SectionRow]
) -> dict[tuple[int, int], FirstRow]:
    """The first rows of the tables that windows of long sections start inside,
    by (section id, chunk index) of the window's first chunk: their leads hold
    the header lines (_table_headers)."""
    starts = [
        (c.section_id, c.chunk_index)
        for section_id, loaded in chunks.items()
        if _long(sections[section_id])
        for i, c in enumerate(loaded)
        if _mid_table_start(loaded, i)
    ]
    if not starts:
        return {}
    params = {"sections": [s for s, _ in starts], "indexes": [i for _, i in starts]}
    with connection.cursor() as cursor:
        cursor.execute(_FIRST_ROWS, params)
        return {(s, i): FirstRow(*rest) for s, i, *rest in cursor.fetchall()}


def _with_lead(chunk) -> tuple[int, str]:
    """(start, text) of a chunk with the text between it and its predecessor."""
    return _lead_start(chunk), chunk.lead + chunk.text


def _lead_start(chunk) -> int:
    """Where the text between a chunk and its predecessor (its lead) starts."""
    return chunk.start - len(chunk.lead)


def _long(section: SectionRow) -> bool:
    """Too long to load whole: retrieval reads a window of its chunks."""
    return section.tokens > MAX_WHOLE_SECTION_TOKENS


def _sections(
    ids: list[int],
) -> tuple[dict[int, SectionRow], dict[tuple[int, int], SectionRow]]:
    """The sections by id, and (with PRECEDING_CONTEXT) the section before each by
    (source id, order); bodies only of sections short enough to read whole."""
    params = {
        "ids": ids,
        "whole": MAX_WHOLE_SECTION_TOKENS,
        "before": PRECEDING_CONTEXT,
    }
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
    reaches further than WINDOW_CHUNKS from a hit that gets a seat (_further_hits).
    """
    whole: list[int] = []
    windows: list[tuple[int, int, int]] = []  # section id, first and last index
    for section_id, hits in best:
        section = sections.get(section_id)
        if section is None:
            continue
        if not _long(section):
            whole.append(section_id)
            continue
        seeds = {h.chunk_index for h in hits[:HIT_CHUNKS]}
        seeds |= {
            h.chunk_index
            for h in hits
            if h.keyword_rank is not None and h.keyword_rank <= KEYWORD_SEED
        }
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


def _diverse(
    ranked: list[tuple[int, list[Hit]]], k: int
) -> list[tuple[int, list[Hit]]]:
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


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    """Sorted integers as (first, last) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _tokens(text: str) -> int:
    """Tokens a passage adds to the context (no [CLS]/[SEP]: it is not embedded)."""
    return max(0, embedding.count_tokens(text) - 2)


def _expand(selected: list[_Selected], budget: int) -> list[Passage]:
    """Hits first, then their sections: whole if they fit, else around the hits.

    1. Every section's best chunk is reserved, in rank order, so a long first
       section cannot starve the others; a section whose best chunk no longer fits
       is dropped.
    2. The sections' other hit chunks go in next, best score first across all
       sections (at most HIT_CHUNKS per section, plus the collection's best keyword
       match): in a long table or list the row that answers is often a strong hit
       far from the section's best one.
    3. The rest of the budget expands in rank order: a section whole when the rest
       of it fits, else the regions around its taken chunks grow by adjacent chunks,
       nearest first.
    """
    kept: list[tuple[_Selected, dict[int, None]]] = []  # item, taken positions
    total = 0
    for item in selected:
        position = {c.id: i for i, c in enumerate(item.chunks)}
        best = position.get(item.hits[0].chunk_id)
        taken = dict.fromkeys([] if best is None else [best])
        cost = _cost(item, taken)
        if total + cost <= budget:
            kept.append((item, taken))
            total += cost
    for _, order, i in sorted(_further_hits(kept)):
        item, taken = kept[order]
        if i in taken:
            continue
        added = _cost(item, {**taken, i: None}) - _cost(item, taken)
        if total + added <= budget:
            taken[i] = None
            total += added
    remaining = budget - total
    # Windows reach whole sentences, over short gaps and back to a paragraph they
    # refer to before any grows by chunks: the evidence is most often right there.
    reached: dict[int, tuple[list[tuple[int, int, list[int]]], int]] = {}
    if settings.KB_WINDOW_GROWTH:
        for order, (item, taken) in enumerate(kept):
            regions = _regions(item.chunks, taken, item.headers)
            reached[order] = _reach(item, regions, remaining)
            remaining -= reached[order][1]
    passages: list[Passage] = []
    for order, (item, taken) in enumerate(kept):
        section = item.section
        rest = section.tokens - _cost(item, taken)
        reach, used = reached.pop(order, ([], 0))
        fits = rest <= remaining + used and not _long(section)
        if item.chunks and fits:  # whole, the widened windows' tokens back
            remaining += used
            remaining -= max(rest, 0)
            indexes = [c.chunk_index for c in item.chunks]
            passages.append(
                _passage(item, section.start, section.end, indexes, section.tokens)
            )
            continue
        remaining -= _grow(item, taken, remaining)
        regions = _regions(item.chunks, taken, item.headers)
        regions = _union(regions + reach)
        for start, end, indexes in regions:
            passage = _passage(item, start, end, indexes, 0)
            if not indexes:  # a table's header line, for the rows after it
                passage.matched = {"header"}
            passages.append(passage)
    if PRECEDING_CONTEXT:
        starts = {(p.source_id, p.start) for p in passages}
        whole = [i for i, _ in kept if (i.section.source_id, i.section.start) in starts]
        passages += _preceding_sections(whole, remaining)
    return passages


def _preceding_sections(kept: list[_Selected], remaining: int) -> list[Passage]:
    """With budget left, the section just before each chosen one, whole.

    A rule is usually stated before its exceptions and details: a hit in "Paging
    exceptions" or "Rollback exceptions" needs the rule above it. The passage
    merges with the chosen one (both whole, they touch), so k is unchanged.
    """
    chosen = {item.section.id for item in kept}
    taken: list[tuple[_Selected, SectionRow]] = []
    for item in kept:
        section = item.before
        if section is None or section.id in chosen or not section.tokens:
            continue
        if section.tokens > remaining or _long(section):
            continue
        remaining -= section.tokens
        chosen.add(section.id)
        taken.append((item, section))
    indexes = _chunk_indexes([section.id for _, section in taken])
    added = []
    for item, section in taken:
        context = _Selected(section, item.hits[:1], item.score * 0.5, text=item.text)
        passage = _passage(
            context, section.start, section.end, indexes.get(section.id, []),
            section.tokens,
        )  # fmt: skip
        passage.matched = {"context"}
        added.append(passage)
    return added


def _chunk_indexes(section_ids: list[int]) -> dict[int, list[int]]:
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


def _further_hits(
    kept: list[tuple[_Selected, dict[int, int]]],
) -> list[tuple[float, int, int]]:
    """(-score, section order, chunk position) of hits worth a seat before expansion."""
    further = []
    for order, (item, _) in enumerate(kept):
        position = {c.id: i for i, c in enumerate(item.chunks)}
        ranked = [h for h in item.hits if h.chunk_id in position]
        for hit in ranked[1:HIT_CHUNKS]:
            further.append((-hit.score, order, position[hit.chunk_id]))
        for hit in ranked:
            if hit.keyword_rank is not None and hit.keyword_rank <= KEYWORD_SEED:
                further.append((-item.score, order, position[hit.chunk_id]))
    return further


def _grow(item: _Selected, taken: dict[int, None], allowance: int) -> int:
    """Add chunks next to taken ones, nearest first, within `allowance` tokens.

    Regions grow in the order their chunks were taken (best hit first), each until
    neither neighbour fits. Returns the tokens added.
    """
    chunks = item.chunks
    start = used = _cost(item, taken)
    for seed in list(taken):
        lo = hi = seed
        while True:
            grown = None
            for j in (lo - 1, hi + 1):
                if _next_to(chunks, j, lo if j < lo else hi):
                    cost = used if j in taken else _cost(item, {**taken, j: None})
                    if cost - start <= allowance:
                        grown = (j, cost)
                        break
            if grown is None:
                break
            j, used = grown
            taken[j] = None
            lo, hi = min(lo, j), max(hi, j)
    return used - start


def _next_to(chunks: list[ChunkRow], j: int, i: int) -> bool:
    """Whether loaded chunk j exists and directly neighbours loaded chunk i.

    Loaded chunks of a long section come in windows with gaps between them.
    """
    return (
        0 <= j < len(chunks) and abs(chunks[j].chunk_index - chunks[i].chunk_index) == 1
    )


def _cost(item: _Selected, taken: dict[int, None]) -> int:
    """Exact context tokens of the regions `taken` makes of a section's chunks.

    A region's text includes what lies between its chunks (a table's header and
    separator lines, a code fence), so it costs more than the chunks' sum.
    """
    text = item.text
    known = item.region_tokens
    total = 0
    for a, b, _ in _regions(item.chunks, taken, item.headers):
        if (a, b) not in known:
            known[a, b] = _tokens(text[a:b])
        total += known[a, b]
    return total


def _regions(
    chunks: list[ChunkRow],
    taken: dict[int, None],
    headers: dict[int, tuple[int, int]] | None = None,
) -> list[tuple[int, int, list[int]]]:
    """Runs of adjacent taken chunks as (start, end, chunk indexes).

    A run that starts at a table row comes after its table's header line (the
    column names, in no chunk's range), as a region of its own with no chunk
    indexes, unless an earlier region already holds it. The delimiter line is left
    out: a run of dashes costs a token per dash.
    """
    regions: list[tuple[int, int, list[int]]] = []
    for i in sorted(taken):
        c = chunks[i]
        if regions and i - 1 in taken and _next_to(chunks, i - 1, i):
            start, _, indexes = regions[-1]
            regions[-1] = (start, c.end, [*indexes, c.chunk_index])
            continue
        header = (headers or {}).get(i)
        if header and not any(a <= header[0] < b for a, b, _ in regions):
            regions.append((*header, []))
        regions.append((c.start, c.end, [c.chunk_index]))
    return regions


# --- windows that reach the evidence (issue #17) ----------------------------------
# A window of chunks can stop a sentence or a list item short of its end, start
# after the paragraph its first words refer to, or leave out a few tokens between
# two windows of one section. With budget left (KB_WINDOW_GROWTH), it is widened.

# Measured on the pooled tuned golden sets (docs/benchmarks.md): 24 tokens lost an
# RQ case that 64 keeps; a code block's one-line example between two hits is ~40.
GAP_TOKENS = 64  # a gap this short between two windows of a section is filled
BEFORE_TOKENS = 150  # the longest paragraph taken in before one that refers back
# First words of a paragraph that refers back to the one before it.
REFERS_BACK = frozenset(
    "this these that those it its they their such however but otherwise also "
    "instead then here there thus therefore so alternatively additionally "
    "similarly likewise conversely note".split()
)
_FIRST_WORD_RE = re.compile(r"[>*_\s]*([A-Za-z]+)")


def _reach(
    item: _Selected, regions: list[tuple[int, int, list[int]]], allowance: int
) -> tuple[list[tuple[int, int, list[int]]], int]:
    """The regions of a section's windows widened within `allowance` tokens, and
    the tokens that added (window_reach on each loaded part of the source)."""
    text, section = item.text, item.section
    out: list[tuple[int, int, list[int]]] = []
    used = 0
    for a, b, indexes in regions:
        if not indexes:  # a table's header line stays as it is
            out.append((a, b, indexes))
            continue
        part = _part_of(text, a, b)
        if part is None:
            out.append((a, b, indexes))
            continue
        base, loaded = part
        lo = max(section.start, base) - base
        hi = min(section.end, base + len(loaded)) - base
        previous = [
            (s - base, e - base)
            for s, e, idx in out
            if idx and base <= s and e <= base + len(loaded)
        ]
        (start, end), added = window_reach(
            loaded, a - base, b - base, allowance - used, lo, hi, previous
        )
        used += added
        start, end = start + base, end + base
        # A filled gap joins this window to the one before it.
        if out and out[-1][2] and start <= out[-1][1]:
            first, _, before = out.pop()
            out.append((min(first, start), max(end, b), [*before, *indexes]))
        else:
            out.append((start, end, indexes))
    return out, used


def _union(
    regions: list[tuple[int, int, list[int]]],
) -> list[tuple[int, int, list[int]]]:
    """Regions of one section, overlapping ones joined (their chunk indexes too)."""
    out: list[tuple[int, int, list[int]]] = []
    for a, b, indexes in sorted(regions, key=lambda r: (r[0], -r[1])):
        if out and a < out[-1][1] and (indexes or not out[-1][2]):
            first, last, before = out[-1]
            out[-1] = (first, max(last, b), sorted({*before, *indexes}))
        elif out and a < out[-1][1]:
            continue  # a header line inside a region already taken
        else:
            out.append((a, b, indexes))
    return out


def _part_of(text: TextWindow, a: int, b: int) -> tuple[int, str] | None:
    for start, part in text.parts:
        if start <= a and b <= start + len(part):
            return start, part
    return None


def window_reach(
    text: str,
    a: int,
    b: int,
    allowance: int,
    lo: int = 0,
    hi: int | None = None,
    previous: list[tuple[int, int]] | None = None,
) -> tuple[tuple[int, int], int]:
    """[a, b) of `text` widened, within `allowance` tokens and text[lo:hi]:

    1. to the end and start of the sentence or list item its edges cut;
    2. back over a gap of at most GAP_TOKENS to the window before it (`previous`,
       (start, end) pairs before a);
    3. with a paragraph that starts with a word referring back (REFERS_BACK), over
       the paragraph before it if that is at most BEFORE_TOKENS long.

    Returns the new (start, end) and the tokens it added.
    """
    from kb.answering import _widened, units

    hi = len(text) if hi is None else hi
    cost = _tokens(text[a:b])
    spent = 0

    credit = 0  # tokens of the window before, once a filled gap joins it

    def fits(start: int, end: int) -> bool:
        nonlocal spent
        extra = _tokens(text[start:end]) - cost - credit
        if extra > allowance:
            return False
        spent = max(extra, 0)
        return True

    start, end = a, b
    wide = _widened(text, a, b)
    found = units(text, max(lo, wide[0]), min(hi, wide[1]))
    for s, e in found:
        if s < end < e and fits(start, e):
            end = e
    for s, e in found:
        if s < start < e and fits(s, end):
            start = s
    for s, e in sorted(previous or [], reverse=True):
        if e <= start and e >= lo:
            if _tokens(text[e:start]) <= GAP_TOKENS:
                credit = _tokens(text[s:e])
                if fits(s, end):
                    start = min(start, s)
                else:
                    credit = 0
            break
    para = text.rfind("\n\n", lo, start + 1)
    line_start = text.rfind("\n", lo, start) + 1
    if para >= 0 and not text[para:start].strip() or line_start == start == lo:
        word = _FIRST_WORD_RE.match(text, start, hi)
        if word and word.group(1).lower() in REFERS_BACK:
            prev_end = len(text[lo:start].rstrip()) + lo
            prev_start = text.rfind("\n\n", lo, prev_end)
            prev_start = lo if prev_start < 0 else prev_start + 2
            while prev_start < prev_end and text[prev_start].isspace():
                prev_start += 1
            block = text[prev_start:prev_end]
            if (
                block
                and not block.lstrip().startswith(("#", "```", "~~~", "|"))
                and _tokens(block) <= BEFORE_TOKENS
                and fits(prev_start, end)
            ):
                start = prev_start
    return (start, end), spent


_DELIMITER_RE = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?")


def _header_line(lead: str, lead_start: int) -> tuple[int, int] | None:
    """(start, end) of the header line in the text before a table's first row:
    the line above its delimiter line (`| --- | :-: |`, `---|---`)."""
    lines = lead.rstrip().split("\n")
    if len(lines) < 2 or not lines[-2].strip():
        return None
    if not _DELIMITER_RE.fullmatch(lines[-1].strip()):
        return None
    header = lines[-2]
    offset = lead_start + sum(len(line) + 1 for line in lines[:-2])
    start = offset + len(header) - len(header.lstrip())
    return start, offset + len(header.rstrip())


def _mid_table_start(chunks: list[ChunkRow], i: int) -> bool:
    """Loaded chunk i continues a table whose rows before it were not loaded."""
    c = chunks[i]
    if c.kind != "table_row" or c.lead.strip():
        return False
    return not (i and chunks[i - 1].kind == "table_row" and _next_to(chunks, i - 1, i))


def _table_headers(
    chunks: list[ChunkRow], first_rows: dict[tuple[int, int], FirstRow]
) -> dict[int, tuple[int, int]]:
    """Chunk position -> header line of its table, for every loaded table row.

    A table's first row holds the header and delimiter lines in its lead; the
    rows after it (and the parts of a split row) have only whitespace there. A
    window of a long section can start mid-table: `first_rows` has the first row
    of that table, by (section id, chunk index) of the window's first row.
    """
    headers: dict[int, tuple[int, int]] = {}
    current: tuple[int, int] | None = None
    for i, c in enumerate(chunks):
        if c.kind != "table_row":
            current = None
            continue
        if c.lead.strip():
            current = _header_line(c.lead, _lead_start(c))
        elif _mid_table_start(chunks, i):
            first = first_rows.get((c.section_id, c.chunk_index))
            current = first and _header_line(first.lead, _lead_start(first))
        if current:
            headers[i] = current
    return headers


def _passage(
    item: _Selected, start: int, end: int, indexes: list[int], tokens: int
) -> Passage:
    section = item.section
    return Passage(
        source_id=section.source_id,
        source_title=section.source_title,
        file_name=section.file_name,
        start=start,
        end=end,
        text=item.text[start:end],
        score=item.score,
        matched={h.matched for h in item.hits},
        locations=[Location(section.id, section.heading_path, start, end, indexes)],
        tokens=tokens,
        metadata=dict(item.metadata),
        source_text=item.text,
    )


def _chunk_passages(hits: list[Hit]) -> list[Passage]:
    chunks = (
        Chunk.objects.select_related("source", "section")
        .defer(
            "embedding",
            "source__text",
            "source__stats",
            "section__embedding",
            "section__body",
        )  # fmt: skip
        .in_bulk([h.chunk_id for h in hits])
    )
    # A fixed-size chunk can reach across sections: its own text and lead cover it.
    parts: dict[int, list[tuple[int, str]]] = {}
    for chunk in chunks.values():
        parts.setdefault(chunk.source_id, []).append(_with_lead(chunk))
    texts = {source_id: TextWindow(found) for source_id, found in parts.items()}
    passages = []
    for hit in hits:
        chunk = chunks[hit.chunk_id]
        location = Location(
            chunk.section_id, chunk.section.heading_path, chunk.start, chunk.end,
            [chunk.chunk_index],
        )  # fmt: skip
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


def _within_budget(passages: list[Passage], budget: int) -> list[Passage]:
    kept, used = [], 0
    for passage in passages:
        tokens = _tokens(passage.text)
        if kept and used + tokens > budget:
            break
        kept.append(passage)
        used += tokens
    return kept


def _merge(passages: list[Passage]) -> list[Passage]:
    """Join passages of one source that overlap or touch; the best rank leads."""
    merged: list[Passage] = []
    for passage in passages:
        for other in merged:
            if other.source_id == passage.source_id and _touch(other, passage):
                _absorb(other, passage)
                break
        else:
            merged.append(passage)
    # Absorbing can make two earlier passages touch: repeat until stable.
    if len(merged) < len(passages):
        return _merge(merged)
    return merged


def _touch(a: Passage, b: Passage) -> bool:
    """Overlapping, or separated by nothing but whitespace."""
    if a.start <= b.end and b.start <= a.end:
        return True
    lo, hi = (a.end, b.start) if a.end <= b.start else (b.end, a.start)
    try:
        return not a.source_text[lo:hi].strip()
    except IndexError:  # not loaded: another section lies between them
        return False


def _absorb(into: Passage, other: Passage) -> None:
    into.start, into.end = min(into.start, other.start), max(into.end, other.end)
    into.text = into.source_text[into.start : into.end]
    into.locations = sorted(into.locations + other.locations, key=lambda loc: loc.start)
    into.matched |= other.matched
    into.score = max(into.score, other.score)


# --- the simple baseline (issue #17) -----------------------------------------

# Retrieval strategies by name, as kb_eval, the dashboard and runs record them:
# "default" (this module's pipeline over structure-first chunks), "sections" (the
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
    indexes = _chunk_indexes(list(rows))
    passages, remaining = [], budget
    for section_id, section_hits in best:
        if section_id not in rows or remaining <= 0:
            continue
        _, source_id, title, file_name, path, start, end, body = rows[section_id]
        text = cut_to_tokens(body, remaining)
        if not text.strip():
            continue
        end = start + len(text)
        remaining -= _tokens(text)
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
    # Sections of one source that touch merge (_merge): they read one text.
    parts: dict[int, list[tuple[int, str]]] = {}
    for p in passages:
        parts.setdefault(p.source_id, []).append((p.start, p.text))
    for p in passages:
        p.source_text = TextWindow(parts[p.source_id])
    return passages


def context_tokens(text: str) -> int:
    """Tokens a passage of this text adds to the context."""
    return _tokens(text)


def cut_to_tokens(text: str, tokens: int) -> str:
    """The longest prefix of `text` (whole words) within `tokens` context tokens."""
    if _tokens(text) <= tokens:
        return text
    lo, hi = 0, len(text)  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _tokens(text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid
    cut = text[:lo]
    if lo < len(text) and not text[lo].isspace() and " " in cut:
        cut = cut[: cut.rfind(" ")]  # no half word
    return cut.rstrip()
