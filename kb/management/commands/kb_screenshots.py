from __future__ import annotations

import contextlib
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from kb import demo, evaluation, ingestion, reindexing, uploads
from kb.models import Collection, OverflowRejection, ShadowIndex

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
QUESTION = "When should I roll back a deploy?"
# The source whose statistics are shown, and the copy that overflows the window.
STATS_FILE = "deployment-runbook.md"
OVERFLOW_FILE = "refund-policy.md"
OVERFLOW_COLLECTION = "Screenshots demo"
OVERFLOW_SUMMARY = "A summary pasted into the metadata, far too long to embed. " * 40
# A held swap: two demo files whose cases all pass at 200-token chunks (the floor,
# 1.0) while 120-token chunks lose one of them.
GATE_COLLECTION = "Screenshots gate"
GATE_FILES = ["office-faq.txt", "security-policy.md"]


class Command(BaseCommand):
    help = (
        "Save PNG screenshots (headless Chromium) of the source list, a source's "
        "statistics, the Demo metadata policy, the overflow rejections, the ask "
        "page, a held swap on the evaluation dashboard, the content gaps and the "
        "question log into OUTDIR (asking a few questions as the login used). "
        "Without --base-url, loads the demo if missing, records an overflow "
        "rejection and a held swap if none exist, and serves the dev database on a "
        "free port with a temporary staff user."
    )

    def add_arguments(self, parser):
        parser.add_argument("outdir", type=Path)
        parser.add_argument("--base-url", help="A running kb, e.g. http://host:8000")
        parser.add_argument("--username", help="A superuser of that kb.")
        parser.add_argument("--password")

    def handle(self, *args, **options):
        outdir: Path = options["outdir"]
        outdir.mkdir(parents=True, exist_ok=True)
        credentials = (options["username"], options["password"])
        if options["base_url"]:
            if not all(credentials):
                raise CommandError("--base-url needs --username and --password.")
            self._shoot(options["base_url"].rstrip("/"), *credentials, outdir)
            return
        self._prepare()
        with _staff(*credentials) as login, _server() as base_url:
            self._shoot(base_url, *login, outdir)

    def _prepare(self) -> None:
        if not Collection.objects.filter(name=demo.COLLECTION).exists():
            self.stdout.write("Loading the demo content...")
            demo.load_demo(sync=True)
        if not OverflowRejection.objects.exists():
            self.stdout.write("Recording an overflow rejection...")
            _record_rejection()
        if not Collection.objects.filter(name=GATE_COLLECTION).exists():
            self.stdout.write("Building a shadow index held below its floor...")
            _hold_a_swap()

    def _shoot(self, base_url: str, username: str, password: str, outdir: Path) -> None:
        # Imported here: playwright is a dev requirement, other commands don't need it.
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(60_000)
            _log_in(page, base_url, username, password)
            for name, show in SHOTS:
                show(page, base_url)
                page.screenshot(path=outdir / f"{name}.png")
                self.stdout.write(f"Saved {outdir / name}.png")
            browser.close()
        self.stdout.write(self.style.SUCCESS(f"Screenshots saved in {outdir}"))


def _record_rejection() -> None:
    """Ingest a demo file whose embedded metadata overflows the model's window."""
    collection, _ = Collection.objects.get_or_create(name=OVERFLOW_COLLECTION)
    collection.metadata_policy = {**collection.metadata_policy, "summary": "embed"}
    collection.save()
    path = demo.CONTENT_DIR / OVERFLOW_FILE
    source, _ = uploads.store_source(
        collection, path.name, path.read_bytes(), metadata={"summary": OVERFLOW_SUMMARY}
    )
    with contextlib.suppress(ingestion.IngestionError):
        ingestion.ingest(source.pk, source.version)


def _hold_a_swap() -> ShadowIndex:
    """A collection whose floor is set by a run of its live index, and a shadow
    index under smaller chunks that falls below it (built in this process)."""
    collection = demo.load_part(GATE_COLLECTION, GATE_FILES)
    run = evaluation.execute_run(evaluation.start_run(collection).pk)
    evaluation.raise_floor(collection, run)
    shadow = reindexing.start(collection, {"chunk_tokens": 120}, queue=False)
    reindexing.run(shadow.pk)
    return shadow


@contextlib.contextmanager
def _staff(username: str | None, password: str | None) -> Iterator[tuple[str, str]]:
    """The given login, or a temporary superuser deleted afterwards."""
    if username and password:
        yield username, password
        return
    username = f"kb-screenshots-{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)
    user = get_user_model().objects.create_superuser(username, "", password)
    try:
        yield username, password
    finally:
        user.delete()


