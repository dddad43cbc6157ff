from __future__ import annotations

import json
import tempfile
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db.models.signals import post_save
from django.template.defaultfilters import floatformat
from django.test import SimpleTestCase, TestCase, TransactionTestCase
from django.urls import reverse

from kb import evaluation, golden, index_config, reindexing, uploads
from kb.demo import CONTENT_DIR, GOLDEN_FILE, load_demo
from kb.forms import EvalRunForm
from kb.models import Collection, EvalRun, ShadowIndex, Source
from tests.base import DemoTestCase, golden_span, make_users, run_burst_worker

FLOOR_FILE = Path(settings.BASE_DIR) / "evals" / "demo-floor.json"


class MeasureTestCase(SimpleTestCase):
    def test_a_span_is_covered_jointly_by_ranges_of_one_source(self):
        self.assertTrue(
            evaluation.covered(golden_span(), [("a.md", 0, 4), ("a.md", 4, 12)])
        )
        self.assertFalse(
            evaluation.covered(golden_span(), [("a.md", 0, 4), ("a.md", 5, 12)])
        )
        self.assertFalse(evaluation.covered(golden_span(), [("b.md", 0, 20)]))

    def test_an_alternative_span_is_equally_acceptable(self):
        span = golden_span(alternatives=[golden_span("b.md", 5, 9)])
        self.assertTrue(evaluation.covered(span, [("b.md", 0, 20)]))

    def test_a_hit_needs_every_span_and_partial_credit_counts_them(self):
        case = {"required_spans": [golden_span(), golden_span(start=50, end=60)]}
        half = evaluation.score_case(case, [[("a.md", 0, 20)]])
        self.assertEqual((half["hit"], half["partial"]), (False, 0.5))
        full = evaluation.score_case(case, [[("a.md", 0, 20)], [("a.md", 45, 70)]])
        self.assertEqual((full["hit"], full["first_hit_rank"]), (True, 2))

    def test_aggregates_report_recall_mrr_and_kinds(self):
        rows = [
            {
                "kind": "table",
                "hit": True,
                "partial": 1.0,
                "first_hit_rank": 2,
                "context_tokens": 100,
                "duplicates": 0,
                "latency_ms": 10.0,
            },
            {
                "kind": "tail",
                "hit": False,
                "partial": 0.5,
                "first_hit_rank": None,
                "context_tokens": 300,
                "duplicates": 1,
                "latency_ms": 30.0,
            },
        ]
        agg = evaluation.aggregate(rows, k=5)
        self.assertEqual(agg["recall_at_k"], 0.5)
        self.assertEqual(agg["mrr"], 0.25)
        self.assertEqual(agg["context_tokens_mean"], 200)
        self.assertEqual(agg["by_kind"]["table"]["recall_at_k"], 1.0)
        self.assertEqual(agg["recall_ci95"], [0.0945, 0.9055])

    def test_the_interval_narrows_with_more_cases(self):
        low, high = evaluation.wilson(27, 30)
        self.assertAlmostEqual(low, 0.7438, places=3)
        self.assertAlmostEqual(high, 0.9654, places=3)
        low, high = evaluation.wilson(270, 300)
        self.assertGreater(low, 0.86)
        self.assertLess(high, 0.93)
        self.assertEqual(evaluation.wilson(30, 30)[1], 1.0)

    def test_a_comparison_is_called_better_only_beyond_chance(self):
        def changed(gained, lost):
            return [{"after": True}] * gained + [{"after": False}] * lost

        five = evaluation.paired_difference(changed(5, 0))
        self.assertEqual((five["verdict"], five["p"]), ("within noise", 0.0625))
        six = evaluation.paired_difference(changed(6, 0))
        self.assertEqual((six["verdict"], six["p"]), ("better", 0.0312))
        self.assertEqual(
            evaluation.paired_difference(changed(1, 8))["verdict"], "worse"
        )
        self.assertEqual(evaluation.paired_difference([])["p"], 1.0)


