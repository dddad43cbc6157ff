"""The headless Chromium the browser tests drive (Debian's package; .ci/run
installs it): the `page` fixture, which tests/conftest.py offers every test
module. Without Chromium a test using it is skipped on a developer's machine
and fails under CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db import connections
from playwright.sync_api import sync_playwright

from kb.management.commands.kb_screenshots import CHROMIUM_ARGS

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def page(monkeypatch):
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (.ci/run installs Debian's chromium package)"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    # Playwright's sync API runs an event loop in this thread; the ORM calls made
    # here (and the database teardown) are still plain synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(15_000)
        yield page
        browser.close()
        # Connections opened in here belong to Playwright's context (asgiref locals
        # follow contextvars); close them, or the test database can't be dropped.
        connections.close_all()
