from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import translation

from kb import answering, retrieval
from kb.models import Collection


class Command(BaseCommand):
    help = "Ask a question in a collection; --json prints what POST /api/ask returns."

    def add_arguments(self, parser):
        parser.add_argument("question")
        parser.add_argument("--collection", required=True)
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--k", type=int, help="Sections handed to the answer.")
        parser.add_argument("--budget", type=int, help="Context tokens.")
        parser.add_argument("--retrieval", choices=["vector", "keyword", "hybrid"])
        parser.add_argument(
            "--language",
            choices=[code for code, _ in settings.LANGUAGES],
            help="The language of the answer's warnings and notes, as the ask "
            "page's language switcher sets it (default: English).",
        )

    def handle(self, *args, **options):
        if options["language"]:
            with translation.override(options["language"]):
                return self._ask(options)
        return self._ask(options)

    def _ask(self, options) -> None:
        collection = Collection.objects.filter(name=options["collection"]).first()
        if collection is None:
            raise CommandError(f"No collection named {options['collection']!r}")
        try:
            result, reply = answering.ask(
                collection,
                options["question"],
                k=options["k"],
                budget=options["budget"],
                mode=options["retrieval"],
            )
        except retrieval.QuestionError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            payload = answering.as_json(result, reply)
            self.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2))
            return
        self.stdout.write(reply.text + "\n")
        for warning in reply.warnings:
            self.stdout.write(self.style.WARNING(warning))
        if not reply.citations:  # nothing cited: the closest sections, to check
            for p in result.passages:
                self.stdout.write(f"- {p.label} ({p.file_name} {p.start}-{p.end})")
        for c in reply.citations:
            self.stdout.write(f"[{c.n}] {c.label} ({c.file} {c.start}-{c.end})")
        self.stdout.write(
            f"\n{result.context_tokens} of {result.budget_tokens} context tokens, "
            f"{result.timings_ms['total']:.0f} ms"
        )
