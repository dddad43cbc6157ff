"""Named retrieval strategies: the default, the simple sections baseline and the
fixed-size baseline, in kb_eval and the dashboard's experiments (issue #17)."""

from __future__ import annotations

import json
import tempfile
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import TestCase, TransactionTestCase
from django.urls import reverse

from kb import retrieval
from kb.demo import CONTENT_DIR, GOLDEN_FILE, load_demo
from kb.models import Chunk, Collection, EvalRun, Section
from tests.base import make_users, run_burst_worker


class SectionsStrategyCommandTestCase(TestCase):
    def _eval(self, *args: str) -> dict:
        folder = Path(self.enterContext(tempfile.TemporaryDirectory()))
        out = StringIO()
        call_command(
            "kb_eval",
            "--cases",
            str(GOLDEN_FILE),
            "--corpus",
            str(CONTENT_DIR),
            "--json",
            str(folder / "out.json"),
            *args,
            stdout=out,
        )
        written = json.loads((folder / "out.json").read_text())
        return {"printed": out.getvalue(), **written}

    def test_kb_eval_runs_the_sections_baseline_on_the_demo(self):
        report = self._eval("--strategy", "sections", "--keep")
        self.assertIn("Config: sections pipeline", report["printed"])
        self.assertIn("recall@5", report["printed"])
        config, aggregate = report["config"], report["aggregate"]
        self.assertEqual(config["strategy"], "sections")
        self.assertEqual(
            (config["chunk_strategy"], config["chunk_tokens"]), ("structure", 120)
        )
        self.assertGreater(aggregate["recall_at_k"], 0.5)
        self.assertLessEqual(aggregate["context_tokens_mean"], 1200)
        for case in report["cases"]:
            # At most three sections, each whole or (the last) cut at the budget.
            self.assertLessEqual(len(case["retrieved"]), 3)
            self.assertLessEqual(case["context_tokens"], 1200)
            for passage in case["retrieved"]:
                starts = Section.objects.filter(
                    source__file_name=passage["file"], start=passage["start"]
                )
                self.assertTrue(starts.exists(), passage)
        # The 120-token index it was measured on.
        collection = Collection.objects.get()
        self.assertLessEqual(
            max(
                Chunk.objects.filter(source__collection=collection).values_list(
                    "text_tokens", flat=True
                )
            ),
            120,
        )

    def test_every_run_records_its_strategy(self):
        default = self._eval()
        self.assertEqual(default["config"]["strategy"], "default")
        self.assertIn(default["config"]["keyword_ranking"], ["bm25", "ts_rank"])
        self.assertEqual(default["config"]["section_weight"], 0.5)
        fixed = self._eval("--strategy", "fixed")
        self.assertEqual(fixed["config"]["strategy"], "fixed")
        self.assertEqual(fixed["config"]["chunk_tokens"], 800)


@pytest.mark.slow
class SectionsStrategyDashboardTestCase(TransactionTestCase):
    # TransactionTestCase: the worker is another process and sees only committed rows.

    def test_the_sections_baseline_is_selectable_on_the_dashboard(self):
        staff, _, _ = make_users()
        demo = load_demo(sync=True)
        self.client.force_login(staff)
        page = self.client.get(reverse("admin:kb_evalrun_dashboard"))
        self.assertContains(page, 'value="sections"')
        response = self.client.post(
            reverse("admin:kb_evalrun_run"),
            {"collection": demo.pk, "strategy": "sections"},
        )
        self.assertEqual(response.status_code, 302)
        run = EvalRun.objects.get()
        self.assertEqual(run.config["overrides"]["strategy"], "sections")
        run_burst_worker()
        run.refresh_from_db()
        self.assertEqual(run.status, EvalRun.Status.DONE, run.error)
        self.assertEqual(run.config["strategy"], "sections")
        self.assertEqual(run.config["chunk_tokens"], 120)
        self.assertTrue(run.config["scratch"])
        self.assertEqual(len(run.cases), demo.golden_cases.count())
        self.assertGreater(run.aggregate["recall_at_k"], 0.5)
        self.assertTrue(
            all(len(c["retrieved"]) <= retrieval.SECTIONS_K for c in run.cases)
        )
        page = self.client.get(
            reverse("admin:kb_evalrun_dashboard"), {"collection": demo.pk}
        )
        self.assertContains(page, "sections pipeline")
