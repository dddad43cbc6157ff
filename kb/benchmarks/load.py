"""Load on POST /api/ask over HTTP (issue #15): `manage.py kb_load`.

At each concurrency level, that many threads ask questions in turn for a fixed
time, each on a new connection (gunicorn's sync workers close every connection
after its response), and every request's wall-clock time and outcome is kept.
Throughput counts requests finished within the level's time; an error is any
answer but 200 or a failed connection. The server is one given by URL, or
gunicorn started here on a free loopback port against this process's database.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection

from kb.benchmarks.tables import markdown_table
from kb.percentiles import percentile

LEVELS = (1, 4, 16, 32)
REQUEST_TIMEOUT = 120.0  # seconds; a request still unanswered counts as an error
START_TIMEOUT = 60.0  # seconds for gunicorn to answer its first request
WARM_UP_SECONDS = 2.0  # every worker loads the model before the first level


class LoadError(RuntimeError):
    """The server could not be started or reached."""


@dataclass
class Level:
    concurrency: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)  # "HTTP 500", "timeout", ...

    @property
    def requests(self) -> int:
        return len(self.latencies_ms) + sum(self.errors.values())

    @property
    def per_s(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0

    def p(self, q: float) -> float:
        return percentile(self.latencies_ms, q)


def ask(url: str, token: str, body: bytes) -> tuple[float, str | None]:
    """One POST to the ask API: its milliseconds, and None or what went wrong."""
    parts = urlsplit(url)
    kind = (
        http.client.HTTPSConnection
        if parts.scheme == "https"
        else (http.client.HTTPConnection)
    )
    path = parts.path.rstrip("/") + "/api/ask"
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    conn = kind(parts.netloc, timeout=REQUEST_TIMEOUT)
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        error = None if response.status == 200 else f"HTTP {response.status}"
    except TimeoutError:
        error = "timeout"
    except OSError as exc:
        error = type(exc).__name__
    finally:
        conn.close()
    return (time.perf_counter() - started) * 1000, error


def run_level(
    url: str, token: str, bodies: Sequence[bytes], concurrency: int, seconds: float
) -> Level:
    """`concurrency` threads asking in turn until `seconds` have passed; requests
    still running then finish but are not counted."""
    level = Level(concurrency, seconds)
    lock = threading.Lock()
    started = time.perf_counter()
    deadline = started + seconds

    def client(offset: int) -> None:
        i = offset
        while time.perf_counter() < deadline:
            ms, error = ask(url, token, bodies[i % len(bodies)])
            i += concurrency
            if time.perf_counter() > deadline:
                break
            with lock:
                if error:
                    level.errors[error] += 1
                else:
                    level.latencies_ms.append(ms)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return level


def run(
    url: str,
    token: str,
    questions: Sequence[str],
    collection: str,
    levels: Sequence[int] = LEVELS,
    seconds: float = 10.0,
    progress=lambda line: None,
) -> list[Level]:
    bodies = [
        json.dumps({"question": q, "collection": collection}).encode()
        for q in questions
    ]
    run_level(url, token, bodies, max(levels), min(WARM_UP_SECONDS, seconds))
    results = []
    for concurrency in levels:
        level = run_level(url, token, bodies, concurrency, seconds)
        progress(
            f"concurrency {concurrency}: {level.per_s:.1f} req/s, p95 "
            f"{level.p(95):.0f} ms, {sum(level.errors.values())} errors"
        )
        results.append(level)
    return results


def table(levels: Sequence[Level]) -> str:
    header = [
        "concurrency",
        "seconds",
        "answered",
        "req/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "errors",
    ]
    return markdown_table(header, "rrrrrrrr", [_cells(r) for r in levels])


def _cells(r: Level) -> list[object]:
    errors = sum(r.errors.values())
    kinds = ", ".join(f"{k} × {n}" for k, n in sorted(r.errors.items()))
    return [
        r.concurrency,
        f"{r.seconds:g}",
        len(r.latencies_ms),
        f"{r.per_s:.1f}",
        f"{r.p(50):.0f}",
        f"{r.p(95):.0f}",
        f"{r.p(99):.0f}",
        f"{errors}{f' ({kinds})' if kinds else ''}",
    ]


def read_questions(path: Path) -> list[str]:
    """The "question" of every line of a JSON Lines file (golden cases)."""
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
    questions = [row["question"] for row in rows if row.get("question")]
    if not questions:
        raise LoadError(f"{path} holds no questions")
    return questions


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def gunicorn(workers: int, log: Path) -> Iterator[str]:
    """gunicorn serving this project on a free loopback port with `workers` sync
    workers, on the database this process uses; yields its URL."""
    port = free_port()
    env = {**os.environ, "KB_DB_NAME": connection.settings_dict["NAME"]}
    # The benchmark measures answering, not the per-user question limit (issue
    # #15), which would answer its one token 429 after KB_ASK_PER_MINUTE.
    env["KB_ASK_PER_MINUTE"] = "0"
    if settings.TESTING:
        env["KB_TESTING"] = "1"
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--timeout",
        str(int(REQUEST_TIMEOUT)),
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as output:
        server = subprocess.Popen(
            command, cwd=settings.BASE_DIR, env=env, stdout=output, stderr=output
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_until_up(server, url, log)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_up(server: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise LoadError(f"gunicorn exited with {server.returncode}; see {log}")
        _, error = ask(url, "-", b"{}")
        if error in (None, "HTTP 401"):  # answering: a bad token is refused
            return
        time.sleep(0.2)
    raise LoadError(f"gunicorn did not answer within {START_TIMEOUT:.0f} s; see {log}")
