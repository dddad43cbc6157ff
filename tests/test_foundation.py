from __future__ import annotations

import os
import tempfile
from pathlib import Path
from unittest.mock import patch

import django_rq
import pytest
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
    def test_the_embedded_server_reads_the_cache_size_it_is_given(self):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_size_bytes(setting || 'kB') * 8, pg_size_bytes(%s), "
                "pending_restart FROM pg_settings WHERE name = 'shared_buffers'",
                [services.shared_buffers()],
            )
            current, wanted, pending = cursor.fetchone()
            cursor.execute(
                "SELECT setting FROM pg_file_settings WHERE name = 'shared_buffers' "
                "AND sourcefile LIKE %s",
                [f"%/{services.SETTINGS_FILE}"],
            )
            self.assertEqual(cursor.fetchall(), [(services.shared_buffers(),)])
        if not pending:  # a server started before the size changed keeps its own
            self.assertEqual(current, wanted)

    def test_settings_go_in_a_file_the_server_includes_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            pgdata = Path(tmp)
            (pgdata / "postgresql.conf").write_text("max_connections = 100\n")
            with patch.dict(os.environ, {"KB_PG_SHARED_BUFFERS": "256MB"}):
                services.write_settings(pgdata)
                services.write_settings(pgdata)
            conf = (pgdata / "postgresql.conf").read_text()
            self.assertEqual(conf.count("include_if_exists = 'kb.conf'"), 1)
            self.assertIn("shared_buffers = '256MB'", (pgdata / "kb.conf").read_text())
            services.write_settings(pgdata, cache=False)
            self.assertNotIn("shared_buffers", (pgdata / "kb.conf").read_text())

    def test_a_cache_size_that_is_not_a_size_is_refused_with_a_reason(self):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "postgresql.conf").write_text("")
            for wrong in ("lots", "1.5GB", "512 mb"):
                with patch.dict(os.environ, {"KB_PG_SHARED_BUFFERS": wrong}):
                    with self.assertRaisesMessage(services.ServiceError, repr(wrong)):
                        services.write_settings(Path(tmp))

    def test_it_finds_the_nearest_vector_by_cosine(self):
        near = make_tree(_unit(0))
        far = Chunk.objects.create(
            source=near.source,
            section=near.section,
            chunk_index=1,
            start=0,
            end=1,
            text="x",
            embedded_text="x",
            token_count=3,
            embedding=_unit(5),
        )
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
