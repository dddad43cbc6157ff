"""Retrieved passages -> an extractive answer whose every sentence cites where it
came from; and the types of an answer (Answer, Citation, Sentence).

The answerer picks the sentences of the context that best answer the question
(the question's rare words, or its meaning across languages), brings along
what a chosen sentence needs (the list or short code block a "...:" sentence
introduces, a table row's header line) and returns them best section first,
each followed by a marker [n]. A citation resolves to a source, a heading path
and the exact character range of the cited sentences.

Contract: no database. What the answerer needs from it comes in as plain data
(each passage's text-search configuration: passage_configs, from the languages
of the sources), and what a citation needs from it is filled in afterwards by
kb.answering: its link (`url`, empty here) and the chunks covering the cited
range (`chunk_indexes` here are those of the first cited sentence's location).
tests/test_imports.py checks this module loads no ORM.
"""

from __future__ import annotations

import bisect
import math
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.utils.translation import gettext

from kb import embedding, exact_tokens, languages, unit_vectors
from kb.markup_text import (
    balanced_emphasis,
    html_text,
    without_inline_tags,
    without_shortcodes,
)
from kb.parsing import TEXT_EXTENSIONS
from kb.rendering import CELL_SPLIT_RE, is_table_row
from kb.retrieval.passages import Location, Passage, Result, heading_label
from kb.retrieval.question import STOPWORDS, content_words, named_terms
from kb.retrieval.tables import header_line, is_delimiter_line, is_group_line
from kb.sentences import (
    block_around,
    code_blocks,
    is_definition_item,
    is_html_row,
    is_list_item,
    units,
    widened,
)

MAX_SENTENCES = 6
MAX_ANSWER_WORDS = 170
TOP_LOCATIONS = 3  # each of these contributes its best sentence
# A sentence's score (_score): the idf of the question's words it holds, plus
HEADING_WEIGHT = 0.5  # times the idf of those only its heading path holds;
CAVEAT_BOOST = 1.3  # times this when it states an exception (_CAVEATS);
RANK_DECAY = 0.15  # over 1 + this per rank below the best-ranked passage.
# A table row holding a code, option or identifier of the question as written
# (kb.exact_tokens: `-Z`, not `-z` or "^Z") that few candidates hold gains this
# many times the idf of the question's rarest word (half for a folded match),
# and counts as near in meaning: its stored vector is its whole chunk's, the
# same for every row, and the row is what is asked (issue #29). Not so for
# prose: a sentence naming `request.state` is often not the one that answers.
EXACT_WEIGHT = 1.0
PINPOINT_SENTENCES = 3  # only a token this few candidates hold (_exact_held)
KEEP_SHARE = 0.35  # _choose adds sentences scoring at least this share of the best
LOCATION_SHARE = 0.5  # ... and the best of another location this share
# A location besides the best one needs this many of the question's words (fewer
# when the question has fewer): one rare shared word ("often" in "How often should
# I inspect a beehive?" and in "the questions people ask most often") is chance.
MIN_SHARED_WORDS = 2
MAX_CODE_BLOCKS = 2  # code blocks an answer quotes: more bury its words (QA over DRF)
MAX_INTRO_CODE = 1200  # characters of code a chosen "...:" sentence brings along
MAX_CODE_GROWTH = 3000  # characters of a code block a location cutting it grows to
MAX_BARE_INTRO_WORDS = 3  # "Default:", "For example:": left out with nothing after
# A chosen sentence that introduces a list ("...include the following:") brings
# its items along, the list whole while it stays within these (issue #28).
MAX_INTRO_ITEMS = 12
MAX_INTRO_LIST_WORDS = 150
MIN_STEM = 3  # letters a word keeps when _stem strips a suffix
# A sentence's meaning (_by_meaning): its stored vector's cosine to the question
# above the median sentence's, over the best's, weighs this beside its word
# score over the best (chosen on the pooled tuned sets, issue #28); above this
# it counts as sharing the question's words.
MEANING_WEIGHT = 0.6
SHARES_MEANING = 0.5
# A sentence added to a chosen location needs KEEP_SHARE of the best word score,
# or this much meaning: neighbours in one chunk read alike (_choose).
ADDON_MEANING = 0.6
# The stored vectors of a section's units: their (start, end) in the source
# text (rows of an array) and one L2-normalised row each (kb.unit_vectors),
# by section id.
Meanings = dict[int, tuple[np.ndarray, np.ndarray]]

_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9'_-]*")
# An operator on its own: between spaces, quotes or backticks, not in a word or a
# run of symbols ("^" and "`=`", not "==>" or "a=b").
_SYMBOL_RE = re.compile(
    r"(?<![\w^$=@#~%&+<>*|!/\\-])[`'\"]?([\^$=@#~%&+<>]{1,2})[`'\"]?"
    r"(?![\w^$=@#~%&+<>*|!/\\-])"
)
MARKER_RE = re.compile(r"\[(\d{1,3})\]")  # a citation's marker in an answer's text
_WORD_CHAR_RE = re.compile(r"\w")
# How a sentence opens that qualifies the one before it (_with_their_qualifiers).
_QUALIFIER_RE = re.compile(
    r"\W*(but|however|except|unless|otherwise|note that|note:|be aware|beware|"
    r"keep in mind|caution|warning|this (?:does|will|is|can)(?: not|n't))\b",
    re.IGNORECASE,
)
# Words that turn a rule into an exception: such sentences answer "when/should".
_CAVEATS = re.compile(
    r"\b(except|unless|instead|however|only if|only when|do not|don't|never|but)\b",
    re.IGNORECASE,
)


@dataclass
class Citation:
    n: int
    source_id: int
    source: str
    file: str
    section_id: int
    heading_path: str
    # The chunks holding the cited range (kb.answering.cover_chunks).
    chunk_indexes: list[int]
    start: int
    end: int
    # The cited range on its section's page (kb.answering.link_citations).
    url: str = ""
    # The page of the original file (PDF sources) its first cited character is
    # on, "20", else "" (kb.answering.add_pages); `page` the same as a number,
    # for links.
    pages: str = ""
    page: int | None = None
    # The cited entry in the original web page (HTML sources with a URL whose
    # section heading had an id: a Javadoc member), else "" (add_originals).
    original: str = ""

    @property
    def label(self) -> str:
        return heading_label(self.source, self.heading_path)

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "source": self.source,
            "file": self.file,
            "heading_path": self.heading_path,
            "chunk_indexes": self.chunk_indexes,
            "start": self.start,
            "end": self.end,
            "url": self.url,
            "section_id": self.section_id,
            "source_id": self.source_id,
            "pages": self.pages or None,
            "page": self.page,
            "original_url": self.original or None,
        }


@dataclass
class Sentence:
    text: str
    start: int
    end: int
    passage: Passage
    location: Location
    score: float = 0.0
    citation: int = 0
    # A table's line: the start of its table's header line (_headers_of), else None.
    table: int | None = None
    shared: int = 0  # question words in the sentence or its heading path (_score)
    words: float = 0.0  # its score by the question's words alone (_score)
    meaning: float = 0.0  # its nearness to the question, 0 to 1 (_by_meaning)
    exact: float = 0.0  # the question's exact tokens it holds, up to 1 (_score)
    defines: bool = False  # opens an entry the question names (_asked_entries)
    goes_on: bool = False  # a list item quoted last of a list that goes on


@dataclass
class Answer:
    text: str
    citations: list[Citation]
    sentences: list[Sentence] = field(default_factory=list)
    answerer: str = "extractive"
    is_trustworthy: bool = True
    warnings: list[str] = field(default_factory=list)
    # (word asked, word searched) of misspellings searched as the collection's
    # word (kb.retrieval.spelling).
    searched_for: list[tuple[str, str]] = field(default_factory=list)

    def parts(self) -> list[tuple[str, Citation | None]]:
        """The answer as (text, citation) pieces, for templates to link markers."""
        return marked_parts(self.text, {c.n: c for c in self.citations})


def marked_parts(text: str, by_n: dict[int, Any]) -> list[tuple[str, Any]]:
    """`text` as (text, citation) pieces: each [n] marker with its citation in
    `by_n`, the text between with None (a marker citing nothing stays text).
    The ask page and a logged answer's pages show answers so (kb/_answer.html)."""
    pieces: list[tuple[str, Any]] = []
    last = 0
    for match in MARKER_RE.finditer(text):
        cite = by_n.get(int(match.group(1)))
        if cite is not None:
            pieces.append((text[last : match.start()], None))
            pieces.append((match.group(0), cite))
            last = match.end()
    pieces.append((text[last:], None))
    return [(t, c) for t, c in pieces if t]


def extractive_answer(
    result: Result,
    configs: dict[int, str] | None = None,
    meanings: Meanings | None = None,
) -> Answer:
    """The sentences of `result`'s passages that best answer its question, cited.

    `configs`: the text-search configuration each passage is read in, by
    id(passage) (passage_configs); without, each passage's own language as
    its text tells. The citations have no `url` yet and their first location's
    chunk indexes (kb.answering.complete_citations fills them in).
    `meanings`: the stored vectors of the units of the passages' sections
    (kb.unit_vectors), by section id; without, sentences are scored by the
    question's words alone (but across languages: _by_meaning).
    """
    if configs is None:
        configs = passage_configs(result.passages)
    sentences = [s for p in result.passages for s in split_sentences(p)]
    if not sentences:
        return Answer(
            text=gettext("Nothing in this collection matches the question."),
            citations=[],
            is_trustworthy=False,
            warnings=[gettext("No context was retrieved.")],
        )
    read = [configs[id(s.passage)] for s in sentences]
    asked = _score(sentences, result.question, read)
    across = _by_meaning(sentences, result, read, meanings or {})
    if across:
        asked = MIN_SHARED_WORDS
    headers = [s for s in sentences if s.passage.is_header]
    rows = [s for s in sentences if not s.passage.is_header]
    answerable = [
        s
        for s in rows
        if not _is_title_line(s)
        and not _is_markup(s)
        and not _is_header_row(s)
        and not _is_date_line(s)
        and not _SEE_ALSO_RE.match(s.text)
        and not _is_empty_field(s.text)
    ]
    pool = answerable or rows or sentences
    chosen = _choose(pool, asked)
    if not across:
        chosen = _with_each_part(chosen, pool, result, configs, meanings or {})
    chosen = _without_other_rows(chosen, result.question)
    following = _following(sentences)
    chosen = _with_what_code_does(chosen, following)
    chosen = _with_what_they_introduce(chosen, following)
    chosen = _with_whole_lists(chosen, sentences, following)
    chosen = _with_their_qualifiers(chosen, following)
    chosen = _with_the_code_asked(chosen, pool, result.question)
    chosen += _headers_of(chosen, headers)
    _best_first(chosen)
    citations = _cite(chosen)
    return Answer(text=answer_text(chosen), citations=citations, sentences=chosen)


