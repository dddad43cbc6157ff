"""HTML, DOCX and PDF files -> the project's canonical Markdown text (issue #16).

No ORM here: bytes in, a `Reading` out. The format is decided by the content,
not only by the extension: a `.pdf` that holds HTML is refused, naming the file.
Every bad input raises `ReaderError` with a message that names the file.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePosixPath

from django.utils.translation import gettext, gettext_lazy

from kb.decoding import decode_upload
from kb.readers.reading import ReaderError, Reading, decoded_html

EXTENSIONS = {".html": "html", ".htm": "html", ".docx": "docx", ".pdf": "pdf"}
MAX_HTML_BYTES = 50 * 1024 * 1024
DEFAULT_MAX_PDF_PAGES = 2000


def text_of(name: str, data: bytes) -> str:
    """The stored text of an upload: converted to Markdown for the formats read
    here, decoded for Markdown and plain text."""
    if format_of(name):
        return read(name, data).text
    return decode_upload(data, name)


def format_of(name: str) -> str | None:
    """The reader for a file name's extension, or None for other files."""
    return EXTENSIONS.get(PurePosixPath(name).suffix.lower())


def sniff(data: bytes) -> str:
    """What the bytes are: pdf, docx, zip, broken zip, html or other."""
    head = data[:1024]
    if data[:1024].find(b"%PDF-") != -1:
        return "pdf"
    if data.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                names = set(archive.namelist())
        except (zipfile.BadZipFile, OSError, EOFError, ValueError):
            return "broken zip"
        return "docx" if "word/document.xml" in names else "zip"
    if b"\x00" not in head and b"<" in head:  # markup, in an ASCII-based encoding
        return "html"
    return "other"


_EXPECTED = {
    "pdf": gettext_lazy("a PDF file (it should start with %PDF-)"),
    "docx": gettext_lazy("a Word .docx file (a zip holding word/document.xml)"),
    "html": gettext_lazy("an HTML file"),
}
_FOUND = {
    "pdf": gettext_lazy("a PDF"),
    "docx": gettext_lazy("a Word document"),
    "zip": gettext_lazy("a zip archive without word/document.xml"),
    "broken zip": gettext_lazy("a truncated or damaged zip archive"),
    "html": gettext_lazy("HTML"),
    "other": gettext_lazy("something else"),
}


def check(name: str, data: bytes, *, max_pdf_pages: int | None = None) -> None:
    """The checks an upload request can afford, or ReaderError: type by content,
    size, a sane zip for DOCX, encryption and page count for PDF. Reading the text
    (`read`) is the worker's job, under its time limit."""
    kind = _kind(name, data)
    if kind == "docx":
        from kb.readers import docx

        docx.check(name, data)
    elif kind == "pdf":
        from kb.readers import pdf

        pdf.check(name, data, max_pages=max_pdf_pages or _max_pdf_pages())


def read(name: str, data: bytes, *, max_pdf_pages: int | None = None) -> Reading:
    """Read an .html/.htm, .docx or .pdf file into Markdown, or ReaderError."""
    kind = _kind(name, data)
    if kind == "html":
        from kb.readers import html

        return html.read(name, data)
    if kind == "docx":
        from kb.readers import docx

        return docx.read(name, data)
    from kb.readers import pdf

    return pdf.read(name, data, max_pages=max_pdf_pages or _max_pdf_pages())


def preload() -> None:
    """Import every reader (and its libraries) now: a child process forked to
    read a file then inherits them instead of importing them again."""
    from kb.readers import docx, html, pdf  # noqa: F401


def _kind(name: str, data: bytes) -> str:
    """The file's format, checked against its content and size, or ReaderError."""
    kind = format_of(name)
    if kind is None:
        raise ReaderError(
            gettext("%(file)s: not an .html, .htm, .docx or .pdf file") % {"file": name}
        )
    if not data.strip():
        raise ReaderError(gettext("%(file)s is empty") % {"file": name})
    found = sniff(data)
    if kind == "html" and found in ("html", "other") and len(data) <= MAX_HTML_BYTES:
        text = decoded_html(name, data)  # NULs or a byte order mark: why refused
        if text is not None and "<" in text[:1024]:
            found = "html"
    if kind == "docx" and found == "broken zip":
        raise ReaderError(
            gettext("%(file)s is a corrupt .docx file: a truncated or damaged zip")
            % {"file": name}
        )
    if found != kind:
        raise ReaderError(
            gettext("%(file)s is not %(expected)s: its content is %(found)s")
            % {"file": name, "expected": _EXPECTED[kind], "found": _FOUND[found]}
        )
    if kind == "html" and len(data) > MAX_HTML_BYTES:
        raise ReaderError(
            gettext("%(file)s is %(size).0f MB of HTML; the limit is %(limit)d MB")
            % {
                "file": name,
                "size": len(data) / 2**20,
                "limit": MAX_HTML_BYTES // 2**20,
            }
        )
    return kind


def _max_pdf_pages() -> int:
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        return int(getattr(settings, "KB_MAX_PDF_PAGES", DEFAULT_MAX_PDF_PAGES))
    except ImproperlyConfigured:  # Django not set up: a plain script
        return DEFAULT_MAX_PDF_PAGES
