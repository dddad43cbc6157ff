"""API reference and definition lists in HTML (issue #29): Javadoc pages as one
section per member, DocBook and Sphinx definition lists as one section per term,
and page titles read once."""

from __future__ import annotations

from pathlib import Path

from django.test import SimpleTestCase, TestCase

from kb import ingestion, parsing, readers, uploads
from kb.chunking import chunk_document
from kb.embedding import count_tokens
from kb.models import Collection

REAL = Path(__file__).parent / "fixtures" / "real"


def _html(body: str, title: str = "Page") -> bytes:
    page = f"<!doctype html><html><head><title>{title}</title></head><body>{body}"
    return f"{page}</body></html>".encode()


def _paths(reading: readers.Reading) -> list[str]:
    return [s.heading_path for s in parsing.parse(reading.text, "p.md").sections]


def _section(reading: readers.Reading, path: str) -> str:
    """The text of the section at `path`, heading line included."""
    for section in parsing.parse(reading.text, "p.md").sections:
        if section.heading_path == path:
            return reading.text[section.start : section.end]
    raise AssertionError(f"no section {path!r} in {_paths(reading)}")


# Javadoc 17 (and 21): sections with ids, member-signature divs, dl.notes.
JAVADOC_17 = """
<header role="banner"><nav role="navigation"><ul><li>Overview</li></ul></nav></header>
<main role="main">
<div class="header">
<div class="sub-title">Package <a href="p.html">org.example</a></div>
<h1 title="Class Strings" class="title">Class Strings</h1></div>
<section class="class-description" id="class-description"><hr>
<div class="type-signature">public class Strings extends Object</div>
<div class="block"><p>Operations on strings that are null safe.</p></div>
<dl class="notes"><dt>Since:</dt><dd>1.0</dd></dl></section>
<section class="summary"><ul class="summary-list"><li>
<section class="method-summary" id="method-summary"><h2>Method Summary</h2>
<div class="summary-table"><div class="col-second"><code>
<a href="#isBlank(java.lang.CharSequence)">isBlank</a>(CharSequence cs)</code></div>
<div class="col-last"><div class="block">Checks if a sequence is blank.</div></div>
</div></section></li></ul></section>
<section class="details"><ul class="details-list"><li>
<section class="field-details" id="field-detail"><h2>Field Details</h2>
<ul class="member-list"><li><section class="detail" id="EMPTY"><h3>EMPTY</h3>
<div class="member-signature">public static final String EMPTY</div>
<div class="block">The empty String.</div></section></li></ul></section></li><li>
<section class="method-details" id="method-detail"><h2>Method Details</h2>
<ul class="member-list"><li>
<section class="detail" id="isBlank(java.lang.CharSequence)"><h3>isBlank</h3>
<div class="member-signature"><span class="modifiers">public static</span>&nbsp;
<span class="return-type">boolean</span>&nbsp;<span class="element-name">isBlank
</span><wbr><span class="parameters">(CharSequence&nbsp;cs)</span></div>
<div class="block"><p>Checks if a sequence is blank.</p>
<pre>Strings.isBlank(null) = true</pre></div>
<dl class="notes"><dt>Parameters:</dt><dd><code>cs</code> - the sequence to check</dd>
<dt>Returns:</dt><dd><code>true</code> if the sequence is null or whitespace</dd>
<dt>Throws:</dt><dd><code>IllegalStateException</code> - never</dd>
<dt>Since:</dt><dd>2.0</dd>
<dt>See Also:</dt><dd><ul class="see-list"><li><a href="#isEmpty">isEmpty</a></li>
<li><a href="#trim">trim</a></li></ul></dd></dl></section></li><li>
<section class="detail" id="join(java.lang.Object[],char)"><h3>join</h3>
<div class="member-signature">public static String join(Object[] array,
 char separator)</div>
<div class="block">Joins the elements into one String.</div>
<dl class="notes"><dt>Parameters:</dt><dd><code>array</code> - the values</dd>
<dd><code>separator</code> - the separator character</dd></dl>
</section></li></ul></section></li></ul></section></main>
"""

# Javadoc 11: anchors before blockList items headed by h4, pre signatures.
JAVADOC_11 = """
<header role="banner"><nav role="navigation">Skip navigation links</nav></header>
<main role="main"><div class="header"><div class="subTitle">Package org.example</div>
<h2 title="Class Strings" class="title">Class Strings</h2></div>
<div class="contentContainer"><div class="description"><ul class="blockList">
<li class="blockList"><hr><pre>public class <span class="typeNameLabel">Strings</span>
extends Object</pre><div class="block">Operations on strings.</div></li></ul></div>
<div class="summary"><ul class="blockList"><li class="blockList"><section role="region">
<ul class="blockList"><li class="blockList"><a id="method.summary"></a>
<h3>Method Summary</h3><table class="memberSummary"><tr><th>Method</th>
<th>Description</th></tr><tr><td><a href="#isBlank(java.lang.CharSequence)">isBlank
</a></td><td>Checks if a sequence is blank.</td></tr></table></li></ul></section></li>
</ul></div>
<div class="details"><ul class="blockList"><li class="blockList"><section role="region">
<ul class="blockList"><li class="blockList"><a id="method.detail"></a>
<h3>Method Detail</h3>
<a id="isBlank(java.lang.CharSequence)"></a>
<ul class="blockList"><li class="blockList"><h4>isBlank</h4>
<pre class="methodSignature">public static&nbsp;boolean&nbsp;<span
>isBlank</span>&#8203;(CharSequence&nbsp;cs)</pre>
<div class="block">Checks if a sequence is blank.</div>
<dl><dt><span class="paramLabel">Parameters:</span></dt>
<dd><code>cs</code> - the sequence to check</dd>
<dt><span class="returnLabel">Returns:</span></dt><dd>whether it is blank</dd></dl>
</li></ul>
<a id="trim(java.lang.String)"></a>
<ul class="blockListLast"><li class="blockList"><h4>trim</h4>
<pre class="methodSignature">public static&nbsp;String&nbsp;<span
>trim</span>&#8203;(String&nbsp;str)</pre>
<div class="block">Removes control characters from both ends.</div>
<dl><dt><span class="returnLabel">Returns:</span></dt><dd>the trimmed string</dd></dl>
</li></ul></li></ul></section></li></ul></div></div></main>
"""

