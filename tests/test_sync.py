"""Sync sources (issue #30): a folder on the server and Git repositories (a
local bare one, and one served over HTTP on loopback), made in the test and
synced for real: real files, real Git objects, the real database and embedder."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from io import StringIO
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import TestCase, TransactionTestCase, override_settings
from django.urls import reverse

from kb.benchmarks.sync import GitOrigin
from kb.models import Collection, Source, SyncRun, SyncSource
from kb.sync import runs
from tests.base import (
    environment,
    forget_jobs,
    ingest_text,
    make_users,
    run_burst_worker,
)
from tests.syncing import DOCS, context, git_form, names, run_now, sync_of, write


class FolderSyncTestCase(TestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp(prefix="kb-sync-"))
        self.addCleanup(_remove, self.root)
        self.folder = self.root / "handbook"
        write(self.folder, DOCS)
        self.enterContext(override_settings(KB_SYNC_ROOTS=[str(self.root)]))

    def test_a_folder_kept_in_step(self):
        sync = sync_of("folder", str(self.folder))
        run = run_now(sync)
        self.assertEqual(run.status, SyncRun.Status.DONE, run.error)
        self.assertEqual(run.added, 4)  # the PNG is no format kb reads
        self.assertEqual(
            names(sync),
            {
                "guide/backups.md",
                "guide/restores.md",
                "guide/network.md",
                "notes/todo.txt",
            },
        )
        self.assertGreater(run.chunks_embedded, 0)
        self.assertTrue(all(s.status == "indexed" for s in sync.sources.all()))

        # Nothing changed: nothing read, parsed or embedded.
        again = run_now(sync)
        self.assertEqual((again.unchanged, again.added, again.changed), (4, 0, 0))
        self.assertEqual(again.chunks_embedded, 0)

        # A file touched but not changed is read, found the same, not indexed.
        os.utime(self.folder / "guide/network.md", ns=(1, 10**18))
        touched = run_now(sync)
        self.assertEqual((touched.unchanged, touched.changed), (4, 0))
        self.assertEqual(touched.chunks_embedded, 0)

        # An edit, a new file and a deletion.
        write(
            self.folder,
            {
                "guide/backups.md": DOCS["guide/backups.md"].replace(
                    "35 days", "90 days"
                )
            },
        )
        write(
            self.folder,
            {
                "guide/printers.md": "# Printers\n\nThe printer on "
                "the third floor needs badge release.\n"
            },
        )
        (self.folder / "notes/todo.txt").unlink()
        third = run_now(sync)
        self.assertEqual(
            (third.added, third.changed, third.deleted, third.unchanged), (1, 1, 1, 2)
        )
        self.assertEqual(third.chunks_embedded, 2)  # the edited and the new one
        self.assertNotIn("notes/todo.txt", names(sync))
        self.assertIn("90 days", context(sync.collection, "How long are backups kept?"))
        self.assertNotIn("label printer", context(sync.collection, "label printer"))
        outcomes = {(e["path"], e["outcome"]) for e in third.log}
        self.assertIn(("notes/todo.txt", "deleted at the origin, removed"), outcomes)

    def test_a_moved_file_keeps_its_source(self):
        sync = sync_of("folder", str(self.folder))
        run_now(sync)
        before = sync.sources.get(file_name="guide/restores.md")
        # Moved (its modification time kept), and copied then deleted (a new one).
        (self.folder / "runbooks").mkdir()
        os.rename(
            self.folder / "guide/restores.md", self.folder / "runbooks/restores.md"
        )
        copy = (self.folder / "guide/network.md").read_bytes()
        (self.folder / "guide/network.md").unlink()
        (self.folder / "runbooks/vpn.md").write_bytes(copy)
        run = run_now(sync)
        self.assertEqual(
            (run.renamed, run.added, run.deleted, run.chunks_embedded), (2, 0, 0, 0)
        )
        moved = sync.sources.get(file_name="runbooks/restores.md")
        self.assertEqual((moved.pk, moved.status), (before.pk, "indexed"))
        self.assertIn(
            {
                "path": "runbooks/vpn.md",
                "outcome": "renamed",
                "was": "guide/network.md",
            },
            run.log,
        )
        # A new file that only shares a size with a gone one is new.
        (self.folder / "notes/todo.txt").unlink()
        write(
            self.folder,
            {"notes/tada.txt": "Buy a label printer for the server rooM.\n"},
        )
        run = run_now(sync)
        self.assertEqual((run.renamed, run.added, run.deleted), (0, 1, 1))

    def test_keep_mode_keeps_deleted_files(self):
        sync = sync_of("folder", str(self.folder), keep_deleted=True)
        run_now(sync)
        (self.folder / "notes/todo.txt").unlink()
        run = run_now(sync)
        self.assertEqual(run.deleted, 1)
        self.assertIn("notes/todo.txt", names(sync))
        self.assertIn(
            {"path": "notes/todo.txt", "outcome": "deleted at the origin, kept"},
            run.log,
        )
        # Counted once: later runs have nothing new to say of it.
        later = run_now(sync)
        self.assertEqual((later.deleted, later.unchanged), (0, 3))
        self.assertIn("notes/todo.txt", names(sync))
        # Back at the origin, as it was: read, found the same, synced again.
        write(self.folder, {"notes/todo.txt": DOCS["notes/todo.txt"]})
        back = run_now(sync)
        self.assertEqual((back.deleted, back.unchanged, back.added), (0, 4, 0))
        self.assertEqual(run_now(sync).unchanged, 4)

    def test_sources_uploaded_by_hand_are_never_touched(self):
        collection = Collection.objects.create(name="Mixed")
        mine = ingest_text(collection, "guide/backups.md", "# Mine\n\nMy own text.\n")
        other = ingest_text(collection, "elsewhere.md", "# Other\n\nUploaded.\n")
        sync = sync_of("folder", str(self.folder), collection)
        run = run_now(sync)
        self.assertEqual(run.status, SyncRun.Status.PARTIAL)
        self.assertIn(
            {
                "path": "guide/backups.md",
                "reason": "a source of this name was uploaded by hand",
            },
            run.failed,
        )
        mine.refresh_from_db()
        self.assertIn("My own text", mine.text)
        self.assertIsNone(mine.sync_source)
        run_now(sync)  # and a later run deletes nothing of theirs
        self.assertTrue(Source.objects.filter(pk=other.pk).exists())
        self.assertTrue(Source.objects.filter(pk=mine.pk).exists())
        # The file it never syncs is not "changed since" forever either.
        self.assertEqual(runs.folder_changes(sync), 0)

    def test_a_synced_source_takes_no_upload_by_hand(self):
        """An upload over a synced file would be overwritten by the next sync,
        or answer with text its origin does not hold: refused, saying where
        to change it, in the shell and in the admin."""
        write(self.folder, {"policy.md": "# Policy\n\nAsk before you travel.\n"})
        sync = sync_of("folder", str(self.folder))
        run_now(sync)
        backups = sync.sources.get(file_name="guide/backups.md")
        policy = sync.sources.get(file_name="policy.md")
        hand = self.root / "hand" / "guide" / "backups.md"
        hand.parent.mkdir(parents=True)
        hand.write_text("# Backups\n\nHAND VERSION: kept forever.\n")
        err = StringIO()
        with self.assertRaises(CommandError):
            call_command(
                "kb_ingest",
                str(self.root / "hand"),
                "--collection",
                sync.collection.name,
                stdout=StringIO(),
                stderr=err,
            )
        self.assertIn(
            f"guide/backups.md is kept in step by the sync source {sync.name}: "
            "change it at its origin",
            err.getvalue(),
        )
        staff, _, _ = make_users()
        self.client.force_login(staff)
        page = self.client.post(
            reverse("admin:kb_source_upload"),
            {
                "collection": sync.collection.pk,
                "files": [  # a browser sends a file's name, not its folder
                    SimpleUploadedFile("policy.md", b"# Policy\n\nHAND VERSION.\n"),
                    SimpleUploadedFile("extra.md", b"# Extra\n\nHand notes.\n"),
                ],
            },
            follow=True,
        )
        self.assertContains(
            page,
            f"Not stored: policy.md is kept in step by the sync source {sync.name}",
        )
        self.assertTrue(Source.objects.filter(file_name="extra.md").exists())
        for source in (backups, policy):
            source.refresh_from_db()
            self.assertEqual(source.version, 1)
            self.assertNotIn("HAND VERSION", source.text)
        # The sync itself still brings the origin's changes.
        write(self.folder, {"guide/backups.md": "# Backups\n\nKept 90 days.\n"})
        self.assertEqual(run_now(sync).changed, 1)

    def test_how_many_folder_files_answers_do_not_hold_yet(self):
        sync = sync_of("folder", str(self.folder))
        self.assertIsNone(runs.folder_changes(sync))  # never synced
        run_now(sync)
        self.assertEqual(runs.folder_changes(sync), 0)
        # An edit, a new file and a deletion: three files not synced yet.
        write(self.folder, {"guide/backups.md": "# Backups\n\nKept 90 days.\n"})
        write(self.folder, {"guide/printers.md": "# Printers\n\nBadge release.\n"})
        (self.folder / "notes/todo.txt").unlink()
        self.assertEqual(runs.folder_changes(sync), 3)
        staff, _, _ = make_users()
        self.client.force_login(staff)
        page = self.client.get(reverse("admin:kb_syncsource_change", args=[sync.pk]))
        self.assertContains(
            page, "3 files in the folder changed since, not synced yet."
        )
        out = StringIO()
        call_command("kb_sync", "list", stdout=out)
        self.assertIn(
            "3 file(s) in the folder changed since the last run", out.getvalue()
        )
        run_now(sync)
        self.assertEqual(runs.folder_changes(sync), 0)
        # A sync that keeps deleted files does not count them.
        (self.folder / "guide/printers.md").unlink()
        self.assertEqual(runs.folder_changes(sync), 1)
        sync.keep_deleted = True
        sync.save()
        self.assertEqual(runs.folder_changes(sync), 0)

    def test_include_exclude_and_subfolder(self):
        sync = sync_of(
            "folder",
            str(self.folder),
            subfolder="guide",
            include="*.md",
            exclude="*/network.md\nnetwork.md",
        )
        run_now(sync)
        self.assertEqual(names(sync), {"backups.md", "restores.md"})

    def test_only_under_the_allowed_roots(self):
        outside = Path(tempfile.mkdtemp(prefix="kb-outside-"))
        self.addCleanup(_remove, outside)
        write(outside, {"secret.md": "# Secret\n\nThe root password.\n"})
        for location in (str(outside), f"{self.folder}/../../{outside.name}"):
            with self.subTest(location):
                run = run_now(sync_of("folder", location))
                self.assertEqual(run.status, SyncRun.Status.FAILED)
                self.assertFalse(Source.objects.filter(file_name="secret.md"))
        with override_settings(KB_SYNC_ROOTS=[]):
            run = run_now(sync_of("folder", str(self.folder)))
        self.assertIn("KB_SYNC_ROOTS is not set", run.error)

    def test_links_out_of_the_folder_are_not_followed(self):
        outside = Path(tempfile.mkdtemp(prefix="kb-outside-"))
        self.addCleanup(_remove, outside)
        write(outside, {"secret.md": "# Secret\n\nThe root password is hunter2.\n"})
        os.symlink(outside / "secret.md", self.folder / "guide/linked.md")
        os.symlink(outside, self.folder / "elsewhere")
        os.symlink(self.folder / "guide/network.md", self.folder / "guide/inside.md")
        sync = sync_of("folder", str(self.folder))
        run = run_now(sync)
        reasons = {f["path"]: f["reason"] for f in run.failed}
        self.assertEqual(
            reasons["guide/linked.md"], "a link to a file outside the synced folder"
        )
        self.assertIn("elsewhere", reasons)
        self.assertIn("guide/inside.md", names(sync))  # a link within is a file
        self.assertFalse(Source.objects.filter(text__contains="hunter2").exists())

    def test_limits_per_run_say_so(self):
        with override_settings(KB_SYNC_MAX_FILES=2):
            run = run_now(sync_of("folder", str(self.folder)))
        self.assertEqual(run.status, SyncRun.Status.FAILED)
        self.assertIn("at most 2 (KB_SYNC_MAX_FILES)", run.error)
        with override_settings(KB_SYNC_MAX_BYTES=10):
            run = run_now(sync_of("folder", str(self.folder)))
        self.assertEqual(run.added, 1)  # the first file, then the limit
        self.assertEqual(len(run.failed), 3)
        self.assertIn("KB_SYNC_MAX_BYTES", run.failed[0]["reason"])

    def test_a_file_that_fails_stops_nothing_else(self):
        write(self.folder, {"guide/empty.md": ""})
        run = run_now(sync_of("folder", str(self.folder)))
        self.assertEqual(run.status, SyncRun.Status.PARTIAL)
        self.assertEqual([f["path"] for f in run.failed], ["guide/empty.md"])
        self.assertEqual(run.added, 4)


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


class GitSyncTestCase(TestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp(prefix="kb-git-"))
        self.addCleanup(_remove, self.root)
        self.origin = GitOrigin(self.root)
        self.enterContext(
            override_settings(
                KB_SYNC_ROOTS=[str(self.root)], KB_SYNC_DIR=self.root / "mirrors"
            )
        )

    def test_a_branch_kept_in_step_with_renames(self):
        first = self.origin.commit(
            {k: v for k, v in DOCS.items() if not k.endswith(".png")}
        )
        view = "https://git.example.org/docs/blob/{commit}/{path}"
        sync = sync_of("git", str(self.origin.bare), branch="main", link_template=view)
        run = run_now(sync)
        self.assertEqual((run.status, run.added, run.seen), ("done", 4, first))
        restores = sync.sources.get(file_name="guide/restores.md")
        # Citations link to the file's web view at the commit synced.
        self.assertEqual(
            restores.metadata["url"],
            f"https://git.example.org/docs/blob/{first}/guide/restores.md",
        )

        second = self.origin.commit(
            {"guide/backups.md": DOCS["guide/backups.md"].replace("02:00", "03:30")},
            removed=["notes/todo.txt"],
            moved=[("guide/restores.md", "guide/restoring.md")],
        )
        run = run_now(sync)
        self.assertEqual(run.seen, second)
        self.assertEqual(
            (run.changed, run.renamed, run.deleted, run.unchanged), (1, 1, 1, 1)
        )
        self.assertEqual(run.chunks_embedded, 1)
        # The renamed file keeps its source (and so its citations).
        restores.refresh_from_db()
        self.assertEqual(restores.file_name, "guide/restoring.md")
        # ...and links to its new path (at the commit that renamed it).
        self.assertEqual(
            restores.metadata["url"],
            f"https://git.example.org/docs/blob/{second}/guide/restoring.md",
        )
        self.assertIn("03:30", context(sync.collection, "When do backups run?"))

        again = run_now(sync)  # the same head: nothing to do
        self.assertEqual((again.unchanged, again.chunks_embedded), (3, 0))

    def test_a_link_template_set_later_reaches_unchanged_files(self):
        first = self.origin.commit({"guide/network.md": DOCS["guide/network.md"]})
        sync = sync_of("git", str(self.origin.bare), branch="main")
        run_now(sync)
        network = sync.sources.get(file_name="guide/network.md")
        self.assertNotIn("url", network.metadata)
        sync.link_template = "https://git.example.org/docs/blob/{commit}/{path}"
        sync.save()
        run = run_now(sync)
        self.assertEqual((run.unchanged, run.chunks_embedded), (1, 0))
        network.refresh_from_db()
        self.assertEqual(
            network.metadata["url"],
            f"https://git.example.org/docs/blob/{first}/guide/network.md",
        )
        self.assertEqual(network.version, 1)  # a link, not a new version

    def test_a_deleted_twin_is_no_rename(self):
        """kb_bench sync found it: deleting one of two files of identical
        content counted the other, left in place, as renamed."""
        twin = "# Same\n\nThe same words in two files.\n"
        self.origin.commit({"one.md": twin, "two.md": twin})
        sync = sync_of("git", str(self.origin.bare), branch="main")
        run_now(sync)
        self.origin.commit({}, removed=["one.md"])
        run = run_now(sync)
        self.assertEqual((run.deleted, run.renamed, run.unchanged), (1, 0, 1))
        self.assertEqual(names(sync), {"two.md"})
        # A true rename of identical content is still one.
        self.origin.commit({}, moved=[("two.md", "three.md")])
        run = run_now(sync)
        self.assertEqual((run.renamed, run.deleted, run.added), (1, 0, 0))

    def test_how_far_behind_the_origin_answers_are(self):
        self.origin.commit({"a.md": "# A\n\nText.\n", "b.md": "# B\n\nMore.\n"})
        sync = sync_of("git", str(self.origin.bare), branch="main")
        run_now(sync)
        self.assertEqual(runs.behind(sync), 0)
        self.origin.commit({"a.md": "# A\n\nNew text.\n"})
        self.origin.commit({"b.md": "# B\n\nNew too.\n"})
        with override_settings(KB_SYNC_MAX_FILES=1):  # this run fails
            failed = run_now(sync)
        self.assertEqual(failed.status, SyncRun.Status.FAILED)
        self.assertEqual(runs.behind(sync), 2)
        out = StringIO()
        call_command("kb_sync", "list", stdout=out)
        self.assertIn("the origin is 2 commit(s) ahead", out.getvalue())
        run_now(sync)
        self.assertEqual(runs.behind(sync), 0)

    def test_a_missing_branch_or_repository_says_so(self):
        self.origin.commit({"a.md": "# A\n\nText.\n"})
        run = run_now(sync_of("git", str(self.origin.bare), branch="release"))
        self.assertEqual(run.status, SyncRun.Status.FAILED)
        self.assertIn("has no branch release", run.error)
        run = run_now(sync_of("git", str(self.root / "nothing-here.git")))
        self.assertEqual(run.status, SyncRun.Status.FAILED)
        self.assertIn("cannot be read", run.error)

    def test_a_repository_over_http(self):
        from dulwich.repo import Repo
        from dulwich.server import DictBackend
        from dulwich.web import make_wsgi_chain

        self.origin.commit({"guide/backups.md": DOCS["guide/backups.md"]})
        backend = DictBackend({"/": Repo(str(self.origin.bare))})
        server = make_server(
            "127.0.0.1", 0, make_wsgi_chain(backend), handler_class=_Quiet
        )
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        url = f"http://127.0.0.1:{server.server_port}/"
        sync = sync_of("git", url, branch="main")
        run = run_now(sync)
        self.assertEqual((run.status, run.added), ("done", 1), run.error)
        self.assertIn("02:00", context(sync.collection, "When do backups run?"))


class GitCredentialsTestCase(TestCase):
    """A token for a repository served over HTTP behind basic authentication:
    stored encrypted, sent to the server, never shown or repeated."""

    TOKEN = "ghp_s3cret-token-0123456789"

    def setUp(self):
        import base64

        from dulwich.repo import Repo
        from dulwich.server import DictBackend
        from dulwich.web import make_wsgi_chain

        root = Path(tempfile.mkdtemp(prefix="kb-git-"))
        self.addCleanup(_remove, root)
        origin = GitOrigin(root)
        origin.commit({"guide/backups.md": DOCS["guide/backups.md"]})
        git = make_wsgi_chain(DictBackend({"/": Repo(str(origin.bare))}))
        wanted = "Basic " + base64.b64encode(f"kb:{self.TOKEN}".encode()).decode()

        def guarded(environ, start_response):
            if environ.get("HTTP_AUTHORIZATION") != wanted:
                start_response(
                    "401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')]
                )
                return [b"no"]
            return git(environ, start_response)

        server = make_server("127.0.0.1", 0, guarded, handler_class=_Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        self.url = f"http://127.0.0.1:{server.server_port}/"
        self.enterContext(override_settings(KB_SYNC_DIR=root / "mirrors"))

    def test_a_token_opens_the_repository_and_stays_secret(self):
        from kb.sync import secrets

        refused = run_now(sync_of("git", self.url, branch="main"))
        self.assertEqual(refused.status, SyncRun.Status.FAILED)
        self.assertIn("asks for credentials", refused.error)

        sync = sync_of(
            "git",
            self.url,
            branch="main",
            username="kb",
            token_sealed=secrets.seal(self.TOKEN),
        )
        self.assertNotIn(self.TOKEN, sync.token_sealed)
        run = run_now(sync)
        self.assertEqual((run.status, run.added), ("done", 1), run.error)

        wrong = sync_of(
            "git",
            self.url,
            branch="main",
            username="kb",
            token_sealed=secrets.seal("not-the-token"),
        )
        run = run_now(wrong)
        self.assertEqual(run.status, SyncRun.Status.FAILED)
        self.assertNotIn("not-the-token", run.error)

        with override_settings(KB_SYNC_SECRET="another key"):
            run = run_now(sync)  # the key changed: said, not guessed
        self.assertIn("enter it again", run.error)

    def test_the_admin_takes_a_token_and_never_shows_it(self):
        staff, _, _ = make_users()
        self.client.force_login(staff)
        collection = Collection.objects.create(name="Docs")
        form = git_form(collection, self.url, username="kb", token=self.TOKEN)
        response = self.client.post(reverse("admin:kb_syncsource_add"), form)
        self.assertEqual(response.status_code, 302)
        sync = SyncSource.objects.get(name="docs")
        self.assertTrue(sync.token_sealed)
        change = reverse("admin:kb_syncsource_change", args=[sync.pk])
        page = self.client.get(change)
        self.assertNotContains(page, self.TOKEN)
        self.assertContains(page, "stored, encrypted")
        self.assertEqual((run_now(sync).status), SyncRun.Status.DONE)
        # Saved again without a token: the stored one stays.
        self.client.post(change, {**form, "token": ""})
        sync.refresh_from_db()
        self.assertTrue(sync.token_sealed)
        self.client.post(change, {**form, "token": "", "forget_token": "on"})
        sync.refresh_from_db()
        self.assertEqual(sync.token_sealed, "")


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


@override_settings(KB_SYNC_MAX_SECONDS=1500)
class SyncCommandTestCase(TransactionTestCase):
    """`kb_sync add|run|list` with a real worker taking the run."""

    def setUp(self):
        forget_jobs()
        self.root = Path(tempfile.mkdtemp(prefix="kb-sync-"))
        self.addCleanup(_remove, self.root)
        write(self.root / "docs", {k: v for k, v in DOCS.items() if "guide" in k})

    @pytest.mark.slow
    def test_add_run_and_list(self):
        env = {"KB_SYNC_ROOTS": str(self.root)}
        with override_settings(KB_SYNC_ROOTS=[str(self.root)]):
            call_command(
                "kb_sync",
                "add",
                "handbook",
                "--collection",
                "Handbook",
                "--folder",
                str(self.root / "docs"),
                "--every",
                "60",
                stdout=StringIO(),
            )
        sync = SyncSource.objects.get(name="handbook")
        self.assertEqual((sync.kind, sync.every_minutes), ("folder", 60))

        out = StringIO()
        call_command("kb_sync", "run", "handbook", stdout=out)
        self.assertIn("Queued run", out.getvalue())
        run_burst_worker("large", env=env)
        run = sync.runs.get()
        self.assertEqual((run.status, run.added), ("done", 3), run.error)

        # --json: the run's figures, in the shape.
        thread = threading.Thread(
            target=lambda: run_burst_worker("large", env=env), daemon=True
        )
        out = StringIO()
        thread.start()  # the worker waits for the job the command queues
        call_command(
            "kb_sync", "run", "handbook", "--json", "--timeout", "120", stdout=out
        )
        thread.join(timeout=120)
        figures = json.loads(out.getvalue())
        shape = [
            "added",
            "changed",
            "renamed",
            "deleted",
            "unchanged",
            "failed",
            "chunks_embedded",
            "chunks_reused",
            "seconds",
        ]
        for key in shape:
            self.assertIn(key, figures)
        self.assertEqual((figures["unchanged"], figures["failed"]), (3, []))

        # A failed run: its JSON still, and an exit status scripts can test.
        _remove(self.root / "docs")
        thread = threading.Thread(
            target=lambda: run_burst_worker("large", env=env), daemon=True
        )
        out = StringIO()
        thread.start()
        with self.assertRaisesMessage(CommandError, "failed: The folder"):
            call_command(
                "kb_sync", "run", "handbook", "--json", "--timeout", "120", stdout=out
            )
        thread.join(timeout=120)
        self.assertEqual(json.loads(out.getvalue())["status"], "failed")

        out = StringIO()
        call_command("kb_sync", "list", stdout=out)
        self.assertIn("handbook: folder", out.getvalue())
        self.assertIn("every 60 min", out.getvalue())
        self.assertIn("last run: failed", out.getvalue())

    def test_add_refuses_a_bad_name_in_words(self):
        roots = override_settings(KB_SYNC_ROOTS=[str(self.root)])
        with roots, self.assertRaises(CommandError) as refused:
            call_command(
                "kb_sync",
                "add",
                "bad name",
                "--collection",
                "C",
                "--folder",
                str(self.root / "docs"),
                stdout=StringIO(),
            )
        message = str(refused.exception)
        self.assertTrue(message.startswith("The sync source is refused: name: "))
        self.assertNotIn("{", message)  # not a raw dictionary

    def test_add_refuses_a_folder_outside_the_roots(self):
        with override_settings(KB_SYNC_ROOTS=[str(self.root / "docs")]):
            with self.assertRaisesMessage(CommandError, "KB_SYNC_ROOTS"):
                call_command(
                    "kb_sync",
                    "add",
                    "etc",
                    "--collection",
                    "C",
                    "--folder",
                    "/etc",
                    stdout=StringIO(),
                )
        self.assertFalse(SyncSource.objects.exists())


class KilledSyncTestCase(TransactionTestCase):
    """A worker killed (SIGKILL) in the middle of a sync: the next run marks the
    dead run interrupted and finishes the work, with no duplicate and no file
    lost."""

    @pytest.mark.slow
    def test_the_next_run_finishes_the_work(self):
        import signal

        from tests.base import start_worker, wait_for

        forget_jobs()
        root = Path(tempfile.mkdtemp(prefix="kb-sync-"))
        self.addCleanup(_remove, root)
        files = {
            f"team-{n:02d}.md": f"# Team {n}\n\nTeam {n} meets on day {n} of "
            f"the month in room {100 + n}; its lead is person {n}.\n"
            for n in range(40)
        }
        write(root / "docs", files)
        with override_settings(KB_SYNC_ROOTS=[str(root)]):
            sync = sync_of("folder", str(root / "docs"))
            worker = start_worker(KB_SYNC_ROOTS=str(root))
            try:
                run = runs.queue(sync)
                wait_for(lambda: sync.sources.filter(status="indexed").count() >= 3)
            finally:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=30)
            done_before = sync.sources.count()
            self.assertLess(done_before, len(files))  # killed midway
            run.refresh_from_db()
            self.assertEqual(run.status, SyncRun.Status.RUNNING)  # left as it died

            again = run_now(sync)
        run.refresh_from_db()
        self.assertEqual(run.status, SyncRun.Status.INTERRUPTED)
        self.assertIn("its worker stopped midway", run.error)  # the log says why
        self.assertIn(f"Run #{again.pk} took over", run.error)
        self.assertEqual(again.status, SyncRun.Status.DONE, again.failed)
        self.assertEqual(again.added + again.unchanged, len(files))
        self.assertEqual(sync.sources.count(), len(files))
        self.assertEqual(
            Source.objects.filter(collection=sync.collection).count(), len(files)
        )
        self.assertFalse(sync.sources.exclude(status="indexed").exists())


class OneRunAtATimeTestCase(TransactionTestCase):
    """While a run holds its sync's lock (here: another database session holds
    it, as a worker running the sync would), a second run does nothing and
    says why."""

    def test_a_second_run_stands_down(self):
        import psycopg
        from django.db import connection

        root = Path(tempfile.mkdtemp(prefix="kb-sync-"))
        self.addCleanup(_remove, root)
        write(root / "docs", {"a.md": "# A\n\nText.\n"})
        with override_settings(KB_SYNC_ROOTS=[str(root)]):
            sync = sync_of("folder", str(root / "docs"))
            params = connection.get_connection_params()
            params.pop("cursor_factory", None)
            params.pop("context", None)
            with psycopg.connect(**params, autocommit=True) as other:
                other.execute(
                    "SELECT pg_advisory_lock(hashtextextended(%s, 0))",
                    [f"kb-sync:{sync.pk}"],
                )
                run = run_now(sync)
            self.assertEqual(run.status, SyncRun.Status.FAILED)
            self.assertIn("Another run of this sync was under way", run.error)
            self.assertFalse(sync.sources.exists())
            self.assertEqual(run_now(sync).status, SyncRun.Status.DONE)  # released


class ScheduleTestCase(TestCase):
    def test_due_syncs(self):
        from datetime import timedelta

        from django.utils import timezone

        from kb.sync import schedule

        collection = Collection.objects.create(name="C")
        manual = sync_of("folder", "/x", collection)
        often = sync_of("folder", "/y", collection, every_minutes=30)
        self.assertEqual(schedule.due(), [often])
        run = SyncRun.objects.create(sync_source=often, status="done")
        self.assertEqual(schedule.due(), [])
        later = timezone.now() + timedelta(minutes=31)
        self.assertEqual(schedule.due(later), [often])
        SyncRun.objects.create(sync_source=often, status="running")
        self.assertEqual(schedule.due(later), [])  # one run at a time
        self.assertNotIn(manual, schedule.due(later))
        self.assertTrue(run)


class SyncAdminTestCase(TestCase):
    """The admin's sync sources: the location checked, "Sync now", the log."""

    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, _ = make_users()
        cls.collection = Collection.objects.create(name="Handbook")

    def setUp(self):
        self.client.force_login(self.staff)
        self.root = Path(tempfile.mkdtemp(prefix="kb-sync-"))
        self.addCleanup(_remove, self.root)
        write(self.root / "docs", {"guide/backups.md": DOCS["guide/backups.md"]})
        self.enterContext(override_settings(KB_SYNC_ROOTS=[str(self.root)]))
        self.add = reverse("admin:kb_syncsource_add")
        forget_jobs()

    def _form(self, **fields):
        return {
            "name": "handbook",
            "collection": self.collection.pk,
            "kind": "folder",
            "location": str(self.root / "docs"),
            "branch": "",
            "subfolder": "",
            "url_prefix": "",
            "page_limit": "500",
            "include": "",
            "exclude": "",
            "every_minutes": "0",
            "runs-TOTAL_FORMS": "0",
            "runs-INITIAL_FORMS": "0",
            **fields,
        }

    def test_a_location_outside_the_roots_is_refused_with_the_reason(self):
        for kind, location, reason in [
            ("folder", "/etc", "is not under a folder this server allows"),
            ("git", "ftp://example.org/docs.git", "Only https, http, ssh and local"),
        ]:
            with self.subTest(location):
                response = self.client.post(
                    self.add, self._form(kind=kind, location=location)
                )
                self.assertEqual(response.status_code, 200)
                self.assertContains(response, reason)
        self.assertFalse(SyncSource.objects.exists())

    def test_add_sync_now_and_read_the_log(self):
        response = self.client.post(self.add, self._form())
        self.assertEqual(response.status_code, 302, response.content[:2000])
        sync = SyncSource.objects.get(name="handbook")
        changelist = reverse("admin:kb_syncsource_changelist")
        response = self.client.post(
            changelist,
            {"action": "sync_now", "_selected_action": [sync.pk]},
            follow=True,
        )
        self.assertContains(response, "1 sync queued")
        run = sync.runs.get()
        self.assertEqual(run.status, SyncRun.Status.QUEUED)
        runs.execute(run.pk)  # as the worker would
        page = self.client.get(reverse("admin:kb_syncsource_change", args=[sync.pk]))
        self.assertContains(page, "Last synced")
        self.assertContains(page, "Done")
        listing = self.client.get(changelist)
        self.assertContains(listing, "handbook")

    def test_editors_without_the_permission_cannot_add_one(self):
        self.client.force_login(self.editor)
        self.assertEqual(self.client.get(self.add).status_code, 403)

    def test_content_editors_see_syncs_and_sync_now_admins_add_them(self):
        from kb import permissions

        permissions.ensure_groups()
        self.editor.groups.add(
            permissions.Group.objects.get(name=permissions.CONTENT_EDITOR)
        )
        sync = sync_of("folder", str(self.root / "docs"), self.collection)
        self.client.force_login(self.editor)
        self.assertEqual(self.client.get(self.add).status_code, 403)
        changelist = reverse("admin:kb_syncsource_changelist")
        self.assertContains(self.client.get(changelist), sync.name)
        response = self.client.post(
            changelist,
            {"action": "sync_now", "_selected_action": [sync.pk]},
            follow=True,
        )
        self.assertContains(response, "1 sync queued")
        self.editor.groups.add(permissions.Group.objects.get(name=permissions.ADMIN))
        self.assertEqual(self.client.get(self.add).status_code, 200)


