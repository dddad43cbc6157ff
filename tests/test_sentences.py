"""Answer sentences are whole sentences (issue #17, item 6).

Hard-wrapped Markdown once cut a sentence at every line end ("If set to `None`,
pagination [1]"). These tests run the splitter over every paragraph and every
chunk window of the three corpora and the demo, and the answerer end to end over
the demo's golden questions.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.test import SimpleTestCase
from markdown_it import MarkdownIt

from kb import (
    answerer,
    answering,
    chunking,
    decoding,
    ingestion,
    parsing,
    retrieval,
    sentences,
    uploads,
)
from kb.models import GoldenCase
from tests import base

CORPORA = ("handbook", "rq-docs", "poetry-docs")
_CORPORA_DIR = base.SHARED / "corpora"
_INLINE = MarkdownIt("commonmark", {"html": False})
# A sentence may end with its full stop, then closing quotes, brackets, emphasis.
_ENDS_A_SENTENCE = re.compile(r"[.!?:;][\"')\]*_`]*$")
# Lines that start a block of their own: what comes before them may end without
# a full stop (a heading, a list item, a fence, a table row, a quote, a shortcode).
_BLOCK_START = re.compile(
    r"\s*(?:$|#{1,6}(?:\s|$)|```|~~~|\||>|\{\{[<%]|<!--|[-*+](?:\s|$)|\d{1,9}[.)](?:\s|$)"
    r"|[A-Za-z][.)](?:\s|$)|[-=*_: ]+$)"
)


_CODE_AFTER = re.compile(r"\n[ \t]*\n(?: {4}|\t|[ \t]*(?:```|~~~))")


def files(corpus: str) -> list[Path]:
    return sorted(p for p in (_CORPORA_DIR / corpus).rglob("*.md"))


def demo_files() -> list[Path]:
    return sorted(p for p in base.DEMO_DIR.iterdir() if p.suffix in (".md", ".txt"))


def problems(text: str, start: int, end: int) -> list[str]:
    """What is wrong with text[start:end] as an answer sentence, if anything."""
    sentence = text[start:end]
    if sentence.lstrip().startswith(("```", "~~~", "|")) or sentence[:1] in " \t":
        return []  # a code block (fenced or indented) or a table row: a unit
    joined = _CODE_AFTER.search(sentence)
    if joined:  # "Default:" and the code block after it, one unit
        if not sentence[: joined.start()].rstrip().endswith(":"):
            return ["code joined to a sentence that does not introduce it"]
        return []
    found = []
    line_end = text.find("\n", end)
    rest_of_line = text[end : len(text) if line_end < 0 else line_end]
    next_line = (
        ""
        if line_end < 0
        else text[line_end + 1 : text.find("\n", line_end + 1) % (len(text) + 1)]
    )
    if not _ENDS_A_SENTENCE.search(sentence.rstrip()):
        if rest_of_line.strip():
            found.append("ends inside a line")
        elif line_end >= 0 and not _BLOCK_START.match(next_line):
            found.append("ends at a soft line break: the paragraph goes on")
    html = re.sub(r"<code>.*?</code>", "", _INLINE.renderInline(sentence), flags=re.S)
    if "`" in html:
        found.append("ends inside inline code")
    prose = re.sub(r"(`+).*?\1", "", sentence, flags=re.S)  # without code spans
    if prose.count("[") != prose.count("]") or re.search(r"\]\([^)]*$", prose):
        found.append("ends inside a link")
    return found


class SplitterOnTheCorporaTestCase(SimpleTestCase):
    """Every paragraph of every corpus file, as the answerer would split it."""

    def _check_sections(self, path: Path) -> int:
        text = decoding.decode_upload(path.read_bytes(), path.name)
        checked = 0
        for section in parsing.parse(text, path.name).sections:
            for start, end in sentences.units(text, section.body_start, section.end):
                self.assertEqual(
                    problems(text, start, end), [], f"{path.name}: {text[start:end]!r}"
                )
                checked += 1
        return checked

    def _check_chunk_windows(self, path: Path) -> int:
        """Each chunk as a retrieved window cutting into its section's text."""
        text = decoding.decode_upload(path.read_bytes(), path.name)
        doc = parsing.parse(text, path.name)
        chunks = chunking.chunk_document(
            doc, text, count_tokens=lambda t: len(t.split()) + 2, max_tokens=120
        ).chunks
        checked = 0
        for chunk in chunks:
            section = doc.sections[chunk.section_index]
            section_text = text[section.start : section.end]
            location = retrieval.Location(
                1, section.heading_path, chunk.start, chunk.end, [0]
            )
            loaded = retrieval.TextWindow([(section.start, section_text)])
            passage = retrieval.Passage(
                1,
                path.name,
                path.name,
                chunk.start,
                chunk.end,
                chunk.text,
                1.0,
                {"vector"},
                [location],
                source_text=loaded,
            )
            for s in answerer.split_sentences(passage):
                self.assertEqual(text[s.start : s.end], s.text)
                self.assertTrue(section.start <= s.start < s.end <= section.end)
                self.assertEqual(
                    problems(text, s.start, s.end), [], f"{path.name}: {s.text!r}"
                )
                checked += 1
        return checked

    @base.needs_shared(_CORPORA_DIR)
    def test_no_sentence_of_the_three_corpora_is_cut(self):
        for corpus in CORPORA:
            with self.subTest(corpus=corpus):
                checked = sum(self._check_sections(p) for p in files(corpus))
                self.assertGreater(checked, 300)

    @base.needs_shared(_CORPORA_DIR)
    def test_chunk_windows_of_the_three_corpora_widen_to_whole_sentences(self):
        for corpus in CORPORA:
            with self.subTest(corpus=corpus):
                checked = sum(self._check_chunk_windows(p) for p in files(corpus))
                self.assertGreater(checked, 300)

    def test_no_sentence_of_the_demo_is_cut(self):
        for path in demo_files():
            self._check_sections(path)
            self._check_chunk_windows(path)


