"""Retrieval quality on the Chroma chunking evaluation (issue #8).

Steps, for each configuration:
1. chunk all five corpora (`splitters`) and place every chunk in its corpus,
   both at its true range and, as the report's code does, at the first
   occurrence of its text;
2. embed the chunks with our all-MiniLM-L6-v2 (cached on disk by the hash of
   the texts), all corpora in one index;
3. take the k = 5 nearest chunks per question by exact cosine similarity;
4. score every question (`metrics`) and compare each configuration with a
   reference one on the same questions (paired bootstrap).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from kb.benchmarks import metrics, splitters
from kb.benchmarks.metrics import Located, PairedDifference, Range
from kb.embedding import Embedder, get_embedder

logger = logging.getLogger(__name__)

DATA_DIR = settings.BASE_DIR.parent / "shared" / "benchmarks" / "chroma"
# Their questions_df.csv order.
CORPORA = ("state_of_the_union", "wikitexts", "finance", "chatlogs", "pubmed")
K = 5
QUESTIONS_FILE = "questions_df.csv"
METRICS = ("recall", "precision", "omega", "iou")
OFFSETS = ("true", "first")


class BenchmarkDataMissing(FileNotFoundError):
    """The benchmark files are not where they were looked for."""


@dataclass(frozen=True)
class Question:
    text: str
    corpus: str
    references: tuple[Range, ...]


@dataclass(frozen=True)
class Benchmark:
    corpora: dict[str, str]
    questions: list[Question]


@dataclass(frozen=True)
class Config:
    name: str
    # "kb-structure", "kb-fixed", "kb-sections" (the simple baseline of issue #17:
    # structure-first chunks, the top SECTIONS_HITS grouped into the best
    # SECTIONS_K whole sections, cut to BUDGET tokens), "recursive", "token-text"
    kind: str
    size: int
    overlap: int = 0
    prefix: bool = True  # kb only: embed the heading-path prefix as the app does

    @property
    def label(self) -> str:
        if self.kind.startswith("kb-"):
            extra = "" if self.prefix else ", no prefix"
            tokens = f"{self.size}/{self.overlap}" if self.overlap else str(self.size)
            if self.kind == "kb-sections":
                return f"kb sections {tokens} MiniLM, top 20 → 3 sections{extra}"
            return f"kb {self.kind[3:]} {tokens} MiniLM{extra}"
        name = "Recursive" if self.kind == "recursive" else "TokenText"
        return f"{name} {self.size}/{self.overlap} cl100k"

    @property
    def truncates(self) -> bool:
        """Chunks over the window are cut by the embedder (all but ours)."""
        return self.kind not in ("kb-structure", "kb-sections")


CONFIGS = {
    config.name: config
    for config in (
        Config("kb-structure-120", "kb-structure", 120),
        Config("kb-sections-120", "kb-sections", 120),
        Config("kb-structure-200", "kb-structure", 200),
        Config("kb-structure-250", "kb-structure", 250),
        Config("kb-structure-200-noprefix", "kb-structure", 200, prefix=False),
        Config("kb-fixed-250-125", "kb-fixed", 250, 125),
        Config("recursive-200-0", "recursive", 200, 0),
        Config("recursive-250-0", "recursive", 250, 0),
        Config("token-text-250-125", "token-text", 250, 125),
        Config("token-text-200-0", "token-text", 200, 0),
    )
}
DEFAULT_CONFIGS = (
    "kb-structure-120",
    "kb-structure-200",
    "kb-structure-250",
    "kb-fixed-250-125",
    "recursive-200-0",
    "token-text-250-125",
)
REFERENCE_CONFIG = "recursive-200-0"
QUICK_CORPUS = "state_of_the_union"
QUICK_CONFIG = "kb-structure-200"
# Configurations by the strategy names of kb_eval and the dashboard (--strategy).
STRATEGY_CONFIGS = {"default": "kb-structure-200", "sections": "kb-sections-120"}
BUDGET = 1200  # context tokens of the sections baseline (as kb_eval's default)

# The report's all-MiniLM-L6-v2 table (k = 5, mean ± sd, %): recall, precision,
# precision_Ω, IoU; "~n" is the mean chunk size in cl100k tokens. Its precision_Ω
# column does not reproduce (issue #8). `fmt: skip` keeps its columns of figures
# aligned, which the formatter would undo.
PUBLISHED = (
    ("Recursive 250/125 ~180", "78.7 ± 39.2", "4.9 ± 4.5", "21.9 ± 14.9", "4.9 ± 4.4"),
    ("TokenText 250/125",      "82.4 ± 36.2", "3.6 ± 3.1", "11.4 ± 6.6",  "3.5 ± 3.1"),
    ("Recursive 250/0 ~162",   "78.5 ± 39.5", "5.4 ± 4.9", "26.7 ± 18.3", "5.4 ± 4.9"),
    ("TokenText 250/0",        "77.1 ± 39.3", "3.3 ± 3.0", "16.4 ± 10.3", "3.3 ± 3.0"),
    ("Recursive 200/0 ~128",   "75.7 ± 40.7", "6.5 ± 6.2", "31.2 ± 18.4", "6.5 ± 6.1"),
    ("TokenText 200/0",        "76.6 ± 38.8", "4.1 ± 3.7", "19.1 ± 11.0", "4.1 ± 3.6"),
    ("Cluster 250/0 ~168",     "77.3 ± 38.6", "6.1 ± 5.1", "28.6 ± 16.7", "6.0 ± 5.1"),
    ("Cluster 200/0 ~102",     "75.2 ± 39.9", "7.2 ± 6.1", "33.6 ± 20.0", "7.2 ± 6.0"),
)  # fmt: skip


# --- data ---------------------------------------------------------------------


def load_benchmark(
    path: Path = DATA_DIR, corpora: Sequence[str] = CORPORA
) -> Benchmark:
    """The corpora and their questions; every excerpt is checked against its text."""
    questions_path = Path(path) / QUESTIONS_FILE
    if not questions_path.is_file():
        raise BenchmarkDataMissing(f"no {QUESTIONS_FILE} in {path}")
    texts = {
        name: (Path(path) / f"{name}.md").read_text(encoding="utf-8")
        for name in corpora
    }
    with questions_path.open(encoding="utf-8", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["corpus_id"] in texts]
    questions = [_question(row, texts[row["corpus_id"]]) for row in rows]
    return Benchmark(texts, questions)


def _question(row: dict[str, str], text: str) -> Question:
    references = []
    for ref in json.loads(row["references"]):
        start, end = int(ref["start_index"]), int(ref["end_index"])
        if text[start:end] != ref["content"]:
            raise ValueError(f"excerpt {start}:{end} of {row['corpus_id']} differs")
        references.append((start, end))
    return Question(row["question"], row["corpus_id"], tuple(references))


# --- chunks and vectors -------------------------------------------------------


@dataclass
class Chunked:
    chunks: list[splitters.BenchChunk]
    first: list[Located]  # the report's placement
    over_window: int
    unplaced: int  # not an exact substring: first keeps the true range


def chunk_all(config: Config, benchmark: Benchmark, embedder: Embedder) -> Chunked:
    chunks: list[splitters.BenchChunk] = []
    over = 0
    for corpus, text in benchmark.corpora.items():
        found, found_over = _split(config, corpus, text)
        chunks += found
        over += found_over
    if not config.kind.startswith("kb-"):
        over = sum(count > embedder.window for count in minilm_tokens(chunks, embedder))
    first, unplaced = [], 0
    for chunk in chunks:
        placed = splitters.first_occurrence(benchmark.corpora[chunk.corpus], chunk.text)
        unplaced += placed is None
        start, end = placed or (chunk.start, chunk.end)
        first.append(Located(chunk.corpus, start, end))
    return Chunked(chunks, first, over, unplaced)


def _split(
    config: Config, corpus: str, text: str
) -> tuple[list[splitters.BenchChunk], int]:
    """One corpus's chunks and, for ours, the count over the window."""
    if config.kind.startswith("kb-"):
        strategy = "structure" if config.kind == "kb-sections" else config.kind[3:]
        return splitters.kb_chunks(
            corpus, text, strategy, config.size, config.overlap, config.prefix
        )
    if config.kind == "recursive":
        return splitters.recursive_chunks(corpus, text, config.size, config.overlap), 0
    return splitters.token_text_chunks(corpus, text, config.size, config.overlap), 0


