"""Session-wide set-up: the real embedder remembers the vectors it computed, and
passwords are hashed with a fast hasher.

The demo and the shared corpora are indexed again by many test classes (each
TestCase class rolls its rows back; each TransactionTestCase flushes them), and
re-embedding the same texts was most of the suite's time. The vectors are a pure
function of the texts, so the process-wide embedder keeps each call's result,
computed by the real ONNX model, and gives it back when the very same call
(same texts, batch size and threads) comes again: the same bits, without the wait.
Worker processes started by tests embed with their own, ordinary embedder.

Django's default hasher (PBKDF2) takes a fifth of a second or more on purpose,
for every user a test creates and every login it tries; hashing with MD5 first
(as healthchecks' tests do) saves that wait. The other hashers stay listed, so a
password a worker or command hashed the usual way is still checked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import translation

from kb import embedding, embedding_models
from tests.base import environment
from tests.browser import page  # noqa: F401 (the Chromium fixture, for every module)


class RememberingEmbedder(embedding.Embedder):
    """The real embedder; a repeated call returns the vectors of its first run."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._vectors: dict[tuple, np.ndarray] = {}

    def embed(self, texts, origins=None, batch_size=None):
        key = ("embed", self.threads, batch_size or self.batch_size, tuple(texts))
        if key not in self._vectors:
            # Not remembered: computed (and checked against the window) as ever.
            self._vectors[key] = super().embed(texts, origins, batch_size)
        return self._vectors[key].copy()

    def embed_truncating(self, texts):
        key = ("truncating", self.threads, self.batch_size, tuple(texts))
        if key not in self._vectors:
            self._vectors[key] = super().embed_truncating(texts)
        return self._vectors[key].copy()


@pytest.fixture(scope="session", autouse=True)
def remembered_vectors():
    """Make the default embedder of this process a RememberingEmbedder."""
    key = (embedding_models.DEFAULT, settings.KB_EMBED_PRECISION)
    with embedding.installed(RememberingEmbedder.from_settings(*key), *key):
        yield


@pytest.fixture(scope="session", autouse=True)
def temporary_media_root():
    """Uploads go to the run's own private temporary directory, never among the
    instance's files (issue #26), and it goes when the run ends. The worker
    processes a test starts use it too: they inherit KB_TEST_MEDIA_ROOT, which
    the settings read. One given already (a run started by a test) is kept."""
    if os.environ.get("KB_TEST_MEDIA_ROOT"):
        yield
        return
    path = tempfile.mkdtemp(prefix="kb-test-media-")  # 0700
    try:
        with (
            environment(KB_TEST_MEDIA_ROOT=path),
            override_settings(MEDIA_ROOT=Path(path)),
        ):
            yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """Hash the tests' passwords with MD5 (checking still works with any hasher)."""
    hashers = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with override_settings(PASSWORD_HASHERS=hashers + settings.PASSWORD_HASHERS):
        yield


@pytest.fixture(scope="session", autouse=True)
def fresh_rate_limits():
    """Start without the rate-limit counters of an earlier run (their windows
    outlive a session: a suite run twice within a minute asked as one user)."""
    from kb import ratelimit

    client = ratelimit.counters()
    for key in client.scan_iter(f"{ratelimit.PREFIX}*"):
        client.delete(key)
    yield


@pytest.fixture(autouse=True)
def default_language():
    """Each test starts in the default language. LocaleMiddleware activates a
    request's language for the thread and leaves it active after the response
    (the next request activates its own); in one test process, a French request
    would otherwise word every later message in French."""
    yield
    translation.activate(settings.LANGUAGE_CODE)


def pytest_collection_modifyitems(config, items):
    """In a parallel run (pytest-xdist), skip the tests that restart the
    servers every process shares: they would cut the others' connections.
    `make test` deselects them there and runs them alone afterwards."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    alone = pytest.mark.skip(
        reason="restarts the shared servers: run alone (-m serial), as make test does"
    )
    for item in items:
        if item.get_closest_marker("serial"):
            item.add_marker(alone)
