"""`kb_bench speed`'s rows for a small collection beside large ones (issue #15).

All collections share one HNSW index per table, so a filtered scan for a small
collection can wade through the other collections' neighbours first. Measured in
scratch collections named `bench-<stamp>-...`, deleted at the end unless kept:
1. the small collection: the RQ docs corpus (../shared/corpora/rq-docs, about 530
   chunks) through ingestion's prepare and publish steps (scale.build_real);
   retrieval latency for its 30 golden questions (evals/rq-docs.jsonl);
2. two large collections, each the small one's sections and chunks copied in SQL
   into one source until about 20,000 chunks (every copy but the first with its
   vectors perturbed, as scale.build_synthetic does): the small collection's
   questions then find their nearest neighbours mostly in other collections, the
   hard case for a shared index. One source each, as one large document makes
   it: the planner, which estimates a collection's rows from its sources, then
   took the small collection for a large one and read the HNSW index for it;
3. retrieval latency in the small collection again, and in a large one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction

from kb import embedding, golden, retrieval
from kb.benchmarks import scale
from kb.benchmarks.corpus import SHARED, Progress, load_documents
from kb.models import Chunk, Collection, Source
from kb.percentiles import percentile
from kb.retrieval import hnsw_recall

CORPUS = SHARED / "corpora" / "rq-docs"
QUESTIONS = Path(settings.BASE_DIR) / "evals" / "rq-docs.jsonl"
QUICK_QUESTIONS = 5
LARGE_CHUNKS = 20_000  # per large collection
QUICK_LARGE_CHUNKS = 2_000
STAGES = scale.EVERY_STAGE


@dataclass
class NeighbourRow:
    label: str
    chunks: int  # in the collection asked
    other_chunks: int  # of every other collection in kb_chunk
    search: str  # "exact" or "HNSW"
    questions: int
    stages: dict[str, tuple[float, float]]  # stage -> (p50, p95) ms
    recall: float | None = None  # of the HNSW index against exact search


@dataclass
class NeighboursReport:
    rows: list[NeighbourRow]
    exact_below: int  # settings.KB_EXACT_SEARCH_CHUNKS
    notes: list[str] = field(default_factory=list)


def run(*, quick: bool, keep: bool, progress: Progress) -> NeighboursReport:
    tag = f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    created: list[Collection] = []
    skipped: list[str] = []
    cases = golden.parse_cases(QUESTIONS.read_text(encoding="utf-8"))
    questions = [case["question"] for case in cases]
    questions = questions[:QUICK_QUESTIONS] if quick else questions
    docs = load_documents([(CORPUS, "**/*.md")])
    try:
        small, _ = scale.build_real(
            docs, 10**9, tag, created, skipped, progress, name="small"
        )
        rows = [measure(small, "small, alone", questions, progress)]
        target = QUICK_LARGE_CHUNKS if quick else LARGE_CHUNKS
        copies = max(1, round(target / max(rows[0].chunks, 1)))
        large = [
            build_large(small, copies, f"{tag}-{name}", created, progress)
            for name in ("large-1", "large-2")
        ]
        rows.append(measure(small, "small, beside two large", questions, progress))
        rows.append(measure(large[0], "large, beside the others", questions, progress))
    finally:
        if not keep:
            progress(f"deleting {len(created)} bench collections")
            for collection in created:
                scale.delete_collection(collection)
            scale.vacuum()
    report = NeighboursReport(rows, settings.KB_EXACT_SEARCH_CHUNKS)
    report.notes += [f"not ingestible, skipped: {line}" for line in skipped]
    if keep:
        report.notes.append("kept: " + ", ".join(c.name for c in created))
    return report


_COPY_SECTIONS = f"""
INSERT INTO kb_section (source_id, heading, heading_path, level, "order", start,
    "end", body, tokens, embedding)
SELECT %(target)s, s.heading, s.heading_path, s.level,
    %(copy)s * 1000000 + m.n, s.start, s."end", s.body, s.tokens,
    CASE WHEN %(copy)s = 0 OR s.embedding IS NULL THEN s.embedding
         ELSE l2_normalize(s.embedding + v.v) END
FROM kb_section s
JOIN ({{numbered}}) m ON m.id = s.id
JOIN bench_noise v ON v.i = (s.id * 17 + %(copy)s * 7919) %% {scale.NOISE_VECTORS}
"""
_COPY_CHUNKS = f"""
INSERT INTO kb_chunk (source_id, section_id, chunk_index, kind, start, "end", text,
    lead, embedded_text, token_count, text_tokens, is_fallback, metadata, language,
    exact_tokens, embedding)
SELECT %(target)s, t.id, c.chunk_index, c.kind, c.start, c."end", c.text, c.lead,
    c.embedded_text, c.token_count, c.text_tokens, c.is_fallback, c.metadata,
    c.language, c.exact_tokens,
    CASE WHEN %(copy)s = 0 THEN c.embedding
         ELSE l2_normalize(c.embedding + v.v) END