class DemoSetTestCase(TestCase):
    """The demo's golden set, measured on the demo."""

    @classmethod
    def setUpTestData(cls):
        cls.demo = load_demo(sync=True)

    def test_the_demo_set_meets_its_floor_and_beats_the_fixed_baseline(self):
        cases = golden.parse_cases(GOLDEN_FILE.read_text("utf-8"))
        floor = json.loads(FLOOR_FILE.read_text())["recall_at_k"]
        default = evaluation.evaluate(self.demo, cases)["aggregate"]
        self.assertGreaterEqual(default["recall_at_k"], floor)

        baseline = evaluation.scratch_copy(
            self.demo, {"chunk_strategy": "fixed", "chunk_tokens": 800}
        )
        evaluation.index_all(baseline)
        fixed = evaluation.evaluate(baseline, cases)["aggregate"]
        self.assertLess(fixed["recall_at_k"], default["recall_at_k"])

    def test_a_finished_run_run_again_keeps_its_outcome(self):
        # A queue restored from an older snapshot runs finished jobs again.
        done = EvalRun.objects.create(
            collection=self.demo, status=EvalRun.Status.DONE, aggregate={"kept": 1}
        )
        evaluation.execute_run(done.pk)
        done.refresh_from_db()
        self.assertEqual((done.status, done.aggregate), ("done", {"kept": 1}))

    def test_the_extractive_answer_is_measured_against_the_evidence(self):
        cases = golden.parse_cases(GOLDEN_FILE.read_text("utf-8"))
        found = evaluation.evaluate(self.demo, cases)
        by_id = {case["id"]: case for case in found["cases"]}
        # One quoted sentence per sentence of the answer, each counted against
        # the case's spans: a quoted span is one its answer quotes from.
        known = by_id["def-roll-forward"]["answer"]
        self.assertEqual((known["spans"], known["spans_quoted"]), (1, 1))
        self.assertGreaterEqual(known["on_evidence"], 1)
        for case in found["cases"]:
            answer = case["answer"]
            self.assertLessEqual(answer["spans_quoted"], answer["spans"])
            self.assertLessEqual(answer["on_evidence"], answer["sentences"])
        aggregate = found["aggregate"]
        quoted = [
            c["answer"]["spans_quoted"] / c["answer"]["spans"] for c in found["cases"]
        ]
        self.assertAlmostEqual(
            aggregate["answer_span_recall"], sum(quoted) / len(quoted), places=3
        )
        self.assertGreater(aggregate["answer_span_recall"], 0.5)
        self.assertGreater(aggregate["answer_precision"], 0.2)


@pytest.mark.slow
class DashboardTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees only committed rows.

    def test_the_button_runs_an_evaluation_in_a_worker_and_shows_it(self):
        staff, _, _ = make_users()
        demo = load_demo(sync=True)
        self.client.force_login(staff)
        response = self.client.post(
            reverse("admin:kb_evalrun_run"), {"collection": demo.pk}
        )
        self.assertEqual(response.status_code, 302)
        run = EvalRun.objects.get()
        self.assertEqual(run.status, EvalRun.Status.QUEUED)
        run_burst_worker()
        run.refresh_from_db()
        self.assertEqual(run.status, EvalRun.Status.DONE, run.error)
        page = self.client.get(
            reverse("admin:kb_evalrun_dashboard"), {"collection": demo.pk}
        )
        self.assertContains(page, f"Run #{run.pk}: recall@5")
        self.assertContains(page, "Failed cases")
        low, high = (floatformat(x, 2) for x in run.aggregate["recall_ci95"])
        self.assertContains(page, f"({low}–{high})")

    def test_the_floor_is_only_ever_raised(self):
        staff, _, _ = make_users()
        collection = Collection.objects.create(name="C")
        high = EvalRun.objects.create(
            collection=collection, status="done", aggregate={"recall_at_k": 0.9}
        )
        low = EvalRun.objects.create(
            collection=collection, status="done", aggregate={"recall_at_k": 0.5}
        )
        self.client.force_login(staff)
        self.client.post(reverse("admin:kb_evalrun_floor", args=[high.pk]))
        self.client.post(reverse("admin:kb_evalrun_floor", args=[low.pk]))
        collection.refresh_from_db()
        self.assertEqual(collection.recall_floor, 0.9)
        page = self.client.get(reverse("admin:kb_evalrun_dashboard"))
        self.assertContains(page, "below floor")

    def test_the_floor_can_apply_to_the_answers(self):
        """Issue #28: a run whose retrieval holds but whose answers quote fewer
        spans is below a floor on the answers, with the cases it lost named, and
        a shadow index is held by it too (kb.reindexing.decide)."""
        staff, _, _ = make_users()
        collection = Collection.objects.create(name="C", floor_on="answer")

        def run(quoted: list[bool]) -> EvalRun:
            cases = [
                {
                    "id": f"c{i}",
                    "question": f"Question {i}?",
                    "kind": "tail",
                    "hit": True,
                    "answer_hit": whole,
                    "answer": {
                        "spans": 1,
                        "spans_quoted": int(whole),
                        "sentences": 1,
                        "on_evidence": int(whole),
                        "words": 20,
                    },
                }
                for i, whole in enumerate(quoted)
            ]
            return EvalRun.objects.create(
                collection=collection,
                status="done",
                cases=cases,
                aggregate={
                    "k": 5,
                    "n": len(quoted),
                    "recall_at_k": 1.0,
                    "answer_all_spans": sum(quoted),
                },
            )

        good, worse = run([True, True, True, False]), run([True, False, True, False])
        self.client.force_login(staff)
        self.client.post(reverse("admin:kb_evalrun_floor", args=[good.pk]))
        collection.refresh_from_db()
        floors = (collection.recall_floor, collection.answer_floor)
        self.assertEqual(floors, (1.0, 0.75))
        # Same recall, fewer answers whole: no floor to raise from it.
        self.assertFalse(evaluation.can_raise_floor(collection, worse))
        self.assertEqual(evaluation.below_floor(collection, worse), ["answer"])
        page = self.client.get(
            reverse("admin:kb_evalrun_dashboard"),
            {"collection": collection.pk, "run": worse.pk},
        )
        self.assertContains(page, "answers below the answer floor of 0.750")
        self.assertContains(
            page, "answer floor (cases quoting every span): <strong>0.750</strong>"
        )
        self.assertContains(page, "<li>c1 (its answer): Question 1?</li>")
        # A shadow index whose answers fall below it waits for an admin.
        shadow = ShadowIndex.objects.create(
            collection=collection, status=ShadowIndex.Status.EVALUATING
        )
        self.assertEqual(
            reindexing.decide(shadow, worse, good),
            "held: answers quoting every span 0.500 < the answer floor 0.750",
        )
        shadow.refresh_from_db()
        self.assertEqual([c["id"] for c in shadow.regressed], ["c1"])
        # A floor on retrieval alone lets the same run by.
        collection.floor_on = "retrieval"
        collection.save()
        self.assertEqual(evaluation.below_floor(collection, worse), [])


