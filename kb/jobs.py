"""RQ entry points: ids in, domain code called, outcome recorded on the rows."""

from __future__ import annotations

import logging
import os

import django_rq
from django.conf import settings
from django.db import connection
from django.utils import translation
from redis.exceptions import RedisError

from kb import embedding, index_config, ingestion, recovery
from kb.models import Collection, Source
from kb.queueing import (
    DEFAULT,
    LARGE,
    QUEUES,
    SHADOW_TIMEOUT,
    enqueue_count_terms,
    eval_job_id,
    ingest_job_id,
    requeue,
)
from kb.retrieval import hnsw_recall

logger = logging.getLogger(__name__)
# A source queued this long ago whose job is gone was lost (kb.recovery).
STRANDED_AFTER = recovery.STRANDED_AFTER
# Seconds an evaluation run may take: with a chunking override it rebuilds the
# whole collection, as a shadow index does.
EVAL_TIMEOUT = SHADOW_TIMEOUT


def ingest_source(source_id: int, version: int, language: str | None = None) -> str:
    """Index one version of a source (failures are recorded on it and re-raised);
    then have the collection's keyword statistics recounted. A failure is worded
    in `language`, the one of whoever queued the job (default: the site's)."""
    with translation.override(language or settings.LANGUAGE_CODE):
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
    return hnsw_recall.after_publish(collection)


def stranded(sources) -> list[Source]:
    """Sources shown as queued or indexing whose ingestion job was lost
    (kb.recovery.lost); none found when Redis cannot be reached. Evaluation
    copies are indexed in the run's own process, without jobs."""
    waiting = [
        source
        for source in sources
        if source.status in Source.ACTIVE and not source.collection.is_scratch
    ]
    if not waiting:
        return []
    redis = django_rq.get_queue().connection
    try:
        reasons = recovery.lost(
            redis, [recovery.Waiting(ingest_job_id(s), s.updated) for s in waiting]
        )
    except RedisError:
        logger.warning("Redis unreachable: lost ingestion jobs not checked")
        return []
    return _still_waiting([s for s, why in zip(waiting, reasons, strict=True) if why])


def jobs_ahead(sources) -> dict[int, int]:
    """For each queued source whose job waits on the queue, how many jobs come
    before it: those running, then those ahead of it in the queue. A large
    upload holds a worker for minutes, and the sources behind it should say so.
    {} when Redis cannot be reached."""
    queued = [s for s in sources if s.status == Source.Status.QUEUED]
    if not queued:
        return {}
    try:
        queues = [django_rq.get_queue(name) for name in QUEUES]
        # Workers take the large queue's jobs once the default queue is empty.
        order = [job_id for queue in queues for job_id in queue.get_job_ids()]
        running = sum(queue.started_job_registry.count for queue in queues)
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


def requeue_stranded() -> int:
    """Queue again every source whose job was lost; returns how many."""
    lost = stranded(
        Source.objects.filter(
            status__in=Source.ACTIVE, collection__is_scratch=False
        ).select_related("collection")
    )
    return requeue(lost)[0]


def recover_lost() -> dict[str, int]:
    """End or recover every shadow index, evaluation run, replay report, recount
    and scratch copy whose job was lost (kb.recovery); how many of each, those
    found logged. {} when Redis cannot be reached."""
    from kb import reindexing

    try:
        done = {"shadow indexes": reindexing.end_lost_shadows(), **recovery.recover()}
    except RedisError:
        logger.warning("Redis unreachable: lost jobs not checked")
        return {}
    if found := {kind: n for kind, n in done.items() if n}:
        logger.warning("Lost jobs ended or recovered: %s", found)
    return done


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
    """A run that rebuilds the collection under other chunking settings goes to
    the large queue."""
    overrides = run.config.get("overrides", {})
    rebuild = any(key in index_config.INDEX_FIELDS for key in overrides)
    queue = django_rq.get_queue(LARGE if rebuild else DEFAULT)
    return queue.enqueue(
        run_evaluation, run.pk, job_timeout=EVAL_TIMEOUT, job_id=eval_job_id(run.pk)
    )


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


def sync_run(run_id: int) -> dict:
    """One run of a sync source (kb.sync.runs): its figures, as kb_sync prints."""
    from kb.sync import runs

    return runs.execute(run_id).as_json()


def prune_questions() -> int:
    """Retention of the question log (kb.questions.prune); queued by workers."""
    from kb import questions

    return questions.prune()


def replay_recent(collection_id: int, n: int, report_id: int | None = None) -> dict:
    """Answer a collection's last `n` logged questions again on its current index
    (after a re-index); the ReplayReport row (`report_id`, made when it was
    queued) lists the answers that changed."""
    from kb import questions

    collection = Collection.objects.filter(pk=collection_id).first()
    if collection is None:
        return {"replayed": 0, "changed": 0}
    report = questions.replay_recent(collection, n, report_id)
    return {
        "report": report.pk,
        "replayed": report.replayed,
        "changed": len(report.changed),
    }
