"""Every kind of job lost (its worker killed, its queue entry gone) ends or is
recovered with its reason, as ingestion jobs are (issue #26, item 15)."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import django_rq
import psycopg
import pytest
from django.db import connection, transaction
from django.test import TestCase, TransactionTestCase, override_settings
from django.urls import reverse
from django.utils import timezone

from kb import evaluation, jobs, questions, queueing, recovery, reindexing
from kb.demo import load_part
from kb.models import Collection, EvalRun, ReplayReport, ShadowIndex, SyncRun
from kb.sync import runs as sync_runs
from tests.base import forget_jobs, make_users, run_burst_worker, start_worker
from tests.base import wait_for as wait_until
from tests.syncing import sync_of

Status = ShadowIndex.Status
FILES = ["office-faq.txt", "security-policy.md"]
FAST_TTL = "6"  # seconds: a dead worker is noticed in seconds, not a minute
LONG_AGO = recovery.STRANDED_AFTER * 2


def _forget(job_id: str) -> None:
    """What a Valkey restart without persistence does to a queued job."""
    for name in queueing.QUEUES:
        queue = django_rq.get_queue(name)
        queue.remove(job_id)
        queue.connection.delete(f"rq:job:{job_id}")


def _dashboard(client, collection: Collection):
    url = reverse("admin:kb_evalrun_dashboard")
    return client.get(url, {"collection": collection.pk})


class LostQueueEntryTestCase(TestCase):
    """Jobs queued, then gone from Valkey before any worker took them."""

    @classmethod
    def setUpTestData(cls):
        cls.staff, _, _ = make_users()
        cls.docs = load_part("Lost", FILES)

    def setUp(self):
        self.client.force_login(self.staff)

    def tearDown(self):
        forget_jobs()

    def test_a_shadow_build_whose_queue_entry_is_gone_fails_with_the_reason(self):
        with self.captureOnCommitCallbacks(execute=True):
            shadow = reindexing.start(self.docs, {"chunk_tokens": 120}, self.staff)
        job_id = queueing.shadow_job_id(shadow.pk, "build")
        self.assertIn(job_id, django_rq.get_queue("large").get_job_ids())
        _forget(job_id)
        self.assertEqual(jobs.recover_lost()["shadow indexes"], 0)  # may still come
        ShadowIndex.objects.filter(pk=shadow.pk).update(
            created=timezone.now() - LONG_AGO
        )
        page = _dashboard(self.client, self.docs)
        self.assertContains(page, f"Shadow index #{shadow.pk}: Building (stopped)")
        self.assertContains(page, f"Its job was lost: {recovery.GONE}")
        self.assertEqual(jobs.recover_lost()["shadow indexes"], 1)
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.FAILED)
        self.assertEqual(
            shadow.error,
            f"Not finished: {recovery.GONE}. The live index is unchanged: make the "
            "change again.",
        )
        self.assertEqual(jobs.recover_lost()["shadow indexes"], 0)

    def test_an_approved_swap_whose_job_is_lost_is_held_again_with_the_reason(self):
        shadow = ShadowIndex.objects.create(
            collection=self.docs,
            status=Status.HELD,
            decision="recall@5 0.8 < 1.0",
            new_settings={**reindexing.settings_of(self.docs), "chunk_tokens": 120},
            old_settings=reindexing.settings_of(self.docs),
        )
        with self.captureOnCommitCallbacks(execute=True):
            self.assertTrue(reindexing.approve(shadow, self.staff))
        _forget(queueing.shadow_job_id(shadow.pk, "swap"))
        approved = timezone.now() - LONG_AGO
        ShadowIndex.objects.filter(pk=shadow.pk).update(
            progress={"stage": "swapping", "approved": approved.isoformat()}
        )
        self.assertEqual(jobs.recover_lost()["shadow indexes"], 1)
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.HELD)
        self.assertIsNone(shadow.decided_by)
        self.assertEqual(
            shadow.error,
            f"The approved swap did not happen: {recovery.GONE}. The live index is "
            "unchanged: approve it again or discard it.",
        )
        self.assertContains(_dashboard(self.client, self.docs), shadow.error)

    def test_an_evaluation_run_and_a_replay_report_fail_with_the_reason(self):
        with self.captureOnCommitCallbacks(execute=True):
            run = evaluation.start_run(self.docs)
            jobs.enqueue_evaluation(run)
        questions.enqueue_replay_report(self.docs)
        report = ReplayReport.objects.get()
        self.assertEqual(report.status, ReplayReport.Status.RUNNING)
        _forget(queueing.eval_job_id(run.pk))
        _forget(queueing.replay_job_id(report.pk))
        EvalRun.objects.update(created=timezone.now() - LONG_AGO)
        ReplayReport.objects.update(created=timezone.now() - LONG_AGO)
        done = jobs.recover_lost()
        self.assertEqual((done["evaluation runs"], done["replay reports"]), (1, 1))
        run.refresh_from_db()
        report.refresh_from_db()
        self.assertEqual(run.status, EvalRun.Status.FAILED)
        self.assertEqual(run.error, f"Not finished: {recovery.GONE}")
        self.assertEqual(report.status, ReplayReport.Status.FAILED)
        self.assertEqual(report.error, f"Not finished: {recovery.GONE}")

    def test_a_lost_sync_run_is_interrupted_and_queued_again_once(self):
        sync = sync_of("folder", "/srv/docs", collection=self.docs)
        with self.captureOnCommitCallbacks(execute=True):
            lost = sync_runs.queue(sync)
        _forget(queueing.sync_job_id(lost.pk))
        SyncRun.objects.update(started=timezone.now() - LONG_AGO)
        with _holding(f"kb-sync:{sync.pk}"):  # as a run done outside a worker
            self.assertEqual(jobs.recover_lost()["sync runs"], 0)
        with self.captureOnCommitCallbacks(execute=True):
            self.assertEqual(jobs.recover_lost()["sync runs"], 1)
        lost.refresh_from_db()
        self.assertEqual(lost.status, SyncRun.Status.INTERRUPTED)
        self.assertEqual(
            lost.error,
            f"Not finished: {recovery.GONE}. A new run was queued to finish the work.",
        )
        again = sync.runs.get(status=SyncRun.Status.QUEUED)
        job_id = queueing.sync_job_id(again.pk)
        self.assertIn(job_id, django_rq.get_queue("large").get_job_ids())
        # Lost too: a run that dies each time is not queued again and again.
        _forget(job_id)
        SyncRun.objects.filter(pk=again.pk).update(started=timezone.now() - LONG_AGO)
        self.assertEqual(jobs.recover_lost()["sync runs"], 1)
        again.refresh_from_db()
        self.assertEqual(again.status, SyncRun.Status.INTERRUPTED)
        self.assertIn("The run before it was interrupted too", again.error)
        self.assertEqual(sync.runs.count(), 2)

    def test_a_lost_recount_is_queued_again(self):
        queue = django_rq.get_queue()
        job_id = queueing.count_terms_job_id(self.docs.pk)
        # Counted before its newest source was indexed, and no recount queued.
        Collection.objects.filter(pk=self.docs.pk).update(
            terms_counted=timezone.now() - 3 * recovery.STRANDED_AFTER
        )
        self.docs.sources.update(indexed=timezone.now() - LONG_AGO)
        _forget(job_id)
        with self.captureOnCommitCallbacks(execute=True):  # jobs go on commit
            self.assertEqual(jobs.recover_lost()["recounts"], 1)
        self.assertIn(job_id, queue.get_job_ids())
        self.assertEqual(jobs.recover_lost()["recounts"], 0)  # one is waiting


@contextmanager
def _holding(key: str):
    """Another database session holding the advisory lock `key`."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [key])
        yield


