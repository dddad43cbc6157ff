"""Answers and passages show source Markdown formatted, and still escaped (#17)."""

from __future__ import annotations

from types import SimpleNamespace

from django.template.loader import render_to_string
from django.test import SimpleTestCase
from django.urls import reverse

from kb import answerer, answering, ingestion, rendering, uploads
from kb.models import Section
from kb.templatetags.kb_markdown import answer_piece, passage_markdown
from tests import base

EVIL = (
    b"# Widget polishing\n\nWidgets are polished with the `polish` command "
    b"<script>alert(1)</script> and <img src=x onerror=alert(2)> weekly. "
    b"See [the guide](javascript:alert(3)) or [the wiki](https://wiki.example.com/).\n\n"
    b"```sh\npolish --all <b>now</b>\n```\n\n"
    b"| Widget | Polish |\n|---|---|\n| Sprocket <i>x</i> | weekly |\n"
)
QUESTION = "How are widgets polished?"


class RenderTestCase(SimpleTestCase):
    def test_code_blocks_and_tables_render_as_such(self):
        html = rendering.render(EVIL.decode())
        self.assertIn('<pre><code class="language-sh">polish --all &lt;b&gt;', html)
        self.assertIn("<table>", html)
        self.assertIn("<td>Sprocket &lt;i&gt;x&lt;/i&gt;</td>", html)
        self.assertIn("<code>polish</code>", html)

    def test_raw_html_and_unsafe_links_are_escaped(self):
        html = rendering.render(EVIL.decode())
        self.assertNotIn("<script", html)
        self.assertNotIn("<img", html)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", html)
        self.assertIn("&lt;img src=x onerror=alert(2)&gt;", html)
        self.assertNotIn('href="javascript', html)
        self.assertIn(
            '<a href="https://wiki.example.com/" rel="noopener nofollow">', html
        )
        self.assertNotIn("<img", rendering.render("![x](https://e.example/x.png)"))

    def test_a_quoted_table_row_is_a_table_row(self):
        html = rendering.render_row("| `--lock` | Do <b>not</b> install \\| lock |")
        self.assertEqual(
            html,
            '<table class="quoted-row"><tr><td><code>--lock</code></td>'
            "<td>Do &lt;b&gt;not&lt;/b&gt; install | lock</td></tr></table>",
        )
        header = rendering.render_row("| Name | Default | |---|:-:|")
        self.assertIn("<th>Name</th><th>Default</th></tr>", header)
        self.assertFalse(rendering.is_table_row("a | b"))

    def test_a_quoted_row_under_its_header_line_is_one_table(self):
        text = "| Part | Interval |\n| --- | --- |\n| Cassette | 9000 km |"
        self.assertTrue(rendering.is_table_row(text))
        self.assertEqual(
            rendering.render_row(text),
            '<table class="quoted-row"><tr><th>Part</th><th>Interval</th></tr>'
            "<tr><td>Cassette</td><td>9000 km</td></tr></table>",
        )
        self.assertFalse(rendering.is_table_row("| a | b |\nNot a row."))

    def test_the_cited_blocks_are_marked(self):
        body = "# H\n\nIntro.\n\n- one\n- two\n  more\n\nLast.\n"
        html = rendering.render_cited(body, body.index("two"), body.index("more") + 4)
        self.assertIn('<li class="cited">two', html)
        self.assertIn("<p>Intro.</p>", html)
        self.assertIn("<p>Last.</p>", html)


