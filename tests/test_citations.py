"""Old citation links (kb.citations): where a link made before its source moved
on leads a staff member, as the value the section page shows."""

from __future__ import annotations

import dataclasses

from django.contrib.auth.models import Group
from django.http import QueryDict
from django.test import TestCase

from kb import citations, ingestion
from kb.citations import Elsewhere, Gone, Link, Shown
from kb.models import Collection, Question, Section, Source
from tests.base import ingest_text, make_users

FILE = "runbook.md"
CITED = "Roll back when errors stay above 2%. Page the lead before you roll back."
TEXT = (
    "# Runbook\n\nThis runbook is for the on-call engineer.\n\n"
    f"## Rollback\n\n{CITED}\n\n"
    "## Checks\n\nWatch the dashboard for ten minutes after each deploy.\n"
)
NEW_SECTION = "## Safety\n\nKeep the status page open while you work.\n\n"


class OldLinkTestCase(TestCase):
    """A citation of CITED made from version 1 of the runbook, its answer logged."""

    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, _ = make_users()
        cls.collection = Collection.objects.create(name="Ops")
        cls.source = ingest_text(cls.collection, FILE, TEXT)
        start = TEXT.index(CITED)
        cls.section_id = cls.source.sections.get(start__lte=start, end__gt=start).pk
        cls.link = Link(
            start=start,
            end=start + len(CITED),
            source_id=cls.source.pk,
            version=cls.source.indexed_version,
            span=(start, start + len(CITED)),
        )
        cls.logged = Question.objects.create(
            user=cls.staff,
            collection=cls.collection,
            question="When?",
            answer="[1]",
            answerer="extractive",
            fingerprint={"sources": {str(cls.source.pk): cls.source.indexed_version}},
            citations=[
                {
                    "n": 1,
                    "source": "Runbook",
                    "file": FILE,
                    "text": CITED,
                    "source_id": cls.source.pk,
                    "section_id": cls.section_id,
                    "start": cls.link.start,
                    "end": cls.link.end,
                }
            ],
        )

    def _edit(self, new_text: str) -> Source:
        """The runbook uploaded again as `new_text` and indexed (version 2)."""
        source = ingest_text(self.collection, FILE, new_text)
        self.assertEqual(source.indexed_version, self.link.version + 1)
        return source

    def _follow(self, link: Link, user=None) -> Shown | Gone | None:
        """What the staff member ends on, following the pages' redirects."""
        section_id = self.section_id
        for _ in range(3):
            found = citations.resolve(user or self.staff, section_id, link)
            if not isinstance(found, Elsewhere):
                return found
            section_id = found.section_id
            link = dataclasses.replace(link, at=found.at or link.at)
        self.fail("redirected more than three times")

    def test_moved_text_is_marked_exactly_where_it_now_is(self):
        source = self._edit(TEXT.replace("## Rollback", NEW_SECTION + "## Rollback"))
        shown = self._follow(self.link)
        self.assertIsInstance(shown, Shown)
        self.assertEqual(shown.cited, CITED)
        self.assertEqual(source.text[shown.start : shown.end], CITED)
        self.assertEqual(shown.start, self.link.start + len(NEW_SECTION))
        self.assertEqual((shown.cited_version, shown.partly), (1, False))

    def test_the_section_now_at_the_cited_place_hands_on_where_the_text_is(self):
        source = self._edit(TEXT.replace("## Rollback", NEW_SECTION + "## Rollback"))
        start = self.link.start
        there = source.sections.get(start__lte=start, end__gt=start)  # "Safety"
        found = citations.resolve(self.staff, there.pk, self.link)
        self.assertIsInstance(found, Elsewhere)
        self.assertNotEqual(found.section_id, there.pk)
        self.assertEqual(source.text[found.at[0] : found.at[1]], CITED)

    def test_a_found_place_that_is_not_the_cited_text_is_not_trusted(self):
        source = self._edit(TEXT.replace("## Rollback", NEW_SECTION + "## Rollback"))
        now = source.text.index(CITED)
        section = source.sections.get(start__lte=now, end__gt=now)
        wrong = dataclasses.replace(self.link, at=(section.start, section.start + 9))
        shown = citations.resolve(self.staff, section.pk, wrong)
        self.assertEqual((shown.start, shown.end), (now, now + len(CITED)))

    def test_only_the_sentences_still_there_are_marked(self):
        kept, gone = CITED.split(" Page")[0], "Page" + CITED.split(" Page")[1]
        self._edit(TEXT.replace(gone, "Ask the on-call lead."))
        shown = self._follow(self.link)
        self.assertTrue(shown.partly)
        self.assertEqual(shown.cited, kept)
        self.assertEqual(shown.was, CITED)  # shown beside, whole

    def test_removed_text_marks_nothing_and_keeps_what_was_cited(self):
        self._edit(TEXT.replace(CITED, "Ask the on-call lead first."))
        shown = self._follow(self.link)
        self.assertEqual(shown.start, shown.end)
        self.assertEqual(shown.cited, "")
        self.assertEqual(shown.was, CITED)
        self.assertIsNone(shown.cited_pages)
        self.assertEqual(shown.cited_version, 1)

    def test_text_no_logged_answer_keeps_cannot_be_looked_for(self):
        self._edit(TEXT.replace("## Rollback", NEW_SECTION + "## Rollback"))
        Question.objects.all().delete()  # pruned, or the log is off
        shown = self._follow(self.link)
        self.assertEqual(shown.cited, "")
        self.assertIsNone(shown.was)
        self.assertEqual(shown.cited_version, 1)

    def test_another_version_s_logged_text_is_not_taken_for_the_cited_one(self):
        self._edit(TEXT.replace(CITED, "Ask the on-call lead first."))
        # The same range cited again from version 2: another text.
        Question.objects.create(
            user=self.staff,
            collection=self.collection,
            question="Who?",
            answer="[1]",
            answerer="extractive",
            fingerprint={"sources": {str(self.source.pk): 2}},
            citations=[{**self.logged.citations[0], "text": "Ask the on-call"}],
        )
        was = citations.cited_text(self.source, 1, self.link.start, self.link.end)
        self.assertEqual(was, CITED)

    def test_a_re_index_of_the_same_text_marks_the_same_characters(self):
        ingestion.ingest(self.source.pk)  # new sections, the old one gone
        self.assertFalse(Section.objects.filter(pk=self.section_id).exists())
        shown = self._follow(self.link)
        self.assertEqual((shown.start, shown.end), (self.link.start, self.link.end))
        self.assertEqual(shown.cited, CITED)
        self.assertIsNone(shown.cited_version)  # nothing changed: no warning

    def test_a_deleted_source_is_named_as_the_log_knows_it(self):
        self.source.delete()
        gone = self._follow(self.link)
        self.assertIsInstance(gone, Gone)
        self.assertEqual(
            gone.message,
            f"The source this link cites, “Runbook” ({FILE}), has been deleted.",
        )
        unknown = self._follow(dataclasses.replace(self.link, source_id=10**9))
        self.assertIn("not in the knowledge base", unknown.message)
        bare = self._follow(dataclasses.replace(self.link, source_id=None))
        self.assertIn("does not say which source it cites", bare.message)

    def test_a_collection_the_user_may_not_see_shows_nothing_of_it(self):
        self.collection.groups.add(Group.objects.create(name="ops"))
        self.assertIsNone(citations.resolve(self.editor, self.section_id, self.link))
        ingestion.ingest(self.source.pk)  # the linked section replaced
        gone = self._follow(self.link, user=self.editor)
        self.assertIsInstance(gone, Gone)
        self.assertNotIn("Runbook", gone.message)
        self.assertNotIn(FILE, gone.message)

    def test_a_range_beyond_the_section_marks_only_what_is_in_it(self):
        section = Section.objects.get(pk=self.section_id)
        wide = dataclasses.replace(self.link, span=(-5, section.start + 4))
        shown = citations.resolve(self.staff, section.pk, wide)
        self.assertEqual((shown.start, shown.end), (section.start, section.start + 4))
        outside = dataclasses.replace(self.link, span=(section.end, section.end + 9))
        self.assertEqual(citations.resolve(self.staff, section.pk, outside).cited, "")


class ElsewhereTestCase(TestCase):
    def test_the_next_page_keeps_the_link_and_learns_where_the_text_is(self):
        query = QueryDict("start=10&end=20&source=3&v=1")
        self.assertEqual(
            Elsewhere(7, (40, 50)).url(query),
            "/kb/sections/7/?start=10&end=20&source=3&v=1&at=40-50#cited",
        )
        self.assertEqual(  # the section replaced: the same query
            Elsewhere(8).url(query),
            "/kb/sections/8/?start=10&end=20&source=3&v=1#cited",
        )
