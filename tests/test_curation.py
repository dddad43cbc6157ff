"""Curating in the admin: editing sources, their files, collection settings, and
who may see or touch what."""

from __future__ import annotations

from pathlib import Path

import django_rq
import pytest
from django.contrib.auth.models import Group
from django.contrib.staticfiles import finders
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import TestCase, TransactionTestCase
from django.urls import reverse
from django.utils import timezone
from rq.job import JobStatus

from kb import answering, evaluation, ingestion, jobs, permissions, queueing, uploads
from kb.models import Collection, GoldenCase, Section, Source
from tests.base import (
    COLLECTION_FORM,
    DemoTestCase,
    forget_jobs,
    make_users,
    run_burst_worker,
)


class SourceEditingTestCase(DemoTestCase):
    def setUp(self):
        super().setUp()
        self.source = self.demo.sources.get(file_name="deployment-runbook.md")
        self.url = reverse("admin:kb_source_change", args=[self.source.pk])

    def _save(self, **fields):
        empty = dict.fromkeys(["author", "tags", "url", "doc_version", "extra"], "")
        data = {"title": self.source.title, "text": self.source.text, **empty}
        data.update(fields)
        return self.client.post(self.url, data)

    def test_the_document_version_is_metadata_not_the_edit_counter(self):
        counter = self.source.version
        form = self.client.get(self.url).context["adminform"].form
        self.assertEqual(form.initial["doc_version"], "")
        self.assertEqual(self._save(doc_version="2.0-beta").status_code, 302)
        self.source.refresh_from_db()
        self.assertEqual(self.source.metadata["version"], "2.0-beta")
        self.assertEqual(self.source.version, counter + 1)
        form = self.client.get(self.url).context["adminform"].form
        self.assertEqual(form.initial["doc_version"], "2.0-beta")
        # Clearing it is an edit like any other.
        self.assertEqual(self._save(doc_version="").status_code, 302)
        self.source.refresh_from_db()
        self.assertNotIn("version", self.source.metadata)
        self.assertEqual(self.source.version, counter + 2)

    def test_a_citation_opens_the_text_as_indexed_after_an_edit(self):
        result, reply = answering.ask(self.demo, "When should I roll back a deploy?")
        cite = reply.citations[0]
        indexed = self.source.text
        cited = indexed[cite.start : cite.end]
        # An edit that is saved but not indexed yet (queued, or failed).
        Source.objects.filter(pk=self.source.pk).update(text="Preface. " * 20 + indexed)
        response = self.client.get(cite.url)
        self.assertEqual(response.context["cited"], cited)
        self.assertContains(response, "edited since this section was indexed")
        chunk = self.source.chunks.order_by("chunk_index").last()
        page = self.client.get(reverse("admin:kb_chunk_change", args=[chunk.pk]))
        self.assertContains(page, indexed[chunk.start : chunk.end][:40])

    def test_the_uploaded_file_is_offered_only_through_the_checked_view(self):
        response = self.client.get(self.url)
        self.assertContains(response, reverse("kb:source-file", args=[self.source.pk]))
        self.assertNotContains(response, "/media/")
        self.assertEqual(
            self.client.get("/media/" + self.source.file.name).status_code, 404
        )


class UploadFilesTestCase(TestCase):
    def setUp(self):
        self.collection = Collection.objects.create(name="Files")

    def _stored(self, source: Source) -> bool:
        return bool(source.file.name) and source.file.storage.exists(source.file.name)

    def test_a_new_version_replaces_the_old_upload(self):
        first, _ = uploads.store_source(self.collection, "a.md", b"# A\n\nOne.\n")
        old = first.file.name
        with self.captureOnCommitCallbacks(execute=True):
            second, outcome = uploads.store_source(
                self.collection, "a.md", b"# A\n\nTwo.\n"
            )
        self.assertEqual(outcome, "updated")
        self.assertTrue(self._stored(second))
        self.assertFalse(first.file.storage.exists(old))

    def test_deleting_a_source_or_its_collection_deletes_the_uploads(self):
        a, _ = uploads.store_source(self.collection, "a.md", b"# A\n\nOne.\n")
        b, _ = uploads.store_source(self.collection, "b.md", b"# B\n\nTwo.\n")
        names = [a.file.name, b.file.name]
        with self.captureOnCommitCallbacks(execute=True):
            a.delete()
        self.assertFalse(a.file.storage.exists(names[0]))
        self.assertTrue(b.file.storage.exists(names[1]))
        with self.captureOnCommitCallbacks(execute=True):
            self.collection.delete()
        self.assertFalse(b.file.storage.exists(names[1]))


