"""Search: the question's nearest chunks and nearest sections by cosine
(pgvector), then reciprocal rank fusion of those with the keyword leg's ranks
(keywords.py) into hits.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction
from pgvector import Vector

from kb import metadata
from kb.chunking import ChunkKind
from kb.retrieval import exact
from kb.retrieval.passages import Hit

if TYPE_CHECKING:
    from kb.models import Collection

CANDIDATES = 80  # chunks taken from each ranking before fusion
RRF_K = 60  # reciprocal rank fusion constant (Cormack et al.)
# Keyword ranks count less than vector ranks (chosen by evaluation, see issue #7).
KEYWORD_WEIGHT = 0.3
# Ranks by the question's exact tokens (exact.py) weigh KB_EXACT_WEIGHT (1.0):
# a chunk that holds `23505` or `-S` as the question writes it is about it, and
# at the keyword weight the row the vector leg missed stayed out (issue #29).
# Candidates an HNSW scan keeps: at 100, the index's i-th neighbour was as near as
# exact search's i-th for 85 % of the first 10 (hnsw_recall.measure, 20,160
# chunks beside 20,664), 92.5 % at 200, 97.5 % at 400 for 3 ms more (issue #26).
HNSW_EF_SEARCH = 400
# Collections of fewer chunks are searched exactly, without the HNSW index
# (searched_exactly, issue #15). Exact costs about 2-5 us per chunk (20,160
# chunks: 107 ms); a filtered HNSW scan about ef_search x (all chunks / the
# collection's) tuples (504 chunks beside 40,000: 38 ms, and some searches ended
# at hnsw.max_scan_tuples with no rows). They cross near 2,000 chunks beside
# 40,000 and 10,000 beside a million; exact also never comes back short.
# The threshold is settings.KB_EXACT_SEARCH_CHUNKS (5,000).


# Hot path (issue #8): plain SQL, as ORM query building cost more than the queries.
# Exact search: the collection's sources as an array, an index condition on the
# rows' source. Through the HNSW index: the row's own collection (kept by
# triggers, migrations 0016 and 0022), tested on each row the scan reads; the
# array of sources cost 2-3 ms to build at 5,420 sources and a comparison with
# each of them per row (nearest chunks 6.4 -> 3.3 ms p50 at 100,000, issue #27).
# Both name the collection's model: a row of another model (a source moved in
# from a collection of another model) is in another space, and each model has
# its own HNSW graph (kb.models.model_hnsw).
_CHUNK_DISTANCES = """
SELECT c.id, c.embedding <=> %(vector)s::vector AS distance FROM kb_chunk c
WHERE c.source_id = ANY(ARRAY(
        SELECT s.id FROM kb_source s WHERE s.collection_id = %(collection)s))
    AND c.embedding_model = %(model)s AND c.embedding IS NOT NULL {current}
"""
_SECTION_DISTANCES = """
SELECT t.id, t.embedding <=> %(vector)s::vector AS distance FROM kb_section t
WHERE t.source_id = ANY(ARRAY(
        SELECT s.id FROM kb_source s WHERE s.collection_id = %(collection)s
        {current}))
    AND t.embedding_model = %(model)s AND t.embedding IS NOT NULL
"""
_CHUNK_DISTANCES_IN_COLLECTION = """
SELECT c.id, c.embedding <=> %(vector)s::vector AS distance FROM kb_chunk c
WHERE c.collection_id = %(collection)s::bigint
    AND c.embedding_model = %(model)s AND c.embedding IS NOT NULL {current}
"""
# A section has no metadata of its own: its deprecated sources (partial index
# source_deprecated) are left out.
_SECTION_DISTANCES_IN_COLLECTION = """
SELECT t.id, t.embedding <=> %(vector)s::vector AS distance FROM kb_section t
WHERE t.collection_id = %(collection)s::bigint
    AND t.embedding_model = %(model)s AND t.embedding IS NOT NULL {current}