# Javadoc 8: no landmarks, named anchors with dashes for the parameter list.
JAVADOC_8 = """
<div class="topNav"><a name="navbar.top"></a>
<ul class="navList"><li>Tree</li></ul></div>
<div class="header"><div class="subTitle">org.example</div>
<h2 title="Class Strings" class="title">Class Strings</h2></div>
<div class="contentContainer"><div class="details"><ul class="blockList">
<li class="blockList"><ul class="blockList"><li class="blockList">
<a name="method.detail"></a><h3>Method Detail</h3>
<a name="split-java.lang.String-char:A-"></a>
<ul class="blockListLast"><li class="blockList"><h4>split</h4>
<pre
>public static&nbsp;String[]&nbsp;split(String&nbsp;str, char[]&nbsp;separators)</pre>
<div class="block">Splits the text at any of the separators.</div>
<dl><dt><span class="returnLabel">Returns:</span></dt><dd>the parts</dd></dl>
</li></ul></li></ul></li></ul></div></div>
<div class="bottomNav"><ul class="navList"><li>Index</li></ul></div>
"""


class JavadocTestCase(SimpleTestCase):
    def test_it_reads_each_member_of_a_javadoc_17_page_as_a_section(self):
        reading = readers.read("Strings.html", _html(JAVADOC_17, "Strings (API)"))
        self.assertEqual(
            _paths(reading),
            [
                "Class Strings",
                "Class Strings > EMPTY",
                "Class Strings > isBlank(CharSequence)",
                "Class Strings > join(Object[], char)",
            ],
        )
        section = _section(reading, "Class Strings > isBlank(CharSequence)")
        self.assertIn(
            "```\npublic static boolean isBlank(CharSequence cs)\n```", section
        )
        self.assertIn("- Parameters: `cs` - the sequence to check\n", section)
        self.assertIn(
            "- Returns: `true` if the sequence is null or whitespace", section
        )
        self.assertIn("- Throws: `IllegalStateException` - never\n", section)
        self.assertIn("- Since: 2.0\n- See Also: isEmpty, trim", section)
        self.assertNotIn("Joins", section)

    def test_it_keeps_the_class_overview_and_drops_the_summary_tables(self):
        reading = readers.read("Strings.html", _html(JAVADOC_17, "Strings (API)"))
        overview = _section(reading, "Class Strings")
        self.assertIn("Package org.example", overview)
        self.assertIn("```\npublic class Strings extends Object\n```", overview)
        self.assertIn("Operations on strings that are null safe.", overview)
        self.assertNotIn("Summary", reading.text)
        self.assertEqual(reading.text.count("Checks if a sequence is blank."), 1)
        self.assertNotIn("Overview", reading.text)  # the navigation

    def test_each_member_heading_keeps_its_anchor(self):
        reading = readers.read("Strings.html", _html(JAVADOC_17))
        anchors = {anchor: offset for offset, anchor in reading.anchors}
        start = anchors["isBlank(java.lang.CharSequence)"]
        self.assertTrue(reading.text[start:].startswith("## isBlank(CharSequence)\n"))
        self.assertIn("join(java.lang.Object[],char)", anchors)

    def test_a_parameter_per_line_of_the_signature_stays_one_signature(self):
        reading = readers.read("Strings.html", _html(JAVADOC_17))
        self.assertIn(
            "public static String join(Object[] array, char separator)", reading.text
        )
        self.assertIn(
            "- Parameters: `separator` - the separator character", reading.text
        )

    def test_it_reads_the_javadoc_11_layout(self):
        reading = readers.read("Strings.html", _html(JAVADOC_11, "Strings (API)"))
        self.assertEqual(
            _paths(reading),
            [
                "Class Strings",
                "Class Strings > isBlank(CharSequence)",
                "Class Strings > trim(String)",
            ],
        )
        section = _section(reading, "Class Strings > isBlank(CharSequence)")
        self.assertIn(
            "```\npublic static boolean isBlank(CharSequence cs)\n```", section
        )
        self.assertIn("- Parameters: `cs` - the sequence to check", section)
        self.assertNotIn("trimmed", section)
        self.assertNotIn("Method Summary", reading.text)
        self.assertIn(
            (reading.text.index("## trim"), "trim(java.lang.String)"), reading.anchors
        )

    def test_it_reads_the_javadoc_8_layout_and_its_dashed_anchors(self):
        reading = readers.read("Strings.html", _html(JAVADOC_8, "Strings (API)"))
        self.assertEqual(
            _paths(reading), ["Class Strings", "Class Strings > split(String, char[])"]
        )
        self.assertIn(
            "public static String[] split(String str, char[] separators)", reading.text
        )
        self.assertNotIn("Tree", reading.text)
        self.assertEqual(reading.anchors[-1][1], "split-java.lang.String-char:A-")

    def test_a_page_with_detail_sections_but_no_signatures_is_not_javadoc(self):
        body = (
            '<main><h1>Shop</h1><section class="detail" id="p1"><h3>Kettle</h3>'
            "<p>Boils water.</p></section></main>"
        )
        reading = readers.read("shop.html", _html(body))
        self.assertEqual(reading.text, "# Shop\n\n### Kettle\n\nBoils water.\n")

    def test_a_package_page_without_members_is_read_as_any_page(self):
        body = (
            "<main><h1>Package org.example</h1><p>Utilities.</p><table><tr><th>Class"
            "</th><th>Description</th></tr><tr><td>Strings</td><td>Operations</td>"
            "</tr></table></main>"
        )
        reading = readers.read("package-summary.html", _html(body))
        self.assertIn("| Strings | Operations |", reading.text)


# DocBook's variablelist, as PostgreSQL's reference pages print it.
# rustdoc (1.63's layout): a struct page with fields (one classed as rustdoc
# 1.70 and later class them), an inherent impl, a trait impl and an auto-trait
# impl.
RUSTDOC = (Path(__file__).parent / "fixtures" / "rustdoc-frame.html").read_bytes()