def split_sentences(passage: Passage) -> list[Sentence]:
    """Sentences, list items, table rows and code blocks of a passage, with offsets.

    A location whose edge cuts a paragraph's sentence is widened to that whole
    sentence (within the loaded section text): a cited range never ends or starts
    inside a sentence, and hard-wrapped lines are one sentence, not several. A
    location that cuts into a code block holds a piece of code, which is left
    out: code is quoted whole or not at all.
    """
    out: list[Sentence] = []
    seen: set[int] = set()
    blocks: dict[int, list[tuple[int, int]]] = {}  # code blocks by loaded text
    for location in passage.locations:
        base, text = _loaded(passage, location.start, location.end)
        if base not in blocks:
            blocks[base] = code_blocks(text)
        lo, hi = location.start - base, location.end - base
        wide = _whole_code(*widened(text, lo, hi), blocks[base])
        for start, end in units(text, *wide):
            if base + start in seen:
                continue  # a sentence two locations of one paragraph share
            if not _WORD_CHAR_RE.search(text, max(start, lo), min(end, hi)):
                continue  # only reached by widening: not part of this location
            if _cuts_code(start, end, blocks[base]):
                continue
            seen.add(base + start)
            out.append(
                Sentence(text[start:end], base + start, base + end, passage, location)
            )
    return out


def _whole_code(start: int, end: int, blocks: list[tuple[int, int]]) -> tuple[int, int]:
    """[start, end) grown to the whole code block each edge cuts into, when that
    is at most MAX_CODE_GROWTH characters, else shrunk to leave it out; so the
    units are read knowing where code starts and ends."""
    if (block := block_around(blocks, start)) is not None:
        start = block[0] if block[1] - block[0] <= MAX_CODE_GROWTH else block[1]
    if (block := block_around(blocks, end)) is not None:
        end = block[1] if block[1] - block[0] <= MAX_CODE_GROWTH else block[0]
    return start, max(start, end)


def _cuts_code(start: int, end: int, blocks: list[tuple[int, int]]) -> bool:
    """Whether [start, end) holds a piece of a code block but not all of it."""
    i = bisect.bisect_right(blocks, (end, end)) - 1
    while i >= 0 and blocks[i][1] > start:
        block_start, block_end = blocks[i]
        if block_start < end and not (start <= block_start and block_end <= end):
            return True
        i -= 1
    return False


def _loaded(passage: Passage, start: int, end: int) -> tuple[int, str]:
    """The loaded source text around [start, end) and its offset in the source."""
    return passage.source_text.part_holding(start, end) or (passage.start, passage.text)


def terms(text: str, config: str = "english") -> list[str]:
    """Words, stemmed, without common ones; and operators standing alone
    ("the ^ prefix", a table cell "`^`"): API docs name things by them.
    English keeps its light stemmer (the answers measured on the English golden
    sets); another language's words are stemmed by snowball in that language
    (`config`: a text-search configuration, kb.languages)."""
    if config == "english":
        words = [_stem(w) for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS]
    else:
        words = languages.stems(text, config)
    return words + _SYMBOL_RE.findall(text)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= MIN_STEM:
            return word[: -len(suffix)]
    return word


def _score(sentences: list[Sentence], question: str, read: list[str]) -> int:
    """Each sentence's score and shared words, its words and the question's
    read in its passage's language (`read`: each sentence's configuration);
    how many terms the question has."""
    asked = {config: set(terms(question, config)) for config in set(read)}
    owns = [set(terms(s.text, c)) for s, c in zip(sentences, read, strict=True)]
    docs = [
        own | set(terms(s.location.heading_path, c))
        for own, s, c in zip(owns, sentences, read, strict=True)
    ]
    n = len(docs)
    idf = {
        (config, t): math.log(
            1 + n / (1 + sum(t in d for d, c in zip(docs, read) if c == config))
        )
        for config, words in asked.items()
        for t in words
    }
    held_by = _exact_held(sentences, question)
    entries = _asked_entries(sentences, question)
    rarest = max(idf.values(), default=0.0)
    for sentence, own, words, config, held in zip(
        sentences, owns, docs, read, held_by, strict=True
    ):
        question_terms = asked[config]
        overlap = sum(idf[config, t] for t in question_terms & own)
        sentence.shared = len(question_terms & words)
        via_heading = sum(idf[config, t] for t in question_terms & (words - own))
        overlap += HEADING_WEIGHT * via_heading
        if held and is_table_row(sentence.text):
            overlap += EXACT_WEIGHT * held * rarest
            sentence.shared += 1
            sentence.exact = min(held, 1.0)
        elif sentence.location.section_id in entries:
            overlap += EXACT_WEIGHT * rarest
            sentence.shared += 1
            if sentence is entries[sentence.location.section_id]:
                sentence.exact = 1.0  # its first: the entry's definition
        if overlap and _CAVEATS.search(sentence.text):
            overlap *= CAVEAT_BOOST
        sentence.score = sentence.words = overlap / _decay(sentence)
    return max((len(words) for words in asked.values()), default=0)


def _exact_held(sentences: list[Sentence], question: str) -> list[float]:
    """For each sentence, the weights of the question's exact tokens
    (kb.exact_tokens: as written, or folded for one in small letters) it
    holds, of those that at most PINPOINT_SENTENCES candidates hold: a token
    most of them hold (`TestClient` over the testing page) tells none apart.
    A token the question quotes with other words counts only where they are
    said too (_owners)."""
    exact = exact_tokens.question_lexemes(question)
    if not exact:
        return [0.0] * len(sentences)
    held = [set(exact_tokens.lexemes(s.text)) & exact.keys() for s in sentences]
    counts = Counter(token for found in held for token in found)
    rare = {token for token, n in counts.items() if n <= PINPOINT_SENTENCES}
    owners = _owners(question, exact.keys())
    return [
        sum(exact[token] for token in found & rare if _owned(s, owners.get(token)))
        for s, found in zip(sentences, held, strict=True)
    ]


def _owners(question: str, tokens) -> dict[str, set[str]]:
    """The command an exact token is quoted after, by token: "-A" of «git add
    -A .» is git's; an option of another command (`ls -A`) is not the one
    asked (QA over Debian's Spanish reference quoted ls's row). The command
    is the phrase's first word, when it reads as one (`apt-get`, not "la")."""
    owners: dict[str, set[str]] = {}
    for phrase in _quoted_phrases(question):
        first = phrase.split(" ", 1)[0]
        if not _COMMAND_RE.fullmatch(first) or first.casefold() in _COMMON_WORDS:
            continue
        for token in set(exact_tokens.lexemes(phrase)) & set(tokens):
            if token.casefold() != first.casefold():
                owners[token] = {first.casefold()}
    return owners


_COMMAND_RE = re.compile(r"[a-z][a-z0-9._+-]*")
_COMMON_WORDS = STOPWORDS | frozenset(
    word for words in languages.STOPWORDS.values() for word in words
)


def _owned(s: Sentence, owners: set[str] | None) -> bool:
    """Whether `s` (or its heading path) says every word of `owners`."""
    if not owners:
        return True
    said = f"{s.text} {s.location.heading_path}".casefold()
    return all(
        re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", said) for word in owners
    )


def _asked_entries(sentences: list[Sentence], question: str) -> dict[int, Sentence]:
    """The sections headed by what the question names as written, when they
    are the entries of at most PINPOINT_SENTENCES members (those whose heading
    path holds the most of its exact tokens, member names and other words, one
    of them a token or a name), by id, each with its first sentence that is
    not code. "What does pg_basebackup -S set?" is answered from the entry
    headed "-S slotname" under "pg_basebackup", whose sentences never write
    "-S"; "what does the mkdir method do?" from "Path.mkdir"'s; "File::open or
    File::create?" from both entries, their "Errors" and "Examples" being parts
    of them."""
    tokens = frozenset(exact_tokens.tokens(question))
    asked = content_words(question)
    paths = {s.location.section_id: s.location.heading_path for s in sentences}
    members = _asked_members(paths, asked)
    if not tokens and not members:
        return {}
    # the words of a token ("s" of "-s") are counted with the token
    words = asked - {
        word for token in tokens for word in _WORD_RE.findall(token.casefold())
    }
    words -= {name for names in members.values() for name in names}
    named = {
        section: exact_tokens.named_in(path, tokens, words)
        for section, path in paths.items()
    }
    held = {
        section: (found + len(members.get(section, ())), plain)
        for section, (found, plain) in named.items()
    }
    # An exact token and a word weigh alike: "shopt -s globstar" names both
    # the entry "-s" and the entry "globstar" under "shopt". The best is among
    # the sections naming a token: a heading holding more of the question's
    # plain words ("Show renamed files") does not hide "--follow"'s entry.
    best = max((sum(n) for n in held.values() if n[0]), default=0)
    found = {section for section, n in held.items() if sum(n) == best}
    heads = _heads(found, paths)
    if not best or len(heads) > PINPOINT_SENTENCES:
        return {}
    first: dict[int, Sentence] = {}
    for s in sorted(sentences, key=lambda s: s.start):
        if s.location.section_id in found and not (
            has_code(s.text)
            or _is_title_line(s)
            or _is_field_line(s.text)
            or _is_label_line(s.text)
        ):  # a member's signature is code: its description says what it does
            first.setdefault(s.location.section_id, s)
    for section, s in first.items():
        s.defines = section in heads  # an entry's part opens with something else
    asked_terms = set(terms(question))
    for s in sentences:  # the field the question asks of: "what does X return?"
        if s.location.section_id in found and _field_asked(s.text, asked_terms):
            s.defines = True
    return first


# A field line of an entry, a list item or not: "- Returns: TIXML_SUCCESS ...",
# "Throws: IllegalStateException - if ...", "**Default**: 4"
_FIELD_LABEL_RE = re.compile(
    r"[-*+]?[ \t]*[*_]{0,2}([A-Z][\w ]{0,30}?)[*_]{0,2}[ \t]*:"
)


def _field_asked(text: str, asked: set[str]) -> bool:
    """Whether `text` is a field line (a short label, then a colon) whose label
    names what the question asks: "Returns" for "what does it return?",
    "Throws" for "what does it throw?"."""
    label = _FIELD_LABEL_RE.match(text.lstrip())
    return label is not None and bool(set(terms(label.group(1))) & asked)


def _asked_members(paths: dict[int, str], asked: frozenset[str]) -> dict[int, set[str]]:
    """For each section (`paths`: heading paths by id) the names of the members
    its path heads that the question says as a word (`asked`: its content
    words): "mkdir" of "Path.mkdir", "heappushpop" of "heapq.heappushpop".
    Only a name no English dictionary holds (the default model's vocabulary)
    is one: "open" of "File::open" and "counter" of "Manager.counter()" are
    words many questions say of other things."""
    names: dict[int, set[str]] = {}
    for section, path in paths.items():
        said = {
            name
            for heading in path.split(" > ")
            if (name := _member_name(heading)) is not None and name in asked
        }
        if said:
            names[section] = said
    if not names:
        return {}
    dictionary = embedding.vocabulary()
    english = {
        name
        for said in names.values()
        for name in said
        if name in dictionary or name.rstrip("s") in dictionary
    }
    return {
        section: kept for section, said in names.items() if (kept := said - english)
    }


