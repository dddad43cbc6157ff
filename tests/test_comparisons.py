"""Questions that set two things side by side get both (issue #29 item 6):
"Taint or toleration?" must bring the entry of each, not two of one."""

from __future__ import annotations

from django.test import SimpleTestCase, TestCase

from kb import ingestion, retrieval, uploads
from kb.models import Collection
from kb.retrieval.question import named_terms

# A small glossary, one entry per file as glossaries keep them (written for
# this test).
ENTRIES = {
    "taint.md": (
        "Taint",
        "A taint is a mark on a node that repels pods. The scheduler does not "
        "place a pod on a tainted node unless the pod has a toleration for the "
        "taint.\n\n## Taint effects and tolerations\n\nA taint's effect says "
        "what happens to pods without a matching toleration: NoSchedule keeps new "
        "pods off, PreferNoSchedule avoids the node when it can, NoExecute also "
        "evicts running pods without a toleration.\n\n## Taints, tolerations and "
        "dedicated nodes\n\nTaint the nodes of a team and give that team's pods "
        "the toleration: other pods stay off. A toleration alone does not send "
        "the pods there; pair it with node affinity.",
    ),
    "toleration.md": (
        "Toleration",
        "A toleration is set on a pod and lets it be scheduled onto nodes with a "
        "matching taint. It does not attract the pod to those nodes; it only "
        "allows the placement. A toleration matches a taint by key, value and "
        "effect, or by key alone with the Exists operator.",
    ),
    "node-affinity.md": (
        "Node affinity",
        "Node affinity attracts pods to nodes with given labels. Required rules "
        "must hold for a pod to be scheduled; preferred rules weigh the choice of "
        "node. It is the opposite of a taint, which repels.",
    ),
    "eviction.md": (
        "Eviction",
        "Eviction ends pods on a node, for example when the node runs short of "
        "memory or when a NoExecute taint is added and the pods do not tolerate "
        "it. Evicted pods are recreated elsewhere by their controller.",
    ),
    "scheduler.md": (
        "Scheduler",
        "The scheduler assigns each new pod to a node. It filters the nodes by "
        "taints, tolerations, affinity and resources, then scores the rest and "
        "picks the best.",
    ),
}


class NamedTermsTestCase(SimpleTestCase):
    def test_the_two_things_a_question_compares(self):
        for question, expected in [
            ("Taint or toleration?", [["Taint"], ["toleration"]]),
            (
                "What is the difference between a taint and a toleration?",
                [["taint"], ["toleration"]],
            ),
            (
                "Should I use a taint or a toleration?",
                [["use a taint", "taint"], ["toleration"]],
            ),
            ("isBlank vs isEmpty", [["isBlank"], ["isEmpty"]]),
            (
                "Différence entre un taint et une toleration ?",
                [["taint"], ["toleration"]],
            ),
            ("¿Cuál es la diferencia entre un pod y un nodo?", [["pod"], ["nodo"]]),
        ]:
            with self.subTest(question=question):
                self.assertEqual(named_terms(question), expected)

    def test_other_questions_compare_nothing(self):
        for question in [
            "Can I restart or stop a worker while it runs?",
            "How do I retry a job or not?",
            "What does a taint do?",
            "Which pods are evicted when a node runs short of memory, and which "
            "controller recreates them elsewhere or on the same node?",
        ]:
            with self.subTest(question=question):
                self.assertEqual(named_terms(question), [])


class ComparedEntriesTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = Collection.objects.create(name="Glossary")
        for name, (term, text) in ENTRIES.items():
            body = f"---\ntitle: {term}\n---\n\n# {term}\n\n{text}\n"
            source, _ = uploads.store_source(cls.collection, name, body.encode())
            ingestion.ingest(source.pk)

    def _first(self, question: str, k: int = 2) -> list[str]:
        result = retrieval.retrieve(self.collection, question, k=k)
        return [p.file_name for p in result.passages][:k]

    def test_a_comparison_gets_the_entry_of_each_thing_first(self):
        for question in [
            "Taint or toleration?",
            "What is the difference between a taint and a toleration?",
            "Node affinity versus taint?",
        ]:
            with self.subTest(question=question):
                wanted = (
                    {"node-affinity.md", "taint.md"}
                    if "affinity" in question
                    else {"taint.md", "toleration.md"}
                )
                self.assertEqual(set(self._first(question)), wanted)

    def test_a_question_about_one_thing_is_answered_as_before(self):
        self.assertEqual(
            self._first("What does a toleration allow?", k=1), ["toleration.md"]
        )