class SplitterTestCase(SimpleTestCase):
    def _split(self, text: str, start: int = 0, end: int | None = None) -> list[str]:
        end = len(text) if end is None else end
        location = retrieval.Location(1, "Guide", start, end, [0])
        passage = retrieval.Passage(
            1,
            "Guide",
            "guide.md",
            start,
            end,
            text[start:end],
            1.0,
            {"vector"},
            [location],
            source_text=retrieval.TextWindow([(0, text)]),
        )
        return [s.text for s in answerer.split_sentences(passage)]

    def test_a_sentence_keeps_the_quotes_and_brackets_closing_it(self):
        """QA over TinyXML's Doxygen pages: "(eXtensible Stylesheet
        Language.)" was quoted without its ")", which no sentence held."""
        self.assertEqual(
            self._split(
                "It reads no XSLs (eXtensible Stylesheet Language.) Other "
                'parsers do. He said "stop." **Then he left.** Done.'
            ),
            [
                "It reads no XSLs (eXtensible Stylesheet Language.)",
                "Other parsers do.",
                'He said "stop."',
                "**Then he left.**",
                "Done.",
            ],
        )

    def test_an_admonition_s_opening_line_is_no_part_of_a_sentence(self):
        """QA over typescript-eslint's (Docusaurus) and pydantic's (MkDocs)
        docs: answers quoted ":::tip VS Code's ESLint extension provides..."
        and "/// version-added | v2.13 The default changed."."""
        text = (
            ":::tip\nThe extension provides a restart action.\n:::\n\n"
            "::: warning Mind this\nIt is slow.\n:::\n\n"
            "/// version-added | v2.13\nThe default changed.\n///\n\n"
            "::: {.callout-note}\nQuarto notes too.\n:::\n\n"
            "/// is a doc comment in Rust.\n"
        )
        self.assertEqual(
            self._split(text),
            [
                "The extension provides a restart action.",
                "It is slow.",
                "The default changed.",
                "Quarto notes too.",
                "/// is a doc comment in Rust.",  # prose opening with the marks
            ],
        )

    def test_an_mdx_page_s_imports_and_exports_are_no_sentences(self):
        """QA over typescript-eslint's docs (MDX): an answer quoted "export
        function LocalTimeOfRelease() { const isBrowser = ..." as a sentence."""
        text = (
            "import Tabs from '@theme/Tabs';\nimport TabItem from '@theme/TabItem';"
            "\n\nexport function LocalTimeOfRelease() {\n  const b = useIsBrowser();"
            "\n  return b;\n}\n\nWe release every Monday at 17:00 UTC.\n\n"
            "You can import the data from the menu. Then export it.\n"
        )
        self.assertEqual(
            self._split(text),
            [
                "We release every Monday at 17:00 UTC.",
                "You can import the data from the menu.",
                "Then export it.",
            ],
        )

    def test_a_window_cutting_a_fence_line_reads_its_code(self):
        """QA over typescript-eslint's docs: a passage starting right after a
        fence's backticks (or ending in the spaces before an indented one)
        raised IndexError, and /api/ask answered 500."""
        text = "Intro.\n\n```   \ncode()\n```\n\nAfter.\n"
        start = text.index("```") + 3
        # the code whole, as any code block is quoted
        self.assertEqual(self._split(text, start), ["```   \ncode()\n```", "After."])
        text = "Intro.\n\n  ```ts\n  code()\n  ```\n"
        self.assertEqual(self._split(text, 0, text.index("```") - 1), ["Intro."])

    def test_a_sentence_goes_on_across_a_soft_line_break(self):
        text = (
            "If set to `None`, pagination\nis turned off. Don't forget to run your"
            "\nworkers using `rq worker`.\n"
        )
        self.assertEqual(
            self._split(text),
            [
                "If set to `None`, pagination\nis turned off.",
                "Don't forget to run your\nworkers using `rq worker`.",
            ],
        )

    def test_no_sentence_ends_inside_code_a_link_or_an_abbreviation(self):
        text = (
            "Call `job.retry(). Then` again, e.g. Later. See [the\nguide. Here]"
            "(https://example.com/a. b) or https://example.com/x. Done.\n"
        )
        self.assertEqual(
            self._split(text),
            [
                "Call `job.retry(). Then` again, e.g. Later.",
                "See [the\nguide. Here](https://example.com/a. b) or "
                "https://example.com/x.",
                "Done.",
            ],
        )

    def test_an_abbreviation_right_after_a_sentence_ends_nothing(self):
        self.assertEqual(
            self._split("Run it. I.e. The flag works.\n"),
            ["Run it.", "I.e. The flag works."],
        )

    def test_a_quoted_sentence_reads_as_one_line(self):
        text = "> Workers run\n> forever. Stop them.\n"
        self.assertEqual(self._split(text), ["> Workers run\n> forever.", "Stop them."])
        self.assertEqual(answerer.one_line(text[:25]), "Workers run forever.")

    def test_blocks_bound_sentences(self):
        text = (
            "Intro line\n- item one\n  goes on\n- item two\n# Heading\nText\n"
            "```\ncode. Still\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n"
        )
        self.assertEqual(
            self._split(text),
            [
                "Intro line",
                "- item one\n  goes on",
                "- item two",
                "Text",
                "```\ncode. Still\n```",
                "| a | b |",
                "| 1 | 2 |",
            ],
        )

    def test_a_long_table_row_is_answered_by_its_sentences(self):
        cell = "Works on the team. " + "Reviews code with care and patience. " * 12
        text = f"| *Trust* | {cell.strip()} |\n"
        parts = self._split(text)
        self.assertEqual(parts[0], "| *Trust* | Works on the team.")
        self.assertEqual(len(parts), 13)

    def test_an_html_table_s_rows_are_its_units(self):
        """QA over MDN's Spanish pages: an HTML table in Markdown was cut at
        its full stops into 4,600 characters of tag soup."""
        rows = [
            "<tr>\n    <td>type</td>\n    <td>Indica el tipo. Uno de: submit.</td>"
            "\n  </tr>",
            "<tr>\n    <td>name</td>\n    <td>El nombre.</td>\n  </tr>",
        ]
        text = (
            "Los atributos:\n<table>\n  <tbody>\n  "
            + "\n  ".join(rows)
            + "\n  </tbody>\n</table>\n\nOtra frase. Y otra.\n"
        )
        self.assertEqual(
            self._split(text), ["Los atributos:", *rows, "Otra frase.", "Y otra."]
        )
        # a passage starting inside the table still reads whole rows (the
        # one it cuts widened to its start)
        start = text.index("<tr>\n    <td>name") - 5
        self.assertEqual(self._split(text, start), [*rows, "Otra frase.", "Y otra."])
        start = text.index("<tr>\n    <td>name")
        self.assertEqual(self._split(text, start), [rows[1], "Otra frase.", "Y otra."])

    def test_a_range_below_a_very_long_line_keeps_its_text(self):
        # review: with no line break in what is read up, the page's first
        # line was taken for the range's (an HTML table: every sentence lost)
        text = (
            "<table>\n<tr><td>a</td></tr>\n</table>\n\n![logo](data:image/png;base64,"
            + "A" * 60000
            + ")\nThe tool is fast. It is small.\n"
        )
        start = text.index("The tool")
        self.assertEqual(
            self._split(text, start), ["The tool is fast.", "It is small."]
        )

    def test_a_range_starting_in_a_list_item_s_paragraph_reads_text(self):
        """QA over MDN's French pages: a passage starting at a list item's
        indented paragraph quoted it as a code block."""
        text = (
            "- `preload`\n\n    Il peut prendre ces valeurs :\n\n"
            "    - `none` : rien.\n\n    La valeur par défaut varie. Voir la "
            "spécification.\n\nAfter.\n\n    real_code()\n"
        )
        start = text.index("    La valeur")
        self.assertEqual(
            self._split(text, start, text.index("After.")),
            ["La valeur par défaut varie.", "Voir la spécification."],
        )
        # an indented block after a paragraph is still code
        start = text.index("    real_code")
        self.assertEqual(self._split(text, start), ["    real_code()"])

    def test_a_definition_list_item_is_one_unit_with_its_term(self):
        """QA over a Hugo API guide: "In effect, sets a cursor at this ID." was
        quoted without saying it is `min_id`'s, and "limit : Integer." was a
        sentence of its own."""
        text = (
            "Use these parameters:\n\nlimit\n: Integer. At most 40 results."
            "\nmin_id\n: String. In effect, sets a cursor at this ID.\n"
            ": Since v2.6.\n\nA sentence. And another one.\n"
        )
        parts = self._split(text)
        self.assertEqual(
            parts,
            [
                "Use these parameters:",
                "limit\n: Integer. At most 40 results.",
                "min_id\n: String. In effect, sets a cursor at this ID.\n: Since v2.6.",
                "A sentence.",
                "And another one.",
            ],
        )
        self.assertTrue(sentences.is_list_item(parts[1]))
        self.assertFalse(sentences.is_list_item(parts[3]))

    def test_a_window_cut_mid_sentence_cites_the_whole_sentence(self):
        text = (
            "# Retry\n\nJobs that fail can\nautomatically retry up to\nthree times. "
            "Next.\n"
        )
        start = text.index("automatically")
        end = text.index("up to") + 2
        self.assertEqual(
            self._split(text, start, end),
            ["Jobs that fail can\nautomatically retry up to\nthree times."],
        )


