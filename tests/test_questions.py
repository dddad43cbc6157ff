"""The question log (issue #18): logging with provenance, feedback, retention,
replay and the content gaps page."""

from __future__ import annotations

import html
import io
import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import (
    SimpleTestCase,
    TestCase,
    TransactionTestCase,
    override_settings,
)
from django.test.client import BOUNDARY, encode_multipart
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from kb import (
    access,
    evaluation,
    golden,
    ingestion,
    jobs,
    permissions,
    questions,
    uploads,
)
from kb.models import (
    Chunk,
    Collection,
    GoldenCase,
    Question,
    ReplayReport,
    Section,
    Source,
)
from tests import base

ROLLBACK = "When should I roll back a deploy?"
# Two wordings of one question, and one from elsewhere (declined by the demo).
SOURDOUGH = "What's a good recipe for sourdough?"
SOURDOUGH_AGAIN = "How do I make a sourdough bread?"
CAPITAL = "What is the capital of Australia?"


def post_utf7(client, url: str, data: dict):
    """A form posted as multipart in UTF-7, which Django decodes as the request
    says: "+2AA-" comes out as a lone surrogate (\\ud800)."""
    marks = {key: f"VALUE{i}" for i, key in enumerate(data)}
    body = encode_multipart(BOUNDARY, marks).decode()
    for key, mark in marks.items():
        body = body.replace(mark, str(data[key]))
    content_type = f"multipart/form-data; boundary={BOUNDARY}; charset=utf-7"
    return client.post(url, body, content_type=content_type)


class DemoTestCase(base.DemoTestCase):
    log_in = False  # the tests here say who asks

    def api_ask(self, question: str, **headers):
        return self.client.post(
            reverse("kb:api-ask"),
            {"question": question, "collection": "Demo"},
            content_type="application/json",
            headers=headers,
        )

    def feedback(self, body, **headers):
        data = body if isinstance(body, str) else json.dumps(body)
        return self.client.post(
            reverse("kb:api-feedback"),
            data,
            content_type="application/json",
            headers=headers,
        )