TEA = b"Tea\n\nGreen tea brews at 75 degrees for two minutes.\n"
CURATED = {
    "author": "Tea Master",
    "tags": ["tea", "brewing"],
    "url": "https://tea.example/guide",
    "version": "2.0",
    "deprecated": True,
    "team": "kitchen",
}


class NewVersionUploadTestCase(TestCase):
    """A file uploaded again (same collection and name) is a new version of its
    source: what an editor curated stays unless the upload says otherwise."""

    def setUp(self):
        self.staff, _, _ = make_users()
        self.client.force_login(self.staff)
        self.collection = Collection.objects.create(name="Kitchen")

    def _upload(self, name: str, data: bytes, **fields):
        return self.client.post(
            reverse("admin:kb_source_upload"),
            {
                "collection": self.collection.pk,
                "files": [SimpleUploadedFile(name, data)],
                **fields,
            },
            follow=True,
        )

    def _edit(self, source: Source, **fields):
        """The change form posted as its page shows it (a browser sends the
        text's line breaks as CRLF), with `fields` changed."""
        form = self.client.get(reverse("admin:kb_source_change", args=[source.pk]))
        initial = form.context["adminform"].form.initial
        data = {k: v for k, v in initial.items() if v not in (None, False)}
        if "text" in data:
            data["text"] = data["text"].replace("\n", "\r\n")
        data.update(fields)
        response = self.client.post(
            reverse("admin:kb_source_change", args=[source.pk]), data
        )
        self.assertEqual(response.status_code, 302)

    def test_the_same_file_again_retries_a_source_whose_indexing_failed(self):
        self._upload("soup.md", b"# Soup\n\nSimmer for an hour.\n")
        source = Source.objects.get(file_name="soup.md")
        Source.objects.filter(pk=source.pk).update(
            status=Source.Status.FAILED, error="the worker ran out of memory"
        )
        response = self._upload("soup.md", b"# Soup\n\nSimmer for an hour.\n")
        self.assertContains(response, "whose indexing failed: queued again")
        source.refresh_from_db()
        self.assertEqual(source.status, Source.Status.QUEUED)

    def _curated(self, name: str, data: bytes) -> Source:
        """An indexed source with an editor's title and every kind of metadata."""
        self._upload(name, data, author="Someone", extra="team=kitchen")
        source = Source.objects.get(file_name=name)
        ingestion.ingest(source.pk)
        self._edit(
            source,
            title="Tea brewing guide",
            author="Tea Master",
            tags="tea, brewing",
            url="https://tea.example/guide",
            doc_version="2.0",
            deprecated="on",
        )
        ingestion.ingest(source.pk)
        source.refresh_from_db()
        self.assertEqual(source.title, "Tea brewing guide")
        self.assertEqual(source.metadata, CURATED)
        return source

    def test_empty_fields_keep_the_title_and_metadata_of_the_source(self):
        source = self._curated("tea.txt", TEA)
        response = self._upload("tea.txt", TEA.replace(b"two", b"three"))
        self.assertContains(response, "tea.txt: updated, queued for indexing")
        ingestion.ingest(source.pk)
        source.refresh_from_db()
        self.assertIn("three minutes", source.text)
        self.assertEqual(source.title, "Tea brewing guide")
        self.assertEqual(source.metadata, CURATED)
        self.assertFalse(source.is_title_auto)
        # Still deprecated: its chunks stay out of answers.
        self.assertTrue(all(c.metadata["deprecated"] for c in source.chunks.all()))
        # A title nobody typed still follows the document.
        self._upload("green.md", b"# Tea\n\nGreen.\n")
        self._upload("green.md", b"# Green tea\n\nGreen.\n")
        green = Source.objects.get(file_name="green.md")
        ingestion.ingest(green.pk)
        green.refresh_from_db()
        self.assertEqual(green.title, "Green tea")

    def test_a_filled_field_replaces_its_value_and_key_equals_removes_one(self):
        source = self._curated("tea.txt", TEA)
        self._upload(
            "tea.txt",
            TEA.replace(b"two", b"three"),
            title="Green tea",
            author="New Master",
            extra="team=\nshelf=B2",
        )
        source.refresh_from_db()
        self.assertEqual(source.title, "Green tea")
        expected = {**CURATED, "author": "New Master", "shelf": "B2"}
        del expected["team"]
        self.assertEqual(source.metadata, expected)

    def test_clear_fields_left_empty_clears_them_as_the_form_says(self):
        page = self.client.get(reverse("admin:kb_source_upload"))
        self.assertContains(page, "Clear fields left empty")
        self.assertContains(page, "fields above left empty keep what the source has")
        source = self._curated("tea.txt", TEA)
        self._upload("tea.txt", TEA, replace="on", tags="green")
        ingestion.ingest(source.pk)
        source.refresh_from_db()
        self.assertEqual(source.metadata, {"tags": ["green"]})
        self.assertEqual(source.title, "Tea")  # the document's own
        self.assertTrue(source.is_title_auto)

    def test_the_same_file_again_is_unchanged_after_edits_in_the_admin(self):
        html = b"<main><h1>Tea</h1><p>Green tea brews at 75 degrees.</p></main>"
        for name, data in (("tea.txt", TEA), ("tea.html", html)):
            source = self._curated(name, data)
            response = self._upload(name, data)
            self.assertContains(
                response, f"{name}: same content as the stored version; not re-indexed"
            )
            again = Source.objects.get(pk=source.pk)
            self.assertEqual(again.version, source.version, name)
            self.assertEqual(again.status, Source.Status.INDEXED, name)
            self.assertEqual(again.metadata, CURATED, name)


