"""The database half of `kb_bench speed`: ingestion with RQ workers, and
retrieval latency at 10,000 and 100,000 chunks (issue #8).

Everything lives in scratch collections named `bench-<stamp>-...` in the
development database, deleted at the end unless asked to keep them:
1. ingestion: about 0.5 MB of documents stored with `store_source` and queued
   with `enqueue_ingest`, then indexed by one, then two, `rqworker --burst`
   processes; timed from the first upload until every source is indexed;
2. the real set: corpus documents through `ingestion.prepare` (parse, chunk,
   prefix) and ingestion's publish step until about 10,000 chunks, vectors
   from the benchmark's embedding cache (computed once, by our embedder);
3. the synthetic set: ten copies of the real set made in SQL, copies 1-9 with
   each vector perturbed by Gaussian noise and re-normalised;
4. latency of `retrieve` per stage and of `ask` over the Chroma questions, the
   HNSW build time on a copy of the 100,000 vectors, and EXPLAIN at 100,000.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import DataError, connection, transaction
from django.db.models import Count

from kb import (
    answering,
    embedding,
    embedding_models,
    index_config,
    ingestion,
    parsing,
    queueing,
    retrieval,
    unit_vectors,
    uploads,
)
from kb.benchmarks import quality
from kb.benchmarks.corpus import Doc, Progress, megabytes, synthesize
from kb.models import (
    EMBEDDING_DIM,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    Chunk,
    Collection,
    Source,
)
from kb.percentiles import percentile
from kb.retrieval import keywords

INGEST_BYTES = 500_000
QUICK_INGEST_BYTES = 40_000
REAL_CHUNKS = 10_000
QUICK_REAL_CHUNKS = 600
REAL_SOURCE_BYTES = 20_000_000  # more than 10,000 chunks need
COPIES = 10  # the synthetic set: the real set ten times
QUICK_COPIES = 3
QUESTIONS = 50
QUICK_QUESTIONS = 5
NOISE_SIGMA = 0.01  # per dimension: cosine to the original about 0.98
NOISE_VECTORS = 1024
WORKER_TIMEOUT = 600  # seconds for one ingestion run
SAMPLE_EVERY = 0.05  # seconds between RSS samples
STAGES = ("embed", "vector_search", "keyword_search", "expand", "total")
# Every stage of `retrieve` (issue #26: a stage outside the vector search grew
# with the other collections), for the parts that time them all.
EVERY_STAGE = (
    "embed",
    "vector_search",
    "section_search",
    "keyword_search",
    "expand",
    "total",
)
HNSW_BUILD_MEMORY = "1GB"

_VECTOR_LITERAL_RE = re.compile(r"'\[[^\]]*\]'")


@dataclass
class IngestRow:
    workers: int
    documents: int
    mb: float
    chunks: int
    failed: int
    seconds: float  # first upload -> last source indexed
    first_job_s: float  # first upload -> first job started (worker cold start)
    peak_rss_mb: float  # largest worker process tree (worker + work horse)
    peak_total_rss_mb: float  # all workers together

    @property
    def docs_per_s(self) -> float:
        return self.documents / self.seconds

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds


@dataclass
class LatencyRow:
    label: str
    chunks: int
    questions: int
    retrieval: dict[str, tuple[float, float]]  # stage -> (p50, p95) ms
    answer: tuple[float, float]  # ask(): retrieve + answer, wall clock, ms


@dataclass
class ScaleReport:
    other_workers: list[str]
    ingestion: list[IngestRow]
    real_chunks: int
    real_build_s: float
    synthetic_chunks: int
    synthetic_insert_s: float
    hnsw_build_s: float
    hnsw_index_mb: float
    chunk_table_mb: float
    chunk_table_rows: int
    latency: list[LatencyRow]
    plan: list[str]
    uses_hnsw: bool
    notes: list[str] = field(default_factory=list)


def run(
    base: Sequence[Doc],
    corpus: Sequence[Doc],
    *,
    quick: bool,
    keep: bool,
    progress: Progress,
) -> ScaleReport:
    tag = f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    created: list[Collection] = []
    skipped: list[str] = []
    progress("vacuuming kb_chunk, kb_section, kb_source")
    vacuum()
    try:
        others = other_workers()
        ingest_docs = synthesize(base, QUICK_INGEST_BYTES if quick else INGEST_BYTES)
        rows = [
            ingest_with_workers(ingest_docs, n, f"{tag}-ingest-{n}w", created, progress)
            for n in (1, 2)
        ]
        # The corpus, continued with further copies until the target is met.
        real_docs = [*corpus, *synthesize(base, REAL_SOURCE_BYTES)[len(corpus) :]]
        real, real_s = build_real(
            real_docs,
            QUICK_REAL_CHUNKS if quick else REAL_CHUNKS,
            tag,
            created,
            skipped,
            progress,
        )
        questions = load_questions(QUICK_QUESTIONS if quick else QUESTIONS)
        latency = [measure(real, "real", questions, progress)]
        copies = QUICK_COPIES if quick else COPIES
        synthetic, insert_s = build_synthetic(real, copies, tag, created, progress)
        build_s, index_mb = hnsw_build(synthetic, progress)
        latency.append(measure(synthetic, "synthetic", questions, progress))
        plan = explain(synthetic, questions[0])
        table_mb, table_rows = chunk_table()
        report = ScaleReport(
            others,
            rows,
            latency[0].chunks,
            real_s,
            latency[1].chunks,
            insert_s,
            build_s,
            index_mb,
            table_mb,
            table_rows,
            latency,
            plan,
            any("embedding_hnsw on kb_chunk" in line for line in plan),
        )
    finally:
        if not keep:
            progress(f"deleting {len(created)} bench collections")
            for collection in created:
                delete_collection(collection)
            vacuum()
    report.notes += [f"not ingestible, skipped: {line}" for line in skipped]
    if keep:
        report.notes.append("kept: " + ", ".join(c.name for c in created))
    return report


# --- 1. ingestion with RQ workers ---------------------------------------------


def other_workers() -> list[str]:
    """Workers already listening on our queue: they would take our jobs."""
    import django_rq
    from rq import Worker

    return [w.name for w in Worker.all(queue=django_rq.get_queue("default"))]


def _new_collection(name: str, created: list[Collection], **fields: Any) -> Collection:
    collection = Collection.objects.create(name=name, is_scratch=True, **fields)
    created.append(collection)
    return collection


def ingest_with_workers(
    docs: Sequence[Doc],
    workers: int,
    name: str,
    created: list[Collection],
    progress: Progress,
) -> IngestRow:
    """Upload and queue `docs`, start `workers` burst workers, wait until indexed."""
    collection = _new_collection(name, created)
    started = time.perf_counter()
    for doc in docs:
        source, _ = uploads.store_source(
            collection, doc.name, doc.text.encode(), title=_title(doc)
        )
        queueing.enqueue_ingest(source)
    processes = [_start_worker(name, i) for i in range(workers)]
    peaks, peak_total, first_job = [0.0] * workers, 0.0, None
    sources = Source.objects.filter(collection=collection)
    pending = Source.ACTIVE
    deadline = started + WORKER_TIMEOUT
    while time.perf_counter() < deadline:
        rss = [_tree_rss_mb(p.pid) for p in processes]
        peaks = [max(a, b) for a, b in zip(peaks, rss)]
        peak_total = max(peak_total, sum(rss))
        counts = dict(
            sources.values("status").annotate(n=Count("id")).values_list("status", "n")
        )
        if first_job is None and counts.get(Source.Status.QUEUED, 0) < len(docs):
            first_job = time.perf_counter() - started
        if not any(counts.get(status) for status in pending):
            break
        time.sleep(SAMPLE_EVERY)
    seconds = time.perf_counter() - started
    for process in processes:
        _stop(process)
    chunks = Chunk.objects.filter(source__collection=collection).count()
    failed = sources.exclude(status=Source.Status.INDEXED).count()
    row = IngestRow(
        workers,
        len(docs),
        round(megabytes(docs), 3),
        chunks,
        failed,
        seconds,
        first_job or seconds,
        max(peaks),
        peak_total,
    )
    progress(
        f"ingest: {workers} worker(s): {row.docs_per_s:.2f} docs/s, "
        f"{row.chunks_per_s:.1f} chunks/s, {failed} not indexed"
    )
    return row


def _title(doc: Doc) -> str:
    """The title store_source would derive, cut to Source.title's 300 characters:
    finance.md opens with a longer line, which store_source does not clip."""
    title = parsing.markdown_title(doc.text) or parsing.title_from_filename(doc.name)
    return title[: Source._meta.get_field("title").max_length]


def _start_worker(name: str, index: int) -> subprocess.Popen:
    log_dir = Path(settings.KB_DATA_DIR) / "bench"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / f"{name}-worker{index}.log").open("wb")
    manage = Path(settings.BASE_DIR) / "manage.py"
    return subprocess.Popen(
        [sys.executable, str(manage), "rqworker", "--burst", "default", "large"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "DEBUG": os.environ.get("DEBUG", "1")},
        cwd=settings.BASE_DIR,
    )


def _tree_rss_mb(pid: int) -> float:
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def _stop(process: subprocess.Popen) -> None:
    """A burst worker exits on an empty queue; one still busy is terminated."""
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.terminate()
        process.wait(timeout=30)


# --- 2. the real set ----------------------------------------------------------


def build_real(
    docs: Sequence[Doc],
    target: int,
    tag: str,
    created: list[Collection],
    skipped: list[str],
    progress: Progress,
    name: str = "real",
    model: str = embedding_models.DEFAULT,
    precision: str | None = None,
) -> tuple[Collection, float]:
    """Ingest documents in order until `target` chunks, reusing cached vectors:
    a collection of embedding `model`, its chunks embedded at `precision` (None:
    the configured one) with the model's passage prompt."""
    collection = _new_collection(f"{tag}-{name}", created, embedding_model=model)
    embedder = embedding.for_collection(collection, precision)
    cache_dir = Path(settings.KB_DATA_DIR) / "bench" / "embeddings"
    policy = index_config.policy_for(collection)
    started = time.perf_counter()
    total = 0
    for doc in docs:
        if total >= target:
            break
        began = time.perf_counter()
        source, _ = uploads.store_source(
            collection, doc.name, doc.text.encode(), title=_title(doc)
        )
        prepared = ingestion.prepare(source, collection, policy)
        texts = [embedder.passage_prefix + c.embedded_text for c in prepared.chunks]
        vectors = quality.cached_vectors(texts, embedder, False, cache_dir)
        stats = ingestion.statistics(prepared, time.perf_counter() - began)
        # No reuse keys: stand-in unit vectors must never be taken by an upload.
        embedded = (vectors, _stand_in_units(prepared, vectors), [""] * len(texts))
        try:
            ingestion.publish(source, source.version, prepared, embedded, stats)
        except DataError as exc:
            # pubmed.md has a 650-character setext "heading"; Section.heading
            # holds 500, so ingestion itself fails on it (reported in the notes).
            skipped.append(f"{doc.name}: {exc}".strip())
            source.file.delete(save=False)
            source.delete()
            continue
        total += len(texts)
        progress(f"{name} set: {total} chunks")
    keywords.count_terms(collection)  # what the job after ingestion does
    # Fresh planner statistics, as autovacuum gathers them after this many new
    # rows: with the counts of a near-empty table (the vacuum at the start), the
    # planner sorted all 10,000 chunks instead of using the HNSW index (33 ms).
    analyze()
    return collection, time.perf_counter() - started