class QuestionLogTestCase(DemoTestCase):
    def test_it_logs_an_api_answer_with_its_fingerprint_and_retrieved_ids(self):
        self.client.force_login(self.staff)
        body = self.api_ask(ROLLBACK).json()
        entry = Question.objects.get(pk=body["id"])
        self.assertEqual((entry.user, entry.collection), (self.staff, self.demo))
        self.assertEqual(entry.question, ROLLBACK)
        self.assertEqual(entry.answer, body["answer"])
        self.assertFalse(entry.is_declined)
        self.assertAlmostEqual(entry.top_similarity, body["top_similarity"], 3)
        versions = {str(s.pk): s.indexed_version for s in self.demo.sources.all()}
        self.assertEqual(entry.fingerprint["sources"], versions)
        for key in ("chunk_tokens", "chunk_strategy", "model", "precision", "window"):
            self.assertIn(key, entry.fingerprint)
        self.assertEqual(entry.fingerprint["metadata_policy"]["title"], "embed")
        first = entry.retrieved[0]
        chunks = Chunk.objects.filter(pk__in=first["chunk_ids"])
        self.assertEqual(len(chunks), len(first["chunk_ids"]))
        self.assertEqual({c.section_id for c in chunks}, set(first["section_ids"]))
        self.assertEqual(first["heading_path"], body["sections"][0]["heading_path"])
        self.assertIn(first["matched"], ("vector", "keyword", "both"))

    def test_the_fingerprint_is_the_index_built_not_the_settings_since(self):
        built = self.demo.chunk_tokens
        self.demo.chunk_tokens = built + 50  # changed, not re-indexed yet
        self.demo.save()
        self.client.force_login(self.staff)
        entry = Question.objects.get(pk=self.api_ask(ROLLBACK).json()["id"])
        self.assertEqual(entry.fingerprint["chunk_tokens"], built)

    def test_logged_citations_keep_the_text_they_cite(self):
        self.client.force_login(self.staff)
        body = self.api_ask(ROLLBACK).json()
        entry = Question.objects.get(pk=body["id"])
        for cite in entry.citations:
            text = self.demo.sources.get(pk=cite["source_id"]).text
            self.assertEqual(cite["text"], text[cite["start"] : cite["end"]])
        self.assertEqual(
            [{k: v for k, v in c.items() if k != "text"} for c in entry.citations],
            body["citations"],
        )

    def test_a_declined_question_is_logged_as_declined(self):
        self.client.force_login(self.staff)
        entry = Question.objects.get(pk=self.api_ask(CAPITAL).json()["id"])
        self.assertTrue(entry.is_declined)
        self.assertEqual(entry.citations, [])

    def test_the_ask_page_logs_and_shows_the_askers_own_history(self):
        self.client.force_login(self.staff)
        response = self.client.get(reverse("kb:ask"), {"q": ROLLBACK})
        entry = Question.objects.get(user=self.staff)
        self.assertContains(response, reverse("kb:feedback", args=[entry.pk]))
        self.assertContains(response, "Your recent questions")
        self.client.force_login(self.editor)
        response = self.client.get(reverse("kb:ask"))
        self.assertNotContains(response, reverse("kb:question", args=[entry.pk]))
        page = self.client.get(reverse("kb:question", args=[entry.pk]))
        self.assertEqual(page.status_code, 404)

    def test_reloading_the_ask_page_logs_the_question_once(self):
        self.client.force_login(self.staff)
        for _ in range(3):  # reloads of one answer page
            self.client.get(reverse("kb:ask"), {"q": ROLLBACK})
        self.assertEqual(Question.objects.filter(user=self.staff).count(), 1)
        entry = Question.objects.get(user=self.staff)
        self.assertEqual(entry.repeats, 2)  # counted on the entry (docs/using.md)
        self.assertGreater(entry.last_asked, entry.created)
        listed = self.client.get(reverse("admin:kb_question_changelist"))
        self.assertContains(listed, '<td class="field-repeats">2</td>', html=True)
        self.client.get(reverse("kb:ask"), {"q": SOURDOUGH})  # another question
        self.client.force_login(self.editor)  # another asker
        self.client.get(reverse("kb:ask"), {"q": ROLLBACK})
        self.assertEqual(Question.objects.count(), 3)
        # Asked again after the index changed: a new answer to log.
        base.ingest_text(
            self.demo, "kettles.md", b"# Kettles\n\nDescale the kettle monthly.\n"
        )
        self.client.get(reverse("kb:ask"), {"q": ROLLBACK})
        self.assertEqual(Question.objects.filter(user=self.editor).count(), 2)

    def test_a_logged_answer_reads_as_formatted_text_as_on_the_ask_page(self):
        self.client.force_login(self.staff)
        entry = Question.objects.create(
            user=self.staff,
            collection=self.demo,
            question="How do I start?",
            answerer="extractive",
            answer="Run it:\n\n```python\nimport os\nprint(os.getcwd())\n```\n\n"
            "Use `kb_run` <b>now</b> [1]",
        )
        page = self.client.get(reverse("kb:question", args=[entry.pk]))
        self.assertContains(page, '<pre><code class="language-python">import os\n')
        self.assertContains(page, "<code>kb_run</code> &lt;b&gt;now&lt;/b&gt; [1]")
        replay = self.client.get(reverse("admin:kb_question_replay", args=[entry.pk]))
        self.assertContains(replay, '<pre><code class="language-python">import os\n')

    def test_a_logged_answer_shows_table_rows_and_links_markers_as_asked(self):
        section = Section.objects.filter(source__collection=self.demo).first()
        cite = {
            "n": 1,
            "source": section.source.title,
            "file": "f.md",
            "heading_path": section.heading_path,
            "chunk_indexes": [0],
            "start": section.start,
            "end": section.start + 5,
            "url": "",
            "section_id": section.pk,
            "source_id": section.source_id,
            "pages": None,
            "text": "x",
        }
        entry = Question.objects.create(
            user=self.staff,
            collection=self.demo,
            question="Which office?",
            answerer="extractive",
            answer="| Office 5 | Oslo | [1]",
            citations=[cite],
        )
        url = reverse("kb:section", args=[section.pk])
        url += f"?start={cite['start']}&amp;end={cite['end']}"
        url += f"&amp;source={section.source_id}"  # the link outlives a re-index
        self.client.force_login(self.staff)
        pages = [
            reverse("kb:question", args=[entry.pk]),
            reverse("admin:kb_question_replay", args=[entry.pk]),
            reverse("admin:kb_question_change", args=[entry.pk]),
        ]
        for page in pages:
            with self.subTest(page=page):
                response = self.client.get(page)
                self.assertContains(response, '<table class="quoted-row"><tr><td>')
                self.assertContains(response, f'<a class="cite" href="{url}#cited"')

    def test_a_logged_answers_citations_still_open_after_a_re_index(self):
        self.client.force_login(self.staff)
        self.client.get(reverse("kb:ask"), {"q": ROLLBACK})
        entry = Question.objects.get(user=self.staff)
        cite = entry.citations[0]
        ingestion.ingest(cite["source_id"])  # new sections, new ids
        self.assertFalse(Section.objects.filter(pk=cite["section_id"]).exists())
        page = self.client.get(reverse("kb:question", args=[entry.pk])).content
        link = re.search(r'<a class="cite" href="([^"]+)"', page.decode()).group(1)
        response = self.client.get(html.unescape(link), follow=True)
        self.assertContains(response, f"cited passage, characters {cite['start']} to")
        self.assertContains(response, escape(cite["text"].split("\n")[0]))

    @override_settings(KB_QUESTION_LOG_DAYS=0)
    def test_with_logging_off_nothing_is_stored_and_the_api_gives_no_id(self):
        self.client.force_login(self.staff)
        body = self.api_ask(ROLLBACK).json()
        self.assertNotIn("id", body)
        self.assertTrue(body["citations"])
        self.client.get(reverse("kb:ask"), {"q": ROLLBACK})
        self.assertFalse(Question.objects.exists())

    def test_admins_search_and_filter_the_log(self):
        self.client.force_login(self.staff)
        self.api_ask(ROLLBACK)
        self.api_ask(CAPITAL)
        url = reverse("admin:kb_question_changelist")
        found = self.client.get(url, {"q": "Australia"})
        self.assertContains(found, CAPITAL)
        self.assertNotContains(found, ROLLBACK)
        declined = self.client.get(url, {"is_declined__exact": "0"})
        self.assertContains(declined, ROLLBACK)
        self.assertNotContains(declined, CAPITAL)
        entry = Question.objects.get(question=ROLLBACK)
        page = self.client.get(reverse("admin:kb_question_change", args=[entry.pk]))
        self.assertContains(page, "Roll back at once if the HTTP 5xx error rate")

    def test_the_log_of_a_restricted_collection_stays_in_its_group(self):
        secret = Collection.objects.create(name="Secret")
        secret.groups.add(Group.objects.create(name="legal"))
        Question.objects.create(
            user=self.staff, collection=secret, question="secret plans?", answerer="x"
        )
        permissions.ensure_groups()
        self.editor.groups.add(Group.objects.get(name=permissions.ADMIN))
        self.client.force_login(self.editor)
        response = self.client.get(reverse("admin:kb_question_changelist"))
        self.assertEqual(response.status_code, 200)
        self.assertNotContains(response, "secret plans?")


