"""Sections -> chunks sized in the embedder's tokens (issue #4).

No ORM and no model here: the token counter is a parameter, so chunking is a
pure function of (document, text, counter, settings). Budgets are counted the
way `kb.embedding.count_tokens` counts, [CLS] and [SEP] included.

Two strategies:
- "structure": chunks never cross a section; adjacent blocks are grouped up
  to the budget; tables give one chunk per row (with the table's caption, its
  group label and its column names); code is split at lines.
- "fixed": the baseline of N tokens per chunk over the whole document, used by
  evaluation only. N may exceed the window on purpose (the 800-token trap).

A chunk is embedded as the text it shows (embedded_text): raw HTML blocks as
their text, Markdown links as their text (kb.markup_text).
"""

from __future__ import annotations

import math
import re
import statistics
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from kb.markup_text import html_text, link_text, without_shortcodes
from kb.parsing import (
    Block,
    Document,
    ParseError,
    SectionData,
    TableRow,
)
from kb.percentiles import percentile
from kb.sentences import units

DEFAULT_MAX_TOKENS = 200
DEFAULT_OVERLAP = 0
STRATEGIES = ("structure", "fixed")
# Room needed for a labelled table cell or a code line plus its fence header.
MIN_BUDGET = 16
# An intro sentence, a row label or a column name may use this share at most.
CONTEXT_SHARE = 0.25
# A table's caption: the one-line paragraph right above it, of at most this many
# words, that ends without a full stop ("Table A.1. PostgreSQL Error Codes",
# "Supported options:") or opens with a numbered label ("Table 3: Limits.").
CAPTION_WORDS = 20
_CAPTION_LABEL_RE = re.compile(r"[*_]*\w+\.?[ \t]+[\w.-]*\d[\w.-]*[*_]*[.:]")
_SENTENCE_BREAK_RE = re.compile(r"[.!?][)\]\"'`*_]*[ \t]+\S")


class ChunkKind(StrEnum):
    """What a chunk holds (Chunk.kind): retrieval treats table rows apart."""

    TEXT = "text"
    TABLE_ROW = "table_row"
    CODE = "code"


_WORD_RE = re.compile(r"\S+")
# A sentence ends at . ! ? (plus closing quotes/brackets/emphasis) before
# whitespace; a blank line or a nested list item also starts a new piece.
_BLANK_LINE_RE = re.compile(r"\n[ \t]*\n")
_SENTENCE_BREAK_RE = re.compile(
    r"[.!?][\"'\u201d\u2019)\]*_]*\s+"
    r"|\n[ \t]*\n"
    r"|\n(?=[ \t>]*(?:[-*+]|\d{1,9}[.)])[ \t])"
)


@dataclass
class ChunkData:
    """One chunk; `text` is always `source_text[start:end]`.

    `embed_text` is what gets embedded (before any metadata prefix): the text
    itself for ordinary chunks, "Caption; Group; Column: value; ..." for table
    rows (caption and group label when the table has them: table_context), and
    the intro sentence plus fence language plus lines for code.
    """

    section_index: int
    chunk_index: int
    start: int
    end: int
    text: str
    embed_text: str
    heading_path: str
    kind: ChunkKind
    token_count: int  # count_tokens(embed_text), special tokens included
    is_fallback: bool = False  # a boundary was cut inside a sentence
    # The answerable units (kb.sentences.units) of text, as (start, end) in the
    # source text and (lo, hi) in embed_text where each is read (unit_parts).
    units: list[tuple[int, int, int, int]] = field(default_factory=list)


@dataclass
class ChunkResult:
    chunks: list[ChunkData]
    sections: int
    strategy: str
    max_tokens: int
    overlap: int
    # Chunks with a boundary cut at a word (or character), the last resort.
    word_fallbacks: int = 0
    # Chunks whose embed_text exceeds max_tokens (only the fixed strategy).
    over_budget: int = 0

    @property
    def word_fallback_share(self) -> float:
        return self.word_fallbacks / len(self.chunks) if self.chunks else 0.0