# A member's heading: its owner's name and its own, or its own called
# ("Path.mkdir", "heapq.heappushpop", "File::open", "Manager.counter()",
# "exsltRegisterAll ()"); the name is the part after the last "." or "::".
_MEMBER_HEADING_RE = re.compile(
    r"(?:[A-Za-z_$][\w$]*(?:\.|::|#))+(?P<name>[A-Za-z_$][\w$]*)(?:\s*\(.*\))?"
    r"|(?P<called>[A-Za-z_$][\w$]*)\s*\(.*\)"
)


def _member_name(heading: str) -> str | None:
    """The casefolded name of the member `heading` heads, if it heads one; a
    file's name ("package.json", "settings.py") heads none."""
    match = _MEMBER_HEADING_RE.fullmatch(heading.strip().replace("`", ""))
    if match is None:
        return None
    name = (match["name"] or match["called"]).casefold()
    if match["name"] and name in _FILE_EXTENSIONS and "(" not in heading:
        return None
    return name


_FILE_EXTENSIONS = frozenset(
    "json yaml yml toml ini cfg conf lock md rst txt html htm xml csv py js mjs ts "
    "tsx jsx rb go rs java kt c h cc cpp hpp cs php sh bash zsh ps1 sql env".split()
)


def _heads(found: set[int], paths: dict[int, str]) -> set[int]:
    """The entries the `found` sections are: a section under another found
    one ("File::open > Errors" under "File::open") is part of it."""
    above = {paths[section] + " > " for section in found}
    return {
        section
        for section in found
        if not any(paths[section].startswith(head) for head in above)
    }


# A setting's or member's labelled field ("**Type**: `boolean`", "Default: 4",
# "Environment Variable: POETRY_X") or a short emphasised note ("*Introduced in
# 1.8.0*"): the lines an entry opens with before the sentence that says what
# it is. A label is emphasised, or of capitalised words ("Sets the mode: fast
# or slow." is a definition), or names a default in words of the languages
# answered ("Valeur par défaut : `false`", "Valor predeterminado: no").
_FIELD_LINE_RE = re.compile(
    r"(?P<label>[*_]{1,2}[^*_:]{1,40}[*_]{1,2}|[A-Z]\w*(?: [A-Z]\w*){0,2}"
    r"|(?i:(?:\w+ ){0,2}(?:default|défaut|predeterminad[oa]|omisión|умолчанию)))"
    r"\s*:[*_]*\s+\S.*",
    re.DOTALL,
)
_NOTE_LINE_RE = re.compile(r"([*_]).+\1", re.DOTALL)
MAX_FIELD_WORDS = 6


# "Added in: v0.1.90", "Deprecated since: v16.0.0" (Node.js's API pages),
# "New in version 3.2", "Changed in version 2.0" (Sphinx), "Stable since Rust
# version 1.27.0, const since 1.32.0." (rustdoc): when an entry came.
_VERSION_LINE_RE = re.compile(
    r"(?:(?:Stable|Const)\s+)?"  # rustdoc's "Stable since Rust version 1.3.0."
    r"(?:Added|Deprecated|Changed|Removed|New|Since|Introduced)\b[\w ]{0,20}:?"
    r"\s+v?\d+(?:\.\d+)+(?:,\s*const (?:since v?\d+(?:\.\d+)+|unstable))?\.?",
    re.IGNORECASE,
)


def _is_label_line(text: str) -> bool:
    """A line that labels what follows rather than saying what the entry is:
    one word without a full stop ("History" over a table of versions), or the
    version an entry came in. "Show help" says what `--help` does."""
    text = text.strip()
    if len(text.split()) == 1 and not text.endswith((".", "!", "?")):
        return True
    return bool(_VERSION_LINE_RE.fullmatch(text))


# A typed field with no description (Sphinx autodoc's "signed_value (str) –",
# "Parameters sep (Union[str, bytes]) –"): a name and a dash, nothing said.
_EMPTY_FIELD_RE = re.compile(r"[^\n]{0,200}[ \t][\u2013\u2014-]{1,2}[ \t]*")
MAX_EMPTY_FIELD_WORDS = 10


def _is_empty_field(text: str) -> bool:
    text = text.strip()
    return len(text.split()) <= MAX_EMPTY_FIELD_WORDS and bool(
        _EMPTY_FIELD_RE.fullmatch(text)
    )


def _is_field_line(text: str) -> bool:
    """A labelled field or a short emphasised note, not a definition."""
    text = text.strip()
    if len(text.split()) > MAX_FIELD_WORDS:
        return False
    return bool(_FIELD_LINE_RE.fullmatch(text) or _NOTE_LINE_RE.fullmatch(text))


def _by_meaning(
    sentences: list[Sentence], result: Result, read: list[str], meanings: Meanings
) -> bool:
    """Blend each sentence's score with how near it is to the question in the
    collection's model: its cosine above the median sentence's, over the
    best's (0 to 1), weighs MEANING_WEIGHT beside its word score over the best
    word score. The cosine is that of the stored vectors of the units it
    covers (`meanings`, kb.unit_vectors; a sentence without one gets the
    median). A sentence well above the median counts as sharing the
    question's words (_choose).

    When the question's language was recognised and no passage is in it (an
    English question over French pages), words shared across languages are
    only names and code, and the best-matching sentence was a code block
    rather than the sentence that answers (issue #27): meaning alone scores
    then, from the sentences embedded now when none has a stored vector.
    Returns whether meaning alone scored them."""
    own = languages.recognised_config(result.question)
    across = own is not None and own not in read
    if result.vector is None:
        return False
    question = np.asarray(result.vector, dtype=np.float32)
    near = _stored_nearness(sentences, question, meanings)
    if near is None and across and result.embedding_model:
        embedder = embedding.get_embedder(result.embedding_model)
        texts = [s.text for s in sentences]
        near = embedder.embed_passages(texts, truncate=True) @ question
    if near is None:
        return False
    weight = 1.0 if across else MEANING_WEIGHT
    words = max((_unranked(s) for s in sentences), default=0.0) or 1.0
    relative = _above_median(near).tolist()
    for sentence, meaning in zip(sentences, relative, strict=True):
        # The row of a code or option asked about, whatever its vector (its
        # chunk's) says: EXACT_WEIGHT.
        above = max(meaning, sentence.exact)
        if above > SHARES_MEANING or (across and above > 0):
            sentence.shared = max(sentence.shared, MIN_SHARED_WORDS)
        elif across:
            sentence.shared = 0
        sentence.meaning = above
        blended = weight * above + (1 - weight) * _unranked(sentence) / words
        sentence.score = blended / _decay(sentence)
    return across


# Where a question asks a second thing: ", and where does it ...", "; ", a
# second sentence ("...? Do I need anything else?"), ", what ..."; in French,
# Spanish and Russian too.
_PART_SPLIT_RE = re.compile(
    r",? and (?=(?:what|where|which|when|how|why|who|does|do|is|are|can|will"
    r"|should|in which)\b)|, (?=(?:what|where|which|when|how|why|who)\b)"
    r"|,? et (?=(?:que|qu'|où|quand|comment|quel|quelle|quels|quelles|pourquoi"
    r"|qui|combien|est-ce)\b)"
    r"|,? y (?=(?:qué|dónde|cuándo|cómo|cuál|cuáles|por qué|quién|cuánto)\b)"
    r"|,? и (?=(?:что|где|когда|как|какой|какая|какие|почему|кто|сколько"
    r"|можно)\b)"
    r"|; |\?\s+(?=\S)",
    re.IGNORECASE,
)
MIN_PART_WORDS = 2  # content words of a part (not "On a Mac, ...")
# A word that asks (English, French, Spanish, Russian): a part without one is
# a lead-in ("In a Django project, where ...?"), not a question of its own.
_ASKING_RE = re.compile(
    r"\b(?:what|where|which|when|how|why|who|whom|whose|does|do|did|is|are|was"
    r"|were|can|could|should|will|would|may|must|has|have"
    r"|que|qu'|quoi|où|quand|comment|quel|quelle|quels|quelles|pourquoi|qui"
    r"|combien|est-ce|qué|dónde|cuándo|cómo|cuál|cuáles|por qué|quién|cuánto"
    r"|cuántos|cuántas|puedo|debo|hay|что|где|когда|как|какой|какая|какие"
    r"|почему|кто|сколько|можно|ли|нужно)\b",
    re.IGNORECASE,
)
# The two sides of a comparison: "the difference between X and Y" (in
# French, Spanish and Russian too, each with its own "and", and "чем
# отличается X от Y"), and "X or Y?", "X vs Y:" before any word that asks.
_BETWEEN_RE = re.compile(
    r"\b(?:difference|differences|differ) between (.+?) and ([^?,;]+)"
    r"|\bdifférences? entre (.+?) et ([^?,;]+)"
    r"|\bdiferencias? entre (.+?) y ([^?,;]+)"
    r"|(?:разница|различи[ея]|отличи[ея]) между (.+?) и ([^?,;]+)"
    r"|\bотлича(?:ется|ются) (.+?) от ([^?,;]+)",
    re.IGNORECASE,
)
_ALTERNATIVES_RE = re.compile(r" (?:or|vs\.?|versus) ", re.IGNORECASE)
_QUESTION_END_RE = re.compile(r"[:?]")


def question_parts(question: str) -> list[str]:
    """The questions `question` asks when it asks more than one ("Which git
    does Poetry use, and when does it switch to the system git?"), or the two
    things it compares; else []. Linear in the question's length."""
    question = " ".join(question.split())
    sides = _compared(question)
    if sides and (names := named_terms(question)):
        # each side by its longest name that is no phrase: "Suggests", not
        # "Suggests du fichier control", whose words other sentences hold (QA
        # over Debian's French maint-guide quoted "voici le fichier `control`"
        # for it); "blue-green deployment", not "deployment". Only names of
        # these sides (named_terms may find another pair of the question).
        named = [_unphrased(terms) for terms in names]
        if all(
            name.casefold() in side.casefold()
            for name, side in zip(named, sides, strict=False)
        ):
            sides = named
    if sides and all(content_words(side) for side in sides):
        return sides
    parts = [p.strip(" ,;?-") for p in _PART_SPLIT_RE.split(question)]
    parts = [
        p
        for p in parts
        if len(content_words(p)) >= MIN_PART_WORDS and _ASKING_RE.search(p)
    ]
    return parts if len(parts) > 1 else []


def _unphrased(names: list[str]) -> str:
    """Of the names one side of a comparison may go by (longest first), the
    longest without a word that links a phrase inside it ("du" of "Suggests
    du fichier control")."""
    return next(
        (
            name
            for name in names
            if not any(
                w.casefold() in STOPWORDS or w.casefold() in _PHRASE_WORDS
                for w in name.split()[1:-1]
            )
        ),
        names[-1],
    )


