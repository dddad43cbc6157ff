"""Keyword search: PostgreSQL full-text search over each chunk's stored tsvector.

1. Chunks holding all of the question's stemmed words, ranked by `ts_rank` with
   length normalisation.
2. When fewer than MIN_ALL chunks hold them all, chunks holding any of them top
   the list up. Ranking reads every chunk that matches, and in a big collection a
   common word ("job", "rate") matches tens of thousands of them: the any-word
   query takes the question's words rarest first, only while the chunks they
   match together stay within MAX_ANY_ROWS (issue #8: 324 ms for one question at
   100,000 chunks). Collections below that size always use every word.

How many chunks hold each word is counted per collection into `Term` rows by
count_terms(), after ingestion (a deduplicated job, see kb.jobs). Counts can lag
behind the index; they only decide which words to leave out.
"""

from __future__ import annotations

import re

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from kb.models import Chunk, Collection, Term

CONFIG = "english"
MIN_ALL = 10  # fewer all-words matches than this: add any-word matches
MAX_ANY_ROWS = 1000  # chunks the any-word query may rank (by the Term counts)

_LEXEME_RE = re.compile(r"'((?:[^']|'')*)'")


def search(
    chunks: QuerySet[Chunk],
    collection: Collection,
    question: str,
    limit: int,
    max_any_rows: int = MAX_ANY_ROWS,
) -> list[int]:
    """Ids of the best `limit` chunks of `chunks` for the question's words."""
    all_words = _all_words(question)
    if not all_words:
        return []
    ids = _ranked(chunks, all_words, limit)
    if len(ids) < MIN_ALL:
        words = affordable(collection, all_words.split(" & "), max_any_rows)
        seen = set(ids)
        more = _ranked(chunks, " | ".join(words), limit)
        ids += [i for i in more if i not in seen][: limit - len(ids)]
    return ids


def affordable(
    collection: Collection, words: list[str], max_rows: int = MAX_ANY_ROWS
) -> list[str]:
    """The words (tsquery operands) the any-word query can afford, rarest first:
    together they match at most `max_rows` chunks (the rarest always goes in)."""
    if not collection.terms_counted or len(words) < 2:
        return words
    lexemes = {word: _lexemes(word) for word in words}
    counts = dict(
        Term.objects.filter(
            collection=collection,
            lexeme__in={lexeme for found in lexemes.values() for lexeme in found},
        ).values_list("lexeme", "chunks")
    )

    def matches(word: str) -> int:  # a phrase matches at most its rarest word
        return min((counts.get(lexeme, 0) for lexeme in lexemes[word]), default=0)

    kept, total = [], 0
    for word in sorted(words, key=matches):
        if kept and total + matches(word) > max_rows:
            break
        kept.append(word)
        total += matches(word)
    return kept


def count_terms(collection: Collection) -> int:
    """Recount how many of the collection's chunks hold each word; returns chunks."""
    chunks = (
        f"SELECT c.search_vector FROM {Chunk._meta.db_table} c "
        f"JOIN kb_source s ON s.id = c.source_id "
        f"WHERE s.collection_id = {int(collection.pk)}"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        # One count at a time per collection: a second one waits, then redoes it.
        locked = Collection.objects.select_for_update().filter(pk=collection.pk)
        if not locked.exists():
            return 0
        Term.objects.filter(collection=collection).delete()
        cursor.execute(
            f"INSERT INTO {Term._meta.db_table} (collection_id, lexeme, chunks) "
            "SELECT %s, word, ndoc FROM ts_stat(%s)",
            [collection.pk, chunks],
        )
        total = Chunk.objects.filter(source__collection=collection).count()
        counted = timezone.now()
        locked.update(terms_counted=counted, terms_chunks=total)
    collection.terms_counted, collection.terms_chunks = counted, total
    return total


def _all_words(question: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT plainto_tsquery(%s, %s)::text", [CONFIG, question])
        return cursor.fetchone()[0] or ""


def _lexemes(word: str) -> list[str]:
    return [found.replace("''", "'") for found in _LEXEME_RE.findall(word)]


def _ranked(chunks: QuerySet[Chunk], terms: str, limit: int) -> list[int]:
    # F(): rank the stored tsvector; a plain name would be re-parsed from text.
    query = SearchQuery(terms, search_type="raw", config=CONFIG)
    ranked = (
        chunks.filter(search_vector=query)
        .annotate(rank=SearchRank(F("search_vector"), query, normalization=1))
        .order_by("-rank", "id")
    )
    return list(ranked.values_list("id", flat=True)[:limit])
