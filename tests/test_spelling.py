"""Misspelled question words searched as the collection's words (issue #28)."""

from __future__ import annotations

from django.test import SimpleTestCase, TestCase

from kb import answering
from kb.models import Chunk
from kb.retrieval import keywords, spelling
from kb.retrieval.spelling import Correction
from tests.base import collection_of

API_GUIDE = """# API guide

## Throttling

Throttling limits each client to 100 requests a minute. A client over the
limit gets HTTP 429 and a Retry-After header saying when to try again.

## Pagination

Lists come in pages of 50 items; follow the `next` link for the next page.

## Authentication

Every request carries a token in the Authorization header.
"""


class EditDistanceTestCase(SimpleTestCase):
    def test_it_counts_edits_and_swapped_neighbours(self):
        self.assertEqual(spelling.edit_distance("trottl", "throttl"), 1)
        self.assertEqual(spelling.edit_distance("pagniat", "paginat"), 1)  # swap
        self.assertEqual(spelling.edit_distance("token", "token"), 0)
        self.assertEqual(spelling.edit_distance("kafka", "token"), 5)

    def test_short_words_allow_one_edit_long_ones_two(self):
        self.assertEqual(spelling.max_edits(8), 1)
        self.assertEqual(spelling.max_edits(9), 2)

    def test_it_replaces_whole_words_only(self):
        fixes = [Correction("trottling", "throttling")]
        self.assertEqual(
            spelling.corrected("how does trottling work, trottlingx?", fixes),
            "how does throttling work, trottlingx?",
        )


class DictionaryTestCase(SimpleTestCase):
    def test_only_whole_words_of_a_vocabulary_are_words(self):
        """Review of e54c04e: e5's vocabulary holds "dress" of "address" as a
        piece inside words, so "adress" passed for a word and was never
        corrected. Its dictionary holds the pieces opening a word."""
        from kb import embedding

        e5 = embedding.dictionary("multilingual-e5-small")
        self.assertIn("address", e5)
        self.assertNotIn("adress", e5)
        self.assertIn("mean", embedding.dictionary())
        self.assertNotIn("##ing", embedding.dictionary())


class MisspellingTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("API", {"api-guide.md": API_GUIDE})
        keywords.count_terms(cls.collection)

    def test_a_misspelled_word_is_searched_as_the_collections_word(self):
        result, reply = answering.ask(self.collection, "how does trottling work")
        self.assertEqual(reply.searched_for, [("trottling", "throttling")])
        self.assertNotEqual(reply.answerer, "none")
        self.assertIn("Throttling limits each client", reply.text)
        self.assertTrue(reply.warnings[0].startswith("Searched for “throttling”"))
        self.assertEqual(result.question, "how does trottling work")  # as asked
        body = answering.as_json(result, reply)
        self.assertEqual(
            body["searched_for"], [{"asked": "trottling", "searched": "throttling"}]
        )

    def test_kb_ask_says_it_in_the_language_asked_for(self):
        # QA over Debian's manuals: kb_ask's warnings were always English
        from io import StringIO

        from django.core.management import call_command

        out = StringIO()
        call_command(
            "kb_ask",
            "how does trottling work",
            "--collection",
            "API",
            "--language",
            "fr",
            stdout=out,
        )
        # quoted as French quotes, with no-break spaces inside
        self.assertIn("Recherche faite pour «\u00a0throttling\u00a0»", out.getvalue())

    def test_two_swapped_letters_are_one_edit(self):
        _, reply = answering.ask(self.collection, "How big is a pagniation page?")
        self.assertEqual(reply.searched_for, [("pagniation", "pagination")])

    def test_a_word_far_from_every_word_is_not_corrected(self):
        _, reply = answering.ask(self.collection, "How do I configure Kafka consumers?")
        self.assertEqual(reply.searched_for, [])
        # A name two letters longer than a word of the sources stays a name.
        _, reply = answering.ask(self.collection, "Is there a pagesql endpoint?")
        self.assertEqual(reply.searched_for, [])

    def test_a_name_is_not_corrected_into_a_word_of_the_sources(self):
        """QA of issue #29: "Slack" was searched as "stack" and answered."""
        _, reply = answering.ask(self.collection, "How big is a Pagniation page?")
        self.assertEqual(reply.searched_for, [])
        _, reply = answering.ask(self.collection, "How big is a pagniation page?")
        self.assertEqual(reply.searched_for, [("pagniation", "pagination")])

    def test_a_mistyped_common_word_is_no_unknown_word(self):
        """QA over opensource.guide: "shoud" was searched as "shouting", and
        beside two misspellings it made three unknown words, so none of them
        was corrected and the answer was not trusted."""
        _, reply = answering.ask(
            self.collection, "what shoud a clent get from trottling"
        )
        self.assertEqual(
            reply.searched_for, [("clent", "client"), ("trottling", "throttling")]
        )
        self.assertNotIn("shoud", " ".join(reply.warnings))
        self.assertIn("Throttling limits each client", reply.text)
        # A word ("width", one letter from "with") is no slip; a typo of the
        # sources' word is searched as it, also one letter from a common word
        # ("tken": "token", and "then").
        self.assertEqual(
            spelling.slips(["shoud", "wich", "width", "three"]), {"shoud", "wich"}
        )
        _, reply = answering.ask(
            self.collection, "what shoud a clent put in the tken header"
        )
        self.assertEqual(reply.searched_for, [("clent", "client"), ("tken", "token")])

    def test_a_word_of_the_dictionary_is_no_misspelling(self):
        """QA over Javadoc: "how does Crypt.crypt decide ...?" was searched as
        "decoder", and "what does the parameter mean?" as "man": words the
        sources do not use, but no misspellings of those they do."""
        codecs = collection_of(
            "Codecs",
            {
                "codecs.md": "# Codecs\n\n## Decoder\n\nThe decoder reads a "
                "man page and returns its sections, one per heading.\n"
            },
        )
        keywords.count_terms(codecs)
        codecs.refresh_from_db()
        for question in (
            "How does the decoder decide where a section starts?",
            "What does a section mean to the decoder?",
        ):
            with self.subTest(question):
                _, reply = answering.ask(codecs, question)
                self.assertEqual(reply.searched_for, [])

    def test_a_known_word_is_never_corrected(self):
        _, reply = answering.ask(self.collection, "What does the token header hold?")
        self.assertEqual(reply.searched_for, [])
        self.assertFalse(any("Searched for" in w for w in reply.warnings))


WOOL = """# Preparing wool

Carding aligns the fibres before spinning. Washing removes the lanolin first.
"""


class ShortStemsTestCase(TestCase):
    """QA in Russian: "слева" (on the left), used by no source, was searched as
    "следующим" (following): their stems "слев" and "след" are one letter
    apart, their words far apart. A stem of four letters is no typo's."""

    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("Wool", {"wool.md": WOOL})
        keywords.count_terms(cls.collection)

    def test_a_word_whose_short_stem_is_a_letter_from_another_stays(self):
        _, reply = answering.ask(self.collection, "Who cares about the fibres?")
        self.assertEqual(reply.searched_for, [])
        _, reply = answering.ask(self.collection, "Why is the wool carsing done?")
        self.assertEqual(reply.searched_for, [("carsing", "carding")])


FILES_API = """# Files

## Removing a file

Call `Path.unlink(missing_ok=True)` to remove a file that may be gone already.
Call `p.iterdir()` to list a folder, or read `/etc/app/settings.toml` first.

## Comparing values

Values are unlike each other when their types differ.
"""