class RustdocTestCase(SimpleTestCase):
    """QA over Rust's std pages: a method's header was a paragraph
    ("const: 1.58.0 · source pub const fn new(...)"), its description under
    the previous method's "Examples", with "Run", "Read more" and "[−]"."""

    def test_each_member_is_a_section_under_its_impl(self):
        reading = readers.read("struct.Frame.html", RUSTDOC)
        self.assertEqual(
            _paths(reading),
            [
                "Struct hive::Frame",
                "Struct hive::Frame > Frame::combs",
                "Struct hive::Frame > Frame::queen",
                "Struct hive::Frame > impl Frame",
                "Struct hive::Frame > impl Frame > Frame::new",
                "Struct hive::Frame > impl Frame > Frame::new > Panics",
                "Struct hive::Frame > impl Frame > Frame::new > Examples",
                "Struct hive::Frame > impl Frame > Frame::weight",
                "Struct hive::Frame > Methods from Deref<Target = Comb>",
                "Struct hive::Frame > Methods from Deref<Target = Comb> > Comb::cells",
                "Struct hive::Frame > impl Clone for Frame",
                "Struct hive::Frame > impl Clone for Frame > clone",
            ],
        )
        new = _section(reading, "Struct hive::Frame > impl Frame > Frame::new")
        self.assertIn("```\npub const fn new(combs: u32) -> Frame\n```", new)
        self.assertIn("Const since 1.58.0.", new)
        self.assertIn("Creates a frame of `combs` combs.", new)
        weight = _section(reading, "Struct hive::Frame > impl Frame > Frame::weight")
        self.assertIn("This is a nightly-only experimental API.", weight)
        self.assertIn("The frame's weight in grams.", weight)
        self.assertNotIn("nstable.", weight)  # "const: unstable" dates nothing
        combs = _section(reading, "Struct hive::Frame > Frame::combs")
        self.assertIn("combs: u32", combs)
        self.assertNotIn("queen", combs)  # the next field's docs are its own
        queen = _section(reading, "Struct hive::Frame > Frame::queen")
        self.assertIn("Whether the queen is on this frame.", queen)
        cells = _section(
            reading,
            "Struct hive::Frame > Methods from Deref<Target = Comb> > Comb::cells",
        )
        self.assertIn("```\npub fn cells(&self) -> Cells\n```", cells)  # no tooltip
        self.assertNotIn("Notable", reading.text)
        top = _section(reading, "Struct hive::Frame")
        self.assertIn("Stable since Rust version 1.2.0.", top)  # the item's own
        self.assertIn("pub struct Frame { /* private fields */ }", top)
        self.assertIn("A frame of a hive.", top)
        for furniture in ("Run", "Read more", "source", "[−]", "Expand", "Send"):
            self.assertNotIn(furniture, reading.text)

    def test_a_member_heading_keeps_its_anchor(self):
        reading = readers.read("struct.Frame.html", RUSTDOC)
        anchors = {anchor: offset for offset, anchor in reading.anchors}
        self.assertTrue(
            reading.text[anchors["method.new"] :].startswith("### Frame::new\n")
        )

    def test_a_module_page_keeps_its_item_lists(self):
        page = (
            '<!doctype html><html><head><title>std::time</title></head><body class="'
            'rustdoc mod"><section id="main-content"><h1 class="fqn">Module '
            'std::time</h1><span class="out-of-band">1.3.0 · source · [−]</span>'
            '<h2 id="structs">Structs</h2><div class="item-table">'
            '<div class="item-row"><div class="item-left">'
            '<a href="struct.Duration.html">Duration</a></div>'
            '<div class="item-right docblock-short">A span of '
            "time.</div></div></div></section></body></html>"
        )
        text = readers.read("index.html", page.encode()).text
        self.assertIn("Duration", text)
        self.assertIn("A span of time.", text)
        self.assertNotIn("[−]", text)

    def test_a_page_of_another_generator_is_not_read_as_rustdoc(self):
        reading = readers.read(
            "x.html",
            _html(
                '<section id="method.x"><h4 class="code-header">fn x()</h4>'
                "</section><p>Text.</p>"
            ),
        )
        self.assertIn("Text.", reading.text)


HIVE_MODULE = '''"""Tools to keep bees.

Usage:

hive = Hive()        # an empty hive
smoke(hive)          # calms its bees
"""

ORIGIN = "Lyon"
SEASON = "spring"

__all__ = ["Hive", "smoke", "ORIGIN", "SEASON"]


class Hive:
    """A hive of frames.

    Build one per colony.
    """

    def __init__(self, frames=10):
        self.frames = frames

    def weigh(self, unit="kg"):
        """The hive's weight in `unit`.

        Raises ValueError for an unknown unit.
        """


def smoke(hive, seconds=5):
    """Calm the bees of `hive` for `seconds`.

    Arguments:
    - hive -- the hive to calm
    - seconds -- how long to smoke,
      five by default
    """
'''


def _pydoc_page() -> bytes:
    """The page `python -m pydoc -w hive` writes for HIVE_MODULE, by the
    Python running the tests."""
    import pydoc
    import types

    module = types.ModuleType("hive")
    exec(compile(HIVE_MODULE, "hive.py", "exec"), module.__dict__)  # noqa: S102
    html = pydoc.html.page(pydoc.describe(module), pydoc.html.document(module, "hive"))
    return html.encode()


class PydocTestCase(SimpleTestCase):
    """QA over pydoc pages: members sat in layout tables, read as one section
    per module, docstring lines ran together, a banner became "Column 1 |
    Column 2"."""

    def test_each_class_and_member_is_a_section(self):
        reading = readers.read("hive.html", _pydoc_page())
        self.assertEqual(
            _paths(reading),
            [
                "module hive",
                "module hive > class Hive(builtins.object)",
                "module hive > class Hive(builtins.object) > Hive.__init__",
                "module hive > class Hive(builtins.object) > Hive.weigh",
                "module hive > Functions",
                "module hive > Functions > hive.smoke",
                "module hive > Data",
            ],
        )
        weigh = _section(
            reading, "module hive > class Hive(builtins.object) > Hive.weigh"
        )
        self.assertIn("```\nweigh(self, unit='kg')\n```", weigh)
        self.assertIn("The hive's weight in \\`unit\\`.", weigh)  # as written
        self.assertIn("Raises ValueError for an unknown unit.", weigh)
        self.assertIn("Tools to keep bees.", _section(reading, "module hive"))
        self.assertNotIn("Column 1", reading.text)
        top = _section(reading, "module hive")
        self.assertIn("```\nhive = Hive()        # an empty hive\n", top)
        data = _section(reading, "module hive > Data")
        self.assertIn("ORIGIN = 'Lyon'\n\nSEASON = 'spring'", data)
        smoke = _section(reading, "module hive > Functions > hive.smoke")
        self.assertIn(
            "Arguments:\n\n- hive -- the hive to calm\n"
            "- seconds -- how long to smoke, five by default",
            smoke,
        )
        self.assertNotIn("__dict__", reading.text)

    def test_a_member_heading_keeps_its_anchor(self):
        reading = readers.read("hive.html", _pydoc_page())
        anchors = {anchor: offset for offset, anchor in reading.anchors}
        self.assertTrue(
            reading.text[anchors["Hive-weigh"] :].startswith("### Hive.weigh\n")
        )


