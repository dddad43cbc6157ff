"""The interface in French, Spanish and Russian (issue #27): chosen by the
browser's Accept-Language or the header's switcher, numbers and dates in the
page's language, catalogs compiled as committed."""

from __future__ import annotations

import ast
import gettext
import io
import json
import re
import zipfile
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import SimpleTestCase, TransactionTestCase
from django.urls import reverse

from kb import queueing, uploads
from kb.models import Collection, EvalRun, Source
from tests.base import DemoTestCase, forget_jobs, make_users, run_burst_worker

LOCALE = Path(settings.BASE_DIR) / "locale"
TRANSLATED = ["fr", "es", "ru"]
ROLLBACK = "When should I roll back a deploy?"


def read_po(path: Path) -> list[dict]:
    """The entries of a .po file: msgctxt, msgid, msgid_plural, msgstr (or
    msgstr[n]) unquoted, and its flags (`fuzzy`, ...)."""
    entries, entry, field = [], None, None
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip():
            if entry and "msgid" in entry:
                entries.append(entry)
            entry = None
            continue
        entry = entry or {"flags": set()}
        if line.startswith("#,"):
            entry["flags"] |= {f.strip() for f in line[2:].split(",")}
        elif line.startswith("#"):
            continue
        elif match := re.match(
            r"(msgctxt|msgid_plural|msgid|msgstr(?:\[\d\])?) (\".*\")$", line
        ):
            field = match.group(1)
            entry[field] = ast.literal_eval(match.group(2))
        else:  # a continuation line
            entry[field] += ast.literal_eval(line)
    return entries


class CatalogTestCase(SimpleTestCase):
    """The .mo files are committed (a fresh machine has no GNU gettext): each must
    hold exactly what its .po says, and every message must be translated."""

    def test_every_message_is_translated_and_not_fuzzy(self):
        for lang in TRANSLATED:
            for entry in read_po(LOCALE / lang / "LC_MESSAGES" / "django.po"):
                with self.subTest(lang=lang, msgid=entry["msgid"]):
                    self.assertNotIn("fuzzy", entry["flags"])
                    forms = [v for k, v in entry.items() if k.startswith("msgstr")]
                    self.assertTrue(forms and all(forms), "empty translation")

    def test_the_compiled_catalogs_match_their_sources(self):
        for lang in TRANSLATED:
            folder = LOCALE / lang / "LC_MESSAGES"
            with (folder / "django.mo").open("rb") as compiled:
                catalog = gettext.GNUTranslations(compiled)._catalog
            expected = {}
            for entry in read_po(folder / "django.po"):
                key = entry["msgid"]
                if "msgctxt" in entry:
                    key = f"{entry['msgctxt']}\x04{key}"
                if "msgid_plural" in entry:
                    for name, text in entry.items():
                        if name.startswith("msgstr["):
                            expected[(key, int(name[7:-1]))] = text
                else:
                    expected[key] = entry["msgstr"]
            # The header: msgfmt leaves out POT-Creation-Date; Plural-Forms counts.
            header = expected.pop("")
            plural = re.search(r"Plural-Forms: .*", header).group(0)
            self.assertIn(plural, catalog.pop(""))
            with self.subTest(lang=lang):
                # Run `make messages` (msgfmt) after editing a .po.
                self.assertEqual(catalog, expected, f"{folder}/django.mo is stale")


class AskPageLanguageTestCase(DemoTestCase):
    url = reverse("kb:ask")

    def test_it_serves_the_ask_page_in_the_browser_s_language(self):
        pages = {
            "fr-FR,fr;q=0.9,en;q=0.5": (
                "fr",
                "Interroger la base de connaissances",
                "Demander",
            ),
            "es": ("es", "Preguntar a la base de conocimiento", "Colección"),
            "ru-RU,ru": ("ru", "Вопрос к базе знаний", "Коллекция"),
        }
        for accepted, (lang, heading, label) in pages.items():
            with self.subTest(accepted=accepted):
                page = self.client.get(self.url, headers={"Accept-Language": accepted})
                self.assertContains(page, f'<html lang="{lang}">')
                self.assertContains(page, f"<h1>{heading}</h1>", html=True)
                self.assertContains(page, label)
                self.assertNotContains(page, "Ask the knowledge base")

    def test_english_stays_the_default(self):
        page = self.client.get(self.url)
        self.assertContains(page, '<html lang="en">')
        self.assertContains(page, "<h1>Ask the knowledge base</h1>", html=True)

    def test_an_answer_and_a_refusal_are_worded_in_the_page_s_language(self):
        french = {"Accept-Language": "fr"}
        page = self.client.get(
            self.url, {"q": ROLLBACK, "collection": self.demo.pk}, headers=french
        )
        self.assertContains(page, "Sections retrouvées")
        self.assertContains(page, "jetons de contexte utilisés sur")
        # The quoted evidence stays in the source's words.
        self.assertContains(page, "Roll back")
        empty = self.client.get(
            self.url, {"q": "and the", "collection": self.demo.pk}, headers=french
        )
        self.assertContains(
            empty, "La question ne contient aucun mot à rechercher", status_code=400
        )

    def test_the_switcher_sets_the_language_for_the_session(self):
        response = self.client.post(
            reverse("set_language"), {"language": "fr", "next": self.url}
        )
        self.assertRedirects(response, self.url, fetch_redirect_response=False)
        self.assertContains(
            self.client.get(self.url), "Interroger la base de connaissances"
        )
        # Chosen over what the browser says, and back to English.
        self.client.post(reverse("set_language"), {"language": "en", "next": self.url})
        page = self.client.get(self.url, headers={"Accept-Language": "ru"})
        self.assertContains(page, "Ask the knowledge base")

    def test_the_switcher_is_a_form_without_script(self):
        page = self.client.get(self.url).content.decode()
        switcher = re.search(r'<form[^>]*id="language-switcher".*?</form>', page, re.S)
        self.assertIsNotNone(switcher)
        self.assertIn(f'action="{reverse("set_language")}"', switcher.group(0))
        self.assertIn('name="csrfmiddlewaretoken"', switcher.group(0))
        self.assertNotIn("onchange", switcher.group(0))
        for code in ("en", "fr", "es", "ru"):
            self.assertIn(f'value="{code}"', switcher.group(0))

    def test_an_anonymous_page_has_the_switcher_in_its_language(self):
        self.client.logout()
        page = self.client.get(
            reverse("admin:login"), headers={"Accept-Language": "es"}
        )
        self.assertContains(page, 'id="language-switcher"')
        self.assertContains(page, "Idioma")
        self.assertContains(page, "Iniciar sesión")  # Django's own catalog


