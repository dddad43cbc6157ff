"""retrieve(): the stages in order, timed (see the package docstring)."""

from __future__ import annotations

import time

from kb import embedding
from kb.models import Collection
from kb.retrieval import (
    baselines,
    exact,
    expansion,
    keywords,
    late_interaction,
    reranking,
    search,
    sections,
)
from kb.retrieval.passages import (
    Hit,
    Passage,
    Result,
    context_tokens,
    counted_by,
    merge,
)
from kb.retrieval.question import (
    across_documents,
    clean_question,
    embed_question_soon,
    named_terms,
    periods_of,
)


def retrieve(
    collection: Collection,
    question: str,
    *,
    k: int | None = None,
    budget: int | None = None,
    mode: str | None = None,
    include_deprecated: bool = False,
    strategy: str | None = None,
    late_interaction: bool | None = None,
) -> Result:
    """`strategy` "sections": the simple baseline's packing (sections_baseline)
    instead of the default's; "default" or None: as the collection is set up.
    `late_interaction`: that stage on or off; None: as KB_LATE_INTERACTION says.
    The context is measured in the collection's model's tokens."""
    with counted_by(embedding.for_collection(collection)):
        return _retrieve(
            collection,
            question,
            k=k,
            budget=budget,
            mode=mode,
            include_deprecated=include_deprecated,
            strategy=strategy,
            late_interaction=late_interaction,
        )


def _retrieve(
    collection: Collection,
    question: str,
    *,
    k: int | None,
    budget: int | None,
    mode: str | None,
    include_deprecated: bool,
    strategy: str | None,
    late_interaction: bool | None,
) -> Result:
    question = clean_question(question)
    k = k or collection.top_k
    budget = budget or collection.context_budget
    mode = mode or collection.retrieval_mode
    timings: dict[str, float] = {}
    clock = started = time.perf_counter()

    # The question is embedded on another thread while the keyword leg runs;
    # "embed" is the embedding's own time, overlapped with "keyword_search", and
    # "total" the wall clock.
    pending = None
    if mode in ("vector", "hybrid"):
        pending = embed_question_soon(question, collection)
    keyword_found = keywords.Found([], [])
    exact_found = exact.Found()
    if mode in ("keyword", "hybrid"):
        keyword_found = keywords.find(
            collection,
            question,
            search.CANDIDATES,
            include_deprecated=include_deprecated,
        )
        exact_found = exact.search(
            collection,
            question,
            search.CANDIDATES,
            include_deprecated=include_deprecated,
        )
        clock = _lap(timings, "keyword_search", clock)
    vector = None
    vector_ids: list[int] = []
    similarity: float | None = None
    section_ranks: dict[int, int] = {}
    if pending is not None:
        # The scan's transaction and settings are sent while the question may
        # still be in the model: two round trips off the critical path.
        with search.hnsw_scan(collection):
            vector, timings["embed"] = pending.result()
            clock = time.perf_counter()
            vector_ids, similarity = search.vector_ids(
                collection, vector, include_deprecated
            )
            clock = _lap(timings, "vector_search", clock)
            section_ranks = search.section_ranks(collection, vector, include_deprecated)
            clock = _lap(timings, "section_search", clock)

    dated: list[int] = []
    periods = periods_of(question)  # "the incident of 6 September"
    if periods:
        dated = search.dated_ids(collection, vector, periods, include_deprecated)
        clock = _lap(timings, "dated_search", clock)
    hits = search.fuse(
        vector_ids,
        keyword_found.ids,
        section_ranks,
        exact_found,
        dated,
        rare_ids=keyword_found.rare_ids,
    )
    reranked: reranking.Report | None = None
    late_ms: float | None = None
    if strategy == baselines.SECTIONS:
        passages = merge(baselines.sections_baseline(hits, budget))
    elif collection.chunk_strategy == Collection.Strategy.FIXED:
        # The baseline as commonly built: the top-k chunks as they are, no expansion,
        # held to the same context budget (the first chunk always goes in).
        passages = merge(
            baselines.within_budget(baselines.chunk_passages(hits[:k]), budget)
        )
    else:
        passages, reranked, late_ms = _context(
            collection, question, hits, k, budget, late_interaction, bool(periods)
        )
    for rank, passage in enumerate(passages, 1):
        passage.rank = rank
        passage.tokens = context_tokens(passage.text)  # exact, after merging
    _lap(timings, "expand", clock)
    if reranked:  # its own entry, out of "expand"
        timings["rerank"] = reranked.ms
        timings["expand"] -= reranked.ms
    if late_ms is not None:  # likewise
        timings["late_interaction"] = late_ms
        timings["expand"] -= late_ms
    timings["total"] = (time.perf_counter() - started) * 1000
    return Result(
        question=question,
        passages=passages,
        context_tokens=sum(p.tokens for p in passages),
        budget_tokens=budget,
        k=k,
        mode=mode,
        timings_ms={key: round(v, 2) for key, v in timings.items()},
        hits=hits,
        top_similarity=similarity,
        reranking=reranked,
        vector=vector,
        embedding_model=collection.embedding_model,
    )


def _context(
    collection: Collection,
    question: str,
    hits: list[Hit],
    k: int,
    budget: int,
    late: bool | None = None,
    dated: bool = False,
) -> tuple[list[Passage], reranking.Report | None, float | None]:
    """The default pipeline's context: the k best sections (reordered by late
    interaction when it is on, reranked when a reranker is set), expanded within
    the budget, with the section before each one taken whole while budget is
    left; passages that touch merged."""
    pool = max(reranking.pool_size(k), late_interaction.pool_size(k, late))
    records: set[int] = set()
    holders: set[int] = set()
    if across_documents(question) and not dated:  # a period: the dated leg's
        candidates = _best_of_each_section(hits, pool * 4)
        records = search.records(candidates)
        holders = search.rarest_holders(question, candidates, records)
    selected = sections.select(hits, pool, named_terms(question), records, holders)
    late_ms = None
    if late_interaction.enabled(late):
        selected, late_ms = late_interaction.rerank(
            question, selected, search.RRF_K, embedding.for_collection(collection)
        )
    selected, reranked = reranking.rerank_sections(question, selected, k)
    expanded = expansion.expand(selected, budget)
    before = sections.preceding(expanded.whole, expanded.remaining)
    return merge(expanded.passages + before), reranked, late_ms


def _best_of_each_section(hits: list[Hit], limit: int) -> list[Hit]:
    """The first hit of each of the first `limit` sections, in order."""
    seen: dict[int, Hit] = {}
    for hit in hits:
        if hit.section_id not in seen:
            seen[hit.section_id] = hit
            if len(seen) == limit:
                break
    return list(seen.values())


def _lap(timings: dict[str, float], name: str, since: float) -> float:
    now = time.perf_counter()
    timings[name] = (now - since) * 1000
    return now