class SentenceSplitTestCase(SimpleTestCase):
    def _split(self, text: str) -> list[str]:
        location = retrieval.Location(1, "Steps", 0, len(text), [0])
        passage = retrieval.Passage(
            1, "Runbook", "runbook.md", 0, len(text), text, 1.0, {"vector"}, [location]
        )
        return [s.text for s in answerer.split_sentences(passage)]

    def test_sentences_end_before_a_capital_of_any_alphabet(self):
        """QA over MDN in Russian, French and Spanish: a Russian paragraph was
        never split (only A-Z opened a sentence), and French and Spanish
        abbreviations ended sentences ("(ex." then "Chrome 70), ...")."""
        for text, expected in [
            (
                "Загрузка работает без JavaScript. Это анти-трэкинг мера.",
                ["Загрузка работает без JavaScript.", "Это анти-трэкинг мера."],
            ),
            ("Voir l'élément. À noter : rien.", ["Voir l'élément.", "À noter : rien."]),
            (
                "Es un valor. ¿Qué pasa después? ¡Nada!",
                ["Es un valor.", "¿Qué pasa después?", "¡Nada!"],
            ),
            ("Текст «первый». «Второй» текст.", ["Текст «первый».", "«Второй» текст."]),
            (
                "Certains navigateurs (ex. Chrome 70) le bloquent. "
                "Puis p. ex. Firefox.",
                [
                    "Certains navigateurs (ex. Chrome 70) le bloquent.",
                    "Puis p. ex. Firefox.",
                ],
            ),
            (
                "Это т. е. Пример верный. См. Выше.",
                ["Это т. е. Пример верный.", "См. Выше."],
            ),
            ("Un valor, p. ej. Uno. Otro.", ["Un valor, p. ej. Uno.", "Otro."]),
        ]:
            with self.subTest(text):
                self.assertEqual(self._split(text), expected)

    def test_an_mdn_definition_is_one_unit_with_its_term(self):
        text = (
            "- `open`\n\n  - : Shows the details. Absent by default.\n\n"
            "- `name`\n\n  - : Groups several elements.\n"
        )
        parts = self._split(text)
        self.assertEqual(
            parts,
            [
                "- `open`\n\n  - : Shows the details. Absent by default.",
                "- `name`\n\n  - : Groups several elements.",
            ],
        )
        self.assertEqual(
            answerer.one_line(parts[0]),
            "- `open`: Shows the details. Absent by default.",
        )

    def test_what_the_review_of_the_splitter_found(self):
        for text, expected in [
            # a one-letter variable ends a sentence; an initial does not
            (
                "Set n to the size of x. The loop runs.",
                ["Set n to the size of x.", "The loop runs."],
            ),
            ("Ask J. Smith. He knows.", ["Ask J. Smith.", "He knows."]),
            (
                "Put the token in your env. Then restart.",
                ["Put the token in your env.", "Then restart."],
            ),
            # ">" inside a line is no quote's mark
            (
                "Keep the value at 5. > 3 is rejected.",
                ["Keep the value at 5. > 3 is rejected."],
            ),
            # a line of prose opening and ending with macros is prose
            (
                'It goes\n{{cssxref("color")}} or {{cssxref("fill")}}\nand on. Done.',
                [
                    'It goes\n{{cssxref("color")}} or {{cssxref("fill")}}\nand on.',
                    "Done.",
                ],
            ),
            # text right after an HTML table, in its block, is text
            (
                "<table>\n<tr><td>One.</td></tr>\n</table>\n"
                "Right after. More.\n\nNext.",
                ["<tr><td>One.</td></tr>", "Right after.", "More.", "Next."],
            ),
            ("<track> elements give captions.", ["<track> elements give captions."]),
        ]:
            with self.subTest(text):
                self.assertEqual(self._split(text), expected)

    def test_a_quote_s_sentences_end_at_its_line_breaks_too(self):
        self.assertEqual(
            self._split("> Une ligne verticalement.\n> La pseudo-classe marche.\n"),
            ["> Une ligne verticalement.", "La pseudo-classe marche."],
        )

    def test_list_markers_stay_with_their_item(self):
        text = (
            "1. Announce the deploy. Then wait.\n"
            "2) Run the plan.\n"
            "a. Start the canary.\n"
            "- Watch the dashboard.\n"
            "* Promote it.\n"
            "  10. Post the build number.\n"
        )
        self.assertEqual(
            self._split(text),
            [
                "1. Announce the deploy. Then wait.",  # a short item: whole
                "2) Run the plan.",
                "a. Start the canary.",
                "- Watch the dashboard.",
                "* Promote it.",
                "10. Post the build number.",
            ],
        )

    def test_a_unit_without_words_is_no_sentence(self):
        text = "1.\n- \n...\nRoll back. 2. Then tell the channel.\n"
        self.assertEqual(self._split(text), ["Roll back.", "2. Then tell the channel."])