VARIABLELIST = """
<div class="navheader"><table><tr><th>createdb</th></tr><tr><td>Prev</td></tr></table>
</div>
<div class="refentry"><div class="refsect1" id="opts"><h2>Options</h2>
<p>createdb accepts the following arguments:</p>
<div class="variablelist"><dl class="variablelist">
<dt><span class="term"><code class="option">-D <em>tablespace</em></code><br>
<code class="option">--tablespace=<em>tablespace</em></code></span></dt>
<dd><p>Specifies the default tablespace.</p><p>Any tablespace works.</p></dd>
<dt id="opt-s"><span class="term"><code class="option">-S <em>strategy</em></code>
</span></dt>
<dd><p>Specifies the database creation strategy.</p>
<div class="note"><h3 class="title">Note</h3><p>WAL_LOG is the default.</p></div></dd>
</dl></div>
<p>The options correspond to options of CREATE DATABASE.</p>
<div class="variablelist"><dl class="variablelist">
<dt><span class="term"><code class="option">-h <em>host</em></code></span></dt>
<dd><p>Specifies the host name.</p></dd></dl></div></div>
<div class="refsect1" id="env"><h2>Environment</h2><p>PGHOST is read.</p></div></div>
"""


class DefinitionListTestCase(SimpleTestCase):
    def setUp(self):
        self.reading = readers.read("createdb.html", _html(VARIABLELIST, "createdb"))

    def test_each_term_is_a_section_under_the_heading_around_the_list(self):
        self.assertEqual(
            _paths(self.reading),
            [
                "createdb",
                "createdb > Options",
                "createdb > Options > `-D tablespace` `--tablespace=tablespace`",
                "createdb > Options > `-S strategy`",
                "createdb > Options",
                "createdb > Options > `-h host`",
                "createdb > Environment",
            ],
        )

    def test_a_term_keeps_its_whole_definition_and_nothing_after_it(self):
        section = _section(self.reading, "createdb > Options > `-S strategy`")
        self.assertIn("Specifies the database creation strategy.", section)
        self.assertIn("> Note: WAL_LOG is the default.", section)  # not a heading
        self.assertNotIn("CREATE DATABASE", section)
        self.assertIn(
            (self.reading.text.index("### `-S"), "opt-s"), self.reading.anchors
        )

    def test_text_after_the_list_belongs_to_the_heading_above_it(self):
        self.assertIn(
            "## Options\n\nThe options correspond to options of CREATE DATABASE.",
            self.reading.text,
        )
        self.assertNotIn("Prev", self.reading.text)  # DocBook's navigation header

    def test_the_chunker_keeps_a_term_with_its_definition(self):
        text = self.reading.text
        result = chunk_document(
            parsing.parse(text, "c.md"), text, count_tokens=count_tokens
        )
        chunk = next(c for c in result.chunks if "Any tablespace" in c.text)
        self.assertIn("Specifies the default tablespace.", chunk.text)
        self.assertTrue(chunk.heading_path.endswith("`--tablespace=tablespace`"))

    def test_a_terms_colon_is_not_in_its_heading(self):
        """QA over Debian's Russian FAQ: "/indices/:" headed its section."""
        body = (
            "<main><h1>Archives</h1><dl><dt><span class='term'><em>/indices/"
            "</em>:</span></dt><dd><p>The maintainer file.</p></dd>"
            "<dt>pool :</dt><dd><p>The packages.</p></dd></dl></main>"
        )
        reading = readers.read("a.html", _html(body))
        self.assertEqual(
            _paths(reading), ["Archives", "Archives > /indices/", "Archives > pool"]
        )

    def test_a_list_without_terms_is_read_as_paragraphs(self):
        body = "<main><h1>A</h1><dl><dd>Indented.</dd></dl><p>Next.</p></main>"
        reading = readers.read("p.html", _html(body))
        self.assertEqual(reading.text, "# A\n\nIndented.\n\nNext.\n")


SPHINX = """
<div role="main"><section id="mod"><h1>mod — Tools</h1>
<dl class="py class"><dt class="sig sig-object py" id="mod.Queue">
<em class="property">class </em><span class="sig-prename descclassname">mod.</span>
<span class="sig-name descname">Queue</span><span class="sig-paren">(</span>
<em class="sig-param">name</em><span class="sig-paren">)</span>
<a class="headerlink" href="#mod.Queue">¶</a></dt>
<dd><p>A named queue.</p>
<dl class="py method"><dt class="sig sig-object py" id="mod.Queue.put">
<span class="sig-name descname">put</span><span class="sig-paren">(</span>
<em class="sig-param">item</em>, <em class="sig-param">timeout=None</em>
<span class="sig-paren">)</span><a class="headerlink" href="#mod.Queue.put">¶</a></dt>
<dd><p>Put an item into the queue.</p>
<dl class="field-list simple"><dt class="field-odd">Parameters<span class="colon">:
</span></dt><dd class="field-odd"><ul class="simple"><li><p><strong>item</strong> – the
item</p></li><li><p><strong>timeout</strong> – seconds to wait</p></li></ul></dd>
<dt class="field-even">Raises<span class="colon">:</span></dt>
<dd class="field-even"><p><strong>Full</strong> – when no slot frees up</p></dd></dl>
</dd></dl></dd></dl>
<section id="queue-sizes">
<span id="sizes"></span><h2>Queue Sizes<a class="headerlink"
href="#queue-sizes">¶</a></h2>
<p>A queue holds at most 100 items.</p></section></section></div>
"""


