"""`kb_bench reindex`: what a gated re-index costs (issue #18, kb/reindexing.py).

For each corpus of ../shared/corpora with a golden set in evals/: its Markdown
files indexed into a scratch `bench-<stamp>-<corpus>` collection (200-token
chunks), then a shadow index under other chunk settings built, evaluated (the
golden set on the shadow and on the live index) and swapped in, each step timed:
the build, the two evaluations, the swap's one transaction (the time asks could
wait on its row locks is at most this), and dropping the scratch copy after it.
The collections are deleted at the end unless kept.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from kb import golden, ingestion, reindexing, uploads
from kb.benchmarks.corpus import SHARED, Progress
from kb.models import Chunk, Collection

CORPORA = ("handbook", "rq-docs")
EVALS = Path(settings.BASE_DIR) / "evals"
NEW_TOKENS = 120


@dataclass
class Row:
    corpus: str
    sources: int
    chunks_before: int
    chunks_after: int
    build_s: float
    evaluate_s: float
    swap_ms: float
    drop_ms: float
    recall_live: float | None
    recall_shadow: float | None


def run(
    corpora: tuple[str, ...] = CORPORA,
    tokens: int = NEW_TOKENS,
    keep: bool = False,
    progress: Progress = lambda line: None,
) -> list[Row]:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    made: list[Collection] = []
    try:
        rows = []
        for corpus in corpora:
            collection = Collection.objects.create(
                name=f"bench-{stamp}-{corpus}", is_scratch=True
            )
            made.append(collection)
            progress(f"{corpus}: indexing the live collection")
            _index(collection, SHARED / "corpora" / corpus)
            golden.import_cases(
                collection, (EVALS / f"{corpus}.jsonl").read_text("utf-8")
            )
            progress(f"{corpus}: shadow index at {tokens} tokens")
            rows.append(_measure(corpus, collection, tokens))
        return rows
    finally:
        if not keep:
            for collection in made:
                collection.delete()


def _index(collection: Collection, folder: Path) -> None:
    for path in sorted(folder.rglob("*.md")):
        if path.name.lower() == "readme.md":
            continue
        name = str(path.relative_to(folder))
        source, _ = uploads.store_source(collection, name, path.read_bytes())
        ingestion.ingest(source.pk, source.version)


def _chunks(collection: Collection) -> int:
    return Chunk.objects.filter(source__collection=collection).count()


def _measure(corpus: str, collection: Collection, tokens: int) -> Row:
    before = _chunks(collection)
    shadow = reindexing.start(collection, {"chunk_tokens": tokens}, queue=False)
    started = time.perf_counter()
    reindexing.build(shadow)
    built = time.perf_counter()
    on_shadow, on_live = reindexing.evaluate(shadow)
    evaluated = time.perf_counter()
    swapped = reindexing.swap_in(shadow.pk, reindexing.Status.EVALUATING, "bench")
    done = time.perf_counter()
    reindexing.drop_scratch(swapped.scratch_id)
    dropped = time.perf_counter()
    return Row(
        corpus=corpus,
        sources=collection.sources.count(),
        chunks_before=before,
        chunks_after=_chunks(collection),
        build_s=round(built - started, 2),
        evaluate_s=round(evaluated - built, 2),
        swap_ms=round((done - evaluated) * 1000, 1),
        drop_ms=round((dropped - done) * 1000, 1),
        recall_live=on_live.recall if on_live else None,
        recall_shadow=on_shadow.recall if on_shadow else None,
    )


def markdown(rows: list[Row], tokens: int) -> str:
    lines = [
        f"| corpus | sources | chunks (200 → {tokens} tokens) | build s | "
        "evaluate shadow + live s | swap transaction ms | drop scratch ms | "
        "recall@5 live → shadow |",
        "|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.corpus} | {r.sources} | {r.chunks_before} → {r.chunks_after} | "
            f"{r.build_s} | {r.evaluate_s} | {r.swap_ms} | {r.drop_ms} | "
            f"{r.recall_live} → {r.recall_shadow} |"
        )
    return "\n".join(lines) + "\n"


def as_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
