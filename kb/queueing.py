"""Putting work on the queue: the enqueue side of kb.jobs.

Each job is named by its dotted path ("kb.jobs.ingest_source"), as RQ stores it
anyway, so domain modules (kb.reindexing, kb.questions) can queue work without
importing kb.jobs, whose jobs call them.
"""

from __future__ import annotations

import logging
from functools import partial

import django_rq
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone, translation
from django.utils.translation import gettext_lazy
from redis.exceptions import RedisError
from rq.job import JobStatus

from kb.models import Collection, Source

# Its warnings keep the logger they had in kb.jobs.
logger = logging.getLogger("kb.jobs")
WAITING = {JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED}
# What editors are told when a job cannot be queued (enqueue_ingest).
QUEUE_DOWN = gettext_lazy("stored; it will be queued when the queue is back")
# A shadow index rebuilds the whole collection, as an evaluation run with a
# chunking override does.
SHADOW_TIMEOUT = 3600
# Workers serve DEFAULT first, then LARGE: big sources and whole rebuilds (issue #26).
DEFAULT, LARGE = "default", "large"
QUEUES = [DEFAULT, LARGE]


def enqueue_count_terms(collection_id: int):
    """Queue a recount unless one is already waiting: a batch of uploads gets one."""
    queue = django_rq.get_queue()
    job_id = count_terms_job_id(collection_id)
    waiting = queue.fetch_job(job_id)
    if waiting is not None and waiting.get_status() in WAITING:
        return waiting
    return queue.enqueue("kb.jobs.count_terms", collection_id, job_id=job_id)


@receiver(post_delete, sender=Source)
def _recount_after_delete(sender, instance: Source, **kwargs) -> None:
    collection_id = instance.collection_id
    transaction.on_commit(lambda: recount_after_delete(collection_id))


def recount_after_delete(collection_id: int) -> None:
    """After a source is deleted: its words are no longer the collection's (the
    answerer names a question's words no source uses). Nothing for a collection
    deleted with it; a queue that cannot be reached leaves the count until the
    next ingestion recounts it."""
    if not Collection.objects.filter(pk=collection_id).exists():
        return
    try:
        enqueue_count_terms(collection_id)
    except RedisError as exc:
        logger.warning("Words of collection %s not recounted: %s", collection_id, exc)


def enqueue_ingest(source: Source) -> bool:
    """Queue the source's current version once the surrounding transaction commits.

    False when the queue cannot be reached: the source is stored and shown as
    queued, and a worker queues it once the queue is back (requeue_stranded).
    """
    Source.objects.filter(pk=source.pk).update(
        status=Source.Status.QUEUED,
        progress={"stage": "queued"},
        updated=timezone.now(),
    )
    if not queue_reachable():
        return False
    _push_on_commit(source)
    return True


def _push_on_commit(source: Source) -> None:
    queue = queue_for(source)
    # The language of whoever queued it (an editor's request, else the site's):
    # the job words the source's error in it (issue #27).
    language = translation.get_language()
    transaction.on_commit(
        partial(_push_ingest, source.pk, source.version, queue, language)
    )


def queue_for(source: Source) -> str:
    """The queue of the source's ingestion: "large" for a file of
    KB_LARGE_SOURCE_BYTES or more, which workers take only when "default" is
    empty, so that small uploads do not wait behind it."""
    try:
        size = source.file.size if source.file else len(source.text.encode())
    except OSError:  # the file is missing: the job says so, quickly
        size = 0
    return LARGE if size >= settings.KB_LARGE_SOURCE_BYTES else DEFAULT


def requeue(sources) -> tuple[int, bool]:
    """Queue the sources again, each as a new version (a late job of an older one
    stands down); how many, and whether the queue took them all."""
    count, queued = 0, True
    for source in sources:
        source.queue_new_version()
        queued = enqueue_ingest(source) and queued
        count += 1
    return count, queued


