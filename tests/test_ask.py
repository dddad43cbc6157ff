from __future__ import annotations

import importlib
import json

from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test import TestCase, override_settings
from django.urls import reverse
from django.utils.html import escape

from kb import (
    access,
    answerer,
    answering,
    embedding,
    evaluation,
    ingestion,
    llm,
    retrieval,
)
from kb.models import Chunk, Collection, GoldenCase, Section, Source
from tests import base

ROLLBACK_RULE = "Roll back at once if the HTTP 5xx error rate stays above 2%"
ROLLBACK_EXCEPTION = "do not roll back; roll forward with a fix instead"


class DemoTestCase(base.DemoTestCase):
    log_in = False  # the tests here say who asks


class AnswerTestCase(DemoTestCase):
    def test_the_rollback_answer_includes_the_neighbouring_exception(self):
        result, reply = answering.ask(self.demo, "When should I roll back a deploy?")
        self.assertIn(ROLLBACK_RULE, reply.text)
        self.assertIn(ROLLBACK_EXCEPTION, reply.text)
        paths = {c.heading_path for c in reply.citations}
        self.assertIn("Deployment runbook > Deploy > Rollback", paths)
        self.assertIn("Deployment runbook > Deploy > Rollback exceptions", paths)

    def test_every_answer_cites_and_every_citation_contains_its_sentence(self):
        for case in GoldenCase.objects.filter(collection=self.demo):
            result, reply = answering.ask(self.demo, case.question)
            self.assertTrue(result.passages, case.external_id)
            self.assertTrue(reply.citations, f"{case.external_id}: no citation")
            by_n = {c.n: c for c in reply.citations}
            for sentence in reply.sentences:
                cite = by_n[sentence.citation]
                text = self.demo.sources.get(pk=cite.source_id).text
                self.assertTrue(0 <= cite.start < cite.end <= len(text))
                self.assertIn(sentence.text, text[cite.start : cite.end])
                self.assertIn(f"[{cite.n}]", reply.text)

    def test_the_context_stays_within_the_budget(self):
        questions = GoldenCase.objects.filter(collection=self.demo)
        for budget in (300, 800, 1200):
            for question in questions.values_list("question", flat=True):
                result = retrieval.retrieve(self.demo, question, budget=budget)
                self.assertLessEqual(result.context_tokens, budget, question)
                self.assertTrue(result.passages)

    def test_the_question_embedded_beside_the_keyword_leg_is_the_one_searched(self):
        # The question is embedded on another thread while keyword search runs
        # (issue #27): the same vector, and a total that is the wall clock.
        question = "When should I roll back a deploy?"
        embedder = embedding.for_collection(self.demo)
        for _ in range(3):
            result = retrieval.retrieve(self.demo, question, mode="hybrid")
            self.assertAlmostEqual(
                float(result.vector @ embedder.embed_query(question)), 1.0, places=5
            )
            stages = result.timings_ms
            sequential = ("keyword_search", "vector_search", "section_search")
            self.assertGreaterEqual(
                stages["total"], sum(stages[s] for s in sequential) - 0.05
            )
            self.assertGreater(stages["embed"], 0)
        only_keywords = retrieval.retrieve(self.demo, question, mode="keyword")
        self.assertIsNone(only_keywords.vector)
        self.assertNotIn("embed", only_keywords.timings_ms)

    def test_every_passage_is_the_source_text_at_its_range(self):
        texts = dict(self.demo.sources.values_list("pk", "text"))
        for case in GoldenCase.objects.filter(collection=self.demo):
            for passage in retrieval.retrieve(self.demo, case.question).passages:
                text = texts[passage.source_id]
                self.assertEqual(passage.text, text[passage.start : passage.end])

    def test_merged_passages_keep_every_original_location(self):
        result = retrieval.retrieve(self.demo, "When should I roll back a deploy?")
        for passage in result.passages:
            for loc in passage.locations:
                self.assertTrue(passage.start <= loc.start < loc.end <= passage.end)
        starts = [(p.source_id, p.start, p.end) for p in result.passages]
        for i, (sid, s, e) in enumerate(starts):
            for sid2, s2, e2 in starts[i + 1 :]:
                self.assertFalse(sid == sid2 and s < e2 and s2 < e, "overlap kept")

    def _deprecate_runbook(self) -> Source:
        """The runbook marked deprecated and indexed again, as an edit does."""
        source = self.demo.sources.get(file_name="deployment-runbook.md")
        source.metadata = {"deprecated": True}
        source.save()
        source.queue_new_version()
        ingestion.ingest(source.pk)
        return source

    def test_deprecated_sources_are_filtered_out(self):
        source = self._deprecate_runbook()
        question = "When should I roll back a deploy?"
        for mode in ("vector", "keyword", "hybrid"):
            result = retrieval.retrieve(self.demo, question, mode=mode)
            self.assertTrue(result.passages, mode)
            self.assertNotIn(source.pk, {p.source_id for p in result.passages}, mode)
            with_old = retrieval.retrieve(
                self.demo, question, mode=mode, include_deprecated=True
            )
            self.assertIn(source.pk, {p.source_id for p in with_old.passages}, mode)

    def test_deprecated_sources_stay_out_whatever_the_metadata_policy(self):
        # "Ignore" decides what is embedded and returned; deprecation is a
        # control, read on every chunk by the searches.
        self.demo.metadata_policy = {"deprecated": "ignore"}
        self.demo.save(update_fields=["metadata_policy"])
        source = self._deprecate_runbook()
        question = "When should I roll back a deploy?"
        for mode in ("vector", "keyword", "hybrid"):
            result = retrieval.retrieve(self.demo, question, mode=mode)
            self.assertNotIn(source.pk, {p.source_id for p in result.passages}, mode)

    def test_chunks_indexed_without_the_flag_get_it_from_the_migration(self):
        # Indexed before the flag was a control field, under a policy that ignored
        # it: migration 0013 puts it on the chunks, so the source leaves answers.
        migration = importlib.import_module(
            "kb.migrations.0013_deprecated_flag_on_chunks"
        )
        source = self.demo.sources.get(file_name="deployment-runbook.md")
        self.demo.sources.filter(pk=source.pk).update(metadata={"deprecated": True})
        flagged = Chunk.objects.filter(source=source, metadata__deprecated=True)
        self.assertFalse(flagged.exists())
        with connection.cursor() as cursor:
            cursor.execute(migration.FLAG_CHUNKS)
        self.assertEqual(flagged.count(), source.chunks.count())
        for mode in ("vector", "keyword", "hybrid"):
            result = retrieval.retrieve(
                self.demo, "When should I roll back a deploy?", mode=mode
            )
            self.assertNotIn(source.pk, {p.source_id for p in result.passages}, mode)

    def test_an_llm_answer_citing_unknown_sections_is_cleaned_and_flagged(self):
        result = retrieval.retrieve(self.demo, "When should I roll back a deploy?")
        reply = llm.check_answer("Roll back fast [1]. Or not [9].", result)
        self.assertNotIn("[9]", reply.text)
        self.assertEqual([c.n for c in reply.citations], [1])
        self.assertFalse(reply.is_trustworthy)

    def test_an_llm_answer_without_citations_is_not_trustworthy(self):
        result = retrieval.retrieve(self.demo, "When should I roll back a deploy?")
        reply = llm.check_answer("Whenever you like.", result)
        self.assertFalse(reply.is_trustworthy)
        self.assertTrue(reply.warnings)

    def test_a_numbered_step_is_never_answered_by_its_marker_alone(self):
        _, reply = answering.ask(self.demo, "rollback' OR 1=1 --")
        self.assertTrue(reply.sentences)
        for sentence in reply.sentences:
            self.assertRegex(sentence.text, r"[A-Za-z]{2}", sentence)


