from __future__ import annotations

import json

from django.contrib.admin import site
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import RequestFactory, TestCase
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from kb import golden, ingestion, permissions, reindexing, uploads
from kb.demo import load_demo
from kb.models import Chunk, Collection, GoldenCase, Section, ShadowIndex, Source
from tests.base import DemoTestCase, make_tree, make_users


class AdminPagesTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, cls.alice = make_users()
        permissions.ensure_groups()
        cls.editor.groups.add(
            permissions.Group.objects.get(name=permissions.CONTENT_EDITOR)
        )
        cls.demo = load_demo(sync=True)
        cls.runbook = cls.demo.sources.get(file_name="deployment-runbook.md")

    def setUp(self):
        self.client.force_login(self.staff)

    def test_the_source_page_shows_statistics_and_a_histogram(self):
        url = reverse("admin:kb_source_change", args=[self.runbook.pk])
        response = self.client.get(url)
        self.assertContains(response, "Median tokens")
        self.assertContains(response, "<svg", html=False)
        self.assertContains(response, "Re-index")

    def test_only_those_who_may_change_the_policy_are_offered_its_page(self):
        change = reverse("admin:kb_collection_change", args=[self.demo.pk])
        policy = reverse("admin:kb_collection_policy", args=[self.demo.pk])
        self.assertContains(self.client.get(change), "Edit the metadata policy")
        self.client.force_login(self.editor)  # a content editor
        self.assertNotContains(self.client.get(change), "Edit the metadata policy")
        refused = self.client.get(policy)
        self.assertContains(refused, "Only admins", status_code=403)

    def test_the_source_list_shows_status_and_counts(self):
        response = self.client.get(reverse("admin:kb_source_changelist"))
        self.assertContains(response, "Indexed")
        self.assertContains(response, "field-chunk_count")

    def test_a_chunk_page_shows_the_embedded_string_beside_the_source(self):
        chunk = Chunk.objects.filter(source=self.runbook).last()
        response = self.client.get(reverse("admin:kb_chunk_change", args=[chunk.pk]))
        self.assertContains(response, "Exactly what was embedded")
        self.assertContains(response, escape(chunk.section.heading_path))

    def test_changing_the_policy_builds_a_shadow_index_and_says_so(self):
        url = reverse("admin:kb_collection_policy", args=[self.demo.pk])
        form = self.client.get(url).context["form"]
        data = {name: field.initial for name, field in form.fields.items()}
        data["title"] = "retrieve"
        response = self.client.post(url, data, follow=True)
        self.assertContains(response, "The new metadata policy is being built as")
        self.demo.refresh_from_db()
        # The live index keeps its policy until the shadow holds (kb/reindexing.py).
        self.assertNotIn("title", self.demo.metadata_policy)
        shadow = ShadowIndex.objects.get(collection=self.demo)
        self.assertEqual(shadow.new_settings["metadata_policy"]["title"], "retrieve")
        self.assertContains(
            self.client.get(url), "is built with policy of title embed → retrieve"
        )

    def test_content_editors_cannot_change_policies(self):
        self.client.force_login(self.editor)
        url = reverse("admin:kb_collection_policy", args=[self.demo.pk])
        self.assertEqual(self.client.get(url).status_code, 403)
        upload = self.client.get(reverse("admin:kb_source_upload"))
        self.assertEqual(upload.status_code, 200)

    def test_the_rejection_list_says_why_in_words(self):
        self.demo.metadata_policy = {"summary": "embed"}
        self.demo.save()
        source, _ = uploads.store_source(
            self.demo,
            "long.md",
            b"# Long\n\nShort text.\n",
            metadata={"summary": "very " * 300},
        )
        with self.assertRaises(ingestion.IngestionError):
            ingestion.ingest(source.pk)
        response = self.client.get(reverse("admin:kb_overflowrejection_changelist"))
        self.assertContains(response, "the model reads 256")
        self.assertContains(response, "the metadata prefix pushed it over")


