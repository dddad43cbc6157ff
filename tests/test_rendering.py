"""Answers and passages show source Markdown formatted, and still escaped (#17)."""

from __future__ import annotations

from django.test import SimpleTestCase
from django.urls import reverse

from kb import answering, ingestion, rendering
from kb.models import Section
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


class PagesTestCase(base.DemoTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        source, _ = ingestion.store_source(cls.demo, "polish.md", EVIL)
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
        self.assertIn(
            '<table class="quoted-row"><tr><th>Widget</th><th>Polish</th></tr>'
            "<tr><td>Sprocket &lt;i&gt;x&lt;/i&gt;</td><td>weekly</td></tr></table>",
            answer,
        )
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
