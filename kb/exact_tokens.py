"""Exact tokens: codes, options, identifiers, versions and paths, as written.

The keyword leg stems every word in its section's language, which splits or
drops what a reader must match character for character: `-S` is dropped,
`unique_violation` becomes `uniqu` + `violat`, `23505` is one number among
others (issue #29). These functions find such tokens in a chunk's text and in
a question, for the exact leg of kb.retrieval.keywords.

A token is a run of word characters, `.`, `-`, `/`, `:` and `~`, trimmed of
the punctuation that ends a sentence around it, that holds one of:
- a digit: `23505`, `0x80070005`, `E0425`, `1.2.3`, `utf-8`; a bare number
  needs four digits or more: shorter ones are steps, counts and HTTP statuses
  that docs repeat on every page ("500" is in 9 of the Starlette docs' 1,248
  paragraphs, and took a CORS question to the error-handling pages);
- an underscore: `max_connections`, `SAFE_METHODS`;
- a capital letter after a small one: `isBlank`, `PostgreSQL`;
- leading dashes before a letter: `-S`, `--no-deps`; a tilde before letters:
  `~g`, `~ahold` (aptitude's search terms);
- a dot between two characters of a word, one part longer than a letter
  (`kb.conf`, `os.path`; not "e.g."), `::` (`std::vector`) or a path's slash
  (`/etc/kb.conf`, `~/.config`, `a/b/c`, `docs/index.md`; not "and/or").
Its parts split at `/`, `::` and `.` are tokens too when they qualify by
themselves: "isBlank" finds `StringUtils.isBlank(CharSequence)`.

Case. A token is stored as written and, when it has capitals, also folded
(FOLDED + its lower case). A question's token matches the same token as written;
one written all in small letters also matches the folded forms, weighing less:
people type `safe_methods` for `SAFE_METHODS`, but a capital in a question is
on purpose (`-S` is not `-s`), and so is an option's small letter (`-b` is not
`-B`). A question's `isblank` is a word like any other
(nothing tells it from prose): the keyword leg, which lowercases every word,
matches it to `isBlank`, and the question runs as it did before this leg.

Linear: one scan by a single character class, then work proportional to each
token (no pattern here can backtrack); tokens longer than MAX_CHARS are left
out (a URL with its query string, a line of base64).
"""

from __future__ import annotations

import re

MAX_CHARS = 100  # longer tokens are no one's code or option
FOLDED = "^"  # prefix of a folded form (never a character of a token)
FOLDED_WEIGHT = 0.5  # a small-letter question token found with other capitals

_RUN_RE = re.compile(r"[\w./:~-]+")
_WORD_RE = re.compile(r"\w+")
_TRAILING = ".:/-~"
_LEADING = ".:"
_PARTS_RE = re.compile(r"/|::")
_ALL_PARTS_RE = re.compile(r"[/.]|::")
_DIGIT_RE = re.compile(r"\d")
_CAMEL_RE = re.compile(r"[a-z][A-Z]")
_OPTION_RE = re.compile(r"--?[^\W\d_]")
_SHORT_OPTION_RE = re.compile(r"-[^\W\d_]")  # "-S", not "-1"
# A search term of aptitude's ("~g", "~i", "~ahold"): the word index keeps
# its letters without the tilde, or drops the one letter.
_TILDE_TERM_RE = re.compile(r"~[^\W\d_]+")
_DOTTED_RE = re.compile(r"\w\.\w")
_LETTERS_RE = re.compile(r"[^\W\d_]")


def tokens(text: str) -> list[str]:
    """The text's exact tokens as written, each once, in order of appearance."""
    found: dict[str, None] = {}
    for match in _RUN_RE.finditer(text):
        run = _trimmed(match.group())
        if not run or len(run) > MAX_CHARS:
            continue
        for token in _with_parts(run):
            found.setdefault(token, None)
    return list(found)


def lexemes(text: str) -> list[str]:
    """What a chunk stores (Chunk.exact_tokens): its tokens as written, and the
    folded form of those with capitals."""
    found = tokens(text)
    folded = [FOLDED + t.lower() for t in found if t != t.lower()]
    return found + list(dict.fromkeys(folded))


