"""The LLM client: no redirects (the key stays with KB_LLM_URL's host), TLS unless
loopback, and askers see a generic message, never the raw error."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.test import override_settings
from django.urls import reverse

from kb.apps import check_llm_url
from tests.base import DemoTestCase

QUESTION = "When should I roll back a deploy?"
KEY = "sk-secret-llm-key"


class _Recorder(BaseHTTPRequestHandler):
    """Answers like an OpenAI-compatible API, or with a redirect; records headers."""

    def do_POST(self):
        self.server.seen.append(dict(self.headers))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.server.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.server.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps(
            {"choices": [{"message": {"content": "Roll back when errors rise [1]."}}]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST  # urllib turns a redirected POST into a GET

    def log_message(self, *args):
        pass


def _serve(redirect_to: str = "") -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen, server.redirect_to = [], redirect_to
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


class LlmClientTestCase(DemoTestCase):
    def setUp(self):
        super().setUp()
        self.target = _serve()
        self.addCleanup(self.target.server_close)
        self.addCleanup(self.target.shutdown)

    def _ask_api(self, llm_url: str) -> dict:
        with override_settings(KB_LLM_URL=llm_url, KB_LLM_API_KEY=KEY):
            response = self.client.post(
                reverse("kb:api-ask"),
                json.dumps({"question": QUESTION, "collection": "Demo"}),
                content_type="application/json",
            )
        self.assertEqual(response.status_code, 200)
        return response.json()

    def test_a_redirect_never_carries_the_key_elsewhere(self):
        direct = self._ask_api(_url(self.target))  # the target answers when asked
        self.assertEqual(direct["answerer"], "llm")
        self.assertEqual(self.target.seen[0]["Authorization"], f"Bearer {KEY}")
        self.target.seen.clear()
        redirecting = _serve(redirect_to=_url(self.target))
        self.addCleanup(redirecting.server_close)
        self.addCleanup(redirecting.shutdown)
        with self.assertLogs("kb.llm", "ERROR") as logs:
            body = self._ask_api(_url(redirecting))
        self.assertEqual(len(redirecting.seen), 1)  # it was asked...
        self.assertEqual(self.target.seen, [])  # ...and the key went no further
        self.assertIn("302", "\n".join(logs.output))  # the detail is logged
        self.assertEqual(body["answerer"], "extractive")
        warning = " ".join(body["warnings"])
        self.assertIn("The answer service is unavailable", warning)
        for raw in ("302", "Found", "127.0.0.1", "HTTP Error"):
            self.assertNotIn(raw, warning)

    def test_the_ask_page_shows_no_raw_connection_error(self):
        closed = _serve()
        url = _url(closed)
        # nothing listens there any more (and no thread polls a closed socket,
        # which would spin and slow every later test of the session)
        closed.shutdown()
        closed.server_close()
        with (
            override_settings(KB_LLM_URL=url, KB_LLM_API_KEY=KEY),
            self.assertLogs("kb.llm", "ERROR"),
        ):
            response = self.client.get(reverse("kb:ask"), {"q": QUESTION})
        self.assertContains(response, "The answer service is unavailable")
        self.assertNotContains(response, "Connection refused")
        self.assertNotContains(response, "Errno")

    def test_plain_http_is_refused_unless_the_host_is_loopback(self):
        for url in ("http://llm.example.com/v1", "ftp://127.0.0.1/", "llm.local"):
            with override_settings(KB_LLM_URL=url):
                self.assertEqual([e.id for e in check_llm_url()], ["kb.E001"], url)
        for url in (
            "https://llm.example.com/v1",
            "http://localhost:8080/v1",
            "http://127.0.0.1:9/v1",
            "http://[::1]:9/v1",
            "",
        ):
            with override_settings(KB_LLM_URL=url):
                self.assertEqual(check_llm_url(), [], url)

    def test_a_plain_http_url_is_not_called_at_all(self):
        with self.assertLogs("kb.llm", "ERROR") as logs:
            body = self._ask_api("http://llm.example.com/v1")
        self.assertIn("must be an https:// URL", "\n".join(logs.output))
        self.assertIn("The answer service is unavailable", " ".join(body["warnings"]))