class QuotedMarkdownTestCase(SimpleTestCase):
    """Text quoted out of a document (a sentence, a passage) shows its Markdown
    formatted though the other half of some markup is elsewhere in the source."""

    def test_it_shows_a_reference_link_defined_elsewhere_as_its_text(self):
        html = answer_piece(
            "Client IPs are explained [over there][client-ip], with "
            "[`cache_page`][] and [Django's search][search-admin]."
        )
        self.assertIn('<span class="reference">over there</span>,', html)
        self.assertIn('<span class="reference"><code>cache_page</code></span>', html)
        self.assertIn(">Django's search</span>.", html)
        self.assertNotIn("][", html)
        row = answer_piece("| `@` | Full-text search ([Postgres][pg-search]). |")
        self.assertIn('<td>Full-text search (<span class="reference">', row)
        self.assertNotIn("[pg-search]", row)

    def test_brackets_that_are_no_link_stay(self):
        # Citation markers, indexing and a lone [label] without its definition.
        text = "Use rows[0][1] or a[0], see [1][2] and [1] in [FILE_HANDLERS]."
        self.assertEqual(rendering.render_inline(text), text)
        cite = SimpleNamespace(url="/s/1", label="Guide")
        parts = answerer.marked_parts("Polished as in a[0] and [2][3]. [1]", {1: cite})
        html = render_to_string("kb/_answer.html", {"parts": parts})
        self.assertIn("as in a[0] and [2][3]. </span>", html)
        self.assertIn('<a class="cite" href="/s/1" title="Guide">[1]</a>', html)
        # ... while a reference beside them is its text.
        html = rendering.render_inline("See [the guide][guide] [1].")
        self.assertEqual(html, 'See <span class="reference">the guide</span> [1].')

    def test_link_reference_definitions_show_nothing(self):
        text = (
            "[page]: https://docs.example.com/cache/#per-view "
            "[cookie]: https://docs.example.com/vary/ 'Vary' [img]: ../img/x.png"
        )
        self.assertEqual(answer_piece(text), '<span class="sentence"></span>')
        note = "[Note]: read on."  # no destination: no definition
        self.assertEqual(rendering.render_inline(note), note)
        # In a passage, markdown-it hides them and links with them.
        html = rendering.render(
            "See [the wiki][w].\n\n[w]: https://wiki.example.com/\n"
        )
        self.assertEqual(
            html,
            '<p>See <a href="https://wiki.example.com/" rel="noopener nofollow">'
            "the wiki</a>.</p>\n",
        )

    def test_an_image_shows_as_its_alt_text_and_loads_nothing(self):
        for html in (
            rendering.render("Look:\n\n![Search Filter](../img/search-filter.png)\n"),
            answer_piece("![Search Filter](../img/search-filter.png)"),
            answer_piece("![Search Filter][search-img]"),
        ):
            self.assertIn("[image: Search Filter]", html)
            self.assertNotIn("../img", html)
            self.assertNotIn("<a", html)
            self.assertNotIn("<img", html)
            self.assertNotIn("!", html)

    def test_a_bold_span_cut_at_a_sentence_boundary_is_closed(self):
        first = answer_piece(" **Throttling is no security measure. ")
        self.assertEqual(
            first,
            '<span class="sentence"> '
            "<strong>Throttling is no security measure.</strong> </span>",
        )
        last = rendering.render_inline("It may be fuzzy at times.**")
        self.assertEqual(last, "<strong>It may be fuzzy at times.</strong>")
        for text in ("**kwargs are passed on.", "2 ** 3 is 8.", "\\*\\*Stars."):
            self.assertNotIn("<strong>", rendering.render_inline(text))

    def test_an_admonition_shows_its_title_and_body(self):
        html = rendering.render(
            'Intro.\n\n!!! warning "Mind the cache"\n    Cached **once**.\n\n'
            "    Only GET responses.\n\nAfter.\n"
        )
        self.assertNotIn("!!!", html)
        self.assertIn("<p><strong>Mind the cache</strong></p>", html)
        self.assertIn("<p>Only GET responses.</p>\n</div>\n<p>After.</p>", html)
        self.assertNotIn("<pre>", html)  # the indented body is no code block
        self.assertIn("<strong>Note</strong>", rendering.render("!!! note\n    Body."))
        self.assertIn("<strong>Python</strong>", rendering.render('=== "Python"\n'))
        self.assertEqual(  # a sentence after a citation marker: the space stays
            answer_piece(" !!! note Set the classes **first**."),
            '<span class="sentence"> <strong>Note</strong> Set the classes '
            "<strong>first</strong>.</span>",
        )
        self.assertEqual(
            rendering.render_inline('??? tip "Faster" Use a cache.'),
            "<strong>Faster</strong> Use a cache.",
        )

    def test_a_quoted_list_item_shows_a_bullet_not_its_marker(self):
        # On a line of its own: items quoted one after another are not run on.
        self.assertEqual(
            answer_piece(" * `page_size` - A numeric value. "),
            '<div class="sentence item"> \N{BULLET} <code>page_size</code> - '
            "A numeric value. </div>",
        )
        item = rendering.render_inline("- Not logged in.")
        self.assertEqual(item, "\N{BULLET} Not logged in.")
        self.assertEqual(rendering.render_inline("-1 is less."), "-1 is less.")

    def test_a_quoted_list_ending_an_answer_is_a_list(self):
        # What answerer.answer_text puts after the marker of a "...:" sentence.
        self.assertEqual(
            answer_piece("\n\n- A laptop\n- A `badge`"),
            '<div class="sentence"><ul>\n<li>A laptop</li>\n'
            "<li>A <code>badge</code></li>\n</ul>\n</div>",
        )

    def test_table_rows_without_their_header_are_table_rows(self):
        body = "Intro.\n\n| `@` | `search` | Full text. |\n| None | `in` | Has. |\n"
        html = rendering.render(body)
        self.assertIn("<td><code>@</code></td>", html)
        self.assertIn("<td>Has.</td>\n</tr>\n</tbody>\n</table>", html)
        self.assertNotIn("|", html)
        cited = rendering.render_cited(body, body.index("None"), body.index("None") + 4)
        self.assertIn('<tr class="cited">\n<td>None</td>', cited)
        # A paragraph's line with pipes stays text, and a real table a table.
        self.assertIn("<p>Text\n| a |</p>", rendering.render("Text\n| a |"))
        table = rendering.render("| A |\n| r |\n| H |\n|---|\n| x |\n")
        self.assertIn("<th>H</th>", table)
        self.assertIn("<td>r</td>", table)


