"""A reader's account of the Markdown it wrote (Reading.structure) stands for
parsing that Markdown (#29's speed): the document must be the same, block for
block, or the writer must leave the text to the parser."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.test import SimpleTestCase
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kb import parsing, readers
from kb.readers.writer import Writer

REAL = Path(__file__).parent / "fixtures" / "real"
CORPORA = Path(settings.BASE_DIR) / "evals" / "corpora"

# Characters that make Markdown: block starts, inline markup, escapes.
ALPHABET = "ab1.)#<>[]:`~|\\-*_=+ \t\n\u200b"


def both_ways(text: str, structure) -> tuple[object, object]:
    def parsed(given):
        try:
            return parsing.parse(text, "page.md", structure=given)
        except parsing.ParseError as exc:
            return str(exc)

    return parsed(None), parsed(structure)


def written(calls) -> Writer:
    writer = Writer()
    for method, args in calls:
        getattr(writer, method)(*args)
    return writer


class RealFilesTestCase(SimpleTestCase):
    def test_real_pages_parse_the_same_from_their_structure(self):
        files = [
            *sorted(CORPORA.rglob("*.html")),
            *sorted(REAL.glob("*.docx")),
            *sorted(REAL.glob("*.html")),
            REAL / "libtasn1.pdf",
        ]
        self.assertGreater(len(files), 30)
        for path in files:
            with self.subTest(path.name):
                reading = readers.read(path.name, path.read_bytes())
                self.assertIsNotNone(reading.structure)  # the fast way is taken
                parsed, structured = both_ways(reading.text, reading.structure)
                self.assertEqual(structured, parsed)
                self.assertEqual(
                    parsing.markdown_title(reading.text, reading.structure),
                    parsing.markdown_title(reading.text),
                )


class ReadOtherwiseTestCase(SimpleTestCase):
    """Blocks CommonMark reads otherwise than the writer meant: the document
    is still the one the parser makes."""

    CASES = {
        "an item numbered past 99 nests nothing under it": [
            ("item", (0, "first", 100)),
            ("end_list", ()),
            ("item", (1, "nested")),
            ("paragraph", ("after",)),
        ],
        "a '2.' under a '-' item starts another list": [
            ("item", (0, "bullet")),
            ("item", (0, "second", 2)),
        ],
        "a '1.' under a '-' item starts another list": [
            ("item", (0, "bullet")),
            ("item", (0, "first", 1)),
        ],
        "a negative number is no marker": [("item", (0, "minus", -1))],
        "a nested item after a paragraph is indented code": [
            ("paragraph", ("text",)),
            ("item", (1, "indented")),
        ],
        "an indented fence in code closes it early": [
            ("code", ("one\n  ```\ntwo", "sh")),
            ("paragraph", ("after",)),
        ],
        "a heading of hashes is empty": [("heading", (2, "#")), ("paragraph", ("x",))],
        "raw HTML starts an HTML block": [
            ("paragraph", ("<div>",)),
            ("paragraph", ("text",)),
        ],
        "a link reference definition is no paragraph": [
            ("paragraph", ("[a]: /b",)),
            ("paragraph", ("text",)),
        ],
        "raw HTML in a quote": [("quote", (["<div>", "text"],))],
        "raw HTML in an item": [("item", (0, "<!-- x")), ("item", (0, "b"))],
        "a definition opening in raw HTML": [("definition", ("<div>", ["x"]))],
        "a carriage return in code breaks its line": [
            ("code", ("a\r```\rb", "")),
            ("paragraph", ("after",)),
        ],
        "an item of two hyphens is no thematic break": [
            ("item", (0, "a")),
            ("item", (0, "--")),
            ("item", (0, "b")),
        ],
        "a fence's language with a pipe over a delimiter line": [
            ("code", ("---", "|")),
        ],
        "a link reference definition with an escaped bracket": [
            ("paragraph", ("[a\\]]: /u",)),
            ("paragraph", ("b",)),
        ],
        "a NUL is read as U+FFFD": [("heading", (1, "a\x00")), ("paragraph", ("x",))],
    }

    def test_each_parses_as_commonmark_reads_it(self):
        for name, calls in self.CASES.items():
            with self.subTest(name):
                writer = written(calls)
                text, _ = writer.render()
                parsed, structured = both_ways(text, writer.structure(text))
                self.assertEqual(structured, parsed)

    def test_an_ordinary_page_of_every_kind_is_not_parsed_again(self):
        writer = written(
            [
                ("heading", (1, "Guide")),
                ("paragraph", ("Run `kb` **now**: see [the docs](/d).",)),
                ("item", (0, "one")),
                ("item", (1, "nested", 1)),
                ("item", (0, "two")),
                ("definition", ("Term", ["its definition"])),
                ("table", ([["a", "b|c"], ["1", "2"]], True)),
                ("code", ("print(1)\n```inner", "python")),
                ("quote", (["quoted", "again"],)),
                ("heading", (7, "Deep")),
                ("paragraph", ("**term**: one",)),
                ("paragraph", ("**other**: two",)),
            ]
        )
        text, _ = writer.render()
        structure = writer.structure(text)
        self.assertIsNotNone(structure)
        parsed, structured = both_ways(text, structure)
        self.assertEqual(structured, parsed)


_text = st.text(ALPHABET, max_size=12)
_calls = st.one_of(
    st.tuples(st.just("paragraph"), st.tuples(_text)),
    st.tuples(st.just("heading"), st.tuples(st.integers(1, 7), _text)),
    st.tuples(
        st.just("item"),
        st.tuples(st.integers(0, 3), _text, st.one_of(st.none(), st.integers(-2, 120))),
    ),
    st.tuples(st.just("end_list"), st.just(())),
    st.tuples(st.just("definition"), st.tuples(_text, st.lists(_text, max_size=3))),
    st.tuples(
        st.just("table"),
        st.tuples(
            st.lists(st.lists(_text, min_size=1, max_size=3), max_size=3),
            st.booleans(),
        ),
    ),
    st.tuples(st.just("code"), st.tuples(_text, _text)),
    st.tuples(st.just("quote"), st.tuples(st.lists(_text, max_size=3))),
)


@hypothesis_settings(max_examples=400, deadline=None)
@given(st.lists(_calls, min_size=1, max_size=12))
def test_any_page_the_writer_writes_parses_the_same_from_its_structure(calls):
    writer = written(calls)
    text, _ = writer.render()
    structure = writer.structure(text)
    parsed, structured = both_ways(text, structure)
    assert structured == parsed
    if structure is not None and not isinstance(parsed, str):
        assert parsing.markdown_title(text, structure) == parsing.markdown_title(text)
