"""kb.parsing and kb.decoding: offsets, the section tree and bad input (no
database)."""

from __future__ import annotations

import base64
import codecs
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import markdown_it
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kb import markup_text, parsing
from kb.decoding import decode_upload
from kb.parsing import (
    ParseError,
    markdown_title,
    parse,
    parse_markdown,
)
from tests.markdown_samples import NESTED_50, markdown_documents

# Short blocks, repeated: each repetition opens a section.
DENSE_HEADINGS = ["# h\n", "## Install\n\n", "###### deep\n", "Title\n=====\n"]
DENSE_BLOCKS = [
    "- item\n",
    "1. step\n",
    "- a\n  - b\n    - c\n",
    "> quoted\n\n",
    "| a | b |\n|---|---|\n| x | y |\n\n",
    "```\ncode\n```\n",
    "```\n",  # unclosed: code to the end
    "    indented\n\n",
    "---\n\n",
    "[ref]: /url\n\n",
    "<div>\n</div>\n\n",
    "Check:\n\n",
    "Run it.\n\n",
]


@st.composite
def dense_documents(draw: st.DrawFn) -> str:
    """Heading-dense Markdown: a heading and up to three short blocks, hundreds
    of times over."""
    unit = draw(st.sampled_from(DENSE_HEADINGS))
    unit += "".join(draw(st.lists(st.sampled_from(DENSE_BLOCKS), max_size=3)))
    return unit * draw(st.integers(300, 600))


def _lines_run(call: Callable[[], object]) -> Counter[str]:
    """Python lines `call` executes in kb.parsing (with kb.markup_text, which
    reads its headings) and in markdown-it: a measure of work that is exact and
    repeatable, unlike a timing."""
    counts: Counter[str] = Counter()

    def counting(key: str):
        def local(frame, event, arg):
            if event == "line":
                counts[key] += 1
            return local

        return local

    ours, library = counting("kb.parsing"), counting("markdown_it")
    library_dir = str(Path(markdown_it.__file__).parent)

    def on_call(frame, event, arg):
        filename = frame.f_code.co_filename
        if filename in (parsing.__file__, markup_text.__file__):
            return ours
        return library if filename.startswith(library_dir) else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        call()
    finally:
        sys.settrace(previous)
    return counts


def test_it_refuses_empty_and_whitespace_uploads():
    for data in (b"", b"  \n\r\n\t"):
        with pytest.raises(ParseError, match="notes.md is empty"):
            decode_upload(data, "notes.md")


def test_it_refuses_binary_uploads():
    with pytest.raises(ParseError, match="binary"):
        decode_upload(b"PK\x03\x04\x00\x00abc", "archive.md")
    with pytest.raises(ParseError, match="binary"):
        decode_upload(b"text" + b"\x01\x02\x03\x04\x05" * 20, "odd.txt")


def test_it_refuses_embedded_files_and_endless_words_with_the_line():
    blob = base64.b64encode(bytes(range(256)) * 8).decode()
    image = f"# Logo\n\n![logo](data:image/png;base64,{blob})\n"
    with pytest.raises(ParseError, match="logo.md line 3 embeds a file as a data: URI"):
        decode_upload(image.encode(), "logo.md")
    wrapped = "# Key\n\nIntro.\n\n" + base64.encodebytes(bytes(range(256)) * 8).decode()
    with pytest.raises(ParseError, match="key.md line 5 starts 10\\+ lines of base64"):
        decode_upload(wrapped.encode(), "key.md")
    with pytest.raises(ParseError, match="line 2 has a word of 5,000 letters"):
        decode_upload(b"Intro\n" + b"a" * 5000, "run.txt")
    # Hashes, long URLs and the like are words the tokenizer splits or can skip.
    fine = "sha512 " + "ab" * 64 + "\nhttps://example.com/" + "a/" * 300 + "\n"
    fine += "任务队列中的每个作业都由工作进程执行" * 100 + "\n"  # no spaces in Chinese
    fine += "```\n" + "".join(f"{i:040x}\n" for i in range(12)) + "```\n"  # SHAs
    fine += "".join(
        f"src/main/java/com/example/{'Part' * (i + 1)}{i}\n" for i in range(12)
    )
    assert decode_upload(fine.encode(), "fine.txt") == fine