# --- 3. the synthetic set -----------------------------------------------------

_COPY_SOURCES = """
INSERT INTO kb_source (collection_id, title, is_title_auto, file, file_name, text,
    content_hash, metadata, status, error, progress, version, indexed_version,
    stats, reader_summary, page_map, language, detected_language, created, updated,
    indexed)
SELECT %(target)s, title, is_title_auto, '', %(prefix)s || file_name, text,
    content_hash, metadata, status, error, progress, version, indexed_version,
    '{}', reader_summary, page_map, language, detected_language, now(), now(), now()
FROM kb_source WHERE collection_id = %(origin)s
"""
_COPY_SECTIONS = f"""
INSERT INTO kb_section (source_id, heading, heading_path, level, "order", start,
    "end", body, tokens, embedding)
SELECT ns.id, s.heading, s.heading_path, s.level, s."order", s.start, s."end",
    s.body, s.tokens,
    CASE WHEN %(copy)s = 0 OR s.embedding IS NULL THEN s.embedding
         ELSE l2_normalize(s.embedding + n.v) END
FROM kb_section s
JOIN kb_source os ON os.id = s.source_id
JOIN kb_source ns ON ns.collection_id = %(target)s
    AND ns.file_name = %(prefix)s || os.file_name
JOIN bench_noise n ON n.i = (s.id * 17 + %(copy)s * 7919) %% {NOISE_VECTORS}
WHERE os.collection_id = %(origin)s
"""
_COPY_CHUNKS = f"""
INSERT INTO kb_chunk (source_id, section_id, chunk_index, kind, start, "end", text,
    lead, embedded_text, token_count, text_tokens, is_fallback, metadata, language,
    unit_offsets, unit_vectors, exact_tokens, embedding)
SELECT ns.id, nsec.id, c.chunk_index, c.kind, c.start, c."end", c.text,
    c.lead, c.embedded_text, c.token_count, c.text_tokens, c.is_fallback, c.metadata,
    c.language, c.unit_offsets, c.unit_vectors, c.exact_tokens,
    CASE WHEN %(copy)s = 0 THEN c.embedding
         ELSE l2_normalize(c.embedding + n.v) END
FROM kb_chunk c
JOIN kb_section s ON s.id = c.section_id
JOIN kb_source os ON os.id = c.source_id
JOIN kb_source ns ON ns.collection_id = %(target)s
    AND ns.file_name = %(prefix)s || os.file_name
JOIN kb_section nsec ON nsec.source_id = ns.id AND nsec."order" = s."order"
JOIN bench_noise n ON n.i = (c.id * 31 + %(copy)s * 7919) %% {NOISE_VECTORS}
WHERE os.collection_id = %(origin)s
"""


