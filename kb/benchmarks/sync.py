"""`kb_bench sync` (issue #30): a generated Git repository, the same files in a
folder, and as the pages of a site on loopback (a sitemap, ETags), synced
through the steps an origin goes through:

1. the first sync;
2. a sync with nothing changed (the issue's target: under 5 s, nothing parsed
   or embedded);
3. 10 files edited by one paragraph, and one paragraph of the largest file;
4. 50 files deleted (each checked gone from the collection's sources).

The files are the shared corpora's Markdown (each at most MAX_FILE_BYTES),
repeated with their digits shifted (kb.benchmarks.corpus.synthesize) until
`files` of them (`pages` for the site); every title is tagged with the run
and the origin's kind, so no stored chunk's vector is reused by the first
sync. Runs happen in this
process (kb.sync.runs.execute, as a worker's job does).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

from django.conf import settings
from django.test.utils import override_settings

from kb.benchmarks.corpus import SHARED, Doc, Progress, load_documents, synthesize
from kb.benchmarks.reuse import edited
from kb.models import Collection, Source, SyncRun, SyncSource
from kb.sync import runs

MAX_FILE_BYTES = 64_000
EDITED, DELETED = 10, 50


@dataclass
class Step:
    kind: str
    name: str
    run: dict[str, Any]
    check: str = ""


@dataclass
class SyncReport:
    files: int
    megabytes: float
    steps: list[Step] = field(default_factory=list)
    # Per origin kind: (files, MB of Markdown).
    sizes: dict[str, tuple[int, float]] = field(default_factory=dict)


def documents(files: int, tag: str) -> dict[str, str]:
    docs = [
        doc
        for doc in load_documents([(SHARED / "corpora", "**/*.md")])
        if len(doc.text.encode()) <= MAX_FILE_BYTES
    ]
    average = sum(doc.size for doc in docs) / len(docs)
    # synthesize() skips documents that would overshoot its byte target: aim
    # past it and take the first `files`.
    chosen = synthesize(docs, int(average * files * 2))[:files]
    return {doc.name: _tagged(doc, tag) for doc in chosen}


def _tagged(doc: Doc, tag: str) -> str:
    first, _, rest = doc.text.partition("\n")
    return f"{first} ({tag})\n{rest}"


def run(files: int, progress: Progress, pages: int | None = None) -> SyncReport:
    """Sync `files` generated files through the Git and folder origins, and
    `pages` of them (default `files`) through the site."""
    tag = time.strftime("%Y%m%d-%H%M%S")
    top = Path(tempfile.mkdtemp(prefix="bench-sync-", dir=settings.KB_DATA_DIR))
    report = SyncReport(files, 0.0)
    try:
        # The site is served on loopback, without a pause between requests.
        local = {"KB_SYNC_ALLOWED_NETWORKS": ["127.0.0.1/32"], "KB_SYNC_WEB_DELAY": 0}
        with override_settings(KB_SYNC_ROOTS=[str(top)], **local):
            for kind in ("git", "folder", "website"):
                count = files if kind != "website" or pages is None else pages
                texts = documents(count, f"{kind} {tag}")
                report.megabytes = sum(len(t.encode()) for t in texts.values()) / 1e6
                report.sizes[kind] = (len(texts), report.megabytes)
                origin = (
                    GitOrigin(top)
                    if kind == "git"
                    else _FolderOrigin(top)
                    if kind == "folder"
                    else _SiteOrigin()
                )
                try:
                    report.steps += _steps(kind, origin, texts, tag, progress)
                finally:
                    origin.close()
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return report


def _steps(kind, origin, texts: dict[str, str], tag: str, progress) -> list[Step]:
    collection = Collection.objects.create(name=f"bench-sync-{kind}-{tag}")
    sync = SyncSource.objects.create(
        name=f"bench-sync-{kind}-{tag}",
        collection=collection,
        kind=kind,
        location=origin.location,
        branch="main",
        url_prefix=getattr(origin, "prefix", ""),
        page_limit=len(texts) + 1,
    )
    steps = []
    try:
        origin.write(texts)
        steps.append(_step(kind, "first sync", sync, progress))
        steps.append(_step(kind, "nothing changed", sync, progress))
        names = sorted(texts)
        largest = max(names, key=lambda name: len(texts[name]))
        changed = {n: edited(texts[n]) for n in names[:EDITED] + [largest]}
        origin.write(changed)
        steps.append(
            _step(
                kind, f"{len(changed)} files edited, one paragraph each", sync, progress
            )
        )
        gone = names[-DELETED:]
        origin.delete(gone)
        step = _step(kind, f"{len(gone)} files deleted", sync, progress)
        left = Source.objects.filter(
            collection=collection, file_name__in=[origin.source_name(n) for n in gone]
        )
        step.check = f"{left.count()} of the deleted files still sources"
        steps.append(step)
    finally:
        collection.delete()
        sync.delete()
    return steps


def _step(kind: str, name: str, sync: SyncSource, progress) -> Step:
    progress(f"{kind}: {name}")
    run = runs.execute(SyncRun.objects.create(sync_source=sync).pk)
    return Step(kind, name, run.as_json())


class _FolderOrigin:
    def __init__(self, top: Path):
        self.root = top / "folder"
        self.location = str(self.root)

    def source_name(self, name: str) -> str:
        return name

    def close(self) -> None:
        pass

    def write(self, texts: dict[str, str]) -> None:
        write_files(self.root, texts)

    def delete(self, names: list[str]) -> None:
        for name in names:
            (self.root / name).unlink()


def write_files(root: Path, texts: dict[str, str]) -> None:
    for name, text in texts.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


class GitOrigin:
    """A working repository whose commits are pushed to a bare one, the origin
    a Git sync reads (`location`); the sync tests use it too."""

    def __init__(self, top: Path):
        from dulwich import porcelain

        self.work, self.bare = top / "work", top / "origin.git"
        self.location = str(self.bare)
        self.repo = porcelain.init(str(self.work))
        self.repo.refs.set_symbolic_ref(b"HEAD", b"refs/heads/main")
        porcelain.init(str(self.bare), bare=True)

    def source_name(self, name: str) -> str:
        return name

    def close(self) -> None:
        self.repo.close()

    def write(self, texts: dict[str, str]) -> None:
        self.commit(texts)

    def delete(self, names: list[str]) -> None:
        self.commit({}, removed=names)

    def commit(self, files: dict[str, str], removed=(), moved=()) -> str:
        """Write, move and remove files, commit and push; the commit's id."""
        from dulwich import porcelain

        write_files(self.work, files)
        for old, new in moved:
            porcelain.mv(self.repo, str(self.work / old), str(self.work / new))
        if removed:
            porcelain.rm(self.repo, [str(self.work / name) for name in removed])
        porcelain.add(self.repo, [str(self.work / name) for name in files])
        sha = porcelain.commit(
            self.repo,
            message=b"docs",
            author=b"kb <kb@localhost>",
            committer=b"kb <kb@localhost>",
        )
        porcelain.push(
            self.repo,
            str(self.bare),
            b"refs/heads/main",
            outstream=BytesIO(),
            errstream=BytesIO(),
        )
        return sha.decode()


