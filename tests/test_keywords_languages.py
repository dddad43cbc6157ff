"""Keyword search per language (issue #27): each chunk stemmed in its own
language, the question in each language of the collection (real database and
embedder)."""

from __future__ import annotations

from django.test import TestCase

from kb import ingestion, uploads
from kb.models import Chunk, Source
from kb.retrieval import keywords
from tests.base import collection_of

FRENCH = """# Déploiement

Un déploiement fournit des mises à jour déclaratives pour les Pods et les
ReplicaSets. Vous décrivez un état désiré et le contrôleur change l'état réel
vers l'état désiré à un rythme contrôlé.
"""
RUSSIAN = """# Узлы

Каждый узел кластера управляется плоскостью управления и содержит службы,
необходимые для запуска подов. Обычно в кластере несколько узлов.
"""
SPANISH = """# Espacios de nombres

Los espacios de nombres proporcionan un mecanismo para aislar grupos de
recursos dentro de un único clúster. Los nombres de los recursos deben ser
únicos dentro de un espacio de nombres.
"""
ENGLISH = """# Labels

Labels are key/value pairs that are attached to objects such as Pods. Labels
are intended to be used to specify identifying attributes of objects.
"""
FILES = {"fr.md": FRENCH, "ru.md": RUSSIAN, "es.md": SPANISH, "en.md": ENGLISH}


class LanguageKeywordSearchTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("Langues", FILES)
        keywords.count_terms(cls.collection)

    def _files(self, question: str) -> list[str]:
        ids = keywords.search(self.collection, question, 10)
        chunks = Chunk.objects.in_bulk(ids)
        return [chunks[i].source.file_name for i in ids]

    def test_each_chunk_is_stemmed_in_its_language(self):
        found = dict(Chunk.objects.values_list("source__file_name", "language"))
        self.assertEqual(
            found,
            {
                "fr.md": "french",
                "ru.md": "russian",
                "es.md": "spanish",
                "en.md": "english",
            },
        )
        source = Source.objects.get(file_name="fr.md")
        self.assertEqual(source.detected_language, "fr")

    def test_a_french_plural_finds_the_singular(self):
        self.assertEqual(self._files("déploiements")[:1], ["fr.md"])
        self.assertEqual(self._files("les contrôleurs désirés")[:1], ["fr.md"])

    def test_a_french_singular_finds_the_plural(self):
        self.assertEqual(self._files("mise à jour déclarative")[:1], ["fr.md"])

    def test_a_russian_case_finds_the_other_cases(self):
        # The text has "кластера" (genitive) and "кластере" (prepositional).
        self.assertEqual(self._files("кластером")[:1], ["ru.md"])
        self.assertEqual(self._files("кластер")[:1], ["ru.md"])
        self.assertEqual(self._files("узлами")[:1], ["ru.md"])

    def test_a_spanish_plural_finds_the_singular(self):
        self.assertEqual(self._files("recurso único")[:1], ["es.md"])

    def test_english_stays_english(self):
        self.assertEqual(self._files("label attached to an object")[:1], ["en.md"])

    def test_words_are_counted_per_language(self):
        counts = {(t.language, t.lexeme): t.chunks for t in self.collection.terms.all()}
        self.assertEqual(counts[("french", "déploi")], 1)
        self.assertEqual(counts[("russian", "кластер")], 1)
        self.assertNotIn(("english", "déploi"), counts)
        self.assertEqual(
            self.collection.terms_languages,
            {"english": 1, "french": 1, "russian": 1, "spanish": 1},
        )

    def test_a_spanish_word_is_known_in_its_spanish_form(self):
        # The text has "proporcionan" and "únicos": English stemming keeps
        # "proporciona" and "únicas" apart from them, Spanish does not.
        unknown, checked = keywords.unknown_words(self.collection, "proporciona únicas")
        self.assertEqual((unknown, checked), ([], 2))
        unknown, _ = keywords.unknown_words(self.collection, "zanahorias")
        self.assertEqual(unknown, ["zanahorias"])


class LanguageBm25TestCase(TestCase):
    """A question none of whose chunks holds every word: the chunk with the
    word rare among its language's chunks comes first."""

    @classmethod
    def setUpTestData(cls):
        files = {
            f"fr-{i}.md": f"# Note {i}\n\nLe serveur numéro {i} redémarre ce soir "
            "pendant la maintenance prévue du centre de données, comme chaque "
            "semaine depuis le début de l'année.\n"
            for i in range(6)
        }
        files["fr-rare.md"] = (
            "# Rare\n\nLes journaux de la maintenance prévue du centre de données "
            "sont gardés une année entière avant d'être effacés.\n"
        )
        cls.collection = collection_of("BM25", files)
        keywords.count_terms(cls.collection)

    def test_a_rare_word_of_its_language_weighs_more(self):
        self.assertEqual(self.collection.terms_languages, {"french": 7})
        ids = keywords.search(self.collection, "serveurs journal", 10)
        self.assertEqual(len(ids), 7)
        self.assertEqual(Chunk.objects.get(pk=ids[0]).source.file_name, "fr-rare.md")


