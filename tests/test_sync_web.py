"""Website sync sources (issue #30): a real HTTP server on loopback with
robots.txt, a sitemap, ETags, a redirect and a page that starts to 404,
synced for real (real sockets, the real HTML reader, database and embedder)."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.test import SimpleTestCase, TestCase, override_settings

from kb import answering, citations, retrieval
from kb.models import Collection, SyncRun, SyncSource
from kb.sync import runs

PAGE = """<!doctype html><html><head><title>{title}</title></head><body>
<nav><a href="/docs/">Home</a> <a href="/docs/backups.html">Backups</a>
<a href="/docs/old.html">Old</a> <a href="/private/keys.html">Keys</a>
<a href="/docs/moved">Moved</a> <a href="https://elsewhere.example/">Out</a></nav>
<main><h1>{title}</h1><p>{text}</p></main></body></html>"""


class Site:
    """The pages the server answers with, changed by the tests as they go."""

    def __init__(self):
        self.pages = {
            "/docs/": ("Operations", "Start here: backups and restores."),
            "/docs/backups.html": ("Backups", "Backups run every night at 02:00."),
            "/docs/old.html": ("Old runbook", "The old runbook used tapes."),
            "/docs/restores.html": ("Restores", "A restore needs two approvals."),
            "/private/keys.html": ("Keys", "The root key is kept in the safe."),
        }
        self.requests: list[tuple[str, str, int]] = []  # path, If-None-Match, status
        self.robots = "User-agent: *\nDisallow: /private/\n"

    def body(self, path: str) -> bytes:
        title, text = self.pages[path]
        return PAGE.format(title=title, text=text).encode()

    def etag(self, path: str) -> str:
        return '"' + hashlib.sha256(self.body(path)).hexdigest()[:16] + '"'


def serve(site: Site):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path
            status, headers, body = self._answer(path)
            site.requests.append((path, self.headers.get("If-None-Match", ""), status))
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _answer(self, path):
            if path == "/robots.txt":
                return 200, {"Content-Type": "text/plain"}, site.robots.encode()
            if path == "/sitemap.xml":
                urls = "".join(
                    f"<url><loc>{base}{p}</loc></url>"
                    for p in site.pages
                    if p.startswith("/docs/")
                )
                xml = (
                    '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/'
                    f'schemas/sitemap/0.9">{urls}</urlset>'
                )
                return 200, {"Content-Type": "application/xml"}, xml.encode()
            if path == "/docs/moved":
                return 301, {"Location": "/docs/restores.html"}, b""
            if path == "/docs/away":
                return 302, {"Location": f"http://127.0.0.2:{port}/docs/"}, b""
            if path not in site.pages:
                return 404, {"Content-Type": "text/html"}, b"<h1>Not found</h1>"
            etag = site.etag(path)
            if self.headers.get("If-None-Match") == etag:
                return 304, {"ETag": etag}, b""
            return 200, {"Content-Type": "text/html", "ETag": etag}, site.body(path)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_port
    base = f"http://127.0.0.1:{port}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, base


def run_now(sync: SyncSource) -> SyncRun:
    return runs.execute(SyncRun.objects.create(sync_source=sync).pk)


def context(collection, question: str) -> str:
    return " ".join(p.text for p in retrieval.retrieve(collection, question).passages)


@override_settings(KB_SYNC_WEB_DELAY=0.0, KB_SYNC_ALLOWED_NETWORKS=["127.0.0.1/32"])
class WebsiteSyncTestCase(TestCase):
    def setUp(self):
        self.site = Site()
        self.server, self.base = serve(self.site)
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)

    def sync(self, location: str, **fields) -> SyncSource:
        number = SyncSource.objects.count()
        return SyncSource.objects.create(
            name=f"site{number}",
            collection=Collection.objects.create(name=f"Site {number}"),
            kind="website",
            location=location,
            **fields,
        )

    def files(self, sync) -> set[str]:
        return set(sync.sources.values_list("file_name", flat=True))

    def test_a_site_crawled_from_its_start_page(self):
        sync = self.sync(f"{self.base}/docs/")
        run = run_now(sync)
        self.assertEqual(run.status, SyncRun.Status.DONE, (run.error, run.failed))
        self.assertEqual(
            self.files(sync),
            {
                "127.0.0.1/docs/index.html",
                "127.0.0.1/docs/backups.html",
                "127.0.0.1/docs/old.html",
                "127.0.0.1/docs/restores.html",
            },
        )
        # robots.txt: /private/ is never asked for (and is out of the prefix).
        self.assertFalse([r for r in self.site.requests if "private" in r[0]])
        # The redirect was followed; the page is cited at its own address.
        restores = sync.sources.get(file_name="127.0.0.1/docs/restores.html")
        self.assertEqual(restores.metadata["url"], f"{self.base}/docs/restores.html")
        self.assertIn("two approvals", context(sync.collection, "restore approvals"))
        # Navigation is dropped, as for an uploaded page.
        self.assertNotIn("Keys", restores.text)
        # The answer's citation opens the page at the cited sentence.
        _, reply = answering.ask(
            sync.collection, "How many approvals does a restore need?"
        )
        cited = [c for c in reply.citations if c.source_id == restores.pk]
        self.assertTrue(cited, reply.text)
        self.assertTrue(
            cited[0].original.startswith(f"{self.base}/docs/restores.html#:~:text="),
            cited[0].original,
        )

        # Again: every page answers 304 to its ETag; nothing read or embedded.
        self.site.requests.clear()
        again = run_now(sync)
        self.assertEqual((again.unchanged, again.chunks_embedded), (4, 0))
        statuses = {path: status for path, _, status in self.site.requests}
        self.assertEqual(statuses["/docs/backups.html"], 304)

        # A page changes, one starts to 404.
        self.site.pages["/docs/backups.html"] = (
            "Backups",
            "Backups run every night at 03:30.",
        )
        del self.site.pages["/docs/old.html"]
        third = run_now(sync)
        self.assertEqual((third.changed, third.deleted), (1, 1))
        self.assertNotIn("127.0.0.1/docs/old.html", self.files(sync))
        self.assertIn("03:30", context(sync.collection, "When do backups run?"))

    def test_a_site_from_its_sitemap(self):
        sync = self.sync(f"{self.base}/sitemap.xml", url_prefix=f"{self.base}/docs/")
        run = run_now(sync)
        self.assertEqual(run.added, 4, run.failed)

    def test_a_page_that_fails_keeps_its_source(self):
        sync = self.sync(f"{self.base}/docs/")
        run_now(sync)
        self.server.shutdown()  # the site goes away
        self.server.server_close()
        run = run_now(sync)
        self.assertEqual(run.status, SyncRun.Status.FAILED)
        self.assertIn("cannot be reached: Connection refused", run.error)
        self.assertNotIn("HTTPConnection", run.error)  # words, not a repr
        self.assertEqual(len(self.files(sync)), 4)  # nothing deleted on doubt

    def test_the_page_limit(self):
        sync = self.sync(f"{self.base}/docs/", page_limit=2)
        run = run_now(sync)
        self.assertEqual(run.added, 2)
        self.assertIn("page limit of 2 reached", run.failed[-1]["reason"])

    def test_private_addresses_are_refused_after_redirects_too(self):
        # 127.0.0.2 is loopback too, and not among the allowed networks.
        self.site.pages["/docs/"] = ("Operations", "Start.")
        run = run_now(self.sync(f"{self.base}/docs/away"))
        refused = [f["reason"] for f in run.failed]
        self.assertTrue(
            any("127.0.0.2" in r and "private or local" in r for r in refused)
        )
        self.site.requests.clear()
        with override_settings(KB_SYNC_ALLOWED_NETWORKS=[]):  # the default
            run = run_now(self.sync(f"{self.base}/docs/"))
        self.assertEqual(run.status, SyncRun.Status.FAILED)
        self.assertIn("private or local address", run.error)
        self.assertEqual(self.site.requests, [])  # refused before connecting

    def test_robots_txt_is_obeyed(self):
        self.site.robots = "User-agent: *\nDisallow: /docs/restores.html\n"
        sync = self.sync(f"{self.base}/docs/")
        run = run_now(sync)
        self.assertNotIn("127.0.0.1/docs/restores.html", self.files(sync))
        self.assertFalse([r for r in self.site.requests if "restores" in r[0]])
        # It is reached only through /docs/moved's redirect: checked there too.
        self.assertIn(
            {
                "path": "127.0.0.1/docs/moved.html",
                "reason": f"redirected to {self.base}/docs/restores.html, which "
                "robots.txt disallows",
            },
            run.failed,
        )
        self.site.robots = "User-agent: *\nDisallow: /docs/old.html\n"
        run = run_now(sync)
        self.assertIn(
            {"path": "127.0.0.1/docs/old.html", "reason": "robots.txt disallows it"},
            run.failed,
        )


class WebsiteCommandTestCase(TestCase):
    def test_add_a_website(self):
        from io import StringIO

        from django.core.management import call_command
        from django.core.management.base import CommandError

        call_command(
            "kb_sync",
            "add",
            "manual",
            "--collection",
            "Manual",
            "--site",
            "https://docs.example.org/manual/sitemap.xml",
            "--prefix",
            "https://docs.example.org/manual/",
            "--pages",
            "50",
            stdout=StringIO(),
        )
        sync = SyncSource.objects.get(name="manual")
        self.assertEqual(
            (sync.kind, sync.url_prefix, sync.page_limit),
            ("website", "https://docs.example.org/manual/", 50),
        )
        with self.assertRaisesMessage(CommandError, "http or https address"):
            call_command(
                "kb_sync",
                "add",
                "ftp",
                "--collection",
                "Manual",
                "--site",
                "ftp://docs.example.org/",
                stdout=StringIO(),
            )


class TextFragmentTestCase(SimpleTestCase):
    def test_a_link_that_opens_the_page_at_the_cited_text(self):
        url = "https://docs.example.org/guide.html"
        self.assertEqual(
            citations.text_fragment_url(url + "#top", "A restore needs two approvals."),
            f"{url}#:~:text=A%20restore%20needs%20two%20approvals.",
        )
        long = (
            "Backups run every night at 02:00, and are kept for 35 days in the vault."
        )
        self.assertEqual(
            citations.text_fragment_url(url, long),
            f"{url}#:~:text=Backups%20run%20every%20night,days%20in%20the%20vault.",
        )
        # Markdown marks are not in the page; the syntax's own characters are
        # escaped; only web addresses get a link.
        self.assertEqual(
            citations.text_fragment_url(url, "Use **pg_dump** - see [docs](x.html)"),
            f"{url}#:~:text=Use%20pg_dump%20%2D%20see%20docs",
        )
        self.assertEqual(citations.text_fragment_url("javascript:alert(1)", "x"), "")
        self.assertEqual(citations.text_fragment_url(url, "  "), "")

    def test_the_fragment_quotes_the_text_as_the_page_shows_it(self):
        # A browser finds a fragment only as the page's text reads: code
        # without its backticks, escapes undone, no list marker or pipes
        # (QA over rustdoc and pydoc pages: "env::var() ." and "_ _all _ _"
        # were found nowhere).
        url = "https://docs.example.org/env.html"
        for cited, shown in [
            ("Returned from `env::var()`.", "Returned%20from%20env%3A%3Avar%28%29."),
            ("\\_\\_all\\_\\_ lists it.", "__all__%20lists%20it."),
            ("- The *first* item", "The%20first%20item"),
            ("| `-S` | slot name |", "%2DS%20slot%20name"),
            ("Compute 5 * 3 here", "Compute%205%20%2A%203%20here"),
            # MDN's macro, a definition's mark, a GitHub alert's label
            ('The {{cssxref("color")}} property.', "The%20color%20property."),
            ("limit\n: Integer. At most 40.", "limit%20Integer.%20At%20most%2040."),
            ("> [!WARNING]\n> Never run it.", "Never%20run%20it."),
        ]:
            with self.subTest(cited=cited):
                self.assertEqual(
                    citations.text_fragment_url(url, cited), f"{url}#:~:text={shown}"
                )