def length_figures(counts: Sequence[int]) -> dict[str, float]:
    """How long chunks are in tokens (`counts`: count_tokens of each embed_text),
    as the source statistics and kb_chunk print them; zeros for no chunks."""
    if not counts:
        return {"median_tokens": 0, "p95_tokens": 0, "max_tokens": 0}
    return {
        "median_tokens": statistics.median(counts),
        "p95_tokens": round(percentile(counts, 95), 1),
        "max_tokens": max(counts),
    }


@dataclass
class _Piece:
    start: int
    end: int
    tokens: int  # count of text[start:end], specials included
    is_fallback: bool = False
    glue: bool = False  # a lead-in line: keep it with the next piece


@dataclass
class _Draft:
    start: int
    end: int
    kind: ChunkKind
    embed_text: str | None = None  # None: the source text itself
    is_fallback: bool = False


@dataclass
class _Labelled:
    """A table cell (or part of one) as "Column: value", with its source span."""

    start: int
    end: int
    text: str
    tokens: int
    is_fallback: bool = False


@dataclass
class _Counter:
    """count_tokens with a per-document cache and additive estimates.

    For WordPiece, tokens never span whitespace, so the count of pieces joined
    by whitespace is the sum of their counts minus the repeated specials. We
    still verify every finished chunk with a real count.
    """

    count_tokens: Callable[[str], int]
    cache: dict[str, int] = field(default_factory=dict)
    specials: int = 0

    def __post_init__(self) -> None:
        self.specials = self.count_tokens("")

    def __call__(self, text: str) -> int:
        count = self.cache.get(text)
        if count is None:
            count = self.cache[text] = self.count_tokens(text)
        return count

    def prime(self, texts: Iterable[str]) -> None:
        """Count `texts` as one text: a counter that remembers words (the
        embedder's) tokenizes their new words in one batch, so counting each
        of them afterwards is lookups. Nothing is cached per text."""
        self.count_tokens("\n".join(texts))

    def joined(self, counts: Iterable[int], extra: int = 0) -> int:
        return self.specials + extra + sum(count - self.specials for count in counts)


_SAYS_RE = re.compile(r"[^\W_]")  # a letter or digit: a text that says something
_TAG_RE = re.compile(r"<[^<>\n]*>")
_MDX_COMMENT_RE = re.compile(r"\{/\*[^\n]*?\*/\}")
_RULE_RE = re.compile(r"[ \t]*(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})")


def _is_markup(text: str) -> bool:
    """Whether `text` is tags, MDX comments and thematic breaks alone."""
    rest = _MDX_COMMENT_RE.sub("", _TAG_RE.sub("", text))
    lines = rest.split("\n")
    return all(not line.strip() or _RULE_RE.fullmatch(line) for line in lines)


