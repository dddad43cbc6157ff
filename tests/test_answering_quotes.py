"""What an extractive answer quotes reads on its own: a table row under its
column names, each cited range only the quoted text, no title line as evidence."""

from __future__ import annotations

import re

import pytest
from django.test import TestCase, TransactionTestCase
from django.urls import reverse

from kb import answerer, answering, rendering
from kb.models import Collection
from kb.retrieval import keywords
from kb.templatetags.kb_markdown import answer_piece
from tests import base

BIKES = """# Bike care

The workshop services every bike in the fleet.

## Replacement intervals

Parts wear out at these distances.

| Part | Interval |
| --- | --- |
| Chain | 3000 km |
| Brake pads | 2000 km |
| Cassette | 9000 km |
"""
SAILING = """# Sailing manual

## Reefing

| Wind (knots) | Sail |
|---|---|
| 12-18 | First reef |
"""
BOATS = """# Boat rules

## Mainsail

Reef the mainsail as soon as the wind passes 15 knots.

The galley stove runs on propane and the crew checks its hoses every month.

Life jackets hang on the hooks by the companionway steps, one for each berth.

At night, reef the mainsail before dark, even in a light wind.
"""
TEA = """Tea brewing guide

Green tea should be brewed at 75 degrees Celsius for two minutes. Boiling water
makes green tea bitter.

Black tea needs water at 95 degrees and steeps for four minutes.
"""

# As Django REST framework's docs write settings: indented code, "Default:" and
# the value below it, list items whose last sentence is their default.
SETTINGS = """# Settings

## UPLOAD_LIMIT

The largest upload the service accepts, in megabytes.

Default:

    250

## Example

Let's define a small uploader that can be used to store a file.

    from uploads import Store

    class Uploader:
        def save(self, data):
            return Store().put(data)

## Options

* `retention` - How long an uploaded file is kept. Defaults to `30 days`.
* `mirror` - Whether uploads are copied to the second region. Defaults to `False`.

!!! note "Quotas"

    Every uploader shares the team quota of 2000 megabytes.

See the [quota page][quotas] for the numbers.

## Scripts

Run `warm` before the first upload:

```
cache.warm()
```

Run `sweep` after the last upload:

```
cache.sweep()
```

Run `check` whenever uploads look slow:

```
cache.check()
```

## Routes

The router maps each URL style to an action of the viewset.

<table border=1>
<tr><th>The URL style of the route</th><th>The action of the viewset it runs</th></tr>
<tr><td>The prefix alone, for the whole list</td><td>The list of every object</td></tr>
<tr><td>The prefix and the lookup of one</td><td>Retrieving a single object</td></tr>
</table>

## Search

A search field may start with one of these characters:

| Prefix | Lookup | Meaning |
| --- | --- | --- |
| `^` | `istartswith` | Starts-with search. |
| `=` | `iexact` | Exact matches. |
| `@` | `search` | Full-text search. |

[quotas]: https://example.com/quotas
"""


class QuotesTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.staff, _, _ = base.make_users()
        cls.collection = base.collection_of(
            "Quotes",
            {
                "bikes.md": BIKES,
                "sailing.md": SAILING,
                "boats.md": BOATS,
                "tea.txt": TEA,
            },
        )

    def _ask(self, question: str) -> answerer.Answer:
        return answering.ask(self.collection, question)[1]

    def _cited_texts(self, reply: answerer.Answer) -> list[str]:
        self.assertTrue(reply.citations, reply.text)
        texts = dict(self.collection.sources.values_list("pk", "text"))
        return [texts[c.source_id][c.start : c.end] for c in reply.citations]

    def test_a_quoted_table_row_comes_under_its_table_s_header_line(self):
        reply = self._ask("How often should the cassette be replaced?")
        # The rows between the header and it are left out, and marked so.
        self.assertIn(
            "| Part | Interval |\n| --- | --- |\n| … | … |\n| Cassette | 9000 km |\n",
            reply.text,
        )

    def test_a_one_row_table_comes_with_its_header_line(self):
        reply = self._ask("When should I take the first reef?")
        self.assertIn("| 12-18 | First reef |", reply.text)
        self.assertIn("| Wind (knots) | Sail |\n|", reply.text)

    def test_the_ask_page_shows_a_quoted_row_as_a_table_with_its_header(self):
        self.client.force_login(self.staff)
        response = self.client.get(
            reverse("kb:ask"),
            {"q": "How often should the cassette be replaced?"},
        )
        self.assertContains(
            response,
            '<table class="quoted-row"><tr><th>Part</th><th>Interval</th></tr>'
            "<tr><td>…</td><td>…</td></tr>"
            "<tr><td>Cassette</td><td>9000 km</td></tr></table>",
            html=False,
        )

    def test_a_citation_covers_only_quoted_sentences(self):
        reply = self._ask("When do I reef the mainsail?")
        self.assertIn("Reef the mainsail as soon as", reply.text)
        self.assertIn("At night, reef the mainsail", reply.text)
        cited = self._cited_texts(reply)
        for text in cited:
            self.assertNotIn("galley stove", text)
            self.assertNotIn("Life jackets", text)
        # Each quoted sentence lies whole in its own citation's range.
        by_n = {c.n: text for c, text in zip(reply.citations, cited, strict=True)}
        for sentence in reply.sentences:
            self.assertIn(sentence.text, by_n[sentence.citation])

    def test_a_table_s_header_and_a_row_below_others_are_cited_apart(self):
        reply = self._ask("How often should the cassette be replaced?")
        cited = self._cited_texts(reply)
        self.assertIn("| Part | Interval |", cited)
        self.assertIn("| Cassette | 9000 km |", cited)
        for text in cited:
            self.assertNotIn("Chain", text)
            self.assertNotIn("Brake pads", text)
        # Sentences next to each other in the text share one range.
        reply = self._ask("How hot should the water be for green tea?")
        said = {s.text.split()[0]: s.citation for s in reply.sentences}
        self.assertIn("Green", said)
        self.assertIn("Boiling", said)
        self.assertEqual(said["Green"], said["Boiling"])

    def test_the_title_line_of_a_text_file_is_not_quoted(self):
        reply = self._ask("What does the tea brewing guide say about green tea?")
        self.assertIn("Green tea should be brewed", reply.text)
        self.assertNotIn("Tea brewing guide", reply.text)


class ChoiceTestCase(TestCase):
    """What an answer leaves out: chance matches, repeats, raw HTML."""

    @classmethod
    def setUpTestData(cls):
        files = {
            "hive.md": "# Beekeeping\n\n## Inspections\n\nInspect each beehive every "
            "seven days in spring and summer, and every three weeks in winter.\n",
            "faq.md": "# Office FAQ\n\nThis page answers the questions new people "
            "ask most often about the Lisbon office.\n",
            "tea.md": "# Tea\n\nGreen tea should be brewed at 75 degrees Celsius "
            "for two minutes.\n",
            "tea-copy.md": "# Tea (copy)\n\nGreen tea should be brewed at 75 degrees "
            "Celsius for two minutes.\n",
            "status.md": "# Status\n\n<https://status.example.com/incidents> lists "
            "current outages of the payment service.\n",
            "readme.md": '# Lumen\n\n<p align="center"><img src="https://x.example/'
            'logo.png" alt="Lumen logo"><a href="https://ci.example/"><img '
            'src="https://ci.example/badge.svg" alt="Build"></a></p>\n\nLumen is a '
            "static site generator that builds pages from Markdown.\n",
        }
        cls.collection = base.collection_of("Choice", files)

    def _ask(self, question: str) -> answerer.Answer:
        return answering.ask(self.collection, question)[1]

    def test_a_location_sharing_one_chance_word_is_left_out(self):
        reply = self._ask("How often should I inspect a beehive?")
        self.assertIn("Inspect each beehive every seven days", reply.text)
        self.assertNotIn("Lisbon office", reply.text)

    def test_the_same_sentence_in_two_sources_is_quoted_once(self):
        reply = self._ask("At what temperature should green tea be brewed?")
        self.assertEqual(reply.text.count("Green tea should be brewed at 75"), 1)

    def test_raw_html_is_not_quoted_as_a_sentence(self):
        reply = self._ask("What is Lumen?")
        self.assertIn("static site generator", reply.text)
        self.assertNotIn("<img", reply.text)
        self.assertNotIn("<p", reply.text)
        # A sentence opening with a link written <https://…> is text.
        reply = self._ask("Where are outages of the payment service listed?")
        self.assertIn("lists current outages of the payment service", reply.text)


