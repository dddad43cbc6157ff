"""The admin's pages on a source of 20,000 chunks answer with a bounded number of
queries and bytes, and load no chunk's or section's text per row (issue #26:
the delete page of a 35,022-chunk source grew the web process to 21 GB)."""

from __future__ import annotations

import numpy as np
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from kb import permissions
from kb.models import EMBEDDING_DIM, Chunk, Collection, Section, Source
from tests.base import make_users

CHUNKS = 20_000
PER_SECTION = 10
# Inserting into the HNSW index is most of the cost of building the source:
# vectors on the sections and the first VECTORS chunks only.
VECTORS = 2_000
# Constants, whatever the number of chunks: no query or byte per chunk.
MAX_QUERIES = 60
MAX_PAGE_BYTES = 200_000  # a list of 100 rows is about 60 KB


def build_large_source(collection: Collection) -> Source:
    """A source of CHUNKS one-paragraph chunks in sections of PER_SECTION, with
    unit vectors, stored with bulk_create (what an ingestion stores, cheaply)."""
    paragraphs = [f"Paragraph {i} tells of topic {i}.\n\n" for i in range(CHUNKS)]
    text = "# Big\n\n" + "".join(paragraphs)
    source = Source.objects.create(
        collection=collection,
        title="Big",
        file_name="big.md",
        text=text,
        content_hash="big",
        status=Source.Status.INDEXED,
    )
    vectors = np.random.default_rng(26).standard_normal((CHUNKS, EMBEDDING_DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(
        np.float32
    )
    starts = np.cumsum([7] + [len(p) for p in paragraphs]).tolist()
    sections = Section.objects.bulk_create(
        Section(
            source=source,
            heading=f"Part {n}",
            heading_path=f"Big > Part {n}",
            level=2,
            order=n,
            start=starts[first],
            end=starts[first + PER_SECTION],
            body=text[starts[first] : starts[first + PER_SECTION]],
            embedding=vectors[first],
        )
        for n, first in enumerate(range(0, CHUNKS, PER_SECTION))
    )
    Chunk.objects.bulk_create(
        (
            Chunk(
                source=source,
                section=sections[i // PER_SECTION],
                chunk_index=i,
                start=starts[i],
                end=starts[i + 1],
                text=paragraphs[i],
                embedded_text=f"Big > Part {i // PER_SECTION}\n{paragraphs[i]}",
                token_count=16,
                text_tokens=9,
                embedding=vectors[i] if i < VECTORS else None,
            )
            for i in range(CHUNKS)
        ),
        batch_size=2000,
    )
    return source


def loading(queries: CaptureQueriesContext, *columns: str) -> list[str]:
    """The queries that select any of `columns` ('"kb_chunk"."text"')."""
    found = []
    for query in queries.captured_queries:
        sql = query["sql"]
        selected = sql[: sql.find(" FROM ")] if sql.startswith("SELECT") else ""
        if any(column in selected for column in columns):
            found.append(sql[:200])
    return found


ROW_TEXTS = ('"kb_chunk"."text"', '"kb_chunk"."embedding"', '"kb_section"."body"')


class LargeSourceAdminTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, _ = make_users(permissions.CONTENT_EDITOR)
        cls.collection = Collection.objects.create(name="Big")
        cls.source = build_large_source(cls.collection)

    def setUp(self):
        self.client.force_login(self.staff)

    def _get(self, url: str, max_bytes: int = MAX_PAGE_BYTES, **data):
        with CaptureQueriesContext(connection) as queries:
            response = self.client.get(url, data)
        self.assertEqual(response.status_code, 200, url)
        self.assertLess(len(queries), MAX_QUERIES, url)
        self.assertLess(len(response.content), max_bytes, url)
        return response, queries

    def _post(self, url: str, data: dict):
        with CaptureQueriesContext(connection) as queries:
            response = self.client.post(url, data)
        self.assertLess(len(queries), MAX_QUERIES, url)
        return response

    def test_the_delete_page_counts_what_goes_with_the_source(self):
        url = reverse("admin:kb_source_delete", args=[self.source.pk])
        page, queries = self._get(url)
        self.assertContains(page, f"Chunks: {CHUNKS}")
        self.assertContains(page, f"Sections: {CHUNKS // PER_SECTION}")
        self.assertContains(page, "Are you sure")
        self.assertEqual(loading(queries, *ROW_TEXTS), [])

    def test_an_editor_deletes_it_in_a_few_statements(self):
        self.client.force_login(self.editor)  # no delete permission on chunks
        url = reverse("admin:kb_source_delete", args=[self.source.pk])
        self.assertNotContains(self.client.get(url), "permission to delete")
        response = self._post(url, {"post": "yes"})
        self.assertRedirects(response, reverse("admin:kb_source_changelist"))
        self.assertFalse(Source.objects.exists())
        self.assertFalse(Section.objects.exists())
        self.assertFalse(Chunk.objects.exists())

    def test_the_delete_action_counts_then_deletes(self):
        url = reverse("admin:kb_source_changelist")
        chosen = {"action": "delete_selected", "_selected_action": [self.source.pk]}
        with CaptureQueriesContext(connection) as queries:
            page = self.client.post(url, chosen)
        self.assertLess(len(queries), MAX_QUERIES)
        self.assertLess(len(page.content), MAX_PAGE_BYTES)
        self.assertContains(page, f"Chunks: {CHUNKS}")
        self.assertEqual(loading(queries, *ROW_TEXTS, '"kb_source"."text"'), [])
        with CaptureQueriesContext(connection) as queries:
            self._post(url, {**chosen, "post": "yes"})
        self.assertEqual(loading(queries, '"kb_source"."text"'), [])
        self.assertFalse(Source.objects.exists())
        self.assertFalse(Chunk.objects.exists())

    def test_the_collection_delete_page_counts_and_deletes_in_bulk(self):
        url = reverse("admin:kb_collection_delete", args=[self.collection.pk])
        page, queries = self._get(url)
        self.assertContains(page, "Sources: 1")
        self.assertContains(page, f"Chunks: {CHUNKS}")
        self.assertEqual(loading(queries, *ROW_TEXTS), [])
        response = self._post(url, {"post": "yes"})
        self.assertRedirects(response, reverse("admin:kb_collection_changelist"))
        self.assertFalse(Collection.objects.exists())
        self.assertFalse(Chunk.objects.exists())

    def test_its_pages_and_lists_load_no_text_per_row(self):
        chunk = Chunk.objects.get(source=self.source, chunk_index=CHUNKS - 1)
        section = chunk.section
        of_collection = {"source__collection__id__exact": self.collection.pk}
        # The source's page holds its text to edit (bounded by the upload limit).
        text = {"max_bytes": len(self.source.text) + MAX_PAGE_BYTES}
        pages = [
            (reverse("admin:kb_source_change", args=[self.source.pk]), text),
            (reverse("admin:kb_source_history", args=[self.source.pk]), {}),
            (reverse("admin:kb_source_changelist"), {}),
            (reverse("admin:kb_chunk_changelist"), of_collection),
            (reverse("admin:kb_chunk_changelist"), {**of_collection, "p": "150"}),
            (reverse("admin:kb_section_changelist"), of_collection),
            (reverse("admin:kb_chunk_change", args=[chunk.pk]), {}),
            (reverse("admin:kb_section_change", args=[section.pk]), {}),
        ]
        for url, data in pages:
            page, queries = self._get(url, **data)
            # The source's text is loaded once at most (its own page), never
            # once per row.
            texts = loading(queries, '"kb_source"."text"')
            self.assertLessEqual(len(texts), 1, (url, texts))
            if "changelist" in page.resolver_match.url_name:
                self.assertEqual(texts, [], url)
                self.assertEqual(loading(queries, '"kb_section"."body"'), [], url)
        self.assertContains(page, "Part 1999")
