from __future__ import annotations

import os
from unittest.mock import patch

import django_rq
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import TestCase, TransactionTestCase
from django.urls import reverse
from pgvector.django import CosineDistance

from config import services
from kb.models import Chunk
from tests.base import make_tree, make_users, run_burst_worker


def _unit(i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(384)]


class DatabaseTestCase(TestCase):
    def test_it_runs_on_postgresql_with_pgvector(self):
        self.assertEqual(connection.vendor, "postgresql")
        with connection.cursor() as cursor:
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname='vector'")
            self.assertIsNotNone(cursor.fetchone())

    @pytest.mark.skipif(
        bool(os.environ.get("DATABASE_URL")), reason="the server is not embedded"
    )
    def test_the_embedded_server_caches_what_the_indexes_need(self):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_size_bytes(current_setting('shared_buffers')), "
                "pg_size_bytes(%s)",
                [services.shared_buffers()],
            )
            current, wanted = cursor.fetchone()
        self.assertEqual(current, wanted)
        self.assertGreaterEqual(current, 128 * 2**20)

    def test_the_cache_size_can_be_set(self):
        with patch.dict(os.environ, {"KB_PG_SHARED_BUFFERS": "256MB"}):
            self.assertEqual(services.shared_buffers(), "256MB")

    @pytest.mark.skipif(
        bool(os.environ.get("DATABASE_URL")), reason="the server is not embedded"
    )
    def test_a_cache_size_postgres_cannot_take_is_refused_with_a_reason(self):
        socket_dir = settings.DATABASES["default"]["HOST"]
        for wrong in ("lots", "100TB"):
            with patch.dict(os.environ, {"KB_PG_SHARED_BUFFERS": wrong}):
                with self.assertRaisesMessage(services.ServiceError, repr(wrong)):
                    services._configure(socket_dir)
        # Nothing was stored: the server keeps the size it runs with.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_file_settings "
                "WHERE name = 'shared_buffers' AND setting IN ('lots', '100TB')"
            )
            self.assertEqual(cursor.fetchone()[0], 0)

    def test_it_finds_the_nearest_vector_by_cosine(self):
        near = make_tree(_unit(0))
        far = Chunk.objects.create(
            source=near.source, section=near.section, chunk_index=1, start=0, end=1,
            text="x", embedded_text="x", token_count=3, embedding=_unit(5),
        )  # fmt: skip
        query = [0.9 if j == 0 else (0.1 if j == 5 else 0.0) for j in range(384)]
        ranked = Chunk.objects.order_by(CosineDistance("embedding", query))
        self.assertEqual(list(ranked), [near, far])


class MigrationsTestCase(TestCase):
    def test_the_models_have_no_unmigrated_changes(self):
        # makemigrations --check exits non-zero when a migration is missing.
        call_command("makemigrations", "kb", "--check", "--dry-run", verbosity=0)


class AdminTestCase(TestCase):
    def setUp(self):
        self.staff, self.editor, self.alice = make_users()

    def test_it_sends_anonymous_users_to_login(self):
        response = self.client.get(reverse("admin:kb_source_changelist"))
        self.assertEqual(response.status_code, 302)
        self.assertIn(reverse("admin:login"), response["Location"])

    def test_it_lists_sources_for_staff(self):
        make_tree()
        self.client.force_login(self.staff)
        response = self.client.get(reverse("admin:kb_source_changelist"))
        self.assertContains(response, "deploy.md")


@pytest.mark.slow
class WorkerTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees only committed rows.

    def test_a_real_worker_process_runs_an_enqueued_job(self):
        job = django_rq.enqueue("kb.jobs.check_worker")
        run_burst_worker()
        job.refresh()
        self.assertTrue(job.is_finished, job.exc_info)
        self.assertNotEqual(job.return_value()["pid"], os.getpid())
        self.assertEqual(
            job.return_value()["database"], connection.settings_dict["NAME"]
        )
        self.assertIsNotNone(job.return_value()["pgvector"])
