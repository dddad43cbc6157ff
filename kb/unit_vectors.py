"""The vectors of a chunk's answerable units, stored beside the chunk.

When a chunk is embedded, each of its units (kb.sentences.units: sentences,
list items, table rows, code blocks) gets the mean of the hidden states of its
own tokens, read in the same pass and so in the chunk's context
(Embedder.embed_passages_with_parts). The answerer scores a candidate sentence
by its cosine to the question (issue #28): a dot product at question time
instead of embedding the candidates then.

A chunk stores its units' source offsets (start, end pairs, flattened) and
their vectors as int8, one row per unit: each row scaled by 127 over its own
largest component. Only the direction matters for a cosine, so rows are
normalised again when read. No ORM here.
"""

from __future__ import annotations

import numpy as np

SCALE = 127


def pack(bounds: list[tuple[int, int]], vectors: np.ndarray) -> tuple[list[int], bytes]:
    """(flattened offsets, int8 bytes) of the units whose vector is not zero."""
    flat: list[int] = []
    rows = []
    for (start, end), vector in zip(bounds, vectors, strict=True):
        top = float(np.abs(vector).max()) if len(vector) else 0.0
        if top <= 0.0:
            continue
        flat += [start, end]
        rows.append(np.round(vector / top * SCALE))
    if not rows:
        return [], b""
    return flat, np.asarray(rows, dtype=np.int8).tobytes()


def unpack(flat: list[int], data: bytes) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The units' (start, end) and their L2-normalised float32 vectors, one row
    each; none when the bytes do not split into that many rows."""
    bounds = list(zip(flat[::2], flat[1::2], strict=True))
    if not bounds or not data or len(data) % len(bounds):
        return [], np.zeros((0, 0), dtype=np.float32)
    rows = np.frombuffer(data, dtype=np.int8).reshape(len(bounds), -1)
    rows = rows.astype(np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return bounds, rows / np.clip(norms, 1e-12, None)


def by_section(
    rows: list[tuple[int, list[int], bytes]],
) -> dict[int, tuple[list[tuple[int, int]], np.ndarray]]:
    """(section id, offsets, bytes) of chunks -> each section's units, as an
    array of (start, end) rows, and their vectors in one matrix (rows of
    another size than the first are left out)."""
    found: dict[int, tuple[list[tuple[int, int]], list[np.ndarray]]] = {}
    for section_id, flat, data in rows:
        bounds, vectors = unpack(flat or [], bytes(data or b""))
        if not bounds:
            continue
        have = found.setdefault(section_id, ([], []))
        if have[1] and have[1][0].shape[1] != vectors.shape[1]:
            continue
        have[0].extend(bounds)
        have[1].append(vectors)
    return {k: (np.asarray(b), np.vstack(v)) for k, (b, v) in found.items()}


def covering(
    start: int, end: int, bounds: list[tuple[int, int]], vectors: np.ndarray
) -> np.ndarray | None:
    """The vector of [start, end): the mean of the units overlapping it,
    weighted by how much of it each covers, normalised; None when no stored
    unit overlaps it."""
    edges = np.asarray(bounds, dtype=np.int64).reshape(-1, 2)
    weights = np.minimum(end, edges[:, 1]) - np.maximum(start, edges[:, 0])
    weights = np.clip(weights, 0, None).astype(np.float32)
    if not len(weights) or weights.sum() <= 0:
        return None
    mean = weights @ vectors
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else None