FROM kb_chunk c
JOIN ({{numbered}}) m ON m.id = c.section_id
JOIN kb_section t ON t.source_id = %(target)s AND t."order" = %(copy)s * 1000000 + m.n
JOIN bench_noise v ON v.i = (c.id * 31 + %(copy)s * 7919) %% {scale.NOISE_VECTORS}
"""
# The origin's sections numbered 1..n: a copy's section orders are copy * 10^6 + n.
_NUMBERED = """
SELECT s.id, row_number() OVER (ORDER BY s.id) AS n FROM kb_section s
JOIN kb_source o ON o.id = s.source_id WHERE o.collection_id = %(origin)s
"""


def build_large(
    origin: Collection,
    copies: int,
    name: str,
    created: list[Collection],
    progress: Progress,
) -> Collection:
    """`copies` copies of the origin's sections and chunks in one source of a new
    collection, inserted into the live tables and their indexes."""
    collection = Collection.objects.create(name=name, is_scratch=True)
    created.append(collection)
    source = Source.objects.create(
        collection=collection,
        title=name,
        file_name="all.md",
        content_hash="-",
        status=Source.Status.INDEXED,
        indexed_version=1,
    )
    rng = np.random.default_rng(15)
    dim = embedding.get_embedder().dim
    noise = rng.normal(0, scale.NOISE_SIGMA, (scale.NOISE_VECTORS, dim))
    sections = _COPY_SECTIONS.format(numbered=_NUMBERED)
    chunks = _COPY_CHUNKS.format(numbered=_NUMBERED)
    with connection.cursor() as cursor:
        scale.noise_table(cursor, noise)
        for copy in range(copies):
            params = {"target": source.pk, "origin": origin.pk, "copy": copy}
            with transaction.atomic():
                cursor.execute(sections, params)
                cursor.execute(chunks, params)
            if (copy + 1) % 10 == 0 or copy + 1 == copies:
                progress(f"{name}: copy {copy + 1} of {copies}")
        cursor.execute("DROP TABLE bench_noise")
    scale.analyze()
    hnsw_recall.after_publish(collection)
    return collection


def measure(
    collection: Collection, label: str, questions: Sequence[str], progress: Progress
) -> NeighbourRow:
    """Per-stage `retrieve` timings per question, after one untimed round (a
    running server has the index pages and the model warm)."""
    collection.refresh_from_db()  # the chunk count of its last keyword count
    for question in questions:
        retrieval.retrieve(collection, question)
    stages = scale.stage_timings(collection, questions, STAGES)
    chunks = Chunk.objects.filter(source__collection=collection).count()
    row = NeighbourRow(
        label,
        chunks,
        Chunk.objects.count() - chunks,
        "HNSW index" if _uses_index(collection, questions[0]) else "exact",
        len(questions),
        {stage: (percentile(v, 50), percentile(v, 95)) for stage, v in stages.items()},
        hnsw_recall.measure(collection),
    )
    progress(
        f"{label}: {chunks} chunks, vector search p95 "
        f"{row.stages['vector_search'][1]:.1f} ms"
    )
    return row


def _uses_index(collection: Collection, question: str) -> bool:
    """Whether the planner reads the HNSW index for the collection's chunks."""
    vector = embedding.get_embedder().embed_query(question)
    sql, params = retrieval.nearest_query(collection, vector)
    with retrieval.hnsw_scan(collection), connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return any("embedding_hnsw on kb_chunk" in row[0] for row in cursor.fetchall())


def markdown(report: NeighboursReport) -> str:
    lines = [
        "| collection asked | chunks | other collections' chunks | search"
        f" | HNSW recall | questions | {scale.stage_columns(STAGES)} |",
        "|---|---:|---:|---|---:|---:|" + "---:|" * len(STAGES),
    ]
    for r in report.rows:
        cells = scale.stage_cells(r.stages, STAGES)
        lines.append(
            f"| {r.label} | {r.chunks} | {r.other_chunks} | {r.search} "
            f"| {'-' if r.recall is None else f'{r.recall:.3f}'} | {r.questions} "
            f"| {cells} |"
        )
    lines.append("")
    lines.append(
        "Milliseconds; `total` is the whole of `retrieve` (the stages shown, and "
        "reranking or late interaction when on). `search`: how the planner finds the "
        "collection's nearest chunks; `HNSW recall`: the index's against exact "
        "search (kb/retrieval/hnsw_recall.py), measured whichever is used. "
        "Collections under "
        f"{report.exact_below:,} chunks are searched exactly "
        "(`KB_EXACT_SEARCH_CHUNKS`)."
    )
    lines += [f"- {note}" for note in report.notes]
    return "\n".join(lines)


def as_json(report: NeighboursReport) -> dict[str, Any]:
    return asdict(report)