class _SiteOrigin:
    """The files as HTML pages of a site on loopback: robots.txt, a sitemap of
    every page, an ETag per page (304 to a matching If-None-Match), 404 for a
    page deleted."""

    def __init__(self):
        import threading
        from http.server import ThreadingHTTPServer

        self.pages: dict[str, bytes] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.location, self.prefix = f"{self.base}/sitemap.xml", f"{self.base}/"

    @staticmethod
    def path(name: str) -> str:
        return "/" + name.rsplit(".", 1)[0] + ".html"

    def source_name(self, name: str) -> str:
        return "127.0.0.1" + self.path(name)

    def write(self, texts: dict[str, str]) -> None:
        from markdown_it import MarkdownIt

        render = MarkdownIt("commonmark").enable("table").render
        for name, text in texts.items():
            body = render(text)
            self.pages[self.path(name)] = (
                f"<!doctype html><html><head><title>{name}</title></head><body>"
                f"<nav><a href='/'>Home</a></nav><main>{body}</main></body></html>"
            ).encode()

    def delete(self, names: list[str]) -> None:
        for name in names:
            del self.pages[self.path(name)]

    def sitemap(self) -> bytes:
        urls = "".join(f"<url><loc>{self.base}{p}</loc></url>" for p in self.pages)
        return (
            '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/'
            f'sitemap/0.9">{urls}</urlset>'
        ).encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(site: _SiteOrigin):
    import hashlib
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            headers = {"Content-Type": "text/html; charset=utf-8"}
            if self.path == "/robots.txt":
                status, body = 200, b"User-agent: *\nAllow: /\n"
            elif self.path == "/sitemap.xml":
                status, body = 200, site.sitemap()
            elif self.path in site.pages:
                body = site.pages[self.path]
                etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
                headers["ETag"] = etag
                status = 304 if self.headers.get("If-None-Match") == etag else 200
                body = b"" if status == 304 else body
            else:
                status, body = 404, b"not found"
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Handler


def markdown(report: SyncReport) -> str:
    sizes = "; ".join(
        f"{kind} {count} files, {mb:.1f} MB"
        for kind, (count, mb) in report.sizes.items()
    )
    lines = [
        f"Markdown per origin: {sizes}.",
        "",
        "| origin | step | added | changed | renamed | deleted | unchanged "
        "| failed | chunks embedded | chunks reused | seconds | check |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for step in report.steps:
        r = step.run
        lines.append(
            f"| {step.kind} | {step.name} | {r['added']} | {r['changed']} "
            f"| {r['renamed']} | {r['deleted']} | {r['unchanged']} "
            f"| {len(r['failed'])} | {r['chunks_embedded']} | {r['chunks_reused']} "
            f"| {r['seconds']:.1f} | {step.check} |"
        )
    return "\n".join(lines) + "\n"


def as_json(report: SyncReport) -> dict[str, Any]:
    return {
        "files": report.files,
        "megabytes": report.megabytes,
        "sizes": {
            kind: {"files": count, "megabytes": mb}
            for kind, (count, mb) in report.sizes.items()
        },
        "steps": [vars(step) for step in report.steps],
    }
