"""Golden spans located by their text (kb_eval --match text, issue #16)."""

from __future__ import annotations

import json
import tempfile
from io import StringIO
from pathlib import Path

from django.core.management import call_command
from django.test import SimpleTestCase, TestCase

from kb import parsing, readers, spans
from kb.benchmarks import formats
from kb.demo import CONTENT_DIR, GOLDEN_FILE


def _found(span_text: str, text: str, hint: float = 0.0) -> str:
    start, end = spans.locate(span_text, text, hint)
    return text[start:end]


class LocateTestCase(SimpleTestCase):
    def test_it_ignores_link_targets_emphasis_and_backticks(self):
        markdown = "See [the *refund* form](https://x.test/refunds) for `amount_due`."
        read_back = "Intro.\n\nSee the refund form for amount\\_due.\n"
        self.assertEqual(
            _found(markdown, read_back), "See the refund form for amount\\_due"
        )

    def test_it_finds_a_span_split_across_table_rows_written_otherwise(self):
        markdown = "| Plan | Cost |\n|---|---|\n| Dental | 100% |\n| Vision | 50% |\n"
        span = markdown[markdown.index("100%") : markdown.index("50%") + 3]
        read_back = (
            "| Plan   | Cost |\n| ------ | ---- |\n"
            "| Dental | 100% |\n| Vision | 50%  |\n"
        )
        self.assertEqual(_found(span, read_back), "100% |\n| Vision | 50")

    def test_it_ignores_line_wrapping_and_words_hyphenated_at_line_ends(self):
        span = "set aside pre-tax money\nfor out-of-pocket medical expenses"
        pdf_text = (
            "You can set aside pre-\ntax money for out-of-\npocket medical expenses."
        )
        self.assertEqual(
            _found(span, pdf_text),
            "set aside pre-\ntax money for out-of-\npocket medical expenses",
        )

    def test_it_ignores_heading_marks_list_numbers_and_html_entities(self):
        markdown = (
            "## Steps\n\n1. Drain the queue &amp; wait\n1. Deploy caf&eacute; v2\n"
        )
        read_back = "Steps\n\n1. Drain the queue & wait\n2. Deploy café v2\n"
        self.assertEqual(_found(markdown, read_back), read_back.strip())

    def test_it_takes_the_occurrence_nearest_the_expected_place(self):
        text = "Call the lead. " + "x " * 200 + "Call the lead. " + "y " * 200
        second = text.index("Call", 1)
        self.assertEqual(spans.locate("call the LEAD", text, 0.9)[0], second)
        self.assertEqual(spans.locate("call the LEAD", text, 0.0)[0], 0)

    def test_it_reports_a_span_whose_words_are_not_there(self):
        with self.assertRaisesMessage(spans.Unlocatable, "not in the text"):
            spans.locate("roll forward", "Roll back at once.")
        with self.assertRaisesMessage(spans.Unlocatable, "no words"):
            spans.locate("| --- |", "Roll back at once.")

    def test_relocate_finds_cited_text_moved_by_an_edit(self):
        old = "Intro.\n\nInspect each hive every nine days.\n"
        new = "Intro.\n\n## Safety\n\nKeep an epipen.\n\n" + old[8:]
        start, end = spans.relocate(old[8:42], new, 8)
        self.assertEqual(new[start:end], "Inspect each hive every nine days.")
        # Rewrapped or re-marked, the same words are found; other words are not.
        rewrapped = "Inspect *each* hive\nevery nine days."
        self.assertIsNotNone(spans.relocate(old[8:42], rewrapped, 8))
        self.assertIsNone(spans.relocate(old[8:42], "Inspect weekly.", 8))

    def test_relocate_keeps_text_still_at_its_place_among_many_copies(self):
        text = "".join(f"Row {i:05d}: Yes.\n" for i in range(3000))
        at = text.index("Row 01500: Yes.") + len("Row 01500: ")
        self.assertEqual(spans.relocate("Yes.", text, at), (at, at + 4))
        # Moved by an edit above it, the nearest copy wins, however many there are.
        moved = "New\n" + text
        self.assertEqual(spans.relocate("Yes.", moved, at), (at + 4, at + 8))

    def test_relocate_takes_the_occurrence_nearest_the_cited_place(self):
        text = "Call the lead. " + "x " * 50 + "Call the lead. "
        self.assertEqual(spans.relocate("Call the lead.", text, 100)[0], 115)
        self.assertEqual(spans.relocate("Call the lead.", text, 3)[0], 0)

    def test_a_golden_file_name_matches_its_rendering_by_stem(self):
        self.assertTrue(spans.same_document("docs/workers.md", "docs/workers.pdf"))
        self.assertTrue(spans.same_document("docs/workers.md", "docs/workers.md"))
        self.assertFalse(spans.same_document("docs/workers.md", "workers.pdf"))
        self.assertFalse(spans.same_document("docs/workers.md", "docs/work.pdf"))

    def test_it_is_linear_in_the_text(self):
        # A quadratic search would take minutes here: 2 MB of near misses.
        text = "a" * 2_000_000
        with self.assertRaises(spans.Unlocatable):
            spans.locate("a" * 5_000 + "b", text)


