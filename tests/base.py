"""Shared actors, a minimal Source -> Section -> Chunk tree, and a real burst worker."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import time
import unittest
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import TestCase

from kb import permissions
from kb.demo import load_demo
from kb.models import Chunk, Collection, Section, Source

SHARED = Path(settings.BASE_DIR).parent / "shared"
SHARED_MISSING = (
    f"{SHARED} is absent (it sits beside the repository in development and CI)"
)


@contextlib.contextmanager
def environment(**values: str):
    """Set environment variables for the block (as a deployment would), then
    put back what was there."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def shared_or_skip(path: Path) -> None:
    """Skip the test when `path` (under ../shared) is absent on a developer's
    machine; under CI it fails instead, as the browser test does: CI has the
    shared folder, and a test that silently skips there protects nothing."""
    if path.exists():
        return
    message = f"{path} is absent ({SHARED_MISSING})"
    if os.environ.get("CI"):
        raise AssertionError(message)
    raise unittest.SkipTest(message)


def needs_shared(path: Path):
    """shared_or_skip as a decorator of a test method or a TestCase class."""

    def decorate(target):
        if isinstance(target, type):
            original = target.setUpClass

            def set_up_class(cls):
                shared_or_skip(path)
                original.__func__(cls)

            target.setUpClass = classmethod(set_up_class)
            return target

        @functools.wraps(target)
        def test(*args, **kwargs):
            shared_or_skip(path)
            return target(*args, **kwargs)

        return test

    return decorate


DEMO_DIR = Path(settings.BASE_DIR) / "kb" / "demo" / "content"


def make_users(editor_group: str | None = None):
    """staff: the admin superuser; editor: staff without superuser (a member of
    `editor_group`, one of kb.permissions' groups, when given); alice: not staff."""
    User = get_user_model()
    staff = User.objects.create_superuser(
        "staff", "staff@example.invalid", "pw-staff-1"
    )
    editor = User.objects.create_user(
        "editor", "editor@example.invalid", "pw-editor-1", is_staff=True
    )
    alice = User.objects.create_user("alice", "alice@example.invalid", "pw-alice-1")
    if editor_group:
        permissions.ensure_groups()
        editor.groups.add(Group.objects.get(name=editor_group))
    return staff, editor, alice


class DemoTestCase(TestCase):
    """The three actors and the demo collection, indexed once per class by the
    real embedder; the staff superuser is logged in unless `log_in` is False."""

    log_in = True

    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, cls.alice = make_users()
        cls.demo = load_demo(sync=True)

    def setUp(self):
        if self.log_in:
            self.client.force_login(self.staff)


def make_tree(vector: list[float] | None = None) -> Chunk:
    """One collection, one source, one section, one chunk."""
    collection = Collection.objects.create(name="Tests")
    text = "# Deploy\n\nRoll back when errors rise.\n"
    source = Source.objects.create(
        collection=collection,
        title="Deploy",
        file_name="deploy.md",
        text=text,
        content_hash="x",
    )
    section = Section.objects.create(
        source=source,
        heading="Deploy",
        heading_path="Deploy",
        level=1,
        order=0,
        start=0,
        end=len(text),
        body=text,
    )
    return Chunk.objects.create(
        source=source,
        section=section,
        chunk_index=0,
        start=10,
        end=len(text),
        text=text[10:],
        embedded_text=text[10:],
        token_count=8,
        embedding=vector,
    )


def run_burst_worker(
    *queues: str, timeout: int = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `manage.py rqworker --burst` as a separate process on the test database
    (`env`: more environment variables for it).

    Callers must be TransactionTestCases: the worker process only sees committed rows.
    """
    env = {
        **os.environ,
        "KB_TESTING": "1",
        "KB_DB_NAME": connection.settings_dict["NAME"],
        **(env or {}),
    }
    cmd = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "rqworker"]
    return subprocess.run(
        [*cmd, "--burst", *(queues or ["default", "large"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def peak_memory(probe: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run a probe of tests/peak_memory.py in a process of its own on the test
    database: its response and peak memory (see there)."""
    env = {
        **os.environ,
        "KB_TESTING": "1",
        "KB_DB_NAME": connection.settings_dict["NAME"],
        **(env or {}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.peak_memory", probe, *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def forget_jobs() -> None:
    """Empty the test queue and its started, finished and failed jobs: a failed
    job kept in Redis would make a later run's source of the same id and version
    look lost (kb.jobs.stranded), as the test database's ids start again at 1,
    and a job a killed worker left started counts as running ahead of every
    queued one (kb.jobs.jobs_ahead) until its entry expires."""
    import django_rq
    from rq.job import Job

    for name in ("default", "large"):
        queue = django_rq.get_queue(name)
        queue.empty()
        for registry in (queue.failed_job_registry, queue.finished_job_registry):
            for job_id in registry.get_job_ids():
                registry.remove(job_id)
                queue.connection.delete(Job.key_for(job_id))
        # RQ keeps a started job by its execution, which it removes itself.
        started = queue.started_job_registry
        for job_id in started.get_job_ids(cleanup=False):
            queue.connection.delete(Job.key_for(job_id))
        queue.connection.delete(started.key)


def start_worker(**env: str) -> subprocess.Popen:
    """A long-lived `rqworker` process on the test database, in its own session
    (so a test can kill it and its children); `env` adds variables.

    Callers must be TransactionTestCases and stop it themselves."""
    env = {
        **os.environ,
        "KB_TESTING": "1",
        "KB_DB_NAME": connection.settings_dict["NAME"],
        **env,
    }
    manage = str(Path(settings.BASE_DIR) / "manage.py")
    return subprocess.Popen(
        [sys.executable, manage, "rqworker", "default", "large"],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for(predicate, timeout: float = 120) -> None:
    """Return once `predicate()` is true (another process's work); fail after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def loaded_passage(text: str, start: int, end: int, name: str = "doc.md"):
    """A retrieved passage of text[start:end] whose whole source text was loaded,
    as retrieval hands passages to the answerer and the ask page."""
    from kb import retrieval

    location = retrieval.Location(1, name, start, end, [0])
    passage = retrieval.Passage(
        1, name, name, start, end, text[start:end], 1.0, {"vector"}, [location]
    )
    passage.source_text = retrieval.TextWindow([(0, text)])
    return passage


def ingest_text(collection: Collection, file_name: str, text: str | bytes) -> Source:
    """`text` stored as the collection's file `file_name` and indexed in this
    process, as a worker would."""
    from kb import ingestion, uploads

    data = text.encode() if isinstance(text, str) else text
    source, _ = uploads.store_source(collection, file_name, data)
    ingestion.ingest(source.pk)
    source.refresh_from_db()
    return source


def collection_of(name: str, files: dict[str, str | bytes]) -> Collection:
    """A new collection holding `files` (file name: text), indexed."""
    collection = Collection.objects.create(name=name)
    for file_name, text in files.items():
        ingest_text(collection, file_name, text)
    return collection


def golden_span(file="a.md", start=0, end=10, **extra):
    """A golden span dict (its text is not checked here)."""
    return {"file": file, "start": start, "end": end, "text": "x", **extra}


# A collection's settings as the admin form posts them (without its name).
COLLECTION_FORM = {
    "description": "",
    "chunk_strategy": "structure",
    "chunk_tokens": 200,
    "chunk_overlap": 0,
    "top_k": 5,
    "context_budget": 1200,
    "retrieval_mode": "hybrid",
    "embedding_model": "all-minilm-l6-v2",
}
