"""Reading and parsing run in the worker, under a time limit; PDF sections record
their pages and citations carry them (issue #16)."""

from __future__ import annotations

import uuid
from pathlib import Path

import django_rq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import TestCase, TransactionTestCase
from django.urls import reverse

from kb import jobs, queueing, uploads
from kb.models import Collection, Source
from tests.base import forget_jobs, make_users, run_burst_worker
from tests.documents import (
    CLAIMS_Q,
    MEALS_Q,
    Page,
    build_pdf,
    handbook_pages,
    scanned_page,
)


def long_pdf(count: int) -> bytes:
    """`count` pages of prose: reading them takes seconds, not milliseconds."""
    pages = []
    for n in range(count):
        page = Page().heading(f"Chapter {n + 1}", 15)
        for k in range(4):
            page.paragraph(
                [
                    f"Line {j} of paragraph {k} on page {n + 1}, of words."
                    for j in (1, 2)
                ]
            )
        pages.append(page)
    return build_pdf(pages)


def glyph_by_glyph_pdf(count: int) -> bytes:
    """One page whose producer drew each of `count` glyphs as a text object of
    its own, all on one line, in a form XObject. pdfium's text extraction
    compares each object with the earlier ones of its line: for 60,000 glyphs,
    tens of seconds spent in one call into C (FPDFText_LoadPage), which no
    signal handler can interrupt; the Python code before it sees one object."""
    page = Page().heading("Manual", 15)
    page.form = [
        f"BT /F1 1 Tf {72 + (i % 400) * 0.5:.2f} 600 Td (a) Tj ET" for i in range(count)
    ]
    return build_pdf([page])


def processes_with(marker: str) -> list[int]:
    """Running processes whose environment holds `marker` (a worker's children
    inherit it)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes() if proc.name.isdigit() else b""
        except OSError:  # ended meanwhile, or not ours
            continue
        if marker.encode() in environ:
            found.append(int(proc.name))
    return found


@pytest.mark.slow
class ReadingInTheWorkerTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees committed rows only.

    def setUp(self):
        self.staff, _, _ = make_users()
        self.client.force_login(self.staff)
        self.collection = Collection.objects.create(name="Handbook")

    def tearDown(self):
        forget_jobs()  # the failed jobs these tests make on purpose

    def _upload(self, name: str, data: bytes):
        return self.client.post(
            reverse("admin:kb_source_upload"),
            {
                "collection": self.collection.pk,
                "files": [SimpleUploadedFile(name, data)],
            },
        )

    def _assert_failed_keeping_version_1(self, message: str) -> Source:
        """manual.pdf failed with `message`; its first version is still searched."""
        manual = Source.objects.get(file_name="manual.pdf")
        self.assertEqual(manual.status, Source.Status.FAILED)
        self.assertIn(message, manual.error)
        self.assertEqual(manual.indexed_version, 1)
        self.assertTrue(manual.sections.filter(heading="Meals").exists())
        return manual

    def _citation(self, question: str, heading: str) -> dict:
        """The API's citation of the section `heading` in its answer to `question`."""
        response = self.client.post(
            reverse("kb:api-ask"),
            {"question": question, "collection": "Handbook"},
            content_type="application/json",
        )
        self.assertEqual(response.status_code, 200)
        citations = response.json()["citations"]
        found = [c for c in citations if c["heading_path"].endswith(f"> {heading}")]
        self.assertTrue(found, f"no citation of {heading}: {citations}")
        return found[0]

    def test_an_uploaded_pdf_is_read_by_the_worker_and_cited_with_its_pages(self):
        response = self._upload("handbook.pdf", build_pdf(handbook_pages()))
        self.assertEqual(response.status_code, 302)
        source = Source.objects.get(file_name="handbook.pdf")
        # The request stored the file and queued it; it read nothing.
        self.assertEqual((source.status, source.text), (Source.Status.QUEUED, ""))
        self.assertFalse(source.sections.exists())

        run_burst_worker()
        source.refresh_from_db()
        self.assertEqual(source.status, Source.Status.INDEXED, source.error)
        self.assertEqual(source.title, "Office handbook")
        self.assertTrue(source.text.startswith("# Office handbook\n\n"))
        self.assertEqual(source.reader_summary["pages"], 3)
        self.assertEqual(source.reader_summary["running_lines_removed"], 6)
        pages = {s.heading: s.pages for s in source.sections.all()}
        self.assertEqual(pages["Travel"], "1")
        self.assertEqual(pages["Meals"], "2")
        self.assertEqual(pages["Claims"], "2–3")

        meals = self._citation(MEALS_Q, "Meals")
        self.assertEqual(meals["pages"], "2")
        claims = self._citation(CLAIMS_Q, "Claims")
        # A citation names the page of its own first character, not its
        # section's range (issue #28).
        first = next(p for p, s, e in source.page_map if s <= claims["start"] < e)
        self.assertEqual((claims["pages"], claims["page"]), (str(first), first))

        page = self.client.get(
            reverse("kb:ask"), {"q": MEALS_Q, "collection": self.collection.pk}
        )
        file_url = reverse("kb:source-file", args=[source.pk])
        self.assertContains(
            page,
            f'handbook.pdf, <a class="page-link" href="{file_url}#page=2">p. 2</a>, ',
        )
        passage = self.client.get(meals["url"])
        self.assertContains(passage, f'href="{file_url}#page=2">p. 2 of the original')
        self.assertContains(passage, "sixty euros in Paris.</mark>")
        original = self.client.get(file_url)
        self.assertEqual(original["Content-Type"], "application/pdf")

    def test_a_file_the_worker_cannot_read_fails_there_and_the_old_version_stays(self):
        self._upload("handbook.pdf", build_pdf(handbook_pages()))
        run_burst_worker()
        first = Source.objects.get(file_name="handbook.pdf")
        self.assertEqual(first.status, Source.Status.INDEXED, first.error)

        # Both requests are accepted: only reading the text shows there is none.
        scan = build_pdf([scanned_page(), scanned_page()])
        self.assertEqual(self._upload("handbook.pdf", scan).status_code, 302)
        self.assertEqual(self._upload("scan.pdf", scan).status_code, 302)
        run_burst_worker()

        source = Source.objects.get(file_name="handbook.pdf")
        self.assertEqual(source.status, Source.Status.FAILED)
        self.assertIn("handbook.pdf has no text layer (scanned?)", source.error)
        self.assertEqual((source.indexed_version, source.version), (1, 2))
        self.assertEqual(source.text, first.text)  # the live version's text
        cite = self._citation(MEALS_Q, "Meals")
        self.assertEqual((cite["source"], cite["pages"]), ("Office handbook", "2"))
        new = Source.objects.get(file_name="scan.pdf")
        self.assertEqual(new.status, Source.Status.FAILED)
        self.assertIn("scan.pdf has no text layer (scanned?); OCR is not", new.error)
        change = self.client.get(reverse("admin:kb_source_change", args=[source.pk]))
        self.assertContains(change, "handbook.pdf has no text layer")
        self.assertContains(change, "previous version still searchable")

    def test_a_read_over_the_time_limit_fails_with_the_reason(self):
        self._upload("manual.pdf", build_pdf(handbook_pages()))
        run_burst_worker()
        self.assertEqual(self._upload("manual.pdf", long_pdf(1500)).status_code, 302)
        small, _ = uploads.store_source(
            self.collection,
            "notes.md",
            b"# Notes\n\nThe lift is serviced on Mondays.\n",
        )
        self.assertTrue(queueing.enqueue_ingest(small))  # queued after manual.pdf

        run_burst_worker(env={"KB_PARSE_TIMEOUT": "0.2"})
        self._assert_failed_keeping_version_1(
            "manual.pdf: reading and parsing took longer than the limit of 0.2 s "
            "(KB_PARSE_TIMEOUT)"
        )
        # The worker went on to its next job, with the job timeout restored.
        small.refresh_from_db()
        self.assertEqual(small.status, Source.Status.INDEXED, small.error)

    def test_the_limit_stops_a_read_stuck_in_one_call_into_c(self):
        # A time limit by SIGALRM would wait for the call to return: the job's
        # own timeout (8 s here) would fall due first and fail the source for
        # that, without the reason.
        self._upload("manual.pdf", build_pdf(handbook_pages()))
        run_burst_worker()
        data = glyph_by_glyph_pdf(60_000)
        source, _ = uploads.store_source(self.collection, "manual.pdf", data)
        django_rq.get_queue().enqueue(
            jobs.ingest_source,
            source.pk,
            source.version,
            job_id=queueing.ingest_job_id(source),
            job_timeout=8,
        )

        marker = f"KB_TEST_RUN={uuid.uuid4()}"
        key, value = marker.split("=")
        run_burst_worker(env={"KB_PARSE_TIMEOUT": "0.5", key: value})
        manual = self._assert_failed_keeping_version_1(
            "manual.pdf: reading and parsing took longer than the limit of 0.5 s "
            "(KB_PARSE_TIMEOUT); the previous version stays live"
        )
        self.assertEqual(manual.version, 2)
        self.assertEqual(self._citation(MEALS_Q, "Meals")["pages"], "2")
        # no reading process left behind by the worker
        self.assertEqual(processes_with(marker), [])


