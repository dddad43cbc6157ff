"""The demo knowledge base shipped with kb (original, fictional content)."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from kb import golden, ingestion, queueing
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
                queueing.enqueue_ingest(source)
        if stdout:
            stdout.write(f"Demo source {path.name}: {outcome}")
    report = golden.import_cases(collection, GOLDEN_FILE.read_text("utf-8"))
    if stdout:
        stdout.write(golden.import_summary(collection, report))
    return collection


def load_part(name: str, files: list[str]) -> Collection:
    """A collection of some demo files, indexed in this process, with the demo
    cases whose evidence is all in them (a small golden set for a quick gate)."""
    import json

    collection = Collection.objects.create(name=name, description=DESCRIPTION)
    for file_name in files:
        data = (CONTENT_DIR / file_name).read_bytes()
        source, _ = ingestion.store_source(collection, file_name, data)
        ingestion.ingest(source.pk, source.version)
    lines = [
        line
        for line in GOLDEN_FILE.read_text("utf-8").splitlines()
        if all(s["file"] in files for s in json.loads(line)["required_spans"])
    ]
    golden.import_cases(collection, "\n".join(lines))
    return collection
