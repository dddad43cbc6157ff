"""Workers that survive faults, and uploads that survive each other (issue #15)."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import django_rq
import pytest
from django.conf import settings
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.db import DataError, connection
from django.test import TestCase, TransactionTestCase, override_settings
from django.urls import reverse
from django.utils import timezone
from rq.job import JobStatus
from rq.utils import utcformat
from rq.worker import Worker, WorkerStatus

from kb import jobs, queueing, uploads
from kb.models import Collection, Source
from tests.base import DEMO_DIR, make_users, run_burst_worker, start_worker, wait_for

RUNBOOK = DEMO_DIR / "deployment-runbook.md"
FAST_TTL = "6"  # seconds: a dead worker is noticed in seconds, not a minute


def _big_text(parts: int = 60) -> bytes:
    """A source that takes its worker several seconds to embed."""
    return (
        "# Big\n\n"
        + "\n\n".join(
            f"## Part {i}\n\n"
            + " ".join(f"Paragraph {i} sentence {j} about deploys." for j in range(30))
            for i in range(parts)
        )
    ).encode()


def _stop(worker: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, sig)
    worker.wait(timeout=60)


def _settled(source: Source, timeout: float = 180) -> Source:
    """The source once it is indexed or failed (or as it is after `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        source.refresh_from_db()
        if source.status in (Source.Status.INDEXED, Source.Status.FAILED):
            break
        time.sleep(0.2)
    return source


@pytest.mark.slow
class WorkerFaultsTestCase(TransactionTestCase):
    # TransactionTestCase: workers are other processes and see only committed rows.

    def setUp(self):
        self.collection = Collection.objects.create(name="Faults")
        self.workers: list[subprocess.Popen] = []

    def tearDown(self):
        for worker in self.workers:
            _stop(worker)
        django_rq.get_queue().empty()

    def _store(self, name: str, data: bytes) -> Source:
        source, _ = uploads.store_source(self.collection, name, data)
        self.assertTrue(queueing.enqueue_ingest(source))  # not in a transaction: now
        return source

    def test_it_recovers_after_its_database_connections_are_terminated(self):
        self.workers.append(start_worker())
        first = self._store("runbook.md", RUNBOOK.read_bytes())
        self.assertEqual(_settled(first).status, Source.Status.INDEXED, first.error)
        # What a PostgreSQL restart does to the worker's connection(s).
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        second = self._store("again.md", b"# Again\n\nRoll back when errors rise.\n")
        self.assertEqual(_settled(second).status, Source.Status.INDEXED, second.error)

    @override_settings(KB_WORKER_TTL=int(FAST_TTL))
    def test_a_killed_workers_source_is_queued_again_and_indexed(self):
        source = self._store("big.md", _big_text())
        doomed = start_worker(KB_WORKER_TTL=FAST_TTL)
        wait_for(
            lambda: (
                Source.objects.get(pk=source.pk).progress.get("stage") == "embedding"
            )
        )
        _stop(doomed)  # kill -9 in the middle of embedding
        source.refresh_from_db()
        self.assertEqual(source.status, Source.Status.INDEXING)
        started = time.monotonic()
        self.workers.append(start_worker(KB_WORKER_TTL=FAST_TTL))
        # Found once the dead worker's heartbeat expires, then indexed again.
        wait_for(lambda: Source.objects.get(pk=source.pk).version > source.version, 30)
        self.assertLess(time.monotonic() - started, 30)
        self.assertEqual(_settled(source).status, Source.Status.INDEXED, source.error)

    def test_an_upload_while_the_queue_is_down_is_queued_once_it_is_back(self):
        staff, _, _ = make_users()
        self.client.force_login(staff)
        dead = {"default": {"URL": f"redis://127.0.0.1:{_closed_port()}", "DB": 1}}
        with override_settings(RQ_QUEUES=dead), open(RUNBOOK, "rb") as fh:
            response = self.client.post(
                reverse("admin:kb_source_upload"),
                {"collection": self.collection.pk, "files": [fh]},
            )
        self.assertEqual(response.status_code, 302)
        shown = [str(m) for m in get_messages(response.wsgi_request)]
        self.assertIn(f"deployment-runbook.md: created: {queueing.QUEUE_DOWN}", shown)
        source = Source.objects.get()
        self.assertEqual(source.status, Source.Status.QUEUED)
        self.assertTrue(source.file.storage.exists(source.file.name))
        # A minute later (the grace a commit gets to queue its job), any worker
        # starting or looking around queues it, without anyone's action.
        Source.objects.filter(pk=source.pk).update(
            updated=timezone.now() - jobs.STRANDED_AFTER
        )
        run_burst_worker()
        source.refresh_from_db()
        self.assertEqual(source.status, Source.Status.INDEXED, source.error)

    def test_workers_on_one_machine_share_its_cores(self):
        job = django_rq.enqueue("kb.jobs.check_worker")
        run_burst_worker(env={"KB_WORKERS": "2", "KB_EMBED_THREADS": "0"})
        job.refresh()
        expected = max(1, (os.cpu_count() or 1) // 2)
        self.assertEqual(job.return_value()["embed_threads"], expected)

    def test_an_idle_worker_takes_no_share_of_the_cores(self):
        # Another worker of this host, as kb_run's second one: idle, then busy.
        queue = django_rq.get_queue()
        other = Worker(
            [queue], connection=queue.connection, name=f"other-{uuid.uuid4()}"
        )
        other.register_birth()
        self.addCleanup(other.register_death)
        cores = os.cpu_count() or 1
        for state, expected in [
            (WorkerStatus.IDLE, cores),
            (WorkerStatus.BUSY, max(1, cores // 2)),
        ]:
            other.set_state(state)
            job = django_rq.enqueue("kb.jobs.check_worker")
            run_burst_worker(env={"KB_WORKERS": "0", "KB_EMBED_THREADS": "0"})
            job.refresh()
            self.assertEqual(job.return_value()["embed_threads"], expected, state)

    def test_a_worker_killed_while_busy_takes_no_share_of_the_cores(self):
        # Registered as busy from this host, but its process is gone (killed -9:
        # its registration outlives it until its key expires).
        queue = django_rq.get_queue()
        dead = Worker([queue], connection=queue.connection, name=f"dead-{uuid.uuid4()}")
        dead.register_birth()
        self.addCleanup(dead.register_death)
        dead.set_state(WorkerStatus.BUSY)
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        queue.connection.hset(dead.key, "pid", gone.pid)
        job = django_rq.enqueue("kb.jobs.check_worker")
        run_burst_worker(env={"KB_WORKERS": "0", "KB_EMBED_THREADS": "0"})
        job.refresh()
        self.assertEqual(job.return_value()["embed_threads"], os.cpu_count() or 1)


class QueueDownPagesTestCase(TestCase):
    """With the queue unreachable, pages say so (issue #26)."""

    def setUp(self):
        self.staff, _, _ = make_users()
        self.client.force_login(self.staff)
        self.collection = Collection.objects.create(name="Docs")
        dead = {"default": {"URL": f"redis://127.0.0.1:{_closed_port()}", "DB": 1}}
        self.queue_down = override_settings(RQ_QUEUES=dead)

    def test_a_re_index_says_it_waits_for_the_queue_without_saying_queued(self):
        source, _ = uploads.store_source(self.collection, "a.md", b"# A\n\nText.\n")
        with self.queue_down:
            response = self.client.post(
                reverse("admin:kb_source_reindex", args=[source.pk])
            )
        shown = [str(m) for m in get_messages(response.wsgi_request)]
        self.assertEqual(
            shown,
            [
                f"{source}: re-indexing recorded; it will be queued when the queue is "
                "back (within a minute of it)."
            ],
        )

    def test_the_queue_pages_answer_503_with_the_reason(self):
        with self.queue_down:
            response = self.client.get("/admin/rq/")
        self.assertContains(
            response,
            "The job queue is unavailable; try again shortly.",
            status_code=503,
        )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _uploads(name: str) -> list[Path]:
    """Files stored under MEDIA_ROOT for uploads called `name`."""
    stem, suffix = os.path.splitext(name)
    root = Path(settings.MEDIA_ROOT)
    return [p for p in root.rglob(f"{stem}*{suffix}") if p.is_file()]


class UploadRollbackTestCase(TestCase):
    """An upload whose row is not stored leaves no file behind."""

    def setUp(self):
        self.collection = Collection.objects.create(name="Rollback")
        self.name = f"rollback-{uuid.uuid4().hex}.md"

    def test_a_row_the_database_refuses_leaves_no_file(self):
        # Longer than Source.file_name's 500 characters: refused by PostgreSQL
        # after the file was written.
        deep = "d" * 600 + "/" + self.name
        with self.assertRaises(DataError):
            uploads.store_source(self.collection, deep, b"# A\n\nOne.\n")
        self.assertEqual(_uploads(self.name), [])

    def test_a_batch_that_rolls_back_takes_its_stored_files_with_it(self):
        with self.assertRaises(DataError), uploads.storing():
            uploads.store_source(self.collection, self.name, b"# A\n\nOne.\n")
            self.assertEqual(len(_uploads(self.name)), 1)
            uploads.store_source(self.collection, "d" * 600 + ".md", b"# B\n\nB.\n")
        self.assertEqual(_uploads(self.name), [])
        self.assertFalse(Source.objects.filter(collection=self.collection).exists())


class ConcurrentUploadsTestCase(TransactionTestCase):
    # TransactionTestCase: each thread commits through its own connection.

    def test_concurrent_uploads_of_one_file_keep_every_version_and_no_orphan(self):
        collection = Collection.objects.create(name="Race")
        name = f"race-{uuid.uuid4().hex}.md"
        source, _ = uploads.store_source(collection, name, b"# Race\n\nStart.\n")
        rounds, errors = 8, []

        def upload(who: str) -> None:
            try:
                for i in range(rounds):
                    data = f"# Race\n\n{who} edit {i}.\n".encode()
                    uploads.store_source(collection, name, data)
            except Exception as exc:  # reported below, in the test's thread
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=upload, args=(w,)) for w in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        source.refresh_from_db()
        self.assertEqual(source.version, 1 + 2 * rounds)
        stored = _uploads(name)
        self.assertEqual([str(p) for p in stored], [source.file.path])
        source.delete()  # and its file


class StartedJobLivenessTestCase(TestCase):
    """A started job is alive while its worker's heartbeat is, and no longer."""

    def setUp(self):
        collection = Collection.objects.create(name="Liveness")
        self.source, _ = uploads.store_source(collection, "a.md", b"# A\n\nA.\n")
        with self.captureOnCommitCallbacks(execute=True):
            queueing.enqueue_ingest(self.source)
        Source.objects.filter(pk=self.source.pk).update(status=Source.Status.INDEXING)
        self.source.refresh_from_db()
        self.redis = django_rq.get_queue().connection
        self.key = f"rq:worker:kb-test-{uuid.uuid4().hex}"
        job = django_rq.get_queue().fetch_job(queueing.ingest_job_id(self.source))
        job.set_status(JobStatus.STARTED)
        job.worker_name = self.key.removeprefix("rq:worker:")
        job.save()

    def tearDown(self):
        django_rq.get_queue().empty()
        self.redis.delete(self.key)

    def _beat(self, seconds_ago: float) -> None:
        when = timezone.now() - timedelta(seconds=seconds_ago)
        self.redis.hset(self.key, "last_heartbeat", utcformat(when))

    def test_a_started_job_counts_as_lost_once_its_worker_stops_beating(self):
        self._beat(1)
        self.assertEqual(jobs.stranded([self.source]), [])
        self._beat(settings.KB_WORKER_TTL + 1)
        self.assertEqual(jobs.stranded([self.source]), [self.source])
        self.redis.delete(self.key)  # the key expired with the heartbeat
        self.assertEqual(jobs.stranded([self.source]), [self.source])


class QueueDownTestCase(TestCase):
    def test_kb_ingest_says_the_file_is_stored_and_will_be_queued(self):
        out = io.StringIO()
        dead = {"default": {"URL": f"redis://127.0.0.1:{_closed_port()}", "DB": 1}}
        with override_settings(RQ_QUEUES=dead):
            call_command("kb_ingest", str(RUNBOOK), collection="Down", stdout=out)
        said = out.getvalue()
        self.assertIn(f"deployment-runbook.md: created, {queueing.QUEUE_DOWN}", said)
        source = Source.objects.get(collection__name="Down")
        self.assertEqual(source.status, Source.Status.QUEUED)
