"""Re-indexing that goes live only when it holds (kb/reindexing.py, issue #18)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import TestCase, TransactionTestCase
from django.urls import reverse

from kb import (
    evaluation,
    index_config,
    ingestion,
    jobs,
    permissions,
    queueing,
    reindexing,
)
from kb.demo import load_part
from kb.models import (
    Chunk,
    Collection,
    EvalRun,
    Question,
    ReplayReport,
    Section,
    ShadowIndex,
    Source,
)
from tests.base import COLLECTION_FORM, forget_jobs, make_users, run_burst_worker

# Two demo files and the five demo cases whose evidence is in them. With the
# default 200-token chunks every case is found (recall@5 1.0); 250-token chunks
# keep all five; 120-token chunks split the evidence of friend-visit-wifi (a Wi-Fi
# answer in one file, a visitor rule in the other) and lose it: recall 0.8.
FILES = ["office-faq.txt", "security-policy.md"]
LOST_AT_120 = "friend-visit-wifi"
QUESTION = "Which Wi-Fi network can a visiting friend use?"
Status = ShadowIndex.Status


def make_gated(name: str = "Gate", floor: float | None = 1.0) -> Collection:
    """The two files indexed (in this process) with their cases and a floor."""
    collection = load_part(name, FILES)
    Collection.objects.filter(pk=collection.pk).update(recall_floor=floor)
    collection.recall_floor = floor
    return collection


def chunk_ids(collection: Collection) -> list[int]:
    return sorted(
        Chunk.objects.filter(source__collection=collection).values_list("pk", flat=True)
    )


def built_with(collection: Collection, field: str = "chunk_tokens") -> set:
    """The setting each of the collection's indexed sources was built with."""
    return {
        s.stats["config"][field]
        for s in collection.sources.filter(indexed_version__isnull=False)
    }


def dashboard(client, collection: Collection):
    url = reverse("admin:kb_evalrun_dashboard")
    return client.get(url, {"collection": collection.pk})


