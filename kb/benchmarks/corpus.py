"""The corpus the speed benchmarks share (`kb_bench speed`, its `scale` and
`neighbours` parts, `load`, `reindex`): the shared folder's Markdown, grown to a
target size by `synthesize`, and the percentile their latencies are reported at."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

SHARED = Path(settings.BASE_DIR).parent / "shared"
# (folder, pattern): the Chroma corpora, then the app's sample corpora.
SOURCES = ((SHARED / "benchmarks" / "chroma", "*.md"), (SHARED / "corpora", "**/*.md"))
_DIGIT_RE = re.compile(r"[0-9]")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Doc:
    name: str  # a relative .md path, as an upload would carry it
    text: str

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8"))


def load_documents(sources: Sequence[tuple[Path, str]] = SOURCES) -> list[Doc]:
    """Every Markdown file of the shared corpora except their READMEs."""
    docs = []
    for folder, pattern in sources:
        for path in sorted(Path(folder).glob(pattern)):
            if path.name.lower() != "readme.md":
                name = f"{folder.name}/{path.relative_to(folder)}"
                docs.append(Doc(name, path.read_text(encoding="utf-8")))
    return docs


def synthesize(docs: Sequence[Doc], target_bytes: int) -> list[Doc]:
    """`docs` repeated until `target_bytes`, each copy slightly varied.

    Copy n shifts every digit by n (mod 10) and lives under `copy-n/`: no two
    documents are identical, while structure and length stay the same. A
    document that would overshoot the target by more than 5 % is skipped.
    """
    out: list[Doc] = []
    total = copy = 0
    while total < target_bytes:
        added = False
        for doc in docs:
            if total >= target_bytes:
                break
            if out and total + doc.size > target_bytes * 1.05:
                continue
            out.append(_variant(doc, copy))
            total += doc.size
            added = True
        if not added:
            break
        copy += 1
    return out


def _variant(doc: Doc, copy: int) -> Doc:
    if copy == 0:
        return doc
    text = _DIGIT_RE.sub(lambda m: str((int(m.group()) + copy) % 10), doc.text)
    return Doc(f"copy-{copy}/{doc.name}", text)


def megabytes(docs: Sequence[Doc]) -> float:
    return sum(doc.size for doc in docs) / 1e6
