"""Show, exercise and benchmark the embedder (issue #3)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb import embedding_models, jsontext, onnx_export
from kb.embedding import (
    PRECISIONS,
    Embedder,
    EmbeddingError,
    get_embedder,
    synthetic_text,
)

BENCH_LENGTHS = (120, 250)
BENCH_BATCHES = (1, 8, 32)
BENCH_TEXTS = 32  # per length: one full batch at the largest batch size
BENCH_SECONDS = 1.5  # minimum timed per figure; the machine is shared and noisy
EMBED_BATCH_LINES = 256  # lines read per embed() call, so huge files stream


class Command(BaseCommand):
    help = (
        "Print the embedder's model, window and token budget; with --embed, "
        "embed JSON lines ({'text': ...}); with --bench, measure chunks/second."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--embed",
            metavar="FILE.jsonl",
            help="Embed each line's 'text' and print JSON lines ('-' = stdin).",
        )
        parser.add_argument(
            "--bench",
            action="store_true",
            help="Chunks/second at ~120 and ~250 tokens, batch 1/8/32, fp32+int8.",
        )
        parser.add_argument(
            "--model",
            choices=embedding_models.names(),
            help=f"The embedding model (default {embedding_models.DEFAULT}).",
        )
        parser.add_argument(
            "--precision",
            choices=PRECISIONS,
            help="Override KB_EMBED_PRECISION.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["bench"]:
                self._bench(options["model"])
                return
            embedder = get_embedder(options["model"], options["precision"])
            if options["embed"]:
                self._embed(options["embed"], embedder)
            else:
                self._describe(embedder)
        except EmbeddingError as error:
            raise CommandError(str(error)) from error

    # --- describe ----------------------------------------------------------

    def _describe(self, embedder: Embedder) -> None:
        info = embedder.describe()
        lines = [
            f"model: {info['model']}",
            f"window: {info['window']} tokens (from {info['window_source']})",
            f"special tokens: {info['special_tokens']}",
            f"prompts: query {info['query_prefix']!r}, "
            f"passage {info['passage_prefix']!r} "
            f"({info['passage_prompt_tokens']} tokens)",
            f"usable chunk budget: {info['usable_window']} tokens",
            f"tokenizer.json truncation: {info['tokenizer_truncation_note']}",
            f"precision: {info['precision']}",
            f"dimensions: {info['dim']}",
            f"threads: {info['threads']}, batch size: {info['batch_size']}",
            f"model file: {info['model_path'] or 'loaded on first embed (cached)'}",
        ]
        for line in lines:
            self.stdout.write(line)
        for warning in info["warnings"]:
            self.stdout.write(self.style.WARNING(f"warning: {warning}"))

    # --- embed -------------------------------------------------------------

    def _embed(self, path: str, embedder: Embedder) -> None:
        for rows in _read_batches(path):
            texts = [row["text"] for _, row in rows]
            origins = [_origin(number, row) for number, row in rows]
            vectors = embedder.embed_passages(texts, origins)
            for (_, row), text, vector in zip(rows, texts, vectors):
                out = {"id": row["id"]} if "id" in row else {}
                out["token_count"] = embedder.count_passage_tokens(text)
                out["vector"] = vector.tolist()
                self.stdout.write(json.dumps(out))

    # --- bench -------------------------------------------------------------

    def _bench(self, model: str | None) -> None:
        embedders = {p: get_embedder(model, p) for p in PRECISIONS}
        fp32 = embedders["fp32"]
        texts = {
            length: [synthetic_text(fp32, length, seed) for seed in range(BENCH_TEXTS)]
            for length in BENCH_LENGTHS
        }
        self.stdout.write(f"threads: {fp32.threads}; {BENCH_TEXTS} texts per run")
        vectors: dict[str, list[np.ndarray]] = {p: [] for p in PRECISIONS}
        for precision, embedder in embedders.items():
            embedder.embed(texts[BENCH_LENGTHS[0]][:2])  # load/build before timing
            self._report_build(embedder)
            for length, batch in texts.items():
                for batch_size in BENCH_BATCHES:
                    rate, result = _rate(embedder, batch, batch_size)
                    self.stdout.write(
                        f"{precision} {length} tokens batch {batch_size:>2}: "
                        f"{rate:6.1f} chunks/s"
                    )
                vectors[precision].append(result)
        self._report_fresh_build(fp32)
        cosines = np.sum(
            np.concatenate(vectors["fp32"]) * np.concatenate(vectors["int8"]), axis=1
        )
        self.stdout.write(f"int8 vs fp32 cosine: min {cosines.min():.4f}")

    def _report_build(self, embedder: Embedder) -> None:
        seconds = embedder.build_seconds
        state = f"built now in {seconds:.2f} s" if seconds else "cached"
        self.stdout.write(f"{embedder.precision} model {embedder.model_path}: {state}")

    def _report_fresh_build(self, embedder: Embedder) -> None:
        if not embedder.source.builds_graph:
            return
        started = time.perf_counter()
        onnx_export.build_from_dir(embedder.source.directory)
        seconds = time.perf_counter() - started
        self.stdout.write(f"fp32 graph build from safetensors: {seconds:.2f} s")


def _rate(
    embedder: Embedder, texts: list[str], batch_size: int
) -> tuple[float, np.ndarray]:
    """Chunks/second over repeated passes, so one slow pass does not decide."""
    done, started = 0, time.perf_counter()
    while True:
        vectors = embedder.embed(texts, batch_size=batch_size)
        done += len(texts)
        elapsed = time.perf_counter() - started
        if elapsed >= BENCH_SECONDS:
            return done / elapsed, vectors


def _origin(number: int, row: dict[str, Any]) -> str:
    label = f"line {number}"
    return f"{label} (id {row['id']!r})" if "id" in row else label


def _read_batches(path: str) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """Numbered JSON rows in groups, validated to have a string 'text'."""
    batch: list[tuple[int, dict[str, Any]]] = []
    # Never close stdin: the caller (or a test harness) still owns it.
    context = nullcontext(sys.stdin) if path == "-" else _open(path)
    with context as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            batch.append((number, _parse(number, line)))
            if len(batch) >= EMBED_BATCH_LINES:
                yield batch
                batch = []
    if batch:
        yield batch


def _open(path: str) -> TextIO:
    try:
        return Path(path).open(encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error}") from error


def _parse(number: int, line: str) -> dict[str, Any]:
    try:
        row = jsontext.loads(line)
    except jsontext.JsonError as error:
        raise CommandError(f"line {number} {error}") from None
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        raise CommandError(f"line {number}: expected an object with a 'text' string")
    return row
