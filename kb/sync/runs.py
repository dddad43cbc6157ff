"""A sync run: the origin's files compared with the sources the sync made,
and each difference applied through the same paths as an upload.

- A new file becomes a source; a changed one a new version of its source,
  stored and indexed by the existing atomic publish (the old version answers
  until then; its vectors are reused where the text is unchanged).
- A renamed file (Git's diff, or the same content under a new path) keeps its
  source, renamed, so its citations and golden spans stay.
- A deleted file's source is deleted (KEEP: kept, and the log says so).
- Sources uploaded by hand are never changed or deleted: a synced file of the
  same name fails, with that reason.
- One failing file never stops the others; each is logged with its outcome.

One run of a sync at a time (a PostgreSQL advisory lock); a run killed
midway leaves its row "running", which the next run marks interrupted before
doing the work again: a file already stored is found unchanged, one stored
but not indexed is indexed, so nothing is duplicated or lost. A run whose
database connection is cut (PostgreSQL restarted) stops at once, its job
failing; the workers' look for lost jobs ends such a run, or one whose worker
died, as interrupted with the reason, and queues the sync again (end_lost). A
Valkey restart does not stop a run, which needs the queue only to start and
to end.
"""

from __future__ import annotations

import functools
import time
from urllib.parse import quote

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone
from django.utils.translation import gettext as _

from kb import deletion, ingestion, parsing, uploads
from kb.models import Source, SyncRun, SyncSource
from kb.sync import secrets
from kb.sync.origins import Entry, Folder, GitRepository, Listing, OriginError
from kb.sync.web import Website

# The fingerprint of a source kept after its file was deleted (keep mode).
GONE = "deleted at the origin"


class DatabaseLostError(RuntimeError):
    """A run's database connection was cut midway (its server restarted)."""


def origin_for(sync: SyncSource) -> Folder | GitRepository | Website:
    if sync.kind == SyncSource.Kind.FOLDER:
        return Folder(sync.location, sync.subfolder, sync.include, sync.exclude)
    if sync.kind == SyncSource.Kind.WEBSITE:
        synced = sync.sources.all()
        return Website(
            sync.location,
            sync.url_prefix,
            sync.page_limit,
            sync.include,
            sync.exclude,
            {s.file_name: s.sync_fingerprint for s in synced},
            functools.partial(_stored_page, sync),
        )
    return GitRepository(
        sync.location,
        sync.branch,
        sync.subfolder,
        sync.include,
        sync.exclude,
        sync.mirror_path(),
        sync.username,
        _unsealed(sync.token_sealed),
        _unsealed(sync.deploy_key_sealed),
    )


def _unsealed(sealed: str) -> str:
    try:
        return secrets.unseal(sealed)
    except secrets.SecretError as exc:
        raise OriginError(str(exc)) from None


def _stored_page(sync: SyncSource, name: str) -> bytes | None:
    """The page as last synced (a 304 sends none): its links are followed."""
    source = sync.sources.filter(file_name=name).first()
    if source is None or not source.file:
        return None
    with source.file.open("rb") as stored:
        return stored.read()


def states(collection) -> list[dict]:
    """Each sync source of the collection with its last run, its last success
    and whether it needs a look (its last run failed, or some files did): the
    collection's page and the dashboard show them."""
    found = []
    for sync in collection.sync_sources.order_by("name"):
        last, good = sync.last_run(), sync.last_success()
        found.append(
            {
                "sync": sync,
                "last": last,
                "success": good,
                "failed": len(last.failed) if last else 0,
                "attention": bool(
                    last
                    and (
                        last.status
                        in (SyncRun.Status.FAILED, SyncRun.Status.INTERRUPTED)
                        or last.failed
                    )
                ),
            }
        )
    return found