class DashboardFormTestCase(TestCase):
    def test_a_refused_setting_is_said_plainly_and_kept_in_the_form(self):
        staff, _, _ = make_users()
        collection = Collection.objects.create(name="C")
        self.client.force_login(staff)
        response = self.client.post(
            reverse("admin:kb_evalrun_run"),
            {"collection": collection.pk, "chunk_tokens": "5000"},
        )
        self.assertContains(
            response,
            "Not started: Chunk tokens: Chunks need 16 to 254 tokens: the model "
            "reads 254 besides [CLS] and [SEP]",
            status_code=400,
        )
        self.assertContains(response, 'value="5000"', status_code=400)
        self.assertFalse(EvalRun.objects.exists())


class ExperimentFormTestCase(TestCase):
    """The dashboard's experiments refuse the chunking a collection refuses (a run
    is labelled with the settings it was built with), the fixed-size baseline
    apart, which exceeds the window on purpose."""

    def setUp(self):
        self.collection = Collection.objects.create(name="C")

    def _errors(self, **fields) -> dict[str, str]:
        form = EvalRunForm({"collection": self.collection.pk, **fields})
        form.is_valid()
        return {field: " ".join(errors) for field, errors in form.errors.items()}

    def test_it_refuses_chunks_past_the_window_and_overlap_past_half(self):
        self.assertIn(
            "Chunks need 16 to 254 tokens",
            self._errors(chunk_tokens=1000)["chunk_tokens"],
        )
        self.assertIn(
            "An overlap of 200 tokens is over half of a 100-token chunk",
            self._errors(chunk_tokens=100, chunk_overlap=200)["chunk_overlap"],
        )
        # The collection's own overlap, under the chunks tried.
        Collection.objects.filter(pk=self.collection.pk).update(chunk_overlap=80)
        self.assertIn(
            "over half of a 100-token chunk",
            self._errors(chunk_tokens=100)["chunk_tokens"],
        )
        self.assertEqual(self._errors(top_k=8), {})  # retrieval only: not rebuilt
        staff, _, _ = make_users()
        self.client.force_login(staff)
        self.client.post(
            reverse("admin:kb_evalrun_run"),
            {"collection": self.collection.pk, "chunk_tokens": 1000},
        )
        self.assertFalse(EvalRun.objects.exists())

    def test_the_fixed_size_baseline_stays_selectable(self):
        form = EvalRunForm({"collection": self.collection.pk, "strategy": "fixed"})
        self.assertTrue(form.is_valid(), form.errors)
        self.assertEqual(form.overrides()["chunk_tokens"], 800)
        self.assertEqual(self._errors(chunk_strategy="fixed", chunk_tokens=800), {})
        too_big = self._errors(strategy="fixed", chunk_tokens=5000)
        self.assertIn("Fixed-size chunks need 16 to 2000", too_big["chunk_tokens"])


