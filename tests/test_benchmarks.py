"""The benchmark's metric code on hand-made ranges, and its data loader."""

from __future__ import annotations

import importlib.util
import unittest

import numpy as np
from django.test import SimpleTestCase, TestCase

from kb import embedding_models, ingestion, uploads
from kb.benchmarks import (
    metrics,
    multilingual_scale,
    quality,
    scale,
    speed,
    splitters,
)
from kb.benchmarks.corpus import Doc, megabytes, synthesize
from kb.benchmarks.metrics import Located
from kb.embedding import get_embedder
from kb.models import Chunk, Collection, Section, Source
from kb.percentiles import percentile
from tests.base import SHARED, needs_shared

CHROMA = SHARED / "benchmarks" / "chroma"
HAS_TIKTOKEN = all(
    importlib.util.find_spec(name) for name in ("tiktoken", "bpe_openai")
)
NO_TIKTOKEN = "tiktoken and bpe-openai come from requirements-bench.txt"


class RangesTestCase(SimpleTestCase):
    def test_it_merges_overlapping_and_touching_ranges(self):
        merged = metrics.union([(20, 30), (0, 10), (10, 12), (25, 40), (50, 51)])
        self.assertEqual(merged, [(0, 12), (20, 40), (50, 51)])

    def test_it_counts_shared_characters_once(self):
        self.assertEqual(metrics.measure([(0, 10), (5, 15), (20, 22)]), 17)

    def test_it_counts_an_end_point_as_touching(self):
        self.assertTrue(metrics.touches((0, 10), (10, 20)))
        self.assertFalse(metrics.touches((0, 9), (10, 20)))


class RetrievalScoresTestCase(SimpleTestCase):
    def test_it_scores_a_partial_hit(self):
        # Excerpts 0-10 and 20-30; one chunk 5-25 covers 5 + 5 of their 20 chars.
        scores = metrics.retrieval_scores(
            "a", [(0, 10), (20, 30)], [Located("a", 5, 25)]
        )
        self.assertAlmostEqual(scores.recall, 10 / 20)
        self.assertAlmostEqual(scores.precision, 10 / 20)
        # IoU: 10 / (20 retrieved + 10 missed)
        self.assertAlmostEqual(scores.iou, 10 / 30)

    def test_it_counts_overlapping_and_foreign_chunks_in_full(self):
        retrieved = [Located("a", 0, 15), Located("a", 12, 30), Located("b", 0, 100)]
        scores = metrics.retrieval_scores("a", [(10, 20)], retrieved)
        self.assertEqual(scores.recall, 1.0)
        # 15 + 18 + 100 retrieved characters, 10 of them evidence.
        self.assertAlmostEqual(scores.precision, 10 / 133)
        self.assertAlmostEqual(scores.iou, 10 / 133)

    def test_it_ignores_the_same_range_in_another_corpus(self):
        scores = metrics.retrieval_scores("a", [(0, 10)], [Located("b", 0, 10)])
        self.assertEqual((scores.recall, scores.precision, scores.iou), (0, 0, 0))


class PrecisionOmegaTestCase(SimpleTestCase):
    def test_it_merges_every_touching_chunk(self):
        # 0-10 only touches the excerpt at 10, and still counts (as the original).
        chunks = [(0, 10), (10, 15), (15, 40), (50, 60)]
        self.assertAlmostEqual(metrics.precision_omega([(10, 20)], chunks), 10 / 40)

    def test_it_adds_uncovered_excerpt_characters(self):
        # 5 chars covered; denominator 15 chunk + 15 uncovered excerpt chars.
        omega = metrics.precision_omega([(10, 20), (100, 110)], [(0, 15)])
        self.assertAlmostEqual(omega, 5 / 30)

    def test_it_is_zero_without_a_touching_chunk(self):
        self.assertEqual(metrics.precision_omega([(10, 20)], [(30, 40)]), 0.0)