class FeedbackTestCase(DemoTestCase):
    def setUp(self):
        self.client.force_login(self.staff)
        self.entry_id = self.api_ask(ROLLBACK).json()["id"]

    def test_feedback_is_recorded(self):
        response = self.feedback(
            {"id": self.entry_id, "helpful": False, "note": "Misses the freeze."}
        )
        self.assertEqual(response.json(), {"ok": True})
        entry = Question.objects.get(pk=self.entry_id)
        self.assertIs(entry.is_helpful, False)
        self.assertEqual(entry.note, "Misses the freeze.")
        self.assertIsNotNone(entry.feedback_at)

    def test_feedback_with_a_token_is_recorded(self):
        key = access.create_token(self.staff, "tests")
        self.client.logout()
        response = self.feedback(
            {"id": self.entry_id, "helpful": True}, Authorization=f"Bearer {key}"
        )
        self.assertEqual(response.json(), {"ok": True})
        self.assertIs(Question.objects.get(pk=self.entry_id).is_helpful, True)

    def test_feedback_on_someone_elses_answer_is_refused(self):
        self.client.force_login(self.editor)
        response = self.feedback({"id": self.entry_id, "helpful": False})
        self.assertEqual(response.status_code, 403)
        self.assertIn("someone else", response.json()["error"])
        self.assertIsNone(Question.objects.get(pk=self.entry_id).is_helpful)

    def test_feedback_is_refused_once_the_collection_is_out_of_reach(self):
        entry = Question.objects.get(pk=self.entry_id)
        entry.collection.groups.add(Group.objects.create(name="legal"))
        self.client.force_login(self.editor)  # an asker outside "legal"
        Question.objects.filter(pk=self.entry_id).update(user=self.editor)
        response = self.feedback({"id": self.entry_id, "helpful": False})
        self.assertEqual(response.status_code, 404)
        self.assertIsNone(Question.objects.get(pk=self.entry_id).is_helpful)

    def test_a_note_over_2000_characters_is_refused(self):
        response = self.feedback(
            {"id": self.entry_id, "helpful": False, "note": "x" * 2001}
        )
        self.assertEqual(response.status_code, 400)
        self.assertIn("2,000", response.json()["error"])
        entry = Question.objects.get(pk=self.entry_id)
        self.assertEqual((entry.is_helpful, entry.note), (None, ""))

    def test_a_lone_surrogate_in_the_note_gets_400_with_the_reason(self):
        # As a question with one is refused (issue #26): PostgreSQL cannot store it.
        body = '{"id": %d, "helpful": false, "note": "roll\\ud800back"}'
        response = self.feedback(body % self.entry_id)
        self.assertEqual(response.status_code, 400)
        self.assertEqual(response["Content-Type"], "application/json")
        self.assertIn("lone surrogate (such as \\ud800)", response.json()["error"])
        nul = self.feedback(
            {"id": self.entry_id, "helpful": False, "note": "roll\x00back"}
        )
        self.assertIn("NUL character", nul.json()["error"])
        url = reverse("kb:feedback", args=[self.entry_id])
        page = post_utf7(self.client, url, {"helpful": "no", "note": "roll\ud800back"})
        self.assertContains(page, "lone surrogate (such as \\ud800)", status_code=400)
        self.assertContains(page, "roll\ufffdback", status_code=400)  # shown back
        entry = Question.objects.get(pk=self.entry_id)
        self.assertEqual((entry.is_helpful, entry.note), (None, ""))

    def test_bad_feedback_gets_a_clear_message(self):
        bad = [
            ("[]", 400),
            ("{", 400),
            ({"helpful": True}, 400),
            ({"id": "1", "helpful": True}, 400),
            ({"id": self.entry_id, "helpful": "no"}, 400),
            ({"id": self.entry_id, "helpful": True, "note": 5}, 400),
            ({"id": 10**30, "helpful": True}, 404),
            ({"id": self.entry_id + 1000, "helpful": True}, 404),
        ]
        for body, status in bad:
            response = self.feedback(body)
            self.assertEqual(response.status_code, status, body)
            self.assertTrue(response.json()["error"], body)

    def test_anonymous_feedback_is_refused(self):
        self.client.logout()
        response = self.feedback({"id": self.entry_id, "helpful": True})
        self.assertEqual(response.status_code, 401)
        self.assertEqual(self.client.get(reverse("kb:api-feedback")).status_code, 405)

    def test_the_pages_refuse_anonymous_users_and_gets_of_the_form(self):
        url = reverse("kb:feedback", args=[self.entry_id])
        self.assertEqual(self.client.get(url).status_code, 405)
        self.assertEqual(self.client.post(url, {}).status_code, 400)
        self.client.logout()
        self.assertEqual(self.client.post(url, {"helpful": "no"}).status_code, 302)
        page = reverse("kb:question", args=[self.entry_id])
        self.assertEqual(self.client.get(page).status_code, 302)
        self.assertIsNone(Question.objects.get(pk=self.entry_id).is_helpful)

    def test_the_page_form_records_feedback_for_the_asker_only(self):
        url = reverse("kb:feedback", args=[self.entry_id])
        response = self.client.post(url, {"helpful": "no", "note": "Too short."})
        self.assertRedirects(response, reverse("kb:question", args=[self.entry_id]))
        entry = Question.objects.get(pk=self.entry_id)
        self.assertEqual((entry.is_helpful, entry.note), (False, "Too short."))
        page = self.client.get(reverse("kb:question", args=[self.entry_id]))
        self.assertContains(page, "You said: not helpful.")
        too_long = self.client.post(url, {"helpful": "yes", "note": "x" * 2001})
        self.assertEqual(too_long.status_code, 400)
        self.client.force_login(self.editor)
        self.assertEqual(self.client.post(url, {"helpful": "yes"}).status_code, 404)
        self.assertIs(Question.objects.get(pk=self.entry_id).is_helpful, False)