def behind(sync: SyncSource) -> int | None:
    """How many commits the origin's branch, as its last run saw it, is ahead
    of what the answers use (its last successful run's commit); None when
    not a Git sync or not known."""
    last, good = sync.last_run(), sync.last_success()
    if sync.kind != SyncSource.Kind.GIT or not (last and good):
        return None
    if not last.seen or not good.seen:
        return None
    if last.seen == good.seen:
        return 0
    from dulwich.repo import Repo

    try:
        with Repo(str(sync.mirror_path())) as repo:
            walker = repo.get_walker(
                include=[last.seen.encode()], exclude=[good.seen.encode()]
            )
            return sum(1 for _ in walker)
    except (OSError, KeyError, ValueError):
        return None


def folder_changes(sync: SyncSource) -> int | None:
    """How many files of a folder differ from what its sources hold: new ones,
    changed ones (size or modification time) and deleted ones (unless the sync
    keeps deleted files) since its last run; the next run looks at these.
    A listing only: no file is read. None when not a folder sync, never synced
    successfully, or the folder cannot be listed."""
    if sync.kind != SyncSource.Kind.FOLDER or sync.last_success() is None:
        return None
    try:
        listing = origin_for(sync).listing()
    except (OriginError, OSError):
        return None
    synced = dict(sync.sources.values_list("file_name", "sync_fingerprint"))
    # A file whose name a hand upload holds is never synced: not counted.
    by_hand = set(
        Source.objects.filter(
            collection=sync.collection,
            sync_source__isnull=True,
            file_name__in=[p for p in listing.entries if p not in synced],
        ).values_list("file_name", flat=True)
    )
    changed = sum(
        1
        for path, entry in listing.entries.items()
        if synced.get(path) != entry.fingerprint and path not in by_hand
    )
    deleted = 0 if sync.keep_deleted else len(synced.keys() - listing.entries.keys())
    return changed + deleted


def queue(sync: SyncSource) -> SyncRun:
    """A new run of the sync, queued for a worker (kb.jobs.sync_run)."""
    from kb import queueing

    run = SyncRun.objects.create(sync_source=sync)
    queueing.enqueue_sync(run)
    return run


def end_lost(run: SyncRun, why: str) -> bool:
    """End a run whose job was lost (kb.recovery: its worker died, or its job
    failed as the database restarted) as interrupted, with why, and queue its
    sync again: the new run finds what the lost one stored, indexes what it
    left unindexed and does the rest. Not again when the run before it was
    interrupted too: a run that dies each time (a file that kills its worker)
    waits for an editor. False when the run moved on meanwhile, or while the
    sync's lock is held: a run is working (one done outside a worker, as
    kb_bench's, has no job)."""
    sync = run.sync_source
    with _Lock(sync) as free:
        if not free:
            return False
        before = sync.runs.filter(pk__lt=run.pk).order_by("-pk").first()
        again = before is None or before.status != SyncRun.Status.INTERRUPTED
        ended = SyncRun.objects.filter(pk=run.pk, status=run.status).update(
            status=SyncRun.Status.INTERRUPTED,
            error=_lost_error(why, again),
            finished=timezone.now(),
        )
    if ended and again:
        queue(sync)
    return bool(ended)


def _lost_error(why: str, again: bool) -> str:
    if again:
        text = _("Not finished: %(why)s. A new run was queued to finish the work.")
    else:
        text = _(
            "Not finished: %(why)s. The run before it was interrupted too, so no "
            "new run was queued: sync it again once the cause is found."
        )
    return text % {"why": why}


def execute(run_id: int) -> SyncRun:
    """Do the run (in a worker); the run's row says what happened."""
    run = SyncRun.objects.select_related("sync_source__collection").get(pk=run_id)
    sync = run.sync_source
    with _Lock(sync) as held:
        if not held:
            run.status, run.error = (
                SyncRun.Status.FAILED,
                _("Another run of this sync was under way; this one did nothing."),
            )
            run.finished = timezone.now()
            run.save()
            return run
        # Holding the lock, any other run still "running" was killed midway.
        sync.runs.filter(status=SyncRun.Status.RUNNING).exclude(pk=run.pk).update(
            status=SyncRun.Status.INTERRUPTED,
            finished=timezone.now(),
            error=_(
                "Not finished: its worker stopped midway (killed or restarted). "
                "Run #%(run)d took over the work."
            )
            % {"run": run.pk},
        )
        return _run(run, sync)