class StatisticsTestCase(SimpleTestCase):
    def test_it_reports_the_population_sd(self):
        self.assertEqual(metrics.summary([0.0, 1.0]), (0.5, 0.5))

    def test_it_finds_no_difference_between_equal_runs(self):
        diff = metrics.paired_bootstrap([0.2, 0.9, 0.4], [0.2, 0.9, 0.4])
        self.assertEqual((diff.mean, diff.low, diff.high), (0.0, 0.0, 0.0))
        self.assertTrue(diff.within_noise)

    def test_it_finds_a_constant_paired_gain(self):
        diff = metrics.paired_bootstrap([0.5, 1.0, 0.3], [0.4, 0.9, 0.2], samples=500)
        self.assertAlmostEqual(diff.low, 0.1)
        self.assertAlmostEqual(diff.high, 0.1)
        self.assertFalse(diff.within_noise)

    def test_it_takes_the_nearest_vectors_best_first(self):
        vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
        top = quality.nearest(np.array([[0.0, 1.0]]), vectors, k=2)
        self.assertEqual(top.tolist(), [[1, 2]])


class PlacementTestCase(SimpleTestCase):
    def test_it_places_a_chunk_at_its_first_occurrence_without_the_dot(self):
        text = "one two. one two."
        self.assertEqual(splitters.first_occurrence(text, "one two."), (0, 7))
        self.assertIsNone(splitters.first_occurrence(text, "three"))

    def test_it_finds_repeated_chunks_in_order(self):
        text = "ab ab ab"
        self.assertEqual(splitters.locate_in_order(text, ["ab"] * 3, False), [0, 3, 6])


@unittest.skipUnless(HAS_TIKTOKEN, NO_TIKTOKEN)
class TokenTextTestCase(SimpleTestCase):
    def test_it_loads_cl100k_offline(self):
        self.assertEqual(splitters.cl100k().encode("hello world"), [15339, 1917])

    def test_it_gives_true_ranges_to_overlapping_windows(self):
        text = "Alpha beta gamma delta epsilon zeta eta theta iota kappa."
        encoding = splitters.cl100k()
        ids = encoding.encode(text)
        chunks = splitters.token_text_chunks("c", text, 4, 2)
        for index, chunk in enumerate(chunks):
            self.assertEqual(
                chunk.text, encoding.decode(ids[2 * index : 2 * index + 4])
            )
            self.assertEqual(text[chunk.start : chunk.end], chunk.text)
        self.assertEqual(chunks[-1].end, len(text))

    def test_it_widens_a_window_that_cuts_a_character(self):
        text = "a\U0001f600"  # the emoji's four UTF-8 bytes span several tokens
        chunks = splitters.token_text_chunks("c", text, 1, 0)
        self.assertGreater(len(chunks), 2)
        for chunk in chunks[1:]:
            self.assertEqual((chunk.start, chunk.end), (1, 2))


class BenchmarkDataTestCase(SimpleTestCase):
    @needs_shared(CHROMA)
    def test_it_loads_the_chroma_benchmark(self):
        benchmark = quality.load_benchmark(CHROMA)
        self.assertEqual(len(benchmark.questions), 472)
        self.assertEqual(sorted(benchmark.corpora), sorted(quality.CORPORA))
        excerpts = sum(len(q.references) for q in benchmark.questions)
        self.assertEqual(excerpts, 790)

    def test_it_refuses_a_missing_folder(self):
        with self.assertRaises(quality.BenchmarkDataMissing):
            quality.load_benchmark(SHARED / "no-such-benchmark")


class SpeedHelpersTestCase(SimpleTestCase):
    def test_it_interpolates_percentiles_as_numpy_does(self):
        values = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0]
        for q in (0, 50, 95, 100):
            self.assertAlmostEqual(
                percentile(values, q), float(np.percentile(values, q))
            )

    def test_it_repeats_documents_with_shifted_digits(self):
        docs = [Doc("a.md", "# A 19\n\ntext"), Doc("b.md", "b 0")]
        corpus = synthesize(docs, 40)
        self.assertEqual([d.name for d in corpus[:3]], ["a.md", "b.md", "copy-1/a.md"])
        self.assertEqual(corpus[2].text, "# A 20\n\ntext")
        self.assertGreaterEqual(megabytes(corpus) * 1e6, 40)
        self.assertEqual(len({d.text for d in corpus}), len(corpus))

    def test_the_heading_dense_row_parses_and_chunks_every_section(self):
        row = speed.dense_speed(get_embedder(), 300, 200, lambda line: None)
        self.assertTrue(row.chunker.startswith("kb structure, 300 headings"))
        self.assertEqual((row.chunks, row.over_window), (300, 0))
        self.assertGreater(row.mb_per_s, 0)

    def test_it_skips_a_document_that_overshoots_the_target(self):
        docs = [Doc("small.md", "x" * 10), Doc("big.md", "y" * 100)]
        corpus = synthesize(docs, 30)
        self.assertEqual({d.text for d in corpus}, {"x" * 10})