def _entry(user, collection, days_ago: float = 0, question: str = "q?") -> Question:
    return Question.objects.create(
        user=user,
        collection=collection,
        question=question,
        answerer="extractive",
        created=timezone.now() - timedelta(days=days_ago),
    )


class RetentionTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, _ = base.make_users()
        cls.collection = base.make_tree().source.collection

    def test_entries_older_than_the_retention_are_pruned(self):
        old = _entry(self.staff, self.collection, days_ago=91)
        kept = _entry(self.staff, self.collection, days_ago=89)
        self.assertEqual(questions.prune(), 1)
        self.assertFalse(Question.objects.filter(pk=old.pk).exists())
        self.assertTrue(Question.objects.filter(pk=kept.pk).exists())

    @override_settings(KB_QUESTION_LOG_DAYS=0)
    def test_a_retention_of_zero_keeps_nothing(self):
        _entry(self.staff, self.collection)
        questions.prune()
        self.assertFalse(Question.objects.exists())

    @override_settings(KB_QUESTION_LOG_MAX=3)
    def test_the_cap_per_collection_prunes_the_oldest_first(self):
        other = Collection.objects.create(name="Other")
        entries = [_entry(self.staff, self.collection, days_ago=d) for d in (5, 4, 3)]
        others = [_entry(self.staff, other, days_ago=9) for _ in range(3)]
        newest = _entry(self.staff, self.collection, days_ago=1)
        self.assertEqual(questions.prune_collection(self.collection.pk), 1)
        left = set(Question.objects.values_list("pk", flat=True))
        self.assertEqual(left, {e.pk for e in [*entries[1:], newest, *others]})

    def test_a_users_entries_are_deleted_with_the_user(self):
        _entry(self.editor, self.collection)
        mine = _entry(self.staff, self.collection)
        self.editor.delete()
        self.assertEqual(list(Question.objects.all()), [mine])


class ScheduledPruningTestCase(TransactionTestCase):
    """TransactionTestCase: the worker process only sees committed rows."""

    def setUp(self):
        import django_rq

        base.forget_jobs()
        django_rq.get_connection().delete(questions.PRUNE_LOCK)

    @pytest.mark.slow
    def test_a_worker_queues_the_pruning_and_runs_it(self):
        staff, _, _ = base.make_users()
        collection = Collection.objects.create(name="Pruned")
        old = _entry(staff, collection, days_ago=100)
        kept = _entry(staff, collection, days_ago=1)
        base.run_burst_worker()
        self.assertFalse(Question.objects.filter(pk=old.pk).exists())
        self.assertTrue(Question.objects.filter(pk=kept.pk).exists())
        # Queued once per KB_QUESTION_PRUNE_SECONDS, whichever worker looks.
        old = _entry(staff, collection, days_ago=100)
        base.run_burst_worker()
        self.assertTrue(Question.objects.filter(pk=old.pk).exists())


class CapWhileLoggingTestCase(DemoTestCase):
    @override_settings(KB_QUESTION_LOG_MAX=2)
    def test_a_flood_of_questions_keeps_the_newest(self):
        self.client.force_login(self.staff)
        ids = [self.api_ask(q).json()["id"] for q in (ROLLBACK, CAPITAL, SOURDOUGH)]
        left = set(Question.objects.values_list("pk", flat=True))
        self.assertEqual(left, set(ids[1:]))


EDITED_PREFIX = "A new paragraph.\n\n"


