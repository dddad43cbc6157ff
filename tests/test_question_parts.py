"""An answer to a question that asks two things quotes both (issue #28): the
best sentence for each part of the question, by its words and its meaning."""

from __future__ import annotations

from django.test import SimpleTestCase, TestCase

from kb import answerer, answering
from kb.retrieval import keywords
from tests import base

POETRY = base.SHARED / "corpora" / "poetry-docs"


class QuestionPartsTestCase(SimpleTestCase):
    def test_it_tells_the_questions_a_question_asks(self):
        cases = {
            "Which git does Poetry use by default, and when does it switch to "
            "the system git?": [
                "Which git does Poetry use by default",
                "when does it switch to the system git",
            ],
            "I pip installed starlette, but what serves the app? Do I need "
            "anything else?": [
                "I pip installed starlette, but what serves the app",
                "Do I need anything else",
            ],
            "What is the difference between a blue-green deployment and a "
            "canary deployment?": ["blue-green deployment", "canary deployment"],
            # each side by its name, not the phrase after it
            "Quelle est la différence entre les champs Recommends et Suggests "
            "du fichier control ?": ["champs Recommends", "Suggests"],
            # (only the sides compared; French "il y a" is no Spanish "y")
            "Difference between Django forms and Django models?": [
                "Django forms",
                "Django models",
            ],
            "¿Cuál es la diferencia entre dch -i y dch -r?": ["dch -i", "dch -r"],
            "Чем отличается aptitude safe-upgrade от aptitude full-upgrade?": [
                "aptitude safe-upgrade",
                "aptitude full-upgrade",
            ],
            "Taint or toleration?": ["Taint", "toleration"],
            "Do I need poetry or pip and where is the lock file?": [
                "Do I need poetry or pip",
                "where is the lock file",
            ],
            "Quel port le service expose-t-il, et comment le changer ?": [
                "Quel port le service expose-t-il",
                "comment le changer",
            ],
            "¿Qué puerto expone el servicio y cómo lo cambio?": [
                "¿Qué puerto expone el servicio",
                "cómo lo cambio",
            ],
            "Какой порт открывает сервис, и как его изменить?": [
                "Какой порт открывает сервис",
                "как его изменить",
            ],
        }
        for question, parts in cases.items():
            with self.subTest(question):
                self.assertEqual(answerer.question_parts(question), parts)

    def test_a_question_of_one_part_is_not_split(self):
        for question in (
            "On a Mac, where is the config file kept?",  # a place, not a question
            "In a Django project, where is the settings file kept?",
            "Besides pip, what installers does the project support?",
            "Why does my pod restart or crash?",  # one question, two outcomes
            "How do I add a dependency and lock it?",
            "Which outages came from a regular expression?",
            "a" + " or" * 400 + "  " * 300 + ":",  # read in one pass
            "Faut-il redémarrer le service ou recharger la configuration ?",
        ):
            with self.subTest(question):
                self.assertEqual(answerer.question_parts(question), [])


class BothPartsAnsweredTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        base.shared_or_skip(POETRY)
        page = (POETRY / "managing-dependencies.md").read_text()
        cls.collection = base.collection_of("Poetry", {"dependencies.md": page})
        keywords.count_terms(cls.collection)

    def test_the_answer_quotes_what_each_part_asks(self):
        question = (
            "Which dependency groups does a plain poetry install pick up, and what "
            "if I pass --with docs and --without docs in the same command?"
        )
        _, reply = answering.ask(self.collection, question)
        self.assertIn("installed when executing `poetry install`", reply.text)
        self.assertIn("`--without` takes precedence over `--with`", reply.text)


CONTROL_FR = """# Le fichier control

## Dépendances

Hormis `Depends`, d'autres champs décrivent ces relations.

- `Depends` : le paquet ne sera pas installé sans ses dépendances ;
- `Recommends` : pour les paquets qui ne sont pas vraiment indispensables mais
  qui sont généralement utilisés avec le programme ;
- `Suggests` : pour les paquets qui fonctionnent bien avec le programme mais
  qui ne sont pas du tout indispensables.

## Mise à jour

Finalement, voici le fichier control mis à jour, champ par champ.
"""


class ComparedSidesAnsweredTestCase(TestCase):
    """QA over Debian's French maint-guide: "la différence entre les champs
    Recommends et Suggests" was not read as a comparison (English only), and
    the answer quoted Recommends' item, not Suggests'."""

    @classmethod
    def setUpTestData(cls):
        cls.collection = base.collection_of("Control", {"control.md": CONTROL_FR})
        keywords.count_terms(cls.collection)

    def test_the_answer_quotes_each_side(self):
        _, reply = answering.ask(
            self.collection,
            "Quelle est la différence entre Recommends et Suggests du fichier "
            "control ?",
        )
        self.assertIn("généralement utilisés avec le programme", reply.text)
        self.assertIn("fonctionnent bien avec le programme", reply.text)
