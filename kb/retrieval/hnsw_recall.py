"""HNSW recall: whether the shared HNSW index finds a collection's nearest chunks,
measured against exact search after every publish (issue #26).

One 9.9 MB source of a paragraph repeated with other numbers took a collection
past KB_EXACT_SEARCH_CHUNKS onto the index, and its questions were declined: the
index's nearest chunk had similarity 0.155, exact search's 0.381. Thousands of
near-duplicate vectors crowd each other's neighbour lists, and the graph loses
its links to the other chunks: with 3,000 near copies beside 8 distinct chunks,
ef_search 100, 400 or 1,000, relaxed or strict order, or max_scan_tuples 20,000
or 200,000 (5 such collections, 2 of them 10,000 copies), the index never
returned the one chunk that answered. Whether it does depends on how the graph
happened to be built, and no search setting promises the neighbours asked for,
so the recall is measured:

1. questions: the collection's latest logged questions (up to half), and
   question-like vectors at cosine QUESTION_SIMILARITY from sampled chunks,
   spread over its sections (one chunk of each section before a second of
   any), so a few sections of real text count beside one huge repetitive one;
2. each searched exactly and through the index, as retrieval searches
   (search.CANDIDATES neighbours), and the first RANKS compared rank by rank:
   the index's i-th neighbour counts as found when it is no farther than the
   exact search's i-th (near-duplicates tie). Counting any index neighbour no
   farther than the exact search's last one, 10 copies of the repeated
   paragraph passed for the 8 sentences that came first;
3. found / asked stored on the collection. Below KB_HNSW_MIN_RECALL the
   collection is searched exactly (search.searched_exactly) until a later
   publish measures it again. Collections under KB_EXACT_SEARCH_CHUNKS are
   searched exactly anyway, and not measured.
"""

from __future__ import annotations

import numpy as np
from django.conf import settings
from django.db import connection
from django.utils import timezone

from kb.models import Chunk, Collection, Question
from kb.retrieval import search

TIE = 1e-6  # cosine distance within which an index neighbour ties the exact one
# The ranks compared: fusion weighs the first ones most (1 / (RRF_K + rank)); of
# all 80 candidates, a question's few true neighbours are a small share beside
# near-duplicates, which the index finds easily.
RANKS = 10
# Cosine of a sampled chunk's stand-in question to it, about a question's to the
# chunk that answers it (the issue's: 0.381; the test's BDFL question: 0.71;
# KB_MIN_SIMILARITY declines below 0.30).
QUESTION_SIMILARITY = 0.7

# Sampled by a hash of the id, not at random: the same chunks measure the same
# collection each time, so a change in recall is the index's.
_SAMPLE = """
SELECT id FROM (
    SELECT c.id, row_number() OVER (
        PARTITION BY c.section_id ORDER BY md5(c.id::text)) AS turn
    FROM kb_chunk c
    WHERE c.collection_id = %(collection)s::bigint AND c.embedding IS NOT NULL
) sample
ORDER BY turn, md5(id::text) LIMIT %(size)s
"""


def check(collection: Collection) -> float | None:
    """Measure the index's recall for the collection when it is large enough to be
    searched through the index, and store it (None when not needed or nothing to
    measure). Run before the keyword count that sizes the collection (kb.jobs),
    so a collection that grows past the threshold is measured when it crosses."""
    chunks = Chunk.objects.filter(collection=collection).count()
    recall = measure(collection) if chunks >= settings.KB_EXACT_SEARCH_CHUNKS else None
    measured = timezone.now()
    Collection.objects.filter(pk=collection.pk).update(
        hnsw_recall=recall, hnsw_recall_measured=measured
    )
    collection.hnsw_recall, collection.hnsw_recall_measured = recall, measured
    return recall


def after_publish(collection: Collection) -> int:
    """What follows a publish of the collection's index (kb.jobs.count_terms, an
    evaluation's or a shadow's scratch copy, the benchmarks): its recall checked,
    then its keyword statistics recounted, which size it; returns the latter's
    count (kb.retrieval.keywords.count_terms)."""
    from kb.retrieval import keywords

    check(collection)
    return keywords.count_terms(collection)


def measure(collection: Collection, size: int | None = None) -> float | None:
    """The share of the first RANKS neighbours the index finds as near as exact
    search does, rank by rank, over `size` (KB_HNSW_RECALL_SAMPLE) questions."""
    found = asked = 0
    for vector in _sample(collection, size or settings.KB_HNSW_RECALL_SAMPLE):
        exact = _nearest(collection, vector, exact=True)
        if not exact:
            continue
        exact = exact[:RANKS]
        indexed = _nearest(collection, vector, exact=False)
        found += sum(
            1 for (_, got), (_, true) in zip(indexed, exact) if got <= true + TIE
        )
        asked += len(exact)
    return round(found / asked, 4) if asked else None


def _sample(collection: Collection, size: int) -> list[np.ndarray]:
    """Questions to measure with: the collection's latest logged questions (up to
    half), and question-like vectors near sampled chunks (question_near)."""
    asked = Question.objects.filter(collection=collection, embedding__isnull=False)
    logged = list(
        asked.order_by("-created").values_list("embedding", flat=True)[: size // 2]
    )
    with connection.cursor() as cursor:
        cursor.execute(
            _SAMPLE, {"collection": collection.pk, "size": size - len(logged)}
        )
        ids = [row[0] for row in cursor.fetchall()]
    chunks = Chunk.objects.filter(pk__in=ids).order_by("pk")
    near = [question_near(v, i) for i, v in chunks.values_list("id", "embedding")]
    return [np.asarray(v, dtype=np.float64) for v in logged] + near


def question_near(vector, seed: int) -> np.ndarray:
    """A unit vector at cosine QUESTION_SIMILARITY from `vector`, in a direction
    drawn from `seed`: as far from its chunk as a question that the chunk
    answers, which is what the index must find its way to."""
    v = np.asarray(vector, dtype=np.float64)
    v = v / np.linalg.norm(v)
    away = np.random.default_rng(seed).normal(size=v.shape)
    away -= (away @ v) * v
    away /= np.linalg.norm(away)
    return QUESTION_SIMILARITY * v + np.sqrt(1 - QUESTION_SIMILARITY**2) * away


def _nearest(collection: Collection, vector, exact: bool) -> list[tuple]:
    sql, params = search.nearest_query(collection, vector, exact=exact)
    with search.hnsw_scan(collection, exact=exact), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