class ReplayTestCase(DemoTestCase):
    def _logged(self, question: str = ROLLBACK) -> Question:
        self.client.force_login(self.staff)
        return Question.objects.get(pk=self.api_ask(question).json()["id"])

    def _edit_runbook(self, reword: bool = True):
        source = self.demo.sources.get(file_name="deployment-runbook.md")
        # A paragraph under the title: every later citation moves.
        text = source.text.replace("\n\n", "\n\n" + EDITED_PREFIX, 1)
        if reword:  # and the cited rule says something else
            text = text.replace("Roll back at once", "Roll back within a minute")
        source = base.ingest_text(self.demo, source.file_name, text)

    def _replay_json(self, entry: Question) -> dict:
        out = io.StringIO()
        call_command("kb_replay", str(entry.pk), "--json", stdout=out)
        return json.loads(out.getvalue())

    def test_replay_on_an_unchanged_index_changes_nothing(self):
        entry = self._logged()
        shown = self._replay_json(entry)
        self.assertEqual(
            list(shown),
            [
                "id",
                "changed",
                "citations_before",
                "citations_after",
                "sections_gained",
                "sections_lost",
            ],
        )
        self.assertEqual(shown["id"], entry.pk)
        self.assertIs(shown["changed"], False)
        self.assertEqual(shown["citations_before"], shown["citations_after"])
        self.assertEqual((shown["sections_gained"], shown["sections_lost"]), ([], []))

    def test_the_same_places_cited_in_another_order_are_no_change(self):
        entry = self._logged()
        self.assertGreater(len(entry.citations), 1)
        Question.objects.filter(pk=entry.pk).update(citations=entry.citations[::-1])
        entry.refresh_from_db()
        self.assertIs(self._replay_json(entry)["changed"], False)

    def test_replay_shows_a_changed_citation_after_a_source_edit(self):
        entry = self._logged()
        before = entry.citations[0]
        self._edit_runbook()
        shown = self._replay_json(entry)
        self.assertIs(shown["changed"], True)
        self.assertEqual(shown["citations_before"][0]["start"], before["start"])
        moved = [c for c in shown["citations_after"] if c["file"] == before["file"]]
        self.assertNotIn(before["start"], [c["start"] for c in moved])
        self.assertEqual(set(shown["citations_after"][0]), set(before) - {"text"})
        out = io.StringIO()
        call_command("kb_replay", str(entry.pk), stdout=out)
        self.assertIn("The citations changed.", out.getvalue())

    def test_cited_text_moved_by_an_edit_above_it_is_no_change(self):
        entry = self._logged()
        self._edit_runbook(reword=False)
        shown = self._replay_json(entry)
        self.assertNotEqual(shown["citations_before"], shown["citations_after"])
        self.assertIs(shown["changed"], False)
        outcome = jobs.replay_recent(self.demo.pk, 10)
        report = ReplayReport.objects.get(pk=outcome["report"])
        self.assertEqual((report.replayed, report.changed), (1, []))

    def test_a_retitled_source_cites_the_same_places(self):
        # Every heading path starts with the source's title; a new title is no
        # change of what is cited (a document without a level-1 heading of its own).
        source = base.ingest_text(
            self.demo,
            "parking.md",
            b"## Car park\n\nThe staff car park closes "
            b"at 19:30 on weekdays and stays shut at weekends.\n",
        )
        entry = self._logged("When does the staff car park close?")
        self.assertIn("parking.md", {c["file"] for c in entry.citations})
        source.refresh_from_db()
        source.title, source.is_title_auto = "Parking rules", False
        source.save()
        source.queue_new_version()
        ingestion.ingest(source.pk)
        shown = self._replay_json(entry)
        paths = {c["heading_path"] for c in shown["citations_after"]}
        self.assertIn("Parking rules > Car park", paths)
        self.assertIs(shown["changed"], False)
        self.assertEqual((shown["sections_gained"], shown["sections_lost"]), ([], []))

    def test_a_replay_report_tells_sources_of_one_title_apart(self):
        texts = {  # one title, two texts (one text twice is quoted once)
            "zebra-a.md": b"The zebra crossing rule: cyclists dismount and walk "
            b"across every zebra crossing.",
            "zebra-b.md": b"At night the zebra crossing rule for cyclists also "
            b"asks for lights while they walk across.",
        }
        for name, text in texts.items():
            base.ingest_text(self.demo, name, b"# Name test\n\n" + text + b"\n")
        entry = self._logged("What is the zebra crossing rule for cyclists?")
        files = {c["file"] for c in entry.citations}
        self.assertEqual(files, {"zebra-a.md", "zebra-b.md"})
        self.demo.sources.filter(file_name__startswith="zebra-").delete()
        outcome = jobs.replay_recent(self.demo.pk, 10)
        report = ReplayReport.objects.get(pk=outcome["report"])
        page = self.client.get(
            reverse("admin:kb_replayreport_change", args=[report.pk])
        )
        self.assertContains(
            page, "no longer cites Name test (zebra-a.md), Name test (zebra-b.md)"
        )
        self.assertNotContains(page, "Name test, Name test")

    def test_the_admin_shows_the_logged_answer_beside_the_new_one(self):
        entry = self._logged()
        self._edit_runbook()
        url = reverse("admin:kb_question_replay", args=[entry.pk])
        response = self.client.get(url)
        self.assertContains(response, "The citations changed since it was asked.")
        self.assertContains(response, "Logged answer")
        self.assertContains(response, before_text(entry))

    def test_a_replay_report_lists_the_answers_that_changed(self):
        changed = self._logged()
        same = self._logged("What is the office wifi password?")
        self._edit_runbook()
        outcome = jobs.replay_recent(self.demo.pk, 10)
        report = ReplayReport.objects.get(pk=outcome["report"])
        self.assertEqual((report.status, report.replayed), ("done", 2))
        self.assertEqual([c["id"] for c in report.changed], [changed.pk])
        self.assertNotIn(same.pk, [c["id"] for c in report.changed])
        page = self.client.get(
            reverse("admin:kb_replayreport_change", args=[report.pk])
        )
        self.assertContains(page, changed.question)
        # What changed: the rollback rule cited with other words.
        self.assertContains(
            page, "cites other text of Deployment runbook &gt; Deploy &gt; Rollback"
        )
        # The same job run again (a queue restored from an older state): the
        # finished report is kept as it is, and no other is made.
        again = jobs.replay_recent(self.demo.pk, 10, report.pk)
        self.assertEqual(again["report"], report.pk)
        self.assertEqual(ReplayReport.objects.count(), 1)
        report.refresh_from_db()
        self.assertEqual([c["id"] for c in report.changed], [changed.pk])

    def test_replay_of_a_restricted_collection_stays_in_its_group(self):
        entry = self._logged()
        self.demo.groups.add(Group.objects.create(name="legal"))
        permissions.ensure_groups()
        self.editor.groups.add(Group.objects.get(name=permissions.ADMIN))
        self.client.force_login(self.editor)
        url = reverse("admin:kb_question_replay", args=[entry.pk])
        self.assertEqual(self.client.get(url).status_code, 404)

    def test_an_unknown_id_is_a_clear_error(self):
        from django.core.management.base import CommandError

        with self.assertRaisesMessage(CommandError, "No logged question with id 999"):
            call_command("kb_replay", "999")


RUNBOOK = "deployment-runbook.md"
ROLLBACK_RULE = "Roll back at once if the HTTP 5xx error rate stays above 2%"
NEW_SECTION = (
    "### Safety first\n\nAlways keep an epipen near the canary dashboard, in case "
    "of anaphylaxis.\n\n"
)


