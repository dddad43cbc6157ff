"""Lost jobs: found, and what waited on them recovered or ended with the reason.

A job is lost when the row that waits on it (a source being indexed, a shadow
index, an evaluation run, a replay report) still waits, yet its job is gone from
Redis (the queue was emptied, or its server restarted without it), was started
by a worker that died (no heartbeat for KB_WORKER_TTL seconds: killed, machine
lost), or ended without settling the row (it failed while the database was
down, say). Workers look every KB_WORKER_TTL / 2 seconds (kb/worker.py), and
kb_run when it starts:

- sources are queued again (kb.jobs.requeue_stranded);
- a shadow index being built or evaluated fails with the reason, its scratch
  copy dropped; an approved swap that did not complete is held again, with the
  reason, for the admin to approve again or discard;
- an evaluation run or a replay report fails with the reason (a run's scratch
  copy dropped);
- a collection whose keyword statistics are older than its newest indexed
  source, with no recount waiting or running, is recounted;
- a scratch copy left by a shadow that ended is dropped;
- a sync run ends as interrupted, with the reason, and its sync is queued
  again, which finishes the work (kb.sync.runs.end_lost).

The question log's pruning needs nothing: workers queue it again every
KB_QUESTION_PRUNE_SECONDS, and each of its deletes commits on its own.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

import django_rq
from django.conf import settings
from django.db.models import F, Max, Q
from django.utils import timezone
from redis.exceptions import RedisError
from rq.job import Job, JobStatus
from rq.utils import utcparse
from rq.worker import Worker

from kb import queueing
from kb.models import Collection, EvalRun, ReplayReport, ShadowIndex, SyncRun
from kb.queueing import (
    count_terms_job_id,
    drop_scratch_job_id,
    eval_job_id,
    replay_job_id,
    shadow_job_id,
    sync_job_id,
)

logger = logging.getLogger(__name__)
# The line of a traceback naming the exception: "django.db.utils.OperationalError: ..."
_EXCEPTION_RE = re.compile(r"^[\w.]*(?:Error|Exception|Exceeded|Timeout)\w*(?::|$)")
# A row waiting this long on a job that is gone was lost (queue emptied, or a
# Redis without persistence restarted); a younger one's job may not be queued
# yet, as jobs go to Redis when their transaction commits.
STRANDED_AFTER = timedelta(seconds=60)
GONE = "its queue entry was lost (the queue was emptied, or its server restarted)"
DEAD = "the worker running it stopped (killed, or its machine lost)"


@dataclass
class Waiting:
    """A job a row waits on, and since when (the row's enqueue time)."""

    job_id: str
    since: datetime


def lost(redis, waiting: list[Waiting]) -> list[str | None]:
    """For each job, why it is lost, or None while it may still settle its row:
    gone for STRANDED_AFTER, started by a dead worker, or ended (failed,
    finished, stopped) while the row still waits. Raises RedisError."""
    if not waiting:
        return []
    found = Job.fetch_many([w.job_id for w in waiting], redis)
    statuses = [job and job.get_status(refresh=False) for job in found]
    started = [j for j, s in zip(found, statuses) if s == JobStatus.STARTED]
    dead = dead_workers(redis, {job.worker_name for job in started})
    before = timezone.now() - STRANDED_AFTER
    reasons: list[str | None] = []
    for row, job, status in zip(waiting, found, statuses, strict=True):
        if job is None:  # gone, or not queued yet: its transaction may be committing
            reasons.append(GONE if row.since <= before else None)
        elif status == JobStatus.STARTED:
            reasons.append(DEAD if job.worker_name in dead else None)
        elif status in queueing.WAITING:
            reasons.append(None)
        else:
            reasons.append(_ended(job, status))
    return reasons


def _ended(job: Job, status: str) -> str:
    """Why a job that ended left its row waiting, in one line."""
    if status != JobStatus.FAILED:
        return f"its job ended ({status}) without finishing it"
    result = job.latest_result()
    detail = (result.exc_string if result else "") or ""
    if "AbandonedJobError" in detail:  # RQ's word for a dead worker's job
        return DEAD
    return f"its job failed: {_exception_line(detail)[:300]}"


def _exception_line(traceback: str) -> str:
    """The exception of a traceback, "OperationalError: terminating connection
    ...", without its module (a database error's message runs over more lines,
    CONTEXT and HINT: the first says what happened)."""
    lines = traceback.strip().splitlines()
    found = [line for line in lines if _EXCEPTION_RE.match(line)]
    if not found:
        return lines[-1] if lines else "no detail"
    name, colon, message = found[-1].partition(":")
    return name.rsplit(".", 1)[-1] + colon + message


def dead_workers(redis, names: set[str | None]) -> set[str | None]:
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


# --- the look for lost jobs --------------------------------------------------------


def recover() -> dict[str, int]:
    """End or recover the runs, replay reports, recounts and scratch copies whose
    job was lost (shadows: kb.reindexing.end_lost_shadows); how many of each.
    Raises RedisError."""
    redis = django_rq.get_queue().connection
    return {
        "evaluation runs": _runs(redis),
        "replay reports": _replays(redis),
        "recounts": _recounts(redis),
        "scratch copies": _scratch_copies(redis),
        "sync runs": _sync_runs(redis),
    }


def lost_shadows(shadows: list[ShadowIndex] | None = None) -> dict[int, str]:
    """Of these shadows (default: all), those being built, evaluated or swapped
    whose job was lost: {pk: why}. {} when Redis cannot be reached."""
    if shadows is None:
        shadows = list(ShadowIndex.objects.filter(status__in=list(_SHADOW_STEPS)))
    waiting = [s for s in shadows if s.status in _SHADOW_STEPS]
    try:
        reasons = lost(
            django_rq.get_queue().connection, [_shadow_waiting(s) for s in waiting]
        )
    except RedisError:
        logger.warning("Redis unreachable: lost shadow index jobs not checked")
        return {}
    return {s.pk: why for s, why in zip(waiting, reasons, strict=True) if why}


_SHADOW_STEPS = {
    ShadowIndex.Status.BUILDING: "build",
    ShadowIndex.Status.EVALUATING: "build",
    ShadowIndex.Status.APPROVED: "swap",
}


def _shadow_waiting(shadow: ShadowIndex) -> Waiting:
    step = _SHADOW_STEPS[shadow.status]
    since = shadow.created
    if step == "swap":  # approved long after it was created
        approved = (shadow.progress or {}).get("approved")
        since = datetime.fromisoformat(approved) if approved else timezone.now()
    return Waiting(shadow_job_id(shadow.pk, step), since)


def _runs(redis) -> int:
    active = [EvalRun.Status.QUEUED, EvalRun.Status.RUNNING]
    runs = list(EvalRun.objects.filter(status__in=active))
    reasons = lost(redis, [Waiting(eval_job_id(r.pk), r.created) for r in runs])
    count = 0
    for run, why in zip(runs, reasons, strict=True):
        if not why:
            continue
        ended = EvalRun.objects.filter(pk=run.pk, status=run.status).update(
            status=EvalRun.Status.FAILED,
            error=f"Not finished: {why}",
            finished=timezone.now(),
        )
        if ended and (scratch := run.config.get("scratch_id")):
            queueing.enqueue_drop_scratch(scratch)
        count += ended
    return count


def _sync_runs(redis) -> int:
    """Sync runs queued or running whose job was lost end as interrupted, and
    their sync is queued again (kb.sync.runs.end_lost)."""
    from kb.sync import runs as sync_runs

    active = [SyncRun.Status.QUEUED, SyncRun.Status.RUNNING]
    found = list(
        SyncRun.objects.filter(status__in=active).select_related("sync_source")
    )
    reasons = lost(redis, [Waiting(sync_job_id(r.pk), r.started) for r in found])
    return sum(
        sync_runs.end_lost(run, why)
        for run, why in zip(found, reasons, strict=True)
        if why
    )


def _replays(redis) -> int:
    running = list(ReplayReport.objects.filter(status=ReplayReport.Status.RUNNING))
    reasons = lost(redis, [Waiting(replay_job_id(r.pk), r.created) for r in running])
    count = 0
    for report, why in zip(running, reasons, strict=True):
        if why:
            count += ReplayReport.objects.filter(
                pk=report.pk, status=ReplayReport.Status.RUNNING
            ).update(
                status=ReplayReport.Status.FAILED,
                error=f"Not finished: {why}",
                finished=timezone.now(),
            )
    return count


def _recounts(redis) -> int:
    """Recount the collections whose keyword statistics predate their newest
    indexed source by STRANDED_AFTER, unless a recount waits or runs."""
    newest = Max("sources__indexed")
    stale = list(
        Collection.objects.filter(is_scratch=False)
        .annotate(newest=newest)
        .filter(Q(terms_counted__isnull=True) | Q(newest__gt=F("terms_counted")))
        .filter(newest__lte=timezone.now() - STRANDED_AFTER)
        .values_list("pk", "newest")
    )
    reasons = lost(redis, [Waiting(count_terms_job_id(pk), t) for pk, t in stale])
    count = 0
    for (pk, _), why in zip(stale, reasons, strict=True):
        if why:
            queueing.enqueue_count_terms(pk)
            count += 1
    return count


def _scratch_copies(redis) -> int:
    """Drop the scratch copies of shadows that ended without going live (their
    drop job lost), unless a drop waits or runs."""
    ended = [ShadowIndex.Status.FAILED, ShadowIndex.Status.DISCARDED]
    left = list(
        ShadowIndex.objects.filter(status__in=ended, scratch__isnull=False)
        .values_list("scratch_id", "finished", "created")
        .distinct()
    )
    waiting = [
        Waiting(drop_scratch_job_id(pk), finished or created)
        for pk, finished, created in left
    ]
    count = 0
    for (pk, _, _), why in zip(left, lost(redis, waiting), strict=True):
        if why:
            queueing.enqueue_drop_scratch(pk)
            count += 1
    return count