# A man page as `groff -mandoc -Thtml` writes it: options as indented
# paragraphs, the term (bold, or plain as find(1) has them) over its
# description indented further, a table inside a description.
GROFF = """
<h2>NAME<a name="NAME"></a></h2>
<p style="margin-left:11%; margin-top: 1em">rsync - a file-copying tool</p>
<h2>OPTIONS<a name="OPTIONS"></a></h2>
<p style="margin-left:11%; margin-top: 1em">Options may be given in any order.</p>
<p style="margin-left:11%;"><b>--compress</b>, <b>-z</b></p>
<p style="margin-left:22%;">With this option, rsync compresses the file data.</p>
<p style="margin-left:22%; margin-top: 1em">See also the compress list.</p>
<table width="100%" border="0" rules="none" frame="void">
<tr><td width="22%"></td><td width="78%"><p>zstd, lz4, zlib</p></td></tr></table>
<p style="margin-left:11%;">-mtime n</p>
<p style="margin-left:22%;">File's data was last modified n*24 hours ago.</p>
<table width="100%" border="0" rules="none" frame="void">
<tr><td width="11%"></td><td width="3%"><p><b>-P</b></p></td><td width="8%"></td>
<td width="78%"><p>The -P option is equivalent to --partial --progress.</p></td></tr>
</table>
<p style="margin-left:22%; margin-top: 1em">It eases long transfers.</p>
<table width="100%" border="0" rules="none" frame="void">
<tr><td width="11%"></td><td width="47%"><p><b>-i[SUFFIX]</b>,
<b>--in-place</b>[=<i>SUFFIX</i>]</p></td><td width="42%"></td></tr>
</table>
<p style="margin-left:22%; margin-top: 1em">edit files in place</p>
<table width="100%" border="0" rules="none" frame="void">
<tr><td width="11%"></td><td width="3%"><p>-L</p></td><td width="8%"></td>
<td width="78%"><p>Follow symbolic links.</p></td></tr>
<tr><td width="11%"></td><td width="3%"><p>-H</p></td><td width="8%"></td>
<td width="78%"><p>Do not follow symbolic links, except when named.</p></td></tr>
</table>
<p style="margin-left:11%; margin-top: 1em">Options end here.</p>
<p style="margin-left:11%;">For example:</p>
<p style="margin-left:22%;">rsync -z a b</p>
<h2>EXIT VALUES<a name="EXIT VALUES"></a></h2>
<p style="margin-left:11%; margin-top: 1em">0 means success.</p>
<table width="100%" border="0" rules="none" frame="void">
<tr><td width="11%"></td><td width="1%"><p>o</p></td><td width="10%"></td>
<td width="78%"><p>23 - Partial transfer due to error</p></td></tr>
<tr><td width="11%"></td><td width="1%"><p>o</p></td><td width="10%"></td>
<td width="78%"><p>24 - Partial transfer due to vanished source files</p></td></tr>
</table>
<table><tr><td>zlib</td><td>6</td></tr><tr><td>zstd</td><td>3</td></tr></table>
"""


class GroffManPageTestCase(SimpleTestCase):
    """QA of issue #29: every option of rsync's man page was one section of
    152,672 characters, "OPTIONS", and answers quoted "--compress, -z" alone."""

    def setUp(self):
        self.reading = readers.read("rsync.html", _html(GROFF, "rsync"))

    def test_each_option_is_a_section_under_the_heading_around_it(self):
        self.assertEqual(
            _paths(self.reading),
            [
                "rsync",
                "rsync > NAME",
                "rsync > OPTIONS",
                "rsync > OPTIONS > --compress, -z",
                "rsync > OPTIONS > -mtime n",
                "rsync > OPTIONS > -P",
                "rsync > OPTIONS > -i[SUFFIX], --in-place[=SUFFIX]",
                "rsync > OPTIONS",
                "rsync > EXIT VALUES",
            ],
        )

    def test_an_option_keeps_its_description_and_nothing_after_it(self):
        section = _section(self.reading, "rsync > OPTIONS > --compress, -z")
        self.assertIn("rsync compresses the file data", section)
        self.assertIn("zstd, lz4, zlib", section)  # its table stays in it
        self.assertNotIn("-mtime", section)
        # The text after the options belongs to the heading above them.
        self.assertIn(
            "## OPTIONS\n\n-L\n: Follow symbolic links.\n\n-H\n: Do not follow "
            "symbolic links, except when named.\n\nOptions end here.",
            self.reading.text,
        )
        # A sentence ending in a colon introduces, it names nothing.
        self.assertNotIn("# For example", self.reading.text)

    def test_a_term_laid_out_as_a_table_of_one_row_is_a_term(self):
        """groff lays short options out as one-row tables: `-P` with its text
        beside it, sed's `-i[SUFFIX]` over an indented paragraph."""
        section = _section(self.reading, "rsync > OPTIONS > -P")
        self.assertIn("equivalent to --partial --progress", section)
        self.assertIn("It eases long transfers.", section)
        self.assertNotIn("Column 1", self.reading.text.split("## EXIT")[0])

    def test_a_table_laying_out_terms_is_read_as_a_definition_list(self):
        self.assertIn("-L\n: Follow symbolic links.", self.reading.text)
        self.assertIn("-H\n: Do not follow symbolic links", self.reading.text)

    def test_a_table_laying_out_a_list_is_read_as_the_list(self):
        """groff writes a man page's bulleted lists as tables of spacer and
        bullet cells: their rows were quoted under "| Column 1 | Column 2 |"."""
        text = self.reading.text
        self.assertIn(
            "- 23 - Partial transfer due to error\n"
            "- 24 - Partial transfer due to vanished source files",
            text,
        )
        self.assertIn("\n\nzstd, lz4, zlib\n\n", text)  # a laid-out paragraph
        # A table of data without a header row stays a table.
        self.assertIn("| Column 1 | Column 2 |", text)
        self.assertIn("| zlib | 6 |", text)


class AsciiDocAdmonitionTestCase(SimpleTestCase):
    def test_a_note_is_a_quote_not_a_table(self):
        """git's manual pages (AsciiDoc) print a note as a table of its label
        and its text: it was a table named "Column 1 | Column 2"."""
        body = (  # AsciiDoc's page: its text in div#content
            '<div id="content"><h2>OPTIONS</h2><div class="admonitionblock">'
            "<table><tr>"
            '<td class="icon"><div class="title">Note</div></td>'
            '<td class="content">Some placeholders depend on <code>-g</code>.</td>'
            "</tr></table></div><p>After the note.</p></div>"
        )
        text = readers.read("git-log.html", _html(body, "git-log")).text
        self.assertIn("> Note: Some placeholders depend on -g.", text)
        self.assertNotIn("Column 1", text)