class _Lock:
    """The sync's advisory lock, held by this session while a run works."""

    def __init__(self, sync: SyncSource):
        self.key = f"kb-sync:{sync.pk}"
        self.held = False

    def __enter__(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [self.key]
            )
            self.held = bool(cursor.fetchone()[0])
        return self.held

    def __exit__(self, *exc) -> None:
        if not self.held:
            return
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [self.key]
                )
        except (InterfaceError, OperationalError):
            # Its session is gone (the server restarted), and the lock with it;
            # a live session's goes as the worker closes it after the job.
            pass


def _run(run: SyncRun, sync: SyncSource) -> SyncRun:
    started = time.perf_counter()
    run.status, run.started = SyncRun.Status.RUNNING, timezone.now()
    run.save()
    try:
        origin = origin_for(sync)
        listing = (
            origin.listing(sync.seen)
            if isinstance(origin, GitRepository)
            else origin.listing()
        )
        run.seen = listing.seen  # what the origin is at, even if the run fails
        _check_file_count(listing, sync.kind)
        _apply(run, sync, origin, listing, started)
    except OriginError as exc:
        run.status, run.error = SyncRun.Status.FAILED, str(exc)
    else:
        if listing.seen:
            SyncSource.objects.filter(pk=sync.pk).update(seen=listing.seen)
        run.seen = listing.seen
        run.status = SyncRun.Status.PARTIAL if run.failed else SyncRun.Status.DONE
    run.seconds = time.perf_counter() - started
    run.finished = timezone.now()
    run.save()
    return run


def _check_file_count(listing: Listing, kind: str) -> None:
    limit = settings.KB_SYNC_MAX_FILES
    if len(listing.entries) > limit:
        if kind == SyncSource.Kind.WEBSITE:
            narrow = _("Narrow it with a URL prefix, patterns or a page limit.")
        else:
            narrow = _("Narrow it with a sub-folder or patterns.")
        raise OriginError(
            _(
                "The origin has %(count)d files to sync; a sync takes at most "
                "%(limit)d (KB_SYNC_MAX_FILES)."
            )
            % {"count": len(listing.entries), "limit": limit}
            + " "
            + narrow
        )


class _Budget:
    """The run's byte and time limits (KB_SYNC_MAX_BYTES, KB_SYNC_MAX_SECONDS):
    files past either are left for the next run, each with the reason."""

    def __init__(self, started: float):
        self.started, self.bytes = started, 0

    def refusal(self) -> str:
        if time.perf_counter() - self.started > settings.KB_SYNC_MAX_SECONDS:
            return _(
                "not synced: the run reached its time limit (KB_SYNC_MAX_SECONDS); "
                "the next run takes it"
            )
        if self.bytes > settings.KB_SYNC_MAX_BYTES:
            return _(
                "not synced: the run read its byte limit (KB_SYNC_MAX_BYTES); "
                "the next run takes it"
            )
        return ""


