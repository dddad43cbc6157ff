"""A website as a sync origin (issue #30): the pages under a URL prefix, found
from a sitemap.xml or by following links from a start page, read through the
HTML reader like an uploaded page (navigation and boilerplate dropped).

- **Polite**: robots.txt is obeyed (its Disallow lines and Crawl-delay), and
  requests wait KB_SYNC_WEB_DELAY seconds between them. Each page is asked for
  with the ETag or Last-Modified it had (a conditional GET): an unchanged page
  answers 304 and is not read again.
- **Safe**: every address a host name resolves to is checked before the
  connection, after each redirect too, and the connection goes to the address
  checked (no second lookup to rebind): loopback, private, link-local,
  multicast and reserved addresses are refused unless the deployment allows
  them (KB_SYNC_ALLOWED_NETWORKS). Only http and https; at most
  MAX_REDIRECTS redirects; bodies cut at the upload limit.
- **Nothing deleted on doubt**: a page that answered 404 or 410, or that the
  sitemap or the links no longer name, is gone; one that failed otherwise
  (an error, a timeout, robots.txt) or that the page limit left unvisited keeps
  its source.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

from django.conf import settings
from django.utils.translation import gettext as _

from kb.sync.origins import Entry, Listing, OriginError, patterns, wanted

MAX_REDIRECTS = 5
MAX_SITEMAPS = 20  # sitemaps read from one sitemap index
TIMEOUT = 20.0  # seconds per request
PAGE_TYPES = ("text/html", "application/xhtml+xml")


class FetchError(Exception):
    """One URL could not be fetched; the reason is the message."""


@dataclass
class Response:
    url: str  # after redirects
    status: int
    headers: dict[str, str]
    body: bytes


def _connection_problem(exc: Exception) -> str:
    """What went wrong in words ("Connection refused"), not urllib3's
    repr of its connection object: the socket error under it, or a timeout."""
    import urllib3

    seen: BaseException | None = exc
    for _depth in range(5):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, urllib3.exceptions.TimeoutError):
        return _("no answer in time")
    return str(exc)


class Fetcher:
    """GET with the address checks, redirects followed by hand, and a pause
    between requests."""

    def __init__(self, delay: float):
        self.delay, self._last = delay, 0.0
        self.allowed = lambda url: True  # robots.txt, once read
        self.networks = [
            ipaddress.ip_network(n, strict=False)
            for n in settings.KB_SYNC_ALLOWED_NETWORKS
        ]

    def get(self, url: str, headers: dict[str, str] | None = None) -> Response:
        for _hop in range(MAX_REDIRECTS + 1):
            response = self._one(url, headers or {})
            location = response.headers.get("location")
            if response.status in (301, 302, 303, 307, 308) and location:
                url = urljoin(url, location)
                if not self.allowed(url):
                    raise FetchError(
                        _("redirected to %(url)s, which robots.txt disallows")
                        % {"url": url}
                    )
                continue
            return response
        raise FetchError(_("more than %(count)d redirects") % {"count": MAX_REDIRECTS})

    def _one(self, url: str, headers: dict[str, str]) -> Response:
        import urllib3

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(_("not an http or https address: %(url)s") % {"url": url})
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = self.address(host, port)
        self._wait()
        common = {"port": port, "timeout": TIMEOUT, "retries": False, "maxsize": 1}
        if parts.scheme == "https":
            pool = urllib3.HTTPSConnectionPool(
                address, server_hostname=host, assert_hostname=host, **common
            )
        else:
            pool = urllib3.HTTPConnectionPool(address, **common)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        sent = {
            "Host": parts.netloc,
            "User-Agent": settings.KB_SYNC_USER_AGENT,
            **headers,
        }
        try:
            raw = pool.request(
                "GET", target, headers=sent, redirect=False, preload_content=False
            )
            body = raw.read(settings.KB_MAX_UPLOAD_BYTES + 1, decode_content=True)
            raw.release_conn()
        except urllib3.exceptions.HTTPError as exc:
            raise FetchError(_connection_problem(exc)) from exc
        finally:
            pool.close()
        found = {k.lower(): v for k, v in raw.headers.items()}
        return Response(url, raw.status, found, body)

    def address(self, host: str, port: int) -> str:
        """The address to connect to: every one the name resolves to must be
        public or in KB_SYNC_ALLOWED_NETWORKS (FetchError otherwise)."""
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise FetchError(
                _("%(host)s cannot be resolved: %(error)s")
                % {"host": host, "error": exc.strerror or exc}
            ) from exc
        addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
        for ip in addresses:
            if not ip.is_global and not any(ip in net for net in self.networks):
                raise FetchError(
                    _(
                        "%(host)s resolves to %(address)s, a private or local "
                        "address; the deployment does not allow it "
                        "(KB_SYNC_ALLOWED_NETWORKS)"
                    )
                    % {"host": host, "address": ip}
                )
        return str(addresses[0])

    def _wait(self) -> None:
        pause = self._last + self.delay - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        self._last = time.monotonic()


def file_name(url: str) -> str:
    """The source's file name for a page: host and path, ending in .html
    ('docs.example.org/guide/intro.html', a folder's page its index.html); a
    query becomes a short hash."""
    parts = urlsplit(url)
    raw = parts.path or "/"
    path = raw.strip("/")
    if raw.endswith("/"):
        path = f"{path}/index.html" if path else "index.html"
    elif not path.lower().endswith((".html", ".htm")):
        path += ".html"
    if parts.query:
        digest = hashlib.sha256(parts.query.encode()).hexdigest()[:10]
        stem, _dot, ext = path.rpartition(".")
        path = f"{stem}-{digest}.{ext}"
    safe = "/".join(part for part in path.split("/") if part not in ("", ".", ".."))
    return f"{parts.hostname}/{safe}"


def fingerprint(response: Response) -> str:
    """What tells the page changed: its ETag, else its Last-Modified, else the
    hash of its body."""
    etag = response.headers.get("etag", "")
    if etag and len(etag) < 190:
        return f"etag:{etag}"
    modified = response.headers.get("last-modified", "")
    if modified and len(modified) < 190:
        return f"modified:{modified}"
    return "sha256:" + hashlib.sha256(response.body).hexdigest()


def conditional(print_: str) -> dict[str, str]:
    if print_.startswith("etag:"):
        return {"If-None-Match": print_[5:]}
    if print_.startswith("modified:"):
        return {"If-Modified-Since": print_[9:]}
    return {}


class Website:
    """Pages under `prefix` (the start URL's folder when blank), from a sitemap
    (a location ending in .xml) or by links from the start page, at most
    `page_limit` of them."""

    def __init__(
        self,
        location: str,
        prefix: str,
        page_limit: int,
        include: str,
        exclude: str,
        known: dict[str, str],
        stored: callable,
    ):
        self.location = location
        self.prefix = prefix or location.rsplit("/", 1)[0] + "/"
        if self.location.lower().endswith(".xml") and not prefix:
            self.prefix = urljoin(location, "/")
        self.page_limit = page_limit
        self.include, self.exclude = patterns(include), patterns(exclude)
        self.known = known  # file name -> fingerprint, of the pages synced before
        self.stored = stored  # file name -> the page's bytes as last synced
        self.bodies: dict[str, bytes] = {}
        self.urls: dict[str, str] = {}  # file name -> the page's URL

    def listing(self) -> Listing:
        fetcher = Fetcher(settings.KB_SYNC_WEB_DELAY)
        robots = self._robots(fetcher)
        fetcher.allowed = functools.partial(
            robots.can_fetch, settings.KB_SYNC_USER_AGENT
        )
        fetcher.delay = max(
            fetcher.delay, float(robots.crawl_delay(settings.KB_SYNC_USER_AGENT) or 0)
        )
        found = Listing(seen=self.location)
        from_sitemap = self.location.lower().endswith(".xml")
        queue = self._sitemap(fetcher) if from_sitemap else [self.location]
        seen: set[str] = set(queue)
        visited = 0
        while queue:
            url = queue.pop(0)
            name = file_name(url)
            if not url.startswith(self.prefix) or not wanted(
                name, self.include, self.exclude
            ):
                continue
            if not robots.can_fetch(settings.KB_SYNC_USER_AGENT, url):
                found.refused.append((name, _("robots.txt disallows it")))
                found.kept.add(name)
                continue
            if visited >= self.page_limit:
                found.kept.update(self.known)  # unvisited: not known gone
                found.refused.append(
                    (
                        url,
                        _("page limit of %(limit)d reached; the rest was not visited")
                        % {"limit": self.page_limit},
                    )
                )
                break
            visited += 1
            body = self._page(fetcher, url, name, found)
            if body is None or from_sitemap:
                continue
            for link in links(url, body):
                if link not in seen and link.startswith(self.prefix):
                    seen.add(link)
                    queue.append(link)
        return found

    def _page(self, fetcher: Fetcher, url: str, name: str, found: Listing):
        """Fetch one page into the listing; its body (for its links), or None."""
        before = self.known.get(name, "")
        try:
            response = fetcher.get(url, conditional(before))
        except FetchError as exc:
            found.refused.append((name, str(exc)))
            found.kept.add(name)
            return None
        if response.url != url:  # redirected: the page is where it ended up
            name = file_name(response.url)
            if name in found.entries or not response.url.startswith(self.prefix):
                return None
        if response.status == 304 and before:
            found.entries[name] = Entry(name, before, 0)
            self.urls[name] = response.url
            return self.stored(name)
        if response.status in (404, 410):
            return None  # gone: its source, if any, is deleted
        if response.status != 200:
            found.refused.append(
                (name, _("HTTP %(status)d") % {"status": response.status})
            )
            found.kept.add(name)
            return None
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind and kind not in PAGE_TYPES:
            return None  # not a page: images, PDFs linked from it
        found.entries[name] = Entry(name, fingerprint(response), len(response.body))
        self.bodies[name] = response.body
        self.urls[name] = response.url
        return response.body

    def _robots(self, fetcher: Fetcher) -> RobotFileParser:
        robots = RobotFileParser()
        url = urljoin(self.location, "/robots.txt")
        try:
            response = fetcher.get(url)
        except FetchError as exc:
            raise OriginError(
                _("The site %(url)s cannot be reached: %(error)s")
                % {"url": self.location, "error": exc}
            ) from exc
        if response.status in (401, 403):
            robots.disallow_all = True
        elif response.status == 200:
            robots.parse(response.body.decode("utf-8", "replace").splitlines())
        else:
            robots.allow_all = True
        return robots

    def _sitemap(self, fetcher: Fetcher) -> list[str]:
        """The page URLs a sitemap (or a sitemap index, one level) lists."""
        urls, sitemaps, read = [], [self.location], 0
        while sitemaps and read < MAX_SITEMAPS:
            url = sitemaps.pop(0)
            read += 1
            try:
                response = fetcher.get(url)
            except FetchError as exc:
                raise OriginError(
                    _("The sitemap %(url)s cannot be read: %(error)s")
                    % {"url": url, "error": exc}
                ) from exc
            if response.status != 200:
                raise OriginError(
                    _("The sitemap %(url)s answered HTTP %(status)d")
                    % {"url": url, "status": response.status}
                )
            for kind, loc in sitemap_entries(response.body):
                (sitemaps if kind == "sitemap" else urls).append(loc)
        return list(dict.fromkeys(urls))

    def read(self, entry: Entry) -> bytes:
        return self.bodies[entry.path]


def links(url: str, body: bytes) -> list[str]:
    """The page's links, absolute, without fragments, in order."""
    import lxml.html

    try:
        tree = lxml.html.fromstring(body)
    except (ValueError, lxml.etree.ParserError):
        return []
    found = []
    for href in tree.xpath("//a/@href"):
        link = urldefrag(urljoin(url, href.strip()))[0]
        if urlsplit(link).scheme in ("http", "https"):
            found.append(link)
    return list(dict.fromkeys(found))


def sitemap_entries(body: bytes) -> list[tuple[str, str]]:
    """("url" or "sitemap", location) of a sitemap's entries; no entity or
    network is resolved."""
    import lxml.etree

    parser = lxml.etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=False
    )
    try:
        root = lxml.etree.fromstring(body, parser)
    except lxml.etree.XMLSyntaxError as exc:
        raise OriginError(_("The sitemap is not XML: %(error)s") % {"error": exc})
    found = []
    for element in root.iter("{*}loc"):
        parent = lxml.etree.QName(element.getparent()).localname
        if element.text and element.text.strip():
            found.append(
                ("sitemap" if parent == "sitemap" else "url", element.text.strip())
            )
    return found
