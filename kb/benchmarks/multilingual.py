"""The embedding models side by side (issue #27): `kb_bench speed` and
`kb_bench speed --only multilingual`.

On the Russian Kubernetes pages (evals/corpora/kubernetes-docs/ru), repeated
with digits shifted to a corpus of CORPUS_BYTES:
1. parse + chunk MB/s with each model's tokens (MiniLM reads Russian nearly
   letter by letter, e5 by words);
2. texts/s at about 120 and 250 tokens, each model's own tokens (specials
   included), fp32 and int8, batch 16; and each int8's lowest cosine to fp32.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from kb import embedding_models
from kb.benchmarks.corpus import Doc, Progress, load_documents, megabytes, synthesize
from kb.benchmarks.speed import (
    EMBED_BATCH,
    EMBED_LENGTHS,
    ChunkRow,
    chunk_row,
    ours,
    token_windows,
)
from kb.embedding import PRECISIONS, get_embedder

RUSSIAN = Path(settings.BASE_DIR) / "evals/corpora/kubernetes-docs/ru"
CORPUS_BYTES = 2_000_000
QUICK_BYTES = 200_000
BUDGET = 200
TEXTS = 128
QUICK_TEXTS = 32
MODELS = (embedding_models.DEFAULT, embedding_models.E5_SMALL)


@dataclass
class ModelEmbedRow:
    model: str
    precision: str
    tokens: int  # target length in the model's tokens, specials included
    mean_tokens: float
    texts: int
    per_s: float


@dataclass
class MultilingualReport:
    corpus_mb: float
    chunking: list[ChunkRow]
    embedding: list[ModelEmbedRow]
    int8_min_cosine: dict[str, float]
    threads: int


def russian_docs(target_bytes: int) -> list[Doc]:
    base = load_documents([(RUSSIAN, "**/*.md")])
    return synthesize(base, target_bytes)


def run(quick: bool, progress: Progress) -> MultilingualReport:
    docs = russian_docs(QUICK_BYTES if quick else CORPUS_BYTES)
    chunk_rows = []
    for model in MODELS:
        embedder = get_embedder(model, "fp32")
        name = f"kb structure, Russian, {model} tokens"
        split = ours(embedder, BUDGET)
        chunk_rows.append(chunk_row(name, BUDGET, split, docs, embedder))
        progress(f"chunk: {name}: {chunk_rows[-1].mb_per_s:.2f} MB/s")
    text = "\n\n".join(doc.text for doc in docs)
    count = QUICK_TEXTS if quick else TEXTS
    rows, lowest = [], {}
    for model in MODELS:
        vectors = {}
        for tokens in EMBED_LENGTHS:
            fp32 = get_embedder(model, "fp32")
            texts = token_windows(fp32, text, tokens, count)
            mean = float(np.mean([fp32.count_tokens(t) for t in texts]))
            for precision in PRECISIONS:
                embedder = get_embedder(model, precision)
                embedder.embed(texts[:EMBED_BATCH], batch_size=EMBED_BATCH)  # warm
                started = time.perf_counter()
                vectors[precision, tokens] = embedder.embed(
                    texts, batch_size=EMBED_BATCH
                )
                per_s = len(texts) / (time.perf_counter() - started)
                rows.append(
                    ModelEmbedRow(model, precision, tokens, mean, len(texts), per_s)
                )
                progress(f"embed: {model} {precision} ~{tokens} tokens: {per_s:.1f}/s")
        lowest[model] = min(
            float((vectors["fp32", t] * vectors["int8", t]).sum(axis=1).min())
            for t in EMBED_LENGTHS
        )
    threads = get_embedder(MODELS[0], "fp32").threads
    return MultilingualReport(
        round(megabytes(docs), 3), chunk_rows, rows, lowest, threads
    )


def markdown(report: MultilingualReport) -> str:
    lines = [
        f"Russian corpus: {report.corpus_mb} MB (the Kubernetes pages repeated). "
        f"Chunk budget {BUDGET} tokens of each model.",
        "",
        "| chunker | MB/s | chunks | mean tokens | max tokens |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in report.chunking:
        lines.append(
            f"| {r.chunker} | {r.mb_per_s:.2f} | {r.chunks} | {r.mean_tokens:.0f} "
            f"| {r.max_tokens} |"
        )
    lines += [
        "",
        f"Embedding, batch {EMBED_BATCH}, {report.threads} threads, Russian text "
        "cut to each model's own tokens:",
        "",
        "| model | precision | tokens | texts | texts/s |",
        "|---|---|---:|---:|---:|",
    ]
    for r in report.embedding:
        lines.append(
            f"| {r.model} | {r.precision} | {r.mean_tokens:.0f} | {r.texts} "
            f"| {r.per_s:.1f} |"
        )
    lines.append("")
    lines.append(
        "int8 vs fp32, lowest cosine: "
        + ", ".join(f"{m} {c:.4f}" for m, c in report.int8_min_cosine.items())
        + "."
    )
    return "\n".join(lines)


def as_json(report: MultilingualReport) -> dict[str, Any]:
    return asdict(report)
