"""Misspelled question words (issue #28): a word no chunk of the collection
holds, but one edit or two away from a word its chunks do hold, is searched as
that word, and the answer says so ("trottling" is searched as "throttling").

Candidates are the collection's counted lexemes (`kb_term`, per language, as
keyword search stems them) that share trigrams with the word's own lexeme
(pg_trgm, migration 0026); one is taken when its edit distance is small for
the word's length, the most similar first, then the most used. The word put in
the question is one the sources write: the first word of a chunk holding the
lexeme that stems to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction

from kb import embedding
from kb.models import Collection
from kb.retrieval import keywords
from kb.retrieval.question import is_stopword_slip

# Unknown words a question may have and still be looked up: more is no typo.
MAX_CORRECTED = 2
MAX_UNACCENTED = 5  # unknown words looked up as written without their accents
MIN_LETTERS = 4  # shorter words are names, codes or abbreviations
# Letters a stem needs to be matched as a stem: one edit in four letters makes
# another word (Russian "слева" -> "слев", one letter from "след", the stem of
# "следующим"; "cares" -> "care", one from "card" of "carding").
MIN_STEM_LETTERS = 5


@dataclass(frozen=True)
class Correction:
    asked: str  # the word as the question has it
    searched: str  # the collection's word it is searched as
    # Another form of the same word, no misspelling: outside English, the
    # stems of the two, one beginning the other ("симулировать", stemmed
    # "симулирова", for "симулирование", "симулирован"). Searched all the
    # same, without a note (QA over Debian's Russian manuals).
    form: bool = False


def corrections(collection: Collection, unknown: list[str]) -> list[Correction]:
    """Of a question's `unknown` words (keywords.unknown_words), those that are
    close misspellings of a word of the collection, each with that word. A
    common word mistyped (slips) does not count towards MAX_CORRECTED, and is
    only searched as a word of the collection it is as close to as written
    ("wdith" as "width"; "shoud" not as "shouting" through its stem). A word
    of the embedding model's dictionary (embedding.dictionary: its whole
    words) is no misspelling: "mean" was searched as "man", "decide" as
    "decoder" (QA over Javadoc)."""
    words = [
        word
        for word in unknown[:MAX_UNACCENTED]
        # a capital names something: "Slack" is no slip for "stack"
        if len(word) >= MIN_LETTERS and word.isalpha() and word == word.lower()
    ]
    slipped = slips(unknown, collection.embedding_model)
    found = {}
    for word in words:  # accents left out: no slip, whatever else is unknown
        if (searched := _accented_word(collection, word)) is not None:
            found[word] = Correction(word, searched)
    if len(unknown) - len(found) - len(slipped - found.keys()) > MAX_CORRECTED:
        # Many words no source uses (another language, another topic): no slip
        # of the keyboard, and each lookup costs queries.
        return list(found.values())
    known = embedding.dictionary(collection.embedding_model)
    for word in words:
        if word in found or word in known:
            continue  # a word the docs do not use, no misspelling: "mean", "decide"
        if near := _nearest_word(collection, word, as_stem=word not in slipped):
            found[word] = Correction(word, *near)
    return [found[word] for word in words if word in found]


def slips(words: list[str], model: str | None = None) -> set[str]:
    """The words that are a common word mistyped: one edit from one of four
    letters or more ("shoud", "wich", "whta"; question.is_stopword_slip) and
    no word of the embedding `model`'s vocabulary (default: the default
    model's; "width", "three" and "abort" are words)."""
    known = embedding.vocabulary(model)
    return {w for w in words if is_stopword_slip(w) and w.casefold() not in known}


def without_slips(words: list[str], model: str | None = None) -> list[str]:
    """`words` without the slips: a mistyped "should" is no topic no source
    covers."""
    slipped = slips(words, model)
    return [word for word in words if word not in slipped]


def corrected(question: str, found: list[Correction]) -> str:
    """The question with each corrected word replaced where it stands alone."""
    words = {c.asked: c.searched for c in found}
    if not words:
        return question
    return keywords.QUESTION_WORD_RE.sub(
        lambda m: words.get(m.group(0), m.group(0)), question
    )


def max_edits(length: int) -> int:
    """Edits a misspelling of a `length`-letter word may have: one up to eight
    letters, two beyond. Two in a shorter word made other words of it
    ("graphql" is "graph" and two letters)."""
    return 1 if length <= 8 else 2


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, with a transposition of neighbours as one edit."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1]


# The word's lexeme in each language of the collection, and the counted lexemes
# of that language sharing enough trigrams with it or with the word as written
# (pg_trgm's `%`, its GIN index on kb_term), most similar first.
_CANDIDATES = """
SELECT q.config, l.lexeme, t.lexeme
FROM unnest(%(configs)s::text[]) AS q(config)
CROSS JOIN LATERAL (SELECT (tsvector_to_array(
    to_tsvector(q.config::regconfig, %(word)s)))[1] AS lexeme) l
JOIN kb_term t ON t.collection_id = %(collection)s
     AND t.language = q.config::regconfig
     AND (t.lexeme %% l.lexeme OR t.lexeme %% %(word)s)
ORDER BY greatest(similarity(t.lexeme, l.lexeme), similarity(t.lexeme, %(word)s))
         DESC, t.chunks DESC, t.lexeme
LIMIT %(limit)s
"""
CANDIDATES = 3  # lexemes whose written word is compared with the asked one
# Trigram similarity a candidate needs (pg_trgm's default is 0.3): two letters
# swapped in a short word leave few trigrams in common ("pagniation" and
# "pagination" as stemmed, 0.27); the edit distance decides.
MIN_SIMILARITY = 0.2


