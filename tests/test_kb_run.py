"""`kb_run` keeps its workers running when its web server dies, and starts the
web server again (issue #26: the kernel killed the web process for its memory,
and kb_run then stopped the workers too)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from django.test import TransactionTestCase

from config import services
from tests.base import environment, wait_for


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> dict[int, str]:
    """The live child processes of `pid`, with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it ended meanwhile
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after ")".
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found[int(entry.name)] = cmdline
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5)
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False
    return True


def _all(children: dict[int, str], word: str) -> list[int]:
    return sorted(pid for pid, cmdline in children.items() if f" {word} " in cmdline)


def _only(children: dict[int, str], word: str) -> int:
    pids = _all(children, word)
    assert len(pids) == 1, children
    return pids[0]


@pytest.mark.slow
class KbRunTestCase(TransactionTestCase):
    # TransactionTestCase: kb_run's processes use the test database themselves.

    def test_a_killed_web_server_starts_again_and_the_workers_run_on(self):
        port = _free_port()
        run, log = self._start(port)
        url = f"http://127.0.0.1:{port}/admin/login/"
        wait_for(lambda: _answers(url), timeout=180)
        children = _children(run.pid)
        workers, web = _all(children, "rqworker"), _only(children, "runserver")
        self.assertEqual(len(workers), 2)  # kb_run's default: see docs/operations.md

        os.kill(web, signal.SIGKILL)  # what the kernel's OOM killer does
        wait_for(lambda: web not in _children(run.pid), timeout=30)
        wait_for(lambda: _answers(url), timeout=120)
        children = _children(run.pid)
        self.assertEqual(_all(children, "rqworker"), workers)  # never stopped
        self.assertNotEqual(_only(children, "runserver"), web)
        self.assertIsNone(run.poll())

        run.send_signal(signal.SIGTERM)  # and kb_run still stops them all
        self.assertEqual(run.wait(timeout=90), 0)
        self.assertEqual([pid for pid in children if _alive(pid)], [])
        log.seek(0)
        output = log.read().decode()
        self.assertIn("The web server exited (code -9); starting it again", output)

    def test_a_web_server_that_cannot_start_stops_it_with_the_reason(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            run, log = self._start(taken.getsockname()[1])
            self.assertEqual(run.wait(timeout=240), 1)
        log.seek(0)
        output = log.read().decode()
        self.assertIn("That port is already in use", output)
        self.assertIn("The web server exited 5 times within 10 s of starting", output)
        self.assertIn("Stopped web server and workers.", output)

    @pytest.mark.skipif(
        bool(os.environ.get("REDIS_URL")), reason="the queue server is not embedded"
    )
    def test_an_embedded_server_that_stopped_starts_again_with_the_process(self):
        # A KB_DATA_DIR of its own, whose Valkey this test may stop; the test
        # database and the built model are this run's.
        data_dir = Path(tempfile.mkdtemp(prefix="kb-run-"))
        self.addCleanup(shutil.rmtree, data_dir, ignore_errors=True)
        self.addCleanup(services.stop_valkey, data_dir)
        db = connection.settings_dict
        host = f"{db['USER']}@{quote(db['HOST'], safe='')}:{db['PORT']}"
        env = {
            "KB_DATA_DIR": str(data_dir),
            "DATABASE_URL": f"postgres://{host}/{db['NAME']}",
        }
        with environment(**env):
            services.start(data_dir)  # as `make run` does before kb_run
        (data_dir / "models").symlink_to(settings.KB_DATA_DIR / "models")
        port = _free_port()
        run, log = self._start(port, **env)
        url = f"http://127.0.0.1:{port}/admin/login/"
        wait_for(lambda: _answers(url), timeout=180)

        os.kill(services.valkey_pid(data_dir / "valkey"), signal.SIGKILL)
        os.kill(_only(_children(run.pid), "runserver"), signal.SIGKILL)
        wait_for(lambda: "valkey" in services.running(data_dir), timeout=60)
        wait_for(lambda: _answers(url), timeout=120)
        log.seek(0)
        self.assertIn("kb: starting Valkey on", log.read().decode())

    def _start(self, port: int, **more: str):
        """kb_run on `port`, in its own session (`more`: more environment
        variables), and the file of its output."""
        env = {
            **os.environ,
            "KB_TESTING": "1",
            "KB_DB_NAME": connection.settings_dict["NAME"],
            **more,
        }
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        log = tempfile.TemporaryFile()
        self.addCleanup(log.close)
        run = subprocess.Popen(
            [sys.executable, manage, "kb_run", "--addr", f"127.0.0.1:{port}"],
            env=env,
            start_new_session=True,
            stdout=log,
            stderr=log,
        )
        self.addCleanup(self._kill, run)
        return run, log

    def _kill(self, run: subprocess.Popen) -> None:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