def chunk_document(
    doc: Document,
    text: str,
    *,
    count_tokens: Callable[[str], int],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    overlap: int = DEFAULT_OVERLAP,
    strategy: str = "structure",
    prefix_tokens: int = 0,
    section_prefix_tokens: dict[int, int] | None = None,
) -> ChunkResult:
    """Chunks of `doc`, whose offsets index `text` (the text it was parsed from).

    The budget is `max_tokens - prefix_tokens` tokens of count_tokens(embed_text)
    (specials included): the caller clamps max_tokens to the usable window and
    reserves `prefix_tokens` for a metadata prefix. `section_prefix_tokens` maps a
    section index to its own prefix cost, so one long heading path shrinks only
    its own section's chunks. Overlap is in tokens.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, not {strategy!r}")
    budget = max_tokens - prefix_tokens
    if budget < MIN_BUDGET:
        raise ValueError(f"a budget of {budget} tokens is below {MIN_BUDGET}")
    if overlap < 0:
        raise ValueError("overlap cannot be negative")
    if not text.strip() or not doc.sections:
        raise ParseError(f"{doc.title} is empty")
    overlap = min(overlap, budget // 2)
    tokens = _Counter(count_tokens)
    # The whole document first: a counter that remembers words (the embedder's)
    # tokenizes all of them in one batch; its parts are then lookups.
    tokens(text)
    if strategy == "fixed":
        placed = _fixed_drafts(doc, text, tokens, budget, overlap)
    else:
        own = section_prefix_tokens or {}
        placed = [
            (section, draft)
            for section in doc.sections
            for draft in _section_drafts(
                section,
                text,
                tokens,
                max(MIN_BUDGET, max_tokens - own.get(section.index, prefix_tokens)),
                overlap,
            )
        ]
    html = HTMLBlocks(doc.sections)
    embed_texts = [
        embedded_text(text, draft.start, draft.end, html)
        if draft.embed_text is None
        else draft.embed_text
        for _, draft in placed
    ]
    # A draft of markup alone ("</Sandpack>", "<InlineToc />", a "---" rule of
    # MDX pages: a tenth of React's docs) shows no word: embedded, it would be
    # its heading path alone, and found for any question about that heading.
    kept = [
        i
        for i, (said, (_, draft)) in enumerate(zip(embed_texts, placed, strict=True))
        if _SAYS_RE.search(said) or not _is_markup(text[draft.start : draft.end])
    ]
    if len(kept) < len(placed):
        placed = [placed[i] for i in kept]
        embed_texts = [embed_texts[i] for i in kept]
    # Link text and HTML text hold words the whole text did not: one batch.
    tokens.prime(embed_texts)
    chunks = [
        _chunk(index, section, draft, embed_text, text, tokens, html)
        for index, ((section, draft), embed_text) in enumerate(
            zip(placed, embed_texts, strict=True)
        )
    ]
    return ChunkResult(
        chunks=chunks,
        sections=len(doc.sections),
        strategy=strategy,
        max_tokens=budget,
        overlap=overlap,
        word_fallbacks=sum(chunk.is_fallback for chunk in chunks),
        over_budget=sum(chunk.token_count > budget for chunk in chunks),
    )


def _chunk(
    index: int,
    section: SectionData,
    draft: _Draft,
    embed_text: str,
    text: str,
    tokens: _Counter,
    html: HTMLBlocks,
) -> ChunkData:
    source = text[draft.start : draft.end]
    return ChunkData(
        section_index=section.index,
        chunk_index=index,
        start=draft.start,
        end=draft.end,
        text=source,
        embed_text=embed_text,
        heading_path=section.heading_path,
        kind=draft.kind,
        token_count=tokens(embed_text),
        is_fallback=draft.is_fallback,
        units=unit_parts(text, draft.start, draft.end, embed_text, html),
    )


def unit_parts(
    text: str, start: int, end: int, embed_text: str, html: HTMLBlocks
) -> list[tuple[int, int, int, int]]:
    """The units of text[start:end] (sentences, list items, rows, code
    blocks: what an answer quotes), each with the range of `embed_text` it is
    read as: its own embedded form, found in order; else (a table row read as
    "Column: value", a unit the chunk rewrites) the whole embed_text, so the
    unit stands for what its chunk says. Linear in the chunk's length."""
    found: list[tuple[int, int, int, int]] = []
    cursor = 0
    for lo, hi in units(text, start, end):
        form = embedded_text(text, lo, hi, html).strip()
        at = embed_text.find(form, cursor) if form else -1
        if at < 0:
            found.append((lo, hi, 0, len(embed_text)))
            continue
        found.append((lo, hi, at, at + len(form)))
        cursor = at + len(form)
    return found


# --- the embedded text: HTML blocks as the text they show, links as their text ---
# (kb.markup_text says why)

# Where a tag can start: "<" before a name, "/", "!" or "?" ("a < b" is text).
_TAG_START_RE = re.compile(r"<[A-Za-z/!?]")
TAG_LOOKBACK = 2000  # characters read back for an open tag (tags are short)


class HTMLBlocks:
    """A document's raw HTML blocks, found once, for embedded_text()."""

    def __init__(self, sections: list[SectionData]) -> None:
        self.spans = [
            (b.start, b.end) for s in sections for b in s.blocks if b.kind == "html"
        ]
        self.starts = [start for start, _ in self.spans]

    def overlapping(self, start: int, end: int) -> list[tuple[int, int]]:
        first = max(0, bisect_right(self.starts, start) - 1)
        found = []
        for block_start, block_end in self.spans[first:]:
            if block_start >= end:
                break
            if block_end > start:
                found.append((block_start, block_end))
        return found


