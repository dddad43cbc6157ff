"""PDF -> canonical Markdown with a page map, from the text layer (pypdfium2).

Characters with their positions, sizes and fonts are grouped into lines (split
at wide gaps and at vertical rules), lines repeated in the top or bottom margin
of many pages (running headers, footers, page numbers), between the page's edge
and its body, are dropped, the rest is put in reading order (two-column pages:
the left column first) and read as
headings (font size and weight against the body text; bold running text, a
bold block too long for a title or reading as a sentence, is no heading), list
items (bullet or number markers, nesting by indentation), code (monospaced
lines), ruled tables (cells between the page's drawn rules; the first row is the
header when bold) and paragraphs (lines joined, hyphenation at line ends undone,
going on over a page break when the page's last line fills the width and its
sentence goes on). OCR is out of scope: a PDF without a text layer is refused.

This module opens and checks the file and runs the stages, one module each:
pdf_lines (characters -> lines), pdf_tables (ruled and unruled tables),
pdf_running_lines (running headers and footers), pdf_order (reading order) and
pdf_assembly (lines and tables -> Markdown blocks).
"""

from __future__ import annotations

import pypdfium2 as pdfium
from django.utils.translation import gettext

from kb.readers.pdf_assembly import Assembler
from kb.readers.pdf_lines import page_lines, page_rules, without_continuation_marks
from kb.readers.pdf_order import reading_order
from kb.readers.pdf_running_lines import drop_contents_lines, drop_running_lines
from kb.readers.pdf_tables import ruled_tables, unruled_tables
from kb.readers.reading import ReaderError, Reading
from kb.readers.writer import Writer


def check(name: str, data: bytes, *, max_pages: int) -> None:
    """The quick checks (end marker, encryption, page count), or ReaderError:
    what an upload request can afford; reading the text is for the worker."""
    _open(name, data, max_pages).close()


def _open(name: str, data: bytes, max_pages: int) -> pdfium.PdfDocument:
    if data.rfind(b"%%EOF", max(0, len(data) - 4096)) == -1:
        raise ReaderError(
            gettext("%(file)s is truncated or corrupt: it has no end-of-file marker")
            % {"file": name}
        )
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ReaderError(
                gettext(
                    "%(file)s is encrypted (password-protected); remove the "
                    "password first"
                )
                % {"file": name}
            ) from exc
        raise ReaderError(
            gettext("%(file)s is corrupt or not a PDF: %(problem)s")
            % {"file": name, "problem": exc}
        ) from exc
    count = len(document)
    if count > max_pages or count == 0:
        document.close()
    if count > max_pages:
        raise ReaderError(
            gettext(
                "%(file)s has %(count)d pages; the limit is %(limit)d "
                "(KB_MAX_PDF_PAGES)"
            )
            % {"file": name, "count": count, "limit": max_pages}
        )
    if count == 0:
        raise ReaderError(gettext("%(file)s has no pages") % {"file": name})
    return document


def read(name: str, data: bytes, *, max_pages: int) -> Reading:
    document = _open(name, data, max_pages)
    try:
        count = len(document)
        items = [_page_items(name, document, i) for i in range(count)]
    finally:
        document.close()
    # every character of the text layer, in tables too
    chars = [n for _, _, n in items]
    pages = [(lines, tables) for lines, tables, _ in items]
    if not any(chars):
        raise ReaderError(
            gettext("%(file)s has no text layer (scanned?); OCR is not supported")
            % {"file": name}
        )
    removed = drop_running_lines(pages)
    contents = drop_contents_lines(pages)
    ordered = [reading_order(lines, tables) for lines, tables in pages]
    writer = Writer()
    Assembler(writer, ordered).run()
    text, page_map = writer.render()
    empty = [i + 1 for i, n in enumerate(chars) if n == 0]
    warnings = [f"page {p} has no text" for p in empty]
    summary = writer.summary(
        pages=count,
        running_lines_removed=removed,
        contents_lines_removed=contents,
        chars_per_page=chars,
        pages_without_text=empty,
    )
    return Reading(
        text=text,
        pages=page_map,
        summary=summary,
        warnings=warnings,
        structure=writer.structure(text),
    )


# --- characters -> lines and tables ---------------------------------------------


def _page_items(name: str, document: pdfium.PdfDocument, index: int):
    try:
        page = document[index]
    except pdfium.PdfiumError as exc:
        raise ReaderError(
            gettext("%(file)s: page %(page)d cannot be read: %(problem)s")
            % {"file": name, "page": index + 1, "problem": exc}
        ) from exc
    try:
        rules = page_rules(page)
        textpage = page.get_textpage()
        try:
            lines = without_continuation_marks(page_lines(textpage, index + 1, rules))
        finally:
            textpage.close()
    finally:
        page.close()
    chars = sum(len(line.text) for line in lines)
    free, tables = ruled_tables(lines, rules, index + 1)
    free, unruled = unruled_tables(free, index + 1)
    return free, tables + unruled, chars