def minilm_tokens(chunks: list[splitters.BenchChunk], embedder: Embedder) -> list[int]:
    encodings = embedder.tokenizer.encode_batch([c.embedded for c in chunks])
    return [len(encoding.ids) for encoding in encodings]


def cached_vectors(
    texts: list[str], embedder: Embedder, truncate: bool, cache_dir: Path
) -> np.ndarray:
    """Vectors for `texts`, reused from disk when the same texts were embedded."""
    digest = hashlib.sha256()
    for part in (embedder.model_name, embedder.precision, str(truncate), *texts):
        digest.update(part.encode("utf-8") + b"\0")
    path = cache_dir / f"{digest.hexdigest()[:32]}.npy"
    if path.is_file():
        return np.load(path)
    vectors = embedder.embed_truncating(texts) if truncate else embedder.embed(texts)
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp.npy")
    np.save(partial, vectors)
    partial.replace(path)
    return vectors


def nearest(queries: np.ndarray, vectors: np.ndarray, k: int = K) -> np.ndarray:
    """Indices of the k most similar vectors per query, best first (exact)."""
    similarity = queries @ vectors.T
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


# --- scoring ------------------------------------------------------------------


def score(
    benchmark: Benchmark, placed: list[Located], top: np.ndarray
) -> dict[str, list[float]]:
    """Per-question recall, precision, precision_Ω and IoU for one placement."""
    return score_retrieved(
        benchmark, placed, [[placed[index] for index in picks] for picks in top]
    )