class LanguageOverrideTestCase(TestCase):
    def test_an_editors_language_changes_the_chunks_configuration(self):
        collection = collection_of("Override", {"fr.md": FRENCH})
        source = Source.objects.get(file_name="fr.md")
        self.assertEqual(
            set(source.chunks.values_list("language", flat=True)), {"french"}
        )
        source.language = "es"
        self.assertTrue(uploads.apply_edit(source, ["language"], source.metadata))
        source.save()
        ingestion.ingest(source.pk)
        self.assertEqual(
            set(source.chunks.values_list("language", flat=True)), {"spanish"}
        )
        source.refresh_from_db()
        self.assertEqual(source.detected_language, "fr")  # still shown
        keywords.count_terms(collection)
        self.assertEqual(collection.terms_languages, {"spanish": 1})


ENGLISH_LABELS = """# Labels {n}

Every label of this note is attached to an object of the cluster, and each
label is read by the selectors that pick the objects by their labels.
"""
FRENCH_ZEBRA = """# Le zèbre

Le zèbre est un animal d'Afrique qui vit en troupeaux dans la savane et que
les visiteurs reconnaissent de loin grâce à ses rayures noires et blanches.
"""
FRENCH_LABEL = """# Les métadonnées

Chaque objet peut porter un label que les sélecteurs lisent pour retrouver les
objets voulus parmi tous ceux que le cluster contient à un moment donné.
"""


class AnyWordBudgetAcrossLanguagesTestCase(TestCase):
    """The any-word top-up leaves out a word that the keyword index would read
    in too many chunks, counting the chunks of every language: the index does
    not know the language, and "label", rare in French chunks, is in every
    English one (issue #27: 20,000 rows read for one question at 100,000)."""

    @classmethod
    def setUpTestData(cls):
        files = {f"en-{n}.md": ENGLISH_LABELS.format(n=n) for n in range(6)}
        files |= {"zebre.md": FRENCH_ZEBRA, "label.md": FRENCH_LABEL}
        cls.collection = collection_of("Étiquettes", files)
        keywords.count_terms(cls.collection)

    def _files(self, ids: list[int]) -> set[str]:
        return set(
            Chunk.objects.filter(pk__in=ids).values_list("source__file_name", flat=True)
        )

    def test_a_word_common_in_another_language_is_left_out(self):
        languages = dict(Chunk.objects.values_list("source__file_name", "language"))
        self.assertEqual(languages["label.md"], "french")
        self.assertEqual(languages["en-0.md"], "english")
        question = "zèbre label licorne"  # no chunk holds all three
        ids = keywords.search(self.collection, question, 80, max_any_rows=3)
        self.assertEqual(self._files(ids), {"zebre.md"})
        # With room for it, "label" brings the French and English chunks too.
        ids = keywords.search(self.collection, question, 80)
        self.assertEqual(len(self._files(ids)), 8)

    def test_the_languages_share_one_budget(self):
        # "label" is read in 7 chunks (6 English, 1 French). In a budget of 7,
        # a branch of its own would afford it in English (its other English
        # words are in no chunk); the French branch's "zèbre" has taken one
        # row of the shared budget, so it is left out of both.
        question = "zèbre label licorne"
        ids = keywords.search(self.collection, question, 80, max_any_rows=7)
        self.assertEqual(self._files(ids), {"zebre.md"})
        ids = keywords.search(self.collection, question, 80, max_any_rows=8)
        self.assertEqual(len(self._files(ids)), 7)  # "label" in English only
        # One budget: the two branches' words are counted together.
        analysed = {
            "english": keywords.Analysis(
                "'zebra' & 'label'", {}, {"zebra": 1, "label": 7}
            ),
            "french": keywords.Analysis(
                "'zebr' & 'label'", {}, {"zebr": 1, "label": 7}
            ),
        }
        self.assertEqual(
            keywords.affordable_terms(analysed, 8),
            {"english": "'zebra'", "french": "'zebr'"},
        )
        self.assertEqual(
            keywords.affordable_terms(analysed, 9),
            {"english": "'zebra' | 'label'", "french": "'zebr'"},
        )
        # The rarest word goes in whatever it costs; a branch left nothing is
        # not queried.
        self.assertEqual(keywords.affordable_terms(analysed, 0), {"english": "'zebra'"})