class ComparisonTestCase(TestCase):
    def _run(self, collection, hits, quoted=None):
        cases = [
            {"id": f"c{i}", "question": f"Question {i}?", "kind": "tail", "hit": hit}
            for i, hit in enumerate(hits)
        ]
        aggregate = {"k": 5, "n": len(hits), "recall_at_k": sum(hits) / len(hits)}
        if quoted is not None:  # the answers measured (issue #28)
            for case, whole in zip(cases, quoted, strict=True):
                case["answer"] = {
                    "spans": 1,
                    "spans_quoted": int(whole),
                    "sentences": 2,
                    "on_evidence": int(whole),
                    "words": 40,
                }
            aggregate["answer_all_spans"] = sum(quoted)
        return EvalRun.objects.create(
            collection=collection, status="done", cases=cases, aggregate=aggregate
        )

    def test_the_answers_are_compared_with_their_own_test(self):
        staff, _, _ = make_users()
        collection = Collection.objects.create(name="C")
        hits = [True] * 10
        a = self._run(collection, hits, [False] * 9 + [True])
        b = self._run(collection, hits, [True] * 10)
        self.client.force_login(staff)
        page = self.client.get(
            reverse("admin:kb_evalrun_dashboard"),
            {"collection": collection.pk, "a": a.pk, "b": b.pk},
        )
        self.assertContains(page, "Cases that changed outcome (0)")
        self.assertContains(page, "Answers that changed outcome (9)")
        self.assertContains(
            page, "B's answer quotes every span in 9 cases where A's did not"
        )
        self.assertContains(page, "B's answers are better")
        self.assertContains(page, "(exact McNemar test, p = 0.0039)")
        self.assertContains(
            page, "<th>answer: cases quoting every span</th><td>1</td><td>10</td>"
        )
        old = self._run(collection, hits)  # made before answers were measured
        page = self.client.get(
            reverse("admin:kb_evalrun_dashboard"),
            {"collection": collection.pk, "a": old.pk, "b": b.pk},
        )
        self.assertNotContains(page, "Answers that changed outcome")

    def test_two_runs_side_by_side_say_whether_the_difference_is_noise(self):
        staff, _, _ = make_users()
        collection = Collection.objects.create(name="C")
        a = self._run(collection, [False] * 6 + [True] * 4)
        b = self._run(collection, [True] * 6 + [True] * 3 + [False])
        self.client.force_login(staff)
        url = reverse("admin:kb_evalrun_dashboard")
        page = self.client.get(url, {"collection": collection.pk, "a": a.pk, "b": b.pk})
        self.assertContains(page, "Cases that changed outcome (7)")
        self.assertContains(page, "B answers 6 cases A missed and misses 1 A answered")
        self.assertContains(page, "within noise")
        # Figures side by side are named and rounded for people, not keys.
        self.assertContains(page, "<th>recall@k</th><td>0.400</td><td>0.900</td>")
        self.assertNotContains(page, "context_tokens_mean")
        page = self.client.get(url, {"collection": collection.pk, "a": b.pk, "b": a.pk})
        self.assertContains(page, "B answers 1 case A missed and misses 6 A answered")
        self.assertNotContains(page, "not like for like")

        other = self._run(collection, [True] * 8)  # two cases fewer
        other.config = {"top_k": 8, "context_budget": 1200}
        other.save()
        page = self.client.get(
            url, {"collection": collection.pk, "a": a.pk, "b": other.pk}
        )
        self.assertContains(
            page,
            "not like for like here (k ? vs 8; context budget ? vs 1200; "
            "2 case(s) only in the earlier run)",
        )