def _open_tag(text: str, lo: int, hi: int) -> int | None:
    """Where a tag opened in text[lo:hi] and not closed by its end starts."""
    last = None
    for found in _TAG_START_RE.finditer(text, lo, hi):
        last = found.start()
    if last is None or text.find(">", last, hi) != -1:
        return None
    return last


def embedded_text(text: str, start: int, end: int, html: HTMLBlocks) -> str:
    """text[start:end] as it is embedded: HTML blocks as the text they show,
    Markdown links as their text (link_text), Hugo's shortcodes as theirs
    (without_shortcodes)."""
    pieces, position = [], start
    for block_start, block_end in html.overlapping(start, end):
        lo, hi = max(block_start, start), min(block_end, end)
        # A chunk of a long block can start or end inside a tag: read from the
        # tag's end, up to the tag's start (the block's own text decides).
        back = max(block_start, lo - TAG_LOOKBACK)
        if _open_tag(text, back, lo) is not None:
            close = text.find(">", lo, hi)
            lo = hi if close == -1 else close + 1
        hi_cut = hi
        if lo < hi and (cut := _open_tag(text, max(lo, hi - TAG_LOOKBACK), hi)):
            hi_cut = cut
        pieces.append(text[position : max(block_start, start)])
        pieces.append(html_text(text[lo:hi_cut]))
        position = hi
    pieces.append(text[position:end])
    return link_text(without_shortcodes("".join(pieces)))


# --- structure strategy ---------------------------------------------------


def _section_drafts(
    section: SectionData, text: str, tokens: _Counter, budget: int, overlap: int
) -> list[_Draft]:
    """The heading line is not repeated in chunks: every chunk stores the path."""
    drafts: list[_Draft] = []
    run: list[_Piece] = []
    previous: Block | None = None
    for block in section.blocks:
        if block.kind == "table" and block.rows:
            drafts += _text_drafts(run, text, tokens, budget, overlap)
            caption = table_caption(previous, text)
            drafts += _table_drafts(block, caption, text, tokens, budget)
            run = []
        elif block.kind == "code" and _has_code(block, text):
            drafts += _text_drafts(run, text, tokens, budget, overlap)
            intro = _intro(previous, text, tokens, budget)
            drafts += _code_drafts(block, intro, text, tokens, budget)
            run = []
        elif block.kind == "list" and block.items:
            for item in block.items:
                run += _fit(item.start, item.end, text, tokens, budget)
        else:
            pieces = _fit(block.start, block.end, text, tokens, budget)
            # "Check the following:" belongs with (at least) the first item.
            pieces[-1].glue = block.kind == "paragraph" and _is_lead_in(text, block)
            run += pieces
        previous = block
    return drafts + _text_drafts(run, text, tokens, budget, overlap)


def _has_code(block: Block, text: str) -> bool:
    return block.inner is not None and bool(
        text[block.inner.start : block.inner.end].strip()
    )


def _is_lead_in(text: str, block: Block) -> bool:
    return text[block.end - 1] == ":"


def _text_drafts(
    pieces: list[_Piece], text: str, tokens: _Counter, budget: int, overlap: int
) -> list[_Draft]:
    if not pieces:
        return []
    groups = _pack(_glue(pieces, text, tokens, budget), text, tokens, budget - overlap)
    drafts = [
        _Draft(
            group[0].start, group[-1].end, ChunkKind.TEXT, None, _any_fallback(group)
        )
        for group in groups
    ]
    if overlap:
        # Computed before any start moves, so each repeats only its predecessor.
        starts = [drafts[0].start] + [
            _overlap_start(previous, draft, text, tokens, budget, overlap)
            for previous, draft in zip(drafts, drafts[1:], strict=False)
        ]
        for draft, start in zip(drafts, starts, strict=True):
            draft.start = start
    return drafts


def _any_fallback(pieces: list[_Piece]) -> bool:
    return any(piece.is_fallback for piece in pieces)


def _glue(
    pieces: list[_Piece], text: str, tokens: _Counter, budget: int
) -> list[_Piece]:
    """Merge each lead-in piece with the next one when both fit together."""
    merged: list[_Piece] = []
    for piece in pieces:
        lead = merged[-1] if merged else None
        if lead and lead.glue and tokens.joined([lead.tokens, piece.tokens]) <= budget:
            count = tokens(text[lead.start : piece.end])
            if count <= budget:
                merged[-1] = _Piece(
                    lead.start, piece.end, count, lead.is_fallback or piece.is_fallback
                )
                continue
        merged.append(piece)
    return merged


