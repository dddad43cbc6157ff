"""Expansion: the chosen sections' hits, then the sections around them, within
the token budget: whole sections when they fit, else windows around the hits
that grow by adjacent chunks and reach the ends of sentences (issue #17).

Pure: no database here (tests/test_retrieval_stages.py checks it); the sections
stage (sections.py) loaded every text expansion reads.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from django.conf import settings

from kb.retrieval.passages import Hit, Location, Passage, TextWindow, context_tokens
from kb.retrieval.rows import ChunkRow, Selected, is_long, lead_start, next_to
from kb.sentences import units, widened

HIT_CHUNKS = 4  # hit chunks per section taken before expansion (issue #7)
# The collection's best keyword match is taken with its section's best chunk.
KEYWORD_SEED = 1


def is_keyword_seed(hit: Hit) -> bool:
    """The collection's best match by the question's words, stemmed or exact
    (the chunk holding `23505` in a long table is taken with it, issue #29)."""
    ranks = (hit.keyword_rank, hit.exact_rank)
    return any(rank is not None and rank <= KEYWORD_SEED for rank in ranks)


class Expansion(NamedTuple):
    passages: list[Passage]
    whole: list[Selected]  # the sections taken whole
    remaining: int  # tokens of the budget left


def expand(selected: list[Selected], budget: int) -> Expansion:
    """Hits first, then their sections: whole if they fit, else around the hits.

    1. Every section's best chunk is reserved, in rank order, so a long first
       section cannot starve the others; a section whose best chunk no longer fits
       is dropped.
    2. The sections' other hit chunks go in next, best score first across all
       sections (at most HIT_CHUNKS per section, plus the collection's best keyword
       match): in a long table or list the row that answers is often a strong hit
       far from the section's best one. The few tokens between a hit and the
       nearest taken chunk of its section come with it (_fill_gaps).
    3. The rest of the budget expands in rank order: a section whole when the rest
       of it fits, else the regions around its taken chunks grow by adjacent chunks,
       nearest first.
    """
    kept: list[tuple[Selected, dict[int, None]]] = []  # item, taken positions
    total = 0
    for item in selected:
        position = {c.id: i for i, c in enumerate(item.chunks)}
        best = position.get(item.hits[0].chunk_id)
        taken = dict.fromkeys([] if best is None else [best])
        cost = _cost(item, taken)
        if total + cost <= budget:
            kept.append((item, taken))
            total += cost
    for _, order, i in sorted(_further_hits(kept)):
        item, taken = kept[order]
        if i in taken:
            continue
        added = _cost(item, {**taken, i: None}) - _cost(item, taken)
        if total + added <= budget:
            taken[i] = None
            total += added
            total += _fill_gaps(item, taken, i, budget - total)
    remaining = budget - total
    # Windows reach whole sentences, over short gaps and back to a paragraph they
    # refer to before any grows by chunks: the evidence is most often right there.
    reached: dict[int, tuple[list[tuple[int, int, list[int]]], int]] = {}
    if settings.KB_WINDOW_GROWTH:
        for order, (item, taken) in enumerate(kept):
            regions = regions_of(item.chunks, taken, item.headers)
            reached[order] = _reach(item, regions, remaining)
            remaining -= reached[order][1]
    passages: list[Passage] = []
    for order, (item, taken) in enumerate(kept):
        section = item.section
        rest = section.tokens - _cost(item, taken)
        reach, used = reached.pop(order, ([], 0))
        fits = rest <= remaining + used and not is_long(section)
        if item.chunks and fits:  # whole, the widened windows' tokens back
            remaining += used
            remaining -= max(rest, 0)
            indexes = [c.chunk_index for c in item.chunks]
            passages.append(
                section_passage(
                    item, section.start, section.end, indexes, section.tokens
                )
            )
            continue
        remaining -= _grow(item, taken, remaining)
        regions = regions_of(item.chunks, taken, item.headers)
        regions = _union(regions + reach)
        for start, end, indexes in regions:
            passage = section_passage(item, start, end, indexes, 0)
            if not indexes:  # a table's header line, for the rows after it
                passage.matched = {"header"}
            passages.append(passage)
    starts = {(p.source_id, p.start) for p in passages}
    whole = [i for i, _ in kept if (i.section.source_id, i.section.start) in starts]
    return Expansion(passages, whole, remaining)


def _further_hits(
    kept: list[tuple[Selected, dict[int, int]]],
) -> list[tuple[float, int, int]]:
    """(-score, section order, chunk position) of hits worth a seat before expansion."""
    further = []
    for order, (item, _) in enumerate(kept):
        position = {c.id: i for i, c in enumerate(item.chunks)}
        ranked = [h for h in item.hits if h.chunk_id in position]
        for hit in ranked[1:HIT_CHUNKS]:
            further.append((-hit.score, order, position[hit.chunk_id]))
        for hit in ranked:
            if is_keyword_seed(hit):
                further.append((-item.score, order, position[hit.chunk_id]))
    return further


def _fill_gaps(item: Selected, taken: dict[int, None], i: int, allowance: int) -> int:
    """Take the chunks between chunk i and the nearest taken one on each side
    when they cost at most GAP_TOKENS (and `allowance`): the rows of a table
    between two that answer are part of the answer ("does not re-render" was
    left out between two rows of React's refs-or-state table, QA of issue
    #28), and the reader is not shown a table with a row missing. Returns the
    tokens added."""
    chunks = item.chunks
    added = 0
    for step in (-1, 1):
        between: list[int] = []
        j = i + step
        while j not in taken and next_to(chunks, j, j - step):
            between.append(j)
            j += step
        if not between or j not in taken or not next_to(chunks, j, j - step):
            continue
        cost = _cost(item, {**taken, **dict.fromkeys(between)}) - _cost(item, taken)
        if cost <= min(GAP_TOKENS, allowance - added):
            taken.update(dict.fromkeys(between))
            added += cost
    return added


def _grow(item: Selected, taken: dict[int, None], allowance: int) -> int:
    """Add chunks next to taken ones, nearest first, within `allowance` tokens.

    Regions grow in the order their chunks were taken (best hit first), each until
    neither neighbour fits. Returns the tokens added.
    """
    chunks = item.chunks
    start = used = _cost(item, taken)
    for seed in list(taken):
        lo = hi = seed
        while True:
            grown = None
            for j in (lo - 1, hi + 1):
                if next_to(chunks, j, lo if j < lo else hi):
                    cost = used if j in taken else _cost(item, {**taken, j: None})
                    if cost - start <= allowance:
                        grown = (j, cost)
                        break
            if grown is None:
                break
            j, used = grown
            taken[j] = None
            lo, hi = min(lo, j), max(hi, j)
    return used - start


def _cost(item: Selected, taken: dict[int, None]) -> int:
    """Exact context tokens of the regions `taken` makes of a section's chunks.

    A region's text includes what lies between its chunks (a table's header and
    separator lines, a code fence), so it costs more than the chunks' sum.
    """
    text = item.text
    known = item.region_tokens
    total = 0
    for a, b, _ in regions_of(item.chunks, taken, item.headers):
        if (a, b) not in known:
            known[a, b] = context_tokens(text[a:b])
        total += known[a, b]
    return total


def regions_of(
    chunks: list[ChunkRow],
    taken: dict[int, None],
    headers: dict[int, tuple[int, int]] | None = None,
) -> list[tuple[int, int, list[int]]]:
    """Runs of adjacent taken chunks as (start, end, chunk indexes).

    A run that starts at a table row comes after its table's header line (the
    column names, in no chunk's range), unless an earlier region already holds
    it. A run that starts at the table's first row starts at its header line,
    over the delimiter line (the passage reads as the table; QA over Debian's
    French manuals: the header alone was the first passage, and ranked above
    the rows it names). A run starting further down has the header line as a
    region of its own with no chunk indexes, without the delimiter line (a run
    of dashes costs a token per dash).
    """
    regions: list[tuple[int, int, list[int]]] = []
    for i in sorted(taken):
        c = chunks[i]
        if regions and i - 1 in taken and next_to(chunks, i - 1, i):
            start, _, indexes = regions[-1]
            regions[-1] = (start, c.end, [*indexes, c.chunk_index])
            continue
        header = (headers or {}).get(i)
        start = c.start
        if header and not any(a <= header[0] < b for a, b, _ in regions):
            if header[0] >= lead_start(c):  # the table's first row
                start = header[0]
            else:
                regions.append((*header, []))
        regions.append((start, c.end, [c.chunk_index]))
    return regions


# --- windows that reach the evidence (issue #17) ----------------------------------
# A window of chunks can stop a sentence or a list item short of its end, start
# after the paragraph its first words refer to, or leave out a few tokens between
# two windows of one section. With budget left (KB_WINDOW_GROWTH), it is widened.

# Measured on the pooled tuned golden sets (docs/benchmarks.md): 24 tokens lost an
# RQ case that 64 keeps; a code block's one-line example between two hits is ~40.
GAP_TOKENS = 64  # a gap this short between two windows of a section is filled
BEFORE_TOKENS = 150  # the longest paragraph taken in before one that refers back
# First words of a paragraph that refers back to the one before it.
REFERS_BACK = frozenset(
    "this these that those it its they their such however but otherwise also "
    "instead then here there thus therefore so alternatively additionally "
    "similarly likewise conversely note".split()
)
_FIRST_WORD_RE = re.compile(r"[>*_\s]*([A-Za-z]+)")


def _reach(
    item: Selected, regions: list[tuple[int, int, list[int]]], allowance: int
) -> tuple[list[tuple[int, int, list[int]]], int]:
    """The regions of a section's windows widened within `allowance` tokens, and
    the tokens that added (window_reach on each loaded part of the source)."""
    text, section = item.text, item.section
    out: list[tuple[int, int, list[int]]] = []
    used = 0
    for a, b, indexes in regions:
        if not indexes:  # a table's header line stays as it is
            out.append((a, b, indexes))
            continue
        part = _part_of(text, a, b)
        if part is None:
            out.append((a, b, indexes))
            continue
        base, loaded = part
        lo = max(section.start, base) - base
        hi = min(section.end, base + len(loaded)) - base
        previous = [
            (s - base, e - base)
            for s, e, idx in out
            if idx and base <= s and e <= base + len(loaded)
        ]
        (start, end), added = window_reach(
            loaded, a - base, b - base, allowance - used, lo, hi, previous
        )
        used += added
        start, end = start + base, end + base
        # A filled gap joins this window to the one before it.
        if out and out[-1][2] and start <= out[-1][1]:
            first, _, before = out.pop()
            out.append((min(first, start), max(end, b), [*before, *indexes]))
        else:
            out.append((start, end, indexes))
    return out, used


def _union(
    regions: list[tuple[int, int, list[int]]],
) -> list[tuple[int, int, list[int]]]:
    """Regions of one section, overlapping ones joined (their chunk indexes too)."""
    out: list[tuple[int, int, list[int]]] = []
    for a, b, indexes in sorted(regions, key=lambda r: (r[0], -r[1])):
        if out and a < out[-1][1] and (indexes or not out[-1][2]):
            first, last, before = out[-1]
            out[-1] = (first, max(last, b), sorted({*before, *indexes}))
        elif out and a < out[-1][1]:
            continue  # a header line inside a region already taken
        else:
            out.append((a, b, indexes))
    return out


def _part_of(text: TextWindow, a: int, b: int) -> tuple[int, str] | None:
    for start, part in text.parts:
        if start <= a and b <= start + len(part):
            return start, part
    return None


def window_reach(
    text: str,
    a: int,
    b: int,
    allowance: int,
    lo: int = 0,
    hi: int | None = None,
    previous: list[tuple[int, int]] | None = None,
) -> tuple[tuple[int, int], int]:
    """[a, b) of `text` widened, within `allowance` tokens and text[lo:hi]:

    1. to the end and start of the sentence or list item its edges cut;
    2. back over a gap of at most GAP_TOKENS to the window before it (`previous`,
       (start, end) pairs before a);
    3. with a paragraph that starts with a word referring back (REFERS_BACK), over
       the paragraph before it if that is at most BEFORE_TOKENS long.

    Returns the new (start, end) and the tokens it added.
    """
    hi = len(text) if hi is None else hi
    cost = context_tokens(text[a:b])
    spent = 0

    credit = 0  # tokens of the window before, once a filled gap joins it

    def fits(start: int, end: int) -> bool:
        nonlocal spent
        extra = context_tokens(text[start:end]) - cost - credit
        if extra > allowance:
            return False
        spent = max(extra, 0)
        return True

    start, end = a, b
    wide = widened(text, a, b)
    found = units(text, max(lo, wide[0]), min(hi, wide[1]))
    for s, e in found:
        if s < end < e and fits(start, e):
            end = e
    for s, e in found:
        if s < start < e and fits(s, end):
            start = s
    for s, e in sorted(previous or [], reverse=True):
        if e <= start and e >= lo:
            if context_tokens(text[e:start]) <= GAP_TOKENS:
                credit = context_tokens(text[s:e])
                if fits(s, end):
                    start = min(start, s)
                else:
                    credit = 0
            break
    para = text.rfind("\n\n", lo, start + 1)
    line_start = text.rfind("\n", lo, start) + 1
    if para >= 0 and not text[para:start].strip() or line_start == start == lo:
        word = _FIRST_WORD_RE.match(text, start, hi)
        if word and word.group(1).lower() in REFERS_BACK:
            prev_end = len(text[lo:start].rstrip()) + lo
            prev_start = text.rfind("\n\n", lo, prev_end)
            prev_start = lo if prev_start < 0 else prev_start + 2
            while prev_start < prev_end and text[prev_start].isspace():
                prev_start += 1
            block = text[prev_start:prev_end]
            if (
                block
                and not block.lstrip().startswith(("#", "```", "~~~", "|"))
                and context_tokens(block) <= BEFORE_TOKENS
                and fits(prev_start, end)
            ):
                start = prev_start
    return (start, end), spent


def section_passage(
    item: Selected, start: int, end: int, indexes: list[int], tokens: int
) -> Passage:
    """A passage of the chosen section's text [start, end), citing its chunks."""
    section = item.section
    return Passage(
        source_id=section.source_id,
        source_title=section.source_title,
        file_name=section.file_name,
        start=start,
        end=end,
        text=item.text[start:end],
        score=item.score,
        matched={h.matched for h in item.hits},
        locations=[Location(section.id, section.heading_path, start, end, indexes)],
        tokens=tokens,
        metadata=dict(item.metadata),
        source_text=item.text,
    )