class KbEvalCommandTestCase(TestCase):
    """The shell interface benchmarks and CI drive: options and JSON as in #7."""

    def setUp(self):
        self.folder = Path(self.enterContext(tempfile.TemporaryDirectory()))

    def _eval(self, *args: str) -> str:
        out = StringIO()
        call_command(
            "kb_eval",
            "--cases",
            str(GOLDEN_FILE),
            "--corpus",
            str(CONTENT_DIR),
            *args,
            stdout=out,
        )
        return out.getvalue()

    def test_it_writes_the_issue_json_and_compares_with_a_baseline(self):
        default = self.folder / "default.json"
        foreign = self.folder / "foreign.jsonl"
        foreign.write_text(
            '{"id": "f1", "question": "What is the capital of Australia?"}\n'
            '{"id": "f2", "question": "How do I center a div in CSS?"}\n'
        )
        printed = self._eval("--json", str(default), "--unanswerable", str(foreign))
        self.assertIn("recall@5", printed)
        self.assertIn("95% CI", printed)
        self.assertIn("extractive answer: quotes from", printed)
        report = json.loads(default.read_text())
        self.assertEqual(report["config"]["chunk_strategy"], "structure")
        aggregate = report["aggregate"]
        for key in [
            "k",
            "recall_at_k",
            "partial",
            "mrr",
            "context_tokens_mean",
            "duplicates_mean",
            "latency_p50_ms",
            "latency_p95_ms",
            "by_kind",
            "recall_ci95",
            "answer_span_recall",
            "answer_precision",
        ]:
            self.assertIn(key, aggregate)
        self.assertEqual(aggregate["k"], 5)
        self.assertEqual(
            set(aggregate["by_kind"]["table"]),
            set(aggregate) - {"k", "by_kind", "real_questions"},
        )
        # No case of a golden file made from a logged question (issue #18).
        self.assertEqual(aggregate["real_questions"], {"n": 0})
        case = report["cases"][0]
        for key in ["id", "hit", "partial", "first_hit_rank", "retrieved"]:
            self.assertIn(key, case)
        self.assertLessEqual(
            {"file", "start", "end", "heading_path"}, set(case["retrieved"][0])
        )
        # Questions from elsewhere are declined; the demo's own cases are not.
        self.assertEqual(report["unanswerable"]["declined"], 2)
        self.assertIn("Unanswerable questions declined: 2 of 2", printed)
        self.assertEqual(aggregate["declined"], 0)
        # The scratch collection is gone; nothing of the run stays in the database.
        self.assertFalse(Collection.objects.exists())

        fixed = self.folder / "fixed.json"
        printed = self._eval(
            "--strategy",
            "fixed",
            "--max-tokens",
            "800",
            "--baseline",
            str(default),
            "--json",
            str(fixed),
        )
        compared = json.loads(fixed.read_text())["baseline"]
        before = {c["id"]: c["hit"] for c in report["cases"]}
        after = {c["id"]: c["hit"] for c in json.loads(fixed.read_text())["cases"]}
        gained = sorted(i for i in after if after[i] and not before[i])
        lost = sorted(i for i in after if before[i] and not after[i])
        self.assertEqual(sorted(compared["gained_ids"]), gained)
        self.assertEqual(sorted(compared["lost_ids"]), lost)
        self.assertIn(f"Against {default}", printed)
        self.assertIn(compared["verdict"], printed)
        for case_id in lost:
            self.assertIn(f"now missed: {case_id}", printed)
        # The answers are compared too (issue #28), with their own test.
        held = {c["id"]: c["answer_hit"] for c in report["cases"]}
        now = {c["id"]: c["answer_hit"] for c in json.loads(fixed.read_text())["cases"]}
        answers = compared["answer"]
        self.assertEqual(
            sorted(answers["gained_ids"]),
            sorted(i for i in now if now[i] and not held[i]),
        )
        self.assertEqual(
            sorted(answers["lost_ids"]),
            sorted(i for i in now if held[i] and not now[i]),
        )
        self.assertIn(
            f"Answers quoting every span: {aggregate['answer_all_spans']} -> ", printed
        )
        self.assertIn(f"{answers['verdict']} (exact McNemar test", printed)

    def test_files_an_upload_would_refuse_are_named_and_the_run_goes_on(self):
        # An empty placeholder or a table of contents in a corpus ended the whole
        # run with a traceback; the upload page refuses such files one by one.
        corpus = self.folder / "corpus"
        corpus.mkdir()
        good = "# Guide\n\nThe quick brown fox jumps over the lazy dog each morning.\n"
        (corpus / "good.md").write_text(good)
        (corpus / "empty.md").write_text("")
        (corpus / "toc.md").write_text("# Index\n\n## A\n\n## B\n")
        at = good.index("The quick")
        case = {
            "id": "c1",
            "question": "What does the fox jump over?",
            "required_spans": [
                golden_span("good.md", at, len(good) - 1, text=good[at:-1])
            ],
        }
        cited_empty = {
            "id": "c2",
            "question": "What does the empty file say?",
            "required_spans": [golden_span("empty.md", 0, 1)],
        }
        cases = self.folder / "cases.jsonl"
        cases.write_text(json.dumps(case) + "\n" + json.dumps(cited_empty) + "\n")
        out, err = StringIO(), StringIO()
        call_command(
            "kb_eval",
            "--cases",
            str(cases),
            "--corpus",
            str(corpus),
            stdout=out,
            stderr=err,
        )
        self.assertIn("warning: empty.md left out: empty.md is empty", err.getvalue())
        self.assertIn("warning: toc.md failed: toc.md has no text", err.getvalue())
        self.assertIn("Indexed 1 of 3 files", out.getvalue())
        # A case citing a file left out is a listed miss; the others are scored.
        self.assertIn("recall@5 0.500", out.getvalue())
        missed = "c2: empty.md[0:1]: no indexed source of that name"
        self.assertIn(missed, out.getvalue())

    def _two_languages(self) -> tuple[Path, Path]:
        """A corpus of one page in en/ and its French copy in fr/, and a case on
        each (the English one also citing a French sentence as an alternative,
        and one on both pages)."""
        corpus = self.folder / "corpus"
        pages = {
            "en/guide.md": "# Guide\n\nThe backup runs every night at two.\n",
            "fr/guide.md": "# Guide\n\nLa sauvegarde tourne la nuit à deux heures.\n",
        }
        spans = {}
        for name, text in pages.items():
            (corpus / name).parent.mkdir(parents=True, exist_ok=True)
            (corpus / name).write_text(text, "utf-8")
            at = text.index("\n\n") + 2
            spans[name] = golden_span(name, at, len(text) - 1, text=text[at:-1])
        cases = [
            {
                "id": "fr-only",
                "question": "Quand tourne la sauvegarde ?",
                "required_spans": [spans["fr/guide.md"]],
            },
            {
                "id": "en-only",
                "question": "When does the backup run?",
                "required_spans": [spans["en/guide.md"]],
            },
            {
                "id": "en-or-fr",
                "question": "When does the backup run?",
                "required_spans": [
                    {**spans["en/guide.md"], "alternatives": [spans["fr/guide.md"]]}
                ],
            },
            {
                "id": "both",
                "question": "When does the backup run?",
                "required_spans": [spans["en/guide.md"], spans["fr/guide.md"]],
            },
        ]
        path = self.folder / "cases.jsonl"
        path.write_text("".join(json.dumps(c) + "\n" for c in cases), "utf-8")
        return corpus, path

    def test_include_ingests_only_matching_files_and_lists_cases_left_out(self):
        corpus, cases = self._two_languages()
        out = StringIO()
        report = self.folder / "out.json"
        call_command(
            "kb_eval",
            "--cases",
            str(cases),
            "--corpus",
            str(corpus),
            "--include",
            "fr/**",
            "--json",
            str(report),
            "--keep",
            stdout=out,
        )
        printed = out.getvalue()
        collection = Collection.objects.get()
        self.assertEqual(
            list(collection.sources.values_list("file_name", flat=True)),
            ["fr/guide.md"],  # the name keeps its folder, as the spans do
        )
        self.assertIn("--include takes 1 of 2 corpus files.", printed)
        # The French case and the one with a French alternative are scored; a
        # case needing the English page cannot be answered and is not a miss.
        written = json.loads(report.read_text())
        self.assertEqual(
            sorted(c["id"] for c in written["cases"]), ["en-or-fr", "fr-only"]
        )
        self.assertEqual(written["aggregate"]["n"], 2)
        self.assertIn("Left out by --include: 2 case(s)", printed)
        self.assertIn("  en-only: en/guide.md is not included", printed)
        self.assertIn("  both: en/guide.md is not included", printed)
        self.assertEqual(set(written["left_out"]), {"en-only", "both"})
        self.assertEqual(written["config"]["include"], ["fr/**"])

    def test_include_is_repeatable_and_refuses_an_empty_selection(self):
        corpus, cases = self._two_languages()
        out = StringIO()
        call_command(
            "kb_eval",
            "--cases",
            str(cases),
            "--corpus",
            str(corpus),
            "--include",
            "fr/*",
            "--include",
            "en/*",
            stdout=out,
        )
        self.assertIn("--include takes 2 of 2 corpus files.", out.getvalue())
        self.assertIn("(n=4)", out.getvalue())
        self.assertNotIn("Left out", out.getvalue())
        with self.assertRaisesMessage(CommandError, "matches none of the 2 files"):
            call_command(
                "kb_eval",
                "--cases",
                str(cases),
                "--corpus",
                str(corpus),
                "--include",
                "de/**",
                stdout=StringIO(),
            )
        (corpus / "notes.txt").write_text("Notes on nothing asked here.\n")
        with self.assertRaisesMessage(
            CommandError, "leaves out the evidence of all 4 cases"
        ):
            call_command(
                "kb_eval",
                "--cases",
                str(cases),
                "--corpus",
                str(corpus),
                "--include",
                "*.txt",
                stdout=StringIO(),
            )
        self.assertFalse(Collection.objects.exists())

    def test_a_bad_unanswerable_file_is_refused_before_any_work(self):
        bad = self.folder / "bad.jsonl"
        bad.write_text('{"id": "x"}\n')
        message = 'line 1: needs "id" and "question"'
        with self.assertRaisesMessage(CommandError, message):
            self._eval("--unanswerable", str(bad))
        self.assertFalse(Collection.objects.exists())

    def test_cases_or_a_baseline_json_cannot_read_are_refused_naming_them(self):
        cases = self.folder / "cases.jsonl"
        cases.write_text(
            GOLDEN_FILE.read_text("utf-8").splitlines()[0] + "\n" + "[" * 100000 + "\n"
        )
        with self.assertRaisesMessage(CommandError, "line 2 is nested too deeply"):
            call_command(
                "kb_eval",
                "--cases",
                str(cases),
                "--corpus",
                str(CONTENT_DIR),
                stdout=StringIO(),
            )
        baseline = self.folder / "baseline.json"
        baseline.write_text('{"aggregate": ' + "1" * 5000 + "}")
        with self.assertRaisesMessage(CommandError, "holds a number too long"):
            self._eval("--baseline", str(baseline))
        self.assertFalse(Collection.objects.exists())

    def test_a_file_that_is_not_a_baseline_is_refused_before_any_work(self):
        bad = self.folder / "bad.json"
        bad.write_text('{"aggregate": {}}')
        created = []

        def record(sender, instance, **kwargs):
            created.append(instance.name)

        post_save.connect(record, sender=Collection)
        self.addCleanup(post_save.disconnect, record, sender=Collection)
        with self.assertRaisesMessage(CommandError, "not a kb_eval --json file"):
            self._eval("--baseline", str(bad))
        self.assertEqual(created, [])  # no scratch collection was even made

    def test_a_baseline_on_other_cases_is_flagged_as_not_like_for_like(self):
        earlier = self.folder / "earlier.json"
        self._eval("--json", str(earlier))
        report = json.loads(earlier.read_text())
        report["cases"] = report["cases"][:5]
        earlier.write_text(json.dumps(report))
        printed = self._eval("--baseline", str(earlier))
        total = len(golden.parse_cases(GOLDEN_FILE.read_text("utf-8")))
        self.assertIn(f"{total - 5} case(s) only in the later run", printed)


