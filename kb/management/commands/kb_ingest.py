from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from kb import embedding_models, ingestion, parsing, queueing, uploads
from kb.models import Collection
from kb.retrieval import keywords


class Command(BaseCommand):
    help = (
        "Store .md/.markdown/.txt/.html/.htm/.docx/.pdf files (or folders of "
        "them) as sources of a "
        "collection and index them: queued for the workers, or here with --sync."
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument("--collection", required=True, help="Created if missing.")
        parser.add_argument(
            "--sync", action="store_true", help="Index in this process, not a worker."
        )
        parser.add_argument(
            "--embedding-model",
            choices=embedding_models.names(),
            help=(
                "The model a collection created here embeds with (default "
                f"{embedding_models.DEFAULT}, English only; "
                f"{embedding_models.E5_SMALL} reads 100 languages). An existing "
                "collection keeps its own: change it in the admin."
            ),
        )

    def handle(self, *args, **options):
        model = options["embedding_model"]
        collection, created = Collection.objects.get_or_create(
            name=options["collection"],
            defaults={"embedding_model": model or embedding_models.DEFAULT},
        )
        if created:
            self.stdout.write(
                f"Created collection {collection} ({collection.embedding_model})"
            )
        elif model and model != collection.embedding_model:
            raise CommandError(
                f"Collection {collection} embeds with {collection.embedding_model}, "
                f"not {model}. Change its embedding model in the admin (its index "
                "is rebuilt beside the live one), or name a new collection."
            )
        files = list(files_under(options["paths"]))
        if not files:
            raise CommandError(
                f"No {', '.join(uploads.ALLOWED_EXTENSIONS)} files found."
            )
        outcomes = []
        for root, path in files:
            name = path.relative_to(root).as_posix() if root != path else path.name
            outcomes.append(self._one(collection, name, path, options["sync"]))
        if options["sync"]:
            keywords.count_terms(collection)
        total, done = len(files), outcomes.count("done")
        refused, failed = outcomes.count("refused"), outcomes.count("failed")
        summary = f"{done} of {total} file(s) stored and indexed or queued."
        if failed:
            summary += (
                f" {failed} stored but failed to index: kept as failed sources "
                "with the reason (a previous version stays live)."
            )
        if refused:
            summary += f" {refused} refused and not stored (each named above)."
        note = embedding_models.language_note(
            collection.embedding_model, collection.source_languages()
        )
        if note:
            self.stderr.write(self.style.WARNING(f"Warning: {note}"))
        if refused or failed:
            raise CommandError(f"{summary} See above.")
        self.stdout.write(self.style.SUCCESS(summary))

    def _one(self, collection: Collection, name: str, path: Path, sync: bool) -> str:
        """done, refused (nothing stored) or failed (stored, not indexed)."""
        shown = uploads.shown_name(name)  # a name that is not UTF-8 still prints
        try:
            with uploads.storing():
                source, outcome = uploads.store_source(
                    collection, name, path.read_bytes()
                )
                if outcome == "unchanged" and source.indexed_version == source.version:
                    self.stdout.write(f"{shown}: unchanged")
                    return "done"
                if not sync:
                    queued = queueing.enqueue_ingest(source)
                    note = "queued" if queued else queueing.QUEUE_DOWN
                    self.stdout.write(f"{shown}: {outcome}, {note}")
                    return "done"
        except (ingestion.IngestionError, parsing.ParseError) as exc:
            self.stderr.write(f"{shown}: refused: {exc}")
            return "refused"
        try:
            self.stdout.write(f"{shown}: {outcome}, {ingestion.ingest(source.pk)}")
        except Exception as exc:  # recorded on the source, which stays as failed
            why = ingestion.failure_message(shown, exc)
            self.stderr.write(f"{shown}: stored, but indexing failed: {why}")
            return "failed"
        return "done"


def files_under(paths: list[Path]):
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if (
                    child.is_file()
                    and child.suffix.lower() in uploads.ALLOWED_EXTENSIONS
                ):
                    yield path, child
        elif path.is_file():
            yield path, path
        else:
            raise CommandError(f"{path} does not exist")