class DocBookAdmonitionTestCase(SimpleTestCase):
    """QA over Debian's and PostgreSQL-style DocBook manuals: a note titled
    by a heading took the text after it under a "Note" section, and a note
    laid out as a table (icon, label, text) was "Column 1 | Column 2"."""

    def test_a_note_titled_by_a_heading_is_a_quote(self):
        body = (
            '<div class="sect1"><h2 class="title">Backups</h2><p>Run them.</p>'
            '<div class="note"><h3 class="title">Note</h3><p>Keep two copies.</p>'
            "</div><p>After the note.</p></div>"
        )
        reading = readers.read("backup.html", _html(body, "Backups"))
        self.assertIn("> Note: Keep two copies.", reading.text)
        self.assertEqual(_paths(reading), ["Backups"])
        self.assertIn("After the note.", _section(reading, "Backups"))

    def test_a_note_laid_out_as_a_table_is_a_quote(self):
        body = (
            "<h1>Arranque</h1><p>Texto.</p>"
            '<div class="tip"><table border="0" summary="Tip"><tr>'
            '<td rowspan="2"><img alt="[Sugerencia]" src="tip.png"/></td>'
            '<th align="left">Sugerencia</th></tr><tr><td><p>Quite '
            "<code>quiet</code> del grub.cfg.</p></td></tr></table></div>"
        )
        text = readers.read("ch03.html", _html(body, "Arranque")).text
        self.assertIn("> Sugerencia: Quite `quiet` del grub.cfg.", text)
        self.assertNotIn("Column 1", text)
        self.assertNotIn("[Sugerencia]", text)

    def test_a_segmented_list_is_a_section_per_item(self):
        # aptitude's option reference (French): each option's name and default
        # were chunked with the description of the option before it
        def item(name, default, text):
            return (
                f"<div class='seglistitem'><a id='config{name}'></a><div "
                "class='seg'><strong><span class='segtitle'>Option : </span>"
                f"</strong><code class='literal'>Aptitude::{name}</code></div>"
                "<div class='seg'><strong><span class='segtitle'>Valeur par "
                f"défaut : </span></strong><code>{default}</code></div><div "
                "class='seg'><strong><span class='segtitle'>Description : </span>"
                f"</strong>{text}</div></div>"
            )

        body = (
            "<h1>Référence</h1><h2>Options</h2><div class='segmentedlist'>"
            + item("Always-Prompt", "false", "Demande toujours.")
            + item("Get-Root-Command", "su:/bin/su", "<p>La commande de root.</p>")
            + "</div><h2>Thèmes</h2><p>Des couleurs.</p>"
        )
        reading = readers.read("options.html", _html(body, "Référence"))
        self.assertEqual(
            _paths(reading),
            [
                "Référence",
                "Référence > Options",
                "Référence > Options > `Aptitude::Always-Prompt`",
                "Référence > Options > `Aptitude::Get-Root-Command`",
                "Référence > Thèmes",
            ],
        )
        section = _section(
            reading, "Référence > Options > `Aptitude::Get-Root-Command`"
        )
        self.assertIn("Valeur par défaut : `su:/bin/su`", section)
        self.assertIn("Description : La commande de root.", section)
        self.assertIn("configGet-Root-Command", [a for _, a in reading.anchors])

    def test_a_title_pages_authors_are_no_headings(self):
        # Debian's Spanish maint-guide: each author's e-mail was a section, and
        # the copyright and abstract were under "Innocent De Marchi"
        body = (
            "<div class='titlepage'><h1 class='title'>Guía</h1><div "
            "class='authorgroup'><div class='author'><h3 class='author'>Josip "
            "Rodin</h3><code class='email'>&lt;joy@debian.org&gt;</code></div>"
            "<div class='author'><h3 class='author'>Osamu Aoki</h3></div></div>"
            "<p class='copyright'>Copyright © 1998 Josip Rodin</p></div>"
            "<h2>Empezando</h2><p>Lea esto.</p>"
        )
        reading = readers.read("index.es.html", _html(body, "Guía"))
        self.assertEqual(_paths(reading), ["Guía", "Guía > Empezando"])
        self.assertIn("Osamu Aoki\n\nCopyright © 1998", reading.text)

    def test_footnotes_are_a_section_of_their_own_without_marks(self):
        body = (
            "<h1>Build</h1><h2>Sign</h2><p>Sign the files."
            '<a href="#ftn.id1" class="footnote" id="id1"><sup>[62]</sup></a></p>'
            # a mark after a space (Debian's Russian manuals) leaves no space
            # before the full stop: "Check them ." was quoted
            '<h2>Check</h2><p>Check them <a href="#ftn.id2" class="footnote">'
            "<sup>[63]</sup></a>. Then <b>sign</b> "
            '<a href="#ftn.id1" class="footnote"><sup>[62]</sup></a> again.</p>'
            '<div class="footnotes"><br/><hr/><div id="ftn.id1" class="footnote">'
            '<p><a href="#id1" class="para"><sup class="para">[62] </sup></a>'
            "The key must be signed.</p></div></div>"
        )
        reading = readers.read("build.html", _html(body, "Build"))
        self.assertEqual(
            _paths(reading),
            ["Build", "Build > Sign", "Build > Check", "Build > Footnotes"],
        )
        self.assertNotIn("62", reading.text)
        self.assertIn("The key must be signed.", _section(reading, "Build > Footnotes"))
        self.assertIn("Check them. Then sign again.", reading.text)

    def test_the_footnotes_section_is_named_in_the_pages_language(self):
        """QA over Debian's Spanish and Russian manuals: their notes were a
        section named "Footnotes", in English, in each page."""
        for words, named in (
            (
                "Firme los ficheros con su clave antes de subirlos al servidor de "
                "la distribución, y compruebe las firmas de los demás paquetes.",
                "Notas",
            ),
            (
                "Подпишите файлы своим ключом перед загрузкой на сервер "
                "дистрибутива и проверьте подписи остальных пакетов.",
                "Примечания",
            ),
        ):
            body = (
                f'<h1>Build</h1><p>{words}<a href="#ftn.id1" class="footnote" '
                'id="id1"><sup>[1]</sup></a></p><div class="footnotes"><div '
                'id="ftn.id1" class="footnote"><p>Note.</p></div></div>'
            )
            reading = readers.read("build.html", _html(body, "Build"))
            self.assertEqual(_paths(reading), ["Build", f"Build > {named}"])


class SphinxTestCase(SimpleTestCase):
    def setUp(self):
        self.reading = readers.read("mod.html", _html(SPHINX, "mod — Tools"))

    def test_each_object_is_a_section_named_briefly_with_its_signature(self):
        # a method named with its class, a class without "()" (QA over
        # enlighten's autodoc pages: "counter()", "enlighten.Manager()")
        self.assertEqual(
            _paths(self.reading),
            [
                "mod — Tools",
                "mod — Tools > mod.Queue",
                "mod — Tools > mod.Queue > Queue.put()",
                "mod — Tools > Queue Sizes",
            ],
        )
        section = _section(self.reading, "mod — Tools > mod.Queue > Queue.put()")
        self.assertIn("```\nput(item, timeout=None)\n```", section)
        self.assertNotIn("¶", self.reading.text)
        self.assertIn(
            (self.reading.text.index("### Queue.put()"), "mod.Queue.put"),
            self.reading.anchors,
        )

    def test_a_heading_after_its_label_links_to_its_section(self):
        """Sphinx writes a reference label as an empty span before the heading
        (`<span id="sizes"></span><h2>`): the section's id is still the
        heading's, the one its "¶" link uses."""
        self.assertIn(
            (self.reading.text.index("## Queue Sizes"), "queue-sizes"),
            self.reading.anchors,
        )

    def test_its_fields_stay_a_list(self):
        section = _section(self.reading, "mod — Tools > mod.Queue > Queue.put()")
        self.assertIn(
            "- Parameters:\n    - item – the item\n    - timeout – seconds to wait\n"
            "- Raises: Full – when no slot frees up",
            section,
        )