def _pack(
    pieces: list[_Piece], text: str, tokens: _Counter, budget: int, prefix: str = ""
) -> list[list[_Piece]]:
    """Group consecutive pieces up to `budget`, balanced so no tiny tail is left.

    Each group is counted with `prefix` in front. A piece larger than `budget`
    (possible when overlap lowers it) gets a group of its own; _fit already
    keeps every piece within the full budget.
    """
    base = tokens(prefix) - tokens.specials
    total = tokens.joined((piece.tokens for piece in pieces), base)
    room = budget - tokens.specials - base
    parts = max(1, math.ceil((total - tokens.specials - base) / max(1, room)))
    target = tokens.specials + base + (total - tokens.specials - base) / parts
    groups = []
    first = 0
    while first < len(pieces):
        last = first + 1
        estimate = pieces[first].tokens + base
        while last < len(pieces):
            cost = pieces[last].tokens - tokens.specials
            lead_in = pieces[last - 1].glue
            if estimate + cost > budget or (estimate >= target and not lead_in):
                break
            estimate += cost
            last += 1
        # The estimate is exact for WordPiece; the real count is the contract.
        while (
            last - first > 1
            and tokens(prefix + _joined(pieces, first, last, text)) > budget
        ):
            last -= 1
        groups.append(pieces[first:last])
        first = last
    return groups


def _joined(pieces: list[_Piece], first: int, last: int, text: str) -> str:
    return text[pieces[first].start : pieces[last - 1].end]


def _overlap_start(
    previous: _Draft,
    draft: _Draft,
    text: str,
    tokens: _Counter,
    budget: int,
    overlap: int,
) -> int:
    """Start earlier, at a word of `previous`, to repeat up to `overlap` tokens."""
    room = min(overlap, budget - tokens(text[draft.start : draft.end]))
    start = draft.start
    used = 0
    words = list(_WORD_RE.finditer(text, previous.start, previous.end))
    for word in reversed(words):
        cost = tokens(word.group()) - tokens.specials
        if used + cost > room:
            break
        used += cost
        start = word.start()
    if start < draft.start and tokens(text[start : draft.end]) > budget:
        return draft.start
    return start


def _fit(
    start: int, end: int, text: str, tokens: _Counter, budget: int
) -> list[_Piece]:
    """text[start:end] as pieces within budget: whole, sentences, words, chars."""
    count = tokens(text[start:end])
    if count <= budget:
        return [_Piece(start, end, count)]
    sentences = _sentence_spans(text, start, end)
    if len(sentences) == 1:
        return _word_pieces(start, end, text, tokens, budget)
    pieces = []
    for first, last in sentences:
        count = tokens(text[first:last])
        if count <= budget:
            pieces.append(_Piece(first, last, count))
        else:
            pieces += _word_pieces(first, last, text, tokens, budget)
    return pieces


def _sentence_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    return _sentence_like(_SENTENCE_BREAK_RE, text, start, end)


def _sentence_like(
    pattern: re.Pattern[str], text: str, start: int, end: int
) -> list[tuple[int, int]]:
    """text[start:end] cut after each match of `pattern`, whitespace trimmed."""
    spans = []
    position = start
    for match in pattern.finditer(text, start, end):
        spans += _stripped(text, position, match.end())
        position = match.end()
    return spans + _stripped(text, position, end)


def _stripped(text: str, start: int, end: int) -> list[tuple[int, int]]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return [(start, end)] if start < end else []


def _word_pieces(
    start: int, end: int, text: str, tokens: _Counter, budget: int
) -> list[_Piece]:
    pieces = []
    for word in _WORD_RE.finditer(text, start, end):
        count = tokens(word.group())
        if count <= budget:
            pieces.append(_Piece(word.start(), word.end(), count, True))
        else:
            pieces += _char_pieces(word.start(), word.end(), text, tokens, budget)
    return pieces


