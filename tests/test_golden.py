"""Golden cases (kb/golden.py): what a golden file must hold, importing and
exporting them, and spans whose source text changed."""

from __future__ import annotations

import json

from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import SimpleTestCase, TestCase
from django.urls import reverse

from kb import evaluation, golden, ingestion
from kb.demo import load_demo
from kb.models import GoldenCase, Source
from tests.base import DemoTestCase, golden_span, make_users


def _line(**fields) -> str:
    case = {
        "id": "c1",
        "question": "What is a seat?",
        "kind": "definition",
        "required_spans": [golden_span("glossary.md", 0, 4)],
        **fields,
    }
    return json.dumps(case)


class GoldenParseTestCase(SimpleTestCase):
    """What a golden file must hold; each refusal names the line and the case."""

    def assertRefused(self, jsonl: str, *words: str):
        with self.assertRaises(golden.GoldenImportError) as caught:
            golden.parse_cases(jsonl)
        for word in words:
            self.assertIn(word, str(caught.exception))

    def test_a_question_the_ask_path_would_refuse_is_refused(self):
        self.assertRefused(
            _line(question="why " * 5000), "line 1", "c1", "the limit is 1000"
        )
        many_tokens = "ab " * 333  # 999 characters, a token each
        self.assertRefused(_line(question=many_tokens), "c1", "the model reads 256")

    def test_an_id_longer_than_the_column_is_refused(self):
        self.assertRefused(_line(id="x" * 101), "line 1", "xxxx", "the limit is 100")

    def test_an_unknown_kind_is_refused_with_the_known_ones(self):
        self.assertRefused(
            _line(kind="tabel"),
            "line 1",
            "c1",
            "'tabel'",
            "definition, procedure",
            "tail, date",
            "action, free",
        )
        no_kind = json.loads(_line())
        del no_kind["kind"]
        self.assertEqual(golden.parse_cases(json.dumps(no_kind))[0]["kind"], "free")

    def test_the_incident_report_kinds_are_accepted(self):
        # Issue #29: golden sets over incident reports ask by date, across
        # reports, and for a cause, an impact or an action.
        for kind in ["date", "across_documents", "cause", "impact", "action"]:
            with self.subTest(kind=kind):
                self.assertEqual(golden.parse_cases(_line(kind=kind))[0]["kind"], kind)

    def test_a_repeated_id_is_refused_with_both_lines(self):
        self.assertRefused(_line() + "\n\n" + _line(), "line 3", "c1", "line 1")

    def test_offsets_must_be_whole_numbers(self):
        for bad in [2827.7, 3.0, True, "4", None]:
            with self.subTest(bad=bad):
                span = golden_span("glossary.md", 0, bad)
                self.assertRefused(
                    _line(required_spans=[span]), "line 1", "c1", "whole number"
                )

    def test_a_span_whose_offsets_make_no_range_says_what_is_wrong(self):
        for start, end, why in [
            (10, 5, "span 10-5 ends before it starts"),
            (4, 4, "span 4-4 is empty"),
            (-1, 4, "span -1-4 starts before the text"),
        ]:
            with self.subTest(why=why):
                span = golden_span("glossary.md", start, end)
                self.assertRefused(_line(required_spans=[span]), "line 1, case c1", why)

    def test_a_byte_order_mark_is_accepted(self):
        self.assertEqual(len(golden.parse_cases("\ufeff" + _line())), 1)

    def test_a_span_field_of_the_wrong_json_type_is_refused_naming_it(self):
        good = golden_span("glossary.md", 0, 4)
        for bad, why in [
            ({"alternatives": 5}, "'alternatives' must be a list of spans, not 5"),
            ({"alternatives": True}, "must be a list of spans, not true"),
            ({"alternatives": {"file": "a"}}, "must be a list of spans, not an object"),
            ({"alternatives": [5]}, "an alternative must be an object with file"),
            ({"alternatives": ["x"]}, "an alternative must be an object with file"),
            (
                {"alternatives": [{**good, "alternatives": [good]}]},
                "an alternative cannot have 'alternatives' of its own",
            ),
            (
                {"alternatives": [{**good, "file": 7}]},
                "an alternative's 'file' must be text, not 7",
            ),
            ({"file": ["a.md"]}, "a span's 'file' must be text, not a list"),
            ({"text": 12}, "a span's 'text' must be text, not 12"),
        ]:
            with self.subTest(why=why):
                span = {**good, **bad}
                self.assertRefused(_line(required_spans=[span]), "line 1, case c1", why)
        for spans in [[5], ["glossary.md"], [[good]]]:
            with self.subTest(spans=spans):
                self.assertRefused(
                    _line(required_spans=spans),
                    "line 1, case c1",
                    "a span must be an object with file",
                )
        self.assertRefused(
            _line(required_spans={"a": 1}),
            "line 1, case c1",
            "'required_spans' must be a list",
        )
        alternative = golden_span("glossary.md", 10, 14)
        [case] = golden.parse_cases(
            _line(
                required_spans=[
                    {**good, "alternatives": [alternative]},
                    {**good, "alternatives": None},
                ]
            )
        )
        self.assertEqual(
            case["required_spans"], [{**good, "alternatives": [alternative]}, good]
        )

    def test_a_case_field_of_the_wrong_json_type_is_refused_naming_it(self):
        for bad, why in [
            ({"id": True}, "line 1: the id must be text, not true"),
            ({"id": {"x": 1}}, "line 1: the id must be text, not an object"),
            ({"question": ["Why?"]}, "line 1, case c1: 'question' must be text"),
            ({"kind": 3}, "line 1, case c1: 'kind' must be text, not 3"),
            ({"kind": ["free"]}, "line 1, case c1: 'kind' must be text, not a list"),
            ({"real_question": "yes"}, "'real_question' must be true/false, not"),
            ({"on_answer": 1}, "'on_answer' must be true/false, not 1"),
        ]:
            with self.subTest(why=why):
                self.assertRefused(_line(**bad), why)
        self.assertRefused("[1, 2]", "line 1: expected a JSON object, not a list")
        # Numbered cases are read as text, as eval files written elsewhere have them.
        self.assertEqual(golden.parse_cases(_line(id=5))[0]["id"], "5")

    def test_text_postgresql_cannot_store_is_refused_naming_the_field(self):
        nul = "contains a NUL character (\\x00)"
        surrogate = "contains a lone surrogate (such as \\ud800)"
        bad_span = golden_span("glossary.md", 0, 4)
        for fields, why in [
            ({"id": "a\x00b"}, f"line 1: the id {nul}"),
            ({"id": "a\ud800b"}, f"line 1: the id {surrogate}"),
            ({"question": "Why\x00?"}, "line 1, case c1: The question contains a NUL"),
            ({"kind": "free\x00"}, f"line 1, case c1: 'kind' {nul}"),
            ({"kind": "\udfff"}, f"line 1, case c1: 'kind' {surrogate}"),
            (
                {"required_spans": [{**bad_span, "file": "a\x00.md"}]},
                f"line 1, case c1: a span's 'file' {nul}",
            ),
            (
                {"required_spans": [{**bad_span, "text": "\ud800"}]},
                f"line 1, case c1: a span's 'text' {surrogate}",
            ),
            (
                {
                    "required_spans": [
                        {**bad_span, "alternatives": [{**bad_span, "text": "x\x00"}]}
                    ]
                },
                f"line 1, case c1: an alternative's 'text' {nul}",
            ),
        ]:
            with self.subTest(why=why):
                # json.dumps writes the lone surrogate as the escape "\ud800".
                self.assertRefused(_line(**fields), why)

    def test_a_file_of_blank_lines_holds_no_cases(self):
        self.assertRefused("\n  \n\t\n", "the file holds no cases")
        self.assertRefused("", "the file holds no cases")


class GoldenImportTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.demo = load_demo(sync=True)

    def test_a_span_whose_text_does_not_match_is_an_error_naming_the_case(self):
        spans = [golden_span("refund-policy.md", 0, 5)]
        line = json.dumps({"id": "bad-one", "question": "q?", "required_spans": spans})
        with self.assertRaisesMessage(golden.GoldenImportError, "bad-one"):
            golden.import_cases(self.demo, line)

    def test_unknown_keys_are_ignored_and_export_round_trips(self):
        exported = golden.export_cases(self.demo)
        first = json.loads(exported.splitlines()[0])
        first["reviewer"] = "someone"
        report = golden.import_cases(self.demo, json.dumps(first))
        self.assertEqual(report["unchanged"], 1)
        self.assertEqual(
            report["ignored"],
            [f'line 1, case {first["id"]}: case key "reviewer" ignored'],
        )

    def test_a_misspelt_key_is_reported_with_the_one_it_is_likely_for(self):
        # "alternative" for "alternatives" dropped a requirement unseen.
        exported = json.loads(golden.export_cases(self.demo).splitlines()[0])
        span = dict(exported["required_spans"][0])
        exported["knd"] = "definition"
        exported["required_spans"] = [{**span, "alternative": [span]}]
        line = json.dumps(exported)
        notes = golden.ignored_keys(golden.parse_cases(line))
        where = f"line 1, case {exported['id']}"
        self.assertEqual(
            notes,
            [
                f"{where}: case key \"knd\" ignored (did you mean 'kind'?)",
                f'{where}: span key "alternative" ignored '
                "(did you mean 'alternatives'?)",
            ],
        )
        staff, _, _ = make_users()
        self.client.force_login(staff)
        page = self.client.post(
            reverse("admin:kb_goldencase_import"),
            {
                "collection": self.demo.pk,
                "file": SimpleUploadedFile("g.jsonl", line.encode()),
            },
            follow=True,
        )
        self.assertContains(page, "did you mean &#x27;alternatives&#x27;?")


