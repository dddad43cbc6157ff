"""Where a sync reads its files: a folder on the server, or a Git repository
(a website: kb.sync.web).

An origin lists the files a sync takes (Listing: each file's path, relative
and POSIX, and a fingerprint that changes when the file does) and reads one
file's bytes. Nothing here writes to the database.

- **Folder**: the fingerprint is the size and modification time; the sync
  confirms a change by the content's hash. Only paths under KB_SYNC_ROOTS are
  synced; a symbolic link whose target leaves the synced folder is refused,
  and so is `..`.
- **Git**: the repository is fetched (dulwich, pure Python) into a bare mirror
  under KB_DATA_DIR/sync; the fingerprint is the file's blob id at the branch's
  head, and renames come from the diff between the last synced commit and the
  head. A local repository must be under KB_SYNC_ROOTS too. Over SSH
  (`ssh://user@host/path` or `user@host:path`) the system's `ssh` client
  connects unattended (BatchMode), with the sync's deploy key alone when it
  has one, and trusts the host key it meets first, kept beside the mirror.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.utils.translation import gettext as _

READ_FORMATS = (".md", ".markdown", ".txt", ".html", ".htm", ".docx", ".pdf")
# A Git URL over SSH: ssh://[user@]host[:port]/path, or scp's user@host:path.
# A host (or user) starting with "-" would be read by ssh as an option.
SSH_URL_RE = re.compile(
    r"^(?:ssh://(?:\w[\w.+-]*@)?[A-Za-z0-9][\w.-]*(?::\d{1,5})?/\S*"
    r"|\w[\w.+-]*@[A-Za-z0-9][\w.-]*:(?!//)\S+)$"
)
SSH_CONNECT_SECONDS = 20


class OriginError(Exception):
    """The origin cannot be read at all (gone, unreachable, not allowed): the
    run fails with this reason and changes nothing."""


@dataclass(frozen=True)
class Entry:
    path: str  # relative POSIX path under the synced folder: the source's name
    fingerprint: str
    size: int


@dataclass
class Listing:
    entries: dict[str, Entry] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    seen: str = ""  # the commit (Git), the start page or sitemap (website)
    renames: dict[str, str] = field(default_factory=dict)  # old path -> new
    # Paths whose state this run could not learn (a page that failed, or the
    # page limit): their sources are not deleted for being absent.
    kept: set[str] = field(default_factory=set)


def patterns(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def wanted(path: str, include: list[str], exclude: list[str]) -> bool:
    """Whether the sync takes `path`: a format kb reads, matching an include
    pattern (any when there is none) and no exclude pattern. `*` also matches
    `/`, so 'docs/*.md' takes docs/a/b.md."""
    if not path.lower().endswith(READ_FORMATS):
        return False
    if include and not any(fnmatch.fnmatchcase(path, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(path, p) for p in exclude)


def allowed_roots() -> list[Path]:
    return [Path(os.path.realpath(root)) for root in settings.KB_SYNC_ROOTS]


def under_roots(path: str) -> Path:
    """The real path of `path` if it lies under one of KB_SYNC_ROOTS, else
    OriginError with the reason."""
    roots = allowed_roots()
    if not roots:
        raise OriginError(
            _("No folder may be synced on this server: KB_SYNC_ROOTS is not set.")
        )
    if ".." in PurePosixPath(path).parts:
        raise OriginError(_("The path %(path)s contains '..'.") % {"path": path})
    real = Path(os.path.realpath(path))
    if not any(real == root or root in real.parents for root in roots):
        raise OriginError(
            _("%(path)s is not under a folder this server allows (KB_SYNC_ROOTS).")
            % {"path": path}
        )
    return real


def check_location(kind: str, location: str) -> str:
    """Where a sync of `kind` ("folder", "git" or "website") may read
    `location`: the real path of a folder or local repository under
    KB_SYNC_ROOTS, or an http(s) URL as given (a website's addresses are
    checked when fetched, kb.sync.web); else OriginError with the reason.
    Nothing is read."""
    if kind == "website":
        if not location.startswith(("https://", "http://")):
            raise OriginError(_("A website is synced from an http or https address."))
        return location
    if kind == "git" and is_ssh(location):
        if not SSH_URL_RE.match(location):
            raise OriginError(
                _("%(url)s is not an SSH address of the form ssh://user@host/path.")
                % {"url": location}
            )
        return location
    local = kind == "folder" or "://" not in location
    if local or location.startswith("file://"):
        return str(under_roots(location.removeprefix("file://")))
    if not location.startswith(("https://", "http://")):
        raise OriginError(
            _("Only https, http, ssh and local repositories can be synced.")
        )
    return location


def is_ssh(location: str) -> bool:
    """Whether a Git location is reached over SSH: an ssh:// URL, or scp's
    user@host:path (not a local path that holds an @)."""
    if location.startswith("ssh://"):
        return True
    return "://" not in location and bool(re.match(r"^[^/]+@[^/:]+:", location))


def known_hosts(mirror: Path) -> Path:
    """Where a Git sync over SSH keeps the host keys it trusts: beside its
    mirror (`<id>.git` -> `<id>.known_hosts`)."""
    return mirror.with_name(f"{mirror.stem}.known_hosts")


def _inside(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


class Folder:
    """A folder on the server (under KB_SYNC_ROOTS)."""

    def __init__(self, location: str, subfolder: str, include: str, exclude: str):
        self.location, self.subfolder = location, subfolder.strip("/")
        self.include, self.exclude = patterns(include), patterns(exclude)

    def _top(self) -> Path:
        top = under_roots(os.path.join(self.location, self.subfolder))
        if not top.is_dir():
            raise OriginError(
                _("The folder %(path)s does not exist or cannot be read.")
                % {"path": self.location}
            )
        return top

    def listing(self) -> Listing:
        top = self._top()
        found = Listing()
        for folder, dirs, files in os.walk(top, followlinks=False, onerror=None):
            here = Path(folder)
            # A linked folder is not walked into (followlinks=False): said once.
            for name in sorted(dirs):
                if (here / name).is_symlink():
                    rel = (here / name).relative_to(top).as_posix()
                    found.refused.append((rel, _("a link to a folder; not followed")))
            for name in sorted(files):
                path = here / name
                rel = path.relative_to(top).as_posix()
                if not wanted(rel, self.include, self.exclude):
                    continue
                why = self._refusal(path, top)
                if why:
                    found.refused.append((rel, why))
                    continue
                info = path.stat()
                found.entries[rel] = Entry(
                    rel, f"{info.st_size}:{info.st_mtime_ns}", info.st_size
                )
        return found

    @staticmethod
    def _refusal(path: Path, top: Path) -> str:
        if path.is_symlink() and not _inside(Path(os.path.realpath(path)), top):
            return _("a link to a file outside the synced folder")
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            return _("cannot be read: %(error)s") % {"error": exc.strerror}
        if not stat.S_ISREG(mode):
            return _("not a regular file")
        return ""

    def read(self, entry: Entry) -> bytes:
        """The file's bytes, checked again where it is read: a link made to point
        out of the folder after the listing is refused, not followed."""
        top = self._top()
        path = top / entry.path
        if not _inside(Path(os.path.realpath(path)), top):
            raise OSError(_("a link to a file outside the synced folder"))
        with open(path, "rb") as handle:
            return handle.read(settings.KB_MAX_UPLOAD_BYTES + 1)


class GitRepository:
    """A branch of a Git repository, fetched into a bare mirror."""

    def __init__(
        self,
        location: str,
        branch: str,
        subfolder: str,
        include: str,
        exclude: str,
        mirror: Path,
        username: str = "",
        token: str = "",
        deploy_key: str = "",
    ):
        self.location = location
        self.username, self.token = username, token
        self.deploy_key = deploy_key
        self.branch = branch or "main"
        self.subfolder = subfolder.strip("/")
        self.include, self.exclude = patterns(include), patterns(exclude)
        self.mirror = mirror

    def fetch(self) -> bytes:
        """Fetch the branch into the mirror; its head commit."""
        from dulwich.client import HTTPUnauthorized, get_transport_and_path
        from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
        from dulwich.repo import Repo

        url = check_location("git", self.location)
        if not (self.mirror / "HEAD").exists():
            self.mirror.mkdir(parents=True, exist_ok=True)
            Repo.init_bare(str(self.mirror))
        repo = Repo(str(self.mirror))
        ref = f"refs/heads/{self.branch}".encode()
        keys = tempfile.mkdtemp(prefix="kb-ssh-") if self.deploy_key else ""
        try:
            client, path = get_transport_and_path(url, **self._credentials(url, keys))
            result = client.fetch(
                path,
                repo,
                determine_wants=lambda refs, depth=None: (
                    [refs[ref]] if ref in refs and refs[ref] not in repo else []
                ),
            )
        except HTTPUnauthorized:
            raise OriginError(
                _(
                    "The repository %(url)s asks for credentials, and refused "
                    "those given (if any): set a user name and a token with read "
                    "rights."
                )
                % {"url": self.location}
            ) from None
        except (OSError, GitProtocolError, HangupException, NotGitRepository) as exc:
            error = str(exc).replace(self.token, "…") if self.token else str(exc)
            raise OriginError(
                _("The repository %(url)s cannot be read: %(error)s")
                % {"url": self.location, "error": error}
            ) from None
        finally:
            repo.close()
            if keys:
                shutil.rmtree(keys, ignore_errors=True)
        head = result.refs.get(ref)
        if head is None:
            raise OriginError(
                _("The repository %(url)s has no branch %(branch)s.")
                % {"url": self.location, "branch": self.branch}
            )
        return head

    def _credentials(self, url: str, keys: str) -> dict:
        """What the Git client is given: over https, the user name and token;
        over SSH, an unattended `ssh` that trusts the host key it meets first
        (kept in `known_hosts` beside the mirror) and offers the deploy key
        alone, written 0600 into `keys` (a private temporary directory) for
        this fetch only."""
        if is_ssh(self.location):
            known = known_hosts(self.mirror)
            options = {
                "BatchMode": "yes",
                "StrictHostKeyChecking": "accept-new",
                "UserKnownHostsFile": str(known),
                "ConnectTimeout": str(SSH_CONNECT_SECONDS),
            }
            found: dict = {}
            if self.deploy_key:
                key = Path(keys) / "deploy_key"
                fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(self.deploy_key.strip() + "\n")
                options["IdentitiesOnly"] = "yes"
                found["key_filename"] = str(key)
            command = ["ssh", *(f"-o{k}={v}" for k, v in options.items())]
            return {**found, "ssh_command": shlex.join(command)}
        if self.token and "://" in url:
            return {"username": self.username or None, "password": self.token}
        return {}

    def listing(self, since: str = "") -> Listing:
        from dulwich.diff_tree import RenameDetector, tree_changes
        from dulwich.object_store import iter_tree_contents
        from dulwich.repo import Repo

        head = self.fetch()
        found = Listing(seen=head.decode())
        with Repo(str(self.mirror)) as repo:
            store = repo.object_store
            tree = store[head].tree
            prefix = f"{self.subfolder}/" if self.subfolder else ""
            for item in iter_tree_contents(store, tree):
                full = item.path.decode("utf-8", "surrogateescape")
                if not full.startswith(prefix):
                    continue
                rel = full[len(prefix) :]
                if not wanted(rel, self.include, self.exclude):
                    continue
                if stat.S_ISLNK(item.mode):
                    found.refused.append((rel, _("a symbolic link; not followed")))
                    continue
                if not stat.S_ISREG(item.mode):
                    continue
                # Sizes are checked when read (a blob's is known only then).
                found.entries[rel] = Entry(rel, item.sha.decode(), 0)
            if since and since.encode() in store:
                old = store[since.encode()].tree
                detector = RenameDetector(store)
                for change in tree_changes(store, old, tree, rename_detector=detector):
                    if change.type == "rename":
                        before = change.old.path.decode("utf-8", "surrogateescape")
                        after = change.new.path.decode("utf-8", "surrogateescape")
                        if before.startswith(prefix) and after.startswith(prefix):
                            found.renames[before[len(prefix) :]] = after[len(prefix) :]
        return found

    def read(self, entry: Entry) -> bytes:
        from dulwich.repo import Repo

        with Repo(str(self.mirror)) as repo:
            return repo.object_store[entry.fingerprint.encode()].data