def test_it_refuses_a_text_mostly_of_words_the_model_cannot_read():
    # 150-letter nonsense words: each is one [UNK], so every chunk of them gets
    # the same vector and any such question matched them all.
    words = [("lorem" * 40)[i : i + 150] for i in range(20)]
    nonsense = "# Notes\n\n" + " ".join(words) + "\n"
    with pytest.raises(ParseError, match="notes.md is mostly words of over 100"):
        decode_upload(nonsense.encode(), "notes.md")
    # A few such words among readable text are kept, as are long hex digests.
    mixed = "# Notes\n\n" + "The release notes say what changed. " * 40
    mixed += " ".join(words[:3]) + "\n\n" + "\n".join(["ab" * 64] * 30) + "\n"
    assert decode_upload(mixed.encode(), "notes.md") == mixed
    # A note quoting one long sequence in a code block is still mostly prose.
    amplicon = "".join("ACGT"[(i * 7 + i // 3) % 4] for i in range(900))
    lab = "# PCR\n\nThe amplicon below was checked on a gel today.\n\n"
    lab += f"```\n{amplicon}\n```\n"
    assert decode_upload(lab.encode(), "lab.md") == lab


def test_it_refuses_non_utf8_with_the_offset():
    with pytest.raises(ParseError, match=r"not valid UTF-8 \(byte 0xe9 at offset 3\)"):
        decode_upload("Caf\xe9 menu".encode("latin-1"), "menu.txt")


def test_it_strips_the_bom_and_normalises_line_endings():
    data = codecs.BOM_UTF8 + b"# T\r\n\r\nOne\rTwo\nThree\r\n"
    assert decode_upload(data, "t.md") == "# T\n\nOne\nTwo\nThree\n"


def test_it_decodes_utf16_with_a_bom():
    data = codecs.BOM_UTF16_LE + "Héllo\r\n".encode("utf-16-le")
    assert decode_upload(data, "t.txt") == "Héllo\n"


def test_it_decodes_utf32_with_a_bom_and_names_the_encoding_it_could_not_read():
    assert decode_upload("# Héllo\n".encode("utf-32"), "t.md") == "# Héllo\n"
    lone_surrogate = "# T\n".encode("utf-16") + b"\x00\xd8a\x00"
    with pytest.raises(ParseError, match=r"t.md is not valid UTF-16 \(byte") as error:
        decode_upload(lone_surrogate, "t.md")
    assert "UTF-8 (" not in str(error.value)
    with pytest.raises(ParseError, match="t.md looks like UTF-16 without a byte order"):
        decode_upload("# Title\n\nSome text.\n".encode("utf-16-le"), "t.md")


def test_it_refuses_a_nul_or_control_characters_anywhere_in_the_text():
    head = "# T\n\n" + "word " * 20_000  # well past the first 64 K characters
    with_nul = codecs.BOM_UTF8 + (head + "\x00 tail\n").encode()
    with pytest.raises(ParseError, match="big.md line 3 has a NUL character"):
        decode_upload(with_nul, "big.md")
    utf16 = (head + "\nx\x00\n").encode("utf-16")
    with pytest.raises(ParseError, match="big.md line 4 has a NUL character"):
        decode_upload(utf16, "big.md")
    control = (head + "\x01" * 2_000).encode()
    with pytest.raises(ParseError, match=r"big.md looks like a binary file \(2000 "):
        decode_upload(control, "big.md")


def test_it_refuses_unknown_extensions_and_empty_text():
    with pytest.raises(ParseError, match="unsupported file type .exe"):
        parse("hello", "report.exe")
    with pytest.raises(ParseError, match="empty.md is empty"):
        parse(" \n ", "empty.md")


def test_it_builds_the_heading_tree():
    text = "# Deploy\n\nIntro.\n\n## Rollback\n\nDo it.\n\n### Exceptions\n\nNot if.\n"
    doc = parse(text, "deploy.md")
    paths = [section.heading_path for section in doc.sections]
    assert doc.title == "Deploy"
    assert paths == ["Deploy", "Deploy > Rollback", "Deploy > Rollback > Exceptions"]
    assert [s.parent for s in doc.sections] == [None, 0, 1]
    assert [s.level for s in doc.sections] == [1, 2, 3]
    assert (
        text[doc.sections[2].start : doc.sections[2].end] == "### Exceptions\n\nNot if."
    )


def test_it_puts_text_before_the_first_heading_under_the_title():
    doc = parse_markdown("Preamble here.\n\n## Details\n\nMore.", "Guide")
    first, second = doc.sections
    assert (first.heading, first.level, first.parent) == ("Guide", 0, None)
    assert second.heading_path == "Guide > Details"


def test_a_heading_that_is_a_link_is_named_by_its_text():
    # The target would be shown in every heading path and embedded with every
    # chunk of the section (third-party lists link their headings).
    text = (
        "# Middleware\n\n## Third party\n\n"
        "#### [WSGIMiddleware](https://github.com/abersheeran/a2wsgi)\n\n"
        "Converts a WSGI application into an ASGI one.\n\n"
        "#### [Proxy][proxy] headers\n\nTrusts forwarded headers.\n\n"
        "[proxy]: https://example.com/proxy\n"
    )
    paths = [s.heading_path for s in parse(text, "middleware.md").sections]
    assert "Middleware > Third party > WSGIMiddleware" in paths
    assert "Middleware > Third party > Proxy headers" in paths


def test_a_heading_path_leaves_out_the_id_a_heading_ends_with():
    # React's docs (MDX) and Docusaurus, Pandoc, kramdown: the anchor's name
    # was in every heading path, embedded with every chunk
    text = (
        "# Strict Mode\n\n## Reference {/*reference*/}\n\n"
        "### `<StrictMode>` {/*strictmode*/}\n\nIt finds bugs.\n\n"
        "## Install {#install .unnumbered}\n\nRun it.\n\n## Sets {a, b}\n\nMath.\n"
        '## <a name="custom"></a>Customizing\n\nHow.\n'
    )
    paths = [s.heading_path for s in parsing.parse(text, "strict.md").sections]
    assert "Strict Mode > Reference > `<StrictMode>`" in paths
    assert "Strict Mode > Install" in paths
    assert "Strict Mode > Sets {a, b}" in paths  # braces of the text stay
    assert "Strict Mode > Customizing" in paths  # pydantic's anchors (MkDocs)
    from kb.markup_text import heading_text

    # code, a template's comment and an escaped brace are the heading's text
    assert heading_text("Empty `<span></span>` elements") == (
        "Empty `<span></span>` elements"
    )
    assert heading_text("Comments {# note #}") == "Comments {# note #}"
    assert heading_text("Code `x {#y}`") == "Code `x {#y}`"
    assert heading_text(r"Literal \{#x}") == "Literal {#x}"


def test_a_heading_s_inline_tags_are_left_out_of_its_path():
    """QA over React's Spanish docs: a citation read "3. ¡camelCase <s>todo</s>
    la mayoría de las cosas!"; an escaped tag is text the readers wrote."""
    from kb.markup_text import heading_text

    assert heading_text("3. camelCase <s>all</s> most things! {/*camel*/}") == (
        "3. camelCase all most things!"
    )
    assert heading_text(r"The \<video> element") == "The <video> element"


def test_heading_escapes_are_undone_outside_code_spans_only():
    from kb.markup_text import heading_text

    assert heading_text(r"C++ \*ptr\* `a\*b` ``x`y\_z`` \`q\` \_end") == (
        r"C++ *ptr* `a\*b` ``x`y\_z`` `q` _end"
    )
    # Escaped brackets and code are no links: the text stays as the page shows it.
    assert heading_text(r"See \[docs](here) now") == "See [docs](here) now"
    assert heading_text(r"Arrays a\[0](1) and `b[i](j)`") == (
        "Arrays a[0](1) and `b[i](j)`"
    )
    assert heading_text("[WSGIMiddleware](https://example.com/w)") == "WSGIMiddleware"
    # A link around code is still a link; code may end in a backslash.
    assert heading_text("[`requests.get`](api.md#get)") == "`requests.get`"
    assert heading_text("`C:\\` drive") == "`C:\\` drive"


def test_hugo_shortcodes_read_as_the_text_they_show():
    """QA over Mastodon's Hugo docs: `{{%deprecated%}}` sat in heading paths,
    and `[Status]({{< relref "entities/Status" >}})` in answers as written."""
    from kb import chunking
    from kb.embedding import get_embedder
    from kb.markup_text import without_shortcodes

    text = (
        "# Timelines\n\n## View direct timeline {{%deprecated%}}\n\n"
        'Returns a [Status]({{< relref "entities/Status" >}}) list of '
        'direct messages of a {{< glossary_tooltip text="Pod" term_id="pod" >}}.\n'
        '\n## {{% heading "whatsnext" %}}\n\nWrite `{{< relref "x" >}}` in '
        "a page.\n"
    )
    doc = parsing.parse(text, "timelines.md")
    paths = [s.heading_path for s in doc.sections]
    assert "Timelines > View direct timeline" in paths
    assert "Timelines > whatsnext" in paths
    chunks = chunking.chunk_document(
        doc, text, count_tokens=get_embedder().count_tokens
    ).chunks
    embedded = " ".join(c.embed_text for c in chunks)
    assert "Returns a Status list of direct messages of a Pod." in embedded
    assert '`{{< relref "x" >}}`' in embedded  # code is what it says
    assert "{{%" not in embedded
    assert without_shortcodes("No shortcode {here}") == "No shortcode {here}"
    # a template's variables are no MDN macros (review: they were deleted)
    for said in ("Print {{ name }} here", "Calling {{ super() }} in a block"):
        assert without_shortcodes(said) == said


def test_a_readme_s_html_h1_titles_the_document():
    text = (
        '<h1 align="center"><img src="logo.svg" alt="">Lumen</h1>\n\n'
        '<p align="center"><a href="https://ci.example/">build</a></p>\n\n'
        "## Install\n\nRun the installer.\n"
    )
    assert markdown_title(text) == "Lumen"
    # Not from a comment; an <h1> never closed, many times over, is no title.
    assert markdown_title("<!-- <h1>Old</h1> -->\n\n# Real\n\nText.\n") == "Real"
    assert markdown_title("<h1>" * 5000 + "\n\n# T\n\nText.\n") == "T"
    paths = [s.heading_path for s in parse(text, "README.md").sections]
    assert "Lumen > Install" in paths


def test_it_takes_the_title_from_front_matter_and_skips_it():
    text = '---\ntitle: "RQ: Jobs"\nlayout: docs\n---\n\nSome text.\n'
    doc = parse(text, "jobs.md")
    assert doc.title == "RQ: Jobs"
    assert [text[b.start : b.end] for b in doc.sections[0].blocks] == ["Some text."]


def test_a_front_matter_title_is_read_as_yaml_writes_it():
    # MDN's French pages: "<progress> : l''élément d''indicateur" in titles
    for written, title in [
        (
            "'<progress> : l''élément d''indicateur'",
            "<progress> : l'élément d'indicateur",
        ),
        ('"Say \\"hi\\""', 'Say "hi"'),
        ("Plain: it's here", "Plain: it's here"),
    ]:
        doc = parse(f"---\ntitle: {written}\n---\n\nText.\n", "page.md")
        assert doc.title == title


def test_it_splits_plain_text_on_blank_lines():
    text = "First para\nstill first.\n\n\nSecond para.\n"
    doc = parse(text, "office-faq.txt")
    assert doc.title == "Office faq"
    blocks = doc.sections[0].blocks
    assert [text[b.start : b.end] for b in blocks] == [
        "First para\nstill first.",
        "Second para.",
    ]


def test_it_records_table_rows_with_exact_ranges():
    text = (
        "# T\n\n| Plan | Window |\n|---|---|\n| Free | none |\n| Team | 14 days | x |\n"
    )
    table = parse(text, "t.md").sections[0].blocks[0]
    assert table.kind == "table"
    assert [c.text for c in table.header.cells] == ["Plan", "Window"]
    assert [text[r.start : r.end] for r in table.rows] == [
        "| Free | none |",
        "| Team | 14 days | x |",
    ]
    assert [c.text for c in table.rows[1].cells] == ["Team", "14 days", "x"]


def test_it_keeps_the_fence_language_and_survives_an_unterminated_fence():
    text = "# T\n\nRun:\n\n```python\nprint(1)\n# not a heading\n"
    doc = parse(text, "t.md")
    code = doc.sections[0].blocks[1]
    assert (code.kind, code.language) == ("code", "python")
    assert text[code.inner.start : code.inner.end] == "print(1)\n# not a heading"
    assert len(doc.sections) == 1


def test_it_keeps_deeply_nested_lists_from_swallowing_later_headings():
    text = f"# A\n\n{NESTED_50}\n# B\n\nAfter.\n"
    doc = parse(text, "t.md")
    assert [s.heading for s in doc.sections] == ["A", "B"]
    assert doc.sections[0].blocks[0].kind == "list"


def test_it_keeps_headings_after_lists_nested_deeper_than_markdown_it_allows():
    for depth in (64, 70, 300):
        nested = "".join("  " * d + f"- level {d}\n" for d in range(depth))
        text = f"# A\n\n{nested}\n# B\n\nAfter.\n\n## C\n\nMore.\n"
        doc = parse(text, "t.md")
        assert [s.heading for s in doc.sections] == ["A", "B", "C"], depth
        # Levels past the limit stay in the list as text: no evidence is lost.
        block = doc.sections[0].blocks[0]
        assert (block.kind, block.start, block.end) == ("list", 5, 5 + len(nested) - 1)


def test_it_parses_a_single_huge_line():
    text = "word " * 10_000
    doc = parse(text, "t.txt")
    assert doc.sections[0].end == len(text.rstrip())


@settings(max_examples=60, deadline=None)
@given(markdown_documents())
def test_it_gives_every_section_and_block_an_exact_trimmed_span(text):
    doc = parse_markdown(text, "Generated")
    previous_end = 0
    for section in doc.sections:
        assert previous_end <= section.start <= section.body_start <= section.end
        previous_end = section.end
        for block in section.blocks:
            evidence = text[block.start : block.end]
            assert evidence and evidence == evidence.strip()
            assert section.body_start <= block.start < block.end <= section.end


@settings(max_examples=60, deadline=None)
@given(st.text())
def test_it_raises_nothing_but_parse_error_on_arbitrary_text(text):
    for name in ("any.md", "any.txt"):
        try:
            parse(text, name)
        except ParseError:
            pass


@settings(max_examples=60, deadline=None)
@given(st.binary())
def test_it_decodes_or_refuses_arbitrary_bytes(data):
    try:
        text = decode_upload(data, "upload.md")
    except ParseError:
        return
    assert "\r" not in text and text.strip()


@settings(max_examples=10, deadline=None)
@given(dense_documents())
def test_parse_work_is_linear_in_the_document_whatever_its_shape(text):
    """Sections are found in one pass: no block is revisited per heading.

    Work is counted in lines of Python run, per markdown-it token and line of
    the document (about 12-19 in kb.parsing, 40-110 in markdown-it); before the
    one-pass section builder, 400 headings took 118 per token in kb.parsing.
    """
    size = len(parsing.parse_tokens(text)) + text.count("\n") + 1
    work = _lines_run(lambda: parse(text, "dense.md"))
    assert work["kb.parsing"] <= 40 * size
    assert work["markdown_it"] <= 300 * size
