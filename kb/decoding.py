"""Bytes of an upload -> text with `\n` line endings, or ParseError (issue #4).

No ORM here. A file is decoded by its byte order mark, else as UTF-8; nothing
is guessed, since a wrong guess would corrupt the evidence that offsets point
into. What no search could use is refused with a ParseError that names the
file (and the line, where there is one): NUL bytes, too many control
characters, UTF-16 without a byte order mark, files embedded as base64 or
data: URIs, endless words, and text mostly of words the model cannot read
(`mostly_unreadable`, which questions are checked with too). Nothing but
ParseError escapes `decode_upload()`.
"""

from __future__ import annotations

import codecs
import re

from django.utils.translation import gettext

from kb.parsing import LINE_BREAK_RE, ParseError

# Above this share of control characters a file is treated as binary.
MAX_CONTROL_SHARE = 0.01
# The tokenizer reads a run of letters and digits longer than 100 characters as one
# [UNK]: counted as one token, it would still fill the answerer's context.
MAX_WORD_CHARS = 1000
# Words the model reads as one [UNK] each (over 100 letters and digits, and not
# hex, which keyword search still finds whole): a text mostly made of them has
# nothing to embed, and every one of its chunks gets the same vector.
UNREADABLE_WORD_CHARS = 100
MAX_UNREADABLE_SHARE = 0.5
MIN_BASE64_LINES = 10  # wrapped base64 (an embedded file) becomes noise chunks
MAX_DATA_URI_CHARS = 1000
# ASCII only: CJK text has no spaces, and the tokenizer reads each ideograph alone.
# Anchored at a word's start: unanchored, the search rescans every shorter run
# from each of its letters (quadratic in the run, 9 s on 10 MB of 1,000-letter
# words).
_LONG_WORD_RE = re.compile(rf"(?<![A-Za-z0-9])[A-Za-z0-9]{{{MAX_WORD_CHARS + 1},}}")
_UNREADABLE_WORD_RE = re.compile(
    rf"(?<![A-Za-z0-9])[A-Za-z0-9]{{{UNREADABLE_WORD_CHARS + 1},{MAX_WORD_CHARS}}}"
    r"(?![A-Za-z0-9])"
)
_ALNUM_RUN_RE = re.compile(r"[A-Za-z0-9]+")
_BASE64_LINE_RE = re.compile(r"[ \t>]*[A-Za-z0-9+/]{40,}={0,2}[ \t]*")
_HEX_RE = re.compile(r"[0-9A-Fa-f]+")
_DATA_URI_RE = re.compile(
    rf"data:[\w.+-]+/[\w.+-]+;base64,[A-Za-z0-9+/=\s]{{{MAX_DATA_URI_CHARS},}}"
)


def decode_upload(data: bytes, filename: str) -> str:
    """Bytes of an upload -> text with `\\n` line endings, or ParseError.

    We refuse non-UTF-8 input rather than guess an encoding: a wrong guess
    would silently corrupt the evidence that offsets point into.
    """
    if not data.strip():
        raise ParseError(gettext("%(file)s is empty") % {"file": filename})
    text = normalise_newlines(decode_text(data, filename))
    if not text.strip():
        raise ParseError(gettext("%(file)s is empty") % {"file": filename})
    _check_no_blobs(text, filename)
    return text


def normalise_newlines(text: str) -> str:
    return LINE_BREAK_RE.sub("\n", text)


# Longest first: a UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
)
# UTF-16 without a byte order mark, told from binary: at least this share of
# NULs at odd (or even) offsets, and at most the stray share at the others.
_UTF16_NUL_SHARE = 0.3
_UTF16_STRAY_SHARE = 0.05
_UTF16_MIN_BYTES = 32  # fewer tell nothing
# The binary check's share is also taken over the file's head: a binary header
# followed by a long text tail is still binary.
_BINARY_SAMPLE = 65536
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")


BOMS = tuple(bom for bom, _, _ in _BOMS)


def decode_text(data: bytes, filename: str) -> str:
    """Bytes decoded by their byte order mark (else UTF-8) and free of NULs and
    of too many control characters, or ParseError saying which is wrong."""
    text = _decode(data, filename)
    _check_not_binary(text, filename)
    return text