def _stand_in_units(prepared, vectors) -> list[tuple[list[int], bytes]]:
    """Each chunk's units stored with its own vector as theirs: the bytes and
    the work of real unit vectors (kb.unit_vectors) for the answer's latency,
    without embedding the set again (its chunk vectors come from a cache)."""
    return [
        unit_vectors.pack(
            [u[:2] for u in c.data.units], np.repeat(vector[None], len(c.data.units), 0)
        )
        for c, vector in zip(prepared.chunks, vectors, strict=True)
    ]


def build_synthetic(
    real: Collection,
    copies: int,
    tag: str,
    created: list[Collection],
    progress: Progress,
    name: str = "synthetic",
) -> tuple[Collection, float]:
    """`copies` copies of the real set's rows in one collection, inserted into the
    live table and its indexes; copy 0 keeps its vectors, the others are
    perturbed. Section parents are not copied (retrieval does not read them)."""
    collection = _new_collection(
        f"{tag}-{name}", created, embedding_model=real.embedding_model
    )
    rng = np.random.default_rng(8)
    dim = embedding.for_collection(real).dim
    noise = rng.normal(0, NOISE_SIGMA, (NOISE_VECTORS, dim))
    started = time.perf_counter()
    with connection.cursor() as cursor:
        noise_table(cursor, noise)
        for copy in range(copies):
            params = {
                "target": collection.pk,
                "origin": real.pk,
                "prefix": f"synthetic-{copy}/",
                "copy": copy,
            }
            with transaction.atomic():
                for statement in (_COPY_SOURCES, _COPY_SECTIONS, _COPY_CHUNKS):
                    cursor.execute(statement, params)
            progress(f"{name} set: copy {copy + 1} of {copies}")
        cursor.execute("DROP TABLE bench_noise")
    analyze()
    keywords.count_terms(collection)
    return collection, time.perf_counter() - started