FOREIGN = ["What is the capital of Australia?", "What's a good recipe for sourdough?"]


class OffTopicTestCase(DemoTestCase):
    """A question the collection says nothing about gets no made-up answer."""

    def test_questions_from_elsewhere_are_declined_with_the_closest_sections(self):
        for question in FOREIGN:
            result, reply = answering.ask(self.demo, question)
            self.assertEqual(reply.answerer, "none", question)
            self.assertEqual(reply.citations, [])
            self.assertFalse(reply.is_trustworthy)
            self.assertIn("cosine similarity", reply.warnings[0])
            self.assertTrue(result.passages, "the closest sections are still shown")
        # MiniLM's floor, KB_MIN_SIMILARITY's default, named with its model.
        self.assertIn(
            "an answer needs 0.30, the floor of the collection's model "
            "(all-minilm-l6-v2)",
            reply.warnings[0],
        )

    def test_no_golden_question_is_declined(self):
        for case in GoldenCase.objects.filter(collection=self.demo):
            result, reply = answering.ask(self.demo, case.question)
            self.assertNotEqual(reply.answerer, "none", case.external_id)
            self.assertGreater(result.top_similarity, 0.3, case.external_id)

    def test_full_width_text_is_asked_as_its_ascii_form(self):
        # East Asian input methods type full-width Latin; it got the bicycle
        # answer, marked trustworthy.
        wide = "Ｗｈｅｎ ｓｈｏｕｌｄ Ｉ ｒｏｌｌ ｂａｃｋ ａ ｄｅｐｌｏｙ？"
        result, reply = answering.ask(self.demo, wide)
        self.assertEqual(result.question, "When should I roll back a deploy?")
        self.assertIn(ROLLBACK_RULE, reply.text)

    def test_a_question_with_nothing_to_search_for_is_refused_with_the_reason(self):
        self.client.force_login(self.staff)
        for question in ("🐝🐝🐝", "a", "the of and", "What is it?"):
            response = self.client.post(
                reverse("kb:api-ask"),
                {"question": question, "collection": "Demo"},
                content_type="application/json",
            )
            self.assertEqual(response.status_code, 400, question)
            self.assertIn("no word to search for", response.json()["error"])
        page = self.client.get(
            reverse("kb:ask"), {"q": "a", "collection": self.demo.pk}
        )
        self.assertContains(page, "no word to search for", status_code=400)
        # A name in capitals is something to search for.
        result, _ = answering.ask(self.demo, "What is IT?")
        self.assertEqual(result.question, "What is IT?")

    @override_settings(KB_MIN_SIMILARITY=0)
    def test_the_check_can_be_turned_off(self):
        result, reply = answering.ask(self.demo, FOREIGN[0])
        self.assertEqual(reply.answerer, "extractive")
        self.assertTrue(reply.citations)

    def test_keyword_retrieval_has_no_similarity_to_judge_by(self):
        result = retrieval.retrieve(self.demo, "widget", mode="keyword")
        self.assertIsNone(result.top_similarity)
        self.assertIsNone(answering.off_topic(result))

    def test_the_page_and_the_api_say_so(self):
        staff = self.staff
        self.client.force_login(staff)
        page = self.client.get(
            reverse("kb:ask"), {"q": FOREIGN[0], "collection": self.demo.pk}
        )
        self.assertContains(page, "does not seem to cover the question")
        self.assertContains(page, "Closest sections")
        self.assertNotContains(page, 'class="cite"')
        self.assertNotContains(page, "not backed by citations")
        body = self.client.post(
            reverse("kb:api-ask"),
            {"question": FOREIGN[0], "collection": "Demo"},
            content_type="application/json",
        ).json()
        self.assertEqual((body["answerer"], body["trustworthy"]), ("none", False))
        self.assertEqual(body["citations"], [])
        self.assertLess(body["top_similarity"], 0.3)
        self.assertTrue(body["sections"])