@contextlib.contextmanager
def _server() -> Iterator[str]:
    """`runserver` on a free port of this machine, with this process's settings."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
    # --insecure: serve the admin's static files even with DEBUG off.
    cmd = [*manage, "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            base_url = f"http://127.0.0.1:{port}"
            _wait_for(base_url, proc, log)
            yield base_url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _wait_for(base_url: str, proc: subprocess.Popen, log, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            output = log.read().decode(errors="replace")
            raise CommandError(f"runserver exited:\n{output}")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"{base_url}/admin/login/", timeout=5)
            return
        time.sleep(0.3)
    raise CommandError(f"runserver did not answer on {base_url} in {timeout:.0f} s")


# --- the pages, reached through links so that --base-url works on any install ---


def _log_in(page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_load_state()
    if page.url != f"{base_url}/admin/":
        raise CommandError(f"Could not log in to {base_url} as {username!r}.")
    # Fold the admin's navigation sidebar (its state lives in localStorage): the
    # tables get the whole width.
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")


def _source_list(page, base_url: str) -> None:
    page.goto(f"{base_url}/admin/kb/source/")


def _source_statistics(page, base_url: str) -> None:
    page.goto(f"{base_url}/admin/kb/source/?q={STATS_FILE}&status__exact=indexed")
    page.locator("#result_list tbody tr th a").first.click()
    heading = page.locator("fieldset h2", has_text="Statistics")
    # Bottom-aligned, so the source's name and index status stay in view above it.
    heading.evaluate("h2 => h2.closest('fieldset').scrollIntoView({block: 'end'})")


def _policy(page, base_url: str) -> None:
    page.goto(f"{base_url}/admin/kb/collection/?q={demo.COLLECTION}")
    page.get_by_role("link", name=demo.COLLECTION, exact=True).click()
    page.get_by_role("link", name="Edit the metadata policy").click()
    page.locator("#policy-matrix").wait_for()


def _rejections(page, base_url: str) -> None:
    page.goto(f"{base_url}/admin/kb/overflowrejection/")


def _ask(page, base_url: str) -> None:
    page.goto(f"{base_url}/")
    page.fill("#id_q", QUESTION)
    page.select_option("#id_collection", label=demo.COLLECTION)
    page.click("form[role=search] button[type=submit]")
    page.locator("#answer a.cite").first.wait_for()


def _held_swap(page, base_url: str) -> None:
    page.goto(f"{base_url}/admin/kb/evalrun/dashboard/")
    with page.expect_navigation():  # dashboard.js shows the chosen collection
        page.select_option("form.kb-collection-choice select", label=GATE_COLLECTION)
    page.locator("#shadows").evaluate("div => div.scrollIntoView()")


# Asked through the page for the question log and the content gaps (issue #18):
# the demo declines the first three; the last one's answer is marked not helpful.
GAP_QUESTIONS = [
    "What's a good recipe for sourdough?",
    "How do I make a sourdough bread?",
    "What is the capital of Australia?",
]
NOT_HELPFUL = ("Can I deploy on a Friday?", "Does not say who may approve one.")


def _ask_page(page, base_url: str, question: str) -> None:
    page.goto(f"{base_url}/")
    page.fill("#id_q", question)
    page.select_option("#id_collection", label=demo.COLLECTION)
    page.click("form[role=search] button[type=submit]")
    page.locator("#feedback").wait_for()


def _gaps(page, base_url: str) -> None:
    for question in GAP_QUESTIONS:
        _ask_page(page, base_url, question)
    _ask_page(page, base_url, NOT_HELPFUL[0])
    page.fill("#id_note", NOT_HELPFUL[1])
    page.click("#feedback-not-helpful")
    page.locator("#message").wait_for()
    page.goto(f"{base_url}/admin/kb/goldencase/")
    page.get_by_role("link", name="Content gaps").click()
    page.locator("#gaps details").first.evaluate("d => { d.open = true; }")


def _question_log(page, base_url: str) -> None:
    page.goto(f"{base_url}/admin/kb/question/")


SHOTS = [
    ("source-list", _source_list),
    ("source-statistics", _source_statistics),
    ("policy-matrix", _policy),
    ("overflow-rejections", _rejections),
    ("ask", _ask),
    ("held-swap", _held_swap),
    ("content-gaps", _gaps),
    ("question-log", _question_log),
]
