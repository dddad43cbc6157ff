"""The golden sets in evals/ hold exactly the evidence they claim (issue #7).

kb_eval refuses a case whose span text differs from its source, so a broken line
would only show when someone runs the benchmark; these checks catch it at once.
The sets on ../shared/corpora skip when it is absent; the Starlette sets point into
evals/corpora/, which ships with the repository, so their checks always run.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import TestCase

from django.conf import settings

from kb import golden
from tests.base import SHARED, needs_shared

EVALS = Path(settings.BASE_DIR) / "evals"
# Each set and the corpus folder (in ../shared/corpora) its spans point into.
SETS = {
    "handbook.jsonl": "handbook",
    "handbook-holdout.jsonl": "handbook",
    "rq-docs.jsonl": "rq-docs",
    "rq-docs-holdout.jsonl": "rq-docs",
    "poetry-docs.jsonl": "poetry-docs",
    "poetry-docs-holdout.jsonl": "poetry-docs",
}
# Sets whose corpus ships inside the repository, in evals/corpora.
REPO_SETS = {
    "starlette-docs.jsonl": "starlette-docs",
    "starlette-docs-holdout.jsonl": "starlette-docs",
    # Issue #27: the same Kubernetes pages in four languages (evals/README.md).
    "kubernetes-en.jsonl": "kubernetes-docs",
    "kubernetes-fr.jsonl": "kubernetes-docs",
    "kubernetes-es.jsonl": "kubernetes-docs",
    "kubernetes-ru.jsonl": "kubernetes-docs",
    "kubernetes-cross.jsonl": "kubernetes-docs",
    "kubernetes-fr-holdout.jsonl": "kubernetes-docs",
    "kubernetes-es-holdout.jsonl": "kubernetes-docs",
    "kubernetes-ru-holdout.jsonl": "kubernetes-docs",
    "kubernetes-cross-holdout.jsonl": "kubernetes-docs",
    # Issue #29: reference content (evals/README.md).
    "jopt-simple-javadoc.jsonl": "jopt-simple-javadoc",
    "jopt-simple-javadoc-holdout.jsonl": "jopt-simple-javadoc",
    "mutt-manual.jsonl": "mutt-manual",
    "mutt-manual-holdout.jsonl": "mutt-manual",
    "cncf-glossary.jsonl": "cncf-glossary",
    "cncf-glossary-holdout.jsonl": "cncf-glossary",
    # Issue #29: incident reports (evals/README.md).
    "incident-postmortems.jsonl": "incident-postmortems",
    "incident-postmortems-holdout.jsonl": "incident-postmortems",
}


def _read(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.read()


class GoldenFilesChecks:
    """The checks, run by the test cases below over their `sets` in `corpora`."""

    sets: dict[str, str]
    corpora: Path

    def test_each_span_is_its_file_slice_and_occurs_once(self):
        for name, corpus in self.sets.items():
            cases = golden.parse_cases(_read(EVALS / name))
            for case in cases:
                for span in case["required_spans"]:
                    with self.subTest(set=name, case=case["id"], file=span["file"]):
                        text = _read(self.corpora / corpus / span["file"])
                        self.assertEqual(
                            text[span["start"] : span["end"]], span["text"]
                        )
                        self.assertEqual(text.count(span["text"]), 1)

    def test_ids_are_unique_and_every_kind_is_known(self):
        for name in self.sets:
            raw = [json.loads(line) for line in _read(EVALS / name).splitlines()]
            ids = [case["id"] for case in raw]
            self.assertEqual(len(ids), len(set(ids)), name)
            self.assertLessEqual(
                {case["kind"] for case in raw}, set(golden.KINDS), name
            )

    def test_held_out_spans_overlap_no_tuning_span(self):
        # Each X-holdout.jsonl against its tuned X.jsonl.
        for name in sorted(n for n in self.sets if n.endswith("-holdout.jsonl")):
            tuned = self._spans(name.replace("-holdout.jsonl", ".jsonl"))
            for file, start, end in self._spans(name):
                for other, lo, hi in tuned:
                    self.assertFalse(
                        file == other and start < hi and lo < end,
                        f"{name} {file}:{start}-{end} overlaps {lo}-{hi}",
                    )

    def test_no_two_spans_of_one_set_overlap(self):
        for name in self.sets:
            spans = sorted(self._spans(name))
            for (file, start, end), (other, lo, hi) in zip(spans, spans[1:]):
                self.assertFalse(
                    file == other and lo < end,
                    f"{name} {file}:{start}-{end} overlaps {lo}-{hi}",
                )

    def _spans(self, name: str) -> list[tuple[str, int, int]]:
        cases = golden.parse_cases(_read(EVALS / name))
        return [
            (s["file"], s["start"], s["end"])
            for case in cases
            for s in case["required_spans"]
        ]


@needs_shared(SHARED / "corpora")
class GoldenFilesTestCase(GoldenFilesChecks, TestCase):
    sets = SETS
    corpora = SHARED / "corpora"


class RepoGoldenFilesTestCase(GoldenFilesChecks, TestCase):
    sets = REPO_SETS
    corpora = EVALS / "corpora"

    def test_every_set_in_evals_is_checked(self):
        self.assertEqual({p.name for p in EVALS.glob("*.jsonl")}, {*SETS, *REPO_SETS})


class SharedFolderTestCase(TestCase):
    """A test that needs ../shared skips without it on a developer's machine,
    and fails under CI, which has it (issue #31)."""

    def test_it_skips_here_and_fails_under_ci(self):
        import unittest

        from tests.base import environment, shared_or_skip

        missing = SHARED / "no-such-folder"
        with environment(CI=""):
            with self.assertRaises(unittest.SkipTest):
                shared_or_skip(missing)
        with environment(CI="1"):
            with self.assertRaisesRegex(AssertionError, "no-such-folder is absent"):
                shared_or_skip(missing)
        shared_or_skip(Path(__file__))  # present: nothing happens
