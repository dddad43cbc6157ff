"""A table row is judged on its own in the fusion: its section term uses the
row's own vector rank when that is better than its table's (issue #29)."""

from __future__ import annotations

from django.conf import settings
from django.test import TestCase

from kb.chunking import ChunkKind
from kb.models import Chunk
from kb.retrieval import search
from tests.base import collection_of

ROWS = "\n".join(f"| -{chr(97 + i)} | does thing number {i} |" for i in range(20))
MANUAL = f"""# Manual

## Options

| Option | Description |
|---|---|
{ROWS}

## Files

The configuration is read from the home folder at start.
"""


class RowSectionTermTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("Manual", {"manual.md": MANUAL})
        chunks = Chunk.objects.filter(source__collection=cls.collection)
        cls.row = chunks.filter(kind=ChunkKind.TABLE_ROW).first()
        cls.prose = chunks.exclude(kind=ChunkKind.TABLE_ROW).last()

    def test_a_row_takes_its_own_rank_when_its_table_ranks_low(self):
        """The mean of 20 rows says little of one: the row found first by the
        vector leg counts as its own section, not as its table at rank 50."""
        k, weight = search.RRF_K, settings.KB_SECTION_WEIGHT
        hits = search.fuse(
            [self.row.id, self.prose.id],
            [],
            {self.row.section_id: 50, self.prose.section_id: 50},
        )
        by_id = {h.chunk_id: h for h in hits}
        self.assertAlmostEqual(by_id[self.row.id].score, 1 / (k + 1) + weight / (k + 1))
        # Other chunks keep their section's rank.
        self.assertAlmostEqual(
            by_id[self.prose.id].score, 1 / (k + 2) + weight / (k + 50)
        )

    def test_a_row_keeps_its_table_s_rank_when_that_is_better(self):
        k, weight = search.RRF_K, settings.KB_SECTION_WEIGHT
        hits = search.fuse([self.prose.id, self.row.id], [], {self.row.section_id: 1})
        row = next(h for h in hits if h.chunk_id == self.row.id)
        self.assertAlmostEqual(row.score, 1 / (k + 2) + weight / (k + 1))