class NumbersAndDatesTestCase(DemoTestCase):
    def test_the_dashboard_writes_figures_the_french_way(self):
        run = EvalRun.objects.create(
            collection=self.demo,
            status=EvalRun.Status.DONE,
            aggregate={"recall_at_k": 0.875, "context_tokens_mean": 1158.4},
        )
        url = reverse("admin:kb_evalrun_dashboard") + f"?collection={self.demo.pk}"
        french = self.client.get(url, headers={"Accept-Language": "fr"})
        self.assertContains(french, "0,875")
        self.assertContains(french, "Exécutions")
        self.assertContains(french, "Terminée")  # the run's status, from the model
        created = run.created.strftime("%d/%m/%Y")
        self.assertContains(french, created)
        english = self.client.get(url)
        self.assertContains(english, "0.875")
        self.assertNotContains(english, "0,875")

    def test_a_comparison_groups_thousands_in_the_page_s_language(self):
        runs = [
            EvalRun.objects.create(
                collection=self.demo,
                status=EvalRun.Status.DONE,
                aggregate={"recall_at_k": 0.5, "context_tokens_mean": tokens},
            )
            for tokens in (1158.4, 1210.0)
        ]
        url = reverse("admin:kb_evalrun_dashboard")
        query = {"collection": self.demo.pk, "a": runs[0].pk, "b": runs[1].pk}
        french = self.client.get(url, query, headers={"Accept-Language": "fr"})
        self.assertContains(french, "jetons de contexte (moyenne)")
        self.assertContains(french, "<td>1\xa0158</td>", html=True)
        self.assertContains(self.client.get(url, query), "<td>1,158</td>", html=True)


class ApiErrorLanguageTestCase(DemoTestCase):
    log_in = False
    url = reverse("kb:api-ask")

    def test_an_api_error_is_json_with_the_same_keys_in_any_language(self):
        for lang, text in [
            ("fr", "Authentification requise."),
            ("en", "Authentication required."),
        ]:
            with self.subTest(lang=lang):
                response = self.client.post(
                    self.url,
                    "{}",
                    content_type="application/json",
                    headers={"Accept-Language": lang},
                )
                self.assertEqual(response.status_code, 401)
                self.assertEqual(response.json(), {"error": text})

    def test_a_converted_error_is_translated_too(self):
        self.client.force_login(self.staff)
        response = self.client.get(self.url, headers={"Accept-Language": "ru"})
        self.assertEqual(response.status_code, 405)
        self.assertEqual(
            response.json(), {"error": "Метод не разрешён; используйте POST."}
        )


