"""Benchmarks behind the README's figures: `kb_bench quality`, `kb_bench speed`."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.benchmarks import (
    formats,
    multilingual,
    multilingual_scale,
    quality,
    reindex,
    speed,
)
from kb.embedding import PRECISIONS


class Command(BaseCommand):
    help = (
        "Run a benchmark and print a Markdown table. `quality`: retrieval recall, "
        "precision and IoU on the Chroma chunking evaluation (../shared/benchmarks/"
        "chroma) for our chunker and the report's splitters; `speed`: throughput "
        "and latency of chunking, embedding, ingestion and retrieval against peers, "
        "in scratch `bench-...` collections; `formats`: structure recall of the "
        "HTML/DOCX/PDF readers on the corpora rendered by markdown-it, Chromium "
        "and pandoc; `reindex`: the steps of a gated re-index, timed; `gaps`: cosine "
        "similarity of paraphrased and unrelated golden questions, behind "
        "KB_GAP_SIMILARITY. Install requirements-bench.txt first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        benches = parser.add_subparsers(dest="bench", required=True)
        run = benches.add_parser("quality", help="retrieval quality (issue #8)")
        run.add_argument(
            "--configs",
            nargs="+",
            choices=sorted(quality.CONFIGS),
            default=list(quality.DEFAULT_CONFIGS),
            metavar="NAME",
            help="configurations to run (default: the six of docs/benchmarks.md), "
            "of: " + ", ".join(sorted(quality.CONFIGS)),
        )
        run.add_argument(
            "--strategy",
            action="append",
            choices=sorted(quality.STRATEGY_CONFIGS),
            help="add the configuration of a named strategy (as in kb_eval): "
            + ", ".join(f"{k} = {v}" for k, v in quality.STRATEGY_CONFIGS.items()),
        )
        _add_json(run)
        run.add_argument(
            "--quick",
            action="store_true",
            help=f"one corpus ({quality.QUICK_CORPUS}) and one configuration "
            f"({quality.QUICK_CONFIG}), for a smoke test",
        )
        run.add_argument(
            "--data",
            type=Path,
            default=quality.DATA_DIR,
            help="the benchmark folder (default: %(default)s)",
        )
        run.add_argument(
            "--precision",
            choices=PRECISIONS,
            default="fp32",
            help="embedder precision (the published figures are fp32)",
        )
        fast = benches.add_parser("speed", help="throughput and latency (issue #8)")
        _add_json(fast)
        fast.add_argument(
            "--quick",
            action="store_true",
            help=f"{speed.QUICK_BYTES // 1000} kB corpus and small sets, for a smoke "
            "test",
        )
        fast.add_argument(
            "--keep",
            action="store_true",
            help="keep the bench-... collections instead of deleting them",
        )
        fast.add_argument(
            "--only",
            choices=[
                "neighbours",
                "multilingual",
                "scale-multilingual",
                "reuse",
                "reference",
            ],
            help="run one part: `neighbours`, retrieval in a small collection "
            "alone and beside two large ones (issue #15); `multilingual`, "
            "MiniLM beside multilingual-e5-small on Russian text (issue #27); "
            "`scale-multilingual`, retrieval latency at 10,000 and 100,000 "
            "chunks in a French, Spanish, Russian and English collection beside "
            "an English one (issue #27); `reuse`, chunks embedded and seconds "
            "when sources are edited or re-indexed, with and without reusing "
            "stored vectors (issue #30); `reference`, reading, parsing and "
            "chunking MB/s of the Javadoc and DocBook pages in evals/corpora "
            "beside Markdown docs (issue #29)",
        )

        fidelity = benches.add_parser(
            "formats", help="structure kept by the HTML/DOCX/PDF readers (issue #16)"
        )
        fidelity.add_argument(
            "--corpora",
            type=Path,
            default=formats.CORPORA_DIR,
            help="a folder of corpus folders of .md files (default: %(default)s)",
        )
        fidelity.add_argument(
            "--formats", nargs="+", choices=formats.FORMATS, default=formats.FORMATS
        )
        fidelity.add_argument(
            "--recall",
            nargs="+",
            choices=sorted(formats.GOLDEN),
            metavar="CORPUS",
            help="also run `kb_eval --match text` of these corpora's golden sets "
            "on the Markdown and each rendering (indexes each: minutes per run), of: "
            + ", ".join(sorted(formats.GOLDEN)),
        )
        fidelity.add_argument(
            "--unruled",
            action="store_true",
            help="print the tables without borders (PDF: tables without rules)",
        )
        fidelity.add_argument(
            "--recall-only",
            action="store_true",
            help="skip the structure figures (with --recall)",
        )

        gate = benches.add_parser(
            "reindex", help="what a gated re-index costs, step by step (issue #18)"
        )
        gate.add_argument(
            "--corpora", nargs="+", choices=reindex.CORPORA, default=reindex.CORPORA
        )
        gate.add_argument(
            "--tokens",
            type=int,
            default=reindex.NEW_TOKENS,
            help="the shadow's chunk tokens (the live index has 200)",
        )
        gate.add_argument("--keep", action="store_true", help="keep the collections")
        _add_json(gate)
        benches.add_parser(
            "gaps", help="grouping threshold of the content gaps page (issue #18)"
        )
        syncing = benches.add_parser(
            "sync",
            help="a generated Git repository and folder synced: first, unchanged, "
            "edited, deleted (issue #30)",
        )
        syncing.add_argument(
            "--files",
            type=int,
            default=1000,
            help="files of the Git and folder origins (%(default)s)",
        )
        syncing.add_argument(
            "--pages", type=int, default=500, help="pages of the site (%(default)s)"
        )
        _add_json(syncing)

    def _write_json(self, options: dict[str, Any], report: Any) -> None:
        if options["json"]:
            options["json"].write_text(json.dumps(report, indent=1))
            self.stdout.write(f"JSON written to {options['json']}")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["bench"] == "reindex":
            return self._reindex(options)
        if options["bench"] == "sync":
            return self._sync(options)
        if options["bench"] == "gaps":
            from kb.benchmarks import gaps

            self.stdout.write(gaps.markdown(gaps.run()))
        elif options["bench"] == "speed":
            self._speed(options)
        elif options["bench"] == "formats":
            self._formats(options)
        else:
            self._quality(options)

    def _sync(self, options: dict[str, Any]) -> None:
        from kb.benchmarks import sync

        started = time.strftime("%Y-%m-%d %H:%M %Z")
        report = sync.run(
            options["files"],
            progress=lambda line: self.stderr.write(line),
            pages=options["pages"],
        )
        load = os.getloadavg()[0]
        self.stdout.write(f"kb_bench sync, {started}, load {load}\n")
        self.stdout.write(sync.markdown(report))
        self._write_json(options, sync.as_json(report))

    def _reindex(self, options: dict[str, Any]) -> None:
        started = time.strftime("%Y-%m-%d %H:%M %Z")
        rows = reindex.run(
            tuple(options["corpora"]),
            options["tokens"],
            options["keep"],
            progress=lambda line: self.stderr.write(line),
        )
        load = os.getloadavg()[0]
        self.stdout.write(f"kb_bench reindex, {started}, load {load}\n")
        self.stdout.write(reindex.markdown(rows, options["tokens"]))
        self._write_json(options, reindex.as_json(rows))

    def _formats(self, options: dict[str, Any]) -> None:
        started = time.strftime("%Y-%m-%d %H:%M %Z")
        if options["recall"]:
            self._formats_recall(options, started)
            if options["recall_only"]:
                return
        try:
            report = formats.run(
                options["corpora"],
                tuple(options["formats"]),
                progress=lambda line: self.stderr.write(line),
                css=formats.UNRULED_CSS if options["unruled"] else formats.CSS,
            )
        except FileNotFoundError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"kb_bench formats, {started}, {os.cpu_count()} CPUs\n")
        self.stdout.write(formats.markdown(report))

    def _formats_recall(self, options: dict[str, Any], started: str) -> None:
        rows = formats.eval_recall(
            options["corpora"],
            tuple(options["recall"]),
            ("md", *options["formats"]),
            progress=lambda line: self.stderr.write(line),
        )
        self.stdout.write(
            f"kb_bench formats --recall, {started}, {os.cpu_count()} CPUs\n"
        )
        self.stdout.write(formats.eval_markdown(rows))

    def _speed(self, options: dict[str, Any]) -> None:
        if options["only"] == "neighbours":
            return self._neighbours(options)
        if options["only"] == "multilingual":
            return self._multilingual(options)
        if options["only"] == "scale-multilingual":
            return self._scale_multilingual(options)
        if options["only"] == "reuse":
            from kb.benchmarks import reuse

            return self._only("reuse", reuse, options)
        if options["only"] == "reference":
            from kb.benchmarks import reference

            return self._only("reference", reference, options)
        try:
            report = speed.run(
                options["quick"],
                options["keep"],
                progress=lambda line: self.stderr.write(line),
            )
        except ModuleNotFoundError as exc:
            raise CommandError(
                f"{exc.name} is missing: pip install -r requirements-bench.txt"
            ) from exc
        models = multilingual.run(
            options["quick"], progress=lambda line: self.stderr.write(line)
        )
        languages = multilingual_scale.run(
            quick=options["quick"],
            keep=options["keep"],
            progress=lambda line: self.stderr.write(line),
        )
        self.stdout.write(f"kb_bench speed, {report.started}\n")
        self.stdout.write(speed.markdown(report))
        self.stdout.write("\n" + multilingual.markdown(models) + "\n")
        self.stdout.write("\n" + multilingual_scale.markdown(languages) + "\n")
        payload = speed.as_json(report)
        payload["multilingual"] = multilingual.as_json(models)
        payload["scale_multilingual"] = multilingual_scale.as_json(languages)
        self._write_json(options, payload)

    def _neighbours(self, options: dict[str, Any]) -> None:
        from kb.benchmarks import neighbours

        self._only("neighbours", neighbours, options, keep=options["keep"])

    def _multilingual(self, options: dict[str, Any]) -> None:
        self._only("multilingual", multilingual, options)

    def _scale_multilingual(self, options: dict[str, Any]) -> None:
        self._only(
            "scale-multilingual", multilingual_scale, options, keep=options["keep"]
        )

    def _only(self, part: str, bench, options: dict[str, Any], **kwargs) -> None:
        """Run one part (a module with run, markdown and as_json) and print it
        under a line naming it, when and at what load."""
        started = time.strftime("%Y-%m-%d %H:%M %Z")
        report = bench.run(
            quick=options["quick"],
            progress=lambda line: self.stderr.write(line),
            **kwargs,
        )
        load = os.getloadavg()[0]
        self.stdout.write(f"kb_bench speed --only {part}, {started}, load {load}\n")
        self.stdout.write(bench.markdown(report).rstrip("\n") + "\n")
        self._write_json(options, bench.as_json(report))

    def _quality(self, options: dict[str, Any]) -> None:
        names = list(options["configs"])
        corpora = quality.CORPORA
        if options["quick"]:
            names, corpora = [quality.QUICK_CONFIG], [quality.QUICK_CORPUS]
        for strategy in options["strategy"] or []:
            named = quality.STRATEGY_CONFIGS[strategy]
            if options["quick"]:
                names = [named] if names == [quality.QUICK_CONFIG] else names
            if named not in names:
                names.append(named)
        started = time.strftime("%Y-%m-%d %H:%M %Z")
        try:
            report = quality.run(
                names,
                data_dir=options["data"],
                corpora=corpora,
                precision=options["precision"],
                progress=lambda line: self.stderr.write(line),
            )
        except quality.BenchmarkDataMissing as exc:
            raise CommandError(str(exc)) from exc
        except ModuleNotFoundError as exc:
            raise CommandError(
                f"{exc.name} is missing: pip install -r requirements-bench.txt"
            ) from exc
        self.stdout.write(
            f"kb_bench quality, {started}, {os.cpu_count()} CPUs "
            f"({platform.processor() or platform.machine()}), "
            f"{report.seconds:.0f} s\n"
        )
        self.stdout.write(quality.markdown(report))
        self._write_json(options, quality.as_json(report))


def _add_json(parser: CommandParser) -> None:
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write JSON")
