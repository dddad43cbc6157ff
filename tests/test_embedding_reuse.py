"""Embeddings reused by content (issue #30 item 3): editing one paragraph of a
long file embeds the chunks that changed, and what is reused is exactly what
the model would have given (real database and embedder)."""

from __future__ import annotations

import numpy as np
from django.test import TestCase, override_settings

from kb import charts, embedding_reuse, ingestion
from kb.models import Chunk, Collection, Source
from tests.base import ingest_text

TOPICS = [
    "backups",
    "retention",
    "replication",
    "failover",
    "monitoring",
    "alerts",
    "upgrades",
    "certificates",
    "quotas",
    "auditing",
    "networking",
    "storage",
]


def handbook(edited: str = "") -> str:
    """An operations handbook written for this test: a section per topic, each
    a paragraph and a list; `edited` names the topic whose paragraph changes."""
    parts = ["# Operations handbook\n"]
    for n, topic in enumerate(TOPICS):
        said = (
            f"The {topic} rota changed in March; ask the platform team first."
            if topic == edited
            else f"Each team reviews its {topic} settings once a quarter."
        )
        parts.append(
            f"## {topic.capitalize()}\n\n{said} The on-call engineer owns "
            f"{topic} incidents out of hours, and writes down every change made "
            f"to {topic} in the change log within a day.\n\n"
            f"- Check the {topic} dashboard every morning.\n"
            f"- Page the owner after {n + 2} failed {topic} checks.\n"
        )
    return "\n".join(parts)


def chunk_rows(source: Source) -> list[tuple]:
    return [
        (
            c.embedded_text,
            c.start,
            c.end,
            list(c.unit_offsets or []),
            bytes(c.unit_vectors or b""),
            np.asarray(c.embedding),
        )
        for c in Chunk.objects.filter(source=source).order_by("chunk_index")
    ]


class EmbeddingReuseTestCase(TestCase):
    def test_an_edited_paragraph_embeds_only_its_chunks(self):
        collection = Collection.objects.create(name="Handbook")
        source = ingest_text(collection, "handbook.md", handbook())
        total = source.stats["chunks"]
        self.assertGreaterEqual(total, len(TOPICS))
        self.assertEqual(source.stats["chunks_reused"], 0)
        self.assertEqual(source.stats["chunks_embedded"], total)

        source = ingest_text(collection, "handbook.md", handbook(edited="quotas"))
        self.assertEqual(source.version, 2)
        changed = source.stats["chunks_embedded"]
        self.assertGreaterEqual(changed, 1)
        self.assertLessEqual(changed, 2)  # the paragraph's chunk, maybe its list's
        self.assertEqual(
            source.stats["chunks_reused"], source.stats["chunks"] - changed
        )
        self.assertEqual(source.progress["chunks_embedded"], source.stats["chunks"])

        # Reused or not, the chunks are those a fresh index of the edited text
        # has: the same vectors, and the units where the new text has them.
        with override_settings(KB_EMBEDDING_REUSE=False):
            fresh = ingest_text(
                Collection.objects.create(name="Fresh"),
                "handbook.md",
                handbook(edited="quotas"),
            )
        self.assertEqual(fresh.stats["chunks_reused"], 0)
        got, expected = chunk_rows(source), chunk_rows(fresh)
        self.assertEqual(len(got), len(expected))
        for mine, theirs in zip(got, expected, strict=True):
            self.assertEqual(mine[:5], theirs[:5])
            np.testing.assert_allclose(mine[5], theirs[5], atol=1e-6)

    def test_the_same_text_elsewhere_is_not_embedded_again(self):
        first = ingest_text(
            Collection.objects.create(name="One"), "handbook.md", handbook()
        )
        again = ingest_text(Collection.objects.create(name="Two"), "ops.md", handbook())
        self.assertEqual(again.stats["chunks_embedded"], 0)
        self.assertEqual(again.stats["chunks_reused"], first.stats["chunks"])

    def test_another_chunking_or_model_is_embedded(self):
        first = Collection.objects.create(name="Baseline", chunk_strategy="fixed")
        ingest_text(first, "handbook.md", handbook())
        structured = ingest_text(
            Collection.objects.create(name="Structured"), "handbook.md", handbook()
        )
        # Other chunks (other texts, other units): nothing to reuse.
        self.assertEqual(structured.stats["chunks_reused"], 0)
        key = embedding_reuse.key
        minilm, e5 = "all-minilm-l6-v2", "multilingual-e5-small"
        keys = {
            key(minilm, "fp32", False, "text", [(0, 4)], [(0, 4)]),
            key(minilm, "int8", False, "text", [(0, 4)], [(0, 4)]),
            key(e5, "fp32", False, "text", [(0, 4)], [(0, 4)]),
            key(minilm, "fp32", True, "text", [(0, 4)], [(0, 4)]),
            key(minilm, "fp32", False, "text", [(0, 3)], [(0, 4)]),
            key(minilm, "fp32", False, "text", [(0, 4)], [(1, 5)]),
        }
        self.assertEqual(len(keys), 6)

    def test_a_re_index_embeds_nothing(self):
        collection = Collection.objects.create(name="Handbook")
        source = ingest_text(collection, "handbook.md", handbook())
        before = chunk_rows(source)
        ingestion.ingest(source.pk)  # "Re-index" in the admin
        source.refresh_from_db()
        self.assertEqual(source.stats["chunks_embedded"], 0)
        self.assertEqual(source.stats["chunks_reused"], len(before))
        # The source's page in the admin says so.
        shown = charts.source_statistics(source.stats)
        self.assertIn("Chunks embedded / taking stored vectors", shown)
        self.assertIn(f"0 / {len(before)}", shown)
        after = chunk_rows(source)
        self.assertEqual([r[:5] for r in after], [r[:5] for r in before])
