"""Golden spans located by their text, whatever the format (issue #16).

A golden file's spans are offsets into Markdown files. The same corpus read from
its HTML, DOCX or PDF rendering stores other text: link URLs gone, emphasis and
table pipes written otherwise, lines wrapped elsewhere, list numbers renumbered.
`locate` finds a span's text in such a text anyway, by comparing "skeletons":
the word characters only (letters and digits, case-folded, NFKC-normalised so
that a PDF's "ﬁ" ligature is "fi"), with Markdown and HTML markup left out, each
mapped back to the original offset it came from.

No ORM here: text in, offsets out. Linear in the text's length: the skeleton is
built in one pass and searched with str.find.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath

# Markup whose characters are left out of the skeleton entirely (words in it are
# not the document's words): link and image targets, reference definitions,
# HTML tags, code fence lines with their info string, list markers (numbered
# lists are renumbered by renderers) and footnote markers.
_SKIP_RE = re.compile(
    r"\]\((?:[^()\s]|\([^()\s]*\))*(?:\s+\"[^\"]*\")?\)"  # ](url "title")
    r"|\]\[[^\]\n]*\]"  # ][ref]
    r"|^[ \t]*\[[^\]\n]+\]:[ \t]*\S+.*$"  # [ref]: url
    r"|</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>"  # <tag attr>, not <https://…>
    r"|^[ \t]*(?:```|~~~)[^\n]*$"  # fence lines
    r"|^[ \t>]*(?:[-*+]|\d{1,9}[.)])[ \t]+"  # list markers (also in quotes)
    r"|\[\^[^\]\n]+\]",  # footnote markers
    re.M,
)
_ENTITY_RE = re.compile(
    r"&(?:#\d{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"
)


@dataclass
class Skeleton:
    """A text's word characters, and for each the original [start, end)."""

    chars: str
    starts: list[int]
    ends: list[int]


def skeleton(text: str) -> Skeleton:
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []

    def add(piece: str, start: int, end: int) -> None:
        for ch in piece:
            if not ch.isalnum():
                continue
            if not ch.isascii():
                ch = unicodedata.normalize("NFKC", ch)
            for one in ch.casefold():
                if one.isalnum():
                    chars.append(one)
                    starts.append(start)
                    ends.append(end)

    def plain(start: int, end: int) -> None:
        for found in _ENTITY_RE.finditer(text, start, end):
            for i in range(start, found.start()):
                add(text[i], i, i + 1)
            add(html.unescape(found.group()), found.start(), found.end())
            start = found.end()
        for i in range(start, end):
            add(text[i], i, i + 1)

    pos = 0
    for skipped in _SKIP_RE.finditer(text):
        plain(pos, skipped.start())
        pos = skipped.end()
    plain(pos, len(text))
    return Skeleton("".join(chars), starts, ends)


class Unlocatable(ValueError):
    """The span's text is not in the text (the message says why)."""


def locate(
    span_text: str, text: str, hint: float = 0.0, *, within: Skeleton | None = None
) -> tuple[int, int]:
    """The [start, end) of `text` that holds `span_text`, ignoring whitespace and
    markup (the range runs from the span's first word character to its last).

    `hint` is where the span was expected, as a fraction of the text (0-1): when
    the span's words occur several times, the occurrence nearest to it wins.
    `within` is `skeleton(text)`, when the caller has it already.
    """
    target = skeleton(span_text).chars
    if not target:
        raise Unlocatable("the span has no words to look for")
    found = within or skeleton(text)
    hits = []
    at = found.chars.find(target)
    while at >= 0:
        hits.append(at)
        at = found.chars.find(target, at + 1)
    if not hits:
        raise Unlocatable("its words are not in the text")
    expected = min(max(hint, 0.0), 1.0) * len(found.chars)
    best = min(hits, key=lambda h: abs(h - expected))
    return found.starts[best], found.ends[best + len(target) - 1]


def same_document(golden_file: str, file_name: str) -> bool:
    """Whether a golden span's file names this source, whatever its format:
    "docs/workers.md" names "docs/workers.pdf" (same folder and stem)."""
    a, b = PurePosixPath(golden_file), PurePosixPath(file_name)
    return a == b or a.with_suffix("") == b.with_suffix("")


RELOCATE_WINDOW = 20_000  # characters either side of the old place, searched first
MAX_OCCURRENCES = 100  # of the exact text, the nearest of which is taken


def relocate(cited: str, text: str, old_start: int) -> tuple[int, int] | None:
    """Where text cited at `old_start` of an earlier version of a document is in
    `text`, its current version: the same characters when they are there (the
    occurrence nearest the old place), else the same words ignoring whitespace
    and markup (`locate`); None when they are gone. Each is looked for near the
    old place first, so a long document is read whole only when it must be."""
    if not cited:
        return None
    if text.startswith(cited, old_start):  # where it was
        return old_start, old_start + len(cited)
    near = (
        max(0, old_start - RELOCATE_WINDOW),
        min(len(text), old_start + len(cited) + RELOCATE_WINDOW),
    )
    everywhere = (0, len(text))
    for (lo, hi), cap in ((near, None), (everywhere, MAX_OCCURRENCES)):
        hits, at = [], text.find(cited, lo, hi)  # near: every copy (a window)
        while at >= 0 and (cap is None or len(hits) < cap):
            hits.append(at)
            at = text.find(cited, at + 1, hi)
        if hits:
            best = min(hits, key=lambda h: abs(h - old_start))
            return best, best + len(cited)
    for lo, hi in (near, everywhere):
        try:
            start, end = locate(cited, text[lo:hi], (old_start - lo) / max(hi - lo, 1))
        except Unlocatable:
            continue
        return lo + start, lo + end
    return None