class AskPageTestCase(DemoTestCase):
    url = reverse("kb:ask")

    def _ask(self, q: str, **extra):
        return self.client.get(self.url, {"q": q, "collection": self.demo.pk, **extra})

    def test_anonymous_users_are_sent_to_login(self):
        response = self._ask("rollback?")
        self.assertEqual(response.status_code, 302)
        self.assertIn(reverse("admin:login"), response["Location"])

    def test_non_staff_users_are_sent_to_login(self):
        self.client.force_login(self.alice)
        self.assertEqual(self._ask("rollback?").status_code, 302)

    def test_it_shows_the_cited_answer_and_the_sections(self):
        self.client.force_login(self.staff)
        response = self._ask("When should I roll back a deploy?")
        self.assertContains(response, ROLLBACK_RULE)
        self.assertContains(response, 'class="cite"')
        self.assertContains(response, "context tokens used")
        self.assertContains(response, "matched by")
        # Heading paths start with the document title: it is not shown twice.
        self.assertContains(response, "Deployment runbook › Deploy › Rollback")
        self.assertNotContains(response, "Deployment runbook › Deployment runbook")

    def test_a_retitled_source_shows_its_new_title_once_before_re_indexing(self):
        # Between an editor's title change and the re-index, the live index's
        # paths still start with the old title: it was shown after the new one.
        source = Source.objects.get(collection=self.demo, title="Deployment runbook")
        Source.objects.filter(pk=source.pk).update(title="Runbook v2")
        self.client.force_login(self.staff)
        response = self._ask("When should I roll back a deploy?")
        self.assertContains(response, "Runbook v2 › Deploy › Rollback")
        self.assertNotContains(response, "Deployment runbook")

    def test_a_link_with_other_parameters_shows_the_empty_form(self):
        # A bookmarked or tracked link is no question asked.
        self.client.force_login(self.staff)
        response = self.client.get(
            self.url, {"utm_source": "mail", "collection": self.demo.pk}
        )
        self.assertEqual(response.status_code, 200)
        self.assertNotContains(response, "This field is required")
        self.assertContains(response, f'<option value="{self.demo.pk}" selected>')

    def test_a_login_without_a_safe_next_lands_on_the_ask_page(self):
        for data in ({}, {"next": "https://evil.example/"}):
            response = self.client.post(
                reverse("admin:login"),
                {"username": "staff", "password": "pw-staff-1", **data},
            )
            self.assertRedirects(response, self.url, fetch_redirect_response=False)
            self.client.logout()

    def test_a_title_holding_the_path_separator_is_shown_once(self):
        path = "Settings > Security > Sessions"  # from "# Settings > Security"
        self.assertEqual(
            retrieval.heading_label("Settings > Security", path),
            "Settings > Security › Sessions",
        )

    def test_the_admin_link_is_shown_only_to_those_with_admin_pages(self):
        link = f'<a href="{reverse("admin:index")}">Admin</a>'
        self.client.force_login(self.staff)
        self.assertContains(self.client.get(self.url), link)
        self.client.force_login(self.editor)  # staff without any permission
        self.assertNotContains(self.client.get(self.url), link)
        self.editor.groups.add(Group.objects.create(name="viewers"))
        Group.objects.get(name="viewers").permissions.add(
            Permission.objects.get(codename="view_source")
        )
        self.assertContains(self.client.get(self.url), link)

    def test_with_one_collection_a_question_alone_asks_it(self):
        self.client.force_login(self.staff)
        response = self.client.get(self.url, {"q": "When should I roll back a deploy?"})
        self.assertContains(response, ROLLBACK_RULE)

    def test_an_empty_or_overlong_question_gets_a_clear_message(self):
        self.client.force_login(self.staff)
        self.assertContains(self._ask("   "), "This field is required", status_code=400)
        response = self._ask("why " * 400)
        self.assertContains(response, "the limit is 1000", status_code=400)

    def test_a_nul_character_in_the_question_gets_the_api_s_message(self):
        self.client.force_login(self.staff)
        response = self._ask("roll\x00back")
        message = "The question contains a NUL character (\\x00); remove it"
        self.assertContains(response, message, status_code=400)
        api = self.client.post(
            reverse("kb:api-ask"),
            {"question": "roll\x00back"},
            content_type="application/json",
        )
        self.assertIn(message, api.json()["error"])

    def test_the_ask_box_takes_as_many_characters_as_a_question_may_have(self):
        self.client.force_login(self.staff)
        response = self.client.get(self.url)
        limit = retrieval.MAX_QUESTION_CHARS
        self.assertContains(response, f'maxlength="{limit}"')
        over = self._ask("x" * (limit + 1))
        self.assertContains(over, f"the limit is {limit}", status_code=400)

    def test_html_in_a_question_is_escaped(self):
        self.client.force_login(self.staff)
        response = self._ask("<script>alert(1)</script> rollback")
        self.assertNotContains(response, "<script>alert(1)</script>")
        self.assertContains(response, "&lt;script&gt;alert(1)&lt;/script&gt;")

    def test_html_in_a_source_is_escaped(self):
        base.ingest_text(
            self.demo,
            "evil.md",
            b"# Rollback pranks\n\n<script>alert('x')</script> "
            b"Rollback pranks are forbidden.\n",
        )
        self.client.force_login(self.staff)
        response = self._ask("Are rollback pranks forbidden?")
        self.assertNotContains(response, "<script>alert('x')</script>")
        self.assertContains(response, "&lt;script&gt;")

    def test_a_collection_the_user_cannot_see_is_refused(self):
        secret = Collection.objects.create(name="Secret")
        secret.groups.add(Group.objects.create(name="legal"))
        self.client.force_login(self.editor)
        response = self.client.get(self.url, {"q": "x", "collection": secret.pk})
        self.assertEqual(response.status_code, 400)
        self.assertContains(response, "Select a valid choice", status_code=400)

    def test_the_section_page_highlights_the_cited_passage(self):
        self.client.force_login(self.staff)
        _, reply = answering.ask(self.demo, "When should I roll back a deploy?")
        cite = reply.citations[0]
        response = self.client.get(cite.url)
        text = self.demo.sources.get(pk=cite.source_id).text[cite.start : cite.end]
        self.assertContains(response, '<mark id="cited"')
        self.assertIn(text.split("\n")[0][:40], response.content.decode())

    def test_a_citation_outlives_a_re_index_of_its_source(self):
        self.client.force_login(self.staff)
        _, reply = answering.ask(self.demo, "When should I roll back a deploy?")
        cite = reply.citations[0]
        source = self.demo.sources.get(pk=cite.source_id)
        cited = source.text[cite.start : cite.end]
        ingestion.ingest(source.pk)  # the same text indexed again: new sections
        self.assertFalse(Section.objects.filter(pk=cite.section_id).exists())
        response = self.client.get(cite.url, follow=True)
        self.assertEqual(response.status_code, 200)
        page = response.content.decode()
        self.assertIn(
            f'<mark id="cited" aria-label="cited passage, characters '
            f'{cite.start} to {cite.end}">',
            page,
        )
        self.assertIn(escape(cited.split("\n")[0]), page)
        self.assertNotIn("has changed since", page)
        # Edited and indexed again, with no logged answer holding the cited text:
        # the page says it cannot be found, and marks nothing.
        source.text = "Intro line.\n\n" + source.text
        source.version += 1
        source.save()
        ingestion.ingest(source.pk, source.version)
        response = self.client.get(cite.url, follow=True)
        self.assertContains(response, "the cited text is no longer known")
        self.assertNotContains(response, '<mark id="cited"')
        # Deleted: a page that says so, not a bare 404.
        source.delete()
        response = self.client.get(cite.url)
        self.assertContains(response, "Cited section not found", status_code=404)

    def test_a_citation_to_a_collection_the_user_cannot_see_stays_hidden(self):
        _, reply = answering.ask(self.demo, "When should I roll back a deploy?")
        cite = reply.citations[0]
        ingestion.ingest(cite.source_id)
        self.demo.groups.add(Group.objects.create(name="legal"))
        self.client.force_login(self.editor)  # not in "legal"
        response = self.client.get(cite.url)
        self.assertEqual(response.status_code, 404)
        self.assertNotContains(response, "roll", status_code=404)


