"""The demo knowledge base shipped with kb (original, fictional content)."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from kb import ingestion, jobs
from kb.models import Collection

CONTENT_DIR = Path(__file__).resolve().parent / "content"
GOLDEN_FILE = Path(__file__).resolve().parent / "golden.jsonl"
COLLECTION = "Demo"
DESCRIPTION = "Larkspur Labs handbook: runbooks, policies and the API reference."


def load_demo(*, sync: bool = False, stdout: TextIO | None = None) -> Collection:
    """Create the demo collection, store and index its files, import its cases."""
    collection, _ = Collection.objects.get_or_create(
        name=COLLECTION, defaults={"description": DESCRIPTION}
    )
    for path in sorted(CONTENT_DIR.iterdir()):
        source, outcome = ingestion.store_source(
            collection, path.name, path.read_bytes()
        )
        if outcome != "unchanged" or source.indexed_version != source.version:
            if sync:
                ingestion.ingest(source.pk, source.version)
            else:
                jobs.enqueue_ingest(source)
        if stdout:
            stdout.write(f"Demo source {path.name}: {outcome}")
    from kb import evaluation

    report = evaluation.import_cases(collection, GOLDEN_FILE.read_text("utf-8"))
    if stdout:
        stdout.write(evaluation.import_summary(collection, report))
    return collection