class ShadowTestCase(TestCase):
    """The build job run in this process (kb.jobs.build_shadow calls
    reindexing.run): the steps, and what askers and admins see between them."""

    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, cls.alice = make_users()
        cls.gate = make_gated()

    def setUp(self):
        self.client.force_login(self.staff)

    def _ask(self) -> dict:
        response = self.client.post(
            reverse("kb:api-ask"),
            json.dumps({"question": QUESTION, "collection": self.gate.name}),
            content_type="application/json",
        )
        self.assertEqual(response.status_code, 200)
        body = response.json()
        body.pop("timings_ms")
        body.pop("id")  # each answer is a new entry of the question log
        return body

    def _held(self) -> ShadowIndex:
        shadow = reindexing.start(self.gate, {"chunk_tokens": 120}, self.staff)
        self.assertEqual(
            reindexing.run(shadow.pk), "held: recall@5 0.800 < the recall floor 1.000"
        )
        shadow.refresh_from_db()
        return shadow

    def test_it_swaps_when_recall_holds_and_citations_stay_valid(self):
        before = self._ask()
        cited = before["citations"][0]
        sections = sorted(
            Section.objects.filter(source__collection=self.gate).values_list(
                "pk", flat=True
            )
        )
        shadow = reindexing.start(self.gate, {"chunk_tokens": 250}, self.staff)
        self.assertEqual(reindexing.run(shadow.pk), "swapped")

        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.SWAPPED)
        self.assertEqual((shadow.recall, shadow.bar), (1.0, 1.0))
        self.assertIn("≥ the recall floor 1.000", shadow.decision)
        self.gate.refresh_from_db()
        self.assertEqual(self.gate.chunk_tokens, 250)
        self.assertEqual(built_with(self.gate), {250})
        self.assertEqual(index_config.index_differences(self.gate), [])
        self.assertFalse(Collection.objects.filter(is_scratch=True).exists())
        # The sections, and so every citation made before the swap, are the same.
        self.assertEqual(
            sorted(
                Section.objects.filter(source__collection=self.gate).values_list(
                    "pk", flat=True
                )
            ),
            sections,
        )
        page = self.client.get(cited["url"])
        source = Source.objects.get(pk=cited["source_id"])
        self.assertContains(page, '<mark id="cited"')
        quoted = source.text[cited["start"] : cited["end"]]
        self.assertIn(quoted.split("\n")[0][:40], page.content.decode())
        after = self._ask()  # answered from the new chunks, citing the same rows
        self.assertLessEqual(
            {c["section_id"] for c in after["citations"]}, set(sections)
        )

    def test_a_source_that_had_failed_before_the_build_is_left_alone(self):
        failed = Source.objects.create(
            collection=self.gate,
            title="Scan",
            file_name="scan.pdf",
            text="",
            content_hash="scan",
            status=Source.Status.FAILED,
            error="scan.pdf has no text layer",
        )
        shadow = reindexing.start(self.gate, {"chunk_tokens": 250}, self.staff)
        self.assertEqual(reindexing.run(shadow.pk), "swapped")
        shadow.refresh_from_db()
        self.assertEqual(shadow.progress["requeued"], [])
        failed.refresh_from_db()
        self.assertEqual(failed.status, Source.Status.FAILED)
        self.assertEqual(failed.error, "scan.pdf has no text layer")
        self.assertNotContains(dashboard(self.client, self.gate), "scan.pdf")

    def test_asks_during_the_build_answer_from_the_old_index(self):
        before = self._ask()
        live_chunks = chunk_ids(self.gate)
        shadow = reindexing.start(self.gate, {"chunk_tokens": 120}, self.staff)
        scratch = reindexing.build(shadow)  # built, not yet evaluated or swapped

        self.assertEqual(self._ask(), before)  # the same answer, from the same index
        self.assertEqual(chunk_ids(self.gate), live_chunks)
        self.assertEqual(built_with(self.gate), {200})
        self.assertEqual(built_with(scratch), {120})
        self.assertNotEqual(chunk_ids(scratch), [])
        # The shadow is no collection anyone can ask in or pick.
        self.assertFalse(scratch.is_visible_to(self.staff))
        self.assertNotContains(self.client.get(reverse("kb:ask")), scratch.name)
        self.assertEqual(scratch.live, self.gate)  # whose groups decide who sees it
        page = dashboard(self.client, self.gate)
        self.assertContains(page, f"Shadow index #{shadow.pk}: Building")
        self.assertContains(page, "chunk_tokens 200 → 120")

    def test_below_the_floor_it_waits_for_an_admin_with_the_lost_cases(self):
        live_chunks = chunk_ids(self.gate)
        shadow = self._held()
        self.assertEqual(shadow.status, Status.HELD)
        self.assertEqual(
            (shadow.recall, shadow.bar, shadow.live_recall), (0.8, 1.0, 1.0)
        )
        self.assertEqual([c["id"] for c in shadow.regressed], [LOST_AT_120])
        self.gate.refresh_from_db()
        self.assertEqual(self.gate.chunk_tokens, 200)
        self.assertEqual(chunk_ids(self.gate), live_chunks)

        page = dashboard(self.client, self.gate)
        self.assertContains(page, f"Shadow index #{shadow.pk}: Held")
        self.assertContains(
            page,
            'recall@k on the shadow <strong class="below-'
            'floor">0.800</strong> against a bar of <strong>1.000'
            "</strong> (the recall floor then)",
        )
        self.assertContains(page, f"(shadow index #{shadow.pk})")  # its run
        self.assertContains(page, LOST_AT_120)
        approve = reverse("admin:kb_shadow_approve", args=[shadow.pk])
        discard = reverse("admin:kb_shadow_discard", args=[shadow.pk])
        for url in (approve, discard):  # forms that POST with the CSRF token
            form = f'method="post" action="{url}"[^>]*><input type="hidden" '
            self.assertRegex(page.content.decode(), form + 'name="csrfmiddlewaretoken"')
        # Discarding throws the build away: the browser asks first (dashboard.js).
        self.assertContains(page, f'data-confirm="Discard shadow index #{shadow.pk}?')
        # Both runs are kept: the shadow's as an experiment, the live one beside it.
        self.assertContains(page, f"#{shadow.run_id}</a>")
        self.assertTrue(evaluation.is_experiment(shadow.run))
        self.assertFalse(evaluation.is_experiment(shadow.live_run))

    def test_an_admin_approves_a_held_shadow_and_it_swaps(self):
        shadow = self._held()
        url = reverse("admin:kb_shadow_approve", args=[shadow.pk])
        # The button leads to a page that says what the swap loses, and asks.
        page = self.client.post(url)
        self.assertContains(page, f"Swap shadow index #{shadow.pk} into live?")
        self.assertContains(page, "against a bar of <strong>1.000</strong>")
        self.assertContains(page, LOST_AT_120)
        self.assertContains(page, '<input type="hidden" name="confirmed" value="yes">')
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.HELD)  # not yet
        response = self.client.post(url, {"confirmed": "yes"})
        self.assertRedirects(
            response,
            reverse("admin:kb_evalrun_dashboard")
            + f"?collection={self.gate.pk}#shadows",
            fetch_redirect_response=False,
        )
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.APPROVED)
        self.assertEqual(jobs.swap_shadow(shadow.pk), "swapped")  # the queued job

        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.SWAPPED)
        self.assertIn("approved by staff", shadow.decision)
        self.gate.refresh_from_db()
        self.assertEqual(self.gate.chunk_tokens, 120)
        self.assertEqual(built_with(self.gate), {120})
        # The dashboard's headline is now about the settings in use: the shadow's
        # measurement, as a run of the live configuration.
        page = dashboard(self.client, self.gate)
        live = EvalRun.objects.filter(collection=self.gate).latest("created")
        self.assertFalse(evaluation.is_experiment(live))
        self.assertEqual(live.recall, shadow.recall)
        self.assertContains(page, f"Run #{live.pk}: recall@")
        self.assertContains(page, f"measured on shadow index #{shadow.pk}, now live")
        self.assertContains(page, "structure 120 tok")
        again = self.client.post(url, follow=True)
        self.assertContains(again, "is not held; left as it is")

    def test_discarding_a_held_shadow_leaves_the_live_index(self):
        live_chunks = chunk_ids(self.gate)
        shadow = self._held()
        self.client.post(reverse("admin:kb_shadow_discard", args=[shadow.pk]))
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.DISCARDED)
        self.assertEqual(shadow.decided_by, self.staff)
        self.assertEqual(jobs.drop_scratch(shadow.scratch_id), 1)  # the queued job
        self.assertFalse(Collection.objects.filter(is_scratch=True).exists())
        self.gate.refresh_from_db()
        self.assertEqual(self.gate.chunk_tokens, 200)
        self.assertEqual(chunk_ids(self.gate), live_chunks)
        approve = reverse("admin:kb_shadow_approve", args=[shadow.pk])
        self.assertContains(self.client.post(approve, follow=True), "is not held")
        self.assertEqual(
            jobs.swap_shadow(shadow.pk), f"stood down: shadow {shadow.pk} is discarded"
        )

    def test_a_failing_build_leaves_the_live_index_and_says_why(self):
        # A metadata field far too long to embed: under a policy that embeds it,
        # every chunk of this source overflows the model's window.
        source = self.gate.sources.get(file_name="office-faq.txt")
        Source.objects.filter(pk=source.pk).update(metadata={"summary": "word " * 400})
        source.queue_new_version()
        ingestion.ingest(source.pk)
        live_chunks = chunk_ids(self.gate)
        url = reverse("admin:kb_collection_policy", args=[self.gate.pk])
        data = {
            n: f.initial for n, f in self.client.get(url).context["form"].fields.items()
        }
        self.client.post(url, {**data, "summary": "embed"})
        shadow = ShadowIndex.objects.get(collection=self.gate)

        with self.assertRaises(reindexing.ShadowFailed):
            reindexing.run(shadow.pk)
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.FAILED)
        self.assertIn("office-faq.txt: ", shadow.error)
        self.assertRegex(shadow.error, "exceeds? the embedding window")
        self.assertIn("the live index is unchanged", shadow.error)
        self.gate.refresh_from_db()
        self.assertNotIn("summary", self.gate.metadata_policy)
        self.assertEqual(chunk_ids(self.gate), live_chunks)
        self.assertEqual(self.gate.sources.get(pk=source.pk).status, "indexed")
        page = dashboard(self.client, self.gate)
        self.assertContains(page, "The shadow could not be built: office-faq.txt")
        self.assertContains(page, "policy of summary retrieve → embed")

    def test_deleting_the_collection_deletes_its_shadow_copy(self):
        self._held()
        self.assertTrue(Collection.objects.filter(is_scratch=True).exists())
        self.gate.delete()
        self.assertFalse(Collection.objects.exists())

    def test_without_golden_cases_it_swaps_and_says_so(self):
        self.gate.golden_cases.all().delete()
        shadow = reindexing.start(self.gate, {"chunk_overlap": 20}, self.staff)
        self.assertEqual(reindexing.run(shadow.pk), "swapped")
        shadow.refresh_from_db()
        self.assertEqual(
            shadow.decision, "no golden cases to evaluate: swapped without a check"
        )
        self.assertEqual(built_with(self.gate, "chunk_overlap"), {20})
        self.assertContains(dashboard(self.client, self.gate), "without a check")

    def test_without_a_floor_the_bar_is_the_live_recall(self):
        Collection.objects.filter(pk=self.gate.pk).update(recall_floor=None)
        shadow = reindexing.start(self.gate, {"chunk_tokens": 120}, self.staff)
        reindexing.run(shadow.pk)
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.HELD)
        self.assertIn("the live index's recall 1.000 (no floor set)", shadow.decision)
        # A floor set afterwards does not rewrite what this shadow was held against.
        Collection.objects.filter(pk=self.gate.pk).update(recall_floor=0.9)
        self.assertContains(
            dashboard(self.client, self.gate),
            "(no floor set then: the live index's recall)",
        )

    def test_a_later_change_supersedes_an_open_shadow(self):
        first = reindexing.start(self.gate, {"chunk_tokens": 120}, self.staff)
        second = reindexing.start(self.gate, {"chunk_overlap": 20}, self.staff)
        first.refresh_from_db()
        self.assertEqual(first.status, Status.DISCARDED)
        self.assertEqual(first.decision, "superseded by a later change")
        self.assertEqual(second.new_settings["chunk_tokens"], 120)  # both changes
        self.assertEqual(second.new_settings["chunk_overlap"], 20)
        self.assertEqual(
            reindexing.run(first.pk), f"skipped: shadow {first.pk} is discarded"
        )
        # Undoing the change leaves nothing to build.
        undone = {"chunk_tokens": 200, "chunk_overlap": 0}
        self.assertIsNone(reindexing.start(self.gate, undone))
        second.refresh_from_db()
        self.assertEqual(second.status, Status.DISCARDED)

    def test_the_decisions_are_post_only_and_for_admins_who_see_the_collection(self):
        shadow = self._held()
        approve = reverse("admin:kb_shadow_approve", args=[shadow.pk])
        discard = reverse("admin:kb_shadow_discard", args=[shadow.pk])
        self.assertEqual(self.client.get(approve).status_code, 405)
        permissions.ensure_groups()
        self.editor.groups.add(Group.objects.get(name=permissions.CONTENT_EDITOR))
        self.client.force_login(self.editor)
        self.assertEqual(self.client.post(approve).status_code, 403)
        self.assertEqual(self.client.post(discard).status_code, 403)
        self.assertNotContains(dashboard(self.client, self.gate), discard)
        self.editor.groups.add(Group.objects.get(name=permissions.ADMIN))
        self.gate.groups.add(Group.objects.create(name="legal"))
        self.assertEqual(self.client.post(discard).status_code, 404)
        self.client.logout()
        self.assertEqual(self.client.post(discard).status_code, 302)  # to log in
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.HELD)