@pytest.mark.slow
class NewVersionByWorkerTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees only committed rows.

    def tearDown(self):
        forget_jobs()

    def test_a_new_version_indexed_by_a_worker_keeps_what_the_editor_curated(self):
        staff, _, _ = make_users()
        self.client.force_login(staff)
        collection = Collection.objects.create(name="Kitchen")
        upload = reverse("admin:kb_source_upload")
        first = SimpleUploadedFile("tea.txt", TEA)
        self.client.post(
            upload, {"collection": collection.pk, "files": [first], "tags": "tea"}
        )
        run_burst_worker()
        source = Source.objects.get()
        change = reverse("admin:kb_source_change", args=[source.pk])
        self.client.post(
            change,
            {
                "title": "Tea brewing guide",
                "text": source.text,
                "tags": "tea",
                "deprecated": "on",
            },
        )
        run_burst_worker()
        self.client.post(
            upload,
            {
                "collection": collection.pk,
                "files": [SimpleUploadedFile("tea.txt", TEA.replace(b"two", b"three"))],
            },
        )
        run_burst_worker()
        source.refresh_from_db()
        self.assertEqual(source.status, Source.Status.INDEXED, source.error)
        self.assertIn("three minutes", source.text)
        self.assertEqual(source.title, "Tea brewing guide")
        self.assertEqual(source.metadata, {"tags": ["tea"], "deprecated": True})
        chunk = source.chunks.get()
        # Embedded under the editor's title (the heading path of a text file).
        self.assertTrue(chunk.embedded_text.startswith("Tea brewing guide\n\n"))
        self.assertEqual(chunk.metadata["deprecated"], True)


