"""Keyword search and its per-collection word counts (real database and embedder)."""

from __future__ import annotations

from django.db import connection
from django.test import TestCase, override_settings
from django.test.utils import CaptureQueriesContext

from kb import ingestion, retrieval, uploads
from kb.models import Chunk, Collection, Section, Source
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
        source, _ = uploads.store_source(collection, file_name, text.encode())
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


LARGE = 2_000  # chunks of the large collection, every one holding the question's words


def _scans(plan: dict) -> list[dict]:
    """The plan's nodes that read kb_chunk rows, its indexes included."""
    found = [plan] if "Scan" in plan["Node Type"] else []
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


class KeywordCostTestCase(TestCase):
    """A small collection's keyword search reads its own matches only, however
    many the other collections hold (issue #26: 2.9 ms alone, 51 ms beside two
    collections of 20,160 chunks, as the index gave every collection's matches)."""

    @classmethod
    def setUpTestData(cls):
        cls.small = _indexed("Notes", NOTES)
        large = Collection.objects.create(name="Large")
        source = Source.objects.create(
            collection=large, title="Large", file_name="large.md", content_hash="-"
        )
        section = Section.objects.create(source=source, order=0, start=0, end=1)
        Chunk.objects.bulk_create(
            (
                Chunk(
                    source=source,
                    section=section,
                    chunk_index=i,
                    start=i,
                    end=i + 1,
                    text="x",
                    embedded_text=f"The job queue handled zebra batch {i}.",
                    token_count=10,
                )
                for i in range(LARGE)
            ),
            batch_size=1_000,
        )
        for collection in (cls.small, large):
            keywords.count_terms(collection)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE kb_source, kb_chunk")

    def _rows_read(self, question: str) -> list[int]:
        """Rows each scan of kb_chunk read (kept or filtered out), over every
        query the keyword search ran for the small collection."""
        with CaptureQueriesContext(connection) as queries:
            ids = keywords.search(self.small, question, 80)
        self.assertTrue(ids)
        read = []
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'kb_chunk'"
            )
            chunk_indexes = {row[0] for row in cursor.fetchall()}
            for query in queries.captured_queries:
                if "kb_chunk" not in query["sql"]:
                    continue
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query["sql"])
                plan = cursor.fetchone()[0][0]["Plan"]
                read += [
                    node["Actual Rows"] * node["Actual Loops"]
                    + node.get("Rows Removed by Filter", 0)
                    + node.get("Rows Removed by Index Recheck", 0)
                    for node in _scans(plan)
                    if node.get("Relation Name") == "kb_chunk"
                    or node.get("Index Name") in chunk_indexes
                ]
        self.assertTrue(read)
        return read

    def test_it_reads_only_the_asked_collections_matches(self):
        small = Chunk.objects.filter(source__collection=self.small).count()
        for ranking in keywords.RANKINGS:
            with (
                self.subTest(ranking=ranking),
                override_settings(KB_KEYWORD_RANKING=ranking),
            ):
                # All words, then (one chunk holds them all) any word. The index
                # also hands out rows other tests wrote and rolled back: twice the
                # small collection's chunks, against the large one's 2,000.
                self.assertLessEqual(max(self._rows_read("zebra job queue")), 2 * small)

    def test_each_chunk_carries_its_sources_collection(self):
        other = Collection.objects.create(name="Other")
        moved = self.small.sources.first()
        moved.collection = other
        moved.save()  # an editor moves the source: its chunks go with it
        chunks = Chunk.objects.filter(source=moved)
        self.assertEqual(set(chunks.values_list("collection", flat=True)), {other.pk})
        chunk = chunks.first()
        chunk.source = self.small.sources.exclude(pk=moved.pk).first()
        chunk.save()  # moved onto another source, as a shadow swap does
        chunk.refresh_from_db()
        self.assertEqual(chunk.collection_id, self.small.pk)

    def test_each_section_carries_its_sources_collection(self):
        # The nearest-sections search tests it (retrieval.search, issue #27).
        other = Collection.objects.create(name="Other")
        moved = self.small.sources.first()
        sections = Section.objects.filter(source=moved)
        self.assertEqual(
            set(sections.values_list("collection", flat=True)), {self.small.pk}
        )
        moved.collection = other
        moved.save()
        self.assertEqual(set(sections.values_list("collection", flat=True)), {other.pk})
        section = sections.first()
        section.source = self.small.sources.exclude(pk=moved.pk).first()
        section.save()  # moved onto another source, as a shadow swap does
        section.refresh_from_db()
        self.assertEqual(section.collection_id, self.small.pk)


