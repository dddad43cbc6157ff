"""Rate limits, deployment settings and browser protections (issue #15, items 3-4)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import django_rq
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_login_failed
from django.core.files.base import ContentFile
from django.test import TestCase, override_settings
from django.urls import reverse
from playwright.sync_api import Page

from kb import access, ratelimit
from kb.models import Chunk, Collection, GoldenCase, Question, Section, Source
from tests.base import DemoTestCase, make_users

LOGIN_URL = "/admin/login/"
LOCKED = "Too many failed attempts; try again in 15 minutes."


def clear_rate_limits() -> None:
    """Forget every counter: the test process's Redis database outlives them."""
    redis = django_rq.get_connection("default")
    keys = list(redis.scan_iter(match=ratelimit.PREFIX + "*"))
    if keys:
        redis.delete(*keys)


def closed_port_redis() -> dict:
    """RQ_QUEUES pointing at a port nothing listens on: Redis is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"default": {"URL": f"redis://127.0.0.1:{port}", "DB": 1}}


class LoginLockoutTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.staff, cls.editor, cls.alice = make_users()

    def setUp(self):
        clear_rate_limits()
        self.addCleanup(clear_rate_limits)

    def login(self, username: str, password: str, **extra):
        data = {"username": username, "password": password}
        return self.client.post(LOGIN_URL, data, **extra)

    def assertLoggedIn(self, response, expected: bool = True) -> None:
        self.assertEqual(response.status_code, 302 if expected else 200)
        self.assertEqual("_auth_user_id" in self.client.session, expected)

    def test_it_refuses_the_sixth_password_and_then_the_right_one(self):
        for _ in range(5):
            r = self.login("staff", "wrong")
            self.assertContains(r, "Please enter the correct username")
        r = self.login("staff", "wrong")
        self.assertContains(r, LOCKED)
        r = self.login("staff", "pw-staff-1")
        self.assertContains(r, LOCKED)
        self.assertLoggedIn(r, False)

    def test_it_checks_no_password_while_locked(self):
        for _ in range(5):
            self.login("staff", "wrong")
        checked = []

        def count(sender, **kwargs):
            checked.append(kwargs["credentials"]["username"])

        # authenticate() signals every failure: a locked attempt never gets there.
        user_login_failed.connect(count)
        self.addCleanup(user_login_failed.disconnect, count)
        for _ in range(3):
            self.assertContains(self.login("staff", "wrong"), LOCKED)
        self.assertEqual(checked, [])

    @override_settings(KB_LOGIN_MAX_FAILURES_PER_IP=4)
    def test_it_counts_failures_per_address_across_user_names(self):
        for name in ["staff", "editor", "alice", "nobody"]:
            self.assertLoggedIn(self.login(name, "wrong"), False)
        r = self.login("editor", "pw-editor-1")
        self.assertContains(r, LOCKED)
        # The user names are not locked: from another address, editor logs in.
        r = self.login("editor", "pw-editor-1", REMOTE_ADDR="10.0.0.9")
        self.assertLoggedIn(r)

    @override_settings(KB_LOGIN_MAX_FAILURES_PER_IP=4)
    def test_a_client_cannot_escape_by_sending_x_forwarded_for(self):
        for n, name in enumerate(["a", "b", "c", "d"]):
            self.login(name, "wrong", HTTP_X_FORWARDED_FOR=f"10.1.1.{n}")
        r = self.login("editor", "pw-editor-1", HTTP_X_FORWARDED_FOR="10.1.1.9")
        self.assertContains(r, LOCKED)

    @override_settings(KB_LOGIN_MAX_FAILURES_PER_IP=4, KB_TRUSTED_PROXIES=1)
    def test_behind_a_trusted_proxy_the_forwarded_address_counts(self):
        for name in ["a", "b", "c", "d"]:
            self.login(name, "wrong", HTTP_X_FORWARDED_FOR="spoof, 203.0.113.7")
        r = self.login("editor", "pw-editor-1", HTTP_X_FORWARDED_FOR="203.0.113.7")
        self.assertContains(r, LOCKED)
        r = self.login("editor", "pw-editor-1", HTTP_X_FORWARDED_FOR="203.0.113.8")
        self.assertLoggedIn(r)

    def test_a_successful_login_forgets_the_user_s_failures(self):
        for _ in range(4):
            self.login("staff", "wrong")
        self.assertLoggedIn(self.login("staff", "pw-staff-1"))
        self.client.logout()
        for _ in range(4):
            self.login("staff", "wrong")
        self.assertLoggedIn(self.login("staff", "pw-staff-1"))

    def test_logins_work_while_redis_is_down(self):
        with (
            override_settings(RQ_QUEUES=closed_port_redis()),
            self.assertLogs("kb.ratelimit", "WARNING") as logs,
        ):
            for _ in range(6):
                self.login("staff", "wrong")
            self.assertLoggedIn(self.login("staff", "pw-staff-1"))
        self.assertIn("not limited", logs.output[0])


@override_settings(KB_ASK_PER_MINUTE=2)
class QuestionLimitTestCase(DemoTestCase):
    def setUp(self):
        super().setUp()
        clear_rate_limits()
        self.addCleanup(clear_rate_limits)

    def api(self, token: str | None = None):
        body = json.dumps({"question": "How do I roll back?", "collection": "Demo"})
        extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
        return self.client.post(
            "/api/ask", body, content_type="application/json", **extra
        )

    def page(self):
        return self.client.get("/", {"q": "How do I roll back?", "collection": ""})

    def test_the_api_answers_the_third_question_in_a_minute_with_429(self):
        token = access.create_token(self.staff, "test")
        self.client.logout()
        for _ in range(2):
            self.assertEqual(self.api(token).status_code, 200)
        r = self.api(token)
        self.assertEqual(r.status_code, 429)
        self.assertEqual(r["Content-Type"], "application/json")
        self.assertIn("Too many questions: at most 2 a minute", r.json()["error"])
        self.assertTrue(1 <= int(r["Retry-After"]) <= 60)
        self.assertIn("no-store", r["Cache-Control"])

    def test_a_user_s_session_and_tokens_share_the_count(self):
        token = access.create_token(self.staff, "test")
        self.assertEqual(self.api().status_code, 200)
        self.assertEqual(self.page().status_code, 200)
        self.assertEqual(self.api(token).status_code, 429)
        # Another user has a count of their own.
        self.client.force_login(self.editor)
        self.assertEqual(self.api().status_code, 200)

    def test_the_ask_page_answers_429_with_the_message(self):
        for _ in range(2):
            self.assertContains(self.page(), 'id="answer"')
        r = self.page()
        message = "Too many questions: at most 2 a minute"
        self.assertContains(r, message, status_code=429)
        self.assertNotContains(r, 'id="answer"', status_code=429)
        self.assertTrue(1 <= int(r["Retry-After"]) <= 60)

    def test_bad_api_requests_do_not_spend_the_limit(self):
        bodies = ["{bad", json.dumps({"question": ""}), json.dumps({"question": 5})]
        for body in bodies * 2:
            r = self.client.post("/api/ask", body, content_type="application/json")
            self.assertEqual(r.status_code, 400)
        for _ in range(2):
            self.assertEqual(self.api().status_code, 200)
        self.assertEqual(self.api().status_code, 429)

    def test_bad_ask_pages_do_not_spend_the_limit(self):
        for _ in range(3):
            r = self.client.get("/", {"q": "", "collection": ""})
            self.assertContains(r, "This field is required", status_code=400)
        for _ in range(2):
            self.assertContains(self.page(), 'id="answer"')
        r = self.page()
        self.assertContains(r, "Too many questions", status_code=429)
        self.assertNotContains(r, "This field is required", status_code=429)
        self.assertContains(r, "Your recent questions", status_code=429)

    @override_settings(KB_ASK_PER_MINUTE=0)
    def test_zero_turns_the_limit_off(self):
        for _ in range(4):
            self.assertEqual(self.api().status_code, 200)

    def test_questions_are_answered_while_redis_is_down(self):
        with (
            override_settings(RQ_QUEUES=closed_port_redis()),
            self.assertLogs("kb.ratelimit", "WARNING"),
        ):
            for _ in range(3):
                self.assertEqual(self.api().status_code, 200)
                self.assertContains(self.page(), 'id="answer"')


class _InlineCode(HTMLParser):
    """Collects what a Content-Security-Policy without 'unsafe-inline' blocks."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        names = {name for name, _ in attrs}
        data = dict(attrs).get("type") == "application/json"  # never run: allowed
        if tag == "style" or (tag == "script" and "src" not in names and not data):
            self.found.append(f"<{tag}> element")
        self.found += [f"{name}= on <{tag}>" for name in names if name == "style"]
        self.found += [f"{name}= on <{tag}>" for name in names if name[:2] == "on"]


