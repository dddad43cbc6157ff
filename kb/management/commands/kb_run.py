from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from kb import jobs
from kb.worker import worker_queues


class Command(BaseCommand):
    help = (
        "Serve the app on ADDR:PORT with N RQ workers beside it; Ctrl-C stops them all."
    )

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000")
        parser.add_argument(
            "--workers",
            type=int,
            default=2,
            help="RQ workers (default 2): with two or more, one serves only the "
            "default queue, so small jobs never wait behind large ones",
        )

    def handle(self, *args, **options):
        # Stop on Ctrl-C and on SIGTERM alike, even where SIGINT was inherited ignored.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _interrupt)
        call_command("kb_embedder", stdout=self.stdout)  # model, window, budget
        if lost := jobs.requeue_stranded():
            self.stdout.write(
                f"Queued {lost} source(s) again: their jobs were lost (the queue "
                "was emptied, or its server restarted without them)."
            )
        if found := {kind: n for kind, n in jobs.recover_lost().items() if n}:
            shown = ", ".join(f"{n} {kind}" for kind, n in found.items())
            self.stdout.write(
                f"Ended or recovered after their jobs were lost: {shown}."
            )
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        # Each worker's embedder takes its share of the cores (kb.worker).
        env = {**os.environ, "KB_WORKERS": str(options["workers"])}
        procs = [
            subprocess.Popen([*manage, "rqworker", *queues], env=env)
            for queues in worker_queues(options["workers"])
        ]
        procs.append(
            subprocess.Popen([*manage, "runserver", options["addr"], "--noreload"])
        )
        base = f"http://{options['addr']}"
        self.stdout.write(
            self.style.SUCCESS(
                f"\nkb is running:\n  ask page   {base}/\n  admin      {base}/admin/\n"
                f"  queues     {base}/admin/rq/\nPress Ctrl-C to stop.\n"
            )
        )
        try:
            while all(p.poll() is None for p in procs):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self._stop(procs)

    def _stop(self, procs: list[subprocess.Popen]) -> None:
        # Workers finish their current job on SIGTERM (RQ's warm shutdown).
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.stdout.write("Stopped web server and workers.")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
