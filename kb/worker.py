"""The RQ worker class kb runs (settings.RQ["WORKER_CLASS"], issue #15).

Jobs run in the worker process itself (SimpleWorker: the embedding model is loaded
once, not per job), and around them the worker:

- heartbeats every KB_WORKER_TTL / 4 seconds from a thread while a job runs, so a
  killed worker's job is seen as lost KB_WORKER_TTL seconds later (kb.jobs.stranded)
  instead of after the job timeout;
- closes its database connections before and after every job, so a PostgreSQL
  restart costs at most the job that was running;
- looks for lost jobs when it starts and then every KB_WORKER_TTL / 2 seconds (one
  worker at a time), queues their sources again (kb.jobs.requeue_stranded),
  ends or recovers every other kind with the reason (kb.recovery), and queues
  once more a parse that ran over the time limit (kb.ingestion.retry_timed_out);
- gives its embedder its share of the machine's cores (kb.embedding.share_cores);
- queues the question log's pruning every KB_QUESTION_PRUNE_SECONDS (one worker
  does: kb.questions.maybe_enqueue_prune), so retention needs no scheduler;
- queues the sync runs whose schedule is due (kb.sync.schedule, issue #30).
"""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings
from django.db import DatabaseError, connections
from redis.exceptions import RedisError
from rq.worker import SimpleWorker, WorkerStatus

from kb import embedding, queueing

logger = logging.getLogger(__name__)
REQUEUE_LOCK = "kb:requeue-lost"


def worker_queues(count: int) -> list[list[str]]:
    """The queues each of `count` workers on one machine serves, in the order
    it takes their jobs: the default queue first, the large one (big sources,
    whole rebuilds) only when it is empty; with two or more workers, one never
    takes large jobs, so a small upload waits for no large one (issue #26)."""
    both = list(queueing.QUEUES)
    if count < 2:
        return [both] * count
    return [[queueing.DEFAULT]] + [both] * (count - 1)


class Worker(SimpleWorker):
    def __init__(self, *args, **kwargs) -> None:
        # rqworker always passes its --worker-ttl (420 s): liveness is ours to set.
        ttl = settings.KB_WORKER_TTL
        kwargs["worker_ttl"] = ttl
        kwargs["job_monitoring_interval"] = max(1, ttl // 4)
        kwargs["maintenance_interval"] = max(1, ttl // 2)
        super().__init__(*args, **kwargs)

    @property
    def dequeue_timeout(self) -> int:
        # Wake up often enough for the periodic look for lost jobs.
        return max(1, min(self.worker_ttl - 15, self.maintenance_interval))

    def get_heartbeat_ttl(self, job, working_time: float = 0.0) -> int:
        # SimpleWorker's is the job timeout + 60 s (31 minutes): the heartbeat
        # thread renews this shorter one while the job runs.
        return self.worker_ttl

    def perform_job(self, job, queue, execution) -> bool:
        self._share_cores()
        connections.close_all()  # the server may have restarted since the last job
        beat = _Heartbeat(self, job, execution)
        beat.start()
        try:
            return super().perform_job(job, queue, execution)
        finally:
            beat.stop()
            connections.close_all()

    def run_maintenance_tasks(self) -> None:
        starting = self.last_cleaned_at is None
        super().run_maintenance_tasks()
        self.requeue_lost(starting)
        self.schedule_pruning()
        self.schedule_syncs()

    def schedule_pruning(self) -> None:
        from kb import questions

        try:
            questions.maybe_enqueue_prune(self.connection)
        except RedisError:
            logger.exception("Queueing the question log's pruning failed")

    def schedule_syncs(self) -> None:
        """Queue the sync sources whose schedule is due (kb.sync.schedule)."""
        from kb.sync import schedule

        try:
            if queued := schedule.queue_due(self.connection):
                logger.info("Queued %d scheduled sync run(s)", queued)
        except (DatabaseError, RedisError):
            logger.exception("Queueing scheduled syncs failed; trying again later")
        finally:
            connections.close_all()

    def requeue_lost(self, starting: bool = False) -> None:
        """Queue again the sources whose jobs were lost: a dead worker's, or jobs
        never queued because Redis was down when their source was stored. Every
        worker looks when it starts, then one worker per maintenance interval;
        that worker also queues once more the sources whose parse ran over the
        time limit, when their retry is due (kb.ingestion.retry_timed_out)."""
        from kb import ingestion, jobs

        hold = max(1, self.maintenance_interval - 1)
        try:
            taken = self.connection.set(REQUEUE_LOCK, self.name, nx=True, ex=hold)
            if not (taken or starting):
                return  # another worker has just looked
            if lost := jobs.requeue_stranded():
                logger.warning("Queued %d source(s) again: their jobs were lost", lost)
            jobs.recover_lost()  # shadow indexes, runs, reports, recounts
            if retried := ingestion.retry_timed_out():  # parses over the time limit
                logger.info("Queued %d timed-out source(s) once more", retried)
        except (DatabaseError, RedisError):
            logger.exception("Looking for lost jobs failed; trying again later")
        finally:
            connections.close_all()

    def _share_cores(self) -> None:
        """Before every job: split the cores among this machine's workers that are
        running a job, this one included (counted again each time), unless
        KB_WORKERS fixes their number. An idle worker takes no share: with
        kb_run's two workers, a large upload alone embeds on every core."""
        workers = settings.KB_WORKERS
        if not workers:
            try:
                workers = self.busy_here()
            except RedisError:
                return
        embedding.share_cores(workers)

    def busy_here(self) -> int:
        """Workers registered from this host that run a job now, this one
        included (at least 1). A worker killed while busy stays registered
        until its key expires (minutes): one whose process is gone from this
        host is not counted."""
        busy = {
            w.name
            for w in self.all(connection=self.connection)
            if w.hostname == self.hostname
            and w.get_state() == WorkerStatus.BUSY
            and _process_alive(w.pid)
        }
        return len(busy | {self.name})


def _process_alive(pid: int | None) -> bool:
    """Whether a process of this host with that id runs (unknown: yes)."""
    if not pid:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class _Heartbeat:
    """Renews the worker's and the running job's heartbeats from a thread."""

    def __init__(self, worker: Worker, job, execution) -> None:
        self.worker, self.job, self.execution = worker, job, execution
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="kb-heartbeat", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        worker = self.worker
        while not self._stop.wait(worker.job_monitoring_interval):
            try:
                with worker.connection.pipeline() as pipeline:
                    worker.heartbeat(worker.worker_ttl, pipeline=pipeline)
                    self.execution.heartbeat(
                        self.job.started_job_registry, worker.worker_ttl, pipeline
                    )
                    pipeline.execute()
            except RedisError:
                logger.warning("Heartbeat not sent: Redis unreachable")