class SyncStatesTestCase(TestCase):
    """A failing sync shows on its collection's page and on the dashboard."""

    def test_failures_are_shown_where_editors_look(self):
        staff, _, _ = make_users()
        self.client.force_login(staff)
        sync = sync_of("folder", "/nowhere/at/all")
        with override_settings(KB_SYNC_ROOTS=["/nowhere"]):
            run = run_now(sync)
        self.assertEqual(run.status, SyncRun.Status.FAILED)
        pages = [
            reverse("admin:kb_collection_change", args=[sync.collection.pk]),
            reverse("admin:kb_evalrun_dashboard") + f"?collection={sync.collection.pk}",
        ]
        for url in pages:
            with self.subTest(url):
                page = self.client.get(url)
                self.assertContains(page, 'id="sync-sources"')
                self.assertContains(page, sync.name)
                self.assertContains(page, "Failed")
                self.assertContains(page, "does not exist or cannot be read")
                self.assertContains(page, "no success yet")


class TokenFromTheEnvironmentTestCase(TestCase):
    def test_kb_sync_add_reads_the_token_from_a_variable(self):
        from kb.sync import secrets

        with environment(DOCS_TOKEN="tok-123"):
            call_command(
                "kb_sync",
                "add",
                "docs",
                "--collection",
                "Docs",
                "--git",
                "https://git.example.org/docs.git",
                "--username",
                "kb",
                "--token-env",
                "DOCS_TOKEN",
                stdout=StringIO(),
            )
        sync = SyncSource.objects.get(name="docs")
        self.assertEqual(secrets.unseal(sync.token_sealed), "tok-123")
        self.assertNotIn("tok-123", sync.token_sealed)
        with self.assertRaisesMessage(CommandError, "NOT_SET is empty"):
            call_command(
                "kb_sync",
                "add",
                "other",
                "--collection",
                "Docs",
                "--git",
                "https://git.example.org/docs.git",
                "--token-env",
                "NOT_SET",
                stdout=StringIO(),
            )
