"""The exact leg: chunks holding the question's exact tokens (kb.exact_tokens:
codes, options, identifiers, versions, paths as written), best first.

The keyword leg stems words in each chunk's language, so "SQLSTATE 23505" or
"the -S switch" find nothing better there than any chunk saying "error" or
"switch" (issue #29). Here a chunk's stored tokens (Chunk.exact_tokens) are
matched as written: its score sums, over the question's tokens it holds, their
weight (kb.exact_tokens.question_lexemes: a folded match weighs less) times
their BM25 inverse document frequency among the chunks holding any of them, so
the rarer of two tokens decides. search.fuse adds the ranks at KB_EXACT_WEIGHT.

A question without exact tokens runs no query and returns nothing: its
retrieval is the same as without this leg.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from kb import exact_tokens, metadata
from kb.models import Collection

# Chunks of the collection holding any wanted lexeme (the (collection,
# exact_tokens) GIN index), how many hold each, then each chunk's sum.
_EXACT = """
WITH wanted AS (
    SELECT * FROM unnest(%(lexemes)s::text[], %(weights)s::float8[])
        AS w(lexeme, weight)
), found AS MATERIALIZED (
    SELECT c.id, c.exact_tokens FROM kb_chunk c
    WHERE c.collection_id = %(collection)s::bigint {current}
        AND c.exact_tokens && %(lexemes)s::text[]
), counted AS (
    SELECT w.lexeme, w.weight, count(*) AS df
    FROM wanted w JOIN found f ON w.lexeme = ANY(f.exact_tokens)
    GROUP BY w.lexeme, w.weight
)
SELECT f.id FROM found f JOIN counted n ON n.lexeme = ANY(f.exact_tokens)
GROUP BY f.id
ORDER BY sum(n.weight * ln(1 + (greatest(%(total)s, n.df) - n.df + 0.5)
                               / (n.df + 0.5))) DESC, f.id
LIMIT %(limit)s
"""


def search(
    collection: Collection,
    question: str,
    limit: int,
    *,
    include_deprecated: bool = False,
) -> list[int]:
    """Ids of the collection's best `limit` chunks for the question's exact
    tokens; none when it has none or the leg is off (KB_EXACT_WEIGHT 0)."""
    wanted = exact_tokens.question_lexemes(question)
    if not wanted or not settings.KB_EXACT_WEIGHT:
        return []
    current = "" if include_deprecated else f"AND {metadata.current_sql('c')}"
    params = {
        "lexemes": list(wanted),
        "weights": list(wanted.values()),
        "collection": collection.pk,
        "total": collection.terms_chunks or 0,
        "limit": limit,
    }
    with connection.cursor() as cursor:
        cursor.execute(_EXACT.format(current=current), params)
        return [row[0] for row in cursor.fetchall()]