def requeue_collection(collection: Collection) -> tuple[int, bool]:
    """Queue every source of the collection again: indexed anew under its current
    settings. As requeue."""
    return requeue(collection.sources.all())


def queue_reachable() -> bool:
    try:
        return bool(django_rq.get_queue().connection.ping())
    except RedisError:
        logger.warning("Redis unreachable: jobs are queued once it is back")
        return False


def _push_ingest(
    source_id: int, version: int, queue: str, language: str | None = None
) -> None:
    # Redis may go away between the check and the commit: the stored source then
    # waits for requeue_stranded like any lost job, instead of a 500.
    job_id = _ingest_job_id(source_id, version)
    try:
        django_rq.get_queue(queue).enqueue(
            "kb.jobs.ingest_source",
            source_id,
            version,
            language=language,
            job_id=job_id,
        )
    except RedisError:
        logger.warning("Redis unreachable: source %s queued once it is back", source_id)


def ingest_job_id(source: Source) -> str:
    return _ingest_job_id(source.pk, source.version)


def _ingest_job_id(source_id: int, version: int) -> str:
    return f"kb-ingest-{source_id}-v{version}"


def enqueue_shadow(shadow) -> bool:
    """Queue the build once the surrounding transaction commits; False when the
    queue cannot be reached."""
    if not queue_reachable():
        return False
    django_rq.get_queue(LARGE).enqueue(
        "kb.jobs.build_shadow",
        shadow.pk,
        job_timeout=SHADOW_TIMEOUT,
        job_id=shadow_job_id(shadow.pk, "build"),
    )
    return True


def enqueue_sync(run) -> bool:
    """Queue a sync run (kb.sync.runs) on the large queue, once the surrounding
    transaction commits: it reads and indexes many files. False when the queue
    cannot be reached: the run stays queued until a worker's look for lost
    jobs ends it and queues another (kb.sync.runs.end_lost)."""
    if not queue_reachable():
        return False
    timeout = settings.KB_SYNC_MAX_SECONDS + 600  # the run stops itself before
    transaction.on_commit(
        lambda: django_rq.get_queue(LARGE).enqueue(
            "kb.jobs.sync_run",
            run.pk,
            job_timeout=timeout,
            job_id=sync_job_id(run.pk),
        )
    )
    return True


def enqueue_swap(shadow) -> bool:
    if not queue_reachable():
        return False
    django_rq.enqueue(
        "kb.jobs.swap_shadow",
        shadow.pk,
        job_timeout=SHADOW_TIMEOUT,
        job_id=shadow_job_id(shadow.pk, "swap"),
    )
    return True


def enqueue_drop_scratch(collection_id: int) -> None:
    try:
        django_rq.enqueue(
            "kb.jobs.drop_scratch",
            collection_id,
            job_timeout=SHADOW_TIMEOUT,
            job_id=drop_scratch_job_id(collection_id),
        )
    except RedisError:  # the hidden copy stays until dropped by hand
        logger.warning("Redis unreachable: scratch collection %s kept", collection_id)


def enqueue_retry(source: Source) -> None:
    """Queue the source's current version once more, under its own job id (the
    failed job's), once the surrounding transaction commits; a queue that cannot
    be reached leaves it to requeue_stranded, as any lost job."""
    _push_on_commit(source)


# --- job ids: kb.recovery finds the job each waiting row waits on -------------


def shadow_job_id(shadow_id: int, step: str) -> str:
    """`step`: "build" (build, evaluate, decide) or "swap" (an approved swap)."""
    return f"kb-shadow-{shadow_id}-{step}"


def sync_job_id(run_id: int) -> str:
    return f"kb-sync-run-{run_id}"


def eval_job_id(run_id: int) -> str:
    return f"kb-eval-{run_id}"


def replay_job_id(report_id: int) -> str:
    return f"kb-replay-{report_id}"


def count_terms_job_id(collection_id: int) -> str:
    return f"kb-count-terms-{collection_id}"


def drop_scratch_job_id(collection_id: int) -> str:
    return f"kb-drop-scratch-{collection_id}"