def _copy_chunk(first: Chunk, sections: list[Section], count: int) -> None:
    """Chunks 1 to `count` - 1 as copies of `first` (chunk 0), chunk i in
    sections[i * len(sections) // count]: one INSERT ... SELECT, not `count`
    model instances compiled one field at a time (seconds)."""
    fields = [
        f for f in Chunk._meta.concrete_fields if not f.primary_key and not f.generated
    ]
    values = {"chunk_index": "g", "section_id": "(%s::bigint[])[g * %s / %s + 1]"}
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    chosen = ", ".join(
        values.get(f.column, "t." + connection.ops.quote_name(f.column)) for f in fields
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO kb_chunk ({columns}) SELECT {chosen} FROM kb_chunk t, "
            "generate_series(1, %s) g WHERE t.id = %s",
            [[s.pk for s in sections], len(sections), count, count - 1, first.pk],
        )


class SourceListTestCase(TestCase):
    """The source list of a large source (issue #15, item 14)."""

    @classmethod
    def setUpTestData(cls):
        cls.staff, _, _ = make_users()
        cls.small = make_tree().source
        # 100 sections of 200 chunks: a sections x chunks join is 2 M rows.
        cls.big = Source.objects.create(
            collection=cls.small.collection,
            title="Big",
            file_name="big.md",
            text="x",
            content_hash="big",
        )
        sections = Section.objects.bulk_create(
            Section(source=cls.big, order=i, start=0, end=1) for i in range(100)
        )
        first = Chunk.objects.create(
            source=cls.big,
            section=sections[0],
            chunk_index=0,
            start=0,
            end=1,
            text="x",
            embedded_text="x",
            token_count=3,
        )
        _copy_chunk(first, sections, 20_000)

    def setUp(self):
        self.client.force_login(self.staff)

    def test_it_counts_a_large_sources_rows_without_joining_sections_and_chunks(self):
        url = reverse("admin:kb_source_changelist")
        with CaptureQueriesContext(connection) as queries:
            response = self.client.get(url)
        self.assertContains(response, '<td class="field-section_count">100</td>')
        self.assertContains(response, '<td class="field-chunk_count">20000</td>')
        self.assertContains(response, '<td class="field-chunk_count">1</td>')
        joins = [q["sql"] for q in queries if 'JOIN "kb_chunk"' in q["sql"]]
        joins += [q["sql"] for q in queries if 'JOIN "kb_section"' in q["sql"]]
        self.assertEqual(joins, [])

    def test_it_prefers_the_statistics_stored_by_ingestion(self):
        Source.objects.filter(pk=self.big.pk).update(
            stats={"sections": 100, "chunks": 20_000}
        )
        Source.objects.filter(pk=self.small.pk).update(stats={"chunks": 7})
        response = self.client.get(reverse("admin:kb_source_changelist"))
        self.assertContains(response, '<td class="field-chunk_count">20000</td>')
        self.assertContains(response, '<td class="field-chunk_count">7</td>')
        self.assertContains(response, '<td class="field-section_count">1</td>')

    def test_it_sorts_by_chunk_count(self):
        response = self.client.get(reverse("admin:kb_source_changelist"), {"o": "-7"})
        titles = [s.title for s in response.context["cl"].result_list]
        self.assertEqual(titles, ["Big", "Deploy"])


