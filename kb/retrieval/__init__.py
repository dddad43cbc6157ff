"""Question -> the context handed to the answerer: search small, answer big.

The stages, in the order retrieve() (pipeline.py) runs them, one module each,
with the SQL it runs beside it:

- question.py: clean and check the question; embed it.
- search.py: the nearest chunks by cosine (pgvector) and the nearest sections
  by their centroid; keywords.py: the best keyword matches (PostgreSQL full-text
  search, ts_rank or BM25); exact.py: the chunks holding the question's exact
  tokens (codes, options, identifiers as written). search.fuse: the rankings
  by reciprocal rank fusion, plus the rank of each chunk's section, into hits.
  hnsw_recall.py:
  after every publish, whether the shared HNSW index finds a large
  collection's nearest chunks (else search.py searches it exactly).
- sections.py: group hits by section, keeping each section's best score; take
  the top k (then reranking.py may reorder them) and load what expansion reads.
  rows.py: what it loads (section and chunk rows, Selected); tables.py: the
  header line of the table a loaded row belongs to.
- expansion.py: each section whole when the token budget allows, otherwise the
  neighbourhood of its hits (adjacent chunks, nearest first, widened to whole
  sentences); then sections.preceding: the section before a whole one.
- passages.py: merge passages of one source that overlap or touch, keeping
  every location; the types retrieval hands on (Passage, Location, Result).
- baselines.py: the "sections" and "fixed" strategies evaluation compares with.

rows.py, tables.py, expansion.py and passages.py touch no database.
"""

from __future__ import annotations

import importlib
from typing import Any

# The public names, by the module that defines them. They load on first use
# (PEP 562) so that importing a pure stage (kb.retrieval.tables, ...) does not
# import the ORM through this package.
_EXPORTS = {
    "baselines": (
        "DEFAULT",
        "FIXED",
        "FIXED_CHUNK_TOKENS",
        "SECTIONS",
        "SECTIONS_CHUNK_TOKENS",
        "SECTIONS_K",
        "STRATEGIES",
        "sections_baseline",
        "strategy_of",
    ),
    "expansion": ("GAP_TOKENS", "window_reach"),
    "passages": (
        "Hit",
        "Location",
        "Passage",
        "Result",
        "TextWindow",
        "below_title",
        "context_tokens",
        "cut_to_tokens",
        "heading_label",
    ),
    "pipeline": ("retrieve",),
    "question": (
        "MAX_QUESTION_CHARS",
        "QuestionError",
        "SURROGATE_RE",
        "check_question",
        "clean_question",
        "unstorable",
    ),
    "rows": ("MAX_WHOLE_SECTION_TOKENS", "ChunkRow"),
    "search": (
        "CANDIDATES",
        "RRF_K",
        "hnsw_scan",
        "nearest_query",
        "searched_exactly",
    ),
}
_MODULES = {
    "baselines",
    "exact",
    "expansion",
    "hnsw_recall",
    "keywords",
    "passages",
    "pipeline",
    "question",
    "rows",
    "search",
    "sections",
    "tables",
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