def _decode(data: bytes, filename: str) -> str:
    for bom, encoding, name in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom) :].decode(encoding)
            except UnicodeDecodeError as exc:
                raise ParseError(_not_decodable(filename, name, exc, len(bom))) from exc
    if b"\x00" in data:
        if _looks_utf16(data):
            raise ParseError(
                gettext(
                    "%(file)s looks like UTF-16 without a byte order mark; save it "
                    "as UTF-8 and upload it again"
                )
                % {"file": filename}
            )
        raise ParseError(
            gettext("%(file)s looks like a binary file (it has NUL bytes)")
            % {"file": filename}
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(_not_decodable(filename, "UTF-8", exc)) from exc


def _not_decodable(
    filename: str, encoding: str, exc: UnicodeDecodeError, skipped: int = 0
) -> str:
    """The message for bytes that are not `encoding`; `skipped`: the BOM's length
    (the offset counts from the start of the file)."""
    return gettext(
        "%(file)s is not valid %(encoding)s (byte %(byte)s at offset %(offset)d); "
        "save it as UTF-8 and upload it again"
    ) % {
        "file": filename,
        "encoding": encoding,
        "byte": f"{exc.object[exc.start]:#04x}",
        "offset": exc.start + skipped,
    }


def _looks_utf16(data: bytes) -> bool:
    """Latin text in UTF-16 has NULs in every other byte (the odd or the even
    ones) and hardly any in the others; binary files and UTF-32 have both."""
    head = data[:_BINARY_SAMPLE]
    if len(head) < _UTF16_MIN_BYTES:
        return False
    half = len(head) // 2
    few, many = sorted((head[0::2].count(0), head[1::2].count(0)))
    return many >= _UTF16_NUL_SHARE * half and few <= _UTF16_STRAY_SHARE * half


def _check_not_binary(text: str, filename: str) -> None:
    """No NUL anywhere (PostgreSQL cannot store one), and few control characters
    in the whole text and in its head."""
    if (nul := text.find("\x00")) != -1:
        raise ParseError(
            gettext(
                "%(file)s line %(line)d has a NUL character: it looks like a "
                "binary file"
            )
            % {"file": filename, "line": text.count(chr(10), 0, nul) + 1}
        )
    for sample in (text[:_BINARY_SAMPLE], text):
        control = len(_CONTROL_RE.findall(sample))
        if control > MAX_CONTROL_SHARE * len(sample):
            raise ParseError(
                gettext(
                    "%(file)s looks like a binary file (%(count)d control characters)"
                )
                % {"file": filename, "count": control}
            )


def _check_no_blobs(text: str, filename: str) -> None:
    """Refuse embedded files (base64, data: URIs) and endless words: they are no
    text to search, and would become noise chunks or one [UNK] of any length."""

    def line(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    if found := _DATA_URI_RE.search(text):
        raise ParseError(
            gettext(
                "%(file)s line %(line)d embeds a file as a data: URI (%(count)s "
                "characters); link to the file instead"
            )
            % {
                "file": filename,
                "line": line(found.start()),
                "count": f"{len(found.group()):,}",
            }
        )
    run, width = 0, 0
    for number, row in enumerate(text.split("\n"), 1):
        # Encoders wrap at one width; lists of hashes are hex, paths vary in length.
        data = row.strip(" \t>")
        if not _BASE64_LINE_RE.fullmatch(row) or _HEX_RE.fullmatch(data):
            run = 0
            continue
        run = run + 1 if len(data) == width else 1
        width = len(data)
        if run == MIN_BASE64_LINES:
            raise ParseError(
                gettext(
                    "%(file)s line %(line)d starts %(count)d+ lines of base64 data "
                    "(an embedded file?); remove them or link to the file instead"
                )
                % {"file": filename, "line": number - run + 1, "count": run}
            )
    if found := _LONG_WORD_RE.search(text):
        raise ParseError(
            gettext(
                "%(file)s line %(line)d has a word of %(count)s letters and digits; "
                "the model reads a word of over 100 as one unknown token, so "
                "nothing of it can be found. Remove it or break it up"
            )
            % {
                "file": filename,
                "line": line(found.start()),
                "count": f"{len(found.group()):,}",
            }
        )
    if found := mostly_unreadable(text):
        raise ParseError(
            gettext(
                "%(file)s is mostly words of over %(chars)d letters and digits "
                "(%(unreadable)s of its %(words)s words): the model reads each "
                "such word as one unknown token, so the text cannot be searched by "
                "meaning. Break the words up or upload the readable text"
            )
            % {
                "file": filename,
                "chars": UNREADABLE_WORD_CHARS,
                "unreadable": f"{found[0]:,}",
                "words": f"{found[1]:,}",
            }
        )


def mostly_unreadable(text: str) -> tuple[int, int] | None:
    """(words the model cannot read, all words) of `text`, when the first are
    over MAX_UNREADABLE_SHARE of its words; else None. Counted in words, not
    letters: a lab note quoting one 900-letter sequence is still mostly prose."""
    unreadable = len(unreadable_words(text))
    if not unreadable:
        return None
    words = sum(1 for _ in _ALNUM_RUN_RE.finditer(text))
    return (unreadable, words) if unreadable > MAX_UNREADABLE_SHARE * words else None


def unreadable_words(text: str) -> list[str]:
    """Words of `text` the model reads as one unknown token each: over
    UNREADABLE_WORD_CHARS letters and digits (up to MAX_WORD_CHARS), not hex."""
    return [
        word
        for found in _UNREADABLE_WORD_RE.finditer(text)
        if not _HEX_RE.fullmatch(word := found.group())
    ]