"""
_DEPRECATED_SOURCES = f"""AND t.source_id <> ALL(ARRAY(
        SELECT s.id FROM kb_source s WHERE s.collection_id = %(collection)s
        AND {metadata.deprecated_sql("s")}))"""
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
def hnsw_scan(collection: Collection | None = None, *, exact: bool | None = None):
    """A transaction for vector searches: HNSW scans go on reading the graph until
    enough rows pass the collection filter (pgvector 0.8 iterative scans).

    For `collection`, the plan is also fixed by searched_exactly(), not left to
    the planner, which estimates a collection's rows from its number of sources:
    beside one 20,000-chunk source it read the index for 504 chunks in 24
    sources (vector search 56 ms, exact 8) and sorted a 20,000-chunk collection
    (147 ms, the index 2). Exact: no sequential scan of all collections' rows.
    Otherwise: no sort, so the index. A collection never counted is left to the
    planner. `exact` True or False fixes the plan whatever the collection (the
    recall check compares both)."""
    if (
        exact is None
        and collection is not None
        and collection.terms_counted is not None
    ):
        exact = searched_exactly(collection)
    index = exact is False
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
    issue #15). Sized by the chunk count of the last keyword count (keywords.py),
    which runs after every ingestion; never counted, the planner chooses.

    A larger collection is searched exactly too while the index's measured
    recall for it is below KB_HNSW_MIN_RECALL (kb.retrieval.hnsw_recall, measured
    after every publish): among many near-duplicate vectors the graph can lose
    the way to the others whatever ef_search (issue #26)."""
    if collection.terms_counted is None:
        return False
    if collection.terms_chunks < settings.KB_EXACT_SEARCH_CHUNKS:
        return True
    recall = collection.hnsw_recall
    return recall is not None and recall < settings.KB_HNSW_MIN_RECALL


def nearest_query(
    collection: Collection,
    vector,
    include_deprecated: bool = False,
    sections=False,
    exact: bool | None = None,
) -> tuple[str, dict[str, Any]]:
    """The SQL and parameters of the nearest-chunks (or -sections) search, to run
    inside hnsw_scan(collection) (with the same `exact`: None, as
    searched_exactly says); the benchmark EXPLAINs the very same statement."""
    if exact is None:
        exact = searched_exactly(collection)
    if exact:
        sql, table = (_SECTION_DISTANCES, "s") if sections else (_CHUNK_DISTANCES, "c")
        current = "" if include_deprecated else f"AND {metadata.current_sql(table)}"
        plan = _EXACT_NEAREST
    elif sections:
        sql, plan = _SECTION_DISTANCES_IN_COLLECTION, _HNSW_NEAREST
        current = "" if include_deprecated else _DEPRECATED_SOURCES
    else:
        sql, plan = _CHUNK_DISTANCES_IN_COLLECTION, _HNSW_NEAREST
        current = "" if include_deprecated else f"AND {metadata.current_sql('c')}"
    params = {
        "collection": collection.pk,
        # Inlined as a literal (client-side binding), so the planner takes the
        # model's own partial HNSW index (kb.models.model_hnsw).
        "model": collection.embedding_model,
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


def vector_ids(
    collection: Collection, vector, include_deprecated: bool
) -> tuple[list[int], float | None]:
    """The chunks nearest to the question vector by cosine, best first, and the
    cosine similarity of the nearest (None when the collection has no vectors)."""
    rows = _nearest(collection, vector, include_deprecated)
    return [row[0] for row in rows], (1.0 - rows[0][1] if rows else None)


# The dated leg (issue #29): chunks of the records whose date falls in a period
# the question names, nearest first. It reads the collection's chunks' metadata
# (no index: it runs only for questions that name a date), and weighs as the
# vector leg: among reports sharing a title, the date is what tells them apart.
DATED_WEIGHT = 1.0
_DATED = """
SELECT c.id FROM kb_chunk c
WHERE c.source_id = ANY(ARRAY(
        SELECT s.id FROM kb_source s WHERE s.collection_id = %(collection)s))
    AND c.embedding_model = %(model)s AND c.embedding IS NOT NULL {current}
    AND c.metadata->>'date' ~ '^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}'
    AND ({periods})
ORDER BY {order}, c.id LIMIT %(limit)s
"""


def dated_ids(
    collection: Collection, vector, periods: list, include_deprecated: bool
) -> list[int]:
    """The chunks of the records dated in one of the periods (kb.dates.Period),
    nearest to the question first (in document order without a vector)."""
    if not periods:
        return []
    params: dict[str, Any] = {
        "collection": collection.pk,
        "model": collection.embedding_model,
        "limit": CANDIDATES,
    }
    conditions = []
    for i, period in enumerate(periods):
        if period.start:
            conditions.append(
                f"left(c.metadata->>'date', 10) BETWEEN %(start{i})s AND %(end{i})s"
            )
            params.update({f"start{i}": period.start, f"end{i}": period.end})
        else:
            day = f"-{period.day:02d}" if period.day else ""
            conditions.append(
                f"substr(c.metadata->>'date', 5, {len(day) + 3}) = %(day{i})s"
            )
            params[f"day{i}"] = f"-{period.month:02d}{day}"
    order = "c.source_id, c.chunk_index"
    if vector is not None:
        order = "c.embedding <=> %(vector)s::vector"
        params["vector"] = Vector._to_db(vector)
    current = "" if include_deprecated else f"AND {metadata.current_sql('c')}"
    sql = _DATED.format(current=current, periods=" OR ".join(conditions), order=order)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def section_ranks(
    collection: Collection, vector, include_deprecated: bool
) -> dict[int, int]:
    """Sections by the cosine of their centroid (mean of their chunk vectors)."""
    rows = _nearest(collection, vector, include_deprecated, sections=True)
    return {row[0]: rank for rank, row in enumerate(rows, 1)}


# Records (issue #29): sources with a document date (kb.dates), as the dated
# leg reads it.
_RECORDS = """
SELECT DISTINCT c.source_id FROM kb_chunk c
WHERE c.id = ANY(%(ids)s) AND c.metadata->>'date' ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}'
"""


def records(hits: list[Hit]) -> set[int]:
    """The sources of `hits` that are dated records (incident reports, minutes,
    release notes): the ones a question about several records is answered
    from."""
    ids = [hit.chunk_id for hit in hits]
    if not ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(_RECORDS, {"ids": ids})
        return {row[0] for row in cursor.fetchall()}


# Each of the question's words (as each language of the candidates stems it)
# with the candidate sections and records that hold it.
_HOLDING = """
WITH q AS (
    SELECT DISTINCT c.language, w.lexeme
    FROM (SELECT DISTINCT language FROM kb_chunk WHERE id = ANY(%(ids)s)) c
    CROSS JOIN LATERAL unnest(tsvector_to_array(
        to_tsvector(c.language, %(question)s))) AS w(lexeme)
)
SELECT q.lexeme, array_agg(DISTINCT c.section_id), count(DISTINCT c.source_id)
FROM kb_chunk c JOIN q ON q.language = c.language
WHERE c.id = ANY(%(ids)s) AND c.source_id = ANY(%(records)s)
  AND c.search_vector @@ to_tsquery('simple', quote_literal(q.lexeme))
GROUP BY q.lexeme
"""


def rarest_holders(question: str, hits: list[Hit], records: set[int]) -> set[int]:
    """The sections among `hits` of the records that hold the question's word
    fewest of those records hold, when some but not all of them hold it: in
    "Which incidents involved Memcached?", the reports naming Memcached,
    not those that only share "incidents", which every report has."""
    ids = [hit.chunk_id for hit in hits]
    if not ids or len(records) < 2:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            _HOLDING, {"ids": ids, "question": question, "records": list(records)}
        )
        rows = [r for r in cursor.fetchall() if r[2] < len(records)]
    if not rows:
        return set()
    _, sections, _ = min(rows, key=lambda r: (r[2], r[0]))
    return set(sections)