class MatchTextCommandTestCase(TestCase):
    """One golden file (offsets into the demo's Markdown) scores the demo and its
    HTML rendering alike."""

    def setUp(self):
        self.folder = Path(self.enterContext(tempfile.TemporaryDirectory()))
        self.html = self.folder / "html"
        self.html.mkdir()
        for path in CONTENT_DIR.iterdir():
            page = formats.render_html(path.read_text("utf-8"), path.stem)
            (self.html / f"{path.stem}.html").write_text(page, "utf-8")
        lost = {
            "id": "lost",
            "question": "How do I roll forward?",
            "required_spans": [
                {"file": "glossary.md", "start": 0, "end": 12, "text": "Nowhere text"}
            ],
        }
        self.cases = self.folder / "cases.jsonl"
        self.cases.write_text(
            GOLDEN_FILE.read_text("utf-8") + json.dumps(lost) + "\n", "utf-8"
        )

    def _eval(self, corpus: Path, name: str) -> tuple[str, dict]:
        out, report = StringIO(), self.folder / f"{name}.json"
        call_command(
            "kb_eval",
            "--cases",
            str(self.cases),
            "--corpus",
            str(corpus),
            "--match",
            "text",
            "--json",
            str(report),
            stdout=out,
        )
        return out.getvalue(), json.loads(report.read_text("utf-8"))

    def test_it_scores_markdown_and_its_html_rendering_alike(self):
        printed_md, md = self._eval(CONTENT_DIR, "md")
        printed_html, html = self._eval(self.html, "html")
        # The span that is nowhere is reported, counted apart and a miss: not
        # silently dropped. Every other span is found in both formats.
        for printed, report in [(printed_md, md), (printed_html, html)]:
            self.assertIn("Unlocatable: 1 case(s)", printed)
            self.assertIn("lost: glossary.md[0:12]", printed)
            self.assertEqual(report["aggregate"]["unlocatable"], 1)
            lost = next(c for c in report["cases"] if c["id"] == "lost")
            self.assertFalse(lost["hit"])
            self.assertEqual(len(lost["unlocatable"]), 1)
            self.assertEqual(report["config"]["match"], "text")
        self.assertEqual(md["aggregate"]["n"], html["aggregate"]["n"])
        self.assertGreater(md["aggregate"]["recall_at_k"], 0.8)
        # Same text, same chunks: the same cases are hits in both formats.
        hits = {c["id"]: c["hit"] for c in md["cases"]}
        self.assertEqual({c["id"]: c["hit"] for c in html["cases"]}, hits)

    def test_json_lists_the_text_handed_to_the_answerer(self):
        _, report = self._eval(CONTENT_DIR, "md")
        for case in report["cases"][:5]:
            for passage in case["retrieved"]:
                source = (CONTENT_DIR / passage["file"]).read_text("utf-8")
                self.assertTrue(passage["text"].strip())
                self.assertEqual(
                    passage["text"], source[passage["start"] : passage["end"]]
                )


