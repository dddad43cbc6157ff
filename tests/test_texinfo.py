"""One-page manuals as Texinfo's `makeinfo --html` writes them (GNU manuals,
Debian's bash-doc): their navigation, contents and indexes are not text, their
terms are (kb/readers/html.py)."""

from __future__ import annotations

from django.test import SimpleTestCase

from kb import parsing, readers

NODE_BAR = (
    '<div class="header"><p>Next: <a href="#{next}" accesskey="n" rel="next">'
    '{next_title}</a>, Up: <a href="#Top" accesskey="u" rel="up">Top</a> &nbsp; '
    '[<a href="#SEC_Contents" title="Table of contents" rel="contents">Contents</a>]'
    '[<a href="#Indexes" title="Index" rel="index">Index</a>]</p></div>'
)
PAGE = f"""<!DOCTYPE html><html><head><title>Tide Reference Manual</title></head>
<body>
<h1 class="settitle">Tide Reference Manual</h1>
<div class="Contents_element" id="SEC_Contents">
<h2 class="contents-heading">Table of Contents</h2>
<div class="contents"><ul class="no-bullet">
  <li><a id="toc-Commands-1" href="#Commands">1 Commands</a>
  <ul class="no-bullet">
    <li><a id="toc-Completion-1" href="#Completion">1.1 Completion</a></li>
    <li><a id="toc-Tides-1" href="#Tides">1.2 Tides</a></li>
  </ul></li>
  <li><a id="toc-Variables-1" href="#Variables">2 Variables</a></li>
</ul></div></div>
<hr>
<div class="chapter" id="Commands">
{NODE_BAR.format(next="Variables", next_title="Variables")}
<h2 class="chapter">1 Commands</h2>
<p>The shell reads a line ending in &lsquo;<samp>\\</samp>&rsquo; as continued,
and &lsquo;<samp>&amp;&amp;</samp>&rsquo; runs the next command on success.</p>
<dl compact="compact">
<dt id='index-menu_002dcomplete'><span><code>menu-complete ()</code><a
 href='#index-menu_002dcomplete' class='copiable-anchor'> &para;</a></span></dt>
<dd><p>Replaces the word with the first match of the list of completions.</p></dd>
<dt id='index-tide_002dturn'><span><code>tide-turn ()</code><a
 href='#index-tide_002dturn' class='copiable-anchor'> &para;</a></span></dt>
<dd><p>Reverses the flow of the current tide table.</p></dd>
</dl>
<p>The flags it accepts:</p>
<ul>
<li><a href="#index-tide_002dturn">TIDE_EBB</a></li>
<li><a href="#index-tide_002dturn">TIDE_FLOW</a></li>
<li><a href="#index-tide_002dturn">TIDE_SLACK</a></li>
</ul>
<p>See <a href="#Variables" rel="next">Variables</a> for the settings that change
how each of these commands behaves at night.</p>
</div>
<div class="chapter" id="Variables">
{NODE_BAR.format(next="Indexes", next_title="Indexes")}
<h2 class="chapter">2 Variables</h2>
<p>TIDE_HOME names the folder of the tide tables.</p>
</div>
<div class="appendix" id="Indexes">
<h2 class="appendix">Appendix A Index</h2>
<table><tr><th valign="top">Jump to: &nbsp; </th><td><a class="summary-letter"
 href="#Index_cp_letter-M"><b>M</b></a> &nbsp; <a class="summary-letter"
 href="#Index_cp_letter-T"><b>T</b></a></td></tr></table>
<table class="index-cp" border="0">
<tr><td></td><th align="left">Index Entry</th><td>&nbsp;</td>
<th align="left">Section</th></tr>
<tr><th id="Index_cp_letter-M">M</th><td></td><td></td></tr>
<tr><td></td><td valign="top"><a href="#index-menu_002dcomplete">
<code>menu-complete</code></a>:</td>
<td>&nbsp;</td><td valign="top"><a href="#Commands">Commands</a></td></tr>
</table>
</div>
</body></html>
"""


