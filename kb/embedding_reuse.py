"""Vectors kept by content (issue #30): a chunk whose embedded text, units,
model and precision are those of a chunk already stored takes that chunk's
vector and unit vectors instead of running the model again. Editing one
paragraph of a long file re-embeds the chunks that changed; an upload of the
same text elsewhere, a re-index and a shadow build with the same model embed
nothing twice.

The key (Chunk.embedding_key) is a SHA-256 of everything the vectors are a
function of: the model's name and precision, whether over-long texts are cut
(the fixed baseline), the embedded text, and where each unit is read in it and
lies in the chunk. A unit's vector depends only on those, so the stored rows
are the ones the model would give; only their offsets in the source move with
the chunk, and are shifted. Chunks stored before keys existed have none and
are embedded again once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from django.conf import settings

from kb.models import Chunk


@dataclass(frozen=True)
class Stored:
    """A stored chunk's vectors, where its units were in its source."""

    vector: np.ndarray
    start: int  # the chunk's start in its source
    unit_offsets: list[int]  # flattened (start, end) pairs, as stored
    unit_vectors: bytes


def key(
    model: str,
    precision: str,
    truncate: bool,
    embedded_text: str,
    parts: list[tuple[int, int]],
    units: list[tuple[int, int]],
) -> str:
    """The key of a chunk's vectors. `parts`: where each unit is read in the
    embedded text; `units`: each unit's (start, end) relative to the chunk's
    start in its source."""
    digest = hashlib.sha256()
    head = f"{model}\0{precision}\0{int(truncate)}\0{len(embedded_text)}\0"
    digest.update(head.encode())
    digest.update(embedded_text.encode("utf-8", "surrogatepass"))
    digest.update(repr((parts, units)).encode())
    return digest.hexdigest()


def enabled() -> bool:
    """KB_EMBEDDING_REUSE: on unless the deployment turns it off."""
    return settings.KB_EMBEDDING_REUSE


LOOKUP_BATCH = 1000  # keys per query


def stored(keys: list[str]) -> dict[str, Stored]:
    """The stored vectors of each key some chunk with a vector has."""
    found: dict[str, Stored] = {}
    wanted = sorted(set(keys))
    for at in range(0, len(wanted), LOOKUP_BATCH):
        rows = (
            Chunk.objects.filter(
                embedding_key__in=wanted[at : at + LOOKUP_BATCH],
                embedding__isnull=False,
            )
            .order_by("embedding_key", "-id")
            .distinct("embedding_key")
            .values_list(
                "embedding_key", "embedding", "start", "unit_offsets", "unit_vectors"
            )
        )
        for name, vector, start, offsets, units in rows:
            found[name] = Stored(
                np.asarray(vector, dtype=np.float32),
                start,
                list(offsets or []),
                bytes(units or b""),
            )
    return found


def units_at(found: Stored, start: int) -> tuple[list[int], bytes]:
    """The stored unit offsets moved to a chunk that starts at `start`, and the
    unit vectors (kb.unit_vectors.pack's pair)."""
    shift = start - found.start
    return [offset + shift for offset in found.unit_offsets], found.unit_vectors