@pytest.mark.slow
class ShadowWorkerTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees only committed rows.

    def setUp(self):
        forget_jobs()
        self.staff, _, _ = make_users()
        self.client.force_login(self.staff)
        self.gate = make_gated()

    def _change(self, **settings) -> None:
        """The collection's admin change form, with these settings."""
        data = {"name": self.gate.name, **COLLECTION_FORM, **settings}
        url = reverse("admin:kb_collection_change", args=[self.gate.pk])
        response = self.client.post(url, data, follow=True)
        self.assertContains(response, "are being built as shadow index")

    def _upload(self, name: str, text: str) -> None:
        self.client.post(
            reverse("admin:kb_source_upload"),
            {
                "collection": self.gate.pk,
                "files": SimpleUploadedFile(name, text.encode(), "text/markdown"),
            },
        )

    def test_a_settings_change_builds_evaluates_and_swaps_in_a_worker(self):
        asked = self.client.post(
            reverse("kb:api-ask"),
            json.dumps({"question": QUESTION, "collection": self.gate.name}),
            content_type="application/json",
        ).json()
        self._change(chunk_tokens=250, top_k=4)
        self.gate.refresh_from_db()
        self.assertEqual((self.gate.chunk_tokens, self.gate.top_k), (200, 4))
        shadow = ShadowIndex.objects.get()
        self.assertEqual(shadow.status, Status.BUILDING)
        page = self.client.get(
            reverse("admin:kb_collection_change", args=[self.gate.pk])
        )
        self.assertContains(page, f"Shadow index #{shadow.pk} (building)")
        # Uploaded while the shadow waits to be built: indexed first (the build
        # waits on the large queue, issue #26), then copied into the shadow.
        self._upload("parking.md", "# Parking\n\nBook the garage a day ahead.\n")

        run_burst_worker()
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.SWAPPED, shadow.error)
        self.assertEqual(shadow.progress["requeued"], [])
        self.gate.refresh_from_db()
        self.assertEqual(self.gate.chunk_tokens, 250)
        self.assertEqual(built_with(self.gate), {250})
        parking = self.gate.sources.get(file_name="parking.md")
        self.assertEqual(parking.status, Source.Status.INDEXED)
        self.assertTrue(parking.chunks.exists())
        self.assertFalse(Collection.objects.filter(is_scratch=True).exists())
        # The new index answered the logged question again: a replay report.
        report = ReplayReport.objects.get(collection=self.gate)
        self.assertEqual((report.status, report.replayed), ("done", 1), report.error)
        self.assertIn(asked["id"], [q.pk for q in Question.objects.all()])

    def test_a_source_uploaded_while_a_shadow_is_held_is_present_after_the_swap(self):
        self._change(chunk_tokens=120)
        run_burst_worker()
        shadow = ShadowIndex.objects.get()
        self.assertEqual(shadow.status, Status.HELD, shadow.error)
        self._upload("parking.md", "# Parking\n\nBook the garage a day ahead.\n")
        faq = self.gate.sources.get(file_name="office-faq.txt")
        faq.text += "\nWhere do I park? In the garage on the next street.\n"
        faq.version += 1
        faq.save()
        queueing.enqueue_ingest(faq)
        run_burst_worker()  # both published to the live index, old settings
        self.assertEqual(built_with(self.gate), {200})

        self.client.post(
            reverse("admin:kb_shadow_approve", args=[shadow.pk]), {"confirmed": "yes"}
        )
        run_burst_worker()
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.SWAPPED, shadow.error)
        self.assertEqual(
            sorted(shadow.progress["requeued"]), ["office-faq.txt", "parking.md"]
        )
        self.assertEqual(built_with(self.gate), {120})  # every source, new settings
        self.assertEqual(self.gate.sources.filter(status="indexed").count(), 3)
        faq.refresh_from_db()
        self.assertIn("Where do I park?", faq.text)
        self.assertTrue(
            faq.chunks.filter(text__contains="garage on the next street").exists()
        )
