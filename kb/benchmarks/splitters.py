"""The chunkers the quality benchmark compares, each giving located chunks.

Ours go through `kb.ingestion.prepare` on unsaved rows, so chunks and their
embedded texts (heading-path prefix included) are exactly what ingestion
stores. The peers are the two splitters of the Chroma report, sized in cl100k
tokens as its authors did: LangChain's RecursiveCharacterTextSplitter with
the report's separators, and TokenText (fixed windows of cl100k tokens).

Every chunk carries its true range. The report's code instead maps a chunk to
the first occurrence of its text in the corpus (`first_occurrence`), which
moves repeated text to an earlier place; the benchmark scores both.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from bisect import bisect_right
from dataclasses import dataclass
from functools import cache
from importlib import resources
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from kb.ingestion import prepare
from kb.metadata import IGNORE, Policy
from kb.models import Collection, Source
from kb.parsing import title_from_filename

if TYPE_CHECKING:
    import tiktoken

# tiktoken's own URL and hash for cl100k_base; the file itself comes from the
# bpe-openai wheel, so nothing is downloaded at run time.
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# The separators of the report's RecursiveTokenChunker (LangChain's default
# list plus sentence ends).
REPORT_SEPARATORS = ["\n\n", "\n", ".", "?", "!", " ", ""]


class SplitterError(Exception):
    """A splitter produced a chunk that cannot be placed in its corpus."""


@dataclass(frozen=True)
class BenchChunk:
    corpus: str
    start: int  # true range in the corpus, end-exclusive
    end: int
    text: str  # the chunk as the splitter returned it
    embedded: str  # what the model reads
    section: tuple[int, int] | None = None  # kb only: its section's range


# --- cl100k, offline -------------------------------------------------------------


def cl100k() -> tiktoken.Encoding:
    """tiktoken's cl100k_base, loaded from the bpe-openai wheel's copy."""
    return _cl100k(str(Path(settings.KB_DATA_DIR) / "bench" / "tiktoken"))


@cache
def _cl100k(cache_dir: str) -> tiktoken.Encoding:
    import tiktoken

    _fill_tiktoken_cache(Path(cache_dir))
    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = cache_dir
    try:
        return tiktoken.get_encoding("cl100k_base")
    finally:
        if previous is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous


def _fill_tiktoken_cache(cache_dir: Path) -> None:
    """Write cl100k_base where tiktoken looks for it: sha1(URL) in the cache dir.

    The hash is checked here, because a file tiktoken rejects would make it
    try the network.
    """
    target = cache_dir / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    if target.is_file() and _sha256(target.read_bytes()) == CL100K_SHA256:
        return
    packed = resources.files("bpe_openai") / "data" / "cl100k_base.tiktoken.gz"
    data = gzip.decompress(packed.read_bytes())
    if _sha256(data) != CL100K_SHA256:
        raise SplitterError("bpe-openai's cl100k_base does not match tiktoken's hash")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache_dir, delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, target)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cl100k_len(text: str) -> int:
    # As the report's openai_token_count: special-token text is plain text.
    return len(cl100k().encode(text, disallowed_special=()))


# --- ours --------------------------------------------------------------------


def kb_chunks(
    corpus: str, text: str, strategy: str, tokens: int, overlap: int, prefix: bool
) -> tuple[list[BenchChunk], int]:
    """Chunks as ingestion builds them; also the count over the window."""
    file_name = f"{corpus}.md"
    source = Source(
        file_name=file_name, title=title_from_filename(file_name), text=text
    )
    collection = Collection(
        chunk_strategy=strategy, chunk_tokens=tokens, chunk_overlap=overlap
    )
    overrides = {} if prefix else {"title": IGNORE, "heading_path": IGNORE}
    prepared = prepare(source, collection, Policy.build(overrides))
    sections = {s.index: (s.start, s.end) for s in prepared.document.sections}
    chunks = [
        BenchChunk(
            corpus,
            p.data.start,
            p.data.end,
            p.data.text,
            p.embedded_text,
            sections.get(p.data.section_index),
        )
        for p in prepared.chunks
    ]
    over = sum(p.token_count > prepared.window for p in prepared.chunks)
    return chunks, over


# --- the report's splitters --------------------------------------------------------


def recursive_chunks(
    corpus: str, text: str, size: int, overlap: int, unit: str = "cl100k"
) -> list[BenchChunk]:
    """LangChain's RecursiveCharacterTextSplitter as the report configures it."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(
        chunk_size=size,
        chunk_overlap=overlap,
        length_function=cl100k_len if unit == "cl100k" else len,
        separators=REPORT_SEPARATORS if unit == "cl100k" else None,
        keep_separator=True,
    )
    pieces = splitter.split_text(text)
    starts = locate_in_order(text, pieces, overlapping=overlap > 0)
    return [
        BenchChunk(corpus, start, start + len(piece), piece, piece)
        for start, piece in zip(starts, pieces)
    ]


def token_text_chunks(
    corpus: str, text: str, size: int, overlap: int
) -> list[BenchChunk]:
    """Windows of `size` cl100k tokens, each `size - overlap` after the last.

    As LangChain's TokenTextSplitter (the report's FixedTokenChunker): the
    chunk is the decoded window. A window can cut a character's UTF-8 bytes;
    its range then takes in the whole character.
    """
    encoding = cl100k()
    ids = encoding.encode(text)
    token_bytes = [len(b) for b in encoding.decode_tokens_bytes(ids)]
    byte_ends = [0, *accumulate(token_bytes)]
    char_bytes = [0, *accumulate(len(ch.encode("utf-8")) for ch in text)]
    chunks = []
    step = size - overlap
    for first in range(0, len(ids), step):
        last = min(first + size, len(ids))
        start = bisect_right(char_bytes, byte_ends[first]) - 1
        end = _char_end(char_bytes, byte_ends[last])
        piece = encoding.decode(ids[first:last])
        chunks.append(BenchChunk(corpus, start, end, piece, piece))
        if last == len(ids):
            break
    return chunks


def _char_end(char_bytes: list[int], byte_offset: int) -> int:
    """The first character boundary at or after `byte_offset`."""
    index = bisect_right(char_bytes, byte_offset) - 1
    return index if char_bytes[index] == byte_offset else index + 1


def locate_in_order(text: str, pieces: list[str], overlapping: bool) -> list[int]:
    """True start of each piece, searching forward from the previous one."""
    starts = []
    cursor = 0
    for piece in pieces:
        start = text.find(piece, cursor)
        if start < 0:
            raise SplitterError(f"chunk {piece[:60]!r} is not in the text")
        starts.append(start)
        cursor = start + 1 if overlapping else start + len(piece)
    return starts


def first_occurrence(text: str, piece: str) -> tuple[int, int] | None:
    """The report's placement: drop one trailing '.', take the first match.

    None when the piece is not an exact substring (the report then falls
    back to fuzzy matching, which we do not copy; the caller keeps the true
    range and counts these).
    """
    if piece.endswith("."):
        piece = piece[:-1]
    start = text.find(piece)
    return None if start < 0 else (start, start + len(piece))