# A list whose items show an example (Sphinx's argparse page, AsciiDoc's
# listing blocks in git's manual): the code sits in divisions of the item.
EXAMPLE_ITEMS = """
<div role="main"><h1>Actions</h1><ul>
<li><p><code>'store'</code> - This stores the value. For example:</p>
<div class="highlight-default notranslate"><div class="highlight"><pre>
&gt;&gt;&gt; parser.add_argument('--foo')
</pre></div></div></li>
<li><p><code>'count'</code> - This counts the flags.</p></li></ul></div>
"""


SEE_ALSO = """
<div role="main"><section id="dt"><h1>datetime</h1>
<p>The datetime module supplies classes for dates and times.</p>
<div class="admonition seealso"><p class="admonition-title">See also</p>
<dl class="simple"><dt>Module <a href="calendar.html"><code>calendar</code></a></dt>
<dd><p>General calendar related functions.</p></dd>
<dt>Package <a href="https://example.org">dateutil</a></dt>
<dd><p>Third-party library with parsing support.</p></dd></dl></div>
<section id="aware"><h2>Aware and Naive Objects</h2><p>Objects may be aware.</p>
</section></section></div>
"""


class SeeAlsoTestCase(SimpleTestCase):
    def test_a_see_also_box_is_a_list_not_headings(self):
        reading = readers.read("datetime.html", _html(SEE_ALSO, "datetime"))
        self.assertEqual(
            _paths(reading), ["datetime", "datetime > Aware and Naive Objects"]
        )
        self.assertIn(
            "- Module `calendar` General calendar related functions.\n"
            "- Package dateutil Third-party library with parsing support.",
            reading.text,
        )


class ExampleInListItemTestCase(SimpleTestCase):
    def test_an_items_example_is_code_after_its_text_once(self):
        text = readers.read("actions.html", _html(EXAMPLE_ITEMS)).text
        self.assertIn(
            "- `'store'` - This stores the value. For example:\n\n"
            "```\n>>> parser.add_argument('--foo')\n```\n\n"
            "- `'count'` - This counts the flags.",
            text,
        )
        self.assertEqual(text.count("add_argument"), 1)


class TitleTestCase(SimpleTestCase):
    def test_a_title_equal_to_the_first_heading_is_read_once(self):
        body = (
            '<div class="sect1"><h2 class="title">20.8. Error Reporting and Logging'
            "</h2>"
            "<p>Where to log.</p><h3>20.8.1. Where to Log</h3><p>Files.</p></div>"
        )
        reading = readers.read(
            "logging.html", _html(body, "20.8. Error Reporting and  Logging")
        )
        self.assertEqual(
            _paths(reading),
            [
                "20.8. Error Reporting and Logging",
                "20.8. Error Reporting and Logging > 20.8.1. Where to Log",
            ],
        )
        self.assertEqual(reading.text.count("Error Reporting"), 1)

    def test_a_title_unlike_the_first_heading_still_opens_the_page(self):
        reading = readers.read("a.html", _html("<h2>Install</h2><p>Run it.</p>", "App"))
        self.assertEqual(_paths(reading), ["App", "App > Install"])


class RealReferenceTestCase(SimpleTestCase):
    """Real pages from Debian packages (tests/fixtures/real/README.md)."""

    def _read(self, name: str) -> readers.Reading:
        return readers.read(name, (REAL / name).read_bytes())

    def test_a_javadoc_17_class_page_has_a_section_per_method(self):
        reading = self._read("javadoc17-StopWatch.html")
        paths = _paths(reading)
        self.assertEqual(paths[0], "Class StopWatch")
        self.assertIn("Class StopWatch > getTime(TimeUnit)", paths)
        self.assertEqual(len(paths), 27)  # the class, 2 constructors, 24 methods
        section = _section(reading, "Class StopWatch > suspend()")
        self.assertIn("```\npublic void suspend()\n```", section)
        self.assertIn(
            "- Throws: `IllegalStateException` - if the StopWatch is not "
            "currently running.",
            section,
        )
        self.assertNotIn("resume()", section.split("\n", 1)[1])
        self.assertNotIn("Method Summary", reading.text)

    def test_a_postgresql_reference_page_has_a_section_per_option(self):
        reading = self._read("postgresql-app-createdb.html")
        section = _section(
            reading, "createdb > Options > `-S strategy` `--strategy=strategy`"
        )
        self.assertIn("Specifies the database creation strategy.", section)
        self.assertNotIn("template", section)
        self.assertIn("createdb > Options > `-h host` `--host=host`", _paths(reading))

    def test_a_python_library_page_has_a_section_per_function(self):
        reading = self._read("python-bisect.html")
        path = "`bisect` — Array bisection algorithm > bisect.insort_left()"
        section = _section(reading, path)
        signature = "bisect.insort_left(a, x, lo=0, hi=len(a), *, key=None)"
        self.assertIn(f"```\n{signature}\n```", section)
        self.assertNotIn("insort_right", section)


class DoxygenTestCase(SimpleTestCase):
    """Doxygen class pages (issue #29's QA over libtinyxml-doc): every member
    was one "Member Function Documentation" section, each signature a table
    read as "Column 1 | Column 2" rows, and the summary tables repeated it."""

    def _read(self, name: str) -> readers.Reading:
        return readers.read(name, (REAL / name).read_bytes())

    def test_a_doxygen_1_9_page_has_a_section_per_member(self):
        reading = self._read("doxygen19-CharReader.html")
        paths = _paths(reading)
        self.assertEqual(paths[0], "Json::CharReader Class Reference")  # no label
        parse = (
            "Json::CharReader Class Reference > Member Function Documentation "
            "> Json::CharReader::parse"
        )
        self.assertIn(parse, paths)
        section = _section(reading, parse)
        self.assertIn(
            "```\nvirtual bool Json::CharReader::parse(char const * beginDoc, "
            "char const * endDoc, Value * root, String * errs) [pure virtual]\n```",
            section,
        )
        self.assertIn("Read a Value from a JSON document.", section)
        self.assertIn("- Parameters: root \\[out] - Contains the root value", section)
        self.assertIn("- Returns: `true` if the document was successfully", section)
        for furniture in ("Column 1", "Definition at line", "More...", "members"):
            self.assertNotIn(furniture, reading.text)
        anchors = {anchor: offset for offset, anchor in reading.anchors}
        at = anchors["a65517004c4b5b1dc659ab966b3cea4cf"]  # parse's, as linked
        self.assertTrue(reading.text[at:].startswith("### Json::CharReader::parse"))

    def test_a_doxygen_1_6_page_keeps_members_its_summary_alone_documents(self):
        reading = self._read("doxygen16-TiXmlElement.html")
        paths = _paths(reading)
        self.assertEqual(paths[0], "TiXmlElement Class Reference")
        query = (
            "TiXmlElement Class Reference > Member Function Documentation "
            "> TiXmlElement::QueryIntAttribute"
        )
        section = _section(reading, query)
        self.assertIn("TIXML_NO_ATTRIBUTE is returned.", section)
        self.assertNotIn("QueryBoolAttribute", section.split("\n", 1)[1])
        # RemoveAttribute has no documentation but its summary's brief
        remove = (
            "TiXmlElement Class Reference > Public Member Functions "
            "> TiXmlElement::RemoveAttribute"
        )
        self.assertIn(
            "Deletes an attribute with the given name.", _section(reading, remove)
        )
        # the summary rows of documented members are not indexed twice
        self.assertEqual(reading.text.count("QueryIntAttribute examines"), 1)
        for furniture in ("Column 1", "Inheritance diagram", "List of all members"):
            self.assertNotIn(furniture, reading.text)
        self.assertNotIn("References TiXmlAttribute", reading.text)


