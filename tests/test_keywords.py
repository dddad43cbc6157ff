"""Keyword search and its per-collection word counts (real database and embedder)."""

from __future__ import annotations

from django.test import TestCase

from kb import ingestion, retrieval
from kb.models import Chunk, Collection
from kb.retrieval import keywords

# Twelve notes that all mention the job queue; one mentions the zebra migration.
NOTES = {
    f"note-{i:02d}.md": f"# Note {i}\n\nThe job queue handled batch {i} calmly.\n"
    for i in range(12)
}
NOTES["zebra.md"] = "# Zebra\n\nThe job queue paused for the zebra migration.\n"


def _indexed(name: str, files: dict[str, str]) -> Collection:
    """A collection of these files (name: Markdown text), indexed in this process."""
    collection = Collection.objects.create(name=name)
    for file_name, text in files.items():
        source, _ = ingestion.store_source(collection, file_name, text.encode())
        ingestion.ingest(source.pk)
    return collection


class KeywordSearchTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = _indexed("Notes", NOTES)

    def _files(self, ids: list[int]) -> set[str]:
        return set(
            Chunk.objects.filter(pk__in=ids).values_list("source__file_name", flat=True)
        )

    def test_it_counts_the_chunks_holding_each_word(self):
        total = keywords.count_terms(self.collection)
        self.assertEqual(total, len(NOTES))
        counts = dict(self.collection.terms.values_list("lexeme", "chunks"))
        self.assertEqual(counts["queue"], len(NOTES))
        self.assertEqual(counts["zebra"], 1)
        self.collection.refresh_from_db()
        self.assertIsNotNone(self.collection.terms_counted)

    def test_chunks_with_all_the_words_come_first(self):
        ids = keywords.search(self.collection, "zebra queue", 80)
        self.assertEqual(self._files(ids[:1]), {"zebra.md"})

    def test_without_counts_any_word_brings_matches(self):
        # "unicorn" is nowhere, so no chunk holds all words: any word counts.
        ids = keywords.search(self.collection, "job unicorn", 80)
        self.assertEqual(len(ids), len(NOTES))

    def test_common_words_are_left_out_when_they_would_match_too_many(self):
        keywords.count_terms(self.collection)  # updates this instance too
        question = "zebra job unicorn"  # no chunk holds all three
        ids = keywords.search(self.collection, question, 80, max_any_rows=5)
        self.assertEqual(self._files(ids), {"zebra.md"})
        # With room for them, the common words bring every note.
        ids = keywords.search(self.collection, question, 80)
        self.assertEqual(len(ids), len(NOTES))

    def test_hybrid_retrieval_uses_the_counts(self):
        keywords.count_terms(self.collection)
        self.collection.refresh_from_db()
        question = "zebra job unicorn"
        result = retrieval.retrieve(self.collection, question, mode="keyword")
        self.assertEqual(result.passages[0].file_name, "zebra.md")


# A note that repeats the question's common words, one that holds its rare word
# once, and ten more that make the common words common.
WORDY = {
    f"routine-{i:02d}.md": f"# Routine {i}\n\nRestart the worker queue for batch {i}.\n"
    for i in range(10)
}
WORDY["wordy.md"] = (
    "# Operations\n\nRestart the worker queue. The worker queue must restart; "
    "restart the worker, restart the queue, the worker queue restarts again.\n"
)
WORDY["rare.md"] = "# Embryos\n\nA zygote forms when two cells fuse.\n"


class KeywordRankingTestCase(TestCase):
    """BM25 weighs a question's rare word above its common ones (issue #17)."""

    @classmethod
    def setUpTestData(cls):
        cls.collection = _indexed("Wordy", WORDY)
        keywords.count_terms(cls.collection)

    def _first(self, question: str) -> str:
        ids = keywords.search(self.collection, question, 80)
        return Chunk.objects.get(pk=ids[0]).source.file_name

    def test_bm25_ranks_the_rare_word_above_repeated_common_ones(self):
        # No note holds every word, so any word brings matches.
        question = "restart the worker queue after a zygote"
        with self.settings(KB_KEYWORD_RANKING="ts_rank"):
            self.assertEqual(self._first(question), "wordy.md")
        with self.settings(KB_KEYWORD_RANKING="bm25"):
            self.assertEqual(self._first(question), "rare.md")

    def test_bm25_still_prefers_more_of_a_word_among_equals(self):
        with self.settings(KB_KEYWORD_RANKING="bm25"):
            self.assertEqual(self._first("worker queue restart"), "wordy.md")