class GoldenAdminTestCase(DemoTestCase):
    def _case(self, **span):
        text = self.demo.sources.get(file_name="glossary.md").text
        start = text.index("Seat")
        spec = {"file": "glossary.md", "start": start, "end": start + 4, "text": "Seat"}
        return {**spec, **span}

    def test_a_case_with_a_span_that_does_not_match_is_refused(self):
        spans = json.dumps([self._case(text="Chair")])
        response = self.client.post(
            reverse("admin:kb_goldencase_add"),
            {
                "collection": self.demo.pk,
                "external_id": "new",
                "kind": "definition",
                "question": "What is a seat?",
                "required_spans": spans,
            },
        )
        self.assertContains(response, "does not match")
        self.assertFalse(GoldenCase.objects.filter(external_id="new").exists())

    def test_spans_json_cannot_read_are_refused_with_the_reason(self):
        huge = '[{"file": "glossary.md", "start": ' + "1" * 5000 + "}]"
        for spans, why in (
            ("[" * 100000, "nested too deeply"),
            (huge, "number too long"),
        ):
            response = self.client.post(
                reverse("admin:kb_goldencase_add"),
                {
                    "collection": self.demo.pk,
                    "external_id": "deep",
                    "kind": "free",
                    "question": "What is a seat?",
                    "required_spans": spans,
                },
            )
            self.assertContains(response, why)
        self.assertFalse(GoldenCase.objects.filter(external_id="deep").exists())

    def test_a_case_whose_question_could_not_be_asked_is_refused(self):
        response = self.client.post(
            reverse("admin:kb_goldencase_add"),
            {
                "collection": self.demo.pk,
                "external_id": "long",
                "kind": "definition",
                "question": "why " * 5000,
                "required_spans": json.dumps([self._case()]),
            },
        )
        self.assertContains(response, "the limit is 1000")
        self.assertFalse(GoldenCase.objects.filter(external_id="long").exists())

    def test_a_case_shows_its_spans_in_context_and_a_picker(self):
        case = GoldenCase.objects.create(
            collection=self.demo,
            external_id="seat",
            question="What is a seat?",
            kind="definition",
            required_spans=[self._case()],
        )
        response = self.client.get(
            reverse("admin:kb_goldencase_change", args=[case.pk])
        )
        self.assertContains(response, "<mark>Seat</mark>", html=True)
        self.assertContains(response, 'id="kb-span-picker"')
        self.assertContains(response, "span_picker.js")

    def test_the_add_page_offers_the_picker_and_it_reads_the_texts_as_stored(self):
        add = self.client.get(reverse("admin:kb_goldencase_add"))
        self.assertContains(add, 'id="kb-span-picker"')
        self.assertNotContains(add, "Save the case first")
        self.demo.sources.filter(file_name="glossary.md").update(text="\nA seat.\n")
        url = reverse("admin:kb_goldencase_sources")
        found = self.client.get(url, {"collection": self.demo.pk}).json()["sources"]
        self.assertIn({"file": "glossary.md", "text": "\nA seat.\n"}, found)
        # A source whose reading failed has no text to point into: not offered.
        self.demo.sources.filter(file_name="glossary.md").update(text="")
        found = self.client.get(url, {"collection": self.demo.pk}).json()["sources"]
        self.assertNotIn("glossary.md", [s["file"] for s in found])
        self.assertEqual(self.client.get(url, {"collection": "x"}).status_code, 400)

    def test_the_picker_leaves_out_a_failed_source_never_indexed(self):
        failed, _ = uploads.store_source(self.demo, "frontonly.md", b"---\nx: 1\n---\n")
        Source.objects.filter(pk=failed.pk).update(status=Source.Status.FAILED)
        self.demo.sources.filter(file_name="glossary.md").update(
            status=Source.Status.FAILED
        )  # a later re-index failed: its indexed version is still searched
        url = reverse("admin:kb_goldencase_sources")
        found = self.client.get(url, {"collection": self.demo.pk}).json()["sources"]
        self.assertNotIn("frontonly.md", [s["file"] for s in found])
        self.assertIn("glossary.md", [s["file"] for s in found])

    def test_the_picker_shows_no_collection_the_user_may_not_ask_in(self):
        editor = get_user_model().objects.get(username="editor")  # staff
        alice = get_user_model().objects.get(username="alice")  # not staff
        restricted = Collection.objects.create(name="Secret")
        restricted.groups.add(Group.objects.create(name="Legal"))
        url = reverse("admin:kb_goldencase_sources")
        self.client.force_login(alice)
        self.assertEqual(self.client.get(url, {"collection": 1}).status_code, 302)
        editor.user_permissions.add(Permission.objects.get(codename="view_goldencase"))
        self.client.force_login(editor)
        self.assertEqual(
            self.client.get(url, {"collection": restricted.pk}).status_code, 404
        )
        self.assertEqual(
            self.client.get(url, {"collection": self.demo.pk}).status_code, 200
        )

    def test_import_and_export_round_trip(self):
        exported = self.client.post(
            reverse("admin:kb_goldencase_changelist"),
            {
                "action": "export_jsonl",
                "_selected_action": list(
                    GoldenCase.objects.values_list("pk", flat=True)
                ),
            },
        )
        lines = exported.content.decode().splitlines()
        self.assertEqual(len(lines), GoldenCase.objects.count())
        GoldenCase.objects.all().delete()
        upload = SimpleUploadedFile("golden.jsonl", "\n".join(lines).encode())
        self.client.post(
            reverse("admin:kb_goldencase_import"),
            {"collection": self.demo.pk, "file": upload},
        )
        self.assertEqual(GoldenCase.objects.count(), len(lines))

    def test_a_bad_import_names_the_case_and_imports_nothing(self):
        bad = json.dumps(
            {
                "id": "broken",
                "question": "q",
                "required_spans": [self._case(text="nope")],
            }
        )
        response = self.client.post(
            reverse("admin:kb_goldencase_import"),
            {
                "collection": self.demo.pk,
                "file": SimpleUploadedFile("g.jsonl", bad.encode()),
            },
        )
        self.assertContains(response, "broken", status_code=400)
        self.assertFalse(GoldenCase.objects.filter(external_id="broken").exists())
        self.assertTrue(Source.objects.exists())

    def test_an_import_says_what_it_did_in_a_sentence_and_accepts_a_bom(self):
        case = GoldenCase.objects.filter(collection=self.demo).first()
        upload = SimpleUploadedFile(
            "golden.jsonl", "\ufeff".encode() + golden.case_line(case).encode()
        )
        response = self.client.post(
            reverse("admin:kb_goldencase_import"),
            {"collection": self.demo.pk, "file": upload},
            follow=True,
        )
        self.assertContains(
            response,
            "Imported 1 golden case into Demo: 0 created, 0 updated, 1 unchanged.",
        )

    def test_an_id_too_long_for_the_database_is_refused_not_a_server_error(self):
        line = json.dumps(
            {
                "id": "x" * 150,
                "question": "What is a seat?",
                "required_spans": [self._case()],
            }
        )
        response = self.client.post(
            reverse("admin:kb_goldencase_import"),
            {
                "collection": self.demo.pk,
                "file": SimpleUploadedFile("g.jsonl", line.encode()),
            },
        )
        self.assertContains(response, "the limit is 100", status_code=400)


