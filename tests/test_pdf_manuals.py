"""PDF manuals as TeX, Texinfo and dblatex typeset them: what a QA pass over
Debian's gcrypt.pdf, gnuplot.pdf and dblatex's manual found read wrong
(kb/readers/pdf_assembly.py, pdf_lines.py)."""

from __future__ import annotations

from django.test import SimpleTestCase

from kb import readers
from tests.documents import Page, build_pdf


def _read(*pages: Page) -> str:
    return readers.read("manual.pdf", build_pdf(list(pages))).text


def _lines(page: Page, rows: list[tuple[float, str, str, float]]) -> Page:
    """(x, text, font, step to the next line) rows at body size, from page.y."""
    y = page.y
    for x, text, font, step in rows:
        page.text(x, y, text, 11, font)
        y -= step
    page.y = y
    return page


class TexFontsTestCase(SimpleTestCase):
    def test_a_heading_in_texs_bold_extended_font_is_a_heading(self):
        # gnuplot's subsections ("Boxplot") are CMBX10 at body size: read as
        # text, a 430-line section swallowed them all
        page = Page().heading("Plotting styles", 15)
        _lines(
            page,
            [
                (72, "Boxplot", "F8", 18),
                (72, "Boxplots are a common way to represent a statistical", "F1", 14),
                (72, "distribution of values.", "F1", 24),
                (72, "Candlesticks", "F8", 18),
                (72, "The candlesticks style draws a box and two whiskers.", "F1", 14),
            ],
        )
        text = _read(page)
        self.assertIn("\n#### Boxplot\n\nBoxplots are a common way", text)
        self.assertIn("\n#### Candlesticks\n\nThe candlesticks style", text)