def _char_pieces(
    start: int, end: int, text: str, tokens: _Counter, budget: int
) -> list[_Piece]:
    """Split one over-budget "word" at characters: the very last resort."""
    pieces = []
    while start < end:
        length = _longest_prefix(start, end, text, tokens.count_tokens, budget)
        stop = start + length
        pieces.append(_Piece(start, stop, tokens(text[start:stop]), True))
        start = stop
    return pieces


def _longest_prefix(
    start: int, end: int, text: str, count: Callable[[str], int], budget: int
) -> int:
    """The longest text[start:start+n] within budget (galloping, then bisecting).

    Counts go through the uncached counter: these strings never repeat.
    """
    low, high = 1, 16
    while start + high < end and count(text[start : start + high]) <= budget:
        low, high = high, high * 2
    high = min(high, end - start)
    if count(text[start : start + high]) <= budget:
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if count(text[start : start + middle]) <= budget:
            low = middle
        else:
            high = middle
    return low


def _clip_words(
    value: str, tokens: _Counter, limit: int, *, from_end: bool = False
) -> str:
    """`value` (whitespace collapsed), cut to its first/last words within limit."""
    words = value.split()
    value = " ".join(words)
    if tokens(value) <= limit:
        return value
    kept: list[str] = []
    used = tokens.specials
    for word in reversed(words) if from_end else words:
        cost = tokens(word) - tokens.specials
        if used + cost > limit:
            break
        kept.append(word)
        used += cost
    return " ".join(reversed(kept) if from_end else kept)


# --- tables ---------------------------------------------------------------


def table_caption(previous: Block | None, text: str) -> str:
    """The caption of the table after block `previous`: that block when it is a
    one-line paragraph of at most CAPTION_WORDS words, one sentence after its
    numbered label if it has one (_CAPTION_LABEL_RE), that ends without a full
    stop or opens with such a label; else "". Text that says something before
    it introduces the table ("Errors return a JSON body. The codes are:") is
    not its caption: in every row's vector it would weigh as much as the row."""
    if previous is None or previous.kind != "paragraph":
        return ""
    line = text[previous.start : previous.end]
    if "\n" in line or len(line.split()) > CAPTION_WORDS:
        return ""
    label = _CAPTION_LABEL_RE.match(line)
    if _SENTENCE_BREAK_RE.search(line, label.end() if label else 0):
        return ""
    if line.rstrip("*_").endswith((".", "!", "?")) and not label:
        return ""
    return line


def group_rows(block: Block) -> set[int]:
    """Positions in block.rows of the rows that label the rows below them
    ("Class 23 — Integrity Constraint Violation" above its codes): a row whose
    first cell alone has text, its others there but empty ("| Class 23 | |"; a
    row short of cells is ragged, not a label), with a row that is no such label
    somewhere below it (else it is a row of data)."""
    found: set[int] = set()
    data_below = False
    for position in range(len(block.rows) - 1, -1, -1):
        cells = block.rows[position].cells
        first_only = (
            len(cells) > 1
            and bool(cells[0].text.strip())
            and not any(cell.text.strip() for cell in cells[1:])
        )
        if first_only and data_below:
            found.add(position)
        elif not first_only:
            data_below = True
    return found


def _table_drafts(
    block: Block, caption: str, text: str, tokens: _Counter, budget: int
) -> list[_Draft]:
    """One chunk per body row, each value labelled with its column name, led by
    the table's caption and the label of the group the row is in.

    The header and delimiter lines, and the group rows, are in no chunk's
    range: they live on in every row's embed_text. A row over budget is split
    between cells (or inside a cell), each part repeating the row's first cell
    as its key.
    """
    limit = max(tokens.specials + 1, int(budget * CONTEXT_SHARE))
    header = block.header.cells if block.header else []
    labels = [_clip_words(cell.text, tokens, limit) for cell in header]
    caption = _clip_words(caption, tokens, limit) if caption else ""
    groups = group_rows(block)
    group = ""
    rows = []
    for position, row in enumerate(block.rows):
        if position in groups:
            group = _clip_words(row.cells[0].text, tokens, limit)
            continue
        context = table_context(caption, group)
        room = budget - tokens(context) + tokens.specials if context else budget
        cells = _labelled_cells(row, labels, text, tokens, max(MIN_BUDGET, room))
        rows.append((row, context, cells, room))
    # Each row's text is new ("value;"): its words in one batch, not one a row.
    tokens.prime(context + _row_text(cells) for _, context, cells, _ in rows)
    drafts = []
    for row, context, cells, room in rows:
        drafts += _row_drafts(row, cells, context, text, tokens, budget, room, limit)
    return drafts