class CollectionSettingsTestCase(TestCase):
    def setUp(self):
        self.staff, _, _ = make_users()
        self.client.force_login(self.staff)

    def _add(self, **fields):
        data = {"name": "New", **COLLECTION_FORM}
        data.update(fields)
        return self.client.post(reverse("admin:kb_collection_add"), data)

    def test_settings_no_index_could_be_built_with_are_refused(self):
        refusals = {
            "chunk_tokens": (5, "Chunks need 16 to 254 tokens"),
            "top_k": (0, "Take 1 to 50 sections"),
            "context_budget": (0, "holds no answer"),
            "chunk_overlap": (150, "over half of a 200-token chunk"),
        }
        for field, (value, message) in refusals.items():
            response = self._add(**{field: value})
            self.assertContains(response, message, msg_prefix=field)
        self.assertFalse(Collection.objects.exists())
        self.assertEqual(self._add().status_code, 302)

    def test_the_floor_and_scratch_flag_are_not_set_by_hand(self):
        other = Collection.objects.create(name="Other")
        response = self._add(recall_floor=0.1, is_scratch="on", live=other.pk)
        self.assertEqual(response.status_code, 302)
        created = Collection.objects.get(name="New")
        self.assertIsNone(created.recall_floor)
        self.assertFalse(created.is_scratch)
        self.assertIsNone(created.live)