# Accented letters and the letters they fold to (translate(): one for one)
ACCENTED = "àáâãäåçèéêëìíîïñòóôõöùúûüýÿ"
PLAIN = "aaaaaaceeeeiiiinooooouuuuyy"
MIN_FOLDED = 4  # letters an accented lexeme keeps to be matched by its prefix

# The accented lexemes of the word's language whose letters without accents
# begin the word as asked: "securite" typed for "sécurité" (stemmed "sécur"),
# whose stems differ and whose trigrams hardly meet.
_FOLDED = """
SELECT q.config, t.lexeme
FROM unnest(%(configs)s::text[]) AS q(config)
JOIN kb_term t ON t.collection_id = %(collection)s
     AND t.language = q.config::regconfig
     AND length(t.lexeme) >= %(min)s
     AND t.lexeme <> translate(t.lexeme, %(accented)s, %(plain)s)
     AND starts_with(%(word)s, translate(t.lexeme, %(accented)s, %(plain)s))
ORDER BY length(t.lexeme) DESC, t.chunks DESC, t.lexeme
LIMIT %(limit)s
"""


_FOLDING = str.maketrans(ACCENTED, PLAIN)


def fold(word: str) -> str:
    """The word without its accents ("sécurité" -> "securite")."""
    return word.translate(_FOLDING)


def _nearest_word(
    collection: Collection, word: str, as_stem: bool = True
) -> tuple[str, bool] | None:
    """The collection's written word closest to `word` (casefolded), when it is
    within max_edits() of it, as written or (`as_stem`) as stemmed, and
    whether it is another form of it (Correction.form); else None."""
    params = {
        "configs": keywords.configs(collection),
        "word": word,
        "collection": collection.pk,
        "limit": CANDIDATES,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('pg_trgm.similarity_threshold', %s, true)",
            [str(MIN_SIMILARITY)],
        )
        cursor.execute(_CANDIDATES, params)
        rows = cursor.fetchall()
    for config, own, lexeme in rows:
        if not own or lexeme == own:
            continue
        written = _written_form(collection, config, lexeme)
        if written is None or written[0] != word[0]:  # typos keep the first letter
            continue
        near = edit_distance(word, written) <= max_edits(len(word))
        if near or (
            as_stem
            and len(own) >= MIN_STEM_LETTERS
            and edit_distance(own, lexeme) <= max_edits(len(own))
        ):
            form = not near and _is_form(config, word, own, lexeme)
            return written, form
    return None


def _is_form(config: str, word: str, own: str, lexeme: str) -> bool:
    """Whether the asked `word` (stemmed `own`) and a written word of the
    collection (stemmed `lexeme`) are forms of one word: the stemmer took an
    ending off the asked word, and one stem begins the other, long enough to
    be no other word (MIN_STEM_LETTERS). Not in English, whose forms share
    their stem ("throttlin" is a misspelling cut short), nor where nothing is
    stemmed; the caller leaves out words a typo away ("installaton",
    "конфигурацыя" are misspellings)."""
    short, long = sorted((own, lexeme), key=len)
    return (
        config not in ("english", "simple")
        and own != word.casefold()
        and len(short) >= MIN_STEM_LETTERS
        and long.startswith(short)
    )


# A word some chunk of that language writes that stems to the lexeme: what the
# question says instead (an English stem such as "throttl" is no word).
_WRITTEN = """
SELECT w FROM (
    SELECT c.embedded_text FROM kb_chunk c
    WHERE c.collection_id = %(collection)s::bigint
      AND c.language = %(config)s::regconfig
      AND c.search_vector @@ quote_literal(%(lexeme)s)::tsquery
    LIMIT 1
) c CROSS JOIN LATERAL regexp_split_to_table(c.embedded_text, '[^[:alnum:]]+') w
WHERE w <> '' AND to_tsvector(%(config)s::regconfig, w)
      @@ quote_literal(%(lexeme)s)::tsquery
LIMIT 1
"""


def _written_form(collection: Collection, config: str, lexeme: str) -> str | None:
    params = {"collection": collection.pk, "config": config, "lexeme": lexeme}
    with connection.cursor() as cursor:
        cursor.execute(_WRITTEN, params)
        row = cursor.fetchone()
    return row[0].casefold() if row else None


def _accented_word(collection: Collection, word: str) -> str | None:
    """The collection's word that `word` is without its accents, or within
    max_edits() of, found by an accented lexeme beginning it. Looked for
    before any misspelling: an English word a letter away ("security" for
    "securite") is not what a French question meant."""
    folded = fold(word)
    params = {
        "configs": keywords.configs(collection),
        "word": folded,
        "collection": collection.pk,
        "min": MIN_FOLDED,
        "accented": ACCENTED,
        "plain": PLAIN,
        "limit": CANDIDATES,
    }
    with connection.cursor() as cursor:
        cursor.execute(_FOLDED, params)
        rows = cursor.fetchall()
    for config, lexeme in rows:
        written = _written_form(collection, config, lexeme)
        if written is not None and (
            edit_distance(folded, fold(written)) <= max_edits(len(folded))
        ):
            return written
    return None
