"""`manage.py kb_sync add|run|list`: sync sources from the shell (issue #30)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from kb.models import Collection, SyncRun, SyncSource
from kb.sync import runs, schedule, secrets
from kb.sync.origins import OriginError, check_location


class Command(BaseCommand):
    help = (
        "Sync sources: documents kept in step with a Git repository, a folder "
        "on the server or a website. `add` one, `run` one (queued for the "
        "workers; with --wait or --json, the exit status is 1 when the run failed "
        "or was interrupted), `list` them."
    )

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        add = commands.add_parser("add", help="add a sync source")
        add.add_argument("name", help="a short name (letters, digits, - and _)")
        add.add_argument("--collection", required=True, help="created if missing")
        origin = add.add_mutually_exclusive_group(required=True)
        origin.add_argument(
            "--git", metavar="URL", help="https or ssh URL, or a local path"
        )
        origin.add_argument("--folder", metavar="PATH", help="under KB_SYNC_ROOTS")
        origin.add_argument(
            "--site", metavar="URL", help="a start page or a sitemap.xml"
        )
        add.add_argument("--branch", default="", help="Git branch (default: main)")
        add.add_argument("--path", default="", help="only this sub-folder")
        add.add_argument(
            "--username", default="", help="Git over https: the token's user name"
        )
        add.add_argument(
            "--token-env",
            default="",
            metavar="VAR",
            help="Git over https: read the access token from the environment "
            "variable VAR (not the command line, which others can see); stored "
            "encrypted",
        )
        add.add_argument(
            "--deploy-key",
            default="",
            metavar="FILE",
            help="Git over SSH: the private key file of a deploy key (no "
            "passphrase); stored encrypted, its public line printed",
        )
        add.add_argument(
            "--prefix",
            default="",
            metavar="URL",
            help="website: sync only pages under this address",
        )
        add.add_argument(
            "--pages",
            type=int,
            default=500,
            metavar="N",
            help="website: pages a run visits at most (default %(default)s)",
        )
        add.add_argument(
            "--include",
            action="append",
            default=[],
            metavar="GLOB",
            help="take only matching paths ('docs/*.md'); repeatable",
        )
        add.add_argument(
            "--exclude",
            action="append",
            default=[],
            metavar="GLOB",
            help="leave matching paths out; repeatable",
        )
        add.add_argument(
            "--every",
            type=int,
            default=0,
            metavar="MINUTES",
            help="sync every MINUTES minutes (default 0: only when run)",
        )
        add.add_argument(
            "--keep-deleted",
            action="store_true",
            help="keep the sources of files deleted at the origin",
        )
        run = commands.add_parser("run", help="queue a run of a sync source")
        run.add_argument("name")
        run.add_argument(
            "--wait", action="store_true", help="wait for a worker to finish it"
        )
        run.add_argument(
            "--json",
            action="store_true",
            help="wait, then print its figures as one JSON object",
        )
        run.add_argument(
            "--timeout",
            type=float,
            default=3600,
            metavar="SECONDS",
            help="how long --wait waits (default %(default)s)",
        )
        commands.add_parser("list", help="each sync source, its last run, freshness")

    def handle(self, *args, **options):
        getattr(self, f"_{options['command']}")(options)

    def _add(self, options) -> None:
        name = options["name"]
        if SyncSource.objects.filter(name=name).exists():
            raise CommandError(f"A sync source named {name} exists already.")
        kind = (
            SyncSource.Kind.GIT
            if options["git"]
            else SyncSource.Kind.WEBSITE
            if options["site"]
            else SyncSource.Kind.FOLDER
        )
        location = options["git"] or options["site"] or options["folder"]
        try:
            check_location(kind, location)
        except OriginError as exc:
            raise CommandError(str(exc)) from exc
        if options["every"] < 0:
            raise CommandError("--every takes minutes, 0 or more.")
        sync = SyncSource(
            name=name,
            kind=kind,
            location=location,
            branch=options["branch"],
            subfolder=options["path"],
            include="\n".join(options["include"]),
            exclude="\n".join(options["exclude"]),
            url_prefix=options["prefix"],
            page_limit=options["pages"],
            every_minutes=options["every"],
            keep_deleted=options["keep_deleted"],
        )
        try:
            sync.full_clean(exclude=["collection"])
        except ValidationError as exc:
            problems = "; ".join(
                f"{field}: {' '.join(messages)}"
                for field, messages in exc.message_dict.items()
            )
            raise CommandError(f"The sync source is refused: {problems}") from exc
        if variable := options["token_env"]:
            token = os.environ.get(variable, "")
            if not token:
                raise CommandError(f"The environment variable {variable} is empty.")
            sync.token_sealed = secrets.seal(token)
        if path := options["deploy_key"]:
            try:
                key = Path(path).read_text(encoding="utf-8")
                sync.deploy_key_public = secrets.deploy_key_public(key)
            except (OSError, UnicodeDecodeError) as exc:
                raise CommandError(f"The deploy key cannot be read: {exc}") from exc
            except secrets.SecretError as exc:
                raise CommandError(str(exc)) from exc
            sync.deploy_key_sealed = secrets.seal(key)
        sync.username = options["username"]
        with transaction.atomic():
            sync.collection, _ = Collection.objects.get_or_create(
                name=options["collection"]
            )
            sync.save()
        self.stdout.write(f"Added sync source {name} ({kind}) -> {sync.collection}")
        if sync.deploy_key_public:
            self.stdout.write(
                "Add this public key to the repository's deploy keys (read "
                f"only):\n{sync.deploy_key_public}"
            )

    def _run(self, options) -> None:
        sync = self._named(options["name"])
        run = runs.queue(sync)
        if not (options["wait"] or options["json"]):
            self.stdout.write(f"Queued run {run.pk} of {sync.name}")
            return
        deadline = time.monotonic() + options["timeout"]
        while run.status in schedule.ACTIVE:
            if time.monotonic() > deadline:
                raise CommandError(
                    f"Run {run.pk} did not finish in {options['timeout']:.0f} s "
                    "(is a worker running? `make run` starts two)."
                )
            time.sleep(0.5)
            run.refresh_from_db()
        if options["json"]:
            self.stdout.write(json.dumps(run.as_json(), ensure_ascii=False))
        else:
            self.stdout.write(_summary(run))
        if run.status in (SyncRun.Status.FAILED, SyncRun.Status.INTERRUPTED):
            # Scripts tell a failed run by the exit status.
            raise CommandError(f"Run {run.pk} of {sync.name} {run.status}: {run.error}")

    def _list(self, options) -> None:
        rows = SyncSource.objects.select_related("collection")
        if not rows:
            self.stdout.write("No sync sources.")
            return
        for sync in rows:
            last, good = sync.last_run(), sync.last_success()
            every = (
                f"every {sync.every_minutes} min" if sync.every_minutes else "manual"
            )
            self.stdout.write(
                f"{sync.name}: {sync.kind} {sync.location} -> {sync.collection} "
                f"({every})"
            )
            self.stdout.write(
                "  last run: "
                + (f"{last.status} {_ago(last.started)}" if last else "never")
                + "; last success: "
                + (f"{_ago(good.started)}" if good else "never")
                + (f"; at {_seen(sync, good.seen)}" if good and good.seen else "")
            )
            if commits := runs.behind(sync):
                self.stdout.write(
                    f"  the origin is {commits} commit(s) ahead of what answers use"
                )
            if files := runs.folder_changes(sync):
                self.stdout.write(
                    f"  {files} file(s) in the folder changed since the last run"
                )
            if last and last.error:
                self.stdout.write(f"  error: {last.error}")
            for failure in (last.failed if last else [])[:5]:
                self.stdout.write(f"  failed: {failure['path']}: {failure['reason']}")

    @staticmethod
    def _named(name: str) -> SyncSource:
        try:
            return SyncSource.objects.select_related("collection").get(name=name)
        except SyncSource.DoesNotExist:
            raise CommandError(f"No sync source named {name}.") from None


def _summary(run: SyncRun) -> str:
    figures = run.as_json()
    lines = [
        f"Run {run.pk}: {run.status} in {figures['seconds']:.1f} s"
        + (f" at {run.seen[:12]}" if run.seen else ""),
        "  "
        + ", ".join(
            f"{figures[key]} {key}"
            for key in ("added", "changed", "renamed", "deleted", "unchanged")
        )
        + f"; chunks embedded {run.chunks_embedded}, reused {run.chunks_reused}",
    ]
    if run.error:
        lines.append(f"  error: {run.error}")
    lines += [f"  failed: {f['path']}: {f['reason']}" for f in run.failed]
    return "\n".join(lines)


def _ago(when) -> str:
    minutes = int((timezone.now() - when).total_seconds() // 60)
    if minutes < 1:
        return "just now"
    if minutes < 120:
        return f"{minutes} min ago"
    return f"{minutes // 60} h ago"


def _seen(sync: SyncSource, seen: str) -> str:
    """A Git commit shortened, as Git shows it; a site's page or sitemap whole."""
    return seen[:12] if sync.kind == SyncSource.Kind.GIT else seen