class CitationLinkTestCase(DemoTestCase):
    """An answer's citation link opened after its source changed (views.section)."""

    log_in = True

    def _rollback_citation(self) -> dict:
        cites = self.api_ask(ROLLBACK).json()["citations"]
        cite = next(c for c in cites if c["heading_path"].endswith("> Rollback"))
        logged = Question.objects.latest("created").citations
        text = next(c["text"] for c in logged if c["n"] == cite["n"])
        self.assertIn(ROLLBACK_RULE, text)
        return {**cite, "text": text}

    def _re_upload(self, edit) -> Source:
        source = self.demo.sources.get(file_name=RUNBOOK)
        text = edit(source.text)
        return base.ingest_text(self.demo, RUNBOOK, text)

    def _marked(self, page: str) -> tuple[str, int, int]:
        found = re.search(
            r'<mark id="cited" aria-label="cited passage, characters (\d+) to '
            r'(\d+)">(.*?)</mark>',
            page,
            re.S,
        )
        self.assertIsNotNone(found, "nothing marked")
        return html.unescape(found.group(3)), int(found[1]), int(found[2])

    def test_an_old_link_marks_the_cited_text_where_it_now_is(self):
        cite = self._rollback_citation()
        source = self._re_upload(
            lambda text: text.replace("### Rollback\n", NEW_SECTION + "### Rollback\n")
        )
        response = self.client.get(cite["url"], follow=True)
        page = response.content.decode()
        marked, start, end = self._marked(page)
        self.assertEqual(marked, cite["text"])  # exactly it, no other text
        self.assertEqual(source.text[start:end], cite["text"])
        self.assertEqual(start, cite["start"] + len(NEW_SECTION))
        self.assertIn(
            "The source has changed since the answer cited it (version 1; this "
            f"index is of version 2): the cited text is now at characters "
            f"{start}–{end}",
            page,
        )
        # The header's range is the marked one.
        self.assertIn(f"cited: characters {start}–{end}</a>", page)
        self.assertNotIn("epipen", marked)
        # The page the text was found from hands its place on, searched once.
        last_url = response.redirect_chain[-1][0]
        self.assertIn(f"at={start}-{end}", last_url)

    def test_an_old_link_to_text_since_removed_says_so_and_marks_nothing(self):
        cite = self._rollback_citation()
        self._re_upload(
            lambda text: text.replace(cite["text"], "Ask the on-call lead first.")
        )
        response = self.client.get(cite["url"], follow=True)
        self.assertEqual(response.status_code, 200)
        self.assertContains(response, "the cited text is no longer in it")
        self.assertNotContains(response, '<mark id="cited"')
        self.assertNotContains(response, "cited: characters")
        # The text as it was cited, beside the section nearest its old place.
        self.assertContains(response, escape(ROLLBACK_RULE))
        self.assertContains(response, "Ask the on-call lead first.")

    def test_an_old_link_to_text_partly_removed_marks_what_is_left(self):
        cite = self._rollback_citation()
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", cite["text"]) if s]
        self.assertGreater(len(sentences), 1, cite["text"])
        kept, gone = sentences[0], sentences[-1]
        self._re_upload(lambda text: text.replace(gone, "Ask the on-call lead."))
        response = self.client.get(cite["url"], follow=True)
        page = response.content.decode()
        self.assertIn("only part of the cited text is still in it", page)
        marked, _, _ = self._marked(page)
        self.assertIn(kept, marked)
        self.assertNotIn("Ask the on-call lead.", marked)
        # The text as it was cited, beside.
        cited_box = page.split('<blockquote class="cited">', 1)[1].split(
            "</blockquote>"
        )[0]
        self.assertIn(" ".join(gone.split()[-3:]), cited_box)

    def test_a_link_to_a_deleted_source_says_the_source_was_deleted(self):
        cite = self._rollback_citation()
        self.demo.sources.get(pk=cite["source_id"]).delete()
        response = self.client.get(cite["url"])
        self.assertContains(
            response,
            "The source this link cites, “Deployment runbook” "
            f"({RUNBOOK}), has been deleted.",
            status_code=404,
        )
        self.assertNotContains(response, "does not say which", status_code=404)
        # Without a source in the link, the page says that instead.
        bare = cite["url"].split("&source=")[0]
        response = self.client.get(bare)
        self.assertContains(
            response, "this link does not say which source it cites", status_code=404
        )


def before_text(entry: Question) -> str:
    return entry.citations[0]["text"].split("\n")[0][:40]