class SectionsBaselineBenchTestCase(SimpleTestCase):
    """kb_bench quality's "sections" strategy (issue #17)."""

    def test_it_hands_on_the_best_three_whole_sections_once_each(self):
        text = (
            "# A\n\nalpha one.\n\n# B\n\nbeta two.\n\n# C\n\ngamma.\n\n# D\n\ndelta.\n"
        )
        bounds = [text.index(h) for h in ("# A", "# B", "# C", "# D")] + [len(text)]
        sections = list(zip(bounds, bounds[1:]))
        chunks = [
            splitters.BenchChunk("c", s + 5, e - 1, "x", "x", (s, e))
            for s, e in sections
        ]
        chunks.append(splitters.BenchChunk("c", 7, 9, "x", "x", sections[0]))
        benchmark = quality.Benchmark({"c": text}, [quality.Question("q", "c", ())])
        # Chunk picks best first: D, A's second chunk, A, B, C.
        found = quality.sections_found(benchmark, chunks, np.array([[3, 4, 0, 1, 2]]))
        self.assertEqual(
            [(r.start, r.end) for r in found[0]],
            [sections[3], sections[0], sections[1]],
        )
        self.assertEqual(quality.CONFIGS["kb-sections-120"].kind, "kb-sections")


class SyntheticSetTestCase(TestCase):
    """kb_bench speed's 100,000-chunk set: copies of a real collection made in SQL,
    which must keep up with the tables' columns (it broke when sources gained
    is_title_auto and reader_summary)."""

    def test_it_copies_every_source_section_and_chunk(self):
        real = Collection.objects.create(name="real", is_scratch=True)
        for name, text in [
            ("a.md", "# A\n\nAlpha text.\n\n## B\n\nBeta text.\n"),
            ("b.md", "# C\n\nGamma text, code 23505.\n"),
        ]:
            source, _ = uploads.store_source(real, name, text.encode())
            ingestion.ingest(source.pk)
        created: list[Collection] = []
        copy, _ = scale.build_synthetic(real, 3, "t", created, lambda line: None)
        self.assertEqual(created, [copy])
        for model, field in [
            (Source, "collection"),
            (Section, "source__collection"),
            (Chunk, "source__collection"),
        ]:
            with self.subTest(model=model.__name__):
                self.assertEqual(
                    model.objects.filter(**{field: copy}).count(),
                    3 * model.objects.filter(**{field: real}).count(),
                )
        self.assertTrue(
            Source.objects.filter(collection=copy, file_name="synthetic-2/b.md")
            .exclude(title="")
            .exists()
        )
        self.assertEqual(
            copy.terms_chunks, Chunk.objects.filter(source__collection=copy).count()
        )
        coded = Chunk.objects.filter(source__collection=copy, text__contains="23505")
        self.assertEqual([c.exact_tokens for c in coded], [["23505"]] * 3)


class MultilingualScaleSetTestCase(TestCase):
    """kb_bench speed --only scale-multilingual (issue #27): its collection is
    built in multilingual-e5-small from pages in four languages, each chunk with
    its language's text-search configuration, and the 100,000-chunk copies keep
    them (keyword search matches a chunk in its own language only)."""

    def test_the_real_set_and_its_copies_keep_each_chunks_language(self):
        docs = multilingual_scale.multilingual_docs(30_000)[:4]
        created: list[Collection] = []
        real, _ = scale.build_real(
            docs,
            10**9,
            "t",
            created,
            [],
            lambda line: None,
            model=embedding_models.E5_SMALL,
            precision="int8",
        )
        languages = multilingual_scale.chunk_languages(real)
        self.assertEqual(set(languages), {"english", "french", "spanish", "russian"})
        copy, _ = scale.build_synthetic(real, 2, "t", created, lambda line: None)
        self.assertEqual(copy.embedding_model, embedding_models.E5_SMALL)
        self.assertEqual(
            multilingual_scale.chunk_languages(copy),
            {config: 2 * n for config, n in languages.items()},
        )
        self.assertEqual(copy.terms_languages, multilingual_scale.chunk_languages(copy))
