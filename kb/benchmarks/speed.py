"""Throughput and latency (issue #8): `kb_bench speed`.

One run, on one corpus of Markdown and prose built by `synthesize`:
1. parse + chunk MB/s and the share of chunks over the embedding window for our
   chunker, LangChain's RecursiveCharacterTextSplitter.from_huggingface_tokenizer
   and Chonkie's RecursiveChunker, at the same budgets in the same MiniLM
   tokenizer, on the same text, in this process; and ours on a heading-dense
   document (10,000 headings);
2. embedding chunks/s at about 120 and 250 tokens: our fp32 and int8 embedders
   and, when torch is installed, sentence-transformers (same texts, batch 16);
3. ingestion end to end with one and with two RQ workers (`scale`);
4. retrieval and answer latency at 10,000 and 100,000 chunks (`scale`);
5. retrieval in a small collection alone and beside two large ones
   (`neighbours`, also alone: `kb_bench speed --only neighbours`);
6. the latency a reranker adds per question (`rerank`, issue #17).
`kb_bench speed` then runs kb/benchmarks/multilingual.py and
multilingual_scale.py (issue #27).

The peers are imported only here, from requirements-bench.txt; torch is an
optional extra (`pip install torch==2.13.0`), its rows are left out without it.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kb import chunking, parsing
from kb.benchmarks import neighbours, rerank, scale
from kb.benchmarks.corpus import Doc, Progress, load_documents, megabytes, synthesize
from kb.benchmarks.tables import markdown_table
from kb.embedding import Embedder, get_embedder

CORPUS_BYTES = 5_000_000
QUICK_BYTES = 300_000
BUDGETS = (200, 250, 256)  # 256 is MiniLM's whole window, the peers' natural size
EMBED_LENGTHS = (120, 250)
EMBED_TEXTS = 256
QUICK_EMBED_TEXTS = 32
EMBED_BATCH = 16
DENSE_HEADINGS = 10_000  # the heading-dense row (issue #15)
QUICK_DENSE_HEADINGS = 1_000


# --- 1. parse + chunk ---------------------------------------------------------


@dataclass
class ChunkRow:
    chunker: str
    budget: int
    seconds: float
    mb_per_s: float
    chunks: int
    over_window: int  # chunks of more than `window` MiniLM tokens, specials included
    mean_tokens: float
    max_tokens: int

    @property
    def over_share(self) -> float:
        return self.over_window / self.chunks if self.chunks else 0.0


Splitter = Callable[[Doc], list[str]]


def ours(embedder: Embedder, budget: int) -> Splitter:
    def split(doc: Doc) -> list[str]:
        document = parsing.parse(doc.text, doc.name)
        result = chunking.chunk_document(
            document, doc.text, count_tokens=embedder.count_tokens, max_tokens=budget
        )
        return [chunk.embed_text for chunk in result.chunks]

    return split


def _langchain(embedder: Embedder, budget: int) -> Splitter:
    import transformers
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    transformers.logging.set_verbosity_error()  # "longer than 512": only counting
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        str(embedder.source.directory)
    )
    splitter = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        tokenizer, chunk_size=budget, chunk_overlap=0
    )
    return lambda doc: splitter.split_text(doc.text)


def _chonkie(embedder: Embedder, budget: int) -> Splitter:
    from chonkie import RecursiveChunker

    # Our tokenizers.Tokenizer: the same vocabulary, truncation switched off.
    chunker = RecursiveChunker(tokenizer=embedder.tokenizer, chunk_size=budget)
    return lambda doc: [chunk.text for chunk in chunker.chunk(doc.text)]


CHUNKERS: dict[str, Callable[[Embedder, int], Splitter]] = {
    "kb structure": ours,
    "LangChain recursive (HF tokenizer)": _langchain,
    "Chonkie recursive": _chonkie,
}


def chunk_speed(
    docs: Sequence[Doc], embedder: Embedder, budgets: Sequence[int], progress: Progress
) -> list[ChunkRow]:
    """Time each chunker over all of `docs`; count tokens afterwards, untimed."""
    rows = []
    for name, factory in CHUNKERS.items():
        for budget in budgets:
            split = factory(embedder, budget)
            rows.append(chunk_row(name, budget, split, docs, embedder))
            progress(f"chunk: {name} {budget}: {rows[-1].mb_per_s:.2f} MB/s")
    return rows


def chunk_row(
    name: str, budget: int, split: Splitter, docs: Sequence[Doc], embedder: Embedder
) -> ChunkRow:
    embedder.forget_words()  # every run starts with a cold word cache
    started = time.perf_counter()
    texts = [text for doc in docs for text in split(doc)]
    seconds = time.perf_counter() - started
    counts = [len(e.ids) for e in embedder.tokenizer.encode_batch(texts)]
    return ChunkRow(
        name,
        budget,
        seconds,
        megabytes(docs) / seconds,
        len(texts),
        sum(count > embedder.window for count in counts),
        float(np.mean(counts)),
        max(counts),
    )


def heading_dense(headings: int) -> Doc:
    """A document of `headings` sections of one short line each: parse time once
    grew with the square of the number of headings (issue #15)."""
    text = "".join(
        f"## Heading {number}\n\nA short paragraph under it.\n\n"
        for number in range(headings)
    )
    return Doc(f"dense/{headings}-headings.md", text)


def dense_speed(
    embedder: Embedder, headings: int, budget: int, progress: Progress
) -> ChunkRow:
    """Our parse + chunk on a heading-dense document, beside the corpus rows."""
    doc = heading_dense(headings)
    name = f"kb structure, {headings:,} headings ({doc.size / 1e6:.2f} MB)"
    row = chunk_row(name, budget, ours(embedder, budget), [doc], embedder)
    progress(f"chunk: {name}: {row.mb_per_s:.2f} MB/s")
    return row


# --- 2. embedding -------------------------------------------------------------


@dataclass
class EmbedRow:
    engine: str
    tokens: int  # target length, specials included
    mean_tokens: float
    texts: int
    seconds: float
    per_s: float
    vs_st: float | None = None


@dataclass
class EmbedReport:
    rows: list[EmbedRow]
    int8_min_cosine: float
    st_min_cosine: float | None  # sentence-transformers vs our fp32
    st_version: str | None
    threads: int


def token_windows(embedder: Embedder, text: str, tokens: int, count: int) -> list[str]:
    """Up to `count` consecutive slices of `text` of about `tokens` tokens each
    (specials included); a slice may start inside a word, so a recount can
    differ by a token or two."""
    encoding = embedder.tokenizer.encode(text, add_special_tokens=False)
    step = tokens - embedder.special_tokens
    windows = []
    for first in range(0, len(encoding.ids) - step, step):
        start = encoding.offsets[first][0]
        end = encoding.offsets[first + step - 1][1]
        windows.append(text[start:end])
        if len(windows) == count:
            break
    return windows


def embed_speed(docs: Sequence[Doc], count: int, progress: Progress) -> EmbedReport:
    fp32, int8 = get_embedder(precision="fp32"), get_embedder(precision="int8")
    text = "\n\n".join(doc.text for doc in docs)[: count * max(EMBED_LENGTHS) * 8]
    engines: dict[str, Callable[[list[str]], np.ndarray]] = {
        "kb fp32 (onnxruntime)": lambda t: fp32.embed(t, batch_size=EMBED_BATCH),
        "kb int8 (onnxruntime)": lambda t: int8.embed(t, batch_size=EMBED_BATCH),
    }
    st_version = _sentence_transformers(fp32, engines)
    rows: list[EmbedRow] = []
    vectors: dict[tuple[str, int], np.ndarray] = {}
    for tokens in EMBED_LENGTHS:
        texts = token_windows(fp32, text, tokens, count)
        mean = float(np.mean([fp32.count_tokens(t) for t in texts]))
        for name, embed in engines.items():
            embed(texts[:EMBED_BATCH])  # warm up: session, threads, allocator
            started = time.perf_counter()
            vectors[name, tokens] = embed(texts)
            seconds = time.perf_counter() - started
            rows.append(
                EmbedRow(name, tokens, mean, len(texts), seconds, len(texts) / seconds)
            )
            progress(f"embed: {name} ~{tokens} tokens: {rows[-1].per_s:.1f}/s")
    _ratios(rows)
    return EmbedReport(
        rows,
        _min_cosine(vectors, "kb int8 (onnxruntime)"),
        _min_cosine(vectors, ST_ENGINE) if st_version else None,
        st_version,
        fp32.threads,
    )


ST_ENGINE = "sentence-transformers fp32 (torch)"


def _sentence_transformers(
    fp32: Embedder, engines: dict[str, Callable[[list[str]], np.ndarray]]
) -> str | None:
    """Add sentence-transformers to `engines` when torch is installed."""
    try:
        import sentence_transformers
        import torch
    except ImportError:
        return None
    torch.set_num_threads(fp32.threads)
    model = sentence_transformers.SentenceTransformer(
        str(fp32.source.directory), device="cpu"
    )
    engines[ST_ENGINE] = lambda texts: model.encode(
        texts, batch_size=EMBED_BATCH, normalize_embeddings=True
    )
    versions = sentence_transformers.__version__, torch.__version__
    return "sentence-transformers {}, torch {}".format(*versions)


def _ratios(rows: list[EmbedRow]) -> None:
    reference = {row.tokens: row.per_s for row in rows if row.engine == ST_ENGINE}
    for row in rows:
        if row.tokens in reference:
            row.vs_st = row.per_s / reference[row.tokens]


def _min_cosine(vectors: dict[tuple[str, int], np.ndarray], engine: str) -> float:
    """The lowest cosine between `engine`'s vector and our fp32 one, all texts."""
    lowest = 1.0
    for tokens in EMBED_LENGTHS:
        base = vectors["kb fp32 (onnxruntime)", tokens]
        lowest = min(lowest, float((vectors[engine, tokens] * base).sum(axis=1).min()))
    return lowest


# --- the run ------------------------------------------------------------------


@dataclass
class Report:
    started: str
    machine: dict[str, Any]
    corpus: dict[str, Any]
    chunking: list[ChunkRow]
    embedding: EmbedReport
    scale: Any  # scale.ScaleReport
    neighbours: Any = None  # neighbours.NeighboursReport
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    reranking: list[rerank.RerankRow] = field(default_factory=list)


def machine() -> dict[str, Any]:
    import psutil

    return {
        "cpus": os.cpu_count(),
        "cpu": _cpu_model(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
    }


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def run(quick: bool, keep: bool, progress: Progress) -> Report:
    began = time.perf_counter()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    base = load_documents()
    docs = synthesize(base, QUICK_BYTES if quick else CORPUS_BYTES)
    corpus = {
        "documents": len(docs),
        "distinct_files": len(base),
        "mb": round(megabytes(docs), 3),
        "base_mb": round(megabytes(base), 3),
    }
    progress(f"corpus: {corpus['documents']} documents, {corpus['mb']} MB")
    embedder = get_embedder(precision="fp32")
    chunk_rows = chunk_speed(docs, embedder, BUDGETS, progress)
    headings = QUICK_DENSE_HEADINGS if quick else DENSE_HEADINGS
    chunk_rows.append(dense_speed(embedder, headings, BUDGETS[0], progress))
    embed_report = embed_speed(
        docs, QUICK_EMBED_TEXTS if quick else EMBED_TEXTS, progress
    )
    rerank_rows = rerank.rerank_speed(quick, progress)
    scale_report = scale.run(base, docs, quick=quick, keep=keep, progress=progress)
    report = Report(started, machine(), corpus, chunk_rows, embed_report, scale_report)
    report.neighbours = neighbours.run(quick=quick, keep=keep, progress=progress)
    report.seconds = time.perf_counter() - began
    report.reranking = rerank_rows
    return report


# --- output -------------------------------------------------------------------


def markdown(report: Report) -> str:
    parts = [
        _corpus_line(report),
        _chunk_table(report.chunking),
        _embed_table(report.embedding),
        scale.markdown(report.scale),
        *([rerank.markdown(report.reranking)] if report.reranking else []),
    ]
    if report.neighbours is not None:
        parts.append(neighbours.markdown(report.neighbours))
    return "\n\n".join(parts) + "\n"


def _corpus_line(report: Report) -> str:
    c, m = report.corpus, report.machine
    return (
        f"Corpus: {c['documents']} documents, {c['mb']} MB ({c['distinct_files']} "
        f"files, {c['base_mb']} MB, repeated with digits shifted). Machine: "
        f"{m['cpus']} CPUs ({m['cpu']}), {m['ram_gb']} GB RAM, load average at "
        f"start {m['load_average_at_start'][0]}. Run: {report.seconds:.0f} s."
    )


def _chunk_table(rows: list[ChunkRow]) -> str:
    header = [
        "chunker",
        "budget",
        "MB/s",
        "chunks",
        "mean tokens",
        "max tokens",
        "over 256 tokens",
    ]
    cells = [
        [
            r.chunker,
            r.budget,
            f"{r.mb_per_s:.2f}",
            r.chunks,
            f"{r.mean_tokens:.0f}",
            r.max_tokens,
            f"{r.over_window} ({100 * r.over_share:.1f} %)",
        ]
        for r in rows
    ]
    return markdown_table(header, "lrrrrrr", cells)


def _embed_table(report: EmbedReport) -> str:
    lines = [
        f"Batch {EMBED_BATCH}, {report.threads} threads. "
        f"{report.st_version or 'sentence-transformers: torch not installed'}.",
        "",
        "| engine | tokens | texts | chunks/s | vs sentence-transformers |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in report.rows:
        ratio = f"{r.vs_st:.2f}×" if r.vs_st is not None else "–"
        lines.append(
            f"| {r.engine} | {r.mean_tokens:.0f} | {r.texts} | {r.per_s:.1f} "
            f"| {ratio} |"
        )
    lines.append("")
    lines.append(f"int8 vs fp32: minimum cosine {report.int8_min_cosine:.4f}.")
    if report.st_min_cosine is not None:
        lines[-1] += (
            f" sentence-transformers vs our fp32: minimum cosine "
            f"{report.st_min_cosine:.6f}."
        )
    return "\n".join(lines)


def as_json(report: Report) -> dict[str, Any]:
    return asdict(report)
