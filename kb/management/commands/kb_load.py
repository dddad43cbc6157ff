"""Drive POST /api/ask at rising concurrency and print throughput and latency."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb import access
from kb.benchmarks import load
from kb.models import ApiToken

DEMO_QUESTIONS = Path(settings.BASE_DIR) / "kb" / "demo" / "golden.jsonl"


class Command(BaseCommand):
    help = (
        "Load test: ask questions through POST /api/ask with 1, 4, 16 and 32 "
        "concurrent clients for a fixed time each and print requests per second, "
        "p50/p95/p99 latency and errors per level. Against --url with --token, or "
        "against gunicorn started here on a free loopback port (--workers) with a "
        "temporary token for --user."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", help="a running server, e.g. http://kb:8000")
        parser.add_argument("--token", help="API token for --url (kb_token)")
        parser.add_argument(
            "--workers",
            type=int,
            default=2,
            help="gunicorn workers when no --url is given (default: %(default)s)",
        )
        parser.add_argument(
            "--user",
            help="staff user the temporary token acts as (default: the first "
            "active superuser)",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            nargs="+",
            default=list(load.LEVELS),
            help="levels (default: %(default)s)",
        )
        parser.add_argument(
            "--seconds",
            type=float,
            default=10.0,
            help="per level (default: %(default)s)",
        )
        parser.add_argument("--collection", default="Demo")
        parser.add_argument(
            "--questions",
            type=Path,
            default=DEMO_QUESTIONS,
            help='JSON Lines with a "question" per line (default: the demo\'s '
            "golden cases)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if min(options["concurrency"]) < 1 or options["seconds"] <= 0:
            raise CommandError("Concurrency levels and seconds must be positive.")
        if options["url"] and not options["token"]:
            raise CommandError("--url needs --token (manage.py kb_token USERNAME).")
        try:
            questions = load.read_questions(options["questions"])
            if options["url"]:
                levels = self._run(options["url"], options["token"], questions, options)
            else:
                levels = self._run_gunicorn(questions, options)
        except (load.LoadError, OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        where = options["url"] or f"gunicorn, {options['workers']} workers"
        self.stdout.write(
            f"kb_load, {time.strftime('%Y-%m-%d %H:%M %Z')}, {where}, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
            f"{len(questions)} questions, collection {options['collection']}\n"
        )
        self.stdout.write(load.table(levels))

    def _run(self, url: str, token: str, questions, options) -> list[load.Level]:
        return load.run(
            url,
            token,
            questions,
            options["collection"],
            options["concurrency"],
            options["seconds"],
            progress=lambda line: self.stderr.write(line),
        )

    def _run_gunicorn(self, questions, options) -> list[load.Level]:
        user = self._user(options["user"])
        name = f"kb_load {time.strftime('%Y-%m-%d %H:%M:%S')}"
        token = access.create_token(user, name)
        log = Path(settings.KB_DATA_DIR) / "bench" / "kb_load-gunicorn.log"
        try:
            with load.gunicorn(options["workers"], log) as url:
                return self._run(url, token, questions, options)
        finally:
            ApiToken.objects.filter(user=user, name=name).delete()

    def _user(self, username: str | None):
        users = get_user_model().objects.filter(is_active=True, is_staff=True)
        if username:
            user = users.filter(username=username).first()
        else:
            user = users.filter(is_superuser=True).order_by("pk").first()
        if user is None:
            raise CommandError(
                f"No active staff user {username!r}."
                if username
                else "No active superuser: give --user or create one (kb_setup)."
            )
        return user