def noise_table(cursor, noise: np.ndarray) -> None:
    """The temporary table bench_noise (i, v) of the `noise` vectors that perturb
    the copies' embeddings (_COPY_SECTIONS, _COPY_CHUNKS)."""
    cursor.execute("DROP TABLE IF EXISTS bench_noise")
    cursor.execute("CREATE TEMP TABLE bench_noise (i int PRIMARY KEY, v vector)")
    cursor.executemany(
        "INSERT INTO bench_noise VALUES (%s, %s::vector)",
        [(i, _vector_literal(v)) for i, v in enumerate(noise)],
    )


def _vector_literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in vector) + "]"


def hnsw_build(collection: Collection, progress: Progress) -> tuple[float, float]:
    """Seconds and MB to build chunk_embedding_hnsw's twin over the collection's
    vectors, in a scratch copy of them (the live index stays untouched)."""
    table = f"bench_hnsw_{os.getpid()}"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(
            f"CREATE UNLOGGED TABLE {table} AS SELECT "
            f"c.embedding::vector({EMBEDDING_DIM}) AS embedding FROM kb_chunk c "
            "JOIN kb_source s ON s.id = c.source_id WHERE s.collection_id = %s",
            [collection.pk],
        )
        try:
            with transaction.atomic():
                cursor.execute(
                    f"SET LOCAL maintenance_work_mem = '{HNSW_BUILD_MEMORY}'"
                )
                started = time.perf_counter()
                cursor.execute(
                    f"CREATE INDEX {table}_idx ON {table} USING hnsw "
                    f"(embedding vector_cosine_ops) WITH (m = {HNSW_M}, "
                    f"ef_construction = {HNSW_EF_CONSTRUCTION})"
                )
                seconds = time.perf_counter() - started
                cursor.execute(f"SELECT pg_relation_size('{table}_idx')")
                size = cursor.fetchone()[0] / 2**20
        finally:
            cursor.execute(f"DROP TABLE IF EXISTS {table}")
    progress(f"HNSW build: {seconds:.1f} s, {size:.0f} MB")
    return seconds, size


