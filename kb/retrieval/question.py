"""The question: cleaned and checked before retrieval, embedded for the vector
leg. Questions the ask path refuses raise QuestionError.
"""

from __future__ import annotations

import os
import re
import threading
import time
import unicodedata
from concurrent.futures import Future, ThreadPoolExecutor

from django.utils.translation import gettext

from kb import dates, decoding, embedding

MAX_QUESTION_CHARS = 1000


class QuestionError(ValueError):
    """The question cannot be asked as given (empty, too long)."""


SURROGATE_RE = re.compile("[\\ud800-\\udfff]")
_WORD_RE = re.compile(r"\w+")
# Words that name nothing to search for; the answerer's sentence scores skip them too.
STOPWORDS = frozenset(
    """a an and are as at be been by can could do does for from had has have how i if
    in is it its me my of on or our should so that the their them then there these
    they this to was we were what when where which who why will with would you your
    about after before into than also any all may might must not no yes get got
    """.split()
)


_LONG_STOPWORDS = tuple(sorted(w for w in STOPWORDS if len(w) >= 4))


def is_stopword_slip(word: str) -> bool:
    """Whether `word` is one edit (a letter left out, added, changed or two
    swapped) from a common word of four letters or more: "shoud", "wich",
    "whta" (but also "width" and "three": kb.retrieval.spelling.slips tells
    words from slips)."""
    word = word.casefold()
    if len(word) < 4 or word in STOPWORDS:
        return False
    return any(_one_edit(word, common) for common in _LONG_STOPWORDS)


def _one_edit(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) < len(b):
        return a[i:] == b[i + 1 :]
    return a[i + 1 :] == b[i + 1 :] or (
        i + 1 < len(a)
        and a[i] == b[i + 1]
        and a[i + 1] == b[i]
        and a[i + 2 :] == b[i + 2 :]
    )


def content_words(question: str) -> frozenset[str]:
    """The question's words that name something, casefolded (no STOPWORDS)."""
    return frozenset(
        word for word in _WORD_RE.findall(question.casefold()) if word not in STOPWORDS
    )


def unstorable(text: str) -> str | None:
    """What in `text` PostgreSQL text cannot store, worded for a refusal ("The
    question contains ..."), or None. The question, a golden case's fields and a
    feedback note are checked alike."""
    if "\x00" in text:
        return gettext("a NUL character (\\x00)")
    if SURROGATE_RE.search(text):  # from JSON's "\ud800": no UTF-8 for it
        return gettext("a lone surrogate (such as \\ud800), which is no character")
    return None


def clean_question(question: str) -> str:
    """The question as searched: compatibility characters folded (NFKC: the
    full-width Latin of East Asian input methods reads as ASCII), one line."""
    question = " ".join(unicodedata.normalize("NFKC", question or "").split())
    if not question:
        raise QuestionError(gettext("Please type a question."))
    if problem := unstorable(question):
        raise QuestionError(
            gettext("The question contains %(problem)s; remove it and ask again.")
            % {"problem": problem}
        )
    if len(question) > MAX_QUESTION_CHARS:
        raise QuestionError(
            gettext(
                "The question is %(length)d characters long; the limit is "
                "%(limit)d. Ask about one thing at a time."
            )
            % {"length": len(question), "limit": MAX_QUESTION_CHARS}
        )
    if not any(_names_something(word) for word in _WORD_RE.findall(question)):
        raise QuestionError(
            gettext(
                "The question has no word to search for (only common words, symbols "
                "or emoji); ask about something."
            )
        )
    if decoding.mostly_unreadable(question):
        raise QuestionError(
            gettext(
                "The question is mostly words of over %(chars)d letters and digits, "
                "which the model reads as unknown tokens; ask in words."
            )
            % {"chars": decoding.UNREADABLE_WORD_CHARS}
        )
    return question


def _names_something(word: str) -> bool:
    """A word worth searching for: not a common one, or one in capitals ("IT",
    "ON" as a product's name)."""
    return word.casefold() not in STOPWORDS or (len(word) > 1 and word.isupper())


def check_question(question: str, collection=None) -> str:
    """The question as asked, or QuestionError for one the ask path refuses:
    empty, too long, or over the window of the collection's model (of the
    default model without one; golden cases are checked so)."""
    question = clean_question(question)
    _check_window(question, _embedder(collection))
    return question


def _embedder(collection=None) -> embedding.Embedder:
    if collection is None:
        return embedding.get_embedder()
    return embedding.for_collection(collection)


def _check_window(question: str, embedder: embedding.Embedder) -> None:
    count = embedder.count_query_tokens(question)
    if count > embedder.window:
        raise QuestionError(
            gettext("The question has %(count)d tokens; the model reads %(window)d.")
            % {"count": count, "window": embedder.window}
        )


# Embedding the question while the keyword leg runs (issue #27): the model
# releases the GIL while it computes, and the keyword search waits on
# PostgreSQL, so the two overlap (multilingual-e5-small takes 10-15 ms, as long
# as keyword search in four languages). Database work stays on the caller's
# thread and connection, so it sees the caller's transaction.
EMBED_THREADS = 4
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def embed_question_soon(question: str, collection) -> Future:
    """The question's vector in the collection's model (its query prompt
    before it, e5's `query: `), computed on a background thread: a future of
    (vector, milliseconds the embedding took). The window is checked here, so a
    question too long raises QuestionError at once, on the caller's thread."""
    embedder = _embedder(collection)
    _check_window(question, embedder)
    return _threads().submit(_timed_query, embedder, question)