class ApiAskTestCase(DemoTestCase):
    url = reverse("kb:api-ask")

    def _post(self, body, **headers):
        data = body if isinstance(body, str) else json.dumps(body)
        return self.client.post(
            self.url, data, content_type="application/json", headers=headers
        )

    def test_it_answers_with_a_session(self):
        self.client.force_login(self.staff)
        response = self._post(
            {"question": "How do I create a widget?", "collection": "Demo"}
        )
        body = response.json()
        self.assertEqual(response.status_code, 200)
        self.assertTrue(body["citations"])
        self.assertLessEqual(body["context_tokens"], body["budget_tokens"] * 1.05)
        for key in ("answer", "sections", "timings_ms"):
            self.assertIn(key, body)
        cite = body["citations"][0]
        for key in (
            "n",
            "source",
            "file",
            "heading_path",
            "chunk_indexes",
            "start",
            "end",
            "url",
        ):
            self.assertIn(key, cite)

    def test_it_answers_with_a_token(self):
        key = access.create_token(self.staff, "tests")
        response = self._post(
            {"question": "When should I roll back?", "collection": self.demo.pk},
            Authorization=f"Bearer {key}",
        )
        self.assertEqual(response.status_code, 200)

    def test_it_refuses_anonymous_and_wrong_tokens(self):
        self.assertEqual(self._post({"question": "x"}).status_code, 401)
        bad = self._post({"question": "x"}, Authorization="Bearer kb_wrong")
        self.assertEqual(bad.status_code, 401)

    def test_get_is_not_allowed(self):
        self.client.force_login(self.staff)
        self.assertEqual(self.client.get(self.url).status_code, 405)

    def test_bad_input_gets_400(self):
        self.client.force_login(self.staff)
        self.assertEqual(self._post("{not json").status_code, 400)
        empty = self._post({"question": " ", "collection": "Demo"})
        self.assertEqual(empty.status_code, 400)
        self.assertIn("type a question", empty.json()["error"])

    def test_an_invisible_collection_is_refused(self):
        secret = Collection.objects.create(name="Secret")
        secret.groups.add(Group.objects.create(name="legal"))
        key = access.create_token(self.editor, "tests")
        response = self._post(
            {"question": "x", "collection": "Secret"}, Authorization=f"Bearer {key}"
        )
        self.assertEqual(response.status_code, 404)

    def test_a_nul_character_in_the_question_gets_400(self):
        self.client.force_login(self.staff)
        response = self._post({"question": "roll\x00back", "collection": "Demo"})
        self.assertEqual(response.status_code, 400)
        self.assertIn("NUL character", response.json()["error"])

    def test_a_body_that_is_not_utf8_gets_400(self):
        self.client.force_login(self.staff)
        response = self.client.post(
            self.url,
            b'{"question": "caf\xe9", "collection": "Demo"}',
            content_type="application/json",
        )
        self.assertEqual(response.status_code, 400)
        self.assertIn("UTF-8", response.json()["error"])

    def test_a_question_that_is_not_a_string_gets_400(self):
        self.client.force_login(self.staff)
        for question in (["a"], 123, {"q": "rollback"}, True):
            response = self._post({"question": question, "collection": "Demo"})
            self.assertEqual(response.status_code, 400, question)
            self.assertIn('"question" must be a string', response.json()["error"])

    def test_the_collection_is_an_integer_id_or_a_name(self):
        self.client.force_login(self.staff)
        ask = "When should I roll back?"
        for ref in (self.demo.pk, str(self.demo.pk), "Demo"):
            self.assertEqual(
                self._post({"question": ask, "collection": ref}).status_code, 200, ref
            )
        for ref in (True, 1.0, [self.demo.pk], {"id": self.demo.pk}):
            response = self._post({"question": ask, "collection": ref})
            self.assertEqual(response.status_code, 400, ref)
            self.assertIn("collection name or id", response.json()["error"])
        # Only ASCII digits make an id: "١" (Arabic-Indic one) is a name, and unknown.
        arabic_id = "".join(chr(0x0660 + int(d)) for d in str(self.demo.pk))
        for ref in (arabic_id, "De\x00mo"):
            self.assertEqual(
                self._post({"question": ask, "collection": ref}).status_code, 404, ref
            )

    def test_the_only_collection_is_the_default_else_it_is_required(self):
        self.client.force_login(self.staff)
        self.assertEqual(self._post({"question": "rollback?"}).status_code, 200)
        Collection.objects.create(name="Other")
        response = self._post({"question": "rollback?"})
        self.assertEqual(response.status_code, 400)
        self.assertIn('"collection" is required', response.json()["error"])

    def test_a_token_of_a_non_staff_user_is_forbidden(self):
        key = access.create_token(self.alice, "tests")
        response = self._post(
            {"question": "x", "collection": "Demo"}, Authorization=f"Bearer {key}"
        )
        self.assertEqual(response.status_code, 403)
        self.assertIn("Only staff", response.json()["error"])

    @override_settings(KB_LLM_URL="")
    def test_a_session_post_needs_the_csrf_token(self):
        from django.test import Client

        client = Client(enforce_csrf_checks=True)
        client.force_login(self.staff)
        response = client.post(
            self.url,
            json.dumps({"question": "x", "collection": "Demo"}),
            content_type="application/json",
        )
        self.assertEqual(response.status_code, 403)


