"""What the sync tests share: a small handbook's files, a sync source made
and run as the worker's job runs it (kb.jobs.sync_run), and what it left."""

from __future__ import annotations

from pathlib import Path

from kb import retrieval
from kb.models import Collection, SyncRun, SyncSource
from kb.sync import runs

DOCS = {
    "guide/backups.md": "# Backups\n\nBackups run every night at 02:00 and are "
    "kept for 35 days in the vault.\n",
    "guide/restores.md": "# Restores\n\nA restore needs two approvals and takes "
    "about forty minutes for the main database.\n",
    "guide/network.md": "# Network\n\nThe office VPN uses WireGuard on port "
    "51820; ask the helpdesk for a key.\n",
    "notes/todo.txt": "Buy a label printer for the server room.\n",
    "images/logo.png": "not a document",
}


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def sync_of(kind: str, location: str, collection=None, **fields) -> SyncSource:
    number = SyncSource.objects.count()
    collection = collection or Collection.objects.create(name=f"Synced {number}")
    return SyncSource.objects.create(
        name=f"s{number}",
        collection=collection,
        kind=kind,
        location=location,
        **fields,
    )


def run_now(sync: SyncSource) -> SyncRun:
    """A run done here, as the worker's job does it (kb.jobs.sync_run)."""
    return runs.execute(SyncRun.objects.create(sync_source=sync).pk)


def names(sync: SyncSource) -> set[str]:
    return set(sync.sources.values_list("file_name", flat=True))


def context(collection, question: str) -> str:
    return " ".join(p.text for p in retrieval.retrieve(collection, question).passages)


def git_form(collection: Collection, url: str, **fields: str) -> dict:
    """The admin's add form for a Git sync named "docs" of `url`, as an
    editor fills it in (`fields` over the blanks)."""
    return {
        "name": "docs",
        "collection": collection.pk,
        "kind": "git",
        "location": url,
        "branch": "main",
        "subfolder": "",
        "username": "",
        "token": "",
        "link_template": "",
        "url_prefix": "",
        "page_limit": "500",
        "include": "",
        "exclude": "",
        "every_minutes": "0",
        **fields,
    }