class StaleSpansTestCase(DemoTestCase):
    """Golden spans after their source's text is edited or the source deleted."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.runbook = cls.demo.sources.get(file_name="deployment-runbook.md")

    def _edit(self, text: str) -> None:
        """What the source form does: a new version of the text, then indexing."""
        source = Source.objects.get(pk=self.runbook.pk)
        source.text = text
        source.version += 1
        source.save()
        ingestion.ingest(source.pk)

    def _friday_spans(self) -> list[dict]:
        return GoldenCase.objects.get(external_id="friday-deploy").required_spans

    def test_spans_whose_text_is_still_there_once_move_with_it(self):
        self._edit(self.runbook.text.replace("\n\n", "\n\nA new opening line.\n\n", 1))
        span = self._friday_spans()[0]
        text = Source.objects.get(pk=self.runbook.pk).text
        self.assertEqual(text[span["start"] : span["end"]], span["text"])
        self.assertEqual(golden.stale_cases(self.demo), [])
        # Export, then import again: nothing to refuse, nothing changed.
        report = golden.import_cases(self.demo, golden.export_cases(self.demo))
        self.assertEqual(report["unchanged"], GoldenCase.objects.count())

    def test_a_span_whose_text_went_is_flagged_and_left_out_of_runs(self):
        sentence = self._friday_spans()[0]["text"]
        self._edit(self.runbook.text.replace(sentence, "Deploys are never frozen."))
        [stale] = golden.stale_cases(self.demo)
        self.assertEqual(stale["id"], "friday-deploy")
        self.assertIn("no longer in deployment-runbook.md", stale["problems"][0])

        run = evaluation.start_run(self.demo)
        evaluation.execute_run(run.pk)
        run.refresh_from_db()
        total = GoldenCase.objects.count()
        self.assertEqual(run.aggregate["n"], total - 1)  # not counted as a miss
        self.assertNotIn("friday-deploy", [c["id"] for c in run.cases])
        self.assertEqual(
            [c["id"] for c in run.config["stale_cases"]], ["friday-deploy"]
        )

        flag = "1 case has spans that no longer match their source"
        page = self.client.get(reverse("admin:kb_evalrun_dashboard"))
        self.assertContains(page, flag)
        self.assertContains(page, f"1 of {total} cases left out")
        self.assertContains(
            page, f"{total} golden cases (1 left out of runs until their spans"
        )
        cases = self.client.get(reverse("admin:kb_goldencase_changelist"))
        self.assertContains(cases, flag)
        self.assertContains(cases, "friday-deploy")
        case = GoldenCase.objects.get(external_id="friday-deploy")
        page = self.client.get(reverse("admin:kb_goldencase_change", args=[case.pk]))
        self.assertContains(page, "its text is no longer in deployment-runbook.md")

    def test_deleting_a_source_warns_of_the_golden_cases_using_it(self):
        url = reverse("admin:kb_source_delete", args=[self.runbook.pk])
        page = self.client.get(url)
        self.assertContains(page, "golden cases use this source")
        self.assertContains(page, "friday-deploy")
        several = self.client.post(
            reverse("admin:kb_source_changelist"),
            {"action": "delete_selected", "_selected_action": [self.runbook.pk]},
        )
        self.assertContains(several, "golden cases use these sources")
        self.client.post(url, {"post": "yes"})
        problems = {c["id"]: c["problems"] for c in golden.stale_cases(self.demo)}
        self.assertIn("friday-deploy", problems)
        self.assertIn("deployment-runbook.md is gone", problems["friday-deploy"][0])