class LiveConfigurationTestCase(DemoTestCase):
    """Runs say what they measured: the index as built, or an experiment."""

    def _run(self, overrides=None) -> EvalRun:
        run = evaluation.start_run(self.demo, overrides)
        return evaluation.execute_run(run.pk)

    def test_a_failed_indexing_leaves_the_index_out_of_date(self):
        source = self.demo.sources.first()
        Source.objects.filter(pk=source.pk).update(status=Source.Status.FAILED)
        listed = self.client.get(reverse("admin:kb_collection_changelist"))
        self.assertContains(
            listed,
            "1 source(s) failed their last indexing, 1 searched in their previous "
            "version",
        )

    def test_a_source_that_failed_and_was_never_indexed_leaves_it_up_to_date(self):
        failed, _ = uploads.store_source(self.demo, "frontonly.md", b"---\nx: 1\n---\n")
        Source.objects.filter(pk=failed.pk).update(status=Source.Status.FAILED)
        self.assertEqual(index_config.index_differences(self.demo), [])
        listed = self.client.get(reverse("admin:kb_collection_changelist"))
        self.assertContains(listed, "up to date")
        self.assertNotContains(listed, "failed their last indexing")
        self.assertEqual(self._run().config["index_out_of_date"], [])

    def test_a_chunking_experiment_copies_only_the_sources_in_the_live_index(self):
        failed, _ = uploads.store_source(self.demo, "frontonly.md", b"---\nx: 1\n---\n")
        Source.objects.filter(pk=failed.pk).update(status=Source.Status.FAILED)
        run = self._run({"chunk_tokens": 120})
        self.assertEqual(run.status, EvalRun.Status.DONE, run.error)
        self.assertEqual(run.config["sources_left_out"], ["frontonly.md"])
        dashboard = self.client.get(reverse("admin:kb_evalrun_dashboard"))
        self.assertContains(
            dashboard,
            "1 source(s) not in the live index left out of the copy (frontonly.md)",
        )

    def test_new_chunk_settings_leave_the_index_out_of_date_until_reindexed(self):
        Collection.objects.filter(pk=self.demo.pk).update(chunk_tokens=120)
        listed = self.client.get(reverse("admin:kb_collection_changelist"))
        self.assertContains(listed, "out of date")
        self.assertContains(
            listed, "chunk_tokens 200 in the index, 120 in the settings"
        )
        page = self.client.get(
            reverse("admin:kb_collection_change", args=[self.demo.pk])
        )
        self.assertContains(
            page, reverse("admin:kb_collection_reindex", args=[self.demo.pk])
        )

        run = self._run()
        self.assertEqual(run.config["chunk_tokens"], 200)  # what was measured
        dashboard = self.client.get(reverse("admin:kb_evalrun_dashboard"))
        self.assertContains(dashboard, "structure 200 tok")
        self.assertContains(dashboard, "index out of date")

        evaluation.index_all(Collection.objects.get(pk=self.demo.pk))
        listed = self.client.get(reverse("admin:kb_collection_changelist"))
        self.assertContains(listed, "up to date")
        self.assertEqual(self._run().config["chunk_tokens"], 120)

    def test_k_budget_and_mode_are_tried_on_the_live_index_without_a_copy(self):
        made = []

        def record(sender, instance, created, **kwargs):
            if created:
                made.append(instance.name)

        post_save.connect(record, sender=Collection)
        self.addCleanup(post_save.disconnect, record, sender=Collection)
        run = self._run({"top_k": 3, "context_budget": 600, "retrieval_mode": "vector"})
        self.assertEqual(made, [])  # no scratch copy
        self.assertEqual(run.status, EvalRun.Status.DONE)
        self.assertEqual(run.aggregate["k"], 3)
        self.assertLessEqual(run.aggregate["context_tokens_mean"], 600)
        config = run.config
        self.assertEqual((config["top_k"], config["context_budget"]), (3, 600))
        self.assertEqual(config["retrieval_mode"], "vector")
        self.assertFalse(config["scratch"])

    def test_the_headline_and_the_floor_are_about_the_live_configuration(self):
        live = EvalRun.objects.create(
            collection=self.demo,
            status="done",
            config={"overrides": {}},
            aggregate={"k": 5, "recall_at_k": 0.8},
        )
        experiment = EvalRun.objects.create(
            collection=self.demo,
            status="done",
            aggregate={"k": 5, "recall_at_k": 0.9},
            config={"overrides": {"chunk_tokens": 120}, "scratch": True},
        )
        url = reverse("admin:kb_evalrun_dashboard")
        page = self.client.get(url)
        self.assertContains(page, f"Run #{live.pk}: recall@5 0.800")
        self.assertContains(page, "<title>0.800</title>", html=False)
        self.assertNotContains(page, "<title>0.900</title>", html=False)  # chart
        self.assertContains(page, "experiment")
        self.assertContains(page, f'form="floor-{live.pk}"')
        self.assertNotContains(page, f'form="floor-{experiment.pk}"')

        self.client.post(reverse("admin:kb_evalrun_floor", args=[experiment.pk]))
        self.assertIsNone(Collection.objects.get(pk=self.demo.pk).recall_floor)
        self.client.post(reverse("admin:kb_evalrun_floor", args=[live.pk]))
        self.assertEqual(Collection.objects.get(pk=self.demo.pk).recall_floor, 0.8)

    def test_a_failed_run_or_a_run_with_itself_is_not_compared(self):
        done = EvalRun.objects.create(
            collection=self.demo, status="done", aggregate={"recall_at_k": 0.8}
        )
        failed = EvalRun.objects.create(
            collection=self.demo, status="failed", error="QuestionError: too long"
        )
        url = reverse("admin:kb_evalrun_dashboard")
        page = self.client.get(url, {"a": done.pk, "b": failed.pk})
        self.assertContains(page, f"Run #{failed.pk} failed: only finished runs")
        self.assertNotContains(page, "within noise")
        page = self.client.get(url, {"a": done.pk, "b": done.pk})
        self.assertContains(page, "Choose two different runs")
        self.assertNotContains(page, "within noise")


