"""What retrieval hands on: hits, passages and their locations, the result; and
the last stage, merging passages of one source that overlap or touch.

Pure: no database here (tests/test_retrieval_stages.py checks it).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kb import embedding

if TYPE_CHECKING:
    from kb.retrieval import reranking


@dataclass
class Hit:
    chunk_id: int
    source_id: int
    section_id: int
    chunk_index: int
    start: int
    end: int
    vector_rank: int | None = None
    keyword_rank: int | None = None
    score: float = 0.0
    heading_path: str = ""
    exact_rank: int | None = None  # in the exact leg (words matched as written)
    dated_rank: int | None = None  # in the dated leg (a record of the period asked)
    rare_rank: int | None = None  # among the holders of the question's rare words
    pinpoint: bool = False  # its exact tokens weigh more (search.pinpoints)

    @property
    def matched(self) -> str:
        """ "vector", "keyword" (stemmed or exact words) or "both"."""
        by_words = any(
            rank is not None
            for rank in (self.keyword_rank, self.exact_rank, self.rare_rank)
        )
        if self.vector_rank is not None and by_words:
            return "both"
        return "vector" if self.vector_rank is not None else "keyword"


@dataclass
class Location:
    """One original place a passage stands for: exact enough to cite."""

    section_id: int
    heading_path: str
    start: int
    end: int
    chunk_indexes: list[int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "section_id": self.section_id,
            "heading_path": self.heading_path,
            "start": self.start,
            "end": self.end,
            "chunk_indexes": self.chunk_indexes,
        }


class TextWindow:
    """The parts of a source's text retrieval read, sliced by offsets into the whole.

    Built from section bodies, which tile the document: a source can be one long
    document, and loading all of it for a few sections cost more than the search
    (issue #8). Slicing outside the loaded parts raises IndexError.
    """

    def __init__(self, parts: Iterable[tuple[int, str]] = ()) -> None:
        self.parts: list[tuple[int, str]] = []
        for start, text in sorted(parts):
            if self.parts:
                last_start, last = self.parts[-1]
                if start <= last_start + len(last):
                    tail = text[last_start + len(last) - start :]
                    self.parts[-1] = (last_start, last + tail)
                    continue
            self.parts.append((start, text))
        self._starts = [start for start, _ in self.parts]

    def __getitem__(self, key: slice) -> str:
        lo, hi = key.start, key.stop
        found = self.part_holding(lo, hi)
        if found is None:
            raise IndexError(f"{lo}:{hi} of the source was not loaded")
        start, text = found
        return text[lo - start : hi - start]

    def part_holding(self, lo: int, hi: int) -> tuple[int, str] | None:
        """The loaded part holding [lo, hi) whole and its offset, if one does."""
        i = bisect.bisect_right(self._starts, lo) - 1
        if i >= 0:
            start, text = self.parts[i]
            if hi <= start + len(text):
                return start, text
        return None


def below_title(heading_path: str, title: str = "") -> str:
    """The heading path below the title it starts with: every path starts with the
    title the source was indexed under (parsing._root_path). When that is `title`,
    all of it (a title may hold " > " itself, "Settings > Security"); else its
    first part (an editor may have retitled the source since)."""
    if title and (heading_path == title or heading_path.startswith(f"{title} > ")):
        return heading_path[len(title) + 3 :]
    return heading_path.partition(" > ")[2]


def heading_label(source_title: str, heading_path: str) -> str:
    """Source › heading path, under the source's current title."""
    rest = below_title(heading_path, source_title)
    first = source_title or heading_path.partition(" > ")[0]
    return " › ".join([first, *(rest.split(" > ") if rest else [])])


@dataclass
class Passage:
    source_id: int
    source_title: str
    file_name: str
    start: int
    end: int
    text: str
    score: float
    matched: set[str]
    locations: list[Location]
    tokens: int = 0
    rank: int = 0  # 1-based position in the context
    metadata: dict[str, Any] = field(default_factory=dict)
    source_text: TextWindow = field(default_factory=TextWindow, repr=False)

    def __post_init__(self) -> None:
        # The section it was chosen for: its label when neighbours merge in
        # ("shopt > globstar", not the "globskipdots" entry before it).
        self.lead = self.locations[0] if self.locations else None

    @property
    def heading_path(self) -> str:
        return self.lead.heading_path if self.lead else ""

    @property
    def label(self) -> str:
        return heading_label(self.source_title, self.heading_path)

    @property
    def chunk_indexes(self) -> list[int]:
        return sorted({i for loc in self.locations for i in loc.chunk_indexes})

    @property
    def matched_label(self) -> str:
        # A table's header line merged into a passage says nothing of how it matched.
        matched = self.matched - {"header"} or self.matched
        return (
            "both"
            if "both" in matched or len(matched) > 1
            else (next(iter(matched), ""))
        )

    @property
    def is_header(self) -> bool:
        """Only a table's header line, for the rows after it (expansion.regions)."""
        return self.matched == {"header"}

    @property
    def sections_merged(self) -> int:
        return len({loc.section_id for loc in self.locations})

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.rank,
            "source_id": self.source_id,
            "source": self.source_title,
            "file": self.file_name,
            "heading_path": self.heading_path,
            "chunk_indexes": self.chunk_indexes,
            "start": self.start,
            "end": self.end,
            "score": round(self.score, 5),
            "matched": self.matched_label,
            "tokens": self.tokens,
            "text": self.text,
            "locations": [loc.as_dict() for loc in self.locations],
            "metadata": self.metadata,
        }


