"""The question: cleaned and checked before retrieval, embedded for the vector
leg. Questions the ask path refuses raise QuestionError.
"""

from __future__ import annotations

import re

from kb import embedding, parsing

MAX_QUESTION_CHARS = 1000


class QuestionError(ValueError):
    """The question cannot be asked as given (empty, too long)."""


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
    if parsing.mostly_unreadable(question):
        raise QuestionError(
            f"The question is mostly words of over {parsing.UNREADABLE_WORD_CHARS} "
            "letters and digits, which the model reads as unknown tokens; "
            "ask in words."
        )
    return question


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


def embed_question(question: str):
    _check_window(question)
    return embedding.get_embedder().embed([question], origins=["the question"])[0]