class GroupLimitsInTheAdminTestCase(TestCase):
    """A collection limited to a group is hidden from other editors in the admin,
    as on the ask page."""

    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, _ = make_users(permissions.CONTENT_EDITOR)
        cls.secret = Collection.objects.create(name="Salaries")
        cls.secret.groups.add(Group.objects.create(name="payroll"))
        cls.open = Collection.objects.create(name="Handbook")
        cls.hidden, _ = uploads.store_source(cls.secret, "pay.md", b"# Pay\n\nX.\n")
        cls.shown, _ = uploads.store_source(cls.open, "leave.md", b"# Leave\n\nY.\n")
        for source in (cls.hidden, cls.shown):
            ingestion.ingest(source.pk)

    def setUp(self):
        self.client.force_login(self.editor)

    def test_sections_are_not_edited_in_the_admin(self):
        self.client.force_login(self.staff)
        section = self.shown.sections.first()
        url = reverse("admin:kb_section_change", args=[section.pk])
        response = self.client.post(url, {"source": self.hidden.pk, "heading": "x"})
        self.assertEqual(response.status_code, 403)
        section.refresh_from_db()
        self.assertEqual(section.source_id, self.shown.pk)

    def test_an_editor_deletes_a_source_with_its_index_but_no_hidden_one(self):
        url = reverse("admin:kb_source_delete", args=[self.shown.pk])
        page = self.client.get(url)
        self.assertContains(page, "Are you sure")
        self.assertNotContains(page, "permission to delete")
        self.assertRedirects(
            self.client.post(url, {"post": "yes"}),
            reverse("admin:kb_source_changelist"),
        )
        self.assertFalse(Source.objects.filter(pk=self.shown.pk).exists())
        self.assertFalse(Section.objects.filter(source_id=self.shown.pk).exists())
        hidden = reverse("admin:kb_source_delete", args=[self.hidden.pk])
        self.client.post(hidden, {"post": "yes"})
        self.assertTrue(Source.objects.filter(pk=self.hidden.pk).exists())

    def test_lists_pages_and_forms_leave_the_collection_out(self):
        sources = self.client.get(reverse("admin:kb_source_changelist"))
        self.assertContains(sources, "leave.md")
        self.assertNotContains(sources, "pay.md")
        self.assertNotContains(sources, "Salaries")
        change = reverse("admin:kb_source_change", args=[self.hidden.pk])
        self.assertNotEqual(self.client.get(change).status_code, 200)
        reindex = reverse("admin:kb_source_reindex", args=[self.hidden.pk])
        self.assertEqual(self.client.post(reindex).status_code, 404)
        sections = self.client.get(reverse("admin:kb_section_changelist"))
        self.assertNotContains(sections, "Pay")
        chunks = self.client.get(reverse("admin:kb_chunk_changelist"))
        self.assertNotContains(chunks, "pay.md")

    def test_an_upload_into_it_is_refused(self):
        upload = self.client.get(reverse("admin:kb_source_upload"))
        self.assertContains(upload, "Handbook")
        self.assertNotContains(upload, "Salaries")
        response = self.client.post(
            reverse("admin:kb_source_upload"),
            {
                "collection": self.secret.pk,
                "files": [SimpleUploadedFile("new.md", b"# New\n\nZ.\n")],
            },
        )
        self.assertContains(response, "Select a valid choice", status_code=400)
        self.assertFalse(self.secret.sources.filter(file_name="new.md").exists())

    def test_its_cases_runs_and_dashboard_are_hidden_too(self):
        stale = {"file": "pay.md", "start": 0, "end": 5, "text": "Payday"}
        GoldenCase.objects.create(
            collection=self.secret,
            external_id="pay-day",
            question="When is payday?",
            kind="definition",
            required_spans=[stale],
        )
        cases = self.client.get(reverse("admin:kb_goldencase_changelist"))
        self.assertNotContains(cases, "pay-day")
        self.assertNotContains(cases, "When is payday?")  # nor in the stale banner
        self.client.force_login(self.staff)
        cases = self.client.get(reverse("admin:kb_goldencase_changelist"))
        self.assertContains(cases, "When is payday?")  # it is stale, and shown
        self.client.force_login(self.editor)
        dashboard = reverse("admin:kb_evalrun_dashboard")
        page = self.client.get(dashboard, {"collection": self.secret.pk})
        self.assertNotContains(page, "Salaries")
        sources = reverse("admin:kb_goldencase_sources")
        self.assertEqual(
            self.client.get(sources, {"collection": self.secret.pk}).status_code, 404
        )
        copy = evaluation.scratch_copy(self.secret, {"chunk_tokens": 120})
        self.assertEqual(copy.live, self.secret)  # whose groups decide who sees it
        self.assertFalse(Collection.objects.open_to(self.editor).filter(pk=copy.pk))

    def test_a_member_of_the_group_sees_it(self):
        self.editor.groups.add(Group.objects.get(name="payroll"))
        sources = self.client.get(reverse("admin:kb_source_changelist"))
        self.assertContains(sources, "pay.md")


