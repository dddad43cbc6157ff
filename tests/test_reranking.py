"""The reranking stage (issue #17): a tiny cross-encoder built with onnx.helper.

No real cross-encoder weights exist on this machine. The tiny model's logit is
the count of chosen word tokens in the passage (plus, for the batching test,
random noise), so the order it must produce is known in advance.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import SimpleTestCase, override_settings
from django.urls import reverse

from kb import evaluation, retrieval
from kb.apps import check_reranker
from kb.benchmarks import rerank
from kb.models import Section, Source
from kb.retrieval.reranking import QuestionTooLongError, Reranker
from tests import base

QUESTION = "When should I roll back a deploy?"


class TinyModels:
    """Builds tiny cross-encoders into a temporary folder, one per name."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = Path(tempfile.mkdtemp(prefix="kb-rerank-test-"))
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.vocab = Reranker(rerank.build_tiny_cross_encoder(cls.tmp / "vocab"))
        cls.tokenizer = cls.vocab.tokenizer

    @classmethod
    def model(cls, name: str, words: list[str] = (), **options) -> Path:
        ids = [cls.tokenizer.token_to_id(word) for word in words]
        assert None not in ids, words
        return rerank.build_tiny_cross_encoder(cls.tmp / name, word_ids=ids, **options)


class RerankerTestCase(TinyModels, SimpleTestCase):
    def test_it_takes_its_window_from_config_json_or_the_setting(self):
        self.assertEqual(self.vocab.window, 512)
        self.assertEqual(
            self.vocab.window_source, "config.json max_position_embeddings"
        )
        reranker = Reranker(self.tmp / "vocab", window=64)
        self.assertEqual(
            (reranker.window, reranker.window_source), (64, "KB_RERANKER_WINDOW")
        )
        with self.assertRaisesRegex(ImproperlyConfigured, "exceeds the model's 512"):
            Reranker(self.tmp / "vocab", window=1024)

    def test_it_refuses_a_directory_without_model_or_tokenizer(self):
        directory = self.tmp / "broken"
        shutil.copytree(self.tmp / "vocab", directory)
        (directory / "model.onnx").unlink()
        with self.assertRaisesRegex(ImproperlyConfigured, "has no model.onnx"):
            Reranker(directory)
        (directory / "tokenizer.json").unlink()
        with self.assertRaisesRegex(ImproperlyConfigured, "has no tokenizer.json"):
            Reranker(directory)
        with self.assertRaisesRegex(ImproperlyConfigured, "is not a directory"):
            Reranker(self.tmp / "nowhere")

    def test_it_refuses_a_file_that_is_no_onnx_model(self):
        directory = self.tmp / "garbage"
        shutil.copytree(self.tmp / "vocab", directory)
        (directory / "model.onnx").write_bytes(b"not a model")
        with self.assertRaisesRegex(ImproperlyConfigured, "model.onnx does not load"):
            Reranker(directory)

    def test_the_system_check_names_what_the_directory_lacks(self):
        empty = self.tmp / "empty"
        empty.mkdir(exist_ok=True)
        with override_settings(KB_RERANKER_DIR=str(empty)):
            errors = check_reranker()
        self.assertEqual([e.id for e in errors], ["kb.E002", "kb.E002"])
        self.assertIn("has no model.onnx", errors[0].msg)
        self.assertIn("has no tokenizer.json", errors[1].msg)
        with override_settings(KB_RERANKER_DIR=str(self.tmp / "vocab")):
            self.assertEqual(check_reranker(), [])
        with override_settings(KB_RERANKER_DIR=""):
            self.assertEqual(check_reranker(), [])

    def test_it_scores_each_passage_against_the_question_by_the_model(self):
        reranker = Reranker(self.model("deploy", ["deploy"]))
        passages = ["no match here", "deploy twice: deploy", "one deploy", ""]
        scores = reranker.score("deploy deploy?", passages)
        # The question's own "deploy" has token type 0: the pair is encoded as
        # [CLS] question [SEP] passage [SEP] with the passage as the second segment.
        self.assertEqual([s.score for s in scores], [0.0, 2.0, 1.0, 0.0])
        self.assertEqual([s.truncated for s in scores], [False] * 4)

    def test_it_reads_every_logit_shape_and_models_without_token_types(self):
        passages = ["no match here", "deploy twice: deploy", "one deploy"]
        for output in ("n", "n1", "n2"):
            reranker = Reranker(self.model(f"out-{output}", ["deploy"], output=output))
            scores = [s.score for s in reranker.score("roll back?", passages)]
            self.assertEqual(scores, [0.0, 2.0, 1.0], output)
        reranker = Reranker(self.model("no-types", ["deploy"], token_types=False))
        self.assertNotIn("token_type_ids", reranker.describe()["inputs"])
        # Without segments the model counts the question's "deploy" too.
        scores = [s.score for s in reranker.score("deploy?", passages)]
        self.assertEqual(scores, [1.0, 3.0, 2.0])

    def test_batches_score_as_one_pair_at_a_time(self):
        directory = self.model("noisy", ["deploy"], noise=0.5, seed=3)
        words = "deploy roll back error rate pager alert the a of".split()
        rng = np.random.default_rng(0)
        passages = [" ".join(rng.choice(words, n)) for n in rng.integers(1, 60, 23)]
        one = Reranker(directory, batch_size=1).score(QUESTION, passages)
        for size in (4, 16, 64):
            batched = Reranker(directory, batch_size=size).score(QUESTION, passages)
            np.testing.assert_allclose(
                [s.score for s in batched], [s.score for s in one], atol=1e-4
            )
        self.assertGreater(len({round(s.score, 4) for s in one}), 20)  # not constant

    def test_a_long_passage_is_cut_on_its_side_around_the_focus(self):
        reranker = Reranker(self.model("window-64", ["deploy"], max_positions=64))
        passage = " ".join(["word"] * 100 + ["deploy"] + ["word"] * 100)
        hit = passage.index("deploy")
        question = "how do i roll back?"
        asked = reranker.tokenizer.encode(question, add_special_tokens=False)
        room = 64 - 3 - len(asked.ids)
        [around] = reranker.score(question, [passage], [(hit, hit + 6)])
        self.assertEqual(around.score, 1.0)
        self.assertEqual((around.tokens, around.total_tokens), (room, 201))
        self.assertTrue(around.truncated)
        self.assertIn("deploy", passage[around.start : around.end])
        self.assertLess(around.start, hit)
        # Without a focus, the first window: the word past it is not read.
        [first] = reranker.score(question, [passage])
        self.assertEqual((first.score, first.start, first.tokens), (0.0, 0, room))

    def test_the_cut_falls_between_words(self):
        reranker = Reranker(self.model("window-64-words", [], max_positions=64))
        passage = " ".join(["filler"] * 200)  # two tokens a word: fill ##er
        hit = passage.index("filler", 600)
        for focus in ([(hit, hit + 6)], None):
            [scored] = reranker.score("why?", [passage], focus)
            read = passage[scored.start : scored.end]
            self.assertEqual(read.split(), ["filler"] * (scored.tokens // 2), focus)

    def test_the_question_is_never_cut(self):
        # No token types: the model counts "deploy" on both sides of the pair.
        directory = self.model(
            "window-64-all", ["deploy"], max_positions=64, token_types=False
        )
        reranker = Reranker(directory)
        question = " ".join(["word"] * 20 + ["deploy"])
        [scored] = reranker.score(question, ["deploy " * 50])
        self.assertEqual(scored.score, 1 + (64 - 3 - 21))  # its whole room of words
        with self.assertRaises(QuestionTooLongError):
            reranker.score(" ".join(["word"] * 10 + [question]), ["deploy"])


@override_settings(KB_RERANKER_TOP_N=10)
class RetrievalRerankTestCase(TinyModels, base.DemoTestCase):
    def _report(self, directory: Path, **settings) -> retrieval.Result:
        with override_settings(KB_RERANKER_DIR=str(directory), **settings):
            return retrieval.retrieve(self.demo, QUESTION, k=5)

    def _sections(self, result: retrieval.Result) -> list[int]:
        return [loc.section_id for p in result.passages for loc in p.locations]

    def _unique_word(self, report, position: int) -> str:
        """A word in the scored text of the section at `position` of the report
        and in no other scored section's."""
        texts = dict(Source.objects.values_list("pk", "text"))
        ids = []
        for scored in report.sections:
            text = texts[self._source_of(scored.section_id)]
            ids.append(set(self.tokenizer.encode(text[scored.start : scored.end]).ids))
        others = set().union(*(ids[:position] + ids[position + 1 :]))
        words = sorted(
            token
            for i in ids[position] - others
            if (token := self.tokenizer.id_to_token(i)).isalpha() and len(token) > 3
        )
        self.assertTrue(words, "the demo has no word unique to that section")
        return words[0]

    def _source_of(self, section_id: int) -> int:
        return self.demo.sources.get(sections__id=section_id).pk

    def test_without_a_reranker_nothing_is_reranked(self):
        result = retrieval.retrieve(self.demo, QUESTION, k=5)
        self.assertIsNone(result.reranking)
        self.assertNotIn("rerank", result.timings_ms)

    def test_the_section_the_model_scores_highest_comes_first(self):
        neutral = self._report(self.model("neutral")).reranking
        self.assertEqual([s.rank_before for s in neutral.sections], list(range(1, 11)))
        plain = retrieval.retrieve(self.demo, QUESTION, k=5)
        # A section the fused ranking leaves out of the context (past k = 5, and
        # not merged in as the section before a chosen one).
        position = next(
            i
            for i, s in enumerate(neutral.sections)
            if i >= 5 and s.section_id not in self._sections(plain)
        )
        target = neutral.sections[position].section_id
        word = self._unique_word(neutral, position)
        result = self._report(self.model(f"word-{word}", [word]))
        self.assertIn(target, [loc.section_id for loc in result.passages[0].locations])
        first = result.reranking.sections[0]
        self.assertEqual(
            (first.section_id, first.rank_before, first.score),
            (target, position + 1, 1.0),
        )
        # The rest keep their fused order behind it.
        self.assertEqual(
            [s.section_id for s in result.reranking.sections[1:]],
            [s.section_id for s in neutral.sections if s.section_id != target],
        )
        self.assertIn("rerank", result.timings_ms)

    def test_sections_past_top_n_keep_their_order(self):
        neutral = self._report(self.model("neutral-3")).reranking
        word = self._unique_word(neutral, 3)  # fourth, past a top N of 2
        plain = retrieval.retrieve(self.demo, QUESTION, k=5)
        with override_settings(KB_RERANKER_TOP_N=2):
            result = self._report(self.model(f"past-{word}", [word]))
        self.assertEqual(len(result.reranking.sections), 2)
        # The model scores only the fourth section; it is not among the two read.
        self.assertEqual(self._sections(result), self._sections(plain))

    def test_the_api_says_what_the_reranker_read(self):
        self.client.force_login(self.staff)
        url = reverse("kb:api-ask")
        data = {"question": QUESTION, "collection": "Demo"}
        body = self.client.post(url, data, content_type="application/json").json()
        self.assertIsNone(body["reranking"])
        with override_settings(
            KB_RERANKER_DIR=str(self.model("api")), KB_RERANKER_WINDOW=64
        ):
            body = self.client.post(url, data, content_type="application/json").json()
        reranking = body["reranking"]
        self.assertEqual((reranking["window"], reranking["top_n"]), (64, 10))
        self.assertEqual(len(reranking["sections"]), 10)
        texts = dict(Source.objects.values_list("pk", "text"))
        cut = [s for s in reranking["sections"] if s["truncated"]]
        self.assertTrue(cut, "a 64-token window reads every demo section whole")
        room = (
            64 - 3 - len(self.tokenizer.encode(QUESTION, add_special_tokens=False).ids)
        )
        for scored in cut:
            self.assertLessEqual(scored["tokens"], room)
            self.assertLess(scored["tokens"], scored["total_tokens"])
            section = Section.objects.get(pk=scored["section_id"])
            self.assertTrue(
                section.start <= scored["start"] < scored["end"] <= section.end
            )
            read = texts[section.source_id][scored["start"] : scored["end"]]
            tokens = self.tokenizer.encode(read, add_special_tokens=False).ids
            self.assertEqual(len(tokens), scored["tokens"])

    def test_a_question_too_long_for_the_window_is_not_reranked_and_says_so(self):
        plain = retrieval.retrieve(self.demo, QUESTION, k=5)
        result = self._report(self.model("short"), KB_RERANKER_WINDOW=40)
        self.assertIn("leaves fewer than 32 for a passage", result.reranking.skipped)
        self.assertEqual(result.reranking.sections, [])
        self.assertEqual(self._sections(result), self._sections(plain))

    def test_evaluation_runs_record_the_reranker(self):
        self.assertNotIn("reranker", evaluation.config_of(self.demo))
        with override_settings(KB_RERANKER_DIR=str(self.model("eval"))):
            config = evaluation.config_of(self.demo)
        self.assertEqual(
            config["reranker"],
            {
                "model": "tiny-cross-encoder (random, for tests)",
                "top_n": 10,
                "window": 512,
            },
        )


class RerankBenchmarkTestCase(TinyModels, SimpleTestCase):
    def test_the_speed_row_scores_ten_sections_at_the_pair_length(self):
        row = rerank.time_reranker(self.tmp / "vocab", rerank.TINY_NAME, 256, 2)
        self.assertEqual((row.sections, row.pair_tokens, row.repeats), (10, 256, 2))
        self.assertIn("| tiny test cross-encoder", rerank.markdown([row]))

    @pytest.mark.slow
    def test_the_proxy_is_minilm_with_a_one_logit_head(self):
        reranker = Reranker(rerank.build_minilm_proxy(self.tmp / "proxy"))
        self.assertEqual(reranker.window, 512)
        scores = reranker.score(QUESTION, ["Roll back at once.", "Lunch is at noon."])
        self.assertEqual(len({round(s.score, 6) for s in scores}), 2)
