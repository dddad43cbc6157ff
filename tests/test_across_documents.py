"""A question about several records gets several records (issue #29):
"Which incidents involved a LimitRange?" over incident reports must bring the
reports that mention one, not five sections of the report that mentions it
most."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.test import SimpleTestCase, TestCase

from kb import retrieval
from kb.retrieval.question import across_documents
from tests.base import collection_of

# Incident reports written for this test. The first dwells on its LimitRange in
# every section; each of the next three names one in passing.
LONG_REPORT = """---
date: 2022-09-06
---
# All services returning 503 in Kubernetes

## Summary

A LimitRange in the payments namespace set a default memory limit of 64 MiB.
Pods created after the LimitRange was applied were killed on start.

## Timeline

- 09:12 The LimitRange was applied by the namespace template.
- 09:40 Alerts fired for the payments pods; the LimitRange was not suspected.
- 10:15 The LimitRange default was found in the pod specs and removed.

## Root cause

The namespace template gained a LimitRange with a default limit far below what
the payments service needs. Nothing reviewed the LimitRange before release.

## Remediation

The LimitRange was deleted, the pods restarted, and the template now sets a
LimitRange default of 512 MiB with a review step.

## Lessons

Check LimitRange defaults in every namespace template. A LimitRange applies to
new pods only, so its effect shows late.
"""
SHORT_REPORTS = {
    "2022-11-21-ingress.md": """---
date: 2022-11-21
---
# Ingress controller restarts

## Summary

The ingress controller restarted every few minutes because its readiness probe
timed out under load. A LimitRange also capped its CPU request, which the team
raised. The probe timeout was increased and the controller scaled out.
""",
    "2023-02-14-dns.md": """---
date: 2023-02-14
---
# Cluster DNS failures

## Summary

CoreDNS pods were evicted during a node drain and name resolution failed for
eight minutes. Their namespace had a LimitRange whose default request left them
in the lowest eviction class. A PodDisruptionBudget now keeps two replicas up.
""",
    "2023-05-03-registry.md": """---
date: 2023-05-03
---
# Image pulls failing

## Summary

Image pulls failed after the registry certificate expired. Builds queued for
an hour. A LimitRange in the build namespace was adjusted at the same time, but
the certificate was the cause. Certificates are now renewed automatically.
""",
    "2023-08-09-disk.md": """---
date: 2023-08-09
---
# Node disks full

## Summary

Three nodes filled their disks with container logs and went NotReady. Log
rotation was enabled on every node and an alert now fires at 80 % usage.
""",
}


def _undated(text: str) -> str:
    return text.split("---\n", 2)[2]


class AcrossDocumentsQuestionTestCase(SimpleTestCase):
    def test_questions_about_several_records(self):
        for question in [
            "Which incidents involved a LimitRange?",
            "Which of the outages were caused by certificates?",
            "Quels incidents ont touché le DNS ?",
            "Quelles pannes ont duré plus d'une heure ?",
            "¿Qué incidentes afectaron al DNS?",
            "¿Cuáles fallos tuvieron que ver con certificados?",
            "Какие инциденты затронули DNS?",
        ]:
            with self.subTest(question):
                self.assertTrue(across_documents(question))

    def test_other_questions(self):
        for question in [
            "Which flag sets the namespace?",
            "What happens when a LimitRange is applied?",
            "What caused the outage on 6 September?",
            "Which is the default memory limit?",
            "Quel incident a touché le DNS ?",
            "¿Qué pasa con los pods?",
            "Какой инцидент затронул DNS?",
            "How does a LimitRange work?",
        ]:
            with self.subTest(question):
                self.assertFalse(across_documents(question))


class AcrossDocumentsRetrievalTestCase(TestCase):
    QUESTION = "Which incidents involved a LimitRange?"

    def _sections(self, collection) -> list[tuple[str, str]]:
        """(file, heading path) of each section in the context."""
        result = retrieval.retrieve(collection, self.QUESTION, k=4)
        return [
            (passage.file_name, location.heading_path)
            for passage in result.passages
            for location in passage.locations
        ]

    def test_the_reports_that_mention_it_each_come(self):
        files = {"2022-09-06-503.md": LONG_REPORT, **SHORT_REPORTS}
        collection = collection_of("Incidents", files)
        found = self._sections(collection)
        self.assertEqual(
            {name for name, _ in found},
            {
                "2022-09-06-503.md",
                "2022-11-21-ingress.md",
                "2023-02-14-dns.md",
                "2023-05-03-registry.md",
            },
        )

    def test_documents_that_are_not_records_keep_their_order(self):
        # Without dates these are pages of a manual, and the page that dwells on
        # the subject keeps its sections.
        files = {
            "limits.md": _undated(LONG_REPORT),
            **{name[11:]: _undated(text) for name, text in SHORT_REPORTS.items()},
        }
        collection = collection_of("Manual", files)
        found = self._sections(collection)
        self.assertGreaterEqual(len({h for f, h in found if f == "limits.md"}), 2)


INCIDENTS = Path(settings.BASE_DIR) / "evals/corpora/incident-postmortems"


class RarestWordTestCase(TestCase):
    """Real incident reports (evals/corpora): every one is about an incident,
    so "incidents", "involved" and "trouble" rank reports that share them
    above the two that name Memcached once in their text."""

    def test_the_reports_naming_the_asked_thing_come(self):
        files = {
            path.name: path.read_text(encoding="utf-8")
            for path in sorted(INCIDENTS.glob("*.md"))
        }
        collection = collection_of("Incidents", files)
        result = retrieval.retrieve(
            collection, "Which incidents involved trouble with Memcached?"
        )
        found = {p.file_name for p in result.passages}
        naming = {name for name, text in files.items() if "Memcached" in text}
        self.assertEqual(len(naming), 2)
        self.assertLessEqual(naming, found)