# A code, option or identifier that only a few chunks hold ("-Z" in a table of
# options, "23505" in an error-code list) names what the question is about:
# those chunks weigh PINPOINT_BOOST times the exact leg's weight. A token many
# chunks hold ("TestClient" across a framework's docs) says little more than
# the other legs, and keeps the leg's weight. Else the chunks holding the most
# of the question's tokens, and of them those whose heading path names the
# most of them (then of its other words), are pinpointed when they are few:
# "pg_basebackup -S" (every option entry of the page holds the command,
# several commands have a -S, one entry is headed "-S" under "pg_basebackup").
PINPOINT_CHUNKS = 3
PINPOINT_BOOST = 3.0
# The chunks holding a word of the question few chunks hold (keywords.RARE_CHUNKS).
RARE_WEIGHT = 0.3


def pinpoints(found: exact.Found, paths: dict[int, str] | None = None) -> set[int]:
    """The exact leg's chunks that weigh PINPOINT_BOOST times more (see above);
    `paths` holds the heading path of each chunk of found.holding_most."""
    if 0 < len(found.ids) <= PINPOINT_CHUNKS:
        return set(found.ids)
    most = found.holding_most
    if not most or len(most) < found.holding_most_count:
        return set()  # some lie beyond the leg's limit: too many to tell
    named = {i: found.named_in((paths or {}).get(i, "")) for i in most}
    best = max(named.values())
    if best[0]:  # some are headed by a token asked: the entries for it
        most = {i for i, n in named.items() if n == best}
    return set(most) if len(most) <= PINPOINT_CHUNKS else set()


