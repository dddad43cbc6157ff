from __future__ import annotations

import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from config import services
from kb import jobs
from kb.worker import worker_queues

# A process that exits this many times in a row within QUICK_EXIT_S of starting
# is not started again: kb_run stops.
QUICK_EXITS = 5
QUICK_EXIT_S = 10


class Command(BaseCommand):
    help = (
        "Serve the app on ADDR:PORT with N RQ workers beside it, starting again any "
        "that exits; Ctrl-C stops them all."
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
        # Each worker's embedder takes its share of the cores among the workers
        # running a job (kb.worker), so a large upload alone has them all.
        children = [
            _Child(f"worker {n}", [*manage, "rqworker", *queues])
            for n, queues in enumerate(worker_queues(options["workers"]), 1)
        ]
        web = [*manage, "runserver", options["addr"], "--noreload"]
        children.append(_Child("web server", web))
        base = f"http://{options['addr']}"
        self.stdout.write(
            self.style.SUCCESS(
                f"\nkb is running:\n  ask page   {base}/\n  admin      {base}/admin/\n"
                f"  queues     {base}/admin/rq/\nPress Ctrl-C to stop.\n"
            )
        )
        try:
            while True:
                for child in children:
                    if child.proc.poll() is not None:
                        self._restart(child)
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self._stop([child.proc for child in children])

    def _restart(self, child: _Child) -> None:
        """Start a process that exited again, the others running on: a web server
        killed for its memory took the workers with it (issue #26). One that
        keeps exiting as it starts (a port in use) stops them all. An embedded
        server that stopped meanwhile (the process may have exited for it) is
        started first, as `make services` does: the settings only read where
        it listens."""
        code = child.proc.returncode
        if time.monotonic() - child.started < QUICK_EXIT_S:
            child.quick_exits += 1
        else:
            child.quick_exits = 0
        if child.quick_exits >= QUICK_EXITS:
            raise CommandError(
                f"The {child.name} exited {QUICK_EXITS} times within "
                f"{QUICK_EXIT_S} s of starting (last exit code {code}); stopping."
            )
        self.stderr.write(
            f"The {child.name} exited (code {code}); starting it again, the "
            "others run on."
        )
        try:
            services.start(settings.KB_DATA_DIR)
        except services.ServiceError as exc:
            raise CommandError(str(exc))
        child.start()

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


class _Child:
    """A process kb_run runs, started again when it exits."""

    def __init__(self, name: str, command: list[str]) -> None:
        self.name, self.command = name, command
        self.quick_exits = 0
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.command)
        self.started = time.monotonic()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