class _Described(HTMLParser):
    """Collects the ids on a page and the ids its aria-describedby point at."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.described_by: set[str] = set()

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"])
        self.described_by.update((found.get("aria-describedby") or "").split())


class ContentSecurityPolicyTestCase(DemoTestCase):
    """Every page kb serves sends the policy and holds nothing it would block."""

    def setUp(self):
        super().setUp()
        clear_rate_limits()
        source = self.demo.sources.order_by("pk").first()
        source.status = Source.Status.QUEUED  # the auto-refresh script is included
        source.save(update_fields=["status"])
        self.source = source
        self.case = GoldenCase.objects.create(
            collection=self.demo,
            external_id="c1",
            question="Why?",
            kind="definition",
            required_spans=[
                {
                    "file": source.file_name,
                    "start": 0,
                    "end": 5,
                    "text": source.text[:5],
                }
            ],
        )

    def pages(self) -> list[str]:
        chunk = Chunk.objects.filter(source=self.source).first()
        section = Section.objects.filter(source=self.source).first()
        return [
            "/?" + f"q=How+do+I+roll+back%3F&collection={self.demo.pk}",
            reverse("kb:section", args=[section.pk]) + "?start=0&end=9",
            "/admin/",
            "/admin/kb/source/",
            f"/admin/kb/source/{self.source.pk}/change/",
            "/admin/kb/source/upload/",
            f"/admin/kb/chunk/{chunk.pk}/change/",
            "/admin/kb/collection/",
            f"/admin/kb/collection/{self.demo.pk}/change/",
            f"/admin/kb/collection/{self.demo.pk}/policy/",
            "/admin/kb/goldencase/",
            "/admin/kb/goldencase/add/",
            f"/admin/kb/goldencase/{self.case.pk}/change/",
            "/admin/kb/goldencase/import/",
            "/admin/kb/evalrun/dashboard/",
        ]

    def test_every_page_sends_the_policy_and_has_no_inline_code(self):
        for url in self.pages():
            with self.subTest(url=url):
                r = self.client.get(url)
                self.assertEqual(r.status_code, 200)
                policy = r["Content-Security-Policy"]
                self.assertIn("default-src 'self'", policy)
                self.assertNotIn("unsafe-inline", policy)
                parser = _InlineCode()
                parser.feed(r.content.decode())
                self.assertEqual(parser.found, [])

    def test_every_aria_describedby_points_at_an_id_on_the_page(self):
        self.client.get(self.pages()[0])  # logs the question: its page too
        entry = Question.objects.get()
        for url in [*self.pages(), reverse("kb:question", args=[entry.pk])]:
            with self.subTest(url=url):
                parser = _Described()
                parser.feed(self.client.get(url).content.decode())
                self.assertEqual(parser.described_by - parser.ids, set())

    def test_the_login_page_and_errors_send_it_too(self):
        self.client.logout()
        for url in [LOGIN_URL, "/kb/sections/0/", "/api/ask"]:
            with self.subTest(url=url):
                self.assertIn(
                    "default-src 'self'",
                    self.client.get(url).headers.get("Content-Security-Policy", ""),
                )


class NoStoreTestCase(DemoTestCase):
    """Pages and files showing source text are never kept in a cache."""

    def test_source_text_is_not_cached(self):
        source = self.demo.sources.order_by("pk").first()
        source.file.save("no-store.md", ContentFile(source.text.encode()))
        section = Section.objects.filter(source=source).first()
        for url in [
            reverse("kb:section", args=[section.pk]),
            reverse("kb:source-file", args=[source.pk]),
            f"/?q=roll+back&collection={self.demo.pk}",
            f"/admin/kb/goldencase/sources/?collection={self.demo.pk}",
        ]:
            with self.subTest(url=url):
                r = self.client.get(url)
                self.assertEqual(r.status_code, 200)
                self.assertIn("no-store", r["Cache-Control"])


def _production_env(**extra: str) -> dict[str, str]:
    """This checkout's environment as a deployment sees it: no test detection,
    DEBUG off and a real secret key (the embedded servers are the same)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_VERSION", "KB_TESTING", "DEBUG", "KB_REDIS_DB")
        and not k.startswith(("KB_INSECURE", "KB_PROXY", "SECURE_"))
    }
    return {**env, "DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(50), **extra}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    manage = Path(settings.BASE_DIR) / "manage.py"
    return subprocess.run(
        [sys.executable, str(manage), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# A request through the production settings, behind a proxy that terminates TLS.
_THROUGH_PROXY = """
from django.test import Client
client = Client(SERVER_NAME="localhost")
plain = client.get("/admin/login/")
print("plain", plain.status_code, plain["Location"])
tls = client.get("/admin/login/", HTTP_X_FORWARDED_PROTO="https")
print("tls", tls.status_code, tls["Strict-Transport-Security"])
print("cookie", tls.cookies["csrftoken"]["secure"])
"""


@pytest.mark.slow
class DeploymentSettingsTestCase(TestCase):
    def test_check_deploy_reports_nothing_with_the_defaults(self):
        result = _manage(
            "check", "--deploy", "--fail-level", "WARNING", env=_production_env()
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("System check identified no issues", result.stdout)

    def test_a_command_without_a_secret_key_says_so_in_one_line(self):
        env = _production_env()
        del env["SECRET_KEY"]
        result = _manage("kb_ask", "--help", env=env)
        self.assertEqual(result.returncode, 1)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(
            result.stderr.strip(),
            "error: SECRET_KEY must be set when DEBUG is off (or set DEBUG=1 on "
            "a development machine; see README.md)",
        )

    def test_the_plain_http_opt_out_is_reported_by_check_deploy(self):
        env = _production_env(KB_INSECURE_HTTP="1")
        result = _manage("check", "--deploy", env=env)
        for warning in ["W004", "W008", "W012", "W016"]:
            self.assertIn(f"security.{warning}", result.stderr)

    def test_behind_a_tls_proxy_http_is_redirected_and_https_served(self):
        env = _production_env(KB_PROXY_SSL_HEADER="X-Forwarded-Proto")
        result = _manage("shell", "-c", _THROUGH_PROXY, env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertIn("plain 301 https://localhost/admin/login/", lines)
        self.assertIn("tls 200 max-age=31536000; includeSubDomains", lines)
        self.assertIn("cookie True", lines)


@pytest.mark.slow
def test_pages_raise_no_csp_violation_in_chromium(
    transactional_db,
    live_server,
    page: Page,  # noqa: F811 (tests.test_browser's fixture)
):
    """The pages work under the policy: the span picker, the auto-refresh script and
    the dashboard's collection menu run, and Chromium reports no violation."""
    clear_rate_limits()
    get_user_model().objects.create_superuser("staff", "s@example.invalid", "pw-1")
    collection = Collection.objects.create(name="Animals")
    other = Collection.objects.create(name="Birds")
    text = "# Animals\n\nThe quick brown fox jumps over the lazy dog.\n"
    source = Source.objects.create(
        collection=collection,
        title="Animals",
        file_name="animals.md",
        text=text,
        status=Source.Status.QUEUED,
    )
    violations: list[str] = []
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
    )
    page.on(
        "console",
        lambda m: (
            violations.append(m.text)
            if "CSP" in m.text or "Content Security Policy" in m.text
            else None
        ),
    )
    url = live_server.url
    page.goto(f"{url}/admin/login/?next=/admin/")
    page.fill("#id_username", "staff")
    page.fill("#id_password", "pw-1")
    page.click("input[type=submit]")
    page.wait_for_url(f"{url}/admin/")

    # The span picker loads the collection's sources through its own script.
    page.goto(f"{url}/admin/kb/goldencase/add/")
    page.select_option("#id_collection", str(collection.pk))
    page.select_option("#kb-span-file", "animals.md")
    picked = page.locator(".kb-span-source")
    assert picked.inner_text().startswith("# Animals")
    assert picked.evaluate("pre => getComputedStyle(pre).whiteSpace") == "pre-wrap"

    # The dashboard's menu shows another collection as soon as it is chosen.
    page.goto(f"{url}/admin/kb/evalrun/dashboard/?collection={collection.pk}")
    page.select_option("select[name=collection]", str(other.pk))
    page.wait_for_url(f"{url}/admin/kb/evalrun/dashboard/?collection={other.pk}")

    # The source page refreshes itself while the source is being indexed.
    page.goto(f"{url}/admin/kb/source/{source.pk}/change/")
    page.evaluate("window.kbMarker = 1")
    page.wait_for_event("load", timeout=10_000)
    assert page.evaluate("window.kbMarker") is None

    page.goto(f"{url}/admin/kb/source/")
    page.goto(f"{url}/admin/kb/collection/{collection.pk}/policy/")
    page.goto(f"{url}/")
    # Styles come from the stylesheet, not from inline style attributes.
    logout = page.locator("header form.logout")
    assert logout.evaluate("f => getComputedStyle(f).marginLeft") != "0px"
    assert violations == []
