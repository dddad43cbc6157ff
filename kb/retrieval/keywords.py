"""Keyword search: PostgreSQL full-text search over each chunk's stored tsvector.

1. Chunks holding all of the question's stemmed words, ranked by `ts_rank` with
   length normalisation, or with KB_KEYWORD_RANKING=bm25 by BM25. BM25 reads
   each candidate's term frequencies from its stored tsvector's positions and the
   words' document frequencies from the `Term` counts: a rare word of the question
   weighs more than a common one, which `ts_rank` cannot tell apart (issue #17).
2. When fewer than MIN_ALL chunks hold them all, chunks holding any of them top
   the list up. Ranking reads every chunk that matches, and in a big collection a
   common word ("job", "rate") matches tens of thousands of them: the any-word
   query takes the question's words rarest first, only while the chunks they
   match together stay within MAX_ANY_ROWS (issue #8: 324 ms for one question at
   100,000 chunks). Collections below that size always use every word.

How many chunks hold each word is counted per collection and language into
`Term` rows by count_terms(), after ingestion (a deduplicated job, see kb.jobs).
Counts can lag behind the index; they only decide which words to leave out.

Each chunk's words are stemmed in its own language (Chunk.language, a text-search
configuration; issue #27). The question is analysed in each language of the
collection (the configurations its last count found), and each analysis is
matched against that language's chunks only: "déploiements" finds the French
chunks that say "déploiement", and "кластера" the Russian ones that say
"кластером". BM25 weighs a word by how many chunks of its language hold it.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from kb import metadata
from kb.models import Chunk, Collection, Term
from kb.retrieval.question import STOPWORDS

CONFIG = "english"  # a collection's language before any is known
MIN_ALL = 10  # fewer all-words matches than this: add any-word matches
MAX_ANY_ROWS = 1000  # chunks the any-word query may rank (by the Term counts)
RANKINGS = ("bm25", "ts_rank")
# BM25's term-frequency saturation and length normalisation, chosen on the pooled
# tuned golden sets of three corpora (k1 0.6-2.0 x b 0.3-0.9; docs/benchmarks.md,
# issue #17). Short chunks need little length normalisation.
BM25_K1 = 1.2
BM25_B = 0.3

_LEXEME_RE = re.compile(r"'((?:[^']|'')*)'")


# A word of the question that at most RARE_CHUNKS chunks of its language hold
# names what the question is about, as a code or an option does ("mailx": the
# one row of an options table that says it; issue #29). Its holders are a leg
# of their own (Found.rare_ids, fused at search.RARE_WEIGHT): at the keyword
# leg's weight such a row ranked 40th when the vector leg put it 70th. In a
# small collection few chunks hold any word: a rare one is also held by at most
# one in RARE_SHARE of the language's chunks.
RARE_CHUNKS = 3
RARE_SHARE = 20


class Found(NamedTuple):
    """The keyword leg's ranking, and the chunks holding the question's rare words."""

    ids: list[int]
    rare_ids: list[int]


def search(
    collection: Collection,
    question: str,
    limit: int,
    *,
    include_deprecated: bool = False,
    max_any_rows: int = MAX_ANY_ROWS,
) -> list[int]:
    """Ids of the collection's best `limit` chunks for the question's words."""
    return find(
        collection,
        question,
        limit,
        include_deprecated=include_deprecated,
        max_any_rows=max_any_rows,
    ).ids


def find(
    collection: Collection,
    question: str,
    limit: int,
    *,
    include_deprecated: bool = False,
    max_any_rows: int = MAX_ANY_ROWS,
) -> Found:
    """The collection's best `limit` chunks for the question's words, and the
    chunks holding its rare words (RARE_CHUNKS), best first.

    Without parallel workers: for the any-word query over four languages at
    100,000 chunks PostgreSQL planned two, whose start cost more than they
    saved (keyword p95 18-20 ms against 13-15 without, issue #27), and on a
    busy server they take the cores other questions are waiting for."""
    with transaction.atomic():  # _WORDS sets it for the transaction
        analysed = _words(collection, question)
        if not analysed:
            return Found([], [])
        ids = _search(collection, analysed, limit, include_deprecated, max_any_rows)
        rare_words = rare_terms(collection, analysed)
        for config, names in dotted_names(collection, question).items():
            rare_words[config] = " | ".join(
                filter(None, [rare_words.get(config), *map(_quoted, names)])
            )
        rare = _ranked(collection, include_deprecated, rare_words, limit)
    return Found(ids, rare)


def _part_of_name(word: str) -> str:
    """SQL: the Term `t` is a dotted name or path (a lexeme PostgreSQL's parser
    keeps whole) holding the lower-case `word`, an SQL expression, between dots
    or slashes ("iterdir" of "p.iterdir"); the LIKE reads the trigram index."""
    return (
        f"t.lexeme LIKE '%%' || {word} || '%%' "
        f"AND t.lexeme ~ ('(^|[./])' || {word} || '([./]|$)')"
    )


# The rare dotted names and paths of the collection (lexemes PostgreSQL's parser
# keeps whole: "p.iterdir", "date.fromordinal") that hold, between dots or
# slashes, a word of the question no chunk holds as a word of its own.
_DOTTED = """
WITH unknown AS MATERIALIZED (  -- first: a few words, each looked up once
    SELECT lower(w.word) AS word FROM unnest(%(words)s::text[]) AS w(word)
    WHERE NOT EXISTS (
        SELECT 1 FROM unnest(%(configs)s::text[]) AS q(config)
        CROSS JOIN LATERAL (SELECT tsvector_to_array(
            to_tsvector(q.config::regconfig, w.word)) AS lexemes) l
        JOIN kb_term t ON t.collection_id = %(collection)s
             AND t.language = q.config::regconfig AND t.lexeme = ANY(l.lexemes))
)
SELECT t.language::text, t.lexeme FROM unknown u
JOIN kb_term t ON t.collection_id = %(collection)s AND {part_of_name}
WHERE t.chunks <= %(most)s
ORDER BY t.chunks, t.lexeme
LIMIT %(limit)s
""".format(part_of_name=_part_of_name("u.word"))
MIN_NAME_LETTERS = 4  # a shorter part ("p", "os", "get") names too much
MAX_DOTTED = 10  # names searched for the question's unknown words
MAX_NAME_CHUNKS = 10  # chunks a name is in at most: a name, not a common word


def dotted_names(collection: Collection, question: str) -> dict[str, list[str]]:
    """By language, the rare dotted names holding a word of `question` that no
    chunk holds on its own ("What does iterdir yield?" over pages that write
    only `p.iterdir()` and `Path.iterdir()`): searched beside its rare words."""
    words = [
        word
        for word in dict.fromkeys(QUESTION_WORD_RE.findall(question))
        if len(word) >= MIN_NAME_LETTERS and word.casefold() not in STOPWORDS
    ][:MAX_UNKNOWN_CHECKED]
    if not words or collection.terms_counted is None:
        return {}
    params = {
        "words": words,
        "configs": configs(collection),
        "collection": collection.pk,
        "most": MAX_NAME_CHUNKS,
        "limit": MAX_DOTTED,
    }
    with connection.cursor() as cursor:
        cursor.execute(_DOTTED, params)
        found: dict[str, list[str]] = {}
        for config, lexeme in cursor.fetchall():
            found.setdefault(config, []).append(lexeme)
    return found


def rare_terms(collection: Collection, analysed: dict[str, Analysis]) -> dict[str, str]:
    """The any-word tsquery text of the question's rare words in each language
    (see RARE_CHUNKS; none where the words were never counted)."""
    terms = {}
    for config, found in analysed.items():
        most = min(RARE_CHUNKS, (_chunks_in(collection, config) or 0) // RARE_SHARE)
        counts = found.counts or {}
        rare = [word for word, chunks in counts.items() if 0 < chunks <= most]
        terms[config] = " | ".join(_quoted(word) for word in sorted(rare))
    return terms


def _search(
    collection: Collection,
    analysed: dict[str, Analysis],
    limit: int,
    include_deprecated: bool,
    max_any_rows: int,
) -> list[int]:
    weights = None
    if ranking() == "bm25" and collection.terms_chunks:
        weights = {
            config: _idf(
                _lexemes(found.words), found.counts, _chunks_in(collection, config)
            )
            for config, found in analysed.items()
            if found.counts is not None
        } or None
    ranked = functools.partial(
        _ranked, collection, include_deprecated, limit=limit, weights=weights
    )
    ids = ranked({config: found.words for config, found in analysed.items()})
    if len(ids) < MIN_ALL:
        seen = set(ids)
        more = ranked(affordable_terms(analysed, max_any_rows))
        ids += [i for i in more if i not in seen][: limit - len(ids)]
    return ids


def configs(collection: Collection) -> list[str]:
    """The text-search configurations of the collection's chunks: as its last
    count of terms found them, else read from the chunks (never counted)."""
    if collection.terms_counted is not None:
        found = sorted(collection.terms_languages)
    else:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT language::text FROM kb_chunk "
                "WHERE collection_id = %s::bigint ORDER BY 1",
                [collection.pk],
            )
            found = [row[0] for row in cursor.fetchall()]
    return found or [CONFIG]


def _chunks_in(collection: Collection, config: str) -> int:
    """BM25's N for a language: the collection's chunks in it, as counted."""
    return collection.terms_languages.get(config) or collection.terms_chunks


def affordable_terms(
    analysed: dict[str, Analysis], max_rows: int = MAX_ANY_ROWS
) -> dict[str, str]:
    """The any-word tsquery text per configuration: the words (tsquery operands)
    of every language's analysis that the query can afford, rarest first, so
    that together they match at most `max_rows` chunks; the rarest of all always
    goes in. One budget for all the languages: each language's branch reads its
    words' rows from the same keyword index, and four branches of 1,000 rows
    each made the any-word query most of the keyword leg's time at 100,000
    chunks in four languages (issue #27). A word's cost is what the index reads
    for it (Analysis.costs), else its count in its language; words never
    counted are all kept."""
    split = {config: found.words.split(" & ") for config, found in analysed.items()}
    if any(found.counts is None for found in analysed.values()):
        return {config: " | ".join(words) for config, words in split.items()}

    def matches(config: str, word: str) -> int:  # a phrase: at most its rarest
        found = analysed[config].costs or analysed[config].counts or {}
        return min((found.get(x, 0) for x in _lexemes(word)), default=0)

    pairs = sorted(
        (matches(config, word), config, n, word)
        for config, words in split.items()
        for n, word in enumerate(words)
    )
    kept: dict[str, list[str]] = {}
    total = 0
    for rows, config, _, word in pairs:
        if kept and total + rows > max_rows:
            break
        kept.setdefault(config, []).append(word)
        total += rows
    return {config: " | ".join(words) for config, words in kept.items()}


def count_terms(collection: Collection) -> int:
    """Recount how many of the collection's chunks hold each word, language by
    language; returns chunks."""
    chunks = (
        f"FROM {Chunk._meta.db_table} c "
        f"JOIN kb_source s ON s.id = c.source_id "
        f"WHERE s.collection_id = {int(collection.pk)}"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        # One count at a time per collection: a second one waits, then redoes it.
        locked = Collection.objects.select_for_update().filter(pk=collection.pk)
        if not locked.exists():
            return 0
        Term.objects.filter(collection=collection).delete()
        cursor.execute(f"SELECT c.language::text, count(*) {chunks} GROUP BY 1")
        found = dict(cursor.fetchall())
        for config in found:
            cursor.execute(
                f"INSERT INTO {Term._meta.db_table} "
                "(collection_id, language, lexeme, chunks) "
                "SELECT %s, %s::regconfig, word, ndoc FROM ts_stat(%s)",
                [
                    collection.pk,
                    config,
                    f"SELECT c.search_vector {chunks} "
                    f"AND c.language = {_quoted(config)}::regconfig",
                ],
            )
        total = sum(found.values())
        counted = timezone.now()
        locked.update(terms_counted=counted, terms_chunks=total, terms_languages=found)
    collection.terms_counted, collection.terms_chunks = counted, total
    collection.terms_languages = found
    return total


def _quoted(config: str) -> str:
    return "'" + config.replace("'", "''") + "'"


# The question as an all-words tsquery in each of the collection's languages,
# with the Term counts of its words in that language when the collection has
# them, and in a collection of several languages the chunks of all of them that
# hold each word (Analysis.costs): one round trip (issue #8's latency). The
# question's lexemes are computed once per language (the LATERAL), not once per
# Term row: inside the subquery's condition, PostgreSQL analysed the question
# again for each of the collection's 7,000 Term rows it filtered (63 ms at
# 100,000 chunks in four languages, issue #27), and the lookup reads the
# (collection, language, lexeme) index. The statement also turns parallel
# workers off for the rest of the transaction (see search()), saving a round
# trip of its own.
_WORDS = """
SELECT q.config, plainto_tsquery(q.config::regconfig, %(question)s)::text,
       CASE WHEN %(counted)s THEN (
           SELECT coalesce(json_object_agg(t.lexeme, t.chunks), '{}')::text
           FROM unnest(l.lexemes) AS x(lexeme)
           JOIN kb_term t ON t.collection_id = %(collection)s
                AND t.language = q.config::regconfig AND t.lexeme = x.lexeme)
       END,
       CASE WHEN %(counted)s AND cardinality(%(configs)s::text[]) > 1 THEN (
           SELECT coalesce(json_object_agg(a.lexeme, a.chunks), '{}')::text
           FROM (SELECT t.lexeme, sum(t.chunks)::bigint AS chunks FROM kb_term t
                 WHERE t.collection_id = %(collection)s
                   AND t.language = ANY(%(configs)s::regconfig[])
                   AND t.lexeme = ANY(l.lexemes)
                 GROUP BY t.lexeme) a)
       END
FROM (SELECT set_config('max_parallel_workers_per_gather', '0', true)) AS serial,
     unnest(%(configs)s::text[]) AS q(config)
CROSS JOIN LATERAL (SELECT tsvector_to_array(
    to_tsvector(q.config::regconfig, %(question)s)) AS lexemes) l
"""
_RANKED = """
SELECT c.id FROM kb_chunk c
WHERE c.collection_id = %(collection)s::bigint {current} AND ({matches})
ORDER BY ts_rank(c.search_vector, {query}, 1) DESC, c.id
LIMIT %(limit)s
"""


class Analysis(NamedTuple):
    """The question in one text-search configuration of the collection."""

    words: str  # the all-words tsquery text
    counts: dict[str, int] | None  # chunks of this language per lexeme
    # Chunks of any of the collection's languages per lexeme: what the keyword
    # index reads for it, whichever language's branch asks (the index does not
    # hold the language; the branch's own is tested on each row read). A word
    # rare in French chunks but common in English ones ("use", "object") made
    # the French branch read 20,000 English rows at 100,000 chunks (issue #27).
    # None in one language.
    costs: dict[str, int] | None


def _words(collection: Collection, question: str) -> dict[str, Analysis]:
    """The question's Analysis in each configuration in which it has words;
    counts and costs are None when the collection's words were never counted."""
    params = {
        "configs": configs(collection),
        "question": question,
        "counted": collection.terms_counted is not None,
        "collection": collection.pk,
    }
    with connection.cursor() as cursor:
        cursor.execute(_WORDS, params)
        rows = cursor.fetchall()
    return {
        config: Analysis(words, _json(counts), _json(costs))
        for config, words, counts, costs in rows
        if words
    }


def _json(text: str | None) -> dict[str, int] | None:
    return None if text is None else json.loads(text)


# A word is looked up in each language of the collection: known when a chunk of
# some language holds it as that language stems it; left out when it is a
# common word (no lexeme) in any of them.
_UNKNOWN = """
SELECT w.word FROM unnest(%(words)s::text[]) WITH ORDINALITY AS w(word, n)
CROSS JOIN LATERAL (
    SELECT bool_or(cardinality(l.lexemes) = 0) AS common,
           bool_or(EXISTS (
               SELECT 1 FROM kb_term t
               WHERE t.collection_id = %(collection)s
                 AND t.language = q.config::regconfig AND t.lexeme = ANY(l.lexemes)
           )) AS known
    FROM unnest(%(configs)s::text[]) AS q(config)
    CROSS JOIN LATERAL (SELECT tsvector_to_array(
        to_tsvector(q.config::regconfig, w.word)) AS lexemes) l
) found
WHERE NOT found.common AND NOT found.known AND NOT EXISTS (
    -- a part of a dotted name or path the parser keeps whole ("iterdir" of
    -- "p.iterdir", "unlink" of "Path.unlink"): a word the sources use
    SELECT 1 FROM kb_term t
    WHERE t.collection_id = %(collection)s AND {part_of_name}
)
ORDER BY w.n
""".format(part_of_name=_part_of_name("lower(w.word)"))
QUESTION_WORD_RE = re.compile(r"\w[\w'-]*")
_RUN_RE = re.compile(r"\S+")


def _without_paths(question: str) -> str:
    """The question without its paths and URLs ("/home/me/my_project/x.py",
    "https://x.org/a_b"): their parts are the asker's, no words a source
    should use. One slash between words is prose ("and/or", "GraphQL/REST")."""

    def kept(match: re.Match) -> str:
        run = match.group(0).strip("()[]<>\"'.,;:!?")
        path = run[:1] in "/~" or "://" in run or run.count("/") > 1
        return " " if "/" in run and (path or "." in run) else match.group(0)

    return _RUN_RE.sub(kept, question) if "/" in question else question


MAX_UNKNOWN_CHECKED = 20  # words of a question looked up


def unknown_words(collection: Collection, question: str) -> tuple[list[str], int]:
    """The question's words (not the common ones) that no chunk of the collection
    holds, as counted after its last ingestion, and how many words were looked
    up; nothing when never counted. A question about "GraphQL subscriptions"
    over docs that never mention GraphQL gets an answer about the rest of it,
    and should say so."""
    if collection.terms_counted is None:
        return [], 0
    question = _without_paths(question)  # the asker's own paths and URLs
    words = list(
        dict.fromkeys(
            word
            for word in QUESTION_WORD_RE.findall(question)
            if (len(word) > 2 or word.isdigit()) and word.casefold() not in STOPWORDS
        )
    )[:MAX_UNKNOWN_CHECKED]
    if not words:
        return [], 0
    params = {
        "words": words,
        "configs": configs(collection),
        "collection": collection.pk,
    }
    with connection.cursor() as cursor:
        cursor.execute(_UNKNOWN, params)
        return [row[0] for row in cursor.fetchall()], len(words)


def _lexemes(word: str) -> list[str]:
    return [found.replace("''", "'") for found in _LEXEME_RE.findall(word)]


def _ranked(
    collection: Collection,
    include_deprecated: bool,
    terms: dict[str, str],
    limit: int,
    weights: dict[str, dict[str, float]] | None = None,
) -> list[int]:
    """Chunks matching the tsquery text `terms[config]` among the chunks of that
    configuration, best first: by BM25 with each language's lexemes' `weights`
    (IDF), else by ts_rank with length normalisation (of the stored tsvector)."""
    current = "" if include_deprecated else f"AND {metadata.current_sql('c')}"
    terms = {config: words for config, words in terms.items() if words}
    if not terms:
        return []
    params: dict = {"collection": collection.pk, "limit": limit}
    matches, ranks = [], []
    for n, (config, words) in enumerate(sorted(terms.items())):
        params[f"config{n}"], params[f"terms{n}"] = config, words
        query = f"to_tsquery(%(config{n})s::regconfig, %(terms{n})s)"
        matches.append(
            f"(c.language = %(config{n})s::regconfig AND c.search_vector @@ {query})"
        )
        rank = f", ts_rank(c.search_vector, {query}, 1) AS rank"
        ranks.append("" if weights else rank)
    # In several languages, one branch per language: each is read from the
    # keyword index like a one-language search. Their OR in one WHERE made the
    # planner read every chunk of the collection and test each (issue #27).
    found = [
        _FOUND.format(current=current, matches=match, rank=rank)
        for match, rank in zip(matches, ranks, strict=True)
    ]
    if weights:
        sql = _BM25.format(found="\n    UNION ALL\n".join(found))
    elif len(found) == 1:
        sql = _RANKED.format(current=current, matches=matches[0], query=query)
    else:
        sql = _RANKED_LANGUAGES.format(found="\nUNION ALL\n".join(found))
    if weights:
        rows = [
            (config, lexeme, idf)
            for config, idfs in weights.items()
            for lexeme, idf in idfs.items()
        ]
        params.update(
            configs=[r[0] for r in rows],
            lexemes=[r[1] for r in rows],
            idf=[r[2] for r in rows],
            k1=BM25_K1,
            b=BM25_B,
            avg=average_tokens(collection),
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def ranking() -> str:
    """How keyword matches are ranked: "bm25" or "ts_rank" (KB_KEYWORD_RANKING)."""
    return settings.KB_KEYWORD_RANKING


def _idf(lexemes: list[str], counts: dict[str, int], total: int) -> dict[str, float]:
    """BM25's inverse document frequency of each lexeme (the Lucene form, never
    negative); a lexeme counted in no chunk weighs as if in one."""
    return {
        lexeme: math.log(1 + (total - df + 0.5) / (df + 0.5))
        for lexeme in dict.fromkeys(lexemes)
        for df in [min(max(counts.get(lexeme, 0), 1), total)]
    }


_average_tokens: dict[tuple[int, object], float] = {}


def average_tokens(collection: Collection) -> float:
    """Mean embedded tokens of the collection's chunks, once per count of its terms."""
    key = (collection.pk, collection.terms_counted)
    if key not in _average_tokens:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT avg(c.token_count) FROM kb_chunk c "
                "WHERE c.collection_id = %s::bigint",
                [collection.pk],
            )
            found = cursor.fetchone()[0]
        _average_tokens[key] = max(float(found or 1), 1.0)
    return _average_tokens[key]


# BM25 over the chunks the GIN index finds: term frequency = positions of the
# lexeme in the stored tsvector; length = tokens of the embedded text (heading
# path included) that the tsvector is made of. Only the question's lexemes are
# unnested (marked by setweight, kept by ts_filter): unnesting whole tsvectors
# made the keyword leg 2-3 times slower than ts_rank at 10,000 chunks.
# Both rankings filter on the chunk's own collection, the keyword index's first
# key (kb.models.Chunk): the index yields only the asked collection's matches.
_FOUND = """SELECT c.id, c.language::text AS config, c.search_vector,
           greatest(c.token_count, 1) AS tokens{rank}
    FROM kb_chunk c
    WHERE c.collection_id = %(collection)s::bigint {current} AND ({matches})"""
_RANKED_LANGUAGES = """
SELECT f.id FROM (
{found}
) f
ORDER BY f.rank DESC, f.id
LIMIT %(limit)s
"""
_BM25 = """
WITH found AS (
    {found}
)
SELECT f.id FROM found f CROSS JOIN LATERAL (
    SELECT sum(w.idf * tf * (%(k1)s + 1)
               / (tf + %(k1)s * (1 - %(b)s + %(b)s * f.tokens / %(avg)s))) AS score
    FROM unnest(ts_filter(setweight(f.search_vector, 'A', %(lexemes)s::text[]),
                          '{{a}}')) u
    JOIN unnest(%(configs)s::text[], %(lexemes)s::text[], %(idf)s::float8[])
      AS w(config, lexeme, idf) ON w.lexeme = u.lexeme AND w.config = f.config
    CROSS JOIN LATERAL (SELECT coalesce(array_length(u.positions, 1), 1) AS tf) t
) r
ORDER BY r.score DESC NULLS LAST, f.id
LIMIT %(limit)s
"""