class AnswerFocusTestCase(TestCase):
    """An answer keeps to what the question asks and opens with it."""

    @classmethod
    def setUpTestData(cls):
        files = {
            "wellness.md": "# Wellness\n\nYoga runs on Tuesdays at noon in the "
            "quiet room. Bring your own mat.\n",
            "travel.md": "# Travel\n\nEconomy class is mandatory for flights "
            "under six hours. Business class needs a director's approval.\n",
            "parking.md": "# Parking\n\n## Visitors\n\nVisitors park in the "
            "front row and sign in at reception.\n\n## Overnight\n\nCars may "
            "stay overnight in the back row with a permit.\n\n## Motorbikes\n\n"
            "Motorbikes park in the covered bay beside the bike racks.\n",
        }
        cls.collection = base.collection_of("Office", files)

    def test_a_sentence_sharing_one_common_word_is_left_out(self):
        _, reply = answering.ask(self.collection, "When does the yoga class run?")
        self.assertIn("Yoga runs on Tuesdays", reply.text)
        self.assertNotIn("Economy class", reply.text)

    def test_the_answer_opens_with_the_sentence_that_answers(self):
        _, reply = answering.ask(self.collection, "Where do motorbikes park?")
        self.assertTrue(
            reply.text.startswith("Motorbikes park in the covered bay"), reply.text
        )