class ScratchCopyLimitsTestCase(TestCase):
    """A scratch copy (a shadow index's, a run's) is open to whoever may see its
    live collection, as that one's groups are now, and no admin list shows it
    (issue #26)."""

    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, _ = make_users(permissions.CONTENT_EDITOR)
        User = cls.editor.__class__
        # other_admin: in the admin group, not in payroll; member: in payroll
        cls.other_admin = User.objects.create_user("other", is_staff=True)
        cls.other_admin.groups.add(Group.objects.get(name=permissions.ADMIN))
        cls.member = User.objects.create_user("member", is_staff=True)
        payroll = Group.objects.create(name="payroll")
        cls.member.groups.add(payroll, Group.objects.get(name=permissions.ADMIN))
        cls.live = Collection.objects.create(name="Salaries")
        source, _ = uploads.store_source(
            cls.live, "pay.md", b"# Pay\n\nPaid on the 9th.\n"
        )
        ingestion.ingest(source.pk)
        cls.copy = evaluation.scratch_copy(cls.live, {"chunk_tokens": 120})
        cls.copied = cls.copy.sources.get()
        ingestion.ingest(cls.copied.pk)
        cls.chunk = cls.copied.chunks.first()
        cls.live.groups.add(payroll)  # limited after the copy was made

    def _get(self, user, name, *args, **query):
        self.client.force_login(user)
        return self.client.get(reverse(name, args=args), query)

    def test_an_outsider_gets_none_of_its_text(self):
        sources = self._get(
            self.editor, "admin:kb_goldencase_sources", collection=self.copy.pk
        )
        self.assertEqual(sources.status_code, 404)
        self.assertNotContains(sources, "9th", status_code=404)
        listed = self._get(
            self.editor,
            "admin:kb_source_changelist",
            collection__id__exact=self.copy.pk,
        )
        self.assertNotContains(listed, "pay.md")
        pages = {
            "source": self.copied.pk,
            "chunk": self.chunk.pk,
            "section": self.chunk.section_id,
        }
        for model, pk in pages.items():
            name = f"admin:kb_{model}_change"
            page = self._get(self.editor, name, pk)
            self.assertEqual(page.status_code, 302, name)  # "does not exist"
        chunks = self._get(self.editor, "admin:kb_chunk_changelist")
        self.assertNotContains(chunks, "pay.md")

    def test_an_admin_of_another_group_cannot_open_its_pages(self):
        for name in ("admin:kb_collection_change", "admin:kb_collection_delete"):
            page = self._get(self.other_admin, name, self.copy.pk)
            self.assertEqual(page.status_code, 302, name)  # "does not exist"
        policy = self._get(self.other_admin, "admin:kb_collection_policy", self.copy.pk)
        self.assertEqual(policy.status_code, 404)
        reindex = reverse("admin:kb_collection_reindex", args=[self.copy.pk])
        self.assertEqual(self.client.post(reindex).status_code, 404)
        self.client.post(
            reverse("admin:kb_collection_delete", args=[self.copy.pk]), {"post": "yes"}
        )
        self.assertTrue(Collection.objects.filter(pk=self.copy.pk).exists())

    def test_a_member_of_the_live_groups_opens_it_but_no_list_shows_it(self):
        chunk = self._get(self.member, "admin:kb_chunk_change", self.chunk.pk)
        self.assertContains(chunk, "9th")
        sources = self._get(
            self.member, "admin:kb_goldencase_sources", collection=self.copy.pk
        )
        self.assertContains(sources, "9th")
        page = self._get(self.member, "admin:kb_collection_change", self.copy.pk)
        self.assertContains(page, "Salaries [scratch")
        self.assertNotContains(page, 'name="chunk_tokens"')  # its job's, not edited
        policy = self._get(self.member, "admin:kb_collection_policy", self.copy.pk)
        self.assertEqual(policy.status_code, 404)  # a live collection's page
        for user in (self.member, self.staff):
            for name in (
                "admin:kb_collection_changelist",
                "admin:kb_source_changelist",
                "admin:kb_chunk_changelist",
                "admin:kb_section_changelist",
            ):
                listed = self._get(user, name)
                self.assertEqual(listed.status_code, 200, name)
                self.assertNotContains(listed, "[scratch", msg_prefix=name)
        filtered = self._get(
            self.staff, "admin:kb_source_changelist", collection__id__exact=self.copy.pk
        )
        copied = reverse("admin:kb_source_change", args=[self.copied.pk])
        self.assertNotContains(filtered, copied)
        self.assertNotContains(filtered, "[scratch")

    def test_it_goes_with_its_live_collection(self):
        self.live.delete()
        self.assertFalse(Collection.objects.filter(pk=self.copy.pk).exists())