class DottedNamesTestCase(TestCase):
    """QA over Python's reference: PostgreSQL's parser keeps "Path.unlink" and
    "p.iterdir" whole, so "unlink" alone was an unknown word, searched as
    "unlike" and warned about as used by no source."""

    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("Files", {"files.md": FILES_API})
        keywords.count_terms(cls.collection)

    def test_a_part_of_a_dotted_name_or_path_is_a_word_of_the_sources(self):
        question = "What does unlink do when the file is missing, and iterdir? settings"
        unknown, checked = keywords.unknown_words(self.collection, question)
        self.assertEqual(unknown, [])
        self.assertGreater(checked, 3)
        _, reply = answering.ask(self.collection, "What does unlink do?")
        self.assertEqual(reply.searched_for, [])
        self.assertFalse(any("unlink" in w for w in reply.warnings), reply.warnings)
        self.assertIn("Path.unlink(missing_ok=True)", reply.text)

    def test_a_question_naming_only_a_method_finds_the_chunk_of_its_name(self):
        self.assertEqual(
            keywords.dotted_names(self.collection, "What does iterdir list?"),
            {"english": ["p.iterdir"]},
        )
        found = keywords.find(self.collection, "What does iterdir list?", 10)
        (chunk,) = Chunk.objects.filter(pk__in=found.rare_ids)
        self.assertIn("p.iterdir()", chunk.text)
        self.assertEqual(keywords.dotted_names(self.collection, "What is iter?"), {})

    def test_a_word_only_inside_another_word_stays_unknown(self):
        unknown, _ = keywords.unknown_words(self.collection, "What is iter or link?")
        self.assertEqual(unknown, ["iter", "link"])


GUIDE_FR = """# Guide du responsable

## Bogues de sécurité

Les bogues de sécurité sont signalés à l'équipe de sécurité, qui prépare une
mise à jour pour la version stable.

## Envoi de paquet

Un paquet est envoyé dans l'archive avec dput une fois signé.
"""

GUIDE_EN = """# Security guide

## Security updates

The security team answers within two days.
"""


class AccentsTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of(
            "Guides", {"guide-fr.md": GUIDE_FR, "guide-en.md": GUIDE_EN}
        )
        keywords.count_terms(cls.collection)

    def test_a_word_typed_without_its_accents_is_searched_as_written(self):
        """QA in French: "securite" was searched as the English "security",
        with a warning that no source uses it, though "sécurité" is in many."""
        result, reply = answering.ask(
            self.collection, "Comment gérer les bogues de securite ?"
        )
        self.assertEqual(reply.searched_for, [("securite", "sécurité")])
        self.assertIn("signalés à l'équipe de sécurité", reply.text)


APTITUDE_RU = """# Командная строка aptitude

## Симуляция

Все команды, которые устанавливают, обновляют и удаляют пакеты, допускают
параметр `-s`, который означает «симулирование». Программа выполнит все
действия, но не загрузит и не установит какие-либо файлы.

## Журнал

Каждое действие записывается в файл журнала программы.
"""


class WordFormsTestCase(TestCase):
    """QA over Debian's Russian aptitude manual: "симулировать" (to simulate),
    which no source writes, was searched as "симулирование" (simulation), and
    the answer warned that no source uses the word: a form of a word the
    sources use is no misspelling. Their stems ("симулирова", "симулирован")
    differ, one beginning the other."""

    @classmethod
    def setUpTestData(cls):
        cls.collection = collection_of("aptitude", {"cmdline.md": APTITUDE_RU})
        keywords.count_terms(cls.collection)

    def test_another_form_of_a_word_is_searched_without_a_warning(self):
        _, reply = answering.ask(
            self.collection, "Какой параметр команды означает симулировать?"
        )
        self.assertIn(("симулировать", "симулирование"), reply.searched_for)
        self.assertIn("параметр `-s`", reply.text)
        self.assertFalse([w for w in reply.warnings if "симулирование" in w])

    def test_a_misspelling_is_still_named(self):
        _, reply = answering.ask(self.collection, "Где записан журнл программы?")
        self.assertIn(("журнл", "журнал"), reply.searched_for)
        self.assertTrue(reply.warnings[0].startswith("Searched for “журнал”"))
