"""Git over SSH with a deploy key (issue #30): a real OpenSSH server on
loopback, started by the test with keys made here, serving a repository made
here; the sync fetches it through the system's `ssh` client as it would a
company's Git server. Debian's openssh-server provides sshd (.ci/run installs
it); without it the test is skipped on a developer's machine and fails in CI.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
from io import StringIO
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.core.management import call_command
from django.test import TestCase, override_settings
from django.urls import reverse

from kb.benchmarks.sync import GitOrigin
from kb.models import Collection, SyncRun, SyncSource
from kb.sync import secrets
from kb.sync.origins import OriginError, check_location
from tests.base import make_users
from tests.syncing import DOCS, git_form, run_now, sync_of

SSHD = Path("/usr/sbin/sshd")
START_SECONDS = 20


def new_key(passphrase: bytes | None = None) -> tuple[str, str]:
    """A fresh ed25519 key: (private in OpenSSH form, public line); with a
    passphrase, in encrypted PKCS#8 (OpenSSH's own encryption needs bcrypt)."""
    key = ed25519.Ed25519PrivateKey.generate()
    if passphrase:
        form = serialization.PrivateFormat.PKCS8
        encryption = serialization.BestAvailableEncryption(passphrase)
    else:
        form = serialization.PrivateFormat.OpenSSH
        encryption = serialization.NoEncryption()
    private = key.private_bytes(serialization.Encoding.PEM, form, encryption).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SSHServer:
    """sshd on 127.0.0.1 only, public-key logins only, for keys in `allowed`."""

    def __init__(self, root: Path, allowed: list[str]):
        if not SSHD.exists() or not shutil.which("ssh"):
            reason = f"{SSHD} or ssh is missing (.ci/run installs openssh-server)"
            if os.environ.get("CI"):
                raise AssertionError(reason)
            raise unittest.SkipTest(reason)
        if os.geteuid() == 0:  # sshd's privilege separation directory
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.port = free_port()
        host, _ = new_key()
        (root / "host_key").write_text(host)
        (root / "host_key").chmod(0o600)
        (root / "authorized_keys").write_text("\n".join(allowed) + "\n")
        config = root / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\n"
            f"HostKey {root / 'host_key'}\n"
            f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
            "PidFile none\nUsePAM no\nStrictModes no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
        )
        self.process = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(self.process.stderr.read().decode())
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"sshd did not listen within {START_SECONDS} s")

    def url(self, path: Path) -> str:
        return f"ssh://{getpass.getuser()}@127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process.stderr.close()


class GitOverSSHTestCase(TestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp(prefix="kb-sshd-"))  # not kb-ssh-*
        self.addCleanup(shutil.rmtree, self.root, True)
        self.origin = GitOrigin(self.root)
        self.first = self.origin.commit({"guide/backups.md": DOCS["guide/backups.md"]})
        self.private, public = new_key()
        self.server = SSHServer(self.root, [public])
        self.addCleanup(self.server.stop)
        self.url = self.server.url(self.origin.bare)
        self.enterContext(override_settings(KB_SYNC_DIR=self.root / "mirrors"))

    def test_a_deploy_key_opens_the_repository_and_stays_secret(self):
        refused = run_now(sync_of("git", self.url, branch="main"))
        self.assertEqual(refused.status, SyncRun.Status.FAILED)
        self.assertIn("cannot be read", refused.error)

        other, _ = new_key()  # a key the server does not know
        wrong = sync_of(
            "git", self.url, branch="main", deploy_key_sealed=secrets.seal(other)
        )
        self.assertEqual(run_now(wrong).status, SyncRun.Status.FAILED)

        sync = sync_of(
            "git", self.url, branch="main", deploy_key_sealed=secrets.seal(self.private)
        )
        run = run_now(sync)
        self.assertEqual((run.status, run.added, run.seen), ("done", 1, self.first))
        self.assertNotIn("PRIVATE KEY", run.error + str(run.log))
        # The host key met first is trusted from then on, beside the mirror.
        known = sync.mirror_path().with_name(f"{sync.pk}.known_hosts")
        self.assertIn("ssh-ed25519", known.read_text())  # as docs/sync.md says
        # No copy of the key stays on disk after the fetch.
        leftovers = [p for p in Path(tempfile.gettempdir()).glob("kb-ssh-*/deploy_key")]
        self.assertEqual(leftovers, [])

        second = self.origin.commit(
            {"guide/backups.md": DOCS["guide/backups.md"].replace("35", "90")}
        )
        run = run_now(sync)
        self.assertEqual((run.changed, run.seen), (1, second))

    def test_the_admin_takes_a_deploy_key_and_shows_only_its_public_line(self):
        staff, _, _ = make_users()
        self.client.force_login(staff)
        collection = Collection.objects.create(name="Docs")
        form = git_form(collection, self.url)
        locked, _ = new_key(passphrase=b"typed by nobody")
        page = self.client.post(
            reverse("admin:kb_syncsource_add"), {**form, "deploy_key": locked}
        )
        self.assertContains(page, "has a passphrase")
        page = self.client.post(
            reverse("admin:kb_syncsource_add"), {**form, "deploy_key": "hunter2"}
        )
        self.assertContains(page, "not a private key kb can use")
        self.assertFalse(SyncSource.objects.exists())

        response = self.client.post(
            reverse("admin:kb_syncsource_add"), {**form, "deploy_key": self.private}
        )
        self.assertEqual(response.status_code, 302)
        sync = SyncSource.objects.get(name="docs")
        change = reverse("admin:kb_syncsource_change", args=[sync.pk])
        page = self.client.get(change)
        public = secrets.deploy_key_public(self.private)
        self.assertContains(page, public)
        self.assertNotContains(page, "PRIVATE KEY")
        self.assertEqual(run_now(sync).status, SyncRun.Status.DONE)
        self.client.post(change, {**form, "forget_deploy_key": "on"})
        sync.refresh_from_db()
        self.assertEqual((sync.deploy_key_sealed, sync.deploy_key_public), ("", ""))

    def test_kb_sync_add_reads_the_key_from_a_file(self):
        key = self.root / "deploy_key"
        key.write_text(self.private)
        out = StringIO()
        call_command(
            "kb_sync",
            "add",
            "docs",
            "--collection",
            "Docs",
            "--git",
            self.url,
            "--deploy-key",
            str(key),
            stdout=out,
        )
        self.assertIn(secrets.deploy_key_public(self.private), out.getvalue())
        sync = SyncSource.objects.get(name="docs")
        self.assertEqual(run_now(sync).status, SyncRun.Status.DONE)


class SSHAddressTestCase(TestCase):
    def test_ssh_addresses_that_ssh_would_read_as_options_are_refused(self):
        for url in ("ssh://git@git.example.org/docs.git", "git@example.org:docs.git"):
            self.assertEqual(check_location("git", url), url)
        for url in ("ssh://-oProxyCommand=touch%20x/r", "ssh://-o@host/r", "git@-oX:r"):
            with self.assertRaises(OriginError, msg=url):
                check_location("git", url)