class WorkerRowsTestCase(TransactionTestCase):
    """A collection of FILES named `collection`, the staff superuser logged in, and
    at most one long-lived worker (`self.worker`), killed at the end.

    TransactionTestCase: workers are other processes and see only committed rows."""

    collection = "Docs"

    def setUp(self):
        forget_jobs()
        self.staff, _, _ = make_users()
        self.client.force_login(self.staff)
        self.docs = load_part(self.collection, FILES)
        self.worker = None

    def tearDown(self):
        if self.worker and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait()
        forget_jobs()


class DiscardTestCase(WorkerRowsTestCase):
    collection = "Stuck"

    @pytest.mark.slow
    def test_an_admin_discards_a_shadow_stuck_swapping_and_its_scratch_goes(self):
        shadow = reindexing.start(self.docs, {"chunk_tokens": 120}, queue=False)
        reindexing.build(shadow)
        shadow.refresh_from_db()
        scratch = shadow.scratch_id
        # Approved, then its swap rolled back (PostgreSQL restarted) and its job
        # failed: "Approved: swapping" with nothing running.
        ShadowIndex.objects.filter(pk=shadow.pk).update(status=Status.APPROVED)
        url = reverse("admin:kb_shadow_discard", args=[shadow.pk])
        self.assertContains(_dashboard(self.client, self.docs), url)
        response = self.client.post(url, follow=True)
        self.assertContains(response, f"Shadow index {shadow.pk} discarded")
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.DISCARDED)
        run_burst_worker()  # the queued drop of its scratch copy
        self.assertFalse(Collection.objects.filter(pk=scratch).exists())
        shadow.refresh_from_db()
        self.assertIsNone(shadow.scratch_id)
        again = self.client.post(url, follow=True)
        self.assertContains(again, "is live or already gone; left as it is")


