"""Late interaction (issue #17): the top sections reordered by the embedding
model's own token states (MaxSim), fused with retrieval's order. Off by default.
Real embedder, real database, the demo collection.
"""

from __future__ import annotations

import numpy as np
import pytest
from django.test import SimpleTestCase, TransactionTestCase, override_settings
from django.urls import reverse

from kb import embedding, evaluation, retrieval
from kb.demo import load_demo
from kb.models import EvalRun
from kb.retrieval import late_interaction, sections
from tests import base
from tests.base import make_users, run_burst_worker

TWO_PARTS = (
    "How many widgets can a Starter workspace create, and what does Starter "
    "cost per month?"
)


class TokenStatesTestCase(SimpleTestCase):
    def test_each_token_read_has_one_unit_row_and_the_specials_none(self):
        embedder = embedding.get_embedder()
        text = "Roll back when the error rate doubles."
        (found,) = embedder.token_states([text])
        expected = embedder.tokenizer.encode(text, add_special_tokens=False).tokens
        self.assertEqual(found.tokens, expected)
        self.assertEqual(found.states.shape, (len(expected), embedder.dim))
        np.testing.assert_allclose(np.linalg.norm(found.states, axis=1), 1, atol=1e-5)

    def test_states_are_read_in_context_and_batching_does_not_change_them(self):
        embedder = embedding.get_embedder()
        texts = ["The bank of the river flooded.", "The bank raised its rates.", "x"]
        alone = [embedder.token_states([t])[0] for t in texts]
        together = embedder.token_states(texts)
        for one, batched in zip(alone, together, strict=True):
            np.testing.assert_allclose(one.states, batched.states, atol=1e-4)
        river, money = together[0], together[1]
        bank = river.tokens.index("bank"), money.tokens.index("bank")
        # The same word, read in two senses: not the same state.
        self.assertLess(river.states[bank[0]] @ money.states[bank[1]], 0.95)

    def test_a_text_over_the_window_is_cut_to_it_not_refused(self):
        embedder = embedding.get_embedder()
        text = embedding.synthetic_text(embedder, embedder.window + 40)
        (found,) = embedder.token_states([text])
        self.assertEqual(len(found.tokens), embedder.window - embedder.special_tokens)


class ScoringTestCase(SimpleTestCase):
    def test_maxsim_is_the_mean_of_each_question_tokens_best_match(self):
        question = np.array([[1.0, 0.0], [0.0, 1.0]])
        text = np.array([[1.0, 0.0], [0.6, 0.8], [-1.0, 0.0]])
        self.assertAlmostEqual(late_interaction.maxsim(question, text), (1 + 0.8) / 2)
        self.assertEqual(late_interaction.maxsim(question, text[:0]), -1.0)

    def test_the_question_is_read_by_its_content_words(self):
        states = late_interaction.question_states("How do I roll back a deploy?")
        self.assertEqual(len(states), 3)  # roll, back, deploy
        everything = late_interaction.question_states("How do I?")
        self.assertEqual(len(everything), 4)  # no content word: all of them

    def test_a_sentence_that_answers_scores_above_one_on_another_subject(self):
        asked = "When is a badge replaced for free?"
        question = late_interaction.question_states(asked)
        answers, other = embedding.get_embedder().token_states(
            [
                "Badges\nA lost badge is replaced for free once a year.",
                "Refunds\nMonthly plans are refunded within 14 days.",
            ]
        )
        self.assertGreater(
            late_interaction.maxsim(question, answers.states),
            late_interaction.maxsim(question, other.states) + 0.05,
        )


class RetrievalTestCase(base.DemoTestCase):
    def _sections(self, result: retrieval.Result) -> list[int]:
        return [loc.section_id for p in result.passages for loc in p.locations]

    def test_it_is_off_by_default(self):
        result = retrieval.retrieve(self.demo, TWO_PARTS, k=5)
        self.assertNotIn("late_interaction", result.timings_ms)
        self.assertNotIn("late_interaction", evaluation.config_of(self.demo))

    @override_settings(KB_LATE_INTERACTION=True)
    def test_on_both_parts_of_a_two_part_question_are_in_the_context(self):
        result = retrieval.retrieve(self.demo, TWO_PARTS, k=5)
        context = "\n".join(p.text for p in result.passages)
        self.assertIn("10 on Starter", context)  # the widget limit
        self.assertIn("€12/month", context)  # the price
        self.assertGreater(result.timings_ms["late_interaction"], 0)
        config = evaluation.config_of(self.demo)
        self.assertEqual(
            (config["late_interaction"], config["late_interaction_top_n"]), (True, 10)
        )

    def test_it_only_reorders_the_top_n_sections_retrieval_found(self):
        hits = retrieval.retrieve(self.demo, TWO_PARTS, k=5).hits
        selected = sections.select(hits, 10)
        ids = [item.section.id for item in selected]
        with override_settings(KB_LATE_INTERACTION_TOP_N=4):
            reordered, ms = late_interaction.rerank(TWO_PARTS, selected, 60)
        after = [item.section.id for item in reordered]
        self.assertEqual(sorted(after[:4]), sorted(ids[:4]))
        self.assertEqual(after[4:], ids[4:])
        self.assertNotEqual(after, ids, "the question's order is the fused one")
        self.assertGreater(ms, 0)

    @override_settings(KB_LATE_INTERACTION=True)
    def test_the_api_reports_its_time(self):
        url = reverse("kb:api-ask")
        data = {"question": TWO_PARTS, "collection": "Demo"}
        body = self.client.post(url, data, content_type="application/json").json()
        self.assertIn("late_interaction", body["timings_ms"])


class DashboardTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees only committed rows.

    @pytest.mark.slow
    def test_an_experiment_with_late_interaction_runs_from_the_dashboard(self):
        staff, _, _ = make_users()
        demo = load_demo(sync=True)
        self.client.force_login(staff)
        page = self.client.get(reverse("admin:kb_evalrun_dashboard"))
        self.assertContains(page, 'name="late_interaction"')
        response = self.client.post(
            reverse("admin:kb_evalrun_run"),
            {"collection": demo.pk, "late_interaction": "on"},
        )
        self.assertEqual(response.status_code, 302)
        run = EvalRun.objects.get()
        self.assertEqual(run.config["overrides"], {"late_interaction": True})
        run_burst_worker()
        run.refresh_from_db()
        self.assertEqual(run.status, EvalRun.Status.DONE, run.error)
        self.assertTrue(run.config["late_interaction"])
        self.assertFalse(run.config["scratch"])  # the live index, no copy
        self.assertTrue(evaluation.is_experiment(run))
        self.assertEqual(len(run.cases), demo.golden_cases.count())
        page = self.client.get(
            reverse("admin:kb_evalrun_dashboard"), {"collection": demo.pk}
        )
        self.assertContains(page, "late interaction")