class CollectionGroupsTestCase(TestCase):
    """A collection's groups are the superusers' to set; a name clash reveals
    nothing."""

    @classmethod
    def setUpTestData(cls):
        # editor: an admin-group member (may change collections), no superuser
        cls.staff, cls.editor, cls.alice = make_users(permissions.ADMIN)
        cls.legal = Group.objects.create(name="legal-team")
        cls.open = Collection.objects.create(name="Handbook")
        cls.secret = Collection.objects.create(name="Secret")
        cls.secret.groups.add(cls.legal)

    def _change(self, user, collection, **data):
        self.client.force_login(user)
        url = reverse("admin:kb_collection_change", args=[collection.pk])
        return self.client.post(
            url, {"name": collection.name, **COLLECTION_FORM, **data}
        )

    def test_an_admin_member_cannot_set_groups(self):
        response = self._change(self.editor, self.open, groups=[self.legal.pk])
        self.assertEqual(response.status_code, 302)  # saved, groups left alone
        self.assertFalse(self.open.groups.exists())
        self._change(self.staff, self.open, groups=[self.legal.pk])  # a superuser
        self.assertEqual(list(self.open.groups.all()), [self.legal])

    def test_an_admin_member_sees_no_list_of_groups(self):
        self.client.force_login(self.editor)
        url = reverse("admin:kb_collection_change", args=[self.open.pk])
        page = self.client.get(url)
        self.assertEqual(page.status_code, 200)
        self.assertNotContains(page, 'name="groups"')
        self.assertNotContains(page, "legal-team")

    def test_a_hidden_name_is_refused_like_a_visible_one(self):
        self.client.force_login(self.editor)
        url = reverse("admin:kb_collection_add")
        errors = []
        for name in ("Secret", "Handbook"):  # hidden from the editor, and shown
            response = self.client.post(url, {"name": name, **COLLECTION_FORM})
            self.assertEqual(response.status_code, 200)
            errors.append(response.context["adminform"].form.errors["name"])
            self.assertNotContains(response, "already exists")
        self.assertEqual(errors[0], errors[1])
        self.assertEqual(errors[0], ["This name cannot be used; choose another."])
        self.assertEqual(Collection.objects.count(), 2)


class JobQueuePagesTestCase(TestCase):
    def setUp(self):
        self.staff, self.editor, _ = make_users()

    def test_only_superusers_may_empty_a_queue(self):
        url = reverse("django_rq:clear", args=[0])
        self.client.force_login(self.editor)
        self.assertEqual(self.client.get(url).status_code, 403)
        self.assertEqual(self.client.get(reverse("django_rq:home")).status_code, 403)
        self.client.force_login(self.staff)
        self.assertEqual(self.client.get(reverse("django_rq:home")).status_code, 200)
        # Nor through django-rq's own admin entry, nor its JSON statistics.
        self.client.force_login(self.editor)
        self.assertEqual(self.client.get("/admin/django_rq/").status_code, 404)
        stats = self.client.get(reverse("django_rq:home_json"))
        self.assertEqual(stats.status_code, 403)
        self.client.logout()
        self.assertEqual(self.client.get(url).status_code, 302)