# Words that link a phrase in French, Spanish and Russian (English: STOPWORDS).
_PHRASE_WORDS = frozenset(
    "de du des d' la le les l' au aux à en pour dans sur avec par sans entre "
    "del el los las al para por con sin sobre "
    "в во из на для от с со по о об при к у".split()
)


def _compared(question: str) -> list[str]:
    between = _BETWEEN_RE.search(question)
    if between:
        return [side.strip() for side in between.groups() if side is not None]
    end = _QUESTION_END_RE.search(question)
    if end is None or _ASKING_RE.search(question, 0, end.start()):
        return []  # "Why does my pod restart or crash?" asks one thing
    sides = _ALTERNATIVES_RE.split(question[: end.start()])
    return [side.strip() for side in sides] if len(sides) == 2 else []


def _with_each_part(
    chosen: list[Sentence],
    pool: list[Sentence],
    result: Result,
    configs: dict[int, str],
    meanings: Meanings,
) -> list[Sentence]:
    """`chosen`, plus the best sentence for each part of a question that asks
    several things (question_parts) when none of `chosen` says it already:
    an answer to "X, and Y?" quotes Y too. A part's vector (one more query
    embedded, only when the passages have stored unit vectors) is compared
    with the sentences' stored ones and blended with the part's words they
    hold (_part_scores)."""
    parts = question_parts(result.question)
    if not parts or result.vector is None or not result.embedding_model:
        return chosen
    if not any(s.location.section_id in meanings for s in pool):
        return chosen  # an index without unit vectors: no model call for nothing
    vectors = embedding.get_embedder(result.embedding_model).embed_queries(parts)
    read = [configs[id(s.passage)] for s in pool]
    out = list(chosen)
    said = {_said(s) for s in out}
    code = sum(has_code(s.text) for s in out)
    for part, vector in zip(parts, vectors, strict=True):
        near = _stored_nearness(pool, np.asarray(vector, dtype=np.float32), meanings)
        if near is None:
            return chosen
        scores = _part_scores(pool, part, read, near)
        best = pool[max(range(len(pool)), key=scores.__getitem__)]
        key = _said(best)
        if max(scores) <= 0 or key in said:
            continue
        if has_code(best.text):
            if code >= MAX_CODE_BLOCKS:
                continue
            code += 1
        out.append(best)
        said.add(key)
    return out


def _part_scores(
    pool: list[Sentence], part: str, read: list[str], near: np.ndarray
) -> list[float]:
    """Each sentence's score for one part of the question: its cosine above
    the median's, over the best's (_above_median), blended at MEANING_WEIGHT
    with the idf of the part's words its own text holds (not its heading's),
    over the best sentence's; divided by its passage's rank decay."""
    asked = {config: set(terms(part, config)) for config in set(read)}
    owns = [set(terms(s.text, c)) for s, c in zip(pool, read, strict=True)]
    n = len(owns)
    held = Counter(t for own in owns for t in own)
    words = [
        sum(math.log(1 + n / (1 + held[t])) for t in asked[c] & own)
        for own, c in zip(owns, read, strict=True)
    ]
    top = max(words, default=0.0) or 1.0
    meaning = _above_median(near).tolist()
    return [
        (MEANING_WEIGHT * m + (1 - MEANING_WEIGHT) * w / top) / _decay(s)
        for s, m, w in zip(pool, meaning, words, strict=True)
    ]


def _above_median(near: np.ndarray) -> np.ndarray:
    """Each cosine above the median one, over the best one's: 0 to 1."""
    floor = float(np.median(near))
    span = max(float(near.max()) - floor, 1e-6)
    return np.clip((near - floor) / span, 0.0, 1.0)


def _decay(sentence: Sentence) -> float:
    """What a sentence's score is divided by for its passage's rank: earlier
    (better-ranked) passages win ties."""
    return 1 + RANK_DECAY * (sentence.passage.rank - 1)


def _unranked(sentence: Sentence) -> float:
    """A sentence's word score without its passage's rank decay."""
    return sentence.words * _decay(sentence)


def _stored_nearness(
    sentences: list[Sentence], question: np.ndarray, meanings: Meanings
) -> np.ndarray | None:
    """Each sentence's cosine to the question from its units' stored vectors,
    the median for one without; None when no sentence has one (an index built
    before they were stored, or vectors of another size)."""
    near: list[float | None] = []
    for s in sentences:
        bounds, vectors = meanings.get(s.location.section_id, ([], None))
        found = None
        if len(bounds) and vectors.shape[1] == len(question):
            found = unit_vectors.covering(s.start, s.end, bounds, vectors)
        near.append(None if found is None else float(found @ question))
    known = [n for n in near if n is not None]
    if not known:
        return None
    median = float(np.median(known))
    return np.array([median if n is None else n for n in near], dtype=np.float32)


def passage_configs(
    passages: list[Passage], sources: dict[int, tuple[str, str]] | None = None
) -> dict[int, str]:
    """The text-search configuration each passage is read in, by id(passage):
    its source's language when an editor chose one, else the passage's own
    when it has prose enough to tell, else its source's detected language (as
    ingestion reads a section: kb.languages.section_languages). `sources`:
    (language chosen, language detected) by source id, "" when none
    (kb.answering.configs_of reads them)."""
    sources = sources or {}
    configs = {}
    for p in passages:
        language, detected = sources.get(p.source_id, ("", ""))
        code = language or languages.detect(
            p.text, default=detected or languages.DEFAULT
        )
        configs[id(p)] = languages.config_for(code)
    return configs


def _choose(sentences: list[Sentence], asked: int) -> list[Sentence]:
    """`asked`: how many terms the question has (_score)."""
    ranked = sorted(sentences, key=lambda s: -s.score)
    needed = min(MIN_SHARED_WORDS, asked)
    chosen: list[Sentence] = []
    locations: list[tuple[int, int]] = []
    quoted: set[str] = set()  # the same words from another copy say nothing new
    code: list[Sentence] = []

    def new_text(s: Sentence) -> bool:
        if has_code(s.text):
            if len(code) >= MAX_CODE_BLOCKS:
                return False
            code.append(s)
        key = _said(s)
        return key not in quoted and not quoted.add(key)

    # What each entry the question names says it is comes first, however few
    # of the question's words it shares ("Create a new directory at this
    # given path." for "what does the mkdir method do?").
    defining = [s for s in ranked if s.defines and new_text(s)]
    chosen += defining
    locations += [(s.passage.rank, s.location.start) for s in defining]
    lead = ranked[0]  # the shares below are of the best sentence's score
    for s in ranked:  # the best sentence of each of the best locations first
        key = (s.passage.rank, s.location.start)
        # One shared word ("class" in "yoga class" and "economy class") is not
        # enough for a location of its own: its sentence must weigh a share of
        # the best one's, as every further sentence must, and share words enough.
        fair = s.score > 0 and (
            s is lead or s.score >= LOCATION_SHARE * lead.score and s.shared >= needed
        )
        if fair and key not in locations and len(locations) < TOP_LOCATIONS:
            if new_text(s):
                locations.append(key)
                chosen.append(s)
    if not chosen:
        chosen.append(lead)
    best, best_words = lead.score, lead.words
    words = sum(len(s.text.split()) for s in chosen)
    for s in ranked:
        if len(chosen) >= MAX_SENTENCES or s.score < KEEP_SHARE * best:
            break
        if s.words < KEEP_SHARE * best_words and s.meaning < ADDON_MEANING:
            continue  # near in meaning, as its neighbours are: not on its own
        if s in chosen:
            continue
        elsewhere = (s.passage.rank, s.location.start) not in locations
        if elsewhere and s.shared < needed:
            continue
        if words + len(s.text.split()) > MAX_ANSWER_WORDS or not new_text(s):
            continue
        chosen.append(s)
        words += len(s.text.split())
    return chosen


def _said(sentence: Sentence) -> str:
    """What a sentence says, whatever copy it is: the same words from another
    location add nothing to an answer."""
    return " ".join(sentence.text.split()).casefold()


def _without_other_rows(chosen: list[Sentence], question: str) -> list[Sentence]:
    """The chosen sentences without the table rows that do not hold the code
    or identifier asked, when a row of their section does: "SQLSTATE 23505"
    is answered by the row of 23505, not by 39001's, which shares the word
    "sqlstate" (invalid_sqlstate_returned). A row holding what the question
    quotes stays: asked the difference between «git add .» and «git add -A
    .», the row of `git add .` was left out for not holding "-A" (QA over
    Debian's Spanish reference)."""
    asked = {s.location.section_id for s in chosen if s.exact and is_table_row(s.text)}
    phrases = _quoted_phrases(question)
    return [
        s
        for s in chosen
        if s.exact
        or s.location.section_id not in asked
        or not is_table_row(s.text)
        or _holds_phrase(s.text, phrases)
    ]


# What a question quotes: «git add .», “-S”, "max_connections", `job.cancel()`.
_QUOTED_RE = re.compile(
    r"«\s*([^»\n]+?)\s*»|“([^”\n]+)”|„([^“”\n]+)[“”]|\"([^\"\n]+)\"|`([^`\n]+)`"
)


def _quoted_phrases(question: str) -> list[str]:
    """The phrases `question` quotes, each as its words space-joined."""
    return [
        " ".join(next(g for g in m.groups() if g).split())
        for m in _QUOTED_RE.finditer(question)
    ]


def _holds_phrase(text: str, phrases: list[str]) -> bool:
    """Whether `text` says one of the `phrases` (code marks aside) as a whole,
    not inside a longer word."""
    said = " ".join(text.replace("`", " ").casefold().split())
    return any(
        re.search(rf"(?<![\w-]){re.escape(p.casefold())}(?![\w-])", said)
        for p in phrases
        if p
    )


def _best_first(chosen: list[Sentence]) -> None:
    """Sections in the order of their best sentence; in each, the best sentence
    first, with what it continues (the "...:" sentence of its list or code
    block, the header line of its table row), then the section's others
    from its start, each run in document order: the answer opens with what
    answers (issue #28)."""
    sections: dict[int, list[Sentence]] = {}
    for s in sorted(chosen, key=lambda s: s.start):
        sections.setdefault(s.location.section_id, []).append(s)
    ordered = sorted(sections.values(), key=lambda run: -max(s.score for s in run))
    chosen[:] = [s for run in ordered for s in _from_best(run)]


def _from_best(run: list[Sentence]) -> list[Sentence]:
    """A section's chosen sentences (document order) from the run holding its
    best one (what holds the code or option asked, else the best by score;
    its best prose when that is a line of code, unless that prose is the
    code's own explanation right after it; after the chosen sentence it
    leans on, _reads_on), then those before it."""
    best = max(range(len(run)), key=lambda i: (run[i].exact > 0, run[i].score))
    prose = [i for i, s in enumerate(run) if not has_code(s.text)]
    if prose and _is_one_line_code(run[best].text):
        # A signature or a command line names what the prose says: that opens,
        # unless it is the code's own explanation ("This will ...": after it).
        said = max(prose, key=lambda i: run[i].score)
        explains = (
            said == best + 1
            and run[said].passage is run[best].passage
            and _REFERS_TO_CODE_RE.match(run[said].text)
            and not _text_between(run[best], run[said]).strip()
        )
        if not explains:
            best = said
    pivot = best
    if run[best].table is not None:  # its header line opens its table
        pivot = next((i for i, s in enumerate(run) if s.start == run[best].table), best)
    if _is_fragment(run[pivot].text):
        pivot = 0  # the section's part in document order
    while pivot > 0 and (
        _continues(run[pivot - 1], run[pivot]) or _reads_on(run[pivot - 1], run[pivot])
    ):
        pivot -= 1
    return run[pivot:] + run[:pivot]