def chunk_table() -> tuple[float, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_total_relation_size('kb_chunk'), count(*) FROM kb_chunk"
        )
        size, rows = cursor.fetchone()
    return size / 2**20, rows


# --- 4. latency ---------------------------------------------------------------


def load_questions(count: int, path: Path = quality.DATA_DIR) -> list[str]:
    """`count` of the Chroma questions, evenly spread over all five corpora."""
    with (Path(path) / quality.QUESTIONS_FILE).open(encoding="utf-8") as handle:
        rows = [row["question"] for row in csv.DictReader(handle)]
    step = len(rows) / count
    return [rows[int(i * step)] for i in range(count)]


def measure(
    collection: Collection,
    label: str,
    questions: Sequence[str],
    progress: Progress,
    stages: Sequence[str] = STAGES,
) -> LatencyRow:
    """Per-stage `retrieve` timings, then the wall-clock of `ask`, per question.

    Warm: every question is asked once first, untimed, as a running server would
    have the index pages, the question words and the model in memory.
    """
    for question in questions:
        answering.ask(collection, question)
    timed = stage_timings(collection, questions, stages)
    answers = []
    for question in questions:
        started = time.perf_counter()
        answering.ask(collection, question)
        answers.append((time.perf_counter() - started) * 1000)
    chunks = Chunk.objects.filter(source__collection=collection).count()
    row = LatencyRow(
        label,
        chunks,
        len(questions),
        {stage: (percentile(v, 50), percentile(v, 95)) for stage, v in timed.items()},
        (percentile(answers, 50), percentile(answers, 95)),
    )
    progress(
        f"latency at {chunks} chunks: retrieval p95 {row.retrieval['total'][1]:.1f}"
        f" ms, answer p95 {row.answer[1]:.1f} ms"
    )
    return row


def explain(collection: Collection, question: str) -> list[str]:
    """EXPLAIN ANALYZE of the vector search as `retrieval` runs it."""
    vector = embedding.for_collection(collection).embed_query(question)
    sql, params = retrieval.nearest_query(collection, vector)
    with retrieval.hnsw_scan(collection), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return _VECTOR_LITERAL_RE.sub("'[question vector]'", plan).splitlines()


def delete_collection(collection: Collection) -> None:
    """Files first (Django leaves them), then the rows, chunks in one statement."""
    for source in Source.objects.filter(collection=collection).exclude(file=""):
        source.file.delete(save=False)
    Chunk.objects.filter(source__collection=collection).delete()
    collection.delete()


