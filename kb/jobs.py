"""RQ entry points: ids in, domain code called, outcome recorded on the rows."""

from __future__ import annotations

import logging
import os

import django_rq
from django.db import connection

from kb import ingestion
from kb.models import Source

logger = logging.getLogger(__name__)


def ingest_source(source_id: int, version: int) -> str:
    """Index one version of a source (failures are recorded on it and re-raised)."""
    return ingestion.ingest(source_id, version)


def enqueue_ingest(source: Source):
    """Queue the source's current version; runs after the surrounding transaction."""
    Source.objects.filter(pk=source.pk).update(
        status=Source.Status.QUEUED, progress={"stage": "queued"}
    )
    return django_rq.enqueue(ingest_source, source.pk, source.version)


def check_worker() -> dict:
    """Report what a worker process sees: its pid, the database and pgvector."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    return {
        "pid": os.getpid(),
        "database": connection.settings_dict["NAME"],
        "vendor": connection.vendor,
        "pgvector": row[0] if row else None,
    }


def run_evaluation(run_id: int) -> dict:
    """Evaluate a collection's golden cases; the run row holds progress and results."""
    from kb import evaluation

    run = evaluation.execute_run(run_id)
    return run.aggregate


def enqueue_evaluation(run):
    return django_rq.enqueue(run_evaluation, run.pk, job_timeout=3600)