def _timed_query(embedder: embedding.Embedder, question: str):
    started = time.perf_counter()
    vector = embedder.embed_query(question)
    return vector, (time.perf_counter() - started) * 1000


def _threads() -> ThreadPoolExecutor:
    """This process's pool, made on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(EMBED_THREADS, thread_name_prefix="kb-question")
        return _pool


def _after_fork() -> None:
    """A pool made before a fork (an RQ work horse) has no threads in the child
    and would never run anything, and its lock may be held: the child makes its
    own."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def periods_of(question: str) -> list[dates.Period]:
    """The periods the question names ("on 6 September", "autumn 2022"), for the
    dated leg (search.dated_ids); none for most questions."""
    return dates.question_periods(question)


# Two things a question sets side by side (issue #29: "Taint or toleration?"),
# each as the words that may name it, longest first.
_TERM = r"[\w.()#:/+-]+"
_BETWEEN_RE = re.compile(
    rf"\b(?:between|entre|между)\s+((?:{_TERM}\s+){{0,3}}?{_TERM})\s+"
    rf"(?:and|et|y|e|и)\s+((?:{_TERM}\s+){{0,3}}?{_TERM})\s*(?:[?.!,;:]|$)",
    re.IGNORECASE,
)
_VERSUS_RE = re.compile(
    rf"((?:{_TERM}\s+){{0,2}}{_TERM})\s+(?:vs\.?|versus|or|ou|o|или)\s+"
    rf"((?:{_TERM}\s+){{0,2}}?{_TERM})\s*(?:\?|$)",
    re.IGNORECASE,
)
MAX_TERM_QUESTION_WORDS = 14  # longer questions are not "A or B?"


def named_terms(question: str) -> list[list[str]]:
    """The two things a question compares ("difference between A and B", "A vs
    B", "A or B?"), each as the words that may name it, longest first; [] for
    any other question. The words left of "or" are read from the end, right of
    it from the start: "Should I use a taint or a toleration?" names "taint"
    (or "a taint", "use a taint") and "toleration"."""
    if len(question.split()) > MAX_TERM_QUESTION_WORDS:
        return []
    found = _BETWEEN_RE.search(question) or _VERSUS_RE.search(question)
    if not found:
        return []
    left, right = _trimmed(found.group(1)), _trimmed(found.group(2))
    terms = [
        [" ".join(left[i:]) for i in range(len(left)) if _named(left[i:])],
        [" ".join(right[:i]) for i in range(len(right), 0, -1) if _named(right[:i])],
    ]
    return terms if all(terms) else []


# A question whose answer is spread over several records (issue #29: "Which
# incidents involved a LimitRange?"). French "quels", Spanish "cuáles" and
# Russian "какие" are plural themselves; after "which" and "qué" the first word
# that names something is a plural ("which of the outages").
_PLURAL_ASKING_RE = re.compile(
    r"^\W*(?:(?:in|dans|en|в|во|на|при)\s+)?"
    r"(?:quel(?:le)?s|lesquel(?:le)?s|cu[áa]les|какие|каких|каким|какими)\b",
    re.IGNORECASE,
)
_ASKING_RE = re.compile(
    r"^\W*(?:(?:in|en)\s+)?(?:which|qu[ée])\s+((?:[\w'-]+\s+){0,2}[\w'-]+)",
    re.IGNORECASE,
)
_NOT_PLURAL = frozenset("pasa cosas".split())


def across_documents(question: str) -> bool:
    """Whether the question asks which of several records something holds for
    ("Which incidents involved a LimitRange?", "Quels incidents …", "¿Qué
    incidentes …?", "Какие инциденты …"), rather than about one thing."""
    if _PLURAL_ASKING_RE.match(question):
        return True
    found = _ASKING_RE.match(question)
    named = [w for w in found.group(1).split() if not _unnamed(w)] if found else []
    return bool(named) and _plural(named[0])


def _plural(word: str) -> bool:
    """A plural noun as English, French and Spanish write most of them."""
    folded = word.casefold()
    if len(folded) < 4 or _unnamed(folded) or folded in _NOT_PLURAL:
        return False
    return folded.endswith(("s", "x")) and not folded.endswith(("ss", "us", "is"))


# Articles of the interface's languages, besides the English stopwords.
_ARTICLES = frozenset("un une le la les des du l' el los las lo uno una".split())


def _unnamed(word: str) -> bool:
    folded = word.casefold()
    return folded in STOPWORDS or folded in _ARTICLES


def _trimmed(text: str) -> list[str]:
    """The words of one side of a comparison without the articles and
    stopwords at either end ("a toleration" -> "toleration")."""
    words = text.split()
    while words and _unnamed(words[0]):
        words.pop(0)
    while words and _unnamed(words[-1]):
        words.pop()
    return words


def _named(words: list[str]) -> bool:
    """Whether words can name a thing: they do not start or end with a stopword."""
    return bool(words) and not (_unnamed(words[0]) or _unnamed(words[-1]))