class LocateCasesTestCase(TestCase):
    """Golden cases moved onto a collection's converted sources."""

    def setUp(self):
        from kb.models import Collection, Source

        self.collection = Collection.objects.create(name="Converted")
        Source.objects.create(
            collection=self.collection,
            title="Deploy",
            file_name="ops/deploy.pdf",
            text="# Deploy\n\nRoll back when the error rate\nrises above 2%.\n",
            content_hash="x",
        )

    def test_it_moves_spans_to_the_rendering_and_reports_the_rest(self):
        from kb import evaluation, golden

        markdown = "# Deploy\n\nRoll *back* when the error rate rises above 2%.\n"
        start = markdown.index("Roll")
        found = {
            "file": "ops/deploy.md",
            "start": start,
            "end": start + 30,
            "text": markdown[start : start + 30],
        }
        gone = {"file": "ops/deploy.md", "start": 0, "end": 9, "text": "Roll fwd"}
        cases = [
            {"id": "a", "required_spans": [{**gone, "alternatives": [found]}]},
            {"id": "b", "required_spans": [found, gone]},
        ]
        located, problems = golden.locate_cases(self.collection, cases)
        span = located[0]["required_spans"][0]
        self.assertEqual(
            (span["file"], span["text"]),
            ("ops/deploy.pdf", "Roll back when the error rat"),
        )
        self.assertNotIn("a", problems)  # an alternative was found: nothing lost
        self.assertEqual(
            problems["b"], ["ops/deploy.md[0:9]: its words are not in the text"]
        )
        # The lost span stays required and cannot be covered: the case misses.
        score = evaluation.score_case(located[1], [[("ops/deploy.pdf", 0, 999)]])
        self.assertEqual((score["hit"], score["partial"]), (False, 0.5))


class RenderCorpusTestCase(SimpleTestCase):
    """kb_bench formats --recall renders a corpus so golden spans find its files."""

    def test_it_keeps_paths_and_stems_and_shows_the_front_matter_title(self):
        folder = Path(self.enterContext(tempfile.TemporaryDirectory()))
        (folder / "src" / "docs").mkdir(parents=True)
        (folder / "src" / "docs" / "jobs.md").write_text(
            '---\ntitle: "RQ: Jobs"\n---\n\nJobs are *functions*.\n', "utf-8"
        )
        failed = formats.render_corpus(folder / "src", folder / "out", "html")
        self.assertEqual(failed, [])
        page = (folder / "out" / "docs" / "jobs.html").read_text("utf-8")
        self.assertIn("<h1>RQ: Jobs</h1>", page)
        self.assertIn("<em>functions</em>", page)

    def test_it_shows_the_front_matter_title_above_a_later_level_1_heading(self):
        # kb titles a converted file by its first heading if that is a level-1
        # one: a "# Name" further down the page must not stand for the title.
        folder = Path(self.enterContext(tempfile.TemporaryDirectory()))
        (folder / "src").mkdir()
        (folder / "src" / "exceptions.md").write_text(
            '---\ntitle: "RQ: Exceptions"\n---\n\n## Retries\n\nRetry jobs.\n\n'
            "# AbandonedJobError\n\nRaised when a worker dies.\n",
            "utf-8",
        )
        self.assertEqual(
            formats.render_corpus(folder / "src", folder / "out", "html"), []
        )
        page = (folder / "out" / "exceptions.html").read_bytes()
        text = readers.read("exceptions.html", page).text
        self.assertTrue(text.startswith("# RQ: Exceptions\n\n## Retries\n"), text)
        self.assertEqual(parsing.markdown_title(text), "RQ: Exceptions")
