"""The demo knowledge base shipped with kb (original, fictional content): the
English handbook ("Demo") and a smaller French one ("Démo (français)", fr/)."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from kb import golden, ingestion, queueing, uploads
from kb.models import Collection

CONTENT_DIR = Path(__file__).resolve().parent / "content"
GOLDEN_FILE = Path(__file__).resolve().parent / "golden.jsonl"
COLLECTION = "Demo"
DESCRIPTION = "Larkspur Labs handbook: runbooks, policies and the API reference."

FRENCH_CONTENT_DIR = Path(__file__).resolve().parent / "fr" / "content"
FRENCH_GOLDEN_FILE = Path(__file__).resolve().parent / "fr" / "golden.jsonl"
FRENCH_COLLECTION = "Démo (français)"
FRENCH_MODEL = "multilingual-e5-small"
FRENCH_DESCRIPTION = (
    "Manuel du bureau de Lyon de Larkspur Labs : télétravail, frais de "
    "déplacement, support client, accueil et FAQ informatique."
)


def load_demos(*, sync: bool = False, stdout: TextIO | None = None) -> list[Collection]:
    """Both demo collections, English then French (what kb_setup loads)."""
    return [
        load_demo(sync=sync, stdout=stdout),
        load_french_demo(sync=sync, stdout=stdout),
    ]


def load_demo(*, sync: bool = False, stdout: TextIO | None = None) -> Collection:
    """Create the English demo collection, store and index its files, import its
    cases."""
    collection, _ = Collection.objects.get_or_create(
        name=COLLECTION, defaults={"description": DESCRIPTION}
    )
    _fill(collection, CONTENT_DIR, GOLDEN_FILE, sync=sync, stdout=stdout)
    return collection


def load_french_demo(*, sync: bool = False, stdout: TextIO | None = None) -> Collection:
    """The same for the French demo collection."""
    collection = french_collection()
    _fill(collection, FRENCH_CONTENT_DIR, FRENCH_GOLDEN_FILE, sync=sync, stdout=stdout)
    return collection


def french_collection() -> Collection:
    """The French demo collection, created with its settings on the first load
    and found by name afterwards (its settings are then the staff's to change)."""
    # Indexed with the multilingual model (issue #27): MiniLM reads French
    # as fragments of English words.
    collection, _ = Collection.objects.get_or_create(
        name=FRENCH_COLLECTION,
        defaults={
            "description": FRENCH_DESCRIPTION,
            "embedding_model": FRENCH_MODEL,
        },
    )
    return collection


def _fill(
    collection: Collection,
    content_dir: Path,
    golden_file: Path,
    *,
    sync: bool,
    stdout: TextIO | None,
) -> None:
    """Store each file of `content_dir`, index those new or changed (or never
    indexed), and import the cases: run again, it changes nothing."""
    for path in sorted(content_dir.iterdir()):
        source, outcome = uploads.store_source(collection, path.name, path.read_bytes())
        if outcome != "unchanged" or source.indexed_version != source.version:
            if sync:
                ingestion.ingest(source.pk, source.version)
            else:
                queueing.enqueue_ingest(source)
        if stdout:
            stdout.write(f"{collection.name} source {path.name}: {outcome}")
    report = golden.import_cases(collection, golden_file.read_text("utf-8"))
    if stdout:
        stdout.write(golden.import_summary(collection, report))


def load_part(name: str, files: list[str]) -> Collection:
    """A collection of some demo files, indexed in this process, with the demo
    cases whose evidence is all in them (a small golden set for a quick gate)."""
    import json

    collection = Collection.objects.create(name=name, description=DESCRIPTION)
    for file_name in files:
        data = (CONTENT_DIR / file_name).read_bytes()
        source, _ = uploads.store_source(collection, file_name, data)
        ingestion.ingest(source.pk, source.version)
    lines = [
        line
        for line in GOLDEN_FILE.read_text("utf-8").splitlines()
        if all(s["file"] in files for s in json.loads(line)["required_spans"])
    ]
    golden.import_cases(collection, "\n".join(lines))
    return collection
