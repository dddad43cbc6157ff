"""Big sources: capped, queued apart from small ones, and shown while stored
(issue #26, item 10)."""

from __future__ import annotations

import os
import signal

import django_rq
import pytest
from django.contrib.admin import site
from django.db import transaction
from django.test import TestCase, TransactionTestCase, override_settings

from kb import admin, ingestion, queueing, uploads
from kb.models import Chunk, Collection, Source
from kb.worker import worker_queues
from tests.base import (
    DEMO_DIR,
    forget_jobs,
    ingest_text,
    run_burst_worker,
    start_worker,
    wait_for,
)

RUNBOOK = DEMO_DIR / "deployment-runbook.md"


def _paragraphs(count: int) -> bytes:
    """A Markdown file of `count` sections of one paragraph: a chunk each."""
    return "\n\n".join(
        f"## Part {i}\n\nPart {i} says something about deploys." for i in range(count)
    ).encode()


class ChunkCapTestCase(TestCase):
    @override_settings(KB_MAX_CHUNKS_PER_SOURCE=40)
    def test_it_fails_a_source_over_the_cap_keeping_the_previous_version(self):
        collection = Collection.objects.create(name="Capped")
        first = ingest_text(collection, "doc.md", _paragraphs(10))
        old = sorted(first.chunks.values_list("pk", flat=True))
        source, _ = uploads.store_source(collection, "doc.md", _paragraphs(50))
        with self.assertRaises(ingestion.IngestionError):
            ingestion.ingest(source.pk)
        source.refresh_from_db()
        self.assertEqual(source.status, Source.Status.FAILED)
        self.assertEqual(
            source.error,
            "doc.md makes 50 chunks, over the limit of 40 per source "
            "(KB_MAX_CHUNKS_PER_SOURCE): split it into smaller files; the previous "
            "version stays live",
        )
        self.assertEqual(source.indexed_version, first.version)
        self.assertEqual(sorted(source.chunks.values_list("pk", flat=True)), old)

    @override_settings(KB_MAX_CHUNKS_PER_SOURCE=0)
    def test_zero_means_no_cap(self):
        collection = Collection.objects.create(name="Uncapped")
        source = ingest_text(collection, "doc.md", _paragraphs(50))
        self.assertEqual(source.status, Source.Status.INDEXED, source.error)


class WorkerQueuesTestCase(TestCase):
    def test_one_worker_serves_both_queues_the_default_first(self):
        self.assertEqual(worker_queues(1), [["default", "large"]])

    def test_with_two_or_more_one_worker_never_takes_large_jobs(self):
        self.assertEqual(
            worker_queues(3),
            [["default"], ["default", "large"], ["default", "large"]],
        )


class LargeQueueTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees only committed rows.

    def tearDown(self):
        forget_jobs()

    @pytest.mark.slow
    @override_settings(KB_LARGE_SOURCE_BYTES=4000)
    def test_a_small_upload_does_not_wait_behind_a_large_one(self):
        collection = Collection.objects.create(name="Queues")
        big, _ = uploads.store_source(collection, "big.md", _paragraphs(200))
        small, _ = uploads.store_source(
            collection, "small.md", b"# Small\n\nRoll back when errors rise.\n"
        )
        for source in (big, small):  # the large one first
            self.assertTrue(queueing.enqueue_ingest(source))
        self.assertEqual(
            django_rq.get_queue("large").get_job_ids(),
            [queueing.ingest_job_id(big)],
        )
        run_burst_worker("default", "large")
        big.refresh_from_db()
        small.refresh_from_db()
        self.assertEqual(big.status, Source.Status.INDEXED, big.error)
        self.assertEqual(small.status, Source.Status.INDEXED, small.error)
        self.assertLess(small.indexed, big.indexed)


class StoringProgressTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees only committed rows.

    def tearDown(self):
        forget_jobs()

    @pytest.mark.slow
    def test_it_says_storing_while_the_chunks_are_written(self):
        collection = Collection.objects.create(name="Storing")
        source = ingest_text(collection, "doc.md", _paragraphs(5))
        source, _ = uploads.store_source(collection, "doc.md", _paragraphs(12))
        self.assertTrue(queueing.enqueue_ingest(source))
        worker = start_worker()
        try:
            # The old chunks locked: the worker's publishing waits to delete them,
            # after its last embedding batch.
            with transaction.atomic():
                list(Chunk.objects.select_for_update().filter(source=source))
                wait_for(
                    lambda: (
                        Source.objects.get(pk=source.pk).progress.get("stage")
                        == "storing"
                    )
                )
                shown = Source.objects.get(pk=source.pk)
                self.assertEqual(shown.progress["chunks_total"], 12)
                self.assertEqual(
                    admin.SourceAdmin(Source, site).progress_display(shown),
                    "storing 12 chunks",
                )
            wait_for(
                lambda: Source.objects.get(pk=source.pk).status == Source.Status.INDEXED
            )
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