class PagesTestCase(base.DemoTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        source, _ = uploads.store_source(cls.demo, "polish.md", EVIL)
        ingestion.ingest(source.pk)
        cls.source = source

    def _assert_escaped(self, response):
        self.assertNotContains(response, "<script>alert")
        self.assertNotContains(response, "<img src=x")
        self.assertNotContains(response, 'href="javascript')
        self.assertContains(response, "&lt;script&gt;alert(1)&lt;/script&gt;")
        self.assertContains(response, "&lt;img src=x onerror=alert(2)&gt;")

    def test_the_ask_page_shows_passages_formatted_and_escaped(self):
        response = self.client.get(
            reverse("kb:ask"), {"q": QUESTION, "collection": self.demo.pk}
        )
        self.assertContains(response, 'class="markdown"')
        self._assert_escaped(response)
        self.assertContains(response, '<pre><code class="language-sh">')
        self.assertContains(response, "<table>")
        # The answer's sentences are formatted too: inline code, not backticks.
        answer = (
            response.content.decode().split('id="answer"')[1].split("</section>")[0]
        )
        self.assertIn("<code>polish</code>", answer)
        self.assertNotIn("`polish`", answer)

    def test_an_answer_quoting_a_table_row_shows_a_table(self):
        response = self.client.get(
            reverse("kb:ask"),
            {"q": "How often is a Sprocket polished?", "collection": self.demo.pk},
        )
        answer = (
            response.content.decode().split('id="answer"')[1].split("</section>")[0]
        )
        # an inline element's tags are quoted as the text they wrap (f7a6bb6),
        # never rendered
        self.assertIn(
            '<table class="quoted-row"><tr><th>Widget</th><th>Polish</th></tr>'
            "<tr><td>Sprocket x</td><td>weekly</td></tr></table>",
            answer,
        )
        self.assertNotIn("<i>", answer)
        self.assertNotIn("| weekly |", answer)

    def test_the_section_page_is_formatted_and_keeps_the_exact_range(self):
        _, reply = answering.ask(self.demo, QUESTION)
        cite = next(c for c in reply.citations if c.source_id == self.source.pk)
        response = self.client.get(cite.url)
        self._assert_escaped(response)
        self.assertRegex(
            response.content.decode(), r'<pre><code class="[^"]*language-sh'
        )
        self.assertContains(response, "<table>")
        self.assertContains(response, 'class="cited"')
        text = self.source.text[cite.start : cite.end]
        mark = response.content.decode().split('<mark id="cited"')[1]
        self.assertIn(">" + _escaped(text) + "</mark>", mark)

    def test_a_section_without_a_range_marks_nothing(self):
        section = Section.objects.filter(source=self.source).last()
        response = self.client.get(reverse("kb:section", args=[section.pk]))
        self.assertNotContains(response, 'class="cited"')
        self.assertNotContains(response, "<mark")


def _escaped(text: str) -> str:
    from django.utils.html import escape

    return escape(text)


class PassageCodeEdgesTestCase(SimpleTestCase):
    """A retrieved passage that starts or ends inside a fenced code block shows
    that piece as code (chunks split long code at lines)."""

    TEXT = (
        "# Setup\n\nRun this:\n\n```python\nimport app\napp.start()\n"
        "app.wait()\n```\n\nThen open the *dashboard*.\n"
    )

    def _passage(self, start: int, end: int):
        return base.loaded_passage(self.TEXT, start, end, "setup.md")

    def test_a_passage_starting_inside_code_shows_it_as_code(self):
        start = self.TEXT.index("app.start()")
        html = passage_markdown(self._passage(start, len(self.TEXT)))
        self.assertIn("<pre><code>app.start()\napp.wait()\n</code></pre>", html)
        self.assertIn("<em>dashboard</em>", html)  # the text after it is text

    def test_a_passage_ending_inside_code_closes_it(self):
        end = self.TEXT.index("app.wait()")
        html = passage_markdown(self._passage(0, end))
        self.assertIn("import app\napp.start()", html)
        self.assertEqual(html.count("<pre>"), 1)
        self.assertNotIn("```", html)