def table_context(caption: str, group: str) -> str:
    """What leads a row's embed_text: its table's caption and its group's label,
    each followed by "; " (or "" for a table with neither)."""
    return "".join(f"{part}; " for part in (caption, group) if part)


def _row_text(cells: list[_Labelled]) -> str:
    return "; ".join(cell.text for cell in cells)


def _row_drafts(
    row: TableRow,
    cells: list[_Labelled],
    context: str,
    text: str,
    tokens: _Counter,
    budget: int,
    room: int,
    limit: int,
) -> list[_Draft]:
    """A row's chunk (or the parts of a long one) from its labelled cells,
    `context` leading each part's embed_text unless a part would not fit with
    it; `room` is the budget left beside the context."""
    if not cells:
        return [_Draft(row.start, row.end, ChunkKind.TABLE_ROW)]
    embed_text = _row_text(cells)
    if tokens(context + embed_text) <= budget:
        return [_Draft(row.start, row.end, ChunkKind.TABLE_ROW, context + embed_text)]
    if tokens(embed_text) <= budget:
        return [_Draft(row.start, row.end, ChunkKind.TABLE_ROW, embed_text)]
    parts = _split_row(row, cells, text, tokens, max(MIN_BUDGET, room), limit)
    for part in parts:
        # Additive for WordPiece; the real count is the contract.
        if context and tokens(context + part.embed_text) <= budget:
            part.embed_text = context + part.embed_text
    return parts


def _labelled_cells(
    row: TableRow, labels: list[str], text: str, tokens: _Counter, budget: int
) -> list[_Labelled]:
    cells = []
    for position, cell in enumerate(row.cells):
        if not cell.text.strip():
            continue
        label = labels[position] if position < len(labels) else ""
        label = label or f"Column {position + 1}"
        value = " ".join(cell.text.split())
        labelled = f"{label}: {value}"
        count = tokens(labelled)
        if count <= budget:
            cells.append(_Labelled(cell.start, cell.end, labelled, count))
            continue
        # One cell alone is over budget: label each sentence/word piece of it.
        room = budget - tokens(f"{label}:") + tokens.specials
        for piece in _fit(cell.start, cell.end, text, tokens, room):
            part = f"{label}: {' '.join(text[piece.start : piece.end].split())}"
            cells.append(
                _Labelled(piece.start, piece.end, part, tokens(part), piece.is_fallback)
            )
    return cells


def _split_row(
    row: TableRow,
    cells: list[_Labelled],
    text: str,
    tokens: _Counter,
    budget: int,
    limit: int,
) -> list[_Draft]:
    key = _clip_words(cells[0].text, tokens, limit)
    groups: list[list[_Labelled]] = []
    current: list[_Labelled] = []
    for cell in cells:
        candidate = [*current, cell]
        if (
            current
            and tokens(_row_part_text(key, candidate, cells, tokens, budget)) > budget
        ):
            groups.append(current)
            candidate = [cell]
        current = candidate
    groups.append(current)
    drafts = []
    # Parts partition the row: each runs up to where the next one starts.
    for number, group in enumerate(groups):
        start = row.start if number == 0 else group[0].start
        end = groups[number + 1][0].start if number + 1 < len(groups) else row.end
        span = _stripped(text, start, end)[0]
        embed_text = _row_part_text(key, group, cells, tokens, budget)
        fallback = any(cell.is_fallback for cell in group)
        drafts.append(_Draft(*span, ChunkKind.TABLE_ROW, embed_text, fallback))
    return drafts


def _row_part_text(
    key: str,
    group: list[_Labelled],
    cells: list[_Labelled],
    tokens: _Counter,
    budget: int,
) -> str:
    """The part's cells, led by the row key unless it is there or cannot fit."""
    own = "; ".join(cell.text for cell in group)
    if group[0] is cells[0]:
        return own
    keyed = f"{key}; {own}"
    return keyed if len(group) > 1 or tokens(keyed) <= budget else own