class GapsTestCase(DemoTestCase):
    url = reverse("admin:kb_question_gaps")

    def setUp(self):
        permissions.ensure_groups()
        self.editor.groups.add(Group.objects.get(name=permissions.CONTENT_EDITOR))

    def _ask_as(self, user, question: str) -> Question:
        self.client.force_login(user)
        return Question.objects.get(pk=self.api_ask(question).json()["id"])

    def test_a_declined_question_appears_and_becomes_a_golden_case(self):
        entry = self._ask_as(self.staff, CAPITAL)
        self.client.force_login(self.editor)
        page = self.client.get(self.url)
        self.assertContains(page, CAPITAL)
        link = page.context["gaps"][0]
        add = self.client.get(
            reverse("admin:kb_goldencase_add"),
            {
                "collection": self.demo.pk,
                "question": CAPITAL,
                "from_question": entry.pk,
                "external_id": f"asked-{entry.pk}",
            },
        )
        self.assertEqual(link.latest, entry)
        self.assertContains(add, CAPITAL)
        self.assertContains(add, 'id="kb-span-picker"')
        self.assertEqual(
            add.context["adminform"].form["collection"].value(), str(self.demo.pk)
        )
        self._make_case(entry)
        case = GoldenCase.objects.get(external_id=f"asked-{entry.pk}")
        self.assertTrue(case.is_real_question)
        self.assertEqual(case.from_question, entry)
        entry.refresh_from_db()
        self.assertIsNotNone(entry.handled)
        self.assertEqual(self.client.get(self.url).context["gaps"], [])

    def _make_case(self, entry: Question, follow: bool = False):
        source = self.demo.sources.get(file_name="office-faq.txt")
        span = {
            "file": source.file_name,
            "start": 0,
            "end": 20,
            "text": source.text[:20],
        }
        response = self.client.post(
            reverse("admin:kb_goldencase_add"),
            {
                "collection": self.demo.pk,
                "external_id": f"asked-{entry.pk}",
                "question": entry.question,
                "kind": "free",
                "required_spans": json.dumps([span]),
                "from_question": entry.pk,
            },
            follow=follow,
        )
        if not follow:
            self.assertEqual(response.status_code, 302, response.content[:3000])
        return response

    def test_a_not_helpful_answer_s_case_stays_open_until_its_answer_holds(self):
        """Issue #28: a case made from an answer marked not helpful is scored on
        the answer, so its gap closes only when a run of the live configuration
        shows the answer quoting every span, not as soon as retrieval finds it."""
        from kb import answering, retrieval

        entry = self._ask_as(self.staff, ROLLBACK)
        self.feedback({"id": entry.pk, "helpful": False, "note": "Quote the rule."})
        self.client.force_login(self.editor)
        link = self.client.get(self.url).content.decode()
        self.assertIn("on_answer=on", link)  # "Make a golden case" ticks it
        response = self._make_case(entry, follow=True)
        self.assertContains(response, "The case is scored on the answer")
        case = GoldenCase.objects.get(external_id=f"asked-{entry.pk}")
        self.assertTrue(case.on_answer)
        entry.refresh_from_db()
        self.assertIsNone(entry.handled)
        self.assertEqual(len(self.client.get(self.url).context["gaps"]), 1)

        # Retrieval holds the span (a sentence of the top passage), but the
        # answer does not quote it.
        result = retrieval.retrieve(self.demo, ROLLBACK)
        quoted = answering.extractive(result).sentences
        passage = result.passages[0]
        unquoted = next(
            (passage.start + m.start(), passage.start + m.end())
            for m in re.finditer(r"[^.\n]{25,}\.", passage.text)
            if not any(
                s.passage.file_name == passage.file_name
                and s.start < passage.start + m.end()
                and passage.start + m.start() < s.end
                for s in quoted
            )
        )
        self._set_span(case, passage.file_name, *unquoted)
        run = evaluation.execute_run(evaluation.start_run(self.demo).pk)
        outcome = next(c for c in run.cases if c["id"] == case.external_id)
        self.assertTrue(outcome["hit"])
        self.assertFalse(outcome["answer_hit"])
        self.assertFalse(outcome["passed"])
        entry.refresh_from_db()
        self.assertIsNone(entry.handled)
        self.client.force_login(self.staff)
        page = self.client.get(
            reverse("admin:kb_evalrun_dashboard"),
            {"collection": self.demo.pk, "run": run.pk},
        )
        self.assertContains(page, "scored on the answer, retrieval held every span")

        # Once the answer quotes it (here: the span is the sentence it quotes),
        # the next run closes the gap and says which run showed it.
        first = quoted[0]
        self._set_span(case, first.passage.file_name, first.start, first.end)
        run = evaluation.execute_run(evaluation.start_run(self.demo).pk)
        outcome = next(c for c in run.cases if c["id"] == case.external_id)
        self.assertTrue(outcome["passed"])
        entry.refresh_from_db()
        self.assertIsNotNone(entry.handled)
        self.assertIn(f"quotes every span in run #{run.pk}", entry.handled_note)
        self.client.force_login(self.editor)
        self.assertEqual(self.client.get(self.url).context["gaps"], [])

    def _set_span(self, case: GoldenCase, name: str, start: int, end: int) -> None:
        text = self.demo.sources.get(file_name=name).text[start:end]
        GoldenCase.objects.filter(pk=case.pk).update(
            required_spans=[{"file": name, "start": start, "end": end, "text": text}]
        )

    def test_not_helpful_answers_appear_with_their_note(self):
        entry = self._ask_as(self.staff, ROLLBACK)
        self.feedback({"id": entry.pk, "helpful": False, "note": "Needs the freeze."})
        self.client.force_login(self.editor)
        page = self.client.get(self.url)
        self.assertContains(page, ROLLBACK)
        self.assertContains(page, "Needs the freeze.")

    def test_similar_questions_are_one_row_with_their_count(self):
        self._ask_as(self.staff, SOURDOUGH)
        self._ask_as(self.staff, SOURDOUGH_AGAIN)
        self._ask_as(self.staff, CAPITAL)
        self.client.force_login(self.editor)
        gaps = self.client.get(self.url).context["gaps"]
        self.assertEqual(sorted(g.count for g in gaps), [1, 2])
        self.assertEqual(
            {e.question for e in gaps[0].entries}, {SOURDOUGH, SOURDOUGH_AGAIN}
        )

    def test_mark_handled_with_a_note(self):
        first = self._ask_as(self.staff, SOURDOUGH)
        second = self._ask_as(self.staff, SOURDOUGH_AGAIN)
        self.client.force_login(self.editor)
        response = self.client.post(
            reverse("admin:kb_question_handled"),
            {"ids": f"{first.pk},{second.pk}", "note": "Out of scope."},
        )
        self.assertRedirects(response, self.url)
        for entry in (first, second):
            entry.refresh_from_db()
            self.assertEqual(entry.handled_note, "Out of scope.")
            self.assertEqual(entry.handled_by, self.editor)
        self.assertNotContains(self.client.get(self.url), SOURDOUGH)
        bad = self.client.post(reverse("admin:kb_question_handled"), {"ids": "x"})
        self.assertRedirects(bad, self.url)

    def test_a_lone_surrogate_in_the_handled_note_is_refused_plainly(self):
        entry = self._ask_as(self.staff, SOURDOUGH)
        self.client.force_login(self.editor)
        url = reverse("admin:kb_question_handled")
        page = post_utf7(self.client, url, {"ids": entry.pk, "note": "a\ud800b"})
        page = self.client.get(page["Location"])
        self.assertContains(page, "Not marked: Note: The note contains a lone")
        entry.refresh_from_db()
        self.assertIsNone(entry.handled)

    def test_a_refused_mark_handled_says_why_plainly(self):
        self.client.force_login(self.editor)
        url = reverse("admin:kb_question_handled")
        page = self.client.post(url, {"ids": "x"}, follow=True)
        self.assertContains(
            page, "Not marked: Questions: Not logged question ids, comma-separated."
        )
        self.assertNotContains(page, "* ids")

    def test_only_editors_see_the_gaps_page(self):
        self.assertEqual(self.client.get(self.url).status_code, 302)  # anonymous
        self.client.force_login(self.editor)
        self.editor.groups.clear()
        self.assertEqual(self.client.get(self.url).status_code, 403)
        url = reverse("admin:kb_question_handled")
        self.assertEqual(self.client.post(url, {"ids": "1"}).status_code, 403)
        self.assertEqual(self.client.get(url).status_code, 405)

    def test_gaps_of_a_restricted_collection_stay_in_its_group(self):
        secret = Collection.objects.create(name="Secret")
        secret.groups.add(Group.objects.create(name="legal"))
        Question.objects.create(
            user=self.staff,
            collection=secret,
            question="secret plans?",
            answerer="none",
            is_declined=True,
        )
        self.client.force_login(self.editor)
        self.assertNotContains(self.client.get(self.url), "secret plans?")
        self.client.force_login(self.staff)
        self.assertContains(self.client.get(self.url), "secret plans?")