def _reads_on(before: Sentence, after: Sentence) -> bool:
    """Whether `after` is the next sentence of `before`'s paragraph and refers
    back to it: quoted after it, as written ("Используйте команду
    full-upgrade, чтобы обновить также и эти пакеты." after the sentence
    about those packages; "... así que no debería tener más de 60
    caracteres." after "La línea 12 es una descripción corta.": QA over
    Debian's Russian and Spanish manuals). A sentence that says its own
    thing still opens."""
    if not _REFERS_BACK_RE.search(after.text):
        return False
    if any(
        is_list_item(s.text) or has_code(s.text) or is_table_row(s.text)
        for s in (before, after)
    ):
        return False
    if before.passage is not after.passage or before.end > after.start:
        return False
    between = after.passage.text[
        before.end - after.passage.start : after.start - after.passage.start
    ]
    return not between.strip() and "\n\n" not in between


# Words by which a sentence leans on the one before it: demonstratives and
# connectives of English, French, Spanish and Russian.
_REFERS_BACK_RE = re.compile(
    r"\b(?:these|those|this|such|thus|therefore|hence|also|ces|cette|ceci|cela"
    r"|donc|aussi|ainsi|estos|estas|esos|esas|esto|eso|así|también|эти|этот"
    r"|эта|это|этого|этих|такие|также|поэтому|тоже)\b",
    re.IGNORECASE,
)


def _is_fragment(text: str) -> bool:
    """The rest of a sentence a code block broke ("but can be used to amend
    a merge commit."): it opens in small letters, and does not open its
    section's part of an answer."""
    first = text.lstrip()[:1]
    return first.isalpha() and first.islower()


def _is_one_line_code(text: str) -> bool:
    """A code block of one line (a member's signature, `exception KeyError`)."""
    lines = [line for line in one_line(text).splitlines() if line.strip()]
    return (
        has_code(text)
        and len([x for x in lines if not x.startswith(("```", "~~~"))]) == 1
    )


# A sentence that says what follows with a full stop ("... contains the
# following.", "contiene lo siguiente.", "comme suit.", "следующее."): QA over
# Debian's Spanish reference quoted it before another code block than its own.
_THE_FOLLOWING_RE = re.compile(
    r"(?:\bthe following|\bas follows|\bsuivante?s|\bce qui suit|\bcomme suit"
    r"|\blo siguiente|\bl[oa]s \w+ siguientes|\bsiguientes|\bcomo sigue"
    r"|(?<!\w)следующ(?:ее|ие|им образом)"
    r"|\b(?:involves|takes|requires|has|in|of|en|comporte|consta de|requiere|из|в)"
    r" (?:\d{1,2}|two|three|four|five|deux|trois|quatre|dos|tres|cuatro|два|три"
    r"|четыре) (?:steps|étapes|pasos|шаг(?:а|ов)))[*_]*\.$",
    re.IGNORECASE,
)


def _introduces(text: str) -> bool:
    """Whether a sentence ends in ":", as one introducing what follows does,
    its closing emphasis aside ("**React calls them several times:**"); not
    "Default: *", whose star is its value."""
    text = text.rstrip()
    if _THE_FOLLOWING_RE.search(text):
        return True
    marks = len(text) - len(text.rstrip("*_"))
    if marks and text[: len(text) - marks].rstrip().endswith(":"):
        return text[-marks:] in text[: len(text) - marks]  # opened before
    return text.endswith(":")


def _is_caption(text: str) -> bool:
    """A line naming what follows: a caption has no full stop ("Table 2.3.
    Options importantes de la commande aptitude(8)"), an introduction ends in
    ":"; a paragraph of prose before a table is neither."""
    text = text.rstrip().rstrip("*_")
    return (
        not is_table_row(text)
        and not has_code(text)
        and not is_list_item(text)
        and not text.endswith((".", "!", "?", "…"))
    )


def _continues(before: Sentence, after: Sentence) -> bool:
    """Whether `after` reads on from `before`: an item or a code block of the
    list or block a "...:" sentence introduces, right after it; a table's
    header line right after its caption (QA over Debian's French reference:
    "Options importantes de la commande aptitude(8)" came after its table)."""
    if after.table == after.start and _is_caption(before.text):
        return _nothing_between(after.passage, before.end, after.start)
    if has_code(before.text) and is_list_item(after.text):
        # the next item of a list whose items each show their code
        return _nothing_between(after.passage, before.end, after.start)
    if not (is_list_item(after.text) or has_code(after.text)):
        return False
    if not (_introduces(before.text) or is_list_item(before.text)):
        return False
    if _ENTRY_ITEM_RE.match(before.text) and _ENTRY_ITEM_RE.match(after.text):
        return False  # entries of a reference: the best one opens
    return _nothing_between(after.passage, before.end, after.start)


def _headers_of(chosen: list[Sentence], headers: list[Sentence]) -> list[Sentence]:
    """The header line (column names) of each table a chosen row comes from.

    A row's cells mean nothing without them. A short table is read whole, its
    header line above the row in the loaded text (_header_above); the header lines
    of long tables are passages of their own (retrieval.expansion.regions_of).
    The group row above a row ("Class 23 — …") comes too when it is loaded.
    Marks each row, group row and header with its table (Sentence.table).
    """
    known = {(s.passage.source_id, s.start): s for s in chosen}
    added: list[Sentence] = []
    for s in chosen:
        if not is_table_row(s.text) or s.passage.is_header:
            continue
        header = _header_above(s)
        if header is None:
            above = [
                h
                for h in headers
                if h.location.section_id == s.location.section_id and h.end <= s.start
            ]
            header = max(above, key=lambda h: h.end, default=None)
        if header is None:
            continue
        header = _known(known, added, header)
        header.table = s.table = header.start
        if (group := _group_above(s)) is not None:  # its group's label, too
            _known(known, added, group).table = header.start
    return added


def _known(
    known: dict[tuple[int, int], Sentence], added: list[Sentence], line: Sentence
) -> Sentence:
    """The sentence chosen or added at `line`'s place; `line`, added, if none."""
    key = (line.passage.source_id, line.start)
    if key not in known:
        known[key] = line
        added.append(line)
    return known[key]


def _header_above(row: Sentence) -> Sentence | None:
    """The header line of the table `row` is in, when the loaded text holds it:
    up over the rows above it to the delimiter line, and the line above that."""
    base, text = _loaded(row.passage, row.start, row.end)
    line = text.rfind("\n", 0, row.start - base) + 1
    while line > 0:
        above = text.rfind("\n", 0, line - 1) + 1
        previous = text[above:line].strip()
        if is_table_row(previous) and not is_delimiter_line(previous):
            line = above  # a row above it: go on up
            continue
        if not is_delimiter_line(previous) or above == 0:
            return None
        head = text.rfind("\n", 0, above - 1) + 1
        found = header_line(text[head:line], base + head)
        if found is None:
            return None
        start, end = found
        return Sentence(
            text[start - base : end - base], start, end, row.passage, row.location
        )
    return None


def _group_above(row: Sentence) -> Sentence | None:
    """The group row ("| Class 23 — … |  |") above the table row `row`, when the
    loaded text holds it: up over the rows above it, to the delimiter line."""
    if is_group_line(row.text):
        return None
    base, text = _loaded(row.passage, row.start, row.end)
    line = text.rfind("\n", 0, row.start - base) + 1
    while line > 0:
        above = text.rfind("\n", 0, line - 1) + 1
        previous = text[above:line].strip()
        if not is_table_row(previous) or is_delimiter_line(previous):
            return None
        if is_group_line(previous):
            start = base + text.index(previous, above)
            return Sentence(
                previous, start, start + len(previous), row.passage, row.location
            )
        line = above
    return None


_ELEMENT_RE = re.compile(r"<(?:/?[A-Za-z][\w-]*[\s/>]|!--)")  # "</Sandpack>" too
_TABLE_TAG_RE = re.compile(r"<(?:table|thead|tbody|tr|td|th)[\s>]", re.IGNORECASE)
MARKUP_CHARS = 2000  # of a sentence read to tell markup from text
_HTML_DATA_CELL_RE = re.compile(r"<td\b", re.IGNORECASE)
_HTML_CELL_RE = re.compile(
    r"<t[dh]\b[^<>]*>(.*?)(?=</t[dh]\s*>|<t[dh]\b|$)", re.I | re.S
)


def _is_markup(s: Sentence) -> bool:
    """Raw HTML in a Markdown source (a README's badges, `<p align="center">`):
    tags a reader would see as code, which say less than they show. An HTML
    table always: an answer shows it as escaped markup, however much it says
    (its cells are searched, and shown in the passage)."""
    text = s.text.strip()[:MARKUP_CHARS]
    if is_html_row(text):  # quoted as its cells (one_line); not a header's
        return not _HTML_DATA_CELL_RE.search(text) or not html_text(text).strip()
    if not _ELEMENT_RE.match(text):  # an autolink (<https://…>) is a link in text
        return False
    if _TABLE_TAG_RE.match(text):
        return True
    return len(html_text(text)) * 2 < len(text)


def _text_between(s: Sentence, after: Sentence) -> str:
    base, text = _loaded(s.passage, s.start, after.end)
    return text[s.end - base : after.start - base]


def has_code(text: str) -> bool:
    """A code block: fenced, or indented (sentences.units)."""
    return text.lstrip().startswith(("```", "~~~")) or text[:1] in " \t"


def _is_header_row(s: Sentence) -> bool:
    """A table's header line (the delimiter line follows): column names, which
    answer nothing alone; _headers_of adds it above a chosen row."""
    if not is_table_row(s.text):
        return False
    base, text = _loaded(s.passage, s.start, s.end)
    after = s.end - base
    line_end = text.find("\n", after + 1)
    following = text[after + 1 : len(text) if line_end < 0 else line_end]
    return text[after : after + 1] == "\n" and is_delimiter_line(following.strip())