class RolledBackSwapTestCase(WorkerRowsTestCase):
    collection = "Rolled back"

    @pytest.mark.slow
    def test_a_swap_cut_off_by_a_database_restart_is_held_again_with_why(self):
        shadow = reindexing.start(self.docs, {"chunk_tokens": 120}, queue=False)
        reindexing.build(shadow)
        ShadowIndex.objects.filter(pk=shadow.pk).update(status=Status.HELD)
        shadow.refresh_from_db()
        live = self.docs.chunk_tokens
        self.assertTrue(reindexing.approve(shadow, self.staff))
        with transaction.atomic():
            # The swap waits for the collection's row; its connection is then
            # ended as a PostgreSQL restart ends it, and its transaction rolls back.
            Collection.objects.select_for_update().get(pk=self.docs.pk)
            self.worker = start_worker()
            wait_until(lambda: bool(_waiting_for_a_lock()), timeout=120)
            with connection.cursor() as cursor:
                for pid in _waiting_for_a_lock():
                    cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        job_id = queueing.shadow_job_id(shadow.pk, "swap")
        queue = django_rq.get_queue()
        wait_until(lambda: queue.fetch_job(job_id).get_status() == "failed")
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait()
        jobs.recover_lost()
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.HELD)
        self.assertEqual(
            shadow.error,
            "The approved swap did not happen: its job failed: OperationalError: "
            "terminating connection due to administrator command. The live index "
            "is unchanged: approve it again or discard it.",
        )
        self.docs.refresh_from_db()
        self.assertEqual(self.docs.chunk_tokens, live)


def _waiting_for_a_lock() -> list[int]:
    """Other connections to the test database waiting for a row lock."""
    with connection.cursor() as cursor:
        # Read anew: a transaction sees one snapshot of the activity otherwise.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.slow
class KilledShadowWorkerTestCase(WorkerRowsTestCase):
    collection = "Killed"

    @override_settings(KB_WORKER_TTL=int(FAST_TTL))
    def test_a_shadow_build_whose_worker_is_killed_fails_and_drops_its_copy(self):
        shadow = reindexing.start(self.docs, {"chunk_tokens": 120}, self.staff)
        self.worker = start_worker(KB_WORKER_TTL=FAST_TTL)

        def indexing() -> bool:
            progress = ShadowIndex.objects.get(pk=shadow.pk).progress
            return progress.get("stage") == "indexing" and progress["done"] >= 1

        wait_until(indexing, timeout=300)
        os.killpg(self.worker.pid, signal.SIGKILL)  # kill -9 mid-build
        self.worker.wait()
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.BUILDING)
        scratch = shadow.scratch_id
        self.assertIsNotNone(scratch)
        time.sleep(int(FAST_TTL) + 1)  # its heartbeat expires
        page = _dashboard(self.client, self.docs)
        self.assertContains(page, f"Shadow index #{shadow.pk}: Building (stopped)")
        self.assertNotContains(page, "sources indexed)")
        self.assertContains(page, f"Its job was lost: {recovery.DEAD}")
        # The next worker to start ends it, then drops its scratch copy.
        run_burst_worker(env={"KB_WORKER_TTL": FAST_TTL})
        shadow.refresh_from_db()
        self.assertEqual(shadow.status, Status.FAILED)
        self.assertEqual(
            shadow.error,
            f"Not finished: {recovery.DEAD}. The live index is unchanged: make the "
            "change again.",
        )
        self.assertFalse(Collection.objects.filter(pk=scratch).exists())
        self.docs.refresh_from_db()
        self.assertEqual(self.docs.chunk_tokens, 200)  # the live index as it was
