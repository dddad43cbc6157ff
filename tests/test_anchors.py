"""A citation of an API reference entry opens that entry in the original web
page (issue #29): the section keeps its heading's HTML id, and with the
source's URL the answer and the section page link `url#id`."""

from __future__ import annotations

from pathlib import Path

from django.test import SimpleTestCase, TestCase
from django.urls import reverse

from kb import citations, ingestion, uploads
from kb.models import Collection
from tests.base import make_users

REAL = Path(__file__).parent / "fixtures" / "real"
PAGE = "https://commons.apache.org/proper/commons-lang/apidocs/StopWatch.html"


class OriginalUrlTestCase(SimpleTestCase):
    def test_a_web_address_at_the_entry(self):
        self.assertEqual(
            citations.original_url(
                f"{PAGE}#top", "getTime(java.util.concurrent.TimeUnit)"
            ),
            f"{PAGE}#getTime(java.util.concurrent.TimeUnit)",
        )
        self.assertEqual(
            citations.original_url("https://x.example/a b.html", "a b<c>"),
            "https://x.example/a b.html#a%20b%3Cc%3E",
        )

    def test_no_link_that_is_not_a_web_address_or_has_no_entry(self):
        for url, anchor in [
            ("javascript:alert(1)", "split()"),
            ("file:///etc/passwd", "split()"),
            ("StopWatch.html", "split()"),
            (PAGE, ""),
            (None, "split()"),
            (["https://x.example"], "split()"),
        ]:
            with self.subTest(url=url, anchor=anchor):
                self.assertEqual(citations.original_url(url, anchor), "")


class CitedEntryTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.staff, _, _ = make_users()
        cls.collection = Collection.objects.create(name="API")
        data = (REAL / "javadoc17-StopWatch.html").read_bytes()
        source, _ = uploads.store_source(
            cls.collection, "StopWatch.html", data, metadata={"url": PAGE}
        )
        ingestion.ingest(source.pk)
        cls.source = source

    def test_each_member_section_keeps_its_anchor(self):
        section = self.source.sections.get(heading_path="Class StopWatch > suspend()")
        self.assertEqual(section.anchor, "suspend()")
        constructor = self.source.sections.get(
            heading_path="Class StopWatch > StopWatch(String)"
        )
        self.assertEqual(constructor.anchor, "<init>(java.lang.String)")

    def test_the_answer_links_the_cited_member_in_the_original(self):
        self.client.force_login(self.staff)
        response = self.client.post(
            reverse("kb:api-ask"),
            {"question": "What does suspend() do on a StopWatch?", "collection": "API"},
            content_type="application/json",
        )
        self.assertEqual(response.status_code, 200, response.content[:500])
        citations = response.json()["citations"]
        suspend = next(c for c in citations if c["heading_path"].endswith("suspend()"))
        self.assertEqual(suspend["original_url"], f"{PAGE}#suspend()")
        page = self.client.get(
            reverse("kb:ask"),
            {
                "q": "What does suspend() do on a StopWatch?",
                "collection": self.collection.pk,
            },
        )
        self.assertContains(page, f'class="original-link" href="{PAGE}#suspend()"')

    def test_the_section_page_links_the_entry_in_the_original(self):
        self.client.force_login(self.staff)
        section = self.source.sections.get(heading_path="Class StopWatch > suspend()")
        page = self.client.get(reverse("kb:section", args=[section.pk]))
        self.assertContains(page, f'href="{PAGE}#suspend()"')
        self.assertContains(page, "#suspend() in the original")

    def test_a_section_without_an_anchor_links_its_text_in_the_original(self):
        # QA over pydoc pages: "# in the original", an anchor of nothing
        self.client.force_login(self.staff)
        overview = self.source.sections.get(heading_path="Class StopWatch")
        self.assertEqual(overview.anchor, "")
        page = self.client.get(
            reverse("kb:section", args=[overview.pk]),
            {"start": overview.start, "end": overview.start + 40},
        )
        self.assertContains(page, f'href="{PAGE}#:~:text=')
        self.assertContains(page, ">in the original</a>")
        self.assertNotContains(page, "# in the original")

    def test_a_source_without_a_web_address_links_nothing(self):
        self.client.force_login(self.staff)
        type(self.source).objects.filter(pk=self.source.pk).update(
            metadata={"url": "javascript:alert(1)"}
        )
        section = self.source.sections.get(heading_path="Class StopWatch > suspend()")
        page = self.client.get(reverse("kb:section", args=[section.pk]))
        self.assertNotContains(page, "original-link")
        self.assertNotContains(page, "javascript:")