def _with_what_they_introduce(
    chosen: list[Sentence], following: dict[int, Sentence]
) -> list[Sentence]:
    """A chosen sentence ending in ":" ("Default:", "run this:") comes with the
    list or table right after it, or the code block, when that is short; a
    short one with nothing to show ("Default:" before a long block) is left
    out: alone it says nothing.
    `following`: the sentence after each one (_following)."""
    kept: list[Sentence] = []
    blocks = sum(has_code(s.text) for s in chosen)
    for s in chosen:
        intro = _introduces(s.text)
        if has_code(s.text) or not (intro or _unfinished(s.text)):
            kept.append(s)
            continue
        # only code reads on from a sentence without its full stop
        if intro and (items := _list_after(s, following) or _table_after(s, following)):
            kept.append(s)
            for item in items:
                if item not in chosen and item not in kept:
                    item.score = s.score
                    kept.append(item)
            continue
        after = _code_after(s, following)
        if after is not None and (after in chosen or blocks < MAX_CODE_BLOCKS):
            kept.append(s)
            if after not in chosen and after not in kept:
                after.score = s.score
                kept.append(after)
                blocks += 1
        elif len(s.text.split()) > MAX_BARE_INTRO_WORDS or not intro:
            kept.append(s)
    return kept or chosen


def _unfinished(text: str) -> bool:
    """A sentence of prose that ends without a mark, as one running on into
    the code block after it does ("С помощью apt пакет можно зафиксировать
    командой" above `apt-mark hold`, QA over Debian's Russian FAQ)."""
    end = text.rstrip()[-1:]
    return (
        (end.isalnum() or end == "`")
        and not has_code(text)
        and not is_list_item(text)
        and not is_table_row(text)
    )


# A bulleted item that is an entry of a reference: its name as code, then what
# it is ("* `--platform`: Platforms for which ..."; a name in bold may be a
# step's, "- **Verify**: ..."). Such a list is not a procedure: two of its entries
# chosen do not make the others part of the answer (Poetry's `add` options:
# the question about --platform quoted all twelve).
_ENTRY_ITEM_RE = re.compile(
    r"[ \t]*[-*+][ \t]+`[^`\n]+`"  # the name, as code ("**Verify**:" names a step)
    r"(?:[ \t]*\([^)\n]*\))?[ \t]*(?::|[\u2013\u2014-][ \t])"  # "(-G)", ":" or a dash
)


# An item named in bold ("- **Delayed retry placement** — ..."): an entry, or
# a step when a "...:" sentence introduces its list ("- **Verify**: ...").
_BOLD_ITEM_RE = re.compile(
    r"[ \t]*[-*+][ \t]+\*\*[^*\n]+\*\*[ \t]*(?::|[\u2013\u2014-][ \t])"
)


def _with_whole_lists(
    chosen: list[Sentence], sentences: list[Sentence], following: dict[int, Sentence]
) -> list[Sentence]:
    """Two chosen items of one list bring the rest of it, when the whole list
    is short (MAX_INTRO_ITEMS items of MAX_INTRO_LIST_WORDS words): a
    procedure quoted as its steps 1 to 4 reads as done (QA over React's docs:
    "Assurez-vous que l'option est cochée !", step 5 of 5, was left out)."""
    preceding = {id(after): s for s, after in zip(sentences, sentences[1:])}
    lists: dict[int, tuple[Sentence, list[Sentence]]] = {}
    for s in chosen:
        if not is_list_item(s.text) or has_code(s.text):
            continue
        first = s
        while (before := preceding.get(id(first))) is not None and (
            before.location is first.location
            and is_list_item(before.text)
            and not _text_between(before, first).strip()
        ):
            first = before
        lists.setdefault(id(first), (first, []))[1].append(s)
    kept = list(chosen)
    for first, items in lists.values():
        if len(items) < 2:
            continue
        whole = [first, *_items_from(first, following)]
        words = sum(len(item.text.split()) for item in whole)
        if len(whole) > MAX_INTRO_ITEMS or words > MAX_INTRO_LIST_WORDS:
            continue
        if all(_ENTRY_ITEM_RE.match(item.text) for item in whole):
            continue  # entries of a reference, each said alone
        intro = preceding.get(id(first))
        if (intro is None or not _introduces(intro.text)) and all(
            _BOLD_ITEM_RE.match(item.text) for item in whole
        ):
            continue  # named in bold, without a "...:" making them steps
        _mark_if_cut(whole, following)
        score = min(item.score for item in items)
        for item in whole:
            if item not in kept:
                item.score = score
                kept.append(item)
    return kept


def _with_what_code_does(
    chosen: list[Sentence], following: dict[int, Sentence]
) -> list[Sentence]:
    """Each chosen code block with the sentence right after it when that one
    says what the code does ("This will ...", "Cela fera tout le nécessaire
    ... :", "Это ..."): code stays with the sentence that explains it (QA over
    Debian's French maint-guide: "Quelles étapes la commande dpkg-buildpackage
    -us -uc effectue-t-elle ?" was answered with the command alone, and the
    steps listed under "Cela fera ... :" were left out). Within
    MAX_ANSWER_WORDS; the sentence then brings what it introduces."""

    def explains(s: Sentence, after: Sentence) -> bool:
        return (
            has_code(s.text)
            and not is_list_item(after.text)
            and bool(_REFERS_TO_CODE_RE.match(after.text))
            and not _text_between(s, after).strip()
        )

    return _with_next(chosen, following, explains)


# The first word of a sentence that refers back to the code above it, in the
# languages the sentences are split in.
# ("It", "That" and Russian "Так" open other sentences too: "It is also
# possible to build from source", "Так как ...".)
_REFERS_TO_CODE_RE = re.compile(
    r"\W*(?:this|these|doing so|cela|ceci|ça|cette|celle-ci|celui-ci"
    r"|esto|esta|este|estas|estos|eso|ello|это|эта|этот|эти)\b",
    re.IGNORECASE,
)


def _with_their_qualifiers(
    chosen: list[Sentence], following: dict[int, Sentence]
) -> list[Sentence]:
    """Each chosen sentence with the one right after it in its paragraph when
    that one qualifies it ("Be aware that low interval values will increase
    the load on Redis."; "However, ..."): an exception stays with its rule,
    though it shares no word with the question. Within MAX_ANSWER_WORDS."""

    def qualifies(s: Sentence, after: Sentence) -> bool:
        return bool(_QUALIFIER_RE.match(after.text)) and (
            "\n\n" not in _text_between(s, after)
        )

    return _with_next(chosen, following, qualifies)


# A question that asks how to do something, or for a command, a call or an
# example: what answers it is often code that shares none of its words.
_ASKS_FOR_CODE_RE = re.compile(
    r"(?<!-)\bhow\b(?!\s+(?:many|much|long|often|far|big|old|large|fast|soon)\b)"
    r"|\bwhat\s+do\s+i\s+(?:run|type|write|put|add)\b"
    r"|\b(?:command|syntax|snippet|example)s?\b|\blooks?\s+like\b"
    r"|\bcomment\b(?!\s+(?:souvent|longtemps))|\bcommande|\bexemple"
    r"|\bcómo\b|\bcomando|\bejemplo"
    r"|\bкак\b(?!\s+(?:часто|долго|много|скоро|быстро)\b)|\bкоманд"
    r"|\bпример(?:ы|а|ом|е|ов)?\b",
    re.IGNORECASE,
)


def _with_the_code_asked(
    chosen: list[Sentence], pool: list[Sentence], question: str
) -> list[Sentence]:
    """A question asking how (a command, a call, an example: _ASKS_FOR_CODE_RE)
    answered from a section that shows code, without quoting any: the section's
    first code block of at most MAX_INTRO_CODE characters comes too. The prose
    says what to do; the code is how, and reads like nothing to the question
    ("How do I find out how many jobs are ahead of mine?": "it is possible to
    get the position of a job", and `job2.get_position()` below it). On the
    pooled golden sets, 7 more answers quoted every span, none fewer."""
    if not chosen or not _ASKS_FOR_CODE_RE.search(question):
        return chosen
    if sum(has_code(s.text) for s in chosen) >= MAX_CODE_BLOCKS:
        return chosen
    best = max(chosen, key=lambda s: s.score)
    section = [
        s
        for s in pool
        if s.passage is best.passage
        and s.location.section_id == best.location.section_id
    ]
    if any(s in chosen for s in section if has_code(s.text)):
        return chosen
    code = next(
        (s for s in section if has_code(s.text) and len(s.text) <= MAX_INTRO_CODE),
        None,
    )
    if code is None:
        return chosen
    code.score = min(code.score, best.score)
    return [*chosen, code]


def _with_next(
    chosen: list[Sentence],
    following: dict[int, Sentence],
    joins: Callable[[Sentence, Sentence], bool],
) -> list[Sentence]:
    """Each chosen sentence with the prose sentence right after it when
    `joins(sentence, after)`, at its score, within MAX_ANSWER_WORDS (code and
    table rows are never brought so)."""
    words = sum(len(s.text.split()) for s in chosen)
    kept: list[Sentence] = []
    for s in chosen:
        kept.append(s)
        after = following.get(id(s))
        if (
            after is None
            or after in chosen
            or after in kept
            or has_code(after.text)
            or is_table_row(after.text)
            or words + len(after.text.split()) > MAX_ANSWER_WORDS
            or not joins(s, after)
        ):
            continue
        after.score = s.score
        kept.append(after)
        words += len(after.text.split())
    return kept


def _following(sentences: list[Sentence]) -> dict[int, Sentence]:
    """The sentence after each one (by id) in the same location."""
    return {
        id(s): after
        for s, after in zip(sentences, sentences[1:])
        if after.location is s.location
    }


def _list_after(intro: Sentence, following: dict[int, Sentence]) -> list[Sentence]:
    """The items of the list right after `intro`: the whole list when it has at
    most MAX_INTRO_ITEMS items of MAX_INTRO_LIST_WORDS words in all, else its
    first items within them, the last marked as going on (answer_text shows
    the cut); none when its first item alone is over (the intro then stands
    as any sentence does)."""
    items: list[Sentence] = []
    words = 0
    for item in _items_from(intro, following):
        words += len(item.text.split())
        if len(items) >= MAX_INTRO_ITEMS or words > MAX_INTRO_LIST_WORDS:
            if items:
                items[-1].goes_on = True
            return items
        items.append(item)
    _mark_if_cut(items, following)
    return items


def _items_from(s: Sentence, following: dict[int, Sentence]) -> Iterator[Sentence]:
    """The list items right after `s`, one after another with nothing else
    between them, in its location; an item introducing a short code block
    ("- Find the packages whose description holds a word:") with it. QA over
    Debian's Russian FAQ: a list of commands, each item above its code, was
    quoted as its first item alone, and another item's command chosen on its
    own was read as that item's."""
    while (after := following.get(id(s))) is not None and is_list_item(after.text):
        if _text_between(s, after).strip():
            return
        yield after
        s = after
        if _introduces(s.text) and (code := _code_after(s, following)) is not None:
            yield code
            s = code


def _code_after(s: Sentence, following: dict[int, Sentence]) -> Sentence | None:
    """The code block right after `s`, nothing between them, when it is short
    enough (MAX_INTRO_CODE) to come with a sentence introducing it."""
    code = following.get(id(s))
    if (
        code is not None
        and has_code(code.text)
        and len(code.text) <= MAX_INTRO_CODE
        and not _text_between(s, code).strip()
    ):
        return code
    return None


