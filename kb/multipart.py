"""The files of a multipart upload that Django's parser drops without a word.

Django decodes each part's headers as UTF-8 and skips a header it cannot decode:
a file named with bytes that are not UTF-8 (`filename="caf\\xe9.md"`) vanished
from request.FILES, and the upload page said "Choose at least one file." instead
of why (issue #26). NamesWatch parses the body as Django does, through a reader
that notes such file names on the way.
"""

from __future__ import annotations

import re

from django.core.files.uploadhandler import FileUploadHandler
from django.http import HttpRequest
from django.http.multipartparser import MultiPartParser

_FILENAME_RE = re.compile(r'\bfilename="([^"]*)"|\bfilename=([^;\s"]+)', re.I)
# Django reads at most this much of a part's headers (MAX_TOTAL_HEADER_SIZE).
HEADERS_MAX = 1024 * 1024


class NamesWatch(FileUploadHandler):
    """An upload handler, first in request.upload_handlers, that runs Django's
    parser with the other handlers on a reader noting undecodable file names."""

    def __init__(self, request: HttpRequest | None = None) -> None:
        super().__init__(request)
        self.names: list[str] = []

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding):
        others = [h for h in self.request.upload_handlers if h is not self]
        reader = _HeaderReader(input_data, boundary, self.names)
        return MultiPartParser(META, reader, others, encoding).parse()

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        return raw_data  # never called: the parser above has the other handlers

    def file_complete(self, file_size: int) -> None:
        return None


def watch(request: HttpRequest) -> None:
    """Note the undecodable file names of the request's body, to be read by
    dropped_names(); before anything reads request.POST or FILES."""
    request.upload_handlers.insert(0, NamesWatch(request))


def dropped_names(request: HttpRequest) -> list[str]:
    """The file names the parser dropped, their bytes that are not UTF-8 kept as
    surrogates (as Python keeps them from a file system)."""
    for handler in request.upload_handlers:
        if isinstance(handler, NamesWatch):
            return handler.names
    return []


class _HeaderReader:
    """Passes a body through, checking each part's headers (after a boundary
    line, up to the blank line) as they go by; keeps an unfinished one."""

    def __init__(self, stream, boundary: bytes, names: list[str]) -> None:
        self.stream = stream
        self.start = b"--" + boundary + b"\r\n"
        self.names = names
        self.tail = b""

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self._scan(self.tail + data)
        return data

    def _scan(self, buffer: bytes) -> None:
        pos = 0
        while (at := buffer.find(self.start, pos)) != -1:
            end = buffer.find(b"\r\n\r\n", at)
            if end == -1:  # the headers go on in the next read
                self.tail = buffer[at:] if len(buffer) - at < HEADERS_MAX else b""
                return
            self._check(buffer[at + len(self.start) : end])
            pos = end
        # A boundary line may be cut between this read and the next.
        self.tail = buffer[max(pos, len(buffer) - len(self.start) + 1) :]

    def _check(self, headers: bytes) -> None:
        for line in headers.split(b"\r\n"):
            try:
                line.decode()
            except UnicodeDecodeError:
                # Parsed here, not by the email package: it would write U+FFFD.
                text = line.decode("utf-8", "surrogateescape")
                found = _FILENAME_RE.search(text)
                if found and text.lower().startswith("content-disposition:"):
                    name = found.group(1) or found.group(2)
                    self.names.append(name.replace("\\", "/").split("/")[-1])