class DemoAnswerSentencesTestCase(base.DemoTestCase):
    def test_answer_sentences_and_citations_are_whole_sentences(self):
        texts = dict(self.demo.sources.values_list("pk", "text"))
        cases = GoldenCase.objects.filter(collection=self.demo)
        self.assertGreater(cases.count(), 10)
        for case in cases:
            _, reply = answering.ask(self.demo, case.question)
            by_n = {c.n: c for c in reply.citations}
            for s in reply.sentences:
                text = texts[s.passage.source_id]
                self.assertEqual(problems(text, s.start, s.end), [], s.text)
                cite = by_n[s.citation]
                self.assertLessEqual(cite.start, s.start)
                self.assertGreaterEqual(cite.end, s.end)
                self.assertEqual(
                    problems(text, cite.start, cite.end), [], case.question
                )
                before = text[: cite.start].rstrip(" \t")
                self.assertTrue(
                    not before
                    or before.endswith("\n")
                    or _ENDS_A_SENTENCE.search(before),
                    f"{case.external_id}: the citation starts inside a sentence",
                )
            if not any(answerer.has_code(s.text) for s in reply.sentences):
                # A line breaks only between the lines of a quoted table (rows
                # under their header line, then their markers) or of a quoted
                # list (its items, issue #28), never inside a sentence.
                for paragraph in re.split(r"\n\s*\n", reply.text):
                    lines = paragraph.strip().split("\n")
                    if all(sentences.is_list_item(line) for line in lines):
                        continue
                    *rows, last = lines
                    for line in rows:
                        self.assertTrue(line.startswith("|"), case.external_id)
                    if rows:
                        self.assertRegex(last, r"^(\[\d+\] ?)+$", case.external_id)

    def test_a_hard_wrapped_guide_is_answered_in_whole_sentences(self):
        guide = (
            b"# Pagination\n\nThe default pagination style is set globally with the\n"
            b"`DEFAULT_PAGINATION_CLASS` key of the settings. If set to `None`,\n"
            b"pagination is turned off for every list view unless a view sets\n"
            b"its own `pagination_class`.\n"
        )
        source, _ = uploads.store_source(self.demo, "api-guide.md", guide)
        ingestion.ingest(source.pk)
        _, reply = answering.ask(
            self.demo, "How do I set the default pagination style for list views?"
        )
        self.assertIn(
            "If set to `None`, pagination is turned off for every list view unless "
            "a view sets its own `pagination_class`.",
            reply.text,
        )
        text = self.demo.sources.get(pk=source.pk).text
        for s in reply.sentences:
            if s.passage.source_id == source.pk:
                self.assertEqual(problems(text, s.start, s.end), [], s.text)
