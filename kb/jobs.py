"""RQ entry points: ids in, domain code called, outcome recorded on the rows."""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import django_rq
from django.conf import settings
from django.db import connection
from django.utils import timezone
from redis.exceptions import RedisError
from rq.job import Job, JobStatus
from rq.utils import utcparse
from rq.worker import Worker

from kb import embedding, ingestion
from kb.models import Collection, Source
from kb.queueing import (
    SHADOW_TIMEOUT,
    WAITING,
    enqueue_count_terms,
    ingest_job_id,
    requeue,
)
from kb.retrieval import hnsw_recall, keywords

logger = logging.getLogger(__name__)
# A source queued this long ago whose job is gone was lost (queue emptied, or a
# Redis without persistence restarted); younger ones may not be enqueued yet, as
# jobs go to Redis when the transaction commits.
STRANDED_AFTER = timedelta(seconds=60)
# Seconds an evaluation run may take: with a chunking override it rebuilds the
# whole collection, as a shadow index does.
EVAL_TIMEOUT = SHADOW_TIMEOUT


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
    """After a publish: measure the HNSW index's recall for the collection
    (kb.retrieval.hnsw_recall), then recount its keyword statistics
    (kb.retrieval.keywords.count_terms), whose chunk count sizes it."""
    collection = Collection.objects.filter(pk=collection_id).first()
    if collection is None:
        return 0
    hnsw_recall.check(collection)
    return keywords.count_terms(collection)


def stranded(sources) -> list[Source]:
    """Sources shown as queued or indexing whose ingestion job has ended, no longer
    exists, or was started by a worker that has died (no heartbeat for KB_WORKER_TTL
    seconds); none found when Redis cannot be reached. Evaluation copies are indexed
    in the run's own process, without jobs."""
    waiting = [
        source
        for source in sources
        if source.status in Source.ACTIVE and not source.collection.is_scratch
    ]
    if not waiting:
        return []
    redis = django_rq.get_queue().connection
    try:
        found = Job.fetch_many([ingest_job_id(s) for s in waiting], redis)
        statuses = [job and job.get_status(refresh=False) for job in found]
        started = [j for j, s in zip(found, statuses) if s == JobStatus.STARTED]
        dead = _dead_workers(redis, {job.worker_name for job in started})
    except RedisError:
        logger.warning("Redis unreachable: lost ingestion jobs not checked")
        return []
    before = timezone.now() - STRANDED_AFTER
    lost = []
    for source, job, status in zip(waiting, found, statuses, strict=True):
        if job is None:  # gone, or not queued yet: its transaction may be committing
            dead_job = source.updated <= before
        elif status == JobStatus.STARTED:
            dead_job = job.worker_name in dead
        else:  # ended (abandoned by a dead worker, say), yet the source waits on it
            dead_job = status not in WAITING
        if dead_job:
            lost.append(source)
    return _still_waiting(lost)


def jobs_ahead(sources) -> dict[int, int]:
    """For each queued source whose job waits on the queue, how many jobs come
    before it: those running, then those ahead of it in the queue. A large
    upload holds a worker for minutes, and the sources behind it should say so.
    {} when Redis cannot be reached."""
    queued = [s for s in sources if s.status == Source.Status.QUEUED]
    if not queued:
        return {}
    queue = django_rq.get_queue()
    try:
        order = queue.get_job_ids()
        running = queue.started_job_registry.count
    except RedisError:
        return {}
    position = {job_id: running + i for i, job_id in enumerate(order)}
    ahead = {}
    for source in queued:
        index = position.get(ingest_job_id(source))
        if index is not None:
            ahead[source.pk] = index
    return ahead


def _still_waiting(sources: list[Source]) -> list[Source]:
    """Of these sources, those still waiting on the same version, read now: a
    job that ended between reading the rows and asking Redis has published its
    source (or failed it), and a newer version has a job of its own."""
    if not sources:
        return []
    waiting = Source.objects.filter(
        pk__in=[s.pk for s in sources], status__in=Source.ACTIVE
    )
    now = dict(waiting.values_list("pk", "version"))
    return [s for s in sources if now.get(s.pk) == s.version]


def _dead_workers(redis, names: set[str | None]) -> set[str | None]:
    """Of these worker names, those whose last heartbeat is older than
    KB_WORKER_TTL seconds or gone (the key expires with it)."""
    names = sorted(names, key=str)
    if not names:
        return set()
    with redis.pipeline() as pipeline:
        for name in names:
            key = f"{Worker.redis_worker_namespace_prefix}{name}"
            pipeline.hget(key, "last_heartbeat")
        beats = pipeline.execute()
    oldest = timezone.now() - timedelta(seconds=settings.KB_WORKER_TTL)
    return {
        name
        for name, beat in zip(names, beats, strict=True)
        if not name or beat is None or utcparse(beat.decode()) < oldest
    }


def requeue_stranded() -> int:
    """Queue again every source whose job was lost; returns how many."""
    lost = stranded(
        Source.objects.filter(
            status__in=Source.ACTIVE, collection__is_scratch=False
        ).select_related("collection")
    )
    return requeue(lost)[0]


def check_worker() -> dict:
    """Report what a worker process sees: its pid, the database and pgvector."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    return {
        "pid": os.getpid(),
        "embed_threads": embedding.get_embedder().threads,
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
    return django_rq.enqueue(run_evaluation, run.pk, job_timeout=EVAL_TIMEOUT)


# --- shadow indexes (kb/reindexing.py) ---------------------------------------------


def build_shadow(shadow_id: int) -> str:
    """Build a shadow index, evaluate it, and swap it in or hold it."""
    from kb import reindexing

    return reindexing.run(shadow_id)


def swap_shadow(shadow_id: int) -> str:
    """Swap in a shadow index an admin approved."""
    from kb import reindexing

    return reindexing.swap_approved(shadow_id)


def drop_scratch(collection_id: int) -> int:
    """Delete a discarded shadow's scratch collection."""
    from kb import reindexing

    return reindexing.drop_scratch(collection_id)


def prune_questions() -> int:
    """Retention of the question log (kb.questions.prune); queued by workers."""
    from kb import questions

    return questions.prune()


def replay_recent(collection_id: int, n: int) -> dict:
    """Answer a collection's last `n` logged questions again on its current index
    (after a re-index); the ReplayReport row lists the answers that changed."""
    from kb import questions

    collection = Collection.objects.filter(pk=collection_id).first()
    if collection is None:
        return {"replayed": 0, "changed": 0}
    report = questions.replay_recent(collection, n)
    return {"report": report.pk, "replayed": report.replayed,
            "changed": len(report.changed)}  # fmt: skip