class AdminLanguageTestCase(DemoTestCase):
    def test_the_admin_and_kb_s_own_admin_pages_are_in_french(self):
        french = {"Accept-Language": "fr"}
        index = self.client.get(reverse("admin:index"), headers=french)
        self.assertContains(index, "Déconnexion")  # Django's catalog
        self.assertContains(index, 'id="language-switcher"')
        sources = self.client.get(reverse("admin:kb_source_changelist"), headers=french)
        self.assertContains(sources, "Téléverser des sources")
        self.assertContains(sources, "Réindexer les sources sélectionnées")
        upload = self.client.get(reverse("admin:kb_source_upload"), headers=french)
        self.assertContains(upload, "Téléverser et indexer")

    def test_the_admin_names_kb_s_models_in_each_language(self):
        names = {
            "fr": ["Journal des questions", "Cas de référence", "Fragments"],
            "es": ["Registro de preguntas", "Casos de referencia", "Colecciones"],
            "ru": ["Журнал вопросов", "Эталонные примеры", "Коллекции"],
        }
        for language, expected in names.items():
            index = self.client.get(
                reverse("admin:index"), headers={"Accept-Language": language}
            )
            for name in expected:
                self.assertContains(index, name)
            self.assertNotContains(index, "Golden cases")

    def test_the_collection_form_labels_its_fields_in_french(self):
        url = reverse("admin:kb_collection_change", args=[self.demo.pk])
        page = self.client.get(url, headers={"Accept-Language": "fr"})
        self.assertContains(page, "Modèle de vectorisation")
        self.assertContains(
            page, "Le modèle qui vectorise ses sources et les questions."
        )
        self.assertContains(page, "Jetons repris du fragment précédent.")
        self.assertNotContains(page, "Embedding model")

    def test_the_source_form_labels_its_fields_and_fieldsets_in_french(self):
        source = self.demo.sources.first()
        url = reverse("admin:kb_source_change", args=[source.pk])
        page = self.client.get(url, headers={"Accept-Language": "fr"})
        self.assertContains(page, "Langue détectée")
        self.assertContains(page, "Vide : détectée pour chaque section.")
        self.assertContains(page, "Chemin relatif au dossier téléversé ou au corpus.")
        self.assertContains(page, 'class="fieldset-heading">Statistiques</h2>')
        self.assertNotContains(page, "Detected language")

    def test_a_refused_upload_gives_its_reason_in_spanish(self):
        binary = SimpleUploadedFile("datos.md", b"# Datos\n\n\x00\x01\x02")
        response = self.client.post(
            reverse("admin:kb_source_upload"),
            {"collection": self.demo.pk, "files": [binary]},
            headers={"Accept-Language": "es"},
        )
        self.assertContains(
            response,
            "datos.md parece un archivo binario (tiene bytes NUL)",
            status_code=response.status_code,
        )
        self.assertNotEqual(response.status_code, 302)
        self.assertFalse(Source.objects.filter(file_name="datos.md").exists())

    def test_a_golden_import_error_is_worded_in_russian(self):
        text = self.demo.sources.get(file_name="glossary.md").text
        start = text.index("Seat")
        span = {"file": "glossary.md", "start": start, "end": start + 4, "text": "no"}
        line = json.dumps(
            {"id": "broken", "question": "What is a seat?", "required_spans": [span]}
        )
        response = self.client.post(
            reverse("admin:kb_goldencase_import"),
            {
                "collection": self.demo.pk,
                "file": SimpleUploadedFile("g.jsonl", line.encode()),
            },
            headers={"Accept-Language": "ru"},
        )
        self.assertContains(
            response,
            f"строка 1, пример broken: glossary.md[{start}:{start + 4}] "
            "не совпадает с текстом цитаты",
            status_code=400,
        )


def _unreadable_docx() -> bytes:
    """A .docx that passes the upload's quick checks (a small, sound zip holding
    word/document.xml) and that only the worker, reading it, finds broken."""
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<w:document><w:body><w:p>")
    return data.getvalue()


class WorkerMessageLanguageTestCase(TransactionTestCase):
    # A TransactionTestCase: the worker is another process and sees only
    # committed rows.

    def setUp(self):
        forget_jobs()
        self.addCleanup(forget_jobs)
        staff, _, _ = make_users()
        self.client.force_login(staff)
        self.collection = Collection.objects.create(name="Langues")

    def _upload(self, name: str, data: bytes, language: str) -> Source:
        response = self.client.post(
            reverse("admin:kb_source_upload"),
            {
                "collection": self.collection.pk,
                "files": [SimpleUploadedFile(name, data)],
            },
            headers={"Accept-Language": language},
        )
        self.assertEqual(response.status_code, 302)
        run_burst_worker("default", "large")
        source = Source.objects.get(collection=self.collection, file_name=name)
        self.assertEqual(source.status, Source.Status.FAILED)
        return source

    def test_a_reader_refusal_found_by_the_worker_is_in_the_editor_s_language(self):
        source = self._upload("rapport.docx", _unreadable_docx(), "fr")
        self.assertTrue(
            source.error.startswith("rapport.docx est un fichier .docx corrompu : "),
            source.error,
        )

    def test_an_ingestion_failure_is_in_the_editor_s_language(self):
        source = self._upload("titulos.md", b"# Titulo\n\n## Parte\n", "es")
        self.assertEqual(
            source.error, "titulos.md no tiene texto que indexar aparte de sus títulos"
        )
        again = self._upload("заголовки.md", b"# Title\n\n## Part\n", "ru")
        self.assertEqual(
            again.error,
            "В заголовки.md нет текста для индексирования, кроме заголовков",
        )

    @pytest.mark.slow
    def test_without_an_editor_the_site_s_language_is_used(self):
        source, _ = uploads.store_source(
            self.collection, "headings.md", b"# Title\n\n## Part\n"
        )
        queueing.enqueue_ingest(source)  # by code, not by an editor's request
        run_burst_worker("default", "large")
        source.refresh_from_db()
        self.assertEqual(
            source.error, "headings.md has no text to index besides its headings"
        )
