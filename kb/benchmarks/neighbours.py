"""`kb_bench speed`'s rows for a small collection beside large ones (issue #15).

All collections share one HNSW index per table, so a filtered scan for a small
collection can wade through the other collections' neighbours first. Measured in
scratch collections named `bench-<stamp>-...`, deleted at the end unless kept:
1. the small collection: corpus documents through ingestion's prepare and publish
   steps (scale.build_real) until about 500 chunks; retrieval latency alone;
2. two large collections, each the small one's rows copied 40 times in SQL
   (scale.build_synthetic: every copy but the first with its vectors perturbed),
   about 20,000 chunks each: the small collection's questions then find their
   nearest neighbours mostly in other collections, the hard case for the index;
3. retrieval latency in the small collection again, and in a large one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kb import retrieval
from kb.benchmarks import scale
from kb.benchmarks.speed import Doc, Progress, percentile
from kb.models import Chunk, Collection

SMALL_CHUNKS = 500
QUICK_SMALL_CHUNKS = 100
LARGE_COPIES = 40  # of the small collection's rows, per large collection
QUICK_LARGE_COPIES = 4
STAGES = ("vector_search", "section_search", "total")


@dataclass
class NeighbourRow:
    label: str
    chunks: int  # in the collection asked
    other_chunks: int  # of every other collection in kb_chunk
    search: str  # "exact" or "HNSW"
    questions: int
    stages: dict[str, tuple[float, float]]  # stage -> (p50, p95) ms


@dataclass
class NeighboursReport:
    rows: list[NeighbourRow]
    exact_below: int  # retrieval.EXACT_SEARCH_CHUNKS
    notes: list[str] = field(default_factory=list)


def run(
    docs: Sequence[Doc], *, quick: bool, keep: bool, progress: Progress
) -> NeighboursReport:
    tag = f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    created: list[Collection] = []
    skipped: list[str] = []
    questions = scale.load_questions(
        scale.QUICK_QUESTIONS if quick else scale.QUESTIONS
    )
    try:
        small, _ = scale.build_real(
            docs,
            QUICK_SMALL_CHUNKS if quick else SMALL_CHUNKS,
            tag,
            created,
            skipped,
            progress,
            name="small",
        )
        rows = [measure(small, "small, alone", questions, progress)]
        copies = QUICK_LARGE_COPIES if quick else LARGE_COPIES
        large = [
            scale.build_synthetic(small, copies, tag, created, progress, name=name)[0]
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
    report = NeighboursReport(rows, getattr(retrieval, "EXACT_SEARCH_CHUNKS", 0))
    report.notes += [f"not ingestible, skipped: {line}" for line in skipped]
    if keep:
        report.notes.append("kept: " + ", ".join(c.name for c in created))
    return report


def measure(
    collection: Collection, label: str, questions: Sequence[str], progress: Progress
) -> NeighbourRow:
    """Per-stage `retrieve` timings per question, after one untimed round (a
    running server has the index pages and the model warm)."""
    collection.refresh_from_db()  # the chunk count of its last keyword count
    for question in questions:
        retrieval.retrieve(collection, question)
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for question in questions:
        timings = retrieval.retrieve(collection, question).timings_ms
        for stage in STAGES:
            stages[stage].append(timings.get(stage, 0.0))
    chunks = Chunk.objects.filter(source__collection=collection).count()
    exact = getattr(retrieval, "searched_exactly", lambda c: False)(collection)
    row = NeighbourRow(
        label,
        chunks,
        Chunk.objects.count() - chunks,
        "exact" if exact else "HNSW",
        len(questions),
        {stage: (percentile(v, 50), percentile(v, 95)) for stage, v in stages.items()},
    )
    progress(
        f"{label}: {chunks} chunks, vector search p95 "
        f"{row.stages['vector_search'][1]:.1f} ms"
    )
    return row


def markdown(report: NeighboursReport) -> str:
    head = " | ".join(f"{stage} p50 / p95" for stage in STAGES)
    lines = [
        f"| collection asked | chunks | other collections' chunks | search | questions"
        f" | {head} |",
        "|---|---:|---:|---|---:|" + "---:|" * len(STAGES),
    ]
    for r in report.rows:
        cells = " | ".join(
            f"{r.stages[s][0]:.1f} / {r.stages[s][1]:.1f}" for s in STAGES
        )
        lines.append(
            f"| {r.label} | {r.chunks} | {r.other_chunks} | {r.search} "
            f"| {r.questions} | {cells} |"
        )
    lines.append("")
    lines.append(
        "Milliseconds; `total` is the whole of `retrieve` (embedding, both vector "
        "legs, keyword search, expansion). Collections under "
        f"{report.exact_below:,} chunks are searched exactly "
        "(`retrieval.EXACT_SEARCH_CHUNKS`)."
    )
    lines += [f"- {note}" for note in report.notes]
    return "\n".join(lines)


def as_json(report: NeighboursReport) -> dict[str, Any]:
    return asdict(report)