def pinpointed(hits: list[Hit]) -> bool:
    """Whether the question's exact tokens name what only a few chunks hold
    (pinpoints)."""
    return any(hit.pinpoint for hit in hits)


def dated_match(hits: list[Hit]) -> bool:
    """Whether the question names a period some record is dated in (the dated
    leg found its chunks): "What happened on 7 February 2024?" is about that
    record, however little its words read like the question."""
    return any(hit.dated_rank for hit in hits)


_HIT_ROWS = """
SELECT c.id, c.source_id, c.section_id, c.chunk_index, c.start, c."end",
       t.heading_path, c.kind
FROM kb_chunk c JOIN kb_section t ON t.id = c.section_id
WHERE c.id = ANY(%s)
"""


def fuse(
    vector_ids: list[int],
    keyword_ids: list[int],
    section_ranks: dict[int, int],
    exact_found: exact.Found | None = None,
    dated_ids: list[int] = (),
    *,
    rare_ids: list[int] = (),
) -> list[Hit]:
    """Reciprocal rank fusion of chunk ranks (the vector, keyword, exact, dated
    and rare-word legs), plus the rank of the chunk's section.

    The section term lifts chunks of sections that are about the question as a
    whole, though no single chunk of theirs ranks high (issue #7's measurements).
    It weighs KB_SECTION_WEIGHT (0.5): at 1.0 the vector model spoke twice, through
    a chunk and through its section, and a chunk both legs found ranked below one
    only the vector leg and its section's centroid put first (issue #17).
    The dated leg (dated_ids) weighs DATED_WEIGHT, the rare-word leg
    (rare_ids, keywords.RARE_CHUNKS) RARE_WEIGHT. A table row takes its own
    vector rank as its section's when that is better: its table's centroid is
    the mean of every row (issue #29: a 26-row options table ranked 12th).
    """
    scores: dict[int, dict[str, int]] = {}
    for rank, chunk_id in enumerate(vector_ids, 1):
        scores.setdefault(chunk_id, {})["vector"] = rank
    for rank, chunk_id in enumerate(keyword_ids, 1):
        scores.setdefault(chunk_id, {})["keyword"] = rank
    exact_found = exact_found or exact.Found()
    for rank, chunk_id in enumerate(exact_found.ids, 1):
        scores.setdefault(chunk_id, {})["exact"] = rank
    for rank, chunk_id in enumerate(dated_ids, 1):
        scores.setdefault(chunk_id, {})["dated"] = rank
    for rank, chunk_id in enumerate(rare_ids, 1):
        scores.setdefault(chunk_id, {})["rare"] = rank
    with connection.cursor() as cursor:
        cursor.execute(_HIT_ROWS, [list(scores)])
        rows = cursor.fetchall()
    section_weight = settings.KB_SECTION_WEIGHT
    paths = {row[0]: row[6] for row in rows if row[0] in exact_found.holding_most}
    pinpointed_ids = pinpoints(exact_found, paths)
    weights = {
        "vector": 1.0,
        "keyword": KEYWORD_WEIGHT,
        "exact": settings.KB_EXACT_WEIGHT,
        "dated": DATED_WEIGHT,
        "rare": RARE_WEIGHT,
    }
    hits = []
    for chunk_id, source_id, section_id, index, start, end, path, kind in rows:
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
            exact_rank=ranks.get("exact"),
            dated_rank=ranks.get("dated"),
            rare_rank=ranks.get("rare"),
        )
        hit.pinpoint = chunk_id in pinpointed_ids
        boost = {"exact": PINPOINT_BOOST} if hit.pinpoint else {}
        hit.score = sum(
            weights[kind] * boost.get(kind, 1.0) / (RRF_K + r)
            for kind, r in ranks.items()
        )
        section_rank = section_ranks.get(section_id)
        if kind == ChunkKind.TABLE_ROW and hit.vector_rank:
            # A row is read on its own: its table's centroid, the mean of every
            # row, says little of it, and a long table's ranks low.
            section_rank = min(section_rank or hit.vector_rank, hit.vector_rank)
        if section_rank is not None:
            hit.score += section_weight / (RRF_K + section_rank)
        hits.append(hit)
    hits.sort(key=lambda h: (-h.score, h.chunk_id))
    return hits