class LongSectionTestCase(TestCase):
    """A section far over the whole-section limit: retrieval reads a window of it."""

    FACT = "The spare key for the server room hangs in the blue cabinet by the door."
    OTHER = "The office goldfish is fed by Priya every Monday and Thursday morning."

    @classmethod
    def setUpTestData(cls):
        entries = [
            f"Entry {i}: the shift handed {i * 3} tickets to the night team and "
            f"closed {i % 7} incidents before the {i % 5 + 1} o'clock review."
            for i in range(260)
        ]
        entries[170] = cls.FACT
        entries[20] = cls.OTHER
        cls.text = "# Shift log\n\n" + "\n\n".join(entries) + "\n"
        cls.collection = Collection.objects.create(name="Log")
        base.ingest_text(cls.collection, "log.md", cls.text)

    def test_it_cites_the_right_text_from_the_middle_of_the_section(self):
        section = self.collection.sources.get().sections.get()
        self.assertGreater(section.tokens, retrieval.MAX_WHOLE_SECTION_TOKENS)
        result = retrieval.retrieve(self.collection, "Where is the server room key?")
        self.assertLessEqual(result.context_tokens, result.budget_tokens)
        found = [p for p in result.passages if self.FACT in p.text]
        self.assertTrue(found, [p.text[:80] for p in result.passages])
        for passage in result.passages:
            self.assertEqual(passage.text, self.text[passage.start : passage.end])

    def test_distant_hits_of_one_section_stay_separate_passages(self):
        # Two windows of one section, with chunks between them that were never
        # loaded: a large budget grows both to their edges without joining them.
        question = "Where is the server room key, and who feeds the goldfish?"
        result = retrieval.retrieve(self.collection, question, budget=6000)
        texts = [p.text for p in result.passages]
        self.assertTrue(any(self.FACT in t for t in texts))
        self.assertTrue(any(self.OTHER in t for t in texts))
        for passage in result.passages:
            self.assertEqual(passage.text, self.text[passage.start : passage.end])