def analyze() -> None:
    """Fresh planner statistics for the tables retrieval reads."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE kb_source, kb_section, kb_chunk")


def vacuum() -> None:
    """Clear dead rows: deleted bench sets otherwise stay in the HNSW graph, and a
    later run's vectors (the same texts) find them first and skip them one by one
    (vector search at 10,000 chunks measured 36 ms p50 instead of 4). After a set
    is built, it also leaves the tables as autovacuum would have by the time a
    real collection of that size is asked questions: the keyword counts
    analysed, the new rows' visibility known."""
    with connection.cursor() as cursor:
        for table in ("kb_chunk", "kb_section", "kb_source", "kb_term"):
            cursor.execute(f"VACUUM (ANALYZE) {table}")


# --- output -------------------------------------------------------------------


def markdown(report: ScaleReport) -> str:
    notes = "\n".join(f"- {note}" for note in report.notes)
    parts = [_ingest_table(report), _latency_table(report), _index_lines(report)]
    return "\n\n".join(parts + ([notes] if notes else []))


def _ingest_table(report: ScaleReport) -> str:
    lines = [
        "| RQ workers | docs | MB | chunks | not indexed | seconds | first job after "
        "| docs/s | chunks/s | peak RSS per worker | peak RSS, all |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.ingestion:
        lines.append(
            f"| {r.workers} | {r.documents} | {r.mb} | {r.chunks} | {r.failed} "
            f"| {r.seconds:.1f} | {r.first_job_s:.1f} s | {r.docs_per_s:.2f} "
            f"| {r.chunks_per_s:.1f} | {r.peak_rss_mb:.0f} MB "
            f"| {r.peak_total_rss_mb:.0f} MB |"
        )
    others = ", ".join(report.other_workers) or "none"
    lines.append("")
    lines.append(f"Other workers on the queue when the run began: {others}.")
    return "\n".join(lines)


def _latency_table(report: ScaleReport) -> str:
    lines = [
        f"| set | chunks | questions | {stage_columns(STAGES)} | ask() p50 / p95 |",
        "|---|---:|---:|" + "---:|" * (len(STAGES) + 1),
    ]
    for r in report.latency:
        cells = stage_cells(r.retrieval, STAGES)
        lines.append(
            f"| {r.label} | {r.chunks} | {r.questions} | {cells} "
            f"| {r.answer[0]:.1f} / {r.answer[1]:.1f} |"
        )
    lines.append("")
    lines.append("Milliseconds; `total` is the sum of the four retrieval stages.")
    return "\n".join(lines)


def _index_lines(report: ScaleReport) -> str:
    plan = "\n".join(f"    {line}" for line in report.plan[:12])
    return (
        f"Real set: {report.real_chunks} chunks in {report.real_build_s:.0f} s "
        f"(prepare + publish, cached vectors). Synthetic set: "
        f"{report.synthetic_chunks} chunks inserted in "
        f"{report.synthetic_insert_s:.0f} s into the live table and indexes. HNSW "
        f"build over its vectors (m 16, ef_construction 64, maintenance_work_mem "
        f"{HNSW_BUILD_MEMORY}): {report.hnsw_build_s:.1f} s, "
        f"{report.hnsw_index_mb:.0f} MB. kb_chunk: {report.chunk_table_rows} rows, "
        f"{report.chunk_table_mb:.0f} MB with indexes. Vector search at "
        f"{report.synthetic_chunks} chunks "
        f"{'uses' if report.uses_hnsw else 'does NOT use'} chunk_embedding_hnsw:\n\n"
        f"{plan}"
    )


def as_json(report: ScaleReport) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(report)


def stage_columns(stages: Sequence[str]) -> str:
    """Markdown table headings of `stages`' latencies, for stage_cells."""
    return " | ".join(f"{stage} p50 / p95" for stage in stages)


def stage_cells(figures: dict[str, tuple[float, float]], stages: Sequence[str]) -> str:
    """Each stage's (p50, p95) in ms, as cells under stage_columns."""
    return " | ".join(f"{figures[s][0]:.1f} / {figures[s][1]:.1f}" for s in stages)


def stage_timings(
    collection: Collection, questions: Sequence[str], stages: Sequence[str]
) -> dict[str, list[float]]:
    """`retrieve`'s own timings of each stage, in ms, one per question."""
    timed: dict[str, list[float]] = {stage: [] for stage in stages}
    for question in questions:
        timings = retrieval.retrieve(collection, question).timings_ms
        for stage in stages:
            timed[stage].append(timings.get(stage, 0.0))
    return timed
