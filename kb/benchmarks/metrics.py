"""Character-level retrieval scores of the Chroma chunking evaluation (issue #8).

Pure functions on (start, end) ranges, end-exclusive, as the original code
computes them (chunking_evaluation's base_evaluation.py):

- recall      = |E ∩ ∪R| / |E|
- precision   = |E ∩ ∪R| / Σ|r|, every retrieved chunk counted in full, even
                when chunks overlap or come from another corpus;
- IoU         = |E ∩ ∪R| / (Σ|r| + |E \\ ∪R|);
- precision_Ω = the same ratio over every chunk of the question's corpus that
                touches an excerpt (sharing only an end point counts), with
                those chunks merged before counting.

E is the union of the question's excerpts (which never overlap) and R the
retrieved chunks of the question's own corpus; a chunk of another corpus adds
to Σ|r| and to nothing else. The reported figure is the mean over questions
with the population standard deviation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

Range = tuple[int, int]
BOOTSTRAP_SAMPLES = 10_000


@dataclass(frozen=True)
class Located:
    """A chunk's evidence range in one corpus."""

    corpus: str
    start: int
    end: int


@dataclass(frozen=True)
class Scores:
    recall: float
    precision: float
    iou: float


def union(ranges: Iterable[Range]) -> list[Range]:
    """Sorted, merged ranges; touching ranges merge too."""
    merged: list[Range] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def measure(ranges: Iterable[Range]) -> int:
    """Characters covered by the ranges, each counted once."""
    return sum(end - start for start, end in union(ranges))


def covered(references: Sequence[Range], chunks: Iterable[Range]) -> int:
    """|E ∩ ∪chunks| for disjoint references E."""
    merged = union(chunks)
    return sum(
        max(0, min(end, c_end) - max(start, c_start))
        for start, end in references
        for c_start, c_end in merged
    )


def touches(chunk: Range, reference: Range) -> bool:
    """The original's test: an empty intersection at a shared end point counts."""
    return max(chunk[0], reference[0]) <= min(chunk[1], reference[1])


def retrieval_scores(
    corpus: str, references: Sequence[Range], retrieved: Sequence[Located]
) -> Scores:
    """Recall, precision and IoU of one question's retrieved chunks."""
    own = [(c.start, c.end) for c in retrieved if c.corpus == corpus]
    hit = covered(references, own)
    total = measure(references)
    retrieved_chars = sum(c.end - c.start for c in retrieved)
    missed = total - hit
    return Scores(
        recall=hit / total if total else 0.0,
        precision=hit / retrieved_chars if retrieved_chars else 0.0,
        iou=hit / (retrieved_chars + missed) if retrieved_chars + missed else 0.0,
    )


def precision_omega(references: Sequence[Range], chunks: Iterable[Range]) -> float:
    """Best precision the chunking allows: every chunk touching an excerpt.

    `chunks` are the ranges of the question's own corpus.
    """
    touching = [c for c in chunks if any(touches(c, ref) for ref in references)]
    hit = covered(references, touching)
    if not hit:
        return 0.0
    return hit / (measure(touching) + measure(references) - hit)


def summary(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation, as the original reports them."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std())


@dataclass(frozen=True)
class PairedDifference:
    mean: float
    low: float
    high: float

    @property
    def within_noise(self) -> bool:
        """The 95 % interval of the mean difference includes 0."""
        return self.low <= 0.0 <= self.high


def paired_bootstrap(
    values: Sequence[float],
    reference: Sequence[float],
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> PairedDifference:
    """Mean of values - reference with a percentile 95 % bootstrap interval.

    Questions are resampled as pairs, so both configurations always see the
    same questions.
    """
    diffs = np.asarray(values, dtype=np.float64) - np.asarray(
        reference, dtype=np.float64
    )
    if diffs.size == 0:
        raise ValueError("no paired values")
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    # In blocks, to bound memory at samples x questions indices.
    for first in range(0, samples, 1000):
        count = min(1000, samples - first)
        picks = rng.integers(0, diffs.size, size=(count, diffs.size))
        means[first : first + count] = diffs[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return PairedDifference(float(diffs.mean()), float(low), float(high))