def _mark_if_cut(items: list[Sentence], following: dict[int, Sentence]) -> None:
    """Mark the last of a list's `items` as going on when the passage ends
    inside the list (a window cut by the budget)."""
    if items and following.get(id(items[-1])) is None and _list_goes_on(items[-1]):
        items[-1].goes_on = True


# A list item opening the line after a quoted item: the list goes on past it
_NEXT_ITEM_RE = re.compile(r"[ \t]*\n(?:[ \t]*\n)?[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]")


def _list_goes_on(item: Sentence) -> bool:
    """Whether the source goes on with another item right after `item`, past
    where its passage ends (a window cut by the budget)."""
    base, text = _loaded(item.passage, item.start, item.end)
    return bool(_NEXT_ITEM_RE.match(text, item.end - base))


def _table_after(intro: Sentence, following: dict[int, Sentence]) -> list[Sentence]:
    """The table right after `intro`, its header line and rows, when it has at
    most MAX_INTRO_ITEMS rows of MAX_INTRO_LIST_WORDS words in all ("Here is
    how refs and state compare:" and its table); else none, as for a list."""
    header = following.get(id(intro))
    if (
        header is None
        or not _is_header_row(header)
        or _text_between(intro, header).strip()
    ):
        return []
    lines, words, s = [header], 0, header
    while (
        (row := following.get(id(s))) is not None
        and is_table_row(row.text)
        and _next_row(s, row)
    ):
        lines.append(row)
        words += len(row.text.split())
        if len(lines) > MAX_INTRO_ITEMS + 1 or words > MAX_INTRO_LIST_WORDS:
            return []
        s = row
    return lines if len(lines) > 1 else []


def _is_title_line(s: Sentence) -> bool:
    """The first line of a plain-text file standing alone (no full stop): its
    title, which names the document and answers nothing."""
    if not s.passage.file_name.lower().endswith(TEXT_EXTENSIONS):
        return False
    if s.start != s.location.start or 0 not in s.location.chunk_indexes:
        return False
    text = s.text.strip()
    return "\n" not in text and not text.endswith((".", "!", "?", ":", ";"))


# A record's "Date: 21 November 2022" line (issue #29's QA): the date words of
# a dated question match it best, yet it only repeats what the question says.
_DATE_LINE_RE = re.compile(
    r"\W*(?:date|dated|datum|fecha|дата)\W*[:：]\W*[\w ,./-]{1,40}?\W*",
    re.IGNORECASE,
)


# A reference's "See also: InsertEndChild" (Doxygen, Javadoc, man pages):
# names of other entries, which a question naming them matches best, and
# which answer nothing (issue #29's QA: "InsertEndChild or LinkEndChild?").
_SEE_ALSO_RE = re.compile(
    r"\W*(?:see also|voir aussi|véase también|ver también|см\. также|siehe auch)"
    r"\W*[:：]",
    re.IGNORECASE,
)


def _is_date_line(s: Sentence) -> bool:
    """A line that is only a date under a label: it answers nothing."""
    text = s.text.strip()
    found = _DATE_LINE_RE.fullmatch(text)
    return bool(found) and any(ch.isdigit() for ch in text)


def answer_text(chosen: list[Sentence]) -> str:
    """Each sentence followed by its marker; the lines of one table together, as a
    table (header line, delimiter line, rows) followed by their markers. The
    first sentence quoted from an entry of a reference (a function, an option)
    opens with the entry's name when it does not say it (_entry_name)."""
    pieces: list[str] = []
    named: set[int] = set()
    tab: str | None = None
    i = 0
    while i < len(chosen):
        s = chosen[i]
        if s.location.section_id not in named:
            named.add(s.location.section_id)
            if (name := _entry_name(s)) is not None:
                shown = name if "`" in name else f"`{name}`"  # its marks as written
                pieces.append(f"**{shown}**:")
        if (label := _tab_label(s)) is not None and label != tab:
            pieces.append(f"*{label}*:")
        tab = label
        group = [s]
        while (
            s.start == s.table  # a table's header line, its rows after it
            and i + len(group) < len(chosen)
            and chosen[i + len(group)].table == s.table
            and chosen[i + len(group)].passage.source_id == s.passage.source_id
        ):
            group.append(chosen[i + len(group)])
        i += len(group)
        markers = " ".join(dict.fromkeys(f"[{g.citation}]" for g in group))
        after = chosen[i] if i < len(chosen) else None
        if (
            len(group) == 1
            and after is not None
            and after.citation == s.citation
            and (_introduces(s.text) or _unfinished(s.text))
            and has_code(after.text)
        ):  # "Default:" and its value, one piece under one marker
            i += 1
            pieces.append(
                f"{one_line(s.text)}\n\n{one_line(after.text)}\n{markers}\n\n"
            )
            continue
        items = _items_after(chosen, i, s) if len(group) == 1 else []
        if items:  # "...the following:" and its list, as a list (issue #28)
            i += len(items)
            lines = _list_lines(items)
            if items[-1].goes_on:
                lines += "\n- …"  # the list goes on in the cited section
            pieces.append(f"{one_line(s.text)} {markers}\n\n{lines}\n\n")
            continue
        if len(group) == 1 and has_code(s.text):
            # A block of its own: a fence opens a line, and a closing fence has
            # nothing after it (a marker there would open a new block).
            pieces.append(f"\n\n{one_line(s.text)}\n{markers}\n\n")
            continue
        run = [s]  # items of one list, quoted as that list
        while (
            len(group) == 1
            and i < len(chosen)
            and is_list_item(s.text)
            and is_list_item(chosen[i].text)
            and not has_code(chosen[i].text)
            and chosen[i].location is s.location
            and chosen[i].citation == s.citation
        ):
            run.append(chosen[i])
            i += 1
        if len(run) > 1:
            lines = _list_lines(run)
            if run[-1].goes_on:
                lines += "\n- …"
            pieces.append(f"\n\n{lines} {markers}\n\n")  # the last item marked
            continue
        if len(group) == 1:
            pieces.append(f"{_said_whole(s)} {markers}")
            continue
        pieces += _table_pieces(group)
    return " ".join(pieces).strip()


# A heading that names an entry of a reference: code, a call, an option, an
# identifier ("exsltRegisterAll ()", "--leak-check=<no|summary|yes|full>
# [default: summary]", "abort_noattach", "OptionParser.accepts").
# A call is a name right before its parentheses ("accepts(String)"), or an
# identifier before a space and them ("exsltRegisterAll ()"): "Installation
# (Windows)" is prose. One token needs a mark between word characters
# ("abort_noattach", "OptionParser.accepts"; not "Changelog:").
_IDENTIFIER = r"(?:\w*[_.:$]\w|[a-z]+[A-Z]|[A-Z][a-z]+[A-Z])[\w.:$]*"
_ENTRY_RE = re.compile(
    r"`|^[\w.:$]+\(|^" + _IDENTIFIER + r" \(|^-{1,2}\w"
    r"|^\S*\w[_.:#]\w\S*$|^[a-z]+[A-Z]\w*$|^[A-Z][a-z]+[A-Z]\w*$"
)
_SECTION_NUMBER_RE = re.compile(r"^(?:\d+\.)+\d*\s+")
_NAME_END_RE = re.compile(r"[\s(=\[<]")
MAX_ENTRY_WORDS = 12
# Words a reference entry's heading has besides its code ("Method `accepts`");
# QA over Debian's manuals: "6.8. Что находится в каталогах внутри
# `dists/stable/main`?" opened an answer in bold as if it were an entry's name.
MAX_ENTRY_PROSE_WORDS = 3
_CODE_SPAN_RE = re.compile(r"`[^`\n]*`")
_PARAMETERS_RE = re.compile(r"\([^()\n]*\)")  # a signature's, not prose


def _entry_name(s: Sentence) -> str | None:
    """The heading of the reference entry `s` is under, when it names the entry
    and `s` does not: "Registers all available EXSLT extensions" answers
    "which function registers them?" only beside `exsltRegisterAll ()`, and
    an option's default is often in its heading alone (Valgrind's
    "--leak-check=<no|summary|yes|full> [default: summary]"). None for a
    heading of prose ("Windows vs. POSIX")."""
    heading = s.location.heading_path.rsplit(" > ", 1)[-1].strip()
    entry = _SECTION_NUMBER_RE.sub("", heading)
    if not entry or len(entry.split()) > MAX_ENTRY_WORDS or not _ENTRY_RE.search(entry):
        return None
    prose = _PARAMETERS_RE.sub("", _CODE_SPAN_RE.sub("", entry))
    if len(prose.split()) > MAX_ENTRY_PROSE_WORDS:
        return None  # a heading of prose naming code: "`apt` compared to `apt-get`"
    name = _NAME_END_RE.split(entry.replace("`", "").replace("\\", ""), maxsplit=1)[0]
    if not name:
        return None
    # said as a word: "dump" is not said by "Like `dumps()` but dumps into a file"
    said = re.compile(rf"(?<![\w$]){re.escape(name)}(?![\w$])", re.IGNORECASE)
    if said.search(s.text.replace("\\", "")):
        return None
    return heading


def _items_after(chosen: list[Sentence], i: int, intro: Sentence) -> list[Sentence]:
    """The list items chosen[i:] starts with that `intro` ("...:") introduces:
    of its location and its citation."""
    if not _introduces(intro.text) or has_code(intro.text):
        return []
    items: list[Sentence] = []
    for s in chosen[i:]:
        if not (
            (is_list_item(s.text) or _code_of_item(items, s))
            and s.location is intro.location
            and s.citation == intro.citation
        ):
            break
        items.append(s)
    return items


_ITEM_MARK_RE = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+")


def _code_of_item(items: list[Sentence], s: Sentence) -> bool:
    """Whether `s` is the code block the last of `items` introduces
    ("- Show the details of a package:" over `apt show package`)."""
    return bool(
        items
        and has_code(s.text)
        and is_list_item(items[-1].text)
        and _introduces(items[-1].text)
    )


def _table_pieces(group: list[Sentence]) -> list[str]:
    """A table's quoted rows under its header line: one table for each citation's
    rows (a reader sees which rows each marker stands for), a group's label
    with the rows under it, a row of "…" where rows between quoted ones are
    left out; on lines of their own."""
    header, rows = group[0], group[1:]
    head = one_line(header.text)
    cells = max(len(CELL_SPLIT_RE.split(head.strip())) - 2, 1)
    runs: list[list[Sentence]] = []
    for row in rows:
        last = runs[-1] if runs else []
        # A group's label ("Class 23 — …") heads the rows of its group.
        if last and (
            last[-1].citation == row.citation
            or all(is_group_line(g.text) for g in last)
        ):
            last.append(row)
        else:
            runs.append([row])
    pieces = []
    for n, run in enumerate(runs):
        lines = [head, "|" + " --- |" * cells]
        previous = header
        for row in run:
            if not _next_row(previous, row):
                lines.append("|" + " … |" * cells)
            lines.append(one_line(row.text))
            previous = row
        cited = ([header] if n == 0 else []) + run
        markers = " ".join(dict.fromkeys(f"[{g.citation}]" for g in cited))
        pieces.append("\n\n" + "\n".join(lines) + f"\n{markers}\n\n")
    return pieces