class RealQuestionRecallTestCase(DemoTestCase):
    def test_cases_from_real_questions_get_their_own_recall(self):
        case = GoldenCase.objects.filter(collection=self.demo).first()
        case.is_real_question = True
        case.save()
        run = evaluation.execute_run(evaluation.start_run(self.demo).pk)
        real = run.aggregate["real_questions"]
        self.assertEqual(real["n"], 1)
        # The figure is that case's own outcome, not the whole set's.
        mine = [row for row in run.cases if row.get("real")]
        self.assertEqual(len(mine), 1)
        self.assertEqual(real["recall_at_k"], float(mine[0]["hit"]))
        self.assertEqual(real["context_tokens_mean"], mine[0]["context_tokens"])
        self.client.force_login(self.staff)
        page = self.client.get(reverse("admin:kb_evalrun_dashboard"))
        self.assertContains(page, "from real questions")


class RealQuestionExportTestCase(DemoTestCase):
    def test_the_real_question_mark_travels_in_json_lines(self):
        case = GoldenCase.objects.filter(collection=self.demo).first()
        case.is_real_question = True
        case.save()
        line = golden.case_line(case)
        self.assertIs(json.loads(line)["real_question"], True)
        case.is_real_question = False
        case.save()
        self.assertEqual(golden.import_cases(self.demo, line)["updated"], 1)
        case.refresh_from_db()
        self.assertTrue(case.is_real_question)
        self.assertIs(golden.parse_cases(line)[0]["real"], True)

    def test_the_scored_on_the_answer_mark_travels_in_json_lines(self):
        case = GoldenCase.objects.filter(collection=self.demo).first()
        case.on_answer = True
        case.save()
        line = golden.case_line(case)
        self.assertIs(json.loads(line)["on_answer"], True)
        case.on_answer = False
        case.save()
        self.assertEqual(golden.import_cases(self.demo, line)["updated"], 1)
        case.refresh_from_db()
        self.assertTrue(case.on_answer)


class GapThresholdBenchmarkTestCase(SimpleTestCase):
    def test_kb_bench_gaps_prints_the_figures_behind_the_threshold(self):
        out = io.StringIO()
        call_command("kb_bench", "gaps", stdout=out)
        self.assertIn("| paraphrase pairs | 45 |", out.getvalue())
        self.assertIn("| 0.6 |", out.getvalue())


class ReplayReportJobTestCase(TransactionTestCase):
    """TransactionTestCase: the worker process only sees committed rows."""

    def setUp(self):
        base.forget_jobs()

    @pytest.mark.slow
    def test_a_queued_replay_report_runs_in_a_worker(self):
        from kb import answering

        staff, _, _ = base.make_users()
        collection = Collection.objects.create(name="Runbook")
        source = base.ingest_text(
            collection, "deploy.md", b"# Deploy\n\nRoll back when errors rise.\n"
        )
        result, reply = answering.ask(collection, "When do I roll back?")
        entry = questions.log(staff, collection, result, reply)
        uploads.store_source(
            collection,
            "deploy.md",
            b"# Deploy\n\nFirst, look.\n\nRoll back when errors rise above 2%.\n",
        )
        ingestion.ingest(source.pk)
        questions.enqueue_replay_report(collection)
        base.run_burst_worker()
        report = ReplayReport.objects.get(collection=collection)
        self.assertEqual((report.status, report.replayed), ("done", 1))
        self.assertEqual([c["id"] for c in report.changed], [entry.pk])