# --- code -----------------------------------------------------------------


def _intro(previous: Block | None, text: str, tokens: _Counter, budget: int) -> str:
    """The sentence that introduced a code block: the paragraph's last one."""
    if previous is None or previous.kind != "paragraph":
        return ""
    first, last = _sentence_spans(text, previous.start, previous.end)[-1]
    limit = int(budget * CONTEXT_SHARE)
    return _clip_words(text[first:last], tokens, limit, from_end=True)


def _code_drafts(
    block: Block, intro: str, text: str, tokens: _Counter, budget: int
) -> list[_Draft]:
    """Whole if it fits, else parts at line boundaries (words for huge lines).

    Each part's embed_text is the intro sentence, the fence language and its
    own lines; the first and last parts also cover the fence lines.
    """
    head = _code_head(block.language, intro, tokens, budget)
    inner = block.inner
    if inner is None:
        raise ValueError("a code block without an inner span")
    room = budget - tokens(head) + tokens.specials
    units = _code_units(inner.start, inner.end, text, tokens, room)
    groups = _pack(units, text, tokens, budget, prefix=head)
    drafts = []
    for number, group in enumerate(groups):
        embed_text = head + text[group[0].start : group[-1].end]
        start = block.start if number == 0 else group[0].start
        end = block.end if number == len(groups) - 1 else group[-1].end
        drafts.append(
            _Draft(start, end, ChunkKind.CODE, embed_text, _any_fallback(group))
        )
    return drafts


def _code_head(language: str, intro: str, tokens: _Counter, budget: int) -> str:
    fence = "```" + _clip_words(language, tokens, MIN_BUDGET // 2) + "\n"
    head = f"{intro}\n{fence}" if intro else fence
    if tokens(head) > budget // 2:
        head = fence if tokens(fence) <= budget // 2 else ""
    return head


def _code_units(
    start: int, end: int, text: str, tokens: _Counter, budget: int
) -> list[_Piece]:
    """Blank-line separated stretches of code (often whole functions); those
    over budget become lines, and a line over budget becomes words."""
    units = []
    for first, last in _sentence_like(_BLANK_LINE_RE, text, start, end):
        count = tokens(text[first:last])
        if count <= budget:
            units.append(_Piece(first, last, count))
            continue
        for line_start, line_end in _line_spans(text, first, last):
            units += _fit(line_start, line_end, text, tokens, budget)
    return units


def _line_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    position = start
    while position < end:
        stop = text.find("\n", position, end)
        stop = end if stop == -1 else stop
        if text[position:stop].strip():
            # Keep indentation: it is part of the code.
            spans.append((position, len(text[position:stop].rstrip()) + position))
        position = stop + 1
    return spans


# --- fixed strategy -------------------------------------------------------


def _fixed_drafts(
    doc: Document, text: str, tokens: _Counter, size: int, overlap: int
) -> list[tuple[SectionData, _Draft]]:
    """N tokens per chunk at word boundaries, ignoring structure (a baseline).

    A chunk belongs to the section its first word is in.
    """
    begin = doc.sections[0].start
    words = list(_WORD_RE.finditer(text, begin))
    costs = [tokens(word.group()) - tokens.specials for word in words]
    starts = [section.start for section in doc.sections]
    placed = []
    first = 0
    while first < len(words):
        last, used = first + 1, tokens.specials + costs[first]
        while last < len(words) and used + costs[last] <= size:
            used += costs[last]
            last += 1
        section = doc.sections[max(0, bisect_right(starts, words[first].start()) - 1)]
        draft = _Draft(words[first].start(), words[last - 1].end(), ChunkKind.TEXT)
        placed.append((section, draft))
        first = last if last == len(words) else _back_off(costs, first, last, overlap)
    return placed


def _back_off(costs: list[int], first: int, last: int, overlap: int) -> int:
    """Where the next fixed chunk starts so it repeats up to `overlap` tokens."""
    start, used = last, 0
    while start - 1 > first and used + costs[start - 1] <= overlap:
        start -= 1
        used += costs[start]
    return start
