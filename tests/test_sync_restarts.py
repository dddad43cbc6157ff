"""A folder sync running in a real worker when the embedded PostgreSQL or Valkey
server restarts midway (issue #30): the system gets back to every file a source
exactly once, indexed once, with no run left running and the sync log saying
what happened.

The suite's own servers are restarted (config.services.restart), at the same
socket with the same password and data, so the tests that follow use them as
before; each test puts them back even when it fails. Servers that DATABASE_URL
or REDIS_URL name are not ours to restart: those tests are skipped then (CI
runs the embedded ones)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import django_rq
import pytest
from django.conf import settings
from django.db import connections
from django.db.models import Count
from django.test import TransactionTestCase, override_settings
from django.urls import reverse

from config import services
from kb import queueing
from kb.models import Chunk, Source, SyncRun
from kb.sync import runs
from tests.base import forget_jobs, make_users, start_worker, wait_for
from tests.syncing import names, run_now, sync_of, write

FAST_TTL = "6"  # seconds: workers look for lost jobs every 3 s
FILES = {
    f"team-{n:02d}.md": f"# Team {n}\n\nTeam {n} meets on day {n % 28 + 1} of "
    f"the month in room {100 + n}; its lead is person {n}.\n"
    for n in range(60)
}
RESTARTED_AFTER = 5  # files indexed before the server restarts


def _external(variable: str):
    return pytest.mark.skipif(
        bool(os.environ.get(variable)),
        reason=f"{variable} names a server these tests may not restart",
    )


@pytest.mark.slow
@pytest.mark.serial
class ServerRestartTestCase(TransactionTestCase):
    """TransactionTestCase: the worker is another process and sees only
    committed rows."""

    def setUp(self):
        forget_jobs()
        root = Path(tempfile.mkdtemp(prefix="kb-sync-"))
        self.addCleanup(shutil.rmtree, root, ignore_errors=True)
        write(root / "docs", FILES)
        self.enterContext(override_settings(KB_SYNC_ROOTS=[str(root)]))
        self.sync = sync_of("folder", str(root / "docs"))
        self.worker = start_worker(KB_SYNC_ROOTS=str(root), KB_WORKER_TTL=FAST_TTL)
        self.addCleanup(self._stop_worker)

    def _stop_worker(self) -> None:
        if self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait(timeout=30)
        forget_jobs()

    def restart(self, server: str) -> set[str]:
        """Restart `server` once the run has indexed some files, and before it
        indexed the last; the files indexed then."""
        wait_for(lambda: len(self._indexed()) >= RESTARTED_AFTER)
        self.addCleanup(self._restored)
        before = services.running(settings.KB_DATA_DIR)[server]
        services.restart(settings.KB_DATA_DIR, server)
        connections.close_all()  # the test's own connection went with the server
        # Where it listens is unchanged; services.env names its new process.
        after = services.running(settings.KB_DATA_DIR)[server]
        self.assertNotEqual(after.pop("pid"), before.pop("pid"))
        self.assertEqual(after, before)
        indexed = self._indexed()
        self.assertLess(len(indexed), len(FILES))  # it was midway
        return indexed

    def _indexed(self) -> set[str]:
        indexed = self.sync.sources.filter(status=Source.Status.INDEXED)
        return set(indexed.values_list("file_name", flat=True))

    def _restored(self) -> None:
        services.start(settings.KB_DATA_DIR)  # a no-op when both run
        connections.close_all()

    def assert_synced_once(self) -> None:
        """Every file a source exactly once, with one live version and one set
        of chunks; no run still active; the lock free (a manual run now finds
        everything as it is, and nothing to do)."""
        collection = self.sync.collection
        self.assertEqual(names(self.sync), set(FILES))
        in_collection = Source.objects.filter(collection=collection)
        self.assertEqual(in_collection.count(), len(FILES))
        found = Source.objects.filter(sync_source=self.sync)
        self.assertEqual(
            set(found.values_list("status", "version", "indexed_version")),
            {(Source.Status.INDEXED, 1, 1)},
        )
        chunks = Chunk.objects.filter(source__collection=collection)
        self.assertEqual(chunks.values("source").distinct().count(), len(FILES))
        twice = chunks.values("source", "chunk_index").annotate(n=Count("id"))
        self.assertFalse(twice.filter(n__gt=1).exists())
        active = [SyncRun.Status.QUEUED, SyncRun.Status.RUNNING]
        self.assertFalse(self.sync.runs.filter(status__in=active).exists())
        again = run_now(self.sync)  # it takes the lock: the dead run's is free
        self.assertEqual(again.status, SyncRun.Status.DONE, again.error)
        self.assertEqual((again.unchanged, again.added), (len(FILES), 0))
        self.assertEqual(again.chunks_embedded, 0)

    def assert_logged(self, run: SyncRun, paths: set[str]) -> None:
        """The run is done, no file failed, and its log names each of `paths`
        (those it stored or indexed) once: an unchanged file is only counted."""
        self.assertEqual(run.status, SyncRun.Status.DONE, run.error)
        self.assertEqual(run.failed, [])
        logged = [entry["path"] for entry in run.log]
        self.assertEqual(sorted(logged), sorted(paths))

    @_external("DATABASE_URL")
    def test_a_postgresql_restart_interrupts_the_run_and_another_finishes(self):
        first = runs.queue(self.sync)  # "Sync now"
        indexed = self.restart("postgres")
        # The worker's job fails on its cut connection; a worker's look for
        # lost jobs ends the run as interrupted, with why, and queues another.
        wait_for(lambda: self.sync.runs.filter(status="done").exists(), timeout=60)
        first.refresh_from_db()
        self.assertEqual(first.status, SyncRun.Status.INTERRUPTED)
        self.assertRegex(
            first.error,
            r"^Not finished: its job failed: DatabaseLostError: the connection to "
            r"the database was lost at team-\d\d\.md \(its server restarted or "
            r"stopped\)\. A new run was queued to finish the work\.$",
        )
        self.assertIsNotNone(first.finished)
        second = self.sync.runs.get(status=SyncRun.Status.DONE)
        self.assertGreater(second.started, first.started)
        self.assert_logged(second, set(FILES) - indexed)
        self.assertEqual(second.added + second.unchanged, len(FILES))
        self.assertEqual(self.sync.runs.count(), 2)
        self.assert_synced_once()
        # An editor sees the interrupted run and why, on the sync's page.
        self.client.force_login(make_users()[0])
        page = self.client.get(
            reverse("admin:kb_syncsource_change", args=[self.sync.pk])
        )
        self.assertContains(page, f"Interrupted: {first.error}")

    @_external("REDIS_URL")
    def test_a_valkey_restart_leaves_the_run_and_the_next_queued_to_finish(self):
        first = runs.queue(self.sync)  # "Sync now"
        wait_for(lambda: len(self._indexed()) >= RESTARTED_AFTER - 1)
        next_one = runs.queue(self.sync)  # "Sync now" again, while it runs
        job_id = queueing.sync_job_id(next_one.pk)
        self.assertIn(job_id, django_rq.get_queue("large").get_job_ids())
        self.restart("valkey")
        # The run needs no Valkey while it works; the worker reconnects, and
        # the queued run's job, kept by the server through its restart, runs.
        wait_for(lambda: _status(next_one) == SyncRun.Status.DONE, timeout=60)
        first.refresh_from_db()
        self.assert_logged(first, set(FILES))
        self.assertEqual(first.added, len(FILES))
        next_one.refresh_from_db()
        self.assert_logged(next_one, set())
        self.assertEqual(next_one.unchanged, len(FILES))
        self.assertEqual(self.sync.runs.count(), 2)
        self.assert_synced_once()


def _status(run: SyncRun) -> str:
    return SyncRun.objects.values_list("status", flat=True).get(pk=run.pk)