# A Doxygen 1.9 file page as the review of the Doxygen reader tried it: a
# macro with a value, a member with a brace initialiser, an operator, docs
# that open "References to", a return value with a table, a summary row of a
# class of its own page.
DOXYGEN_FILE = """<html><body><div class="header"><div class="headertitle">
<div class="title">hive.h File Reference</div></div></div>
<div class="contents">
<p><a href="hive_8h_source.html">Go to the source code of this file.</a></p>
<table class="memberdecls">
<tr class="heading"><td colspan="2"><h2 class="groupheader">Classes</h2></td></tr>
<tr class="memitem:"><td class="memItemLeft">class &#160;</td>
<td class="memItemRight"><a class="el" href="class_hive.html">Hive</a></td></tr>
<tr class="memdesc:"><td class="mdescLeft">&#160;</td>
<td class="mdescRight">A hive. <a href="class_hive.html#details">More...</a></td></tr>
</table>
<h2 class="groupheader">Macro Definition Documentation</h2>
<a id="a1"></a>
<h2 class="memtitle">HIVE_FRAMES</h2>
<div class="memitem"><div class="memproto"><table class="memname"><tr>
<td class="memname">#define HIVE_FRAMES&#160;&#160;&#160;10</td></tr></table></div>
<div class="memdoc"><p>How many frames a hive holds.</p></div></div>
<h2 class="groupheader">Variable Documentation</h2>
<a id="a2"></a>
<h2 class="memtitle">queenless_</h2>
<div class="memitem"><div class="memproto"><table class="memname"><tr>
<td class="memname">bool Hive::queenless_ {false}</td></tr></table></div>
<div class="memdoc"><p>Whether the hive has lost its queen.</p></div></div>
<h2 class="groupheader">Function Documentation</h2>
<a id="a3"></a>
<h2 class="memtitle">operator bool()</h2>
<div class="memitem"><div class="memproto"><table class="memname"><tr>
<td class="memname">Hive::operator bool </td><td>(</td><td class="paramname"></td>
<td>)</td><td> const</td></tr></table></div>
<div class="memdoc"><p>True when the hive has bees.</p></div></div>
<a id="a4"></a>
<h2 class="memtitle">frames()</h2>
<div class="memitem"><div class="memproto"><table class="memname"><tr>
<td class="memname">const Frame * Hive::frames </td><td>(</td>
<td class="paramtype">int&#160;</td><td class="paramname"><em>count</em></td>
<td>)</td></tr></table></div>
<div class="memdoc">
<p>References to the returned frames stay valid until the hive is freed.</p>
<dl class="params"><dt>Parameters</dt><dd><table class="params">
<tr><td class="paramdir">[in]</td><td class="paramname">count</td>
<td>How many frames.</td></tr></table></dd></dl>
<dl class="section return"><dt>Returns</dt><dd>The frames, or one of these codes:
<table class="doxtable"><tr><th>Code</th><th>Meaning</th></tr>
<tr><td>-1</td><td>busy</td></tr></table></dd></dl>
<dl class="section remark"><dt>Remarks</dt><dd>Defaults: <div class="fragment">
<div class="line">frames = 10;</div><div class="line">queen = true;</div>
</div></dd></dl>
<p class="definition">Definition at line <a href="hive_8h_source.html#l12">12</a>
of file <a href="hive_8h_source.html">hive.h</a>.</p>
<p>References <a class="el" href="#a1">HIVE_FRAMES</a>.</p>
</div></div>
</div></body></html>"""


class DoxygenFilePageTestCase(SimpleTestCase):
    """The review of the Doxygen reader: members headed "10", "{false}" and
    "bool"; docs opening "References to" dropped; a return value's lead
    sentence lost to its table; a class of its own page taken for a member."""

    def test_each_member_is_headed_by_its_name_and_keeps_its_docs(self):
        reading = readers.read("hive_8h.html", DOXYGEN_FILE.encode())
        paths = _paths(reading)
        for heading in (
            "Macro Definition Documentation > HIVE_FRAMES",
            "Variable Documentation > Hive::queenless_",
            "Function Documentation > Hive::operator bool",
            "Function Documentation > Hive::frames",
        ):
            self.assertIn(f"hive.h File Reference > {heading}", paths)
        self.assertNotIn("Classes", reading.text)  # Hive has its own page
        frames = _section(
            reading, "hive.h File Reference > Function Documentation > Hive::frames"
        )
        self.assertIn("References to the returned frames stay valid", frames)
        self.assertIn(
            "- Parameters: count [in] - How many frames.", frames.replace("\\", "")
        )
        self.assertIn("- Returns: The frames, or one of these codes:", frames)
        self.assertIn(
            "- Remarks: Defaults:\n\n```\nframes = 10;\nqueen = true;\n```", frames
        )
        for furniture in ("Definition at line", "References HIVE", "Go to the source"):
            self.assertNotIn(furniture, reading.text)


class IngestReferenceTestCase(TestCase):
    def test_a_javadoc_page_is_indexed_with_a_section_per_method(self):
        collection = Collection.objects.create(name="API")
        data = (REAL / "javadoc17-StopWatch.html").read_bytes()
        source, _ = uploads.store_source(collection, "StopWatch.html", data)
        ingestion.ingest(source.pk)
        source.refresh_from_db()
        self.assertEqual(source.title, "Class StopWatch")
        section = source.sections.get(heading_path="Class StopWatch > suspend()")
        texts = [c.text for c in section.chunks.all()]
        self.assertTrue(any("public void suspend()" in t for t in texts))
        self.assertTrue(any("not currently running" in t for t in texts))