class TexinfoPageTestCase(SimpleTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.text = readers.read("tide.html", PAGE.encode()).text

    def test_each_term_stays_though_its_anchor_names_a_menu(self):
        # The id "index-menu_002dcomplete" holds the word "menu", which marks
        # navigation on a container, not on a term.
        self.assertIn("`menu-complete ()`", self.text)
        self.assertIn("Replaces the word with the first match", self.text)

    def test_headings_lose_the_pilcrow_of_their_anchor(self):
        self.assertNotIn("¶", self.text)

    def test_the_node_bars_are_not_text(self):
        self.assertNotIn("Next:", self.text)
        self.assertNotIn("[Contents]", self.text)
        # A sentence that links on by rel is the text's own.
        self.assertIn("for the settings that change how each", self.text)

    def test_the_contents_and_the_index_are_not_text(self):
        self.assertNotIn("1.1 Completion", self.text)
        self.assertNotIn("Jump to", self.text)
        self.assertNotIn("Index Entry", self.text)
        self.assertNotIn("Column 1", self.text)
        self.assertIn("## 2 Variables", self.text)
        # A flat list of links to what the page defines stays.
        self.assertIn("TIDE_SLACK", self.text)

    def test_sample_text_is_code_and_keeps_its_characters(self):
        self.assertIn("ending in ‘`\\`’ as continued", self.text)
        self.assertIn("‘`&&`’ runs the next command", self.text)


DEEP = """<html><body><h1>Tide Manual</h1><h2>4 Builtins</h2><h3>4.3 Behaviour</h3>
<h4>4.3.1 The Set Builtin</h4>
<dl><dt><code>set</code></dt><dd><p>Sets or unsets shell options.</p>
<dl><dt><code>-o <var>option-name</var></code></dt>
<dd><p>Sets the option named:</p>
<dl><dt><code>ebbfail</code></dt>
<dd><p>A pipeline returns the status of its last command to fail.</p></dd>
<dt><code>slackwater</code></dt>
<dd><p>Waits for the tide to turn before each command.</p></dd></dl></dd>
<dt><code>-x</code></dt><dd><p>Prints each command before it runs.</p></dd>
</dl></dd></dl></body></html>"""


class DeepTermsTestCase(SimpleTestCase):
    def test_a_term_below_the_sixth_level_keeps_its_parents_name(self):
        """Markdown has six heading levels: `ebbfail`, a term of `-o`'s own
        list, would have read as a sibling of `-o` and `-x`."""
        text = readers.read("deep.html", DEEP.encode()).text
        headings = [line for line in text.splitlines() if line.startswith("#")]
        self.assertIn("###### `-o option-name` `ebbfail`", headings)
        self.assertIn("###### `-o option-name` `slackwater`", headings)
        self.assertIn("###### `-x`", headings)


class SymbolTermTestCase(SimpleTestCase):
    def test_a_term_of_hashes_keeps_its_name(self):
        """Bash's special parameter `#` was written "#### #": a heading whose
        closing sequence left it empty ("Untitled section")."""
        body = "<h1>Special Parameters</h1><dl><dt>#</dt><dd>Expands to the count."
        text = _read(body + "</dd><dt>x #</dt><dd>Another.</dd></dl>")
        document = parsing.parse(text, "bash.md")
        headings = [section.heading for section in document.sections]
        self.assertEqual(headings, ["Special Parameters", "#", "x #"])


def _read(body: str) -> str:
    return readers.read("page.html", f"<html><body>{body}</body></html>".encode()).text


class WhatStaysTextTestCase(SimpleTestCase):
    """The rules above leave the text of other pages alone."""

    def test_a_flat_list_of_in_page_links_in_a_content_block_stays(self):
        text = _read(
            '<div id="contents"><h1>Limits</h1><p>Three limits apply:</p><ul>'
            '<li><a href="#max-a">MAX_ROWS</a></li><li><a href="#max-b">MAX_COLS'
            '</a></li><li><a href="#max-c">MAX_CELLS</a></li></ul></div>'
        )
        self.assertIn("MAX_CELLS", text)

    def test_a_data_table_named_index_something_stays(self):
        text = _read(
            '<h1>Rates</h1><table class="index-top"><tr><th>Port</th><th>Rate</th>'
            "</tr><tr><td>Brest</td><td>4 %</td></tr></table>"
        )
        self.assertIn("Brest", text)

    def test_a_navigation_cell_named_by_its_id_goes(self):
        # A table laid out page without landmarks: its menu cell is navigation.
        text = _read(
            '<table><tr><td id="left-nav"><a href="/">Home</a> <a href="/p">'
            'Products</a> <a href="/a">About us</a></td><td><h1>Tides</h1><p>'
            "High water at Brest comes twice a day.</p></td></tr></table>"
        )
        self.assertIn("High water at Brest", text)
        self.assertNotIn("Products", text)

    def test_a_bar_laid_out_on_several_lines_goes(self):
        text = _read(
            '<h1>Tides</h1><div class="header">\n  <p>\n    Next:\n    <a href="#b"'
            ' rel="next">Currents of the outer harbour</a>,\n    Previous:\n    '
            '<a href="#a" rel="prev">Moorings</a>,\n    Up:\n    <a href="#top" '
            'rel="up">Top</a>\n    &nbsp;\n    [<a href="#toc" rel="contents">'
            "Contents</a>]\n  </p>\n</div><p>High water comes twice a day.</p>"
        )
        self.assertNotIn("Next", text)
        self.assertIn("High water comes twice a day.", text)

    def test_a_paragraph_of_other_links_stays(self):
        text = _read(
            '<h1>Tides</h1><p><a href="/tables" rel="nofollow">Tables</a> '
            '<a href="/charts" rel="noopener">Charts</a></p>'
        )
        self.assertIn("Tables", text)
