"""Scheduled syncs: the workers' maintenance loop (kb/worker.py) queues the
runs that are due, one worker per KB_SYNC_CHECK_SECONDS (a key in Redis), so
no scheduler or cron is needed."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from kb.models import SyncRun, SyncSource

CHECK_LOCK = "kb:sync-check"
ACTIVE = [SyncRun.Status.QUEUED, SyncRun.Status.RUNNING]
# A queued run no worker took within this long (the queue was down, or its job
# lost) no longer holds its sync's schedule back.
QUEUED_FOR = timedelta(hours=1)


def due(now=None) -> list[SyncSource]:
    """The sync sources whose schedule is due: every N minutes since their
    last run started, and no run of theirs queued or running."""
    now = now or timezone.now()
    found = []
    for sync in SyncSource.objects.filter(every_minutes__gt=0):
        runs = sync.runs.order_by("-started")
        last = runs.first()
        if last and last.started > now - timedelta(minutes=sync.every_minutes):
            continue
        if runs.filter(status__in=ACTIVE, started__gt=now - QUEUED_FOR).exists():
            continue
        found.append(sync)
    return found


def queue_due(redis) -> int:
    """Queue the due runs, unless another worker looked within
    KB_SYNC_CHECK_SECONDS; how many were queued."""
    from kb.sync import runs

    every = max(1, settings.KB_SYNC_CHECK_SECONDS)
    if not redis.set(CHECK_LOCK, "1", nx=True, ex=every):
        return 0
    queued = due()
    for sync in queued:
        runs.queue(sync)
    return len(queued)