class CodeAndListQuotesTestCase(TestCase):
    """Code quoted whole and as code, a "Default:" with its value, a list item
    with its name (issue #17's QA over DRF's docs)."""

    @classmethod
    def setUpTestData(cls):
        cls.settings = base.collection_of("Settings", {"settings.md": SETTINGS})
        keywords.count_terms(cls.settings)  # as the job after an ingestion does

    def _ask_settings(self, question: str) -> answerer.Answer:
        return answering.ask(self.settings, question)[1]

    def test_a_default_is_quoted_with_its_value(self):
        reply = self._ask_settings("What is the default value of UPLOAD_LIMIT?")
        self.assertIn("Default:\n\n```\n250\n```", reply.text)
        self.assertNotRegex(reply.text, r"Default: \[\d\]")

    def test_an_indented_code_block_is_quoted_whole_as_code(self):
        reply = self._ask_settings(
            "How do I define an uploader class that stores a file?"
        )
        self.assertIn(
            "```\nfrom uploads import Store\n\nclass Uploader:\n"
            "    def save(self, data):\n        return Store().put(data)\n```",
            reply.text,
        )
        texts = dict(self.settings.sources.values_list("pk", "text"))
        cited = [texts[c.source_id][c.start : c.end] for c in reply.citations]
        self.assertTrue(any("return Store().put(data)" in t for t in cited))

    def test_a_list_item_is_quoted_with_its_name(self):
        reply = self._ask_settings("How long is an uploaded file kept by default?")
        self.assertIn(
            "* `retention` - How long an uploaded file is kept. Defaults to `30 days`.",
            reply.text,
        )

    def test_admonition_content_is_text_and_link_definitions_are_no_sentence(self):
        reply = self._ask_settings("What quota do uploaders share?")
        self.assertIn(
            "Every uploader shares the team quota of 2000 megabytes.", reply.text
        )
        self.assertNotIn("```", reply.text)
        self.assertNotIn("https://example.com/quotas", reply.text)
        self.assertNotIn("!!! note", reply.text)

    def test_a_window_cutting_into_code_quotes_it_whole_never_a_piece(self):
        text = self.settings.sources.get().text
        inside = text.index("    class Uploader:")
        passage = base.loaded_passage(text, inside, len(text))
        quoted = [s.text for s in answerer.split_sentences(passage)]
        code = [q for q in quoted if "Uploader" in q or "Store" in q]
        first, last = SETTINGS.index("    from uploads"), SETTINGS.index("\n\n## Op")
        self.assertEqual(code, [SETTINGS[first:last]])
        self.assertIn("Every uploader shares the team quota of 2000 megabytes.", quoted)
        # A block longer than a location may grow to: left out, not cut.
        lines = "".join(f"    store.put({i})\n" for i in range(300))
        text = f"# Bulk\n\nStore many values at once.\n\n{lines}\nThat is all.\n"
        inside = text.index("    store.put(150)")
        passage = base.loaded_passage(text, inside, len(text))
        quoted = [s.text for s in answerer.split_sentences(passage)]
        self.assertEqual(quoted, ["That is all."])

    def test_an_operator_the_question_names_finds_its_table_row(self):
        reply = self._ask_settings("What does the ^ prefix mean for a search field?")
        self.assertIn("| `^` | `istartswith` | Starts-with search. |", reply.text)
        # The sentence introducing the table is the nearest in meaning: it
        # comes with its table, whole (issue #28), the row under its header.
        self.assertIn("| Prefix | Lookup | Meaning |\n| --- |", reply.text)

    def test_a_question_word_no_source_uses_is_named_in_a_warning(self):
        reply = self._ask_settings("Can uploads be mirrored to a GraphQL store?")
        self.assertIn("“GraphQL”", " ".join(reply.warnings))
        self.assertNotIn("“uploads”", " ".join(reply.warnings))
        self.assertTrue(reply.citations)  # still answered from the rest of it
        self.assertFalse(reply.is_trustworthy)  # but not about GraphQL
        reply = self._ask_settings("How long is an uploaded file kept?")
        self.assertEqual(reply.warnings, [])

    def test_a_question_none_of_whose_words_a_source_uses_is_declined(self):
        # Near enough by its vector (above KB_MIN_SIMILARITY), but no word of
        # it is in the source, nor one edit or two from one (a misspelling is
        # searched as the source's word, tests/test_spelling.py): nothing a
        # quote could share with it.
        question = "Uploadzzz retentionzzz durationzzz?"
        result, reply = answering.ask(self.settings, question)
        self.assertGreater(result.top_similarity, 0.3)
        self.assertEqual((reply.answerer, reply.citations), ("none", []))
        self.assertIn("any word of the question", reply.warnings[0])
        self.assertIn("“Uploadzzz”, “retentionzzz”, “durationzzz”", reply.warnings[0])

    def test_rows_of_two_citations_are_two_tables_and_a_skipped_row_is_marked(self):
        head = "| Prefix | Lookup | Meaning |\n| --- | --- | --- |\n"
        caret = "| `^` | `istartswith` | Starts-with search. |"
        at = "| `@` | `search` | Full-text search. |"
        text = SETTINGS
        passage = base.loaded_passage(text, 0, len(text))
        lines = {s.text.strip(): s for s in answerer.split_sentences(passage)}
        header, one, other = lines[head.split("\n")[0]], lines[caret], lines[at]
        for n, line in ((1, header), (1, one), (2, other)):
            line.citation, line.table = n, header.start
        quoted = answerer.answer_text([header, one, other])
        self.assertRegex(quoted, re.escape(head + caret) + r"\n\[1\]")
        self.assertRegex(quoted, re.escape(head + "| … | … | … |\n" + at) + r"\n\[2\]")

    def test_an_html_table_is_not_quoted_as_markup(self):
        reply = self._ask_settings("Which URL style does the router map to an action?")
        self.assertIn("The router maps each URL style", reply.text)
        self.assertNotIn("<t", reply.text)

    def test_plain_words_no_source_uses_are_not_named_and_numbers_count(self):
        # "instead" and "larger" are in no source, but they are plain English:
        # naming them would cast doubt on a right answer.
        reply = self._ask_settings("Why is the upload limit 250 instead of larger?")
        self.assertEqual(reply.warnings, [])
        self.assertTrue(reply.citations)
        # Only plain words the sources lack, beside a number they have: answered.
        reply = self._ask_settings("Why 250 instead?")
        self.assertNotEqual(reply.answerer, "none")

    def test_code_stands_on_lines_of_its_own_and_an_answer_holds_two_blocks(self):
        reply = self._ask_settings("Which cache scripts run around uploads?")
        self.assertEqual(reply.text.count("```") // 2, 2, reply.text)
        # Rendered as Markdown (an API client would), each block is code whole.
        html = rendering.render(reply.text)
        self.assertEqual(html.count("<pre><code>"), 2, html)
        self.assertNotIn("```", html)
        # On the ask page, a block after a marker keeps its lines' indentation.
        piece = answerer.marked_parts(reply.text, {})[0][0]
        self.assertIn("<pre><code>cache.", str(answer_piece(" " + piece)))


class DeletedSourceWordsTestCase(TransactionTestCase):
    # TransactionTestCase: the recount runs in a worker, which sees committed rows.

    @pytest.mark.slow
    def test_a_deleted_source_s_words_are_unknown_again(self):
        collection = Collection.objects.create(name="Zoo")
        base.ingest_text(
            collection, "keep.md", "# Keep\n\nThe keeper feeds the otters.\n"
        )
        base.ingest_text(
            collection, "gone.md", "# Gone\n\nThe zorblax sleeps all winter.\n"
        )
        keywords.count_terms(collection)
        reply = answering.ask(collection, "When does the keeper feed the zorblax?")[1]
        self.assertEqual(reply.warnings, [])
        collection.sources.get(file_name="gone.md").delete()
        base.run_burst_worker()  # the recount the deletion queued
        reply = answering.ask(collection, "When does the keeper feed the zorblax?")[1]
        self.assertIn("“zorblax”", " ".join(reply.warnings))


OPEN_SOURCE = """# Running an open source project

## Documentation

Every project should include the following documentation:

- A README that says what the project does and how to start
- A contributing guide for people who want to help
- A code of conduct that sets the rules of the community
- A license file that says how the code may be used

Keep them in the root of the repository, where people look first.

## Releases

Tag every release and write down what changed since the last one.
"""


class ListIntroTestCase(TestCase):
    """A sentence that introduces a list comes with the list, quoted as a list
    (issue #28)."""

    @classmethod
    def setUpTestData(cls):
        cls.guide = base.collection_of("Guide", {"open-source.md": OPEN_SOURCE})
        keywords.count_terms(cls.guide)

    def test_the_list_is_quoted_whole_after_its_introduction(self):
        _, reply = answering.ask(
            self.guide, "What documentation should every open source project include?"
        )
        intro = "Every project should include the following documentation:"
        self.assertIn(intro, reply.text)
        items = [
            "- A README that says what the project does and how to start",
            "- A contributing guide for people who want to help",
            "- A code of conduct that sets the rules of the community",
            "- A license file that says how the code may be used",
        ]
        after = reply.text[reply.text.index(intro) :]
        self.assertIn("\n\n" + "\n".join(items), after)
        cited = [c for c in reply.citations if c.heading_path.endswith("Documentation")]
        text = self.guide.sources.get().text
        self.assertTrue(
            any(items[-1][2:] in text[c.start : c.end] for c in cited),
            "the citation covers the list",
        )


class AskedFieldTestCase(TestCase):
    """QA over Doxygen pages: "What does TiXmlElement::QueryValueAttribute
    return?" quoted its description and QueryIntAttribute's sentences about
    what it returns, not its own "Returns:" line, which reads little like a
    sentence to the model."""

    @classmethod
    def setUpTestData(cls):
        from pathlib import Path

        from kb import ingestion, uploads

        cls.collection = Collection.objects.create(name="TinyXML")
        page = (
            Path(__file__).parent / "fixtures" / "real" / "doxygen16-TiXmlElement.html"
        )
        source, _ = uploads.store_source(
            cls.collection, "element.html", page.read_bytes()
        )
        ingestion.ingest(source.pk)

    def test_the_field_the_question_asks_of_the_named_member_is_quoted(self):
        _, reply = answering.ask(
            self.collection, "What does TiXmlElement::QueryValueAttribute return?"
        )
        self.assertIn(
            "Returns: TIXML_SUCCESS, TIXML_WRONG_TYPE, or TIXML_NO_ATTRIBUTE",
            reply.text,
        )
