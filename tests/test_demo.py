"""The demo content `make run` loads: the English handbook and the French one
(issue #27), each with its golden set."""

from __future__ import annotations

import json
import tempfile
from io import StringIO
from pathlib import Path
from unittest import TestCase as PlainTestCase

from django.core.management import call_command
from django.test import TestCase, override_settings
from django.utils import formats

from kb import answering, embedding_models, golden
from kb.demo import (
    FRENCH_COLLECTION,
    FRENCH_CONTENT_DIR,
    FRENCH_GOLDEN_FILE,
    FRENCH_MODEL,
    load_french_demo,
)
from kb.embedding import get_embedder
from kb.models import Chunk, Collection, GoldenCase, Source

SWISS_RULE = "depuis la Suisse et le Royaume-Uni, aucun jour de télétravail"
# From evals/unanswerable/off-topic-fr.jsonl: nothing in the French demo.
# e5 puts them 0.76-0.78 from their nearest chunk, golden questions 0.85-0.90.
OFF_TOPIC = [
    "En quelle année la tour Eiffel a-t-elle été construite ?",
    "Quelle est la capitale de l'Australie ?",
    "Qui a écrit Les Misérables ?",
]


def _read(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.read()


class FrenchGoldenFileTestCase(PlainTestCase):
    def test_each_span_is_its_file_slice_and_occurs_once(self):
        cases = golden.parse_cases(_read(FRENCH_GOLDEN_FILE))
        for case in cases:
            for span in case["required_spans"]:
                with self.subTest(case=case["id"], file=span["file"]):
                    text = _read(FRENCH_CONTENT_DIR / span["file"])
                    self.assertEqual(text[span["start"] : span["end"]], span["text"])
                    self.assertEqual(text.count(span["text"]), 1)

    def test_it_asks_in_french_with_a_few_english_questions(self):
        raw = [json.loads(line) for line in _read(FRENCH_GOLDEN_FILE).splitlines()]
        ids = [case["id"] for case in raw]
        self.assertEqual(len(ids), len(set(ids)))
        english = [i for i in ids if i.startswith("fr-en-")]
        self.assertEqual((len(ids) - len(english), len(english)), (12, 3))
        cited = {s["file"] for case in raw for s in case["required_spans"]}
        self.assertEqual(cited, {p.name for p in FRENCH_CONTENT_DIR.iterdir()})


class SetupLoadsBothDemosTestCase(TestCase):
    def _setup(self) -> str:
        # The French demo's model, loaded before KB_DATA_DIR moves: the process
        # keeps one embedder per model, and one built in the temporary directory
        # would point at files gone after this test.
        get_embedder(FRENCH_MODEL).embed_query("x")
        out = StringIO()
        with (
            tempfile.TemporaryDirectory() as tmp,
            override_settings(KB_DATA_DIR=Path(tmp)),
        ):
            call_command("kb_setup", "--sync", stdout=out)
        return out.getvalue()

    def test_setup_loads_both_collections_and_again_changes_nothing(self):
        printed = self._setup()
        english = Collection.objects.get(name="Demo")
        french = Collection.objects.get(name=FRENCH_COLLECTION)
        for collection in (english, french):
            sources = collection.sources.all()
            self.assertTrue(sources)
            for source in sources:
                self.assertEqual(source.status, Source.Status.INDEXED, source.file_name)
        files = set(french.sources.values_list("file_name", flat=True))
        self.assertEqual(files, {p.name for p in FRENCH_CONTENT_DIR.iterdir()})
        cases = golden.parse_cases(_read(FRENCH_GOLDEN_FILE))
        self.assertEqual(GoldenCase.objects.filter(collection=french).count(), 15)
        self.assertIn(
            f"Imported {len(cases)} golden cases into {FRENCH_COLLECTION}: "
            f"{len(cases)} created",
            printed,
        )
        chunks = Chunk.objects.count()

        again = self._setup()
        self.assertEqual(Collection.objects.filter(is_scratch=False).count(), 2)
        self.assertEqual(Chunk.objects.count(), chunks)
        self.assertIn(f"{FRENCH_COLLECTION} source teletravail.md: unchanged", again)
        self.assertIn(f"{len(cases)} unchanged.", again)


class FrenchQuestionTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.french = load_french_demo(sync=True)

    def test_a_french_question_is_answered_from_its_section(self):
        question = "Ai-je le droit de télétravailler une journée depuis la Suisse ?"
        result, reply = answering.ask(self.french, question)
        # The best passage holds the section (merged with its neighbours
        # when they fit the budget, so its path may start before it).
        first = result.passages[0]
        paths = [location.heading_path for location in first.locations]
        self.assertIn(
            "Politique de télétravail > Télétravailler depuis un autre lieu "
            "> Travail depuis l'étranger",
            paths,
        )
        self.assertIn(SWISS_RULE, first.text)
        self.assertIn(SWISS_RULE, reply.text)
        source = self.french.sources.get(file_name="teletravail.md")
        cited = [c for c in reply.citations if c.source_id == source.pk]
        self.assertTrue(
            any(SWISS_RULE in source.text[c.start : c.end] for c in cited), cited
        )

    def test_a_question_from_elsewhere_is_declined_by_e5_s_own_floor(self):
        # e5 scores unrelated texts 0.7 and more: MiniLM's 0.30 declined nothing.
        self.assertEqual(self.french.embedding_model, "multilingual-e5-small")
        for question in OFF_TOPIC:
            result, reply = answering.ask(self.french, question)
            self.assertEqual(reply.answerer, "none", question)
            self.assertEqual(reply.citations, [])
            self.assertTrue(result.passages, "the closest sections are still shown")
        floor = formats.number_format(embedding_models.E5_FLOOR, 2)
        self.assertIn(f"an answer needs {floor}", reply.warnings[0])
        self.assertIn("multilingual-e5-small", reply.warnings[0])

    def test_no_golden_question_is_declined(self):
        for case in GoldenCase.objects.filter(collection=self.french):
            result, reply = answering.ask(self.french, case.question)
            self.assertNotEqual(reply.answerer, "none", case.external_id)
            self.assertTrue(reply.citations, case.external_id)

    @override_settings(KB_MIN_SIMILARITY=0)
    def test_kb_min_similarity_is_the_default_model_s_floor_only(self):
        _, reply = answering.ask(self.french, OFF_TOPIC[0])
        self.assertEqual(reply.answerer, "none")
        with self.settings(KB_MODEL_FLOORS={"multilingual-e5-small": 0}):
            _, reply = answering.ask(self.french, OFF_TOPIC[0])
        self.assertEqual(reply.answerer, "extractive")
