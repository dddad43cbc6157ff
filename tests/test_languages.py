"""Language detection (kb.languages): no database."""

from django.test import SimpleTestCase

from kb import languages, parsing

FRENCH = (
    "Les finaliseurs sont des clés d'espace de noms qui indiquent à Kubernetes "
    "d'attendre que certaines conditions soient remplies avant de supprimer "
    "complètement une ressource marquée pour la suppression."
)
ENGLISH = (
    "Finalizers are namespaced keys that tell Kubernetes to wait until specific "
    "conditions are met before it fully deletes resources marked for deletion."
)
MIXED = f"""# Finaliseurs

{FRENCH}

## Finalizers in English

{ENGLISH}

## Exemple

Voir `kubectl get pods`.

```yaml
metadata:
  finalizers:
  - kubernetes.io/pv-protection
```
"""


class LanguagesTestCase(SimpleTestCase):
    def test_it_detects_each_section_of_a_mixed_document(self):
        document = parsing.parse(MIXED, "mixed.md")
        texts = [MIXED[s.start : s.end] for s in document.sections]
        found = languages.section_languages(texts, "fr")
        self.assertEqual(found, ["fr", "en", "fr"])

    def test_it_gives_a_short_section_its_documents_language(self):
        self.assertEqual(languages.detect("Voir aussi the pods.", default="ru"), "ru")
        self.assertEqual(languages.detect("Voir aussi the pods.", default="es"), "es")

    def test_it_reads_prose_not_code(self):
        yaml = "```yaml\n" + "metadata:\n  name: my-deployment-with-a-name\n" * 20
        self.assertEqual(languages.detect(f"{FRENCH}\n\n{yaml}```\n"), "fr")

    def test_the_editors_choice_wins_for_every_section(self):
        found = languages.section_languages([FRENCH, ENGLISH], "fr", override="es")
        self.assertEqual(found, ["es", "es"])

    def test_it_tells_russian_and_spanish_documents(self):
        russian = "Финализаторы — это ключи пространства имён, которые указывают " * 3
        spanish = "Los finalizadores son claves con espacio de nombres que indican " * 3
        self.assertEqual(languages.document_language(russian), "ru")
        self.assertEqual(languages.document_language(spanish), "es")

    def test_a_questions_stems_leave_out_common_words_and_elisions(self):
        # QA over Debian's Spanish manuals: "un", "a", "una", "del", "de" made
        # 11 words of a 6-word question, each shared with most sentences; and
        # French "l'option" never matched "option"
        self.assertEqual(
            languages.stems(
                "¿Cómo añado un puerto a una zona del cortafuegos?", "spanish"
            ),
            ["añad", "puert", "zon", "cortafueg"],
        )
        self.assertEqual(
            languages.stems("Que fait l'option du fichier ?", "french"),
            ["fait", "option", "fichi"],
        )
        self.assertEqual(
            languages.stems("Как это сделать в aptitude?", "russian"),
            ["сдела", "aptitude"],
        )
        # Declined and conjugated forms are as common as their dictionary form
        # ("этой" stems to "эт", shared with every "этого", "этим"), and an
        # inverted pronoun is no word of the question ("Avez-vous")
        self.assertEqual(
            languages.stems(
                "Какие пакеты этой системы нужны для того, который собирает модуль?",
                "russian",
            ),
            ["пакет", "систем", "нужн", "собира", "модул"],
        )
        self.assertEqual(
            languages.stems("Y a-t-il un paquet dont le nom est celui-ci ?", "french"),
            ["paquet", "nom"],
        )
        # but a word is kept: "том" is also a volume, "add-on" is no inversion
        self.assertEqual(languages.stems("Как увеличить том?", "russian")[-1], "том")
        self.assertIn("add-on", languages.stems("Installer un add-on", "french"))
        self.assertEqual(
            languages.stems(
                "¿Qué tiene que ver ese paquete con los que son?", "spanish"
            ),
            ["ver", "paquet"],
        )

    def test_it_maps_languages_to_text_search_configurations(self):
        self.assertEqual(languages.config_for("fr"), "french")
        self.assertEqual(languages.config_for("ru"), "russian")
        self.assertEqual(languages.config_for("pl"), languages.SIMPLE)
        self.assertEqual(languages.config_for("spanish"), "spanish")