OPTION_ROWS = [
    ("-a file", "attach a file to the message"),
    ("-b address", "send a blind copy to the address"),
    ("-c address", "send a carbon copy to the address"),
    ("-d level", "log debugging output at this level"),
    ("-e command", "run a configuration command after the start-up files"),
    ("-f folder", "open this folder instead of the inbox"),
    ("-h", "print a short help text"),
    ("-i file", "include a file in the body of the message"),
    ("-m type", "use this folder type for new folders"),
    ("-n", "skip the system-wide configuration file"),
    ("-p", "continue a postponed message"),
    ("-R", "open the folder read-only"),
    ("-s subject", "give the subject on the command line"),
    ("-v", "print the version and the build options"),
    ("-x", "simulate the mailx compose mode"),
    ("-y", "list the folders named in the configuration"),
    ("-Z", "open the first folder holding new messages"),
]
COMPOSING = {
    "composing.md": "# Composing messages\n\nWhen you compose a message, quill "
    "opens your editor with the headers at the top. Composing a reply quotes the "
    "original message. The compose menu lets you change the recipients, attach "
    "files and postpone the message before sending it.\n",
    "sending.md": "# Sending\n\nQuill hands a composed message to the mail "
    "transfer agent. While composing, the message behaves like a draft: it is "
    "saved every minute and kept when you postpone it.\n",
    "editor.md": "# The editor\n\nQuill composes with the editor you name. In "
    "compose mode the editor receives a file holding the headers and the body; "
    "quill reads it back when the editor exits.\n",
    "options.md": "# Command-line options\n\n| Option | Description |\n|---|---|\n"
    + "".join(f"| {option} | {text} |\n" for option, text in OPTION_ROWS),
}
COMPOSING.update(
    {
        f"compose-{topic}.md": f"# Composing: {topic}\n\nAn option of the compose "
        f"menu sets how quill handles {topic} when you compose a message: the "
        f"option makes the compose mode behave as your configuration says.\n"
        for topic in (
            "signatures",
            "drafts",
            "encodings",
            "recipients",
            "attachments",
            "quoting",
            "headers",
            "line wrapping",
        )
    }
)
MAILX_Q = "Which option makes quill behave like mailx when composing?"


class RareWordsTestCase(TestCase):
    """A word of the question that few chunks hold ("mailx", in one row of an
    options table) brings the chunks that hold it, though the prose about
    composing is nearer the question's other words (issue #29)."""

    @classmethod
    def setUpTestData(cls):
        cls.collection = _indexed("Quill", COMPOSING)
        keywords.count_terms(cls.collection)
        cls.row = Chunk.objects.get(
            collection=cls.collection, text__contains="mailx compose mode"
        )

    def test_the_chunks_holding_a_rare_word_are_found_apart(self):
        found = keywords.find(self.collection, MAILX_Q, 80)
        self.assertIn(self.row.pk, found.rare_ids)
        # And the one chunk saying "behaves"; none holding only common words.
        rare = Chunk.objects.filter(pk__in=found.rare_ids)
        self.assertEqual(
            {"mailx" in c.text or "behaves" in c.text for c in rare}, {True}
        )

    def test_common_words_bring_no_rare_holders(self):
        found = keywords.find(self.collection, "How do I compose a message?", 80)
        self.assertTrue(found.ids)
        self.assertEqual(found.rare_ids, [])

    def test_words_never_counted_are_not_taken_for_rare(self):
        uncounted = _indexed("Quill, uncounted", COMPOSING)
        self.assertEqual(keywords.find(uncounted, MAILX_Q, 80).rare_ids, [])

    def test_the_row_holding_the_rare_word_is_among_the_first_passages(self):
        result = retrieval.retrieve(self.collection, MAILX_Q, k=3)
        texts = [passage.text for passage in result.passages]
        self.assertTrue(any("mailx compose mode" in text for text in texts), texts)
        hit = next(h for h in result.hits if h.chunk_id == self.row.pk)
        self.assertIsNotNone(hit.rare_rank)

    def test_in_a_small_collection_a_word_few_chunks_hold_must_be_rarer(self):
        # 29 chunks: two of them say "editor", too many for a rare word here.
        found = keywords.find(self.collection, "Which editor opens?", 80)
        self.assertEqual(found.rare_ids, [])
