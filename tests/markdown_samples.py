"""Markdown the parsing and chunking tests share: a list nested 50 deep, and a
Hypothesis strategy of documents with headings, paragraphs, nested lists,
ragged tables, code fences (some unterminated) and odd line endings."""

from __future__ import annotations

from hypothesis import strategies as st

NESTED_50 = "".join("  " * depth + f"- level {depth}\n" for depth in range(50))
# Odd "words": markup characters, an over-long token run, a lead-in colon.
SPECIAL_WORDS = [
    "`code`",
    "**bold**",
    "*",
    "|",
    "e.g.",
    "Finance:",
    "-".join(["ab"] * 90),
]
WORDS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzé0123456789", min_size=1, max_size=9
)
WORD = WORDS | st.sampled_from(SPECIAL_WORDS)


@st.composite
def _sentence(draw: st.DrawFn) -> str:
    return " ".join(draw(st.lists(WORD, min_size=1, max_size=25))) + draw(
        st.sampled_from([".", "!", "?", ":", ""])
    )


@st.composite
def _paragraph(draw: st.DrawFn) -> str:
    sentences = draw(st.lists(_sentence(), min_size=1, max_size=30))
    return draw(st.sampled_from([" ", "\n"])).join(sentences)


@st.composite
def _heading(draw: st.DrawFn) -> str:
    level = draw(st.integers(1, 6))
    return "#" * level + " " + " ".join(draw(st.lists(WORDS, min_size=1, max_size=5)))


@st.composite
def _list(draw: st.DrawFn) -> str:
    lines, depth = [], 0
    for _ in range(draw(st.integers(1, 12))):
        depth = draw(st.integers(0, depth + 1))
        lines.append("  " * depth + "- " + draw(_sentence()))
    return "\n".join(lines)


@st.composite
def _table(draw: st.DrawFn) -> str:
    columns = draw(st.integers(1, 4))
    header = draw(st.lists(WORDS, min_size=columns, max_size=columns))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * columns]
    for _ in range(draw(st.integers(0, 6))):
        # Ragged on purpose: rows with fewer or more cells than the header.
        cells = draw(st.lists(_sentence(), min_size=0, max_size=columns + 1))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@st.composite
def _code(draw: st.DrawFn) -> str:
    language = draw(st.sampled_from(["", "python", "bash"]))
    body = draw(st.lists(st.sampled_from(["x = 1", "    return f(x, y)", "", "# c"])))
    closed = draw(st.booleans())
    return "\n".join([f"```{language}", *body] + (["```"] if closed else []))


@st.composite
def markdown_documents(draw: st.DrawFn) -> str:
    """Markdown with headings, paragraphs, nested lists, ragged tables, code
    fences (some unterminated) and, sometimes, CRLF or CR line endings."""
    blocks = st.one_of(_heading(), _paragraph(), _list(), _table(), _code())
    parts = draw(st.lists(blocks, min_size=1, max_size=10))
    text = "".join(
        part + draw(st.sampled_from(["\n\n", "\n", "\n\n\n"])) for part in parts
    )
    if draw(st.booleans()):
        lines = text.split("\n")
        endings = draw(
            st.lists(
                st.sampled_from(["\n", "\r\n", "\r"]),
                min_size=len(lines) - 1,
                max_size=len(lines) - 1,
            )
        )
        text = lines[0] + "".join(e + line for e, line in zip(endings, lines[1:]))
    return text if text.strip() else "x"