def _apply(run, sync, origin, listing: Listing, started: float) -> None:
    collection = sync.collection
    mine = {s.file_name: s for s in Source.objects.filter(sync_source=sync)}
    by_hand = set(
        Source.objects.filter(collection=collection, sync_source__isnull=True)
        .filter(file_name__in=list(listing.entries))
        .values_list("file_name", flat=True)
    )
    for path, why in listing.refused:
        _failed(run, path, why)
    gone = {
        path: s
        for path, s in mine.items()
        if path not in listing.entries and path not in listing.kept
    }
    renamed = _renames(listing, gone, mine)
    if isinstance(origin, Folder):
        renamed.update(_moved_files(origin, listing, gone, mine, renamed))
    budget = _Budget(started)
    for path in sorted(listing.entries):
        entry = listing.entries[path]
        if path in by_hand:
            _failed(run, path, _("a source of this name was uploaded by hand"))
            continue
        if why := budget.refusal():
            _failed(run, path, why)
            continue
        old_path = renamed.get(path)
        source = mine.get(path) or (gone.pop(old_path) if old_path else None)
        try:
            _sync_file(run, sync, origin, listing, entry, source, old_path, budget)
        except (ingestion.IngestionError, parsing.ParseError, OSError) as exc:
            _failed(run, path, str(exc))
        except Exception as exc:  # one failing file never stops the rest...
            _check_connection(path, exc)  # ...but a lost database does
            _failed(run, path, _("internal error: %(error)s") % {"error": exc})
    for path, source in sorted(gone.items()):
        if sync.keep_deleted and source.sync_fingerprint == GONE:
            continue  # kept by an earlier run, which counted it
        run.deleted += 1
        if sync.keep_deleted:
            # Marked, so later runs do not count it again; if the file comes
            # back, its fingerprint differs and it is read as a change.
            Source.objects.filter(pk=source.pk).update(sync_fingerprint=GONE)
            _log(run, path, "deleted at the origin, kept")
        else:
            deletion.delete_sources(Source.objects.filter(pk=source.pk))
            _log(run, path, "deleted at the origin, removed")


def _check_connection(path: str, exc: Exception) -> None:
    """Raise DatabaseLostError when the run's database connection is gone
    (`exc` was the sign): the run can record nothing more, and its lock went
    with its session; end_lost takes over."""
    if not connection.is_usable():
        raise DatabaseLostError(
            _(
                "the connection to the database was lost at %(path)s (its "
                "server restarted or stopped)"
            )
            % {"path": path}
        ) from exc


def _renames(
    listing: Listing, gone: dict[str, Source], mine: dict[str, Source]
) -> dict[str, str]:
    """new path -> old path: Git's renames, then files of identical content
    under a new path (the blob id for Git, unknown for a folder). Only a path
    no source has yet can be where a gone one went: a file left in place with
    the same content as a deleted one is that file, not a rename."""
    new_paths = {path for path in listing.entries if path not in mine}
    found = {
        new: old
        for old, new in listing.renames.items()
        if old in gone and new in new_paths
    }
    by_print = {s.sync_fingerprint: path for path, s in gone.items()}
    for path in sorted(new_paths):
        entry = listing.entries[path]
        old = by_print.get(entry.fingerprint)
        if old and path not in found and old not in found.values():
            if ":" not in entry.fingerprint:  # a blob id names the content
                found[path] = old
    return found


def _moved_files(
    origin: Folder,
    listing: Listing,
    gone: dict[str, Source],
    mine: dict[str, Source],
    found: dict[str, str],
) -> dict[str, str]:
    """new path -> old path for a folder: a new file of the size of a gone
    source whose content hashes as that source's did was moved there (a
    folder keeps no history). Only new files of such a size are read."""
    sizes: dict[int, list[Source]] = {}
    for source in gone.values():
        size, _, _ = source.sync_fingerprint.partition(":")
        if size.isdigit() and source.file_name not in found.values():
            sizes.setdefault(int(size), []).append(source)
    moved: dict[str, str] = {}
    for path in sorted(p for p in listing.entries if p not in mine and p not in found):
        entry = listing.entries[path]
        candidates = [
            s for s in sizes.get(entry.size, []) if s.file_name not in moved.values()
        ]
        if not candidates:
            continue
        try:
            digest = uploads.digest_of(uploads.check_upload(path, origin.read(entry)))
        except (ingestion.IngestionError, parsing.ParseError, OSError):
            continue  # it fails again, with its reason, when synced
        for source in candidates:
            if source.content_hash == digest:
                moved[path] = source.file_name
                break
    return moved


