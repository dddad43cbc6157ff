from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from kb import (
    embedding_models,
    evaluation,
    golden,
    ingestion,
    jsontext,
    parsing,
    retrieval,
    uploads,
)
from kb.management.commands.kb_ingest import files_under
from kb.models import Collection, Source
from kb.retrieval import baselines


class Command(BaseCommand):
    help = (
        "Ingest a corpus folder into a scratch collection with the given settings, run "
        "golden cases against it and print recall@k and the other aggregates."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--cases", type=Path, required=True, help="JSON Lines file."
        )
        parser.add_argument("--corpus", type=Path, required=True, help="Folder.")
        parser.add_argument(
            "--include",
            action="append",
            default=[],
            metavar="GLOB",
            help="Ingest only the corpus files whose path relative to --corpus "
            "matches this shell-style pattern ('*' also matches '/': 'fr/**'); "
            "repeatable. Cases whose evidence is in a file left out are listed "
            "and left out of the figures.",
        )
        parser.add_argument(
            "--strategy",
            choices=[*retrieval.STRATEGIES, "structure"],
            help="default (= structure): the tuned pipeline; sections: the simple "
            f"baseline ({baselines.SECTIONS_CHUNK_TOKENS}-token structure-first "
            f"chunks, top {baselines.SECTIONS_HITS} hits grouped into the "
            f"{baselines.SECTIONS_K} best whole sections, cut to the budget); fixed: "
            f"fixed-size chunks ({baselines.FIXED_CHUNK_TOKENS} tokens unless "
            "--max-tokens), top k as they are.",
        )
        parser.add_argument("--max-tokens", type=int, help="Chunk budget in tokens.")
        parser.add_argument("--overlap", type=int)
        parser.add_argument("--k", type=int, help="Sections handed to the answerer.")
        parser.add_argument("--budget", type=int, help="Context tokens.")
        parser.add_argument("--retrieval", choices=["vector", "keyword", "hybrid"])
        parser.add_argument(
            "--embedding-model",
            choices=embedding_models.names(),
            help=f"The model that embeds (default {embedding_models.DEFAULT}); "
            "chunks are sized in its tokens.",
        )
        parser.add_argument("--json", type=Path, dest="json_out", help="Write here.")
        parser.add_argument("--keep", action="store_true", help="Keep the collection.")
        parser.add_argument(
            "--baseline",
            type=Path,
            help="A --json file of an earlier run: list the cases that changed "
            "outcome and say whether the difference is beyond chance.",
        )
        parser.add_argument(
            "--match",
            choices=["offsets", "text"],
            default="offsets",
            help="offsets (default): each span's text must be at its offsets in its "
            "file; text: a span is located by its text, ignoring whitespace and "
            "Markdown markup, in the source of the same name or stem (a.md -> "
            "a.pdf), so one golden file scores a corpus in any format.",
        )
        parser.add_argument(
            "--unanswerable",
            type=Path,
            help='JSON Lines of questions the corpus does not answer ({"id", '
            '"question"}): count those the answerer declines as off-topic.',
        )

    def handle(self, *args, **options):
        if not options["corpus"].is_dir():
            raise CommandError(f"{options['corpus']} is not a folder")
        try:
            cases = golden.parse_cases(options["cases"].read_text("utf-8"))
        except (OSError, golden.GoldenImportError) as exc:
            raise CommandError(str(exc)) from None
        for note in golden.ignored_keys(cases):
            self.stderr.write(f"warning: {note}")
        unanswerable = None
        if path := options["unanswerable"]:
            try:
                unanswerable = golden.parse_questions(path.read_text("utf-8"))
            except (OSError, golden.GoldenImportError) as exc:
                raise CommandError(f"--unanswerable {path}: {exc}") from None
        baseline = options["baseline"] and _read_baseline(options["baseline"])
        strategy = {"structure": retrieval.DEFAULT, None: None}.get(
            options["strategy"], options["strategy"]
        )
        files, cases, left_out = self._select(options, cases)
        collection = self._scratch(options, strategy)
        try:
            self._ingest(collection, files)
            problems = None
            if options["match"] == "text":
                cases, problems = golden.locate_cases(collection, cases)
            else:
                problems = _missing_sources(collection, cases)
                golden.check_spans(
                    collection, [c for c in cases if c["id"] not in problems]
                )
                problems = problems or None
            outcome = evaluation.evaluate(collection, cases, strategy=strategy)
            if problems is not None:
                evaluation.mark_unlocatable(outcome, problems)
            if unanswerable:
                outcome["unanswerable"] = evaluation.evaluate_unanswerable(
                    collection, unanswerable
                )
            config = evaluation.config_of(collection, strategy)
        except golden.GoldenImportError as exc:
            raise CommandError(str(exc)) from None
        finally:
            if not options["keep"]:
                collection.delete()
        self._print(outcome["aggregate"], config)
        if problems:
            self._print_unlocatable(problems)
        if left_out:
            self._print_left_out(left_out)
        if unanswerable:
            self._print_unanswerable(outcome["unanswerable"], outcome["aggregate"])
        if baseline:
            outcome["baseline"] = self._compare(
                baseline, outcome, config, options["baseline"]
            )
        if options["json_out"]:
            where = {
                "corpus": str(options["corpus"]),
                "cases_file": str(options["cases"]),
                "match": options["match"],
                "include": options["include"],
            }
            payload = {"config": {**config, **where}, **outcome, "left_out": left_out}
            options["json_out"].write_text(json.dumps(payload, indent=2) + "\n")
            self.stdout.write(f"Wrote {options['json_out']}")

    def _compare(self, baseline: dict, outcome: dict, config: dict, path: Path) -> dict:
        before, after = baseline["aggregate"], outcome["aggregate"]
        found = evaluation.compare(
            baseline["cases"], outcome["cases"], baseline.get("config", {}), config
        )
        changed, difference = found["changed"], found["difference"]
        self.stdout.write(
            f"Against {path}: recall@{after['k']} {before.get('recall_at_k', 0):.3f}"
            f" -> {after['recall_at_k']:.3f}; {difference['gained']} case(s) now "
            f"answered, {difference['lost']} now missed: {difference['verdict']} "
            f"(exact McNemar test, p = {difference['p']})"
        )
        for case in changed:
            state = "now answered" if case["after"] else "now missed"
            self.stdout.write(f"  {state}: {case['id']} ({case['kind']})")
        answers = found["answer_difference"]
        if answers is not None:
            self.stdout.write(
                f"Answers quoting every span: {before.get('answer_all_spans', 0)} -> "
                f"{after['answer_all_spans']} of {after['n']}; {answers['gained']} "
                f"case(s) now quoted whole, {answers['lost']} no longer: "
                f"{answers['verdict']} (exact McNemar test, p = {answers['p']})"
            )
            for case in found["answer_changed"]:
                state = "now quoted whole" if case["after"] else "no longer whole"
                self.stdout.write(f"  {state}: {case['id']} ({case['kind']})")
        if found["unlike"]:
            self.stdout.write(f"  Not like for like: {'; '.join(found['unlike'])}.")
        return {
            "file": str(path),
            **difference,
            "gained_ids": [c["id"] for c in changed if c["after"]],
            "lost_ids": [c["id"] for c in changed if not c["after"]],
            "unlike": found["unlike"],
            # The same test on the answers quoting every span (issue #28); None
            # when the baseline was written before answers were measured.
            "answer": answers
            and {
                **answers,
                "gained_ids": [c["id"] for c in found["answer_changed"] if c["after"]],
                "lost_ids": [
                    c["id"] for c in found["answer_changed"] if not c["after"]
                ],
            },
        }

    def _scratch(self, options, strategy: str | None) -> Collection:
        """A scratch collection of the default settings but for the options and
        the chunking of the strategy."""
        tokens = options["max_tokens"] or None
        overrides = {
            "chunk_tokens": tokens,
            "chunk_overlap": options["overlap"] or 0,
            "top_k": options["k"] or None,
            "context_budget": options["budget"] or None,
            "retrieval_mode": options["retrieval"] or None,
            "embedding_model": options["embedding_model"] or None,
            **evaluation.strategy_chunking(strategy, tokens),
        }
        return evaluation.scratch_collection(Collection(name="kb_eval"), overrides)

    def _select(self, options, cases: list[dict]) -> tuple[list, list, dict]:
        """The corpus files to ingest (those --include matches), the cases to
        run and, by id, the cases left out because their evidence is not
        included; refused before any work when either selection is empty."""
        include = options["include"]
        files, excluded = [], set()
        for root, path in files_under([options["corpus"]]):
            name = path.relative_to(root).as_posix()
            if evaluation.included(name, include):
                files.append((root, path))
            else:
                excluded.add(name)
        if not files:
            raise CommandError(
                f"--include {' '.join(include)} matches none of the "
                f"{len(excluded)} files in {options['corpus']}"
            )
        if include:
            self.stdout.write(
                f"--include takes {len(files)} of {len(files) + len(excluded)} "
                "corpus files."
            )
        kept, left_out = evaluation.leave_out_excluded(cases, excluded)
        if not kept:
            raise CommandError(
                f"--include leaves out the evidence of all {len(cases)} cases "
                "(nothing to measure)"
            )
        return files, kept, left_out

    def _ingest(self, collection: Collection, files: list) -> None:
        """The corpus files an upload would take; one it refuses (empty,
        binary...) is named and left out, as the upload page would, and the
        run goes on: cases citing it count as unlocatable."""
        stored = 0
        for root, path in files:
            name = path.relative_to(root).as_posix()
            try:
                uploads.store_source(collection, name, path.read_bytes())
            except (OSError, ingestion.IngestionError, parsing.ParseError) as exc:
                self.stderr.write(f"warning: {name} left out: {exc}")
                continue
            stored += 1
        evaluation.index_all(collection, keep_going=True)
        failed = collection.sources.filter(status=Source.Status.FAILED)
        for source in failed:
            self.stderr.write(f"warning: {source.file_name} failed: {source.error}")
        self.stdout.write(
            f"Indexed {stored - failed.count()} of {len(files)} files into a "
            "scratch collection."
        )

    def _print(self, agg: dict, config: dict) -> None:
        self.stdout.write(
            f"Config: {config['strategy']} pipeline, {config['keyword_ranking']} "
            f"keyword ranking, section weight {config['section_weight']}, "
            f"{config['chunk_strategy']} {config['chunk_tokens']} tokens, "
            f"overlap {config['chunk_overlap']}, k={config['top_k']}, budget "
            f"{config['context_budget']}, {config['retrieval_mode']} retrieval, "
            f"model {config['model']}"
        )
        self.stdout.write(
            f"recall@{agg['k']} {agg['recall_at_k']:.3f} "
            f"(95% CI {agg['recall_ci95'][0]:.2f}-{agg['recall_ci95'][1]:.2f})  "
            f"partial {agg['partial']:.3f}  "
            f"MRR {agg['mrr']:.3f}  context tokens {agg['context_tokens_mean']:.0f}  "
            f"duplicates {agg['duplicates_mean']:.2f}  latency p50 "
            f"{agg['latency_p50_ms']:.1f} ms p95 {agg['latency_p95_ms']:.1f} ms  "
            f"(n={agg['n']})"
        )
        if agg.get("answer_span_recall") is not None:
            precision = agg["answer_precision"]
            self.stdout.write(
                f"extractive answer: quotes from {agg['answer_span_recall']:.3f} of "
                f"the required spans (all of them in {agg['answer_all_spans']} "
                f"cases), {precision or 0:.3f} of its sentences on evidence, "
                f"{agg['answer_words_mean']:.0f} words"
            )
        for kind, figures in agg["by_kind"].items():
            self.stdout.write(
                f"  {kind:<11} n={figures['n']:<3} "
                f"recall {figures['recall_at_k']:.3f}  "
                f"partial {figures['partial']:.3f}  tokens "
                f"{figures['context_tokens_mean']:.0f}"
            )
        if (real := agg.get("real_questions") or {}).get("n"):
            self.stdout.write(
                f"  from real questions n={real['n']:<3} "
                f"recall {real['recall_at_k']:.3f}  partial {real['partial']:.3f}"
            )

    def _print_unlocatable(self, problems: dict[str, list[str]]) -> None:
        self.stdout.write(
            f"Unlocatable: {len(problems)} case(s) with a span whose text is not "
            "in the corpus (scored as misses):"
        )
        for case_id, why in problems.items():
            self.stdout.write(f"  {case_id}: {'; '.join(why)}")

    def _print_left_out(self, left_out: dict[str, list[str]]) -> None:
        self.stdout.write(
            f"Left out by --include: {len(left_out)} case(s) whose evidence is in "
            "files not ingested (not scored):"
        )
        for case_id, why in left_out.items():
            self.stdout.write(f"  {case_id}: {'; '.join(why)}")

    def _print_unanswerable(self, found: dict, agg: dict) -> None:
        if all(q["top_similarity"] is None for q in found["questions"]):
            self.stdout.write(
                "Unanswerable questions: not applicable; keyword retrieval has no "
                "similarity to decline by."
            )
            return
        self.stdout.write(
            f"Unanswerable questions declined: {found['declined']} of {found['n']} "
            f"({found['declined_share']:.0%}); answerable cases declined: "
            f"{agg['declined']} of {agg['n']}"
        )