def question_lexemes(question: str) -> dict[str, float]:
    """{lexeme: weight} to look for: each token of the question as written
    (1.0), and for one in small letters, the folded forms too (FOLDED_WEIGHT)."""
    found: dict[str, float] = {}
    for token in tokens(question):
        found[token] = 1.0
        if _foldable(token):
            found.setdefault(FOLDED + token, FOLDED_WEIGHT)
    return found


def _foldable(token: str) -> bool:
    """Whether a question's token also matches other capitals: one in small
    letters, but no option (`-b` is not `-B`, `-z` not `-Z`)."""
    return token == token.lower() and not token.startswith("-")


def named_in(
    heading_path: str, tokens: frozenset[str], words: frozenset[str]
) -> tuple[int, int]:
    """How many of a question's exact `tokens` a heading path holds, then how
    many of its other `words` (casefolded): the entry of "-X" is headed "-X"
    (others only mention it), the one asked of in "psql -X" under "psql". A
    token in small letters is also found folded, as in question_lexemes."""
    held = lexemes(heading_path)
    folded = {FOLDED + token for token in tokens if _foldable(token)}
    found = len(tokens.intersection(held)) + len(folded.intersection(held))
    return found, len(words.intersection(_WORD_RE.findall(heading_path.casefold())))


def _trimmed(run: str) -> str:
    """The run without the punctuation around it: "(see /etc/kb.conf)." gives
    "/etc/kb.conf"; leading dashes stay (options) unless nothing but them."""
    run = run.rstrip(_TRAILING).lstrip(_LEADING)
    return run if run.strip("-") else ""


def _with_parts(run: str) -> list[str]:
    """The run and its parts that are tokens, the whole first."""
    pieces = [run]
    if _ALL_PARTS_RE.search(run):
        pieces += _PARTS_RE.split(run) + _ALL_PARTS_RE.split(run)
    kept = []
    for piece in pieces:
        piece = _trimmed(piece)
        if piece and piece not in kept and is_exact(piece):
            kept.append(piece)
    return kept


def is_split_by_words(token: str) -> bool:
    """A token of one part that the word index keeps only in pieces or not at
    all: a snake_case name ("set_modified" is "set" and "modified" there), a
    one-letter option ("-S" is "s") or a search term ("~g" is "g"). Other
    tokens of one part are words there ("TestPyPI", "23505"), or prose
    ("top-10"); compounds' parts ("File::set_modified", "pathlib.Path") may
    be written apart."""
    if _ALL_PARTS_RE.search(token):
        return False
    return (
        "_" in token.strip("_")
        or bool(_SHORT_OPTION_RE.fullmatch(token))
        or bool(_TILDE_TERM_RE.fullmatch(token))
    )


def is_config_key(token: str) -> bool:
    """A configuration key of `::` parts whose last part holds a hyphen, as
    APT and aptitude name their options ("Aptitude::CmdLine::Assume-Yes"):
    no language's identifier (a hyphen cannot be in one), so it is written
    whole wherever a document names it."""
    return "::" in token and "-" in token.rsplit("::", 1)[-1].strip("-")


def is_exact(token: str) -> bool:
    """Whether a trimmed run is written to be matched as it is (see above)."""
    if _DIGIT_RE.search(token):
        return not token.isdigit() or len(token) > 3
    if "_" in token.strip("_") or _OPTION_RE.match(token):
        return True
    if _TILDE_TERM_RE.fullmatch(token):
        return True
    if _CAMEL_RE.search(token) or "::" in token:
        return True
    return _is_dotted(token) or _is_path(token)


def _is_dotted(token: str) -> bool:
    return bool(_DOTTED_RE.search(token)) and any(
        len(part) > 1 for part in token.split(".")
    )


def _is_path(token: str) -> bool:
    """`/etc/kb.conf`, `~/x`, `a/b/c`, `docs/index.md`, `https://...`; one slash
    between two words is prose ("and/or", "read/write")."""
    if "/" not in token or not _LETTERS_RE.search(token):
        return False
    return token[0] in "/~" or token.count("/") > 1 or "." in token