def score_retrieved(
    benchmark: Benchmark, placed: list[Located], found: list[list[Located]]
) -> dict[str, list[float]]:
    """Per-question scores of the ranges `found` for each question."""
    by_corpus: dict[str, list[Range]] = {}
    for chunk in placed:
        by_corpus.setdefault(chunk.corpus, []).append((chunk.start, chunk.end))
    result: dict[str, list[float]] = {name: [] for name in METRICS}
    for question, retrieved in zip(benchmark.questions, found):
        scores = metrics.retrieval_scores(
            question.corpus, question.references, retrieved
        )
        result["recall"].append(scores.recall)
        result["precision"].append(scores.precision)
        result["iou"].append(scores.iou)
        result["omega"].append(
            metrics.precision_omega(question.references, by_corpus[question.corpus])
        )
    return result


@dataclass
class ConfigResult:
    config: Config
    chunks: int
    mean_minilm: float
    mean_cl100k: float
    over_window: int
    moved: int  # chunks whose text first occurs before their true place
    unplaced: int
    seconds: float
    scores: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def summary(self, offsets: str, metric: str) -> tuple[float, float]:
        return metrics.summary(self.scores[offsets][metric])


def run_config(
    config: Config,
    benchmark: Benchmark,
    queries: np.ndarray,
    embedder: Embedder,
    cache_dir: Path,
) -> ConfigResult:
    started = time.perf_counter()
    chunked = chunk_all(config, benchmark, embedder)
    chunks = chunked.chunks
    vectors = cached_vectors(
        [c.embedded for c in chunks], embedder, config.truncates, cache_dir
    )
    true = [Located(c.corpus, c.start, c.end) for c in chunks]
    if config.kind == "kb-sections":
        found = sections_found(benchmark, chunks, nearest(queries, vectors, 20))
        scores = {
            "true": score_retrieved(benchmark, true, found),
            "first": score_retrieved(benchmark, chunked.first, found),
        }
    else:
        top = nearest(queries, vectors)
        scores = {
            "true": score(benchmark, true, top),
            "first": score(benchmark, chunked.first, top),
        }
    encoding = splitters.cl100k()
    return ConfigResult(
        config=config,
        chunks=len(chunks),
        mean_minilm=statistics.mean(minilm_tokens(chunks, embedder)),
        mean_cl100k=statistics.mean(
            len(ids) for ids in encoding.encode_ordinary_batch([c.text for c in chunks])
        ),
        over_window=chunked.over_window,
        moved=sum(a.start != b.start for a, b in zip(true, chunked.first)),
        unplaced=chunked.unplaced,
        seconds=time.perf_counter() - started,
        scores=scores,
    )