def _missing_sources(collection: Collection, cases: list[dict]) -> dict[str, list]:
    """Spans (or alternatives) citing a file the collection holds no index of
    (left out or failed above, or no such file in the corpus), by case: listed,
    and scored as they come (a span covered through another file still counts),
    while the other cases are checked against their sources and run."""
    indexed = collection.sources.exclude(status=Source.Status.FAILED)
    stored = set(indexed.values_list("file_name", flat=True))
    problems: dict[str, list[str]] = {}
    for case in cases:
        for one in golden.every_span(case["required_spans"]):
            if one["file"] not in stored:
                problems.setdefault(case["id"], []).append(
                    f"{one['file']}[{one['start']}:{one['end']}]: no indexed "
                    "source of that name in the collection"
                )
    return problems


def _read_baseline(path: Path) -> dict:
    """An earlier --json output, checked before any ingestion starts."""
    try:
        data = jsontext.loads(path.read_text("utf-8"))
    except jsontext.JsonError as exc:
        raise CommandError(f"--baseline {path} {exc}") from None
    except (OSError, ValueError) as exc:  # unreadable, or not UTF-8
        raise CommandError(f"--baseline {path}: {exc}") from None
    if not (
        isinstance(data, dict)
        and isinstance(data.get("aggregate"), dict)
        and isinstance(data.get("cases"), list)
        and all(isinstance(c, dict) and "id" in c and "hit" in c for c in data["cases"])
    ):
        raise CommandError(
            f"--baseline {path} is not a kb_eval --json file (it needs "
            '"aggregate" and "cases" with an "id" and "hit" each)'
        )
    return data
