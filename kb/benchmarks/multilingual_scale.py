"""Retrieval latency at 10,000 and 100,000 chunks in a multilingual collection
(issue #27): `kb_bench speed --only scale-multilingual`, also part of
`kb_bench speed`.

Two collections built as `scale` builds its sets, in scratch collections named
`bench-<stamp>-...`, deleted at the end unless kept:
1. the English baseline: all-MiniLM-L6-v2, the shared corpora's Markdown (as
   `scale`'s real set) until about 10,000 chunks;
2. the multilingual collection: multilingual-e5-small, the Kubernetes pages in
   French, Spanish and Russian (evals/corpora/kubernetes-docs) and English ones
   (its English pages, then the shared corpora), one document of each in turn,
   each repeated with digits shifted (`synthesize`) until about 10,000 chunks;
   every chunk stored with its section's detected language;
3. each then copied ten times in SQL (`scale.build_synthetic`, languages kept)
   to about 100,000 chunks;
4. after a VACUUM (ANALYZE) of each set as built (the state autovacuum
   leaves a real collection in), the latency of `retrieve` per stage and of
   `ask`, warm, over the golden
   questions of evals/kubernetes-{en,fr,es,ru,cross}.jsonl (the held-out files
   are not read), the same questions for both collections.

Chunk vectors are computed once at BUILD_PRECISION and cached (e5 is about
twice as slow as MiniLM per text); questions are embedded as served.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from kb import answering, embedding_models, golden
from kb.benchmarks import scale
from kb.benchmarks.corpus import SHARED, Doc, Progress, load_documents, synthesize
from kb.models import Collection
from kb.percentiles import percentile

KUBERNETES = Path(settings.BASE_DIR) / "evals" / "corpora" / "kubernetes-docs"
EVALS = Path(settings.BASE_DIR) / "evals"
LANGUAGES = ("fr", "es", "ru", "en")
QUESTION_SETS = ("en", "fr", "es", "ru", "cross")
QUICK_QUESTIONS_PER_SET = 1
STAGES = scale.EVERY_STAGE
BUILD_PRECISION = "int8"
STREAM_BYTES = 6_000_000  # per language: more than its share of 10,000 chunks


@dataclass
class QuestionRow:
    """One collection at one size, over all questions."""

    collection: str
    model: str
    chunks: int
    languages: dict[str, int]  # text-search configuration -> chunks
    questions: int
    retrieval: dict[str, tuple[float, float]]  # stage -> (p50, p95) ms
    answer: tuple[float, float]  # ask(), wall clock, ms
    # keyword_search (p50, p95) per question set (en, fr, es, ru, cross)
    keyword_by_set: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class MultilingualScaleReport:
    rows: list[QuestionRow]
    build_seconds: dict[str, float]
    notes: list[str] = field(default_factory=list)


def multilingual_docs(target_bytes: int = STREAM_BYTES) -> list[Doc]:
    """The Kubernetes pages of each language and the shared English corpora,
    one document of each language in turn, each language repeated to
    `target_bytes`."""
    streams = []
    for code in LANGUAGES:
        base = load_documents([(KUBERNETES / code, "**/*.md")])
        if code == "en":
            base += load_documents([(SHARED / "corpora", "**/*.md")])
        streams.append(synthesize(base, target_bytes))
    mixed = itertools.chain.from_iterable(itertools.zip_longest(*streams))
    return [doc for doc in mixed if doc is not None]


def load_questions(per_set: int | None = None) -> list[tuple[str, str]]:
    """(set, question) of the Kubernetes golden sets, `per_set` of each (all:
    None)."""
    found = []
    for name in QUESTION_SETS:
        text = (EVALS / f"kubernetes-{name}.jsonl").read_text(encoding="utf-8")
        cases = golden.parse_cases(text)[:per_set]
        found += [(name, case["question"]) for case in cases]
    return found


def run(*, quick: bool, keep: bool, progress: Progress) -> MultilingualScaleReport:
    tag = f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    created: list[Collection] = []
    skipped: list[str] = []
    target = scale.QUICK_REAL_CHUNKS if quick else scale.REAL_CHUNKS
    copies = scale.QUICK_COPIES if quick else scale.COPIES
    questions = load_questions(QUICK_QUESTIONS_PER_SET if quick else None)
    progress("vacuuming kb_chunk, kb_section, kb_source")
    scale.vacuum()
    rows: list[QuestionRow] = []
    seconds: dict[str, float] = {}
    sets = [
        (
            "english",
            embedding_models.DEFAULT,
            synthesize(load_documents(), scale.REAL_SOURCE_BYTES),
        ),
        ("multilingual", embedding_models.E5_SMALL, multilingual_docs()),
    ]
    try:
        for name, model, docs in sets:
            real, seconds[f"{name} real"] = scale.build_real(
                docs,
                target,
                tag,
                created,
                skipped,
                progress,
                name=f"{name}-real",
                model=model,
                precision=BUILD_PRECISION,
            )
            scale.vacuum()  # as autovacuum would have, see scale.vacuum
            rows.append(measure(real, name, questions, progress))
            synthetic, seconds[f"{name} copies"] = scale.build_synthetic(
                real, copies, tag, created, progress, name=f"{name}-synthetic"
            )
            scale.vacuum()
            rows.append(measure(synthetic, name, questions, progress))
    finally:
        if not keep:
            progress(f"deleting {len(created)} bench collections")
            for collection in created:
                scale.delete_collection(collection)
            scale.vacuum()
    report = MultilingualScaleReport(rows, seconds)
    report.notes += [f"not ingestible, skipped: {line}" for line in skipped]
    if keep:
        report.notes.append("kept: " + ", ".join(c.name for c in created))
    return report


def chunk_languages(collection: Collection) -> dict[str, int]:
    """The collection's chunks per text-search configuration, most first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT language::text, count(*) FROM kb_chunk "
            "WHERE collection_id = %s::bigint GROUP BY 1 ORDER BY 2 DESC, 1",
            [collection.pk],
        )
        return dict(cursor.fetchall())


