"""Dry-run chunking of a file or folder: figures only, nothing is stored."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb import embedding_models
from kb.chunking import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_OVERLAP,
    STRATEGIES,
    ChunkData,
    chunk_document,
    length_figures,
)
from kb.embedding import Embedder, get_embedder
from kb.ingestion import prefix_room, values_of
from kb.metadata import Policy
from kb.parsing import (
    CONVERTED_EXTENSIONS,
    MARKDOWN_EXTENSIONS,
    TEXT_EXTENSIONS,
    Document,
    ParseError,
)
from kb.parsing import parse as parse_document
from kb.readers import text_of

EXTENSIONS = MARKDOWN_EXTENSIONS + TEXT_EXTENSIONS + CONVERTED_EXTENSIONS


@dataclass
class _Totals:
    files: int = 0
    sections: int = 0
    chunks: list[tuple[str, ChunkData]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class Command(BaseCommand):
    help = (
        "Parse and chunk a Markdown/text/HTML/DOCX/PDF file or a folder "
        "(recursively *.md, *.markdown, *.txt, *.html, *.htm, *.docx, *.pdf) "
        "without storing anything, as indexing chunks it for a new collection "
        "(room left for the metadata it embeds), and print sections, chunks, "
        "median and p95 token length, the largest chunk and the share of "
        "word-boundary fallbacks."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument(
            "--max-tokens",
            type=int,
            default=DEFAULT_MAX_TOKENS,
            help="chunk budget in tokens, specials included (structure: clamped "
            "to the usable window; fixed: may exceed the window on purpose)",
        )
        parser.add_argument(
            "--overlap", type=int, default=DEFAULT_OVERLAP, help="in tokens"
        )
        parser.add_argument("--strategy", choices=STRATEGIES, default="structure")
        parser.add_argument(
            "--model",
            choices=embedding_models.names(),
            help="the embedding model whose tokens size the chunks, its passage "
            f"prompt included (default {embedding_models.DEFAULT})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        root: Path = options["path"]
        files = _collect(root)
        embedder = get_embedder(options["model"])
        budget = options["max_tokens"]
        if options["strategy"] == "structure":
            budget = min(budget, embedder.usable_window)
        totals = _Totals()
        for path in files:
            name = str(path.relative_to(root)) if root.is_dir() else path.name
            try:
                text = text_of(name, path.read_bytes())
                doc = parse_document(text, name)
                room = None
                if options["strategy"] == "structure":
                    room = _prefix_room(doc, text, name, embedder, budget)
                result = chunk_document(
                    doc,
                    text,
                    count_tokens=embedder.count_passage_tokens,
                    max_tokens=budget,
                    overlap=options["overlap"],
                    strategy=options["strategy"],
                    section_prefix_tokens=room,
                )
            except ValueError as exc:  # a bad --max-tokens/--overlap, not a file
                raise CommandError(str(exc)) from exc
            except ParseError as exc:
                totals.skipped.append(f"{name}: {exc}")
                continue
            totals.files += 1
            totals.sections += result.sections
            totals.chunks += [(name, chunk) for chunk in result.chunks]
        report = _report(
            totals, embedder.window, embedder.usable_window, budget, options
        )
        if options["json"]:
            self.stdout.write(json.dumps(report, ensure_ascii=False))
        else:
            self.stdout.write(_human(report, totals))


def _prefix_room(
    doc: Document, text: str, name: str, embedder: Embedder, budget: int
) -> dict[int, int]:
    """Room for the metadata a new collection embeds before each chunk (its
    heading path), as indexing leaves it: the same chunks as an upload gets."""
    values = values_of(doc.title, name, {}, text)
    return prefix_room(doc, embedder, Policy.build({}), values, budget)


def _collect(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise CommandError(f"{root} is neither a file nor a folder")
    files = sorted(
        path
        for path in root.rglob("*")
        if path.is_file() and path.suffix.lower() in EXTENSIONS
    )
    if not files:
        raise CommandError(f"{root} has no {', '.join(EXTENSIONS)} files")
    return files


def _report(
    totals: _Totals, window: int, usable: int, budget: int, options: dict[str, Any]
) -> dict[str, Any]:
    counts = [chunk.token_count for _, chunk in totals.chunks]
    fallbacks = sum(chunk.is_fallback for _, chunk in totals.chunks)
    total = len(totals.chunks)
    return {
        "window": window,
        "usable_window": usable,
        "strategy": options["strategy"],
        "budget": budget,
        "overlap": options["overlap"],
        "files": totals.files,
        "skipped": totals.skipped,
        "sections": totals.sections,
        "chunks_total": total,
        **length_figures(counts),
        "over_window": sum(count > window for count in counts),
        "word_fallbacks": fallbacks,
        "word_fallback_share": round(fallbacks / total, 4) if total else 0.0,
        "chunks": [
            {
                "file": name,
                "start": chunk.start,
                "end": chunk.end,
                "heading_path": chunk.heading_path,
                "token_count": chunk.token_count,
                "kind": chunk.kind,
            }
            for name, chunk in totals.chunks
        ],
    }


def _human(report: dict[str, Any], totals: _Totals) -> str:
    lines = [
        f"Strategy {report['strategy']}, budget {report['budget']} tokens, "
        f"overlap {report['overlap']}",
        f"Files: {report['files']} ({len(report['skipped'])} skipped)",
        *(f"  skipped {reason}" for reason in report["skipped"]),
        f"Sections: {report['sections']}",
        f"Chunks: {report['chunks_total']}",
        "Token length of embed_text ([CLS]/[SEP] included): "
        f"median {report['median_tokens']}, p95 {report['p95_tokens']}",
    ]
    if totals.chunks:
        name, largest = max(totals.chunks, key=lambda pair: pair[1].token_count)
        lines.append(
            f"Largest chunk: {largest.token_count} tokens (usable window "
            f"{report['usable_window']}, window {report['window']}): {name} "
            f"[{largest.start}:{largest.end}] {largest.heading_path}"
        )
    lines += [
        f"Chunks over the window (would be truncated): {report['over_window']}",
        f"Word-boundary fallbacks: {report['word_fallbacks']} of "
        f"{report['chunks_total']} chunks ({report['word_fallback_share']:.1%})",
    ]
    return "\n".join(lines)
