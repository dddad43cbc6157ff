"""`kb_bench speed --only reference` (issue #29's speed target): how fast
reference pages are read, parsed and chunked, beside Markdown docs.

The reference corpora shipped in evals/corpora: the JOpt Simple Javadoc
(class pages as `javadoc` writes them, read as API reference: one section per
member) and the Mutt manual (DocBook XSL HTML with definition lists and big
tables). Each HTML page is read into Markdown by the reader an upload goes
through (kb.readers.read), then parsed (from the reader's account of its
blocks, as an upload is) and chunked at the default budget in MiniLM's tokens,
as the indexing job does; input MB/s counts the HTML bytes.
The baseline, in the same process and run: the shared corpora's Markdown
files, parsed and chunked the same way (issue #8's corpus row). Each corpus is
timed ROUNDS times, the median kept; a cold word cache each time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from kb import chunking, parsing, readers
from kb.benchmarks.corpus import Progress, load_documents
from kb.benchmarks.tables import markdown_table
from kb.embedding import Embedder, get_embedder

ROUNDS = 3
QUICK_ROUNDS = 1
CORPORA = ("jopt-simple-javadoc", "mutt-manual")


@dataclass
class Row:
    corpus: str
    files: int
    megabytes: float
    read_seconds: float  # reading HTML into Markdown (0 for Markdown)
    chunk_seconds: float  # parsing and chunking the Markdown
    chunks: int

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / (self.read_seconds + self.chunk_seconds)


@dataclass
class ReferenceReport:
    budget: int
    rounds: int
    rows: list[Row] = field(default_factory=list)


def run(quick: bool, progress: Progress) -> ReferenceReport:
    embedder = get_embedder()
    rounds = QUICK_ROUNDS if quick else ROUNDS
    report = ReferenceReport(chunking.DEFAULT_MAX_TOKENS, rounds)
    root = Path(settings.BASE_DIR) / "evals" / "corpora"
    baseline = [(doc.name, doc.text.encode("utf-8")) for doc in load_documents()]
    corpora = [(name, _files(root / name)) for name in CORPORA]
    for name, files in [("Markdown docs (baseline)", baseline), *corpora]:
        timed = [_timed(name, files, embedder, report.budget) for _ in range(rounds)]
        report.rows.append(sorted(timed, key=lambda r: r.mb_per_s)[len(timed) // 2])
        progress(f"reference: {name}: {report.rows[-1].mb_per_s:.2f} MB/s")
    return report


def _files(folder: Path) -> list[tuple[str, bytes]]:
    return [
        (path.relative_to(folder).as_posix(), path.read_bytes())
        for path in sorted(folder.rglob("*"))
        if path.suffix in (".html", ".htm", ".md")
    ]


def _timed(
    corpus: str, files: list[tuple[str, bytes]], embedder: Embedder, budget: int
) -> Row:
    embedder.forget_words()
    read = chunked = 0.0
    chunks = 0
    for name, data in files:
        started = time.perf_counter()
        structure = None
        if name.endswith((".html", ".htm")):
            reading = readers.read(name, data)
            text, structure = reading.text, reading.structure
        else:
            text = data.decode("utf-8")
        between = time.perf_counter()
        document = parsing.parse(text, name, structure=structure)
        result = chunking.chunk_document(
            document, text, count_tokens=embedder.count_tokens, max_tokens=budget
        )
        chunked += time.perf_counter() - between
        read += between - started
        chunks += len(result.chunks)
    size = sum(len(data) for _, data in files) / 1e6
    return Row(corpus, len(files), size, read, chunked, chunks)


def markdown(report: ReferenceReport) -> str:
    base = report.rows[0].mb_per_s
    head = (
        f"Read + parse + chunk at {report.budget} MiniLM tokens, median of "
        f"{report.rounds} round(s); MB of the input files.\n\n"
    )
    rows = [
        [
            r.corpus,
            str(r.files),
            f"{r.megabytes:.2f}",
            f"{r.read_seconds:.2f}",
            f"{r.chunk_seconds:.2f}",
            f"{r.chunks:,}",
            f"{r.mb_per_s:.2f}",
            f"{r.mb_per_s / base:.2f}x",
        ]
        for r in report.rows
    ]
    columns = [
        "corpus",
        "files",
        "MB",
        "read s",
        "parse + chunk s",
        "chunks",
        "MB/s",
        "vs Markdown",
    ]
    return head + markdown_table(columns, "lrrrrrrr", rows)


def as_json(report: ReferenceReport) -> dict[str, Any]:
    return {
        "budget": report.budget,
        "rounds": report.rounds,
        "rows": [{**asdict(r), "mb_per_s": round(r.mb_per_s, 3)} for r in report.rows],
    }