class SourcePageReadingTestCase(TestCase):
    """The admin source page shows what the reader kept and lost."""

    def setUp(self):
        staff, _, _ = make_users()
        self.client.force_login(staff)
        collection = Collection.objects.create(name="Handbook")
        self.source = Source.objects.create(
            collection=collection,
            title="Scanned annex",
            file_name="annex.pdf",
            text="# Annex\n\nText.\n",
            content_hash="x",
            reader_summary={
                "pages": 2,
                "headings": 1,
                "tables_with_header": 1,
                "tables_without_header": 2,
                "images_dropped": 3,
                "running_lines_removed": 4,
                "chars_per_page": [812, 0],
                "pages_without_text": [2],
                "warnings": ["page 2 has no text"],
            },
        )
        self.url = reverse("admin:kb_source_change", args=[self.source.pk])

    def test_it_shows_the_summary_and_flags_a_page_without_text(self):
        page = self.client.get(self.url)
        self.assertContains(page, "What the reader kept and lost")
        self.assertContains(
            page, '<th scope="row">Tables without one</th><td>2</td>', html=True
        )
        self.assertContains(page, "2 tables had no header row")
        self.assertContains(
            page,
            '<th scope="row">Running headers, footers, page numbers removed</th>'
            "<td>4</td>",
            html=True,
        )
        self.assertContains(page, "p. 1: 812")
        self.assertContains(
            page,
            '<li class="kb-page-empty">p. 2: 0 <strong>no text</strong></li>',
            html=True,
        )
        file_url = reverse("kb:source-file", args=[self.source.pk])
        self.assertContains(page, f'href="{file_url}"')
        self.assertNotContains(page, "style=")  # CSP: styles in admin.css only

    def test_the_text_of_a_converted_source_is_the_readers_not_editable(self):
        page = self.client.get(self.url)
        self.assertNotContains(page, 'name="text"')
        plain = Source.objects.create(
            collection=self.source.collection,
            title="Notes",
            file_name="n.md",
            text="# Notes\n",
            content_hash="y",
        )
        page = self.client.get(reverse("admin:kb_source_change", args=[plain.pk]))
        self.assertContains(page, 'name="text"')
        self.assertNotContains(page, "What the reader kept and lost")