def _ingest_text(name: str, file_name: str, text: str) -> Collection:
    return base.collection_of(name, {file_name: text})


def _offices(count: int, indent: str = "", pipes: bool = True) -> tuple[str, str]:
    """A table of offices (its header line, the document)."""
    cities = ["Lisbon", "Oslo", "Quito", "Perth"]
    cells = [["Office", "City", "Wi-Fi network", "Door code"], ["---"] * 4] + [
        [f"Office {i}", cities[i % 4], f"guest-{i}", str(4000 + i * 7)]
        for i in range(count)
    ]
    lines = [
        indent + (f"| {' | '.join(row)} |" if pipes else " | ".join(row))
        for row in cells
    ]
    text = "# Offices\n\nEvery office, its network and its door code.\n\n"
    return lines[0].strip(), text + "\n".join(lines) + "\n"


class TableRowsTestCase(TestCase):
    """Rows of a table too long to take whole come with the table's header line."""

    QUESTION = "What is the door code of Office 57?"

    @classmethod
    def setUpTestData(cls):
        cls.header, cls.text = _offices(80)
        cls.collection = _ingest_text("Offices", "offices.md", cls.text)

    def _context(self, collection, text, header, budget=200):
        result = retrieval.retrieve(collection, self.QUESTION, budget=budget)
        self.assertLessEqual(result.context_tokens, result.budget_tokens)
        for passage in result.passages:
            self.assertEqual(passage.text, text[passage.start : passage.end])
        texts = [p.text for p in result.passages]
        row = next(i for i, t in enumerate(texts) if "Office 57 |" in t)
        self.assertIn(header, [t.strip() for t in texts[:row]])
        self.assertEqual(sum(t.count(header) for t in texts), 1)
        self.assertNotIn("---", "".join(texts))  # a dash is a token each
        return result, texts

    def test_a_row_far_down_the_table_comes_with_the_column_names(self):
        result, texts = self._context(self.collection, self.text, self.header)
        at = texts.index(self.header)
        header = result.passages[at]
        self.assertEqual(header.matched_label, "header")
        # Not a result of its own when evaluated: it counts with the rows after it.
        ranked = evaluation.ranked_ranges(result.passages)
        self.assertEqual(len(ranked), len(texts) - 1)
        following = result.passages[at + 1].locations[0]
        self.assertEqual(
            ranked[at][:2],
            [
                ("offices.md", header.start, header.end),
                ("offices.md", following.start, following.end),
            ],
        )

    def test_the_answer_shows_a_row_under_its_column_names(self):
        result, _ = self._context(self.collection, self.text, self.header)
        answer = answerer.extractive_answer(
            result, answering.configs_of(result.passages)
        )
        self.assertIn("| Office 57 |", answer.text)
        self.assertLess(answer.text.index(self.header), answer.text.index("Office 57"))
        # A header line is there for a row under it, never on its own.
        said = answer.sentences
        for i, sentence in enumerate(said):
            if sentence.passage.matched == {"header"}:
                row = said[i + 1]
                self.assertTrue(row.text.startswith("|"), row.text)
                self.assertEqual(row.location.section_id, sentence.location.section_id)
        self.assertTrue(
            all(c.start < c.end for c in answer.citations), answer.citations
        )

    def test_a_window_deep_in_a_long_table_finds_the_header_above_it(self):
        header, text = _offices(300)
        collection = _ingest_text("Long offices", "long.md", text)
        section = collection.sources.get().sections.get(heading_path="Offices")
        self.assertGreater(section.tokens, retrieval.MAX_WHOLE_SECTION_TOKENS)
        self._context(collection, text, header)

    def test_indented_and_pipe_less_tables_find_their_header(self):
        for indent, pipes in [("  ", True), ("", False)]:
            with self.subTest(indent=indent, pipes=pipes):
                header, text = _offices(80, indent, pipes)
                name = f"Offices {len(indent)} {pipes}"
                self._context(_ingest_text(name, "o.md", text), text, header)
