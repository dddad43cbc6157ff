"""An upload checked and stored as a source's new version, in the request.

`check_upload` makes the checks a request can afford (a clean file name, the
type by content, a PDF opened under the worker's limits, a sane DOCX zip, text
that decodes); `store_source` and `store_checked` then create or update the
source and its file under a lock on the file name, and queue the new version
for the worker (kb.ingestion reads, parses, chunks, embeds and publishes it).
The same content stored again is "unchanged": no new version, no job.
`storing` deletes the files written again when its transaction rolls back.
`apply_edit` takes an editor's change of a source as a new version.
Bad input raises IngestionError or parsing.ParseError naming the file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from django.core.files.base import ContentFile
from django.db import connection, transaction
from django.utils.translation import gettext

from kb import decoding, parsing, readers
from kb.ingestion import TITLE_CHARS, IngestionError, run_limited
from kb.models import Collection, Source

ALLOWED_EXTENSIONS = (".md", ".markdown", ".txt", *parsing.CONVERTED_EXTENSIONS)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean_file_name(name: str) -> str:
    """A relative POSIX path without tricks, or IngestionError."""
    raw = name.replace("\\", "/")
    path = PurePosixPath(raw)
    if not raw or path.is_absolute() or ".." in path.parts or "\x00" in raw:
        raise IngestionError(
            gettext("File name %(name)s is not allowed") % {"name": repr(name)}
        )
    _check_name_characters(name)
    if path.suffix.lower() not in ALLOWED_EXTENSIONS:
        raise IngestionError(
            gettext("%(file)s: only %(extensions)s files are accepted")
            % {"file": path.name, "extensions": ", ".join(ALLOWED_EXTENSIONS)}
        )
    return str(path).lstrip("./") if str(path).startswith("./") else str(path)


def shown_name(name: str) -> str:
    """`name` safe to print and store in a message: the bytes of a file system
    name that are not UTF-8 (surrogate-escaped by Python) and control characters
    written as \\xNN."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that came as text
        raw = name.encode("utf-8", "backslashreplace")
    text = raw.decode("utf-8", "backslashreplace")
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _check_name_characters(name: str) -> None:
    """Refuse names that are not UTF-8 text: they cannot be stored or shown.

    A name from the file system keeps its undecodable bytes as surrogates; an
    uploaded one has them replaced by U+FFFD when the request is parsed.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        bad = True
    else:
        bad = "\ufffd" in name
    if bad:
        raise IngestionError(
            gettext("File name '%(name)s' is not valid UTF-8; rename the file")
            % {"name": shown_name(name)}
        )
    if _CONTROL_RE.search(name):
        raise IngestionError(
            gettext("File name '%(name)s' has control characters; rename the file")
            % {"name": shown_name(name)}
        )


class Upload(NamedTuple):
    """An upload that passed check_upload: its clean name, bytes and text (decoded
    Markdown or plain text; "" for the formats the worker reads)."""

    file_name: str
    data: bytes
    text: str


def check_upload(file_name: str, data: bytes) -> Upload:
    """The clean file name and text of an upload, after the checks a request can
    afford (each linear in the file's size, none parses it): type by content,
    encryption and page count of a PDF (opened in a child process under the
    worker's limits, `run_limited`), a sane zip for DOCX, text that decodes
    without NUL characters. Reading and parsing are the worker's (`ingest`).

    Raises IngestionError or parsing.ParseError naming the file.
    """
    file_name = clean_file_name(file_name)
    if readers.format_of(file_name) == "pdf":
        # pdfium inflates the streams that hold the catalog and the page tree to
        # count the pages: a 1 MB file can unpack to gigabytes (issue #26).
        run_limited(
            readers.check,
            file_name,
            data,
            name=file_name,
            doing=gettext("opening the PDF"),
            outcome=gettext("nothing was stored"),
        )
        return Upload(file_name, data, "")
    if readers.format_of(file_name):
        readers.check(file_name, data)
        return Upload(file_name, data, "")
    return Upload(file_name, data, decoding.decode_upload(data, file_name))


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest_of(upload: Upload) -> str:
    """The content hash a source stores for `upload`: of its text when it is
    read as text (the encoding it came in does not matter), else of its bytes
    (a converted file's text is the worker's: its bytes tell a new version)."""
    _, data, text = upload
    return hashlib.sha256(data).hexdigest() if not text else content_hash(text)


def store_source(
    collection: Collection,
    file_name: str,
    data: bytes,
    *,
    title: str = "",
    metadata: dict[str, Any] | None = None,
    replace: bool = False,
    from_sync: bool = False,
) -> tuple[Source, str]:
    """Create or update the source for `file_name`; return it and what happened.

    "unchanged" means the same content was stored already and nothing given
    changes the source: no new version, no job. Raises IngestionError or
    parsing.ParseError for bad input. `title`, `metadata`, `replace` and
    `from_sync` as for store_checked.
    """
    upload = check_upload(file_name, data)
    return store_checked(
        collection,
        upload,
        title=title,
        metadata=metadata,
        replace=replace,
        from_sync=from_sync,
    )


def store_checked(
    collection: Collection,
    upload: Upload,
    *,
    title: str = "",
    metadata: dict[str, Any] | None = None,
    replace: bool = False,
    from_sync: bool = False,
) -> tuple[Source, str]:
    """store_source for an upload check_upload has already checked.

    A source a sync keeps in step takes new versions from its sync only
    (`from_sync`): another upload of its name is refused (IngestionError,
    synced_refusal), as the next sync would overwrite it.

    A new version of a file keeps what its source has: `metadata` is set over the
    stored metadata (a key whose value is None is removed), and a title an editor
    set stays unless `title` is given. `replace`: the metadata becomes `metadata`,
    and without `title` the worker takes the document's own, as for a new source
    (titled after its file name until then)."""
    file_name, data, text = upload
    digest = digest_of(upload)
    title = title[:TITLE_CHARS]
    with transaction.atomic():
        # Uploads of one file wait here for each other's commit, so that each
        # builds on the last: no edit lost, no replaced file left behind.
        _lock_file_name(collection, file_name)
        source = (
            Source.objects.select_for_update()  # and with edits in the admin
            .filter(collection=collection, file_name=file_name)
            .first()
        )
        if source and source.sync_source_id and not from_sync:
            raise IngestionError(synced_refusal(file_name, source.sync_source.name))
        kept = source.metadata if source and not replace else {}
        merged = {**kept, **(metadata or {})}
        metadata = {k: v for k, v in merged.items() if v is not None}
        auto = not title and (replace or source is None or source.is_title_auto)
        if source and source.content_hash == digest and source.metadata == metadata:
            same_title = (
                (source.title == title) if title else (source.is_title_auto == auto)
            )
            if same_title:
                return source, "unchanged"
        return _store(source, collection, upload, title, auto, digest, metadata)


def synced_refusal(file_name: str, sync_name: str) -> str:
    return gettext(
        "%(file)s is kept in step by the sync source %(sync)s: change it at its "
        "origin (an upload here would be overwritten by the next sync)."
    ) % {"file": file_name, "sync": sync_name}


def synced_names(collection: Collection, file_names: list[str]) -> dict[str, str]:
    """Which of `file_names` are sources a sync keeps in step: name -> the
    sync source's name."""
    return dict(
        Source.objects.filter(
            collection=collection,
            file_name__in=file_names,
            sync_source__isnull=False,
        ).values_list("file_name", "sync_source__name")
    )


def _store(
    source: Source | None,
    collection: Collection,
    upload: Upload,
    title: str,
    is_title_auto: bool,
    digest: str,
    metadata: dict[str, Any],
) -> tuple[Source, str]:
    """Create or update the row, and write the file, in store_checked's lock."""
    file_name, data, text = upload
    created = source is None
    source = source or Source(collection=collection, file_name=file_name)
    # An automatic title is the document's, read by the worker (kb.ingestion).
    source.is_title_auto = is_title_auto
    source.title = title or (source.title if not created else auto_title(file_name))
    if text or created:  # a converted file's previous text stays live until read
        source.text = text
    source.content_hash = digest
    source.metadata = metadata
    source.queue_new_version()
    previous = source.file.name
    source.file.save(PurePosixPath(file_name).name, ContentFile(data), save=False)
    written = (source.file.storage, source.file.name)
    try:
        source.save()
    except BaseException:
        written[0].delete(written[1])  # no file without its row
        raise
    if (pending := _written.get()) is not None:
        pending.append(written)
    if previous and previous != source.file.name:
        source.forget_file(previous)  # the upload this version replaces, on commit
    return source, "created" if created else "updated"


_written: ContextVar[list | None] = ContextVar("kb_written_uploads", default=None)


@contextmanager
def storing():
    """A transaction for storing uploads (store_source, store_checked) whose files
    are deleted again if it rolls back: Django has no on-rollback hook. Use it as the
    outermost transaction."""
    written: list = []
    token = _written.set(written)
    try:
        with transaction.atomic():
            yield
    except BaseException:
        for storage, name in written:
            storage.delete(name)
        raise
    finally:
        _written.reset(token)


def _lock_file_name(collection: Collection, file_name: str) -> None:
    """Transaction-level advisory lock on one file of a collection (its row may not
    exist yet; one-key locks do not collide with kb.ingestion's two-key source
    locks)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"kb-upload:{collection.pk}:{file_name}"],
        )


def auto_title(file_name: str) -> str:
    """A new source's title until the worker reads the document's (kb.ingestion)."""
    return parsing.title_from_filename(file_name)[:TITLE_CHARS]


def apply_edit(
    source: Source, changed_fields: Sequence[str], metadata: dict[str, Any]
) -> bool:
    """Take an editor's change of the source (the admin's form, before it saves):
    a new text, title, metadata or language makes it a new version to index, and a title
    typed in is kept over the document's. True when it is to be indexed again.

    The content hash changes with the text only: it tells an upload of the same
    file ("unchanged"), and a converted file's is the hash of its bytes."""
    # The text is editable for Markdown and plain text only, whose hash is the
    # text's; sent back as shown (CRLF line breaks), it is no new text.
    text_hash = content_hash(source.text) if "text" in changed_fields else None
    new_text = text_hash is not None and text_hash != source.content_hash
    changed = new_text or metadata != source.metadata or "title" in changed_fields
    changed = changed or "language" in changed_fields  # its chunks read anew
    source.metadata = metadata
    if "title" in changed_fields:
        source.is_title_auto = False  # the editor's, kept over the document's
    if new_text:
        source.content_hash = text_hash
    if changed:
        source.queue_new_version()
    return changed
