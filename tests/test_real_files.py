"""The readers on real files that no script of ours made (tests/fixtures/real)."""

from __future__ import annotations

import re
from pathlib import Path

from django.test import SimpleTestCase

from kb import readers

REAL = Path(__file__).parent / "fixtures" / "real"


def _read(name: str) -> readers.Reading:
    return readers.read(name, (REAL / name).read_bytes())


class RealPdfTestCase(SimpleTestCase):
    """The GNU Libtasn1 manual, as TeX typesets it (Debian's libtasn1-doc)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.reading = _read("libtasn1.pdf")
        cls.lines = cls.reading.text.splitlines()

    def test_it_finds_the_chapters_and_sections_with_their_levels(self):
        for heading in [
            "## 1 Introduction",
            "## 2 ASN.1 structure handling",
            "### 2.1 ASN.1 syntax",
            "### 3.1 Invoking asn1Parser",
            "## 4 Function reference",
        ]:
            self.assertIn(heading, self.lines)

    def test_every_page_has_text_and_running_lines_are_gone(self):
        summary = self.reading.summary
        self.assertEqual(summary["pages"], 36)
        self.assertEqual(summary["pages_without_text"], [])
        self.assertTrue(all(n > 0 for n in summary["chars_per_page"]))
        self.assertGreater(summary["running_lines_removed"], 20)
        # No page number left on a line of its own, no running chapter title.
        self.assertFalse([ln for ln in self.lines if re.fullmatch(r"\s*\d+\s*", ln)])
        self.assertEqual(self.lines.count("Chapter 2: ASN.1 structure handling"), 0)

    def test_it_joins_the_lines_of_a_paragraph(self):
        self.assertIn(
            "The parser is case sensitive. The comments begin with -- and end "
            "either with another --, or at the end of the respective line, "
            "whichever comes first.",
            self.lines[self.lines.index("### 2.1 ASN.1 syntax") + 2],
        )

    def test_it_keeps_words_typeset_with_ligatures_whole(self):
        # TeX draws "fi" as one glyph: "file" must not read "f" + "ile".
        text = self.reading.text
        self.assertIn("C code file generation", text)
        self.assertNotIn("\nile", text)

    def test_it_keeps_list_items(self):
        self.assertIn(
            "- Distinguished Encoding Rules (DER) encoding support.", self.lines
        )

    def test_sections_know_their_pages(self):
        text = self.reading.text
        start = text.index("\n## 2 ASN.1 structure handling\n") + 1
        self.assertEqual(self.reading.pages_of(start, start + 10), (5, 5))
        start = text.index("\n## 3 Utilities\n") + 1
        end = text.index("\n## 4 Function reference\n")
        self.assertEqual(self.reading.pages_of(start, end), (8, 10))

    def test_a_functions_signature_is_one_block_of_code_without_its_category(self):
        # Texinfo sets "[Function]" at the right margin of a definition's first
        # line and wraps the signature under it: it read as two headings.
        self.assertIn(
            "```\nint asn1_der_coding (asn1 node const element, const char * "
            "name, void * ider, int * len, char * ErrorDescription)\n```",
            self.reading.text,
        )
        self.assertNotIn("[Function]", self.reading.text)

    def test_a_functions_fields_are_paragraphs_of_their_own(self):
        self.assertIn(
            "\n\nelement: pointer to an ASN1 element\n\n"
            "name: the name of the structure you want to encode",
            self.reading.text,
        )

    def test_lines_of_code_opening_with_tall_glyphs_are_code_not_headings(self):
        # "$" and braces stand taller than letters: their lines read bigger
        headings = [ln for ln in self.lines if ln.startswith("#")]
        self.assertFalse([h for h in headings if "$" in h or h.endswith("}")])
        self.assertIn("```\n$ asn1Coding pkix.asn assign.asn1\n```", self.reading.text)

    def test_a_code_block_at_a_pages_end_keeps_its_page(self):
        start = self.reading.text.index("$ asn1Decoding pkix.asn")
        self.assertEqual(self.reading.pages_of(start, start + 10), (10, 10))


class RealDocxTestCase(SimpleTestCase):
    """Word files from python-docx's own test suite."""

    def test_styled_tables_keep_their_header_rows(self):
        reading = _read("tbl-having-applied-style.docx")
        self.assertEqual(reading.text.count("| foobar | barfoo |\n| --- | --- |"), 3)
        self.assertIn("| foo to you | and a hearty foo to you too sir! |", reading.text)
        self.assertEqual(reading.summary["tables_with_header"], 3)

    def test_merged_cells_keep_the_table_rectangular(self):
        reading = _read("tbl-cell-access.docx")
        rows = [ln for ln in reading.text.splitlines() if ln.startswith("|")]
        self.assertEqual(len(rows), 16)  # four tables of a header, a rule, 2 rows
        self.assertTrue(all(row.count("|") == 4 for row in rows))

    def test_hyperlinks_keep_their_text_in_separate_paragraphs(self):
        reading = _read("par-hlink-frags.docx")
        paragraphs = reading.text.strip().split("\n\n")
        self.assertEqual(len(paragraphs), 9)
        self.assertEqual(paragraphs[2], "Three with link to https://foo.com.")
        self.assertNotIn("](", reading.text)  # URLs stay out of the text
        self.assertEqual(reading.summary["links"], 6)
