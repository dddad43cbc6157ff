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

from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from kb import exact_tokens, metadata
from kb.models import Collection
from kb.retrieval.question import content_words

# Chunks of the collection holding any wanted lexeme (the (collection,
# exact_tokens) GIN index), how many hold each (a lexeme of too many sources left
# out: SOURCES_SHARE), then each chunk's sum and how
# many of the question's tokens it holds (a token and its folded form are one),
# and how many chunks hold the most of them.
_EXACT = """
WITH wanted AS (
    SELECT * FROM unnest(%(lexemes)s::text[], %(weights)s::float8[])
        AS w(lexeme, weight)
), found AS MATERIALIZED (
    SELECT c.id, c.source_id, c.exact_tokens FROM kb_chunk c
    WHERE c.collection_id = %(collection)s::bigint {current}
        AND c.exact_tokens && %(lexemes)s::text[]
), counted AS (
    SELECT w.lexeme, w.weight, count(*) AS df
    FROM wanted w JOIN found f ON w.lexeme = ANY(f.exact_tokens)
    GROUP BY w.lexeme, w.weight
    HAVING count(DISTINCT f.source_id) <= greatest(
        %(floor)s, %(share)s * (SELECT count(*) FROM kb_source s
                                WHERE s.collection_id = %(collection)s::bigint))
), scored AS (
    SELECT f.id,
        sum(n.weight * ln(1 + (greatest(%(total)s, n.df) - n.df + 0.5)
                              / (n.df + 0.5))) AS score,
        count(DISTINCT ltrim(n.lexeme, %(folded)s)) AS held
    FROM found f JOIN counted n ON n.lexeme = ANY(f.exact_tokens)
    GROUP BY f.id
), topped AS (
    SELECT *, max(held) OVER () AS most FROM scored
)
SELECT id, held = most, count(*) FILTER (WHERE held = most) OVER ()
FROM topped
ORDER BY score DESC, id
LIMIT %(limit)s
"""


# The tokens no chunk of the collection holds: as written, in small letters,
# or folded (the form a token with capitals is also stored in).
_UNHELD = """
SELECT w.token FROM unnest(%(tokens)s::text[]) WITH ORDINALITY AS w(token, n)
WHERE NOT EXISTS (
    SELECT 1 FROM kb_chunk c
    WHERE c.collection_id = %(collection)s::bigint
        AND c.exact_tokens
            && ARRAY[w.token, lower(w.token), %(folded)s || lower(w.token)]
) AND NOT EXISTS (
    -- a heading the chunks do not embed (its metadata policy "retrieve")
    SELECT 1 FROM kb_section t JOIN kb_source s ON s.id = t.source_id
    WHERE s.collection_id = %(collection)s::bigint
        AND strpos(lower(t.heading_path), lower(w.token)) > 0
)
ORDER BY w.n
"""


# A token more than this share of the collection's sources hold (and more
# than SOURCES_FLOOR) tells no chunk apart: "GitHub" in 10 of the 13 guides of
# opensource.guide put "Leverage GitHub Copilot" first for "How do I submit a
# pull request on GitHub?" (QA of issue #28), the right section fifth. The leg
# ranks by the question's other tokens, or not at all. Pooled over the 16
# golden sets: 3 more cases hold their evidence, none fewer.
SOURCES_SHARE = 0.2
SOURCES_FLOOR = 3


@dataclass(frozen=True)
class Found:
    """The exact leg's chunks, best first, and among them those holding the
    most of the question's tokens ("pg_basebackup" and "-S" both), with how
    many chunks of the collection hold that many (`holding_most_count`, which
    may exceed the limit)."""

    ids: list[int] = field(default_factory=list)
    holding_most: set[int] = field(default_factory=set)
    holding_most_count: int = 0
    tokens: frozenset[str] = frozenset()  # the question's, as written
    words: frozenset[str] = frozenset()  # its other words, casefolded

    def named_in(self, heading_path: str) -> tuple[int, int]:
        """How many of the question's tokens, then of its other words, a
        heading path holds (kb.exact_tokens.named_in)."""
        return exact_tokens.named_in(heading_path, self.tokens, self.words)


def search(
    collection: Collection,
    question: str,
    limit: int,
    *,
    include_deprecated: bool = False,
) -> Found:
    """The collection's best `limit` chunks for the question's exact tokens;
    none when it has none or the leg is off (KB_EXACT_WEIGHT 0)."""
    wanted = exact_tokens.question_lexemes(question)
    if not wanted or not settings.KB_EXACT_WEIGHT:
        return Found()
    current = "" if include_deprecated else f"AND {metadata.current_sql('c')}"
    params = {
        "lexemes": list(wanted),
        "weights": list(wanted.values()),
        "collection": collection.pk,
        "total": collection.terms_chunks or 0,
        "folded": exact_tokens.FOLDED,
        "limit": limit,
        "floor": SOURCES_FLOOR,
        "share": SOURCES_SHARE,
    }
    with connection.cursor() as cursor:
        cursor.execute(_EXACT.format(current=current), params)
        rows = cursor.fetchall()
    return Found(
        ids=[row[0] for row in rows],
        holding_most={row[0] for row in rows if row[1]},
        holding_most_count=rows[0][2] if rows else 0,
        tokens=frozenset(exact_tokens.tokens(question)),
        words=content_words(question),
    )


def unheld(collection: Collection, question: str) -> list[str]:
    """The question's exact tokens that no chunk of the collection holds, in
    any capitals: "set_modified" of "How do I call File::set_modified?" over
    docs of a version without it (QA of issue #28: answered from set_len's
    entry, as trustworthy), nor any heading (whose tokens the chunks hold
    only when it is embedded). Only the tokens the word check (kb.retrieval.
    keywords.unknown_words) cannot see whole are looked up
    (exact_tokens.is_split_by_words), and configuration keys, which are
    written whole ("Aptitude::CmdLine::Auto-Reboot", exact_tokens.
    is_config_key); not the parts of a path or URL the asker writes
    ("my_project" of "/home/me/my_project/settings.py")."""
    found = exact_tokens.tokens(question)
    paths = [t for t in found if "/" in t]  # a path's or URL's parts are its own
    tokens = [
        t
        for t in found
        if (exact_tokens.is_split_by_words(t) or exact_tokens.is_config_key(t))
        and not any(t in p for p in paths)
    ]
    if not tokens:
        return []
    params = {
        "tokens": tokens,
        "collection": collection.pk,
        "folded": exact_tokens.FOLDED,
    }
    with connection.cursor() as cursor:
        cursor.execute(_UNHELD, params)
        return [row[0] for row in cursor.fetchall()]
