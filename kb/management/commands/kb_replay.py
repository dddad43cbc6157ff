from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from kb import questions, retrieval
from kb.models import Question


class Command(BaseCommand):
    help = (
        "Answer a logged question again on its collection's current index and "
        "compare: citations before and after, sections gained and lost. --json "
        'prints {"id", "changed", "citations_before", "citations_after", '
        '"sections_gained", "sections_lost"}.'
    )

    def add_arguments(self, parser):
        parser.add_argument("id", type=int, help="The logged question's id.")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        entry = Question.objects.select_related("collection").filter(pk=options["id"])
        entry = entry.first() if 0 < options["id"] < 2**63 else None
        if entry is None:
            raise CommandError(f"No logged question with id {options['id']}.")
        try:
            outcome = questions.replay(entry)
        except retrieval.QuestionError as exc:
            raise CommandError(str(exc)) from None
        shown = outcome.as_json()
        if options["json"]:
            self.stdout.write(json.dumps(shown, ensure_ascii=False, indent=2))
            return
        self.stdout.write(f"#{entry.pk} {entry.question}")
        self.stdout.write(
            "The citations changed." if outcome.changed else "Same citations as then."
        )
        for label, cites in (
            ("Before", shown["citations_before"]),
            ("After", shown["citations_after"]),
        ):
            self.stdout.write(f"{label}:")
            for c in cites or [
                {
                    "n": "-",
                    "file": "no citation",
                    "heading_path": "",
                    "start": "",
                    "end": "",
                }
            ]:
                self.stdout.write(
                    f"  [{c['n']}] {c['file']} › {c['heading_path']} "
                    f"{c['start']}-{c['end']}"
                )
        for label, key in (("Gained", "sections_gained"), ("Lost", "sections_lost")):
            for s in shown[key]:
                self.stdout.write(f"{label}: {s['file']} › {s['heading_path']}")
