"""Late interaction: the top sections reordered by how well each of the
question's words finds its match in them, read by the embedding model itself.

A chunk's vector is the mean of its token states; a question word that one
sentence of a long chunk answers is averaged away. Here every token state is
kept (embedding.Embedder.token_states) and each content word of the question
takes its best match among a chunk's tokens (MaxSim, as in ColBERT, Khattab and
Zaharia 2020); a section scores the mean of those over the question's words, in
its best chunk. The all-MiniLM-L6-v2 states were never trained for this, so the
order is fused with retrieval's own (reciprocal ranks, equal weights) rather
than replacing it: alone it lost 6 of the 98 pooled tuned cases.

Off by default (KB_LATE_INTERACTION): it reads every loaded chunk of the top
KB_LATE_INTERACTION_TOP_N sections through the model on each question, about
0.5 s a question on two cores. Measured in docs/benchmarks.md ("Late
interaction"): held out 430 of 474 cases against 422.
"""

from __future__ import annotations

import re
import time

import numpy as np
from django.conf import settings

from kb import embedding
from kb.retrieval.question import STOPWORDS
from kb.retrieval.rows import Selected

_WORD_TOKEN = re.compile(r"\w")  # not punctuation, not a ##continuation piece
METASPACE = "\u2581"


def enabled(asked: bool | None = None) -> bool:
    """On when asked for (an evaluation's override), else as the setting says."""
    return settings.KB_LATE_INTERACTION if asked is None else asked


def run_config(asked: bool | None = None) -> dict:
    """What an evaluation run records of the stage: nothing when it is off."""
    if not enabled(asked):
        return {}
    return {
        "late_interaction": True,
        "late_interaction_top_n": settings.KB_LATE_INTERACTION_TOP_N,
    }


def pool_size(k: int, asked: bool | None = None) -> int:
    """Sections retrieval should load: k, or the stage's top N when it is on."""
    return max(k, settings.KB_LATE_INTERACTION_TOP_N) if enabled(asked) else k


def question_states(
    question: str, embedder: embedding.Embedder | None = None
) -> np.ndarray:
    """The question's token states (read after the model's query prompt), its
    content words only: no punctuation, no word piece continuing a word, no
    common word (question.STOPWORDS); all of them when nothing is left.
    `embedder`: the collection's (default: the default model's)."""
    embedder = embedder or embedding.get_embedder()
    (found,) = embedder.token_states([question], query=True)
    keep = [
        i
        for i, token in enumerate(found.tokens)
        # A SentencePiece word starts with "▁" (e5's XLM-R vocabulary).
        if _WORD_TOKEN.match(word := token.removeprefix(METASPACE))
        and word.lower() not in STOPWORDS
    ]
    return found.states[keep] if keep else found.states


def maxsim(question: np.ndarray, text: np.ndarray) -> float:
    """Mean over the question's tokens of each one's best cosine in the text."""
    if not len(question) or not len(text):
        return -1.0
    return float((question @ text.T).max(axis=1).mean())


def section_texts(item: Selected) -> list[str]:
    """What is read of a chosen section: each loaded chunk under the section's
    heading path (a long section's windows around its hits), else its body."""
    path = item.section.heading_path
    if item.chunks:
        return [f"{path}\n{chunk.text}" for chunk in item.chunks]
    return [f"{path}\n{item.section.body}"]


def rerank(
    question: str,
    selected: list[Selected],
    rrf_k: int,
    embedder: embedding.Embedder | None = None,
) -> tuple[list[Selected], float]:
    """`selected` with its first KB_LATE_INTERACTION_TOP_N reordered by
    reciprocal rank fusion of their order and their late-interaction scores,
    and the milliseconds it took."""
    started = time.perf_counter()
    top = selected[: settings.KB_LATE_INTERACTION_TOP_N]
    if len(top) < 2:
        return selected, 0.0
    owners: list[int] = []
    texts: list[str] = []
    for index, item in enumerate(top):
        for text in section_texts(item):
            owners.append(index)
            texts.append(text)
    embedder = embedder or embedding.get_embedder()
    asked = question_states(question, embedder)
    scores = [-1.0] * len(top)
    states = embedder.token_states(texts)
    for owner, found in zip(owners, states, strict=True):
        scores[owner] = max(scores[owner], maxsim(asked, found.states))
    by_score = sorted(range(len(top)), key=lambda i: -scores[i])
    late_rank = {index: rank for rank, index in enumerate(by_score, 1)}
    order = sorted(
        range(len(top)),
        key=lambda i: -(1 / (rrf_k + i + 1) + 1 / (rrf_k + late_rank[i])),
    )
    ms = (time.perf_counter() - started) * 1000
    return [top[i] for i in order] + selected[len(top) :], ms