def sections_found(
    benchmark: Benchmark, chunks: list[splitters.BenchChunk], top: np.ndarray
) -> list[list[Located]]:
    """The sections baseline per question: its top chunks grouped by section (a
    section ranks by its best chunk), the best SECTIONS_K sections whole, the one
    that does not fit cut to BUDGET tokens (retrieval.sections_baseline)."""
    from kb import retrieval

    found = []
    for picks in top:
        sections: dict[tuple[str, int, int], None] = {}
        for index in picks:
            chunk = chunks[index]
            section = chunk.section or (chunk.start, chunk.end)
            sections.setdefault((chunk.corpus, *section), None)
        ranges, remaining = [], BUDGET
        for corpus, start, end in list(sections)[: retrieval.SECTIONS_K]:
            text = benchmark.corpora[corpus][start:end]
            cut = retrieval.cut_to_tokens(text, remaining) if remaining > 0 else ""
            if cut.strip():
                remaining -= retrieval.context_tokens(cut)
                ranges.append(Located(corpus, start, start + len(cut)))
        found.append(ranges)
    return found


@dataclass
class Report:
    results: list[ConfigResult]
    question_corpora: list[str]  # each question's corpus, in question order
    corpora: list[str]
    precision: str
    window: int
    reference: str | None
    seconds: float = 0.0

    @property
    def questions(self) -> int:
        return len(self.question_corpora)

    def result(self, name: str) -> ConfigResult | None:
        return next((r for r in self.results if r.config.name == name), None)

    def paired(self, metric: str) -> dict[str, PairedDifference]:
        """Each configuration minus the reference, true offsets, same questions."""
        reference = self.result(self.reference) if self.reference else None
        if reference is None:
            return {}
        base = reference.scores["true"][metric]
        return {
            r.config.name: metrics.paired_bootstrap(r.scores["true"][metric], base)
            for r in self.results
            if r is not reference
        }


def run(
    names: Sequence[str],
    *,
    data_dir: Path = DATA_DIR,
    corpora: Sequence[str] = CORPORA,
    precision: str = "fp32",
    progress: Callable[[str], None] = logger.info,
) -> Report:
    """Run the configurations `names` on the benchmark and collect the scores."""
    started = time.perf_counter()
    benchmark = load_benchmark(data_dir, corpora)
    embedder = get_embedder(precision=precision)
    cache_dir = Path(settings.KB_DATA_DIR) / "bench" / "embeddings"
    queries = cached_vectors(
        [q.text for q in benchmark.questions], embedder, False, cache_dir
    )
    progress(
        f"{len(benchmark.questions)} questions over {len(benchmark.corpora)} corpora"
    )
    results = []
    for name in names:
        result = run_config(CONFIGS[name], benchmark, queries, embedder, cache_dir)
        progress(
            f"{name}: {result.chunks} chunks, recall "
            f"{100 * result.summary('true', 'recall')[0]:.1f}, "
            f"{result.seconds:.0f} s"
        )
        results.append(result)
    reference = REFERENCE_CONFIG if REFERENCE_CONFIG in names else None
    return Report(
        results=results,
        question_corpora=[q.corpus for q in benchmark.questions],
        corpora=list(benchmark.corpora),
        precision=precision,
        window=embedder.window,
        reference=reference,
        seconds=time.perf_counter() - started,
    )


