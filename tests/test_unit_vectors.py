"""Each chunk's units carry a vector of their own, read in the chunk's pass,
and the answer chooses its sentences by them (issue #28)."""

from __future__ import annotations

import numpy as np
from django.test import SimpleTestCase, TestCase

from kb import answering, chunking, embedding, parsing, unit_vectors
from kb.models import Chunk
from kb.retrieval import keywords
from tests import base

SHIPPING = """# Shipping

## Parcels

Parcels leave our warehouse every weekday at noon.
Most parcels arrive within three working days of the order.
A parcel that cannot be delivered goes back to the warehouse.
"""

DRIVERS = """# Drivers

## Breaks

Delivery drivers take a break of thirty minutes after four hours on the road.
How long a driver may work in a day is set by law.
"""


class UnitVectorsTestCase(SimpleTestCase):
    def test_the_chunk_vectors_are_those_of_embed_passages(self):
        embedder = embedding.get_embedder()
        texts = ["The cat sat on the mat. It purred.", "Rain falls in spring."]
        parts = [[(0, 23), (24, 34)], [(0, 21)]]
        vectors, units = embedder.embed_passages_with_parts(texts, parts)
        np.testing.assert_allclose(vectors, embedder.embed_passages(texts), atol=1e-5)
        dim = embedder.dim
        self.assertEqual([u.shape for u in units], [(2, dim), (1, dim)])
        question = embedder.embed_query("Where did the cat sit?")
        first, second = units[0] @ question
        self.assertGreater(first, second)  # the sentence that says where

    def test_a_unit_is_read_where_the_chunk_embeds_it(self):
        text = "# T\n\nSee the [install guide](https://example.com/x). Then run it.\n"
        document = parsing.parse(text, "t.md")
        chunk = chunking.chunk_document(
            document, text, count_tokens=embedding.count_tokens
        ).chunks[0]
        found = {text[lo:hi]: chunk.embed_text[a:b] for lo, hi, a, b in chunk.units}
        link = "See the [install guide](https://example.com/x)."
        self.assertEqual(
            found, {link: "See the install guide.", "Then run it.": "Then run it."}
        )

    def test_packed_vectors_keep_their_direction(self):
        rng = np.random.default_rng(0)
        vectors = rng.normal(size=(3, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors[1] = 0  # a unit no token was read for
        flat, data = unit_vectors.pack([(0, 5), (5, 9), (9, 20)], vectors)
        bounds, read = unit_vectors.unpack(flat, data)
        self.assertEqual(bounds, [(0, 5), (9, 20)])
        self.assertEqual(len(data), 2 * 384)
        cosines = np.sum(read * vectors[[0, 2]], axis=1)
        self.assertTrue(np.all(cosines > 0.999), cosines)


class StoredUnitsTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = base.collection_of(
            "Guides", {"shipping.md": SHIPPING, "drivers.md": DRIVERS}
        )
        keywords.count_terms(cls.collection)

    def test_each_chunk_stores_a_vector_for_each_sentence(self):
        chunk = Chunk.objects.get(source__file_name="shipping.md")
        text = chunk.source.text
        offsets = chunk.unit_offsets
        sentences = [text[a:b] for a, b in zip(offsets[::2], offsets[1::2])]
        self.assertEqual(
            sentences[1], "Most parcels arrive within three working days of the order."
        )
        self.assertEqual(len(bytes(chunk.unit_vectors)), len(sentences) * 384)

    def test_the_answer_opens_with_the_sentence_that_means_the_question(self):
        # "delivery", "take", "long" are the drivers' page's words; the sentence
        # that answers shares none of them with the question.
        question = "How long does delivery take?"
        _, reply = answering.ask(self.collection, question)
        self.assertTrue(
            reply.text.startswith("Most parcels arrive within three working days"),
            reply.text,
        )
