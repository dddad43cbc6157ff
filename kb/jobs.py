"""RQ entry points: ids in, domain code called, outcome recorded on the rows."""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import django_rq
from django.db import connection
from django.utils import timezone
from redis.exceptions import RedisError
from rq.job import Job, JobStatus

from kb import ingestion, keywords
from kb.models import Collection, Source

logger = logging.getLogger(__name__)
_WAITING = {JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED}
_ALIVE = _WAITING | {JobStatus.STARTED}
# A source queued this long ago whose job is gone was lost (queue emptied, or a
# Redis without persistence restarted); younger ones may not be enqueued yet, as
# jobs go to Redis when the transaction commits.
STRANDED_AFTER = timedelta(seconds=60)


def ingest_source(source_id: int, version: int) -> str:
    """Index one version of a source (failures are recorded on it and re-raised);
    then have the collection's keyword statistics recounted."""
    outcome = ingestion.ingest(source_id, version)
    collection_id = (
        Source.objects.filter(pk=source_id)
        .values_list("collection_id", flat=True)
        .first()
    )
    if collection_id is not None:
        enqueue_count_terms(collection_id)
    return outcome


def count_terms(collection_id: int) -> int:
    """Recount a collection's keyword statistics (kb.keywords.count_terms)."""
    collection = Collection.objects.filter(pk=collection_id).first()
    return keywords.count_terms(collection) if collection else 0


def enqueue_count_terms(collection_id: int):
    """Queue a recount unless one is already waiting: a batch of uploads gets one."""
    queue = django_rq.get_queue()
    job_id = f"kb-count-terms-{collection_id}"
    waiting = queue.fetch_job(job_id)
    if waiting is not None and waiting.get_status() in _WAITING:
        return waiting
    return queue.enqueue(count_terms, collection_id, job_id=job_id)


def enqueue_ingest(source: Source):
    """Queue the source's current version; runs after the surrounding transaction."""
    Source.objects.filter(pk=source.pk).update(
        status=Source.Status.QUEUED,
        progress={"stage": "queued"},
        updated=timezone.now(),
    )
    return django_rq.enqueue(
        ingest_source, source.pk, source.version, job_id=ingest_job_id(source)
    )


def ingest_job_id(source: Source) -> str:
    return f"kb-ingest-{source.pk}-v{source.version}"


def stranded(sources) -> list[Source]:
    """Sources shown as queued or indexing whose ingestion job no longer exists or
    has died (one Redis round trip; none found when Redis cannot be reached).
    Evaluation copies are indexed in the run's own process, without jobs."""
    before = timezone.now() - STRANDED_AFTER
    waiting = [
        source
        for source in sources
        if source.status in (Source.Status.QUEUED, Source.Status.INDEXING)
        and source.updated <= before
        and not source.collection.is_scratch
    ]
    if not waiting:
        return []
    queue = django_rq.get_queue()
    try:
        found = Job.fetch_many(
            [ingest_job_id(s) for s in waiting], connection=queue.connection
        )
        statuses = [job and job.get_status(refresh=False) for job in found]
    except RedisError:
        logger.warning("Redis unreachable: lost ingestion jobs not checked")
        return []
    return [
        s for s, status in zip(waiting, statuses, strict=True) if status not in _ALIVE
    ]


def requeue_stranded() -> int:
    """Queue again every source whose job was lost; returns how many."""
    active = [Source.Status.QUEUED, Source.Status.INDEXING]
    lost = stranded(
        Source.objects.filter(
            status__in=active, collection__is_scratch=False
        ).select_related("collection")
    )
    for source in lost:
        ingestion.mark_queued(source)  # a new version: a late old job stands down
        enqueue_ingest(source)
    return len(lost)


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