def _sync_file(
    run, sync, origin, listing: Listing, entry: Entry, source, old_path, budget
) -> None:
    path = entry.path
    if source is not None and old_path:
        _rename(source, path)
        run.renamed += 1
        _log(run, path, "renamed", was=old_path)
        if source.sync_fingerprint == entry.fingerprint:
            _link(source, _metadata(sync, origin, listing, path), renamed=True)
            return
    elif source is not None and source.sync_fingerprint == entry.fingerprint:
        run.unchanged += 1
        _link(source, _metadata(sync, origin, listing, path), renamed=False)
        _index_if_pending(run, source)
        return
    data = origin.read(entry)
    budget.bytes += len(data)
    with uploads.storing():
        stored, outcome = uploads.store_source(
            sync.collection,
            path,
            data,
            metadata=_metadata(sync, origin, listing, path),
            from_sync=True,
        )
        Source.objects.filter(pk=stored.pk).update(
            sync_source=sync, sync_fingerprint=entry.fingerprint
        )
    if outcome == "unchanged":
        if not old_path:
            run.unchanged += 1
        _index_if_pending(run, stored)
        return
    if not old_path:
        if outcome == "created":
            run.added += 1
        else:
            run.changed += 1
    _index(run, stored, "added" if outcome == "created" else "changed")


def _metadata(sync: SyncSource, origin, listing: Listing, path: str) -> dict:
    """The file's address at its origin, for citations to link to (answering.
    add_originals): a web page's own, or a repository file's web view at the
    commit synced, from the sync's link template."""
    if isinstance(origin, Website):
        return {"url": origin.urls[path]} if path in origin.urls else {}
    if sync.kind == SyncSource.Kind.GIT and sync.link_template and listing.seen:
        full = f"{sync.subfolder.strip('/')}/{path}".lstrip("/")
        url = sync.link_template.replace("{commit}", listing.seen)
        return {"url": url.replace("{path}", quote(full))}
    return {}


def _link(source: Source, metadata: dict, *, renamed: bool) -> None:
    """Give an unchanged file the origin link it lacks (a link template set
    after it was synced), or a renamed one its new path's, in place as a
    rename is: the link is returned with answers, not embedded (its default
    policy). An unchanged file keeps the link of the commit it was synced at,
    which still shows it."""
    wanted, have = metadata.get("url"), source.metadata.get("url")
    if wanted and wanted != have and (renamed or not have):
        source.metadata = {**source.metadata, "url": wanted}
        Source.objects.filter(pk=source.pk).update(metadata=source.metadata)


def _rename(source: Source, path: str) -> None:
    Source.objects.filter(pk=source.pk).update(file_name=path)
    source.file_name = path


def _index_if_pending(run, source: Source) -> None:
    """A source stored by a run that was killed before it was indexed."""
    source.refresh_from_db(fields=["status", "version", "indexed_version", "error"])
    if source.status == Source.Status.FAILED:
        _failed(run, source.file_name, source.error)
    elif source.indexed_version != source.version:
        _index(run, source, "indexed")


def _index(run, source: Source, outcome: str) -> None:
    """Index the stored version here, in the sync's worker."""
    try:
        ingestion.ingest(source.pk, source.version)
    except Exception:  # recorded on the source by ingest(); said below
        pass
    source.refresh_from_db(fields=["stats", "status", "error"])
    if source.status == Source.Status.FAILED:
        _failed(run, source.file_name, source.error)
        return
    run.chunks_embedded += source.stats.get("chunks_embedded", 0)
    run.chunks_reused += source.stats.get("chunks_reused", 0)
    _log(run, source.file_name, outcome, chunks=source.stats.get("chunks", 0))


def _failed(run, path: str, reason: str) -> None:
    run.failed = [*run.failed, {"path": path, "reason": reason}]
    _log(run, path, "failed", reason=reason)


def _log(run, path: str, outcome: str, **more) -> None:
    run.log = [*run.log, {"path": path, "outcome": outcome, **more}]