@dataclass
class Result:
    question: str
    passages: list[Passage]
    context_tokens: int
    budget_tokens: int
    k: int
    mode: str
    timings_ms: dict[str, float]
    hits: list[Hit] = field(default_factory=list)
    # Cosine similarity of the nearest chunk to the question (None without vector
    # search): how close the collection comes to the question at all.
    top_similarity: float | None = None
    # What the cross-encoder did to the top sections (None: no reranker set).
    reranking: reranking.Report | None = None
    # The question's embedding (None without vector search): the question log keeps
    # it to group similar questions (kb/questions.py).
    vector: Any = field(default=None, repr=False)
    # The collection's embedding model (kb/embedding_models.py): it made
    # `vector`, and its floor says whether the question is off topic
    # (answering.off_topic).
    embedding_model: str = ""


# The model whose tokens measure the context: the collection's, set by retrieve()
# (its sections' and chunks' stored counts are in those tokens too, issue #27).
_counting: ContextVar[embedding.Embedder | None] = ContextVar(
    "context_counting", default=None
)


@contextmanager
def counted_by(embedder: embedding.Embedder) -> Iterator[None]:
    """Measure the context in `embedder`'s tokens within the block."""
    token = _counting.set(embedder)
    try:
        yield
    finally:
        _counting.reset(token)


def context_tokens(text: str) -> int:
    """Tokens a passage of this text adds to the context (no [CLS]/[SEP]: it is
    not embedded), in the collection's model's tokens (`counted_by`)."""
    return (_counting.get() or embedding.get_embedder()).count_text_tokens(text)


def cut_to_tokens(text: str, tokens: int) -> str:
    """The longest prefix of `text` (whole words) within `tokens` context tokens."""
    if context_tokens(text) <= tokens:
        return text
    lo, hi = 0, len(text)  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if context_tokens(text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid
    cut = text[:lo]
    if lo < len(text) and not text[lo].isspace() and " " in cut:
        cut = cut[: cut.rfind(" ")]  # no half word
    return cut.rstrip()


def merge(passages: list[Passage]) -> list[Passage]:
    """Join passages of one source that overlap or touch; the best rank leads."""
    merged: list[Passage] = []
    for passage in passages:
        for other in merged:
            if other.source_id == passage.source_id and _touch(other, passage):
                _absorb(other, passage)
                break
        else:
            merged.append(passage)
    # Absorbing can make two earlier passages touch: repeat until stable.
    if len(merged) < len(passages):
        return merge(merged)
    return merged


def _touch(a: Passage, b: Passage) -> bool:
    """Overlapping, or separated by nothing but whitespace."""
    if a.start <= b.end and b.start <= a.end:
        return True
    lo, hi = (a.end, b.start) if a.end <= b.start else (b.end, a.start)
    try:
        return not a.source_text[lo:hi].strip()
    except IndexError:  # not loaded: another section lies between them
        return False


def _absorb(into: Passage, other: Passage) -> None:
    into.start, into.end = min(into.start, other.start), max(into.end, other.end)
    into.text = into.source_text[into.start : into.end]
    into.locations = sorted(into.locations + other.locations, key=lambda loc: loc.start)
    into.matched |= other.matched
    into.score = max(into.score, other.score)
