"""End to end in headless Chromium: log in, ask, follow a citation (issue 6)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from playwright.sync_api import Page, expect, sync_playwright

from kb.demo import load_demo
from kb.management.commands.kb_screenshots import CHROMIUM_ARGS, QUESTION
from kb.models import Collection, GoldenCase, Source

CHROMIUM = Path("/usr/bin/chromium")


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text))


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


# live_server runs in another thread with its own connection, so it only sees
# committed rows: hence transactional_db rather than the usual TestCase rollback.
# transactional_db comes first so the session's test database outlives the server.
@pytest.mark.slow
def test_it_asks_and_follows_a_citation(transactional_db, live_server, page: Page):
    get_user_model().objects.create_superuser("staff", "s@example.invalid", "pw-1")
    demo = load_demo(sync=True)

    page.goto(f"{live_server.url}/admin/login/?next=/")
    page.fill("#id_username", "staff")
    page.fill("#id_password", "pw-1")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.fill("#id_q", QUESTION)
    page.select_option("#id_collection", str(demo.pk))
    page.click("form[role=search] button[type=submit]")
    cite = page.locator("#answer a.cite").first
    expect(cite).to_be_visible()

    # The answer reads "sentence [1] sentence [2]": the text before a marker is
    # the sentence it cites.
    sentence = cite.evaluate("a => a.previousSibling.textContent")
    assert _squash(sentence), "no sentence before the first citation"
    cite.click()
    page.wait_for_url(re.compile(r"/kb/sections/\d+/\?start=\d+&end=\d+#cited$"))
    mark = page.locator("mark#cited")
    expect(mark).to_be_visible()
    # The answer shows the sentence formatted (no backticks), the mark the source.
    assert _words(sentence) in _words(mark.inner_text())
    # The formatted section marks the blocks holding the cited sentences.
    expect(page.locator(".section-formatted .cited").first).to_be_visible()


@pytest.mark.slow
def test_a_golden_case_is_created_by_selecting_text(
    transactional_db, live_server, page: Page
):
    get_user_model().objects.create_superuser("staff", "s@example.invalid", "pw-1")
    collection = Collection.objects.create(name="Animals")
    # A leading newline: HTML drops the first newline after <pre>, which once put
    # every picked span one character early.
    text = "\n# Animals\n\nFoxes.\n\nThe quick brown fox jumps over the lazy dog.\n"
    Source.objects.create(
        collection=collection, title="Animals", file_name="animals.md", text=text
    )

    page.goto(f"{live_server.url}/admin/login/?next=/admin/kb/goldencase/add/")
    page.fill("#id_username", "staff")
    page.fill("#id_password", "pw-1")
    page.click("input[type=submit]")
    page.select_option("#id_collection", str(collection.pk))
    page.select_option("#kb-span-file", "animals.md")
    page.locator(".kb-span-source").evaluate(
        """pre => {
          const node = pre.firstChild, at = node.data.indexOf("quick brown fox");
          const range = document.createRange();
          range.setStart(node, at);
          range.setEnd(node, at + "quick brown fox".length);
          getSelection().removeAllRanges();
          getSelection().addRange(range);
        }"""
    )
    page.click("#kb-span-add")
    page.fill("#id_external_id", "fox")
    page.fill("#id_question", "What jumps over the lazy dog?")
    page.select_option("#id_kind", "definition")
    page.click("input[name=_save]")
    page.wait_for_url(f"{live_server.url}/admin/kb/goldencase/")

    start = text.index("quick brown fox")
    case = GoldenCase.objects.get(external_id="fox")
    span = {"file": "animals.md", "start": start, "end": start + 15}
    assert case.required_spans == [{**span, "text": "quick brown fox"}]


@pytest.mark.slow
def test_auto_refresh_never_throws_away_what_an_editor_types(
    transactional_db, live_server, page: Page
):
    get_user_model().objects.create_superuser("staff", "s@example.invalid", "pw-1")
    collection = Collection.objects.create(name="Busy")
    source = Source.objects.create(
        collection=collection, title="Busy", file_name="busy.md",
        text="# Busy\n\nText.\n", status=Source.Status.QUEUED,
    )  # fmt: skip
    url = f"{live_server.url}/admin/kb/source/{source.pk}/change/"
    page.goto(f"{live_server.url}/admin/login/?next={url}")
    page.fill("#id_username", "staff")
    page.fill("#id_password", "pw-1")
    page.click("input[type=submit]")
    page.wait_for_url(url)
    expect(page.locator("#kb-refresh-note")).to_contain_text("refreshes itself")

    # Untouched, the page reloads itself while the source is being indexed.
    page.evaluate("window.kbMarker = 1")
    # (wait_for_function would evaluate a string in the page: the CSP forbids it)
    page.wait_for_event("load", timeout=10_000)
    assert page.evaluate("window.kbMarker") is None

    page.fill("#id_author", "Ada")
    page.wait_for_timeout(4_000)  # past the refresh interval
    assert page.input_value("#id_author") == "Ada"
    expect(page.locator("#kb-refresh-note")).to_contain_text("stopped")