class LostJobsTestCase(TestCase):
    """A source whose job vanished (queue emptied, Redis restarted) says so, stops
    the page refreshing forever, and is queued again by kb_run."""

    def setUp(self):
        forget_jobs()  # positions in the queue count only this test's jobs
        self.staff, _, _ = make_users()
        self.client.force_login(self.staff)
        collection = Collection.objects.create(name="Lost")
        self.source, _ = uploads.store_source(collection, "a.md", b"# A\n\nA.\n")
        with self.captureOnCommitCallbacks(execute=True):  # jobs go on commit
            queueing.enqueue_ingest(self.source)
        Source.objects.filter(pk=self.source.pk).update(
            updated=timezone.now() - jobs.STRANDED_AFTER * 2
        )
        self.source.refresh_from_db()

    def tearDown(self):
        django_rq.get_queue().empty()

    def test_a_source_whose_job_is_gone_is_flagged_and_requeued(self):
        self.assertEqual(jobs.stranded([self.source]), [])  # its job still waits
        django_rq.get_queue().empty()
        self.assertEqual(jobs.stranded([self.source]), [self.source])
        page = self.client.get(reverse("admin:kb_source_changelist"))
        self.assertContains(page, "have no working job any more")
        self.assertContains(page, "its job was lost")
        self.assertNotContains(page, "refreshes itself")
        with self.captureOnCommitCallbacks(execute=True):
            self.assertEqual(jobs.requeue_stranded(), 1)
        self.source.refresh_from_db()
        job = django_rq.get_queue().fetch_job(queueing.ingest_job_id(self.source))
        self.assertEqual(job.args, (self.source.pk, self.source.version))
        self.assertEqual(jobs.requeue_stranded(), 0)

    def test_a_queued_source_says_how_many_jobs_come_before_it(self):
        collection = self.source.collection
        later = []
        for name in ("b.md", "c.md"):
            source, _ = uploads.store_source(collection, name, b"# B\n\nB.\n")
            with self.captureOnCommitCallbacks(execute=True):
                queueing.enqueue_ingest(source)
            later.append(source)
        self.assertEqual(
            jobs.jobs_ahead([self.source, *later]),
            {self.source.pk: 0, later[0].pk: 1, later[1].pk: 2},
        )
        page = self.client.get(reverse("admin:kb_source_changelist"))
        self.assertContains(page, "queued behind 2 job(s)")
        self.assertContains(page, "queued behind 1 job(s)")

    def test_a_source_published_after_its_row_was_read_is_not_flagged(self):
        # The page read the row while queued; the job then finished and
        # published the source before the queue was asked.
        job = django_rq.get_queue().fetch_job(queueing.ingest_job_id(self.source))
        job.set_status(JobStatus.FINISHED)
        Source.objects.filter(pk=self.source.pk).update(
            status=Source.Status.INDEXED, indexed_version=self.source.version
        )
        self.assertEqual(self.source.status, Source.Status.QUEUED)  # as read
        self.assertEqual(jobs.stranded([self.source]), [])
        # Still waiting when read again: flagged, as before.
        Source.objects.filter(pk=self.source.pk).update(status=Source.Status.QUEUED)
        self.assertEqual(jobs.stranded([self.source]), [self.source])

    def test_a_dead_indexing_job_counts_and_evaluation_copies_do_not(self):
        django_rq.get_queue().empty()
        Source.objects.filter(pk=self.source.pk).update(status=Source.Status.INDEXING)
        self.source.refresh_from_db()
        self.assertEqual(jobs.stranded([self.source]), [self.source])
        # A run's scratch copy is indexed in the run's process, without jobs.
        Collection.objects.filter(pk=self.source.collection_id).update(is_scratch=True)
        self.source = Source.objects.select_related("collection").get(pk=self.source.pk)
        self.assertEqual(jobs.stranded([self.source]), [])


class AutoRefreshTestCase(TestCase):
    def setUp(self):
        self.staff, _, _ = make_users()
        self.client.force_login(self.staff)
        self.busy = Collection.objects.create(name="Busy")
        self.idle = Collection.objects.create(name="Idle")
        self.queued, _ = uploads.store_source(self.busy, "q.md", b"# Q\n\nQ.\n")
        uploads.store_source(self.idle, "i.md", b"# I\n\nI.\n")
        Source.objects.filter(collection=self.idle).update(status=Source.Status.INDEXED)

    def test_pages_refresh_only_while_what_they_show_is_indexing(self):
        changelist = reverse("admin:kb_source_changelist")
        self.assertContains(self.client.get(changelist), "refreshes itself")
        idle = self.client.get(changelist, {"collection__id__exact": self.idle.pk})
        self.assertNotContains(idle, "refreshes itself")
        change = reverse("admin:kb_source_change", args=[self.queued.pk])
        page = self.client.get(change)
        self.assertContains(page, "refreshes itself")
        # The reload waits for a user who has not started typing or selecting
        # (a static script, as the Content-Security-Policy wants; run in
        # tests/test_browser.py).
        self.assertContains(page, 'src="/static/kb/auto_refresh.js"')
        script = Path(finders.find("kb/auto_refresh.js")).read_text()
        self.assertIn("paused while you edit", script)
        self.assertIn("stopped: you changed a field", script)
