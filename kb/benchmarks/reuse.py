"""`kb_bench speed --only reuse` (issue #30 item 3): what keeping vectors by
content (kb.embedding_reuse) saves when sources change a little.

The shared corpora's Markdown files are indexed into a new collection (their
titles tagged with the run, so no stored chunk matches), then:
1. one paragraph is edited in each of 10 files, and in the largest file;
2. every source is indexed again unchanged ("Re-index").
Each step runs with reuse on, then in a second collection with it off (the
same steps, the same texts), in this process as a worker would. Reported per
step: sources, chunks, chunks embedded and reused, and seconds of each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from django.test.utils import override_settings

from kb import ingestion, uploads
from kb.benchmarks.corpus import Doc, Progress, load_documents
from kb.models import Collection, Source

EDITED_FILES = 10
QUICK_FILES = 12  # of the corpora's files, for --quick (all otherwise)


@dataclass
class Step:
    name: str
    sources: int
    chunks: int
    embedded: int
    reused: int
    seconds: float
    seconds_without: float  # the same step with reuse off
    embedded_without: int


@dataclass
class ReuseReport:
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def tagged(doc: Doc, tag: str) -> str:
    """The document with its first line (its title) tagged: every chunk's
    embedded heading path differs from any stored one."""
    first, _, rest = doc.text.partition("\n")
    return f"{first} ({tag})\n{rest}"


def edited(text: str) -> str:
    """The text with its longest paragraph changed by one sentence."""
    paragraphs = text.split("\n\n")
    prose = [
        i
        for i, p in enumerate(paragraphs)
        if p.strip() and not p.lstrip().startswith(("#", "-", "*", "|", "`", ">"))
    ]
    if not prose:
        return text + "\n\nOne more paragraph, added by the benchmark.\n"
    longest = max(prose, key=lambda i: len(paragraphs[i]))
    paragraphs[longest] += " This sentence was added by the benchmark."
    return "\n\n".join(paragraphs)


def run(quick: bool, progress: Progress) -> ReuseReport:
    docs = load_documents()
    if quick:
        docs = docs[:QUICK_FILES]
    tag = time.strftime("bench-reuse-%Y%m%d-%H%M%S")
    texts = {doc.name.replace("/", "-"): tagged(doc, tag) for doc in docs}
    largest = max(texts, key=lambda name: len(texts[name]))
    changed = sorted(set(list(texts)[:EDITED_FILES]) | {largest})
    steps: dict[str, list[tuple[int, int, int, int, float]]] = {}
    for reuse in (True, False):
        collection = Collection.objects.create(name=f"{tag}-{'on' if reuse else 'off'}")
        try:
            with override_settings(KB_EMBEDDING_REUSE=reuse):
                progress(f"reuse {'on' if reuse else 'off'}: first index")
                steps.setdefault("first index", []).append(_index(collection, texts))
                progress(f"reuse {'on' if reuse else 'off'}: {len(changed)} edited")
                steps.setdefault(
                    f"{len(changed)} files edited (one paragraph each)", []
                ).append(_index(collection, {n: edited(texts[n]) for n in changed}))
                progress(f"reuse {'on' if reuse else 'off'}: re-index")
                steps.setdefault("re-index, nothing changed", []).append(
                    _reindex(collection)
                )
        finally:
            collection.delete()
    report = ReuseReport()
    for name, ((sources, chunks, embedded, reused, on), off) in steps.items():
        report.steps.append(
            Step(name, sources, chunks, embedded, reused, on, off[4], off[2])
        )
    report.notes.append(f"largest file: {largest} ({len(texts[largest])} chars)")
    return report


def _index(collection: Collection, texts: dict[str, str]):
    started = time.perf_counter()
    sources = []
    for name, text in texts.items():
        source, _ = uploads.store_source(collection, name, text.encode())
        ingestion.ingest(source.pk)
        sources.append(source.pk)
    return _totals(sources, time.perf_counter() - started)


def _reindex(collection: Collection):
    started = time.perf_counter()
    sources = list(
        Source.objects.filter(collection=collection).values_list("pk", flat=True)
    )
    for pk in sources:
        ingestion.ingest(pk)
    return _totals(sources, time.perf_counter() - started)


def _totals(sources: list[int], seconds: float):
    stats = Source.objects.filter(pk__in=sources).values_list("stats", flat=True)
    return (
        len(sources),
        sum(s.get("chunks", 0) for s in stats),
        sum(s.get("chunks_embedded", 0) for s in stats),
        sum(s.get("chunks_reused", 0) for s in stats),
        seconds,
    )


def markdown(report: ReuseReport) -> str:
    lines = [
        "| step | sources | chunks | embedded | reused | seconds | seconds "
        "without reuse | embedded without | time ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in report.steps:
        ratio = s.seconds / s.seconds_without if s.seconds_without else 0.0
        lines.append(
            f"| {s.name} | {s.sources} | {s.chunks} | {s.embedded} | {s.reused} "
            f"| {s.seconds:.1f} | {s.seconds_without:.1f} | {s.embedded_without} "
            f"| {ratio:.2f}× |"
        )
    return "\n".join(lines + [""] + [f"- {note}" for note in report.notes]) + "\n"


def as_json(report: ReuseReport) -> dict[str, Any]:
    return {
        "steps": [vars(step) for step in report.steps],
        "notes": report.notes,
    }
