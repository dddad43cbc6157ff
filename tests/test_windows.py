"""Windows that reach the evidence (issue #17): retrieval.window_reach."""

from django.test import SimpleTestCase, override_settings

from kb import retrieval
from kb.models import GoldenCase
from kb.retrieval import GAP_TOKENS, window_reach
from tests import base

TEXT = (
    "# Leave\n\n"
    "Requests go to your manager. Unused days carry over to the next\n"
    "year, up to five days, and expire at the end of March.\n\n"
    "- Sick leave needs a note after three days\n"
    "  of absence in a row.\n"
)


class SentenceEndTests(SimpleTestCase):
    def test_window_grows_to_the_end_of_the_sentence_it_cuts(self):
        a = TEXT.index("Requests")
        b = TEXT.index("next") + len("next")  # cut at a line end, mid-sentence
        (start, end), added = window_reach(TEXT, a, b, allowance=100)
        self.assertEqual(start, a)
        self.assertTrue(TEXT[start:end].endswith("expire at the end of March."))
        self.assertGreater(added, 0)

    def test_window_grows_to_the_end_of_the_list_item_it_cuts(self):
        a = TEXT.index("- Sick")
        b = TEXT.index("three days") + len("three days")
        (_, end), _ = window_reach(TEXT, a, b, allowance=100)
        self.assertTrue(TEXT[:end].endswith("of absence in a row."))

    def test_window_stops_at_the_budget(self):
        a = TEXT.index("Requests")
        b = TEXT.index("next") + len("next")
        (start, end), added = window_reach(TEXT, a, b, allowance=3)
        self.assertEqual((start, end, added), (a, b, 0))

    def test_window_grows_back_to_the_start_of_its_sentence(self):
        a = TEXT.index("year, up to")
        b = TEXT.index("March.") + len("March.")
        (start, _), _ = window_reach(TEXT, a, b, allowance=100)
        self.assertEqual(start, TEXT.index("Unused days"))


GAPPED = (
    "Alpha opens the section. Beta is short. Gamma closes it.\n\n"
    + "Filler words fill this long paragraph again. " * 12
    + "\n\nOmega ends it all.\n"
)


class GapTests(SimpleTestCase):
    def test_short_gap_between_two_windows_is_filled(self):
        first = (0, GAPPED.index("Alpha opens the section.") + 24)
        a = GAPPED.index("Gamma")
        b = GAPPED.index("closes it.") + len("closes it.")
        (start, end), added = window_reach(GAPPED, a, b, 100, previous=[first])
        self.assertEqual((start, end), (0, b))  # "Beta is short." is in
        self.assertLessEqual(added, GAP_TOKENS)

    def test_long_gap_between_two_windows_is_left_out(self):
        first = (0, GAPPED.index("Gamma closes it.") + 16)
        a = GAPPED.index("Omega")
        end = len(GAPPED) - 1
        (start, _), added = window_reach(GAPPED, a, end, 500, previous=[first])
        self.assertEqual((start, added), (a, 0))

    def test_gap_is_not_filled_past_the_budget(self):
        first = (0, GAPPED.index("Alpha opens the section.") + 24)
        a = GAPPED.index("Gamma")
        b = GAPPED.index("closes it.") + len("closes it.")
        (start, _), _ = window_reach(GAPPED, a, b, 1, previous=[first])
        self.assertEqual(start, a)


REFERS = (
    "## Expenses\n\n"
    "Claims are filed within 30 days of the purchase.\n\n"
    "However, travel claims are filed within 60 days.\n"
)


class ParagraphBeforeTests(SimpleTestCase):
    def test_paragraph_that_refers_back_takes_in_the_short_one_before(self):
        a = REFERS.index("However")
        (start, _), added = window_reach(REFERS, a, len(REFERS) - 1, 100)
        self.assertEqual(start, REFERS.index("Claims are filed"))
        self.assertGreater(added, 0)

    def test_paragraph_that_does_not_refer_back_stays(self):
        text = REFERS.replace("However, travel", "Travel")
        a = text.index("Travel")
        (start, _), _ = window_reach(text, a, len(text) - 1, 100)
        self.assertEqual(start, a)

    def test_long_paragraph_before_is_not_taken(self):
        text = REFERS.replace("purchase.", "purchase. " + "More words here. " * 60)
        a = text.index("However")
        (start, _), _ = window_reach(text, a, len(text) - 1, 1000)
        self.assertEqual(start, a)

    def test_heading_before_is_not_taken(self):
        text = "## Expenses\n\nThese claims are filed within 60 days.\n"
        a = text.index("These")
        (start, _), _ = window_reach(text, a, len(text) - 1, 100)
        self.assertEqual(start, a)


@override_settings(KB_WINDOW_GROWTH=True)
class WidenedContextTests(base.DemoTestCase):
    """Through retrieval: widened windows keep the budget and the source's text."""

    def test_widened_context_stays_within_the_budget_and_is_the_source_text(self):
        texts = dict(self.demo.sources.values_list("pk", "text"))
        questions = GoldenCase.objects.filter(collection=self.demo)
        for budget in (120, 300, 800):
            for question in questions.values_list("question", flat=True):
                result = retrieval.retrieve(self.demo, question, budget=budget)
                self.assertLessEqual(result.context_tokens, budget, question)
                for p in result.passages:
                    self.assertEqual(p.text, texts[p.source_id][p.start : p.end])