def measure(
    collection: Collection,
    name: str,
    questions: Sequence[tuple[str, str]],
    progress: Progress,
) -> QuestionRow:
    """As scale.measure (warm: each question asked once first, untimed), with
    the keyword stage also per question set."""
    texts = [question for _, question in questions]
    for text in texts:
        answering.ask(collection, text)
    timed = scale.stage_timings(collection, texts, STAGES)
    answers = []
    for text in texts:
        started = time.perf_counter()
        answering.ask(collection, text)
        answers.append((time.perf_counter() - started) * 1000)
    languages = chunk_languages(collection)
    by_set = {}
    for set_name in QUESTION_SETS:
        ms = [
            v
            for (s, _), v in zip(questions, timed["keyword_search"], strict=True)
            if s == set_name
        ]
        if ms:
            by_set[set_name] = (percentile(ms, 50), percentile(ms, 95))
    row = QuestionRow(
        name,
        collection.embedding_model,
        sum(languages.values()),
        languages,
        len(texts),
        {stage: (percentile(v, 50), percentile(v, 95)) for stage, v in timed.items()},
        (percentile(answers, 50), percentile(answers, 95)),
        by_set,
    )
    progress(
        f"{name} at {row.chunks} chunks: retrieval p95 "
        f"{row.retrieval['total'][1]:.1f} ms, keyword p95 "
        f"{row.retrieval['keyword_search'][1]:.1f} ms, ask p95 {row.answer[1]:.1f} ms"
    )
    return row


# --- output -------------------------------------------------------------------


def markdown(report: MultilingualScaleReport) -> str:
    lines = [
        f"| collection | model | chunks | questions | "
        f"{scale.stage_columns(STAGES)} | ask() p50 / p95 |",
        "|---|---|---:|---:|" + "---:|" * (len(STAGES) + 1),
    ]
    for r in report.rows:
        lines.append(
            f"| {r.collection} | {r.model} | {r.chunks} | {r.questions} "
            f"| {scale.stage_cells(r.retrieval, STAGES)} "
            f"| {r.answer[0]:.1f} / {r.answer[1]:.1f} |"
        )
    lines += [
        "",
        "Milliseconds; `total` is retrieval's own total (fusion is inside "
        "`expand`). Multilingual against English at the same size, p95:",
        "",
        "| chunks | " + " | ".join(STAGES) + " | ask() |",
        "|---:|" + "---:|" * (len(STAGES) + 1),
    ]
    english = [r for r in report.rows if r.collection == "english"]
    others = [r for r in report.rows if r.collection != "english"]
    for base, row in zip(english, others, strict=False):
        ratios = [_ratio(row.retrieval[s][1], base.retrieval[s][1]) for s in STAGES] + [
            _ratio(row.answer[1], base.answer[1])
        ]
        lines.append(f"| {row.chunks} | " + " | ".join(ratios) + " |")
    lines += ["", "Keyword search per question set, p50 / p95 ms:", ""]
    lines.append("| collection | chunks | " + " | ".join(QUESTION_SETS) + " |")
    lines.append("|---|---:|" + "---:|" * len(QUESTION_SETS))
    for r in report.rows:
        cells = " | ".join(
            f"{r.keyword_by_set[s][0]:.1f} / {r.keyword_by_set[s][1]:.1f}"
            if s in r.keyword_by_set
            else "–"
            for s in QUESTION_SETS
        )
        lines.append(f"| {r.collection} | {r.chunks} | {cells} |")
    lines.append("")
    for r in report.rows:
        shares = ", ".join(f"{k} {v}" for k, v in r.languages.items())
        lines.append(f"- {r.collection}, {r.chunks} chunks: {shares}")
    built = ", ".join(f"{k} {v:.0f} s" for k, v in report.build_seconds.items())
    lines.append(f"- built in: {built}")
    lines += [f"- {note}" for note in report.notes]
    return "\n".join(lines)


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base else "–"


def as_json(report: MultilingualScaleReport) -> dict[str, Any]:
    return asdict(report)