class IndexStateTestCase(TestCase):
    def test_a_collection_with_a_shadow_index_open_is_not_called_up_to_date(self):
        staff, _, _ = make_users()
        self.client.force_login(staff)
        collection = Collection.objects.create(name="Handbook")
        change = reverse("admin:kb_collection_change", args=[collection.pk])
        self.assertContains(self.client.get(change), "The index is up to date")
        for status, shown in [
            ("building", "building"),
            ("held", "held: waiting for an admin"),
        ]:
            ShadowIndex.objects.filter(collection=collection).delete()
            now = reindexing.settings_of(collection)
            shadow = ShadowIndex.objects.create(
                collection=collection,
                status=status,
                old_settings=now,
                new_settings={**now, "chunk_tokens": 150},
            )
            page = self.client.get(change)
            self.assertNotContains(page, "The index is up to date")
            self.assertContains(
                page,
                f"a change to them is not live yet: shadow index #{shadow.pk} "
                f"is {shown}",
            )
            listed = self.client.get(reverse("admin:kb_collection_changelist"))
            self.assertContains(listed, f"shadow index #{shadow.pk}")


class CollectionFormTestCase(TestCase):
    """The collection form, as the admin's add and change pages build it."""

    @classmethod
    def setUpTestData(cls):
        cls.staff, _, _ = make_users()

    def _form(self, instance=None, **changes):
        request = RequestFactory().get("/")
        request.user = self.staff
        form_class = site._registry[Collection].get_form(request, instance)
        collection = instance or Collection(name="Handbook")
        data = {f: getattr(collection, f) for f in Collection.CONFIG_FIELDS}
        data = {**data, "name": collection.name, "description": "", **changes}
        return form_class(data=data, instance=instance)

    def test_the_fixed_size_baseline_is_not_offered_for_a_live_collection(self):
        form = self._form(chunk_strategy="fixed")
        offered = [value for value, _ in form.fields["chunk_strategy"].choices]
        self.assertEqual(offered, ["structure"])
        self.assertIn("chunk_strategy", form.errors)
        valid = self._form()
        self.assertTrue(valid.is_valid(), valid.errors)
        self.client.force_login(self.staff)
        page = self.client.get(reverse("admin:kb_collection_add"))
        self.assertNotContains(page, 'value="fixed"')

    def test_a_collection_already_fixed_keeps_its_setting(self):
        fixed = Collection.objects.create(name="Old", chunk_strategy="fixed")
        form = self._form(instance=fixed)
        self.assertTrue(form.is_valid(), form.errors)