class AnswerFiguresTestCase(TestCase):
    """The dashboard shows how the answer did, beside retrieval, and says of a
    failed case whether retrieval or the answer missed (issue #28)."""

    def test_a_case_whose_retrieval_holds_but_whose_answer_misses_is_shown(self):
        staff, _, _ = make_users()
        collection = Collection.objects.create(name="Answers")
        cases = [
            {
                "id": "found",
                "question": "Found and quoted?",
                "kind": "tail",
                "hit": True,
                "partial": 1.0,
                "retrieved": [],
                "answer": {
                    "spans": 1,
                    "spans_quoted": 1,
                    "sentences": 2,
                    "on_evidence": 1,
                    "words": 30,
                },
            },
            {
                "id": "list",
                "question": "Which documents?",
                "kind": "tail",
                "hit": True,
                "partial": 1.0,
                "retrieved": [],
                "answer": {
                    "spans": 2,
                    "spans_quoted": 1,
                    "sentences": 3,
                    "on_evidence": 1,
                    "words": 50,
                },
            },
            {
                "id": "lost",
                "question": "Not retrieved?",
                "kind": "tail",
                "hit": False,
                "partial": 0.5,
                "retrieved": [],
                "answer": {
                    "spans": 2,
                    "spans_quoted": 0,
                    "sentences": 3,
                    "on_evidence": 0,
                    "words": 40,
                },
            },
        ]
        aggregate = {
            "k": 5,
            "n": 3,
            "recall_at_k": 2 / 3,
            "answer_span_recall": 0.5,
            "answer_all_spans": 1,
            "answer_precision": 0.25,
            "answer_words_mean": 40.0,
        }
        run = EvalRun.objects.create(
            collection=collection, status="done", cases=cases, aggregate=aggregate
        )
        old = EvalRun.objects.create(  # made before answers were measured
            collection=collection,
            status="done",
            cases=cases[:1],
            aggregate={"k": 5, "n": 1, "recall_at_k": 1.0},
        )
        self.client.force_login(staff)
        page = self.client.get(
            reverse("admin:kb_evalrun_dashboard"),
            {"collection": collection.pk, "run": run.pk},
        )
        self.assertContains(page, "answer all spans")
        figures = page.content.decode().split(f"#{run.pk}</a>")[1].split("</tr>")[0]
        for cell in ("<td>0.500</td>", "<td>0.333</td>", "<td>0.250</td>"):
            self.assertIn(cell, figures)
        self.assertContains(page, "quotes <strong>0.500</strong> of the required spans")
        self.assertContains(page, "(all of them in 1 of 3 cases)")
        self.assertContains(page, "Failed cases (2)")
        self.assertContains(
            page, "retrieval held every span; the answer missed: it quotes 1 of 2"
        )
        self.assertContains(page, "retrieval missed: 0.50 of spans covered")
        self.assertNotContains(page, "<strong>found</strong>")
        row = page.content.decode().split(f"#{old.pk}</a>")[1].split("</tr>")[0]
        self.assertEqual(row.count("<td>–</td>"), 3)
