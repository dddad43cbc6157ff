"""The answerer reads each passage in its language (issue #27): its words and
the question's stemmed by that language's stemmer; the unknown-word warning
looks words up in every language of the collection."""

from __future__ import annotations

from django.test import TestCase

from kb import answerer, answering
from kb.retrieval import Result, keywords
from tests.base import collection_of, loaded_passage

# The second sentence answers "¿Cuándo reinicia el kubelet los contenedores?":
# "reiniciar" and "reinicia" are one word to a Spanish stemmer, not to English's.
SPANISH = (
    "El kubelet registra cada contenedor del nodo en el servidor de la API. "
    "El kubelet puede reiniciar un contenedor cuando su sonda de actividad falla. "
    "Los registros del nodo se guardan durante una semana completa."
)
NAMESPACES = """# Espacios de nombres

Los espacios de nombres proporcionan un mecanismo para aislar grupos de
recursos dentro de un único clúster. Los nombres de los recursos deben ser
únicos dentro de un espacio de nombres, pero no entre espacios de nombres.
"""


def _words_named(reply) -> list[str]:
    """The reply's warnings but the one on the model's language."""
    return [w for w in reply.warnings if "reads English only" not in w]


class SpanishAnswerTestCase(TestCase):
    def test_a_spanish_questions_words_match_spanish_sentences(self):
        passage = loaded_passage(SPANISH, 0, len(SPANISH))
        passage.rank = 1
        question = "¿Cuándo reinicia el kubelet los contenedores?"
        reply = answerer.extractive_answer(
            Result(question, [passage], 0, 1200, 5, "vector", {})
        )
        scores = {s.text.split()[2]: s.score for s in reply.sentences}
        self.assertGreater(scores["puede"], scores["registra"])
        self.assertIn("El kubelet puede reiniciar", reply.text)

    def test_a_spanish_word_the_sources_use_is_not_named_unknown(self):
        collection = collection_of("Espacios", {"espacios.md": NAMESPACES})
        keywords.count_terms(collection)
        _, reply = answering.ask(collection, "¿Qué proporciona un espacio de nombres?")
        # (the collection's model reads English only: that is said apart)
        self.assertEqual(_words_named(reply), [])
        self.assertIn("proporcionan un mecanismo", reply.text)

    def test_a_name_no_spanish_source_uses_is_still_named(self):
        collection = collection_of("Espacios", {"espacios.md": NAMESPACES})
        keywords.count_terms(collection)
        question = "¿Qué proporciona un espacio de nombres en OpenShift?"
        _, reply = answering.ask(collection, question)
        self.assertEqual(len(_words_named(reply)), 1)
        self.assertIn("“OpenShift”", _words_named(reply)[0])