# --- output -------------------------------------------------------------------


def _pct(pair: tuple[float, float]) -> str:
    return f"{100 * pair[0]:.1f} ± {100 * pair[1]:.1f}"


def markdown(report: Report) -> str:
    """The results table, the published rows and the paired comparison."""
    lines = [
        f"k = {K}, {report.questions} questions, corpora: {', '.join(report.corpora)}; "
        f"all-MiniLM-L6-v2 {report.precision}, exact cosine search; "
        "mean ± population sd in %, true offsets unless marked.",
        "",
        "| configuration | chunks | MiniLM tok | cl100k tok | over "
        f"{report.window} | recall | precision | precision_Ω | IoU | "
        "recall (first occ.) | IoU (first occ.) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.results:
        over = f"{r.over_window} ({100 * r.over_window / r.chunks:.0f} %)"
        cells = [
            r.config.label,
            str(r.chunks),
            f"{r.mean_minilm:.0f}",
            f"{r.mean_cl100k:.0f}",
            over,
            *(_pct(r.summary("true", m)) for m in METRICS),
            _pct(r.summary("first", "recall")),
            _pct(r.summary("first", "iou")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    for label, *published in PUBLISHED:
        cells = [f"published: {label}", "", "", "", "", *published, "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *_paired_lines(report), *_corpus_lines(report)]
    return "\n".join(lines) + "\n"


def _paired_lines(report: Report) -> list[str]:
    recall, iou = report.paired("recall"), report.paired("iou")
    if not recall:
        return []
    reference = CONFIGS[report.reference].label
    lines = [
        f"Paired difference from {reference} (true offsets, same {report.questions} "
        "questions; percentage points, 95 % bootstrap interval):",
        "",
        "| configuration | Δ recall | | Δ IoU | |",
        "|---|---:|---|---:|---|",
    ]
    for name, diff in recall.items():
        cells = [CONFIGS[name].label, *_diff(diff), *_diff(iou[name])]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _diff(diff: PairedDifference) -> list[str]:
    interval = f"{100 * diff.mean:+.1f} [{100 * diff.low:+.1f}, {100 * diff.high:+.1f}]"
    if diff.within_noise:
        return [interval, "within noise"]
    return [interval, "better" if diff.mean > 0 else "worse"]


def _corpus_lines(report: Report) -> list[str]:
    """Recall by corpus (true offsets): where a configuration wins or loses."""
    if len(report.corpora) < 2:
        return []
    lines = [
        "Recall by corpus (true offsets, mean %):",
        "",
        "| configuration | " + " | ".join(report.corpora) + " |",
        "|---|" + "---:|" * len(report.corpora),
    ]
    for r in report.results:
        cells = [r.config.label]
        for corpus in report.corpora:
            values = [
                value
                for value, owner in zip(
                    r.scores["true"]["recall"], report.question_corpora
                )
                if owner == corpus
            ]
            cells.append(f"{100 * statistics.mean(values):.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def as_json(report: Report) -> dict[str, Any]:
    """Everything, per-question scores included, for later comparison."""
    return {
        "k": K,
        "questions": report.questions,
        "corpora": report.corpora,
        "precision": report.precision,
        "seconds": report.seconds,
        "reference": report.reference,
        "configs": [
            {
                "name": r.config.name,
                "label": r.config.label,
                "chunks": r.chunks,
                "mean_minilm_tokens": r.mean_minilm,
                "mean_cl100k_tokens": r.mean_cl100k,
                "over_window": r.over_window,
                "moved_by_first_occurrence": r.moved,
                "unplaced": r.unplaced,
                "seconds": r.seconds,
                "summary": {
                    offsets: {m: r.summary(offsets, m) for m in METRICS}
                    for offsets in OFFSETS
                },
                "per_question": r.scores,
            }
            for r in report.results
        ],
        "paired": {
            metric: {
                name: asdict(diff) | {"within_noise": diff.within_noise}
                for name, diff in report.paired(metric).items()
            }
            for metric in ("recall", "iou")
        },
    }