def _next_row(above: Sentence, row: Sentence) -> bool:
    """Whether `row` comes right under `above` in its table (a header line: under
    its delimiter line)."""
    base, text = _loaded(row.passage, min(above.start, row.start), row.end)
    between = text[above.end - base : row.start - base]
    if between.count("\n") == 1 and not between.strip():
        return True
    lines = between.strip("\n").split("\n")
    return len(lines) == 1 and is_delimiter_line(lines[0].strip())


def _list_lines(items: list[Sentence]) -> str:
    """List items one a line, a nested one indented under its parent as in
    its source ("2. After each render:" over "   - cleanup runs first")."""
    lines = [item for item in items if not has_code(item.text)]
    columns = {id(item): _column(item) for item in lines}
    least = min(columns.values())
    if columns[id(lines[0])] != least:  # a child first: indented, it could read as code
        columns = dict.fromkeys(columns, least)
    out: list[str] = []
    for item in items:
        if has_code(item.text):  # under the item introducing it, indented as its text
            mark = _ITEM_MARK_RE.match(out[-1])
            indent = " " * (mark.end() if mark else 2)
            code = textwrap.indent(_dedented(item), indent, lambda _: True)
            out.append(f"\n{code}\n")
            continue
        out.append(" " * (columns[id(item)] - least) + _item_line(item.text.strip()))
    return "\n".join(out)


def _dedented(code: Sentence) -> str:
    """A code block's lines without the indentation of its fence in the source
    (a block nested in a list item is indented as the item's text is)."""
    column = _column(code)
    lines = code.text.strip("\n").split("\n")
    return "\n".join(
        [
            lines[0],
            *(ln[min(column, len(ln) - len(ln.lstrip(" "))) :] for ln in lines[1:]),
        ]
    )


def _column(s: Sentence) -> int:
    """Where `s` starts in its source line; 0 past anything but spaces."""
    base, text = _loaded(s.passage, s.start, s.end)
    at = s.start - base
    before = text[text.rfind("\n", 0, at) + 1 : at]
    return len(before.expandtabs(4)) if not before.strip() else 0


def _item_line(text: str) -> str:
    """A list item quoted in a list: a definition list's item marked as one."""
    line = one_line(text)
    return f"- {line}" if is_definition_item(text) else line


def _html_row_text(row: str) -> str:
    """An HTML table's row as the text of its cells: "title | Texto ... "."""
    cells = (
        " ".join(html_text(m.group(1)).split()) for m in _HTML_CELL_RE.finditer(row)
    )
    return " | ".join(cell for cell in cells if cell) or " ".join(
        html_text(row).split()
    )


def one_line(text: str) -> str:
    """A sentence on one line: soft line breaks (and a quote's ">") read as spaces.
    A code block stays as it is (an indented one fenced, so it still reads as
    code where the answer is shown)."""
    if text[:1] in " \t":  # an indented code block (sentences.units), or a fenced
        code = textwrap.dedent(text.expandtabs(4)).strip("\n")  # one in a list
        return code if code.startswith(("```", "~~~")) else f"```\n{code}\n```"
    if text.startswith(("```", "~~~")):
        return _outdented(_FENCE_META_RE.sub(r"\1", text, count=1))
    if text.startswith(">"):
        text = re.sub(r"\n[ \t]*>", "\n", text[1:])
        # GitHub's alert: "> [!WARNING]" over its text reads "**Warning:** ..."
        text = _ALERT_RE.sub(lambda m: f"**{m.group(1).capitalize()}:** ", text)
    if is_html_row(text):  # an HTML table's row as its cells' text
        return _html_row_text(text)
    text = without_shortcodes(text)  # Hugo's: "[Status]({{< relref "x" >}})"
    text = without_inline_tags(text)  # MDX's "<CodeStep step={1}>ref</CodeStep>"
    # MDN's definition: "- `open`\n\n  - : This attribute ..." as "- `open`: ..."
    text = _MDN_DEFINITION_RE.sub(": ", text)
    if text.startswith((": ", "- : ", "* : ")):
        text = text.split(": ", 1)[1]
    if is_definition_item(text):  # "limit\n: Integer. ..." as "limit: Integer. ..."
        term, definitions = text.split("\n", 1)
        said = _DEFINITION_MARK_RE.split("\n" + definitions)
        text = f"{term.strip()}: " + "; ".join(d.strip() for d in said if d.strip())
    return " ".join(text.split())


# A fence's info string past its language: the lines to highlight of MDX and
# Docusaurus (`js {1-2}`, `js [[1, 2, "hint"]]`), a title, no code.
_FENCE_META_RE = re.compile(r"\A((?:`{3,}|~{3,})[ \t]*[^\s`{\[]*)[^\n]*")
_ALERT_RE = re.compile(
    r"^[ \t]*\[!(NOTE|TIP|IMPORTANT|WARNING|CAUTION)\][ \t]*(?:\n|$)", re.IGNORECASE
)
_MDN_DEFINITION_RE = re.compile(r"\s*\n[ \t]*[-*+][ \t]+:[ \t]+")
_DEFINITION_MARK_RE = re.compile(r"\n[ \t]{0,3}:(?=[ \t])")


# A content tab's opening line (MkDocs Material: `=== "Flat config"`), its
# content indented under it.
_TAB_RE = re.compile(r"===\+?[ \t]+\"([^\"]{1,80})\"[ \t]*$")
# ... and Docusaurus' (`<TabItem value="legacy" label="Legacy config">`).
_TAB_ITEM_RE = re.compile(
    r"<TabItem\b(?=[^>]*\blabel=[\"']([^\"']{1,80})[\"']|[^>]*\bvalue=[\"']([^\"']{1,80})[\"'])[^>]*>"
)
MAX_TAB_LOOK_BACK = 4000  # characters read up from a sentence to its tab


def _tab_label(s: Sentence) -> str | None:
    """The label of the content tab `s` is quoted from, when it is in one: a
    Docusaurus `<TabItem>` open above it, or the nearest line above it indented
    less, when that opens an MkDocs tab. A QA pass over
    pydantic's docs got the code of a tab labelled "Bad" as the answer, the
    label left out."""
    base, text = _loaded(s.passage, s.start, s.end)
    before = text[max(0, s.start - base - MAX_TAB_LOOK_BACK) : s.start - base]
    opened = before.rfind("<TabItem")  # Docusaurus: the last one, still open
    item = _TAB_ITEM_RE.match(before, opened) if opened >= 0 else None
    if item is not None and "</TabItem>" not in before[item.end() :]:
        return item.group(1) or item.group(2)
    line_start = text.rfind("\n", 0, s.start - base) + 1
    line_end = text.find("\n", line_start)
    line = text[line_start : len(text) if line_end < 0 else line_end]
    indent = len(line) - len(line.lstrip())
    if not indent:
        return None
    floor = max(0, line_start - MAX_TAB_LOOK_BACK)
    end = line_start - 1
    while end > floor:
        start = text.rfind("\n", 0, end) + 1
        above = text[start:end]
        if above.strip() and len(above) - len(above.lstrip()) < indent:
            found = _TAB_RE.match(above.strip())
            return found.group(1) if found else None
        end = start - 1
    return None


def _said_whole(s: Sentence) -> str:
    """A sentence on one line, its bold closed or opened where the sentence
    split cut a bold passage of its paragraph (balanced_emphasis)."""
    base, text = _loaded(s.passage, s.start, s.end)
    start, end = s.start - base, s.end - base
    opens = text.rfind("\n\n", 0, start)
    closes = text.find("\n\n", end)
    return balanced_emphasis(
        one_line(s.text),
        text[0 if opens < 0 else opens : start],
        text[end : len(text) if closes < 0 else closes],
    )


def _outdented(fenced: str) -> str:
    """A fenced block quoted from inside an indented container (an MkDocs tab
    or admonition, a list item) without that indent: its first line starts at
    the fence, and a closing fence indented four spaces or more closes nothing
    where the answer is shown (the block would swallow what follows)."""
    lines = fenced.split("\n")
    last = lines[-1]
    indent = len(last) - len(last.lstrip(" "))
    if not indent or not last.strip().startswith(fenced[:3]):
        return fenced
    body = [
        line[min(indent, len(line) - len(line.lstrip(" "))) :] for line in lines[1:]
    ]
    return "\n".join([lines[0], *body])


def _cite(sentences: list[Sentence]) -> list[Citation]:
    """One citation per run of adjacent cited sentences, numbered in order of
    first use: a cited range holds only quoted text (the section page marks one
    range), so sentences with others between them are cited apart. Without a
    link yet, and with the chunk indexes of the first sentence's location."""
    citations: list[Citation] = []
    for s in sentences:
        cite = next((c for c in citations if _adjoins(c, s)), None)
        if cite is None:
            cite = _citation(len(citations) + 1, s)
            citations.append(cite)
        cite.start, cite.end = min(cite.start, s.start), max(cite.end, s.end)
        s.citation = cite.n
    return citations


def _adjoins(cite: Citation, s: Sentence) -> bool:
    """Whether `s` overlaps the cited range or only text that is no sentence
    (spaces, a list marker, a table's delimiter line) lies between them."""
    where = (s.passage.source_id, s.location.section_id)
    if (cite.source_id, cite.section_id) != where:
        return False
    lo, hi = (cite.end, s.start) if cite.end <= s.start else (s.end, cite.start)
    return _nothing_between(s.passage, lo, hi)


def _nothing_between(passage: Passage, lo: int, hi: int) -> bool:
    """Whether [lo, hi) of the passage's source holds no sentence (spaces, a
    list marker, a table's delimiter line), or is empty; False when that text
    was not loaded."""
    if hi <= lo:
        return True
    for base, text in [*passage.source_text.parts, (passage.start, passage.text)]:
        if base <= lo and hi <= base + len(text):
            return not _units_between(text, lo - base, hi - base)
    return False


def _units_between(text: str, lo: int, hi: int) -> bool:
    """Whether a sentence (unit) of `text` lies whole in [lo, hi).

    Units are read from whole lines: from the line where the sentence before
    ends (the line after it when that sentence is a code block) to the end of
    the line where the next begins.
    """
    first = text.rfind("\n", 0, lo) + 1
    if text[first:lo].lstrip().startswith(("```", "~~~")):  # a code block's end
        first = text.find("\n", lo) + 1 or len(text)
    last = text.find("\n", hi)
    last = len(text) if last < 0 else last
    return any(lo <= a and b <= hi for a, b in units(text, first, last))


def _citation(n: int, s: Sentence) -> Citation:
    return Citation(
        n=n,
        source_id=s.passage.source_id,
        source=s.passage.source_title,
        file=s.passage.file_name,
        section_id=s.location.section_id,
        heading_path=s.location.heading_path,
        chunk_indexes=list(s.location.chunk_indexes),
        start=s.start,
        end=s.end,
    )
