"""The measure of retrieval against golden cases' evidence spans: scoring a case,
a run's figures and their statistics, comparing runs, scratch copies indexed
under other settings, runs from the dashboard and the recall floor. The cases
themselves (reading, importing, spans) are kb.golden's."""

from __future__ import annotations

import logging
import math
from fnmatch import fnmatchcase
from typing import Any

from django.conf import settings
from django.utils import timezone

from kb import (
    answering,
    embedding,
    index_config,
    ingestion,
    parsing,
    questions,
    readers,
    retrieval,
    uploads,
)
from kb.golden import cases_of, stale_cases
from kb.models import Collection, EvalRun, Source
from kb.percentiles import percentile
from kb.retrieval import hnsw_recall, keywords, reranking
from kb.retrieval import late_interaction as late_interaction_stage

logger = logging.getLogger(__name__)


def mark_unlocatable(outcome: dict[str, Any], problems: dict[str, list[str]]) -> None:
    """Add the spans `locate_cases` could not place to a run's cases and count
    the cases concerned in its aggregate."""
    for case in outcome["cases"]:
        if case["id"] in problems:
            case["unlocatable"] = problems[case["id"]]
    outcome["aggregate"]["unlocatable"] = len(problems)


def included(name: str, patterns: list[str]) -> bool:
    """Whether a corpus file (its path relative to the corpus, with "/") matches
    one of `kb_eval --include`'s shell-style patterns ("*" also crosses "/", so
    "fr/**" and "fr/*" both take the whole fr/ tree); no patterns take every file."""
    return not patterns or any(fnmatchcase(name, p) for p in patterns)


def leave_out_excluded(
    cases: list[dict[str, Any]], excluded: set[str]
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The cases `kb_eval --include` can measure, and by case id those it cannot:
    a case with a span whose every alternative is in a corpus file the patterns
    left out. No collection of those files could answer it, so it is left out
    of the figures rather than scored as a miss (a per-language collection
    measured with a mixed golden file keeps its own language's figure)."""
    kept, left_out = [], {}
    for case in cases:
        why = [  # each file once, though several spans may cite it
            f"{file} is not included"
            for file in dict.fromkeys(
                span["file"]
                for span in case["required_spans"]
                if all(
                    one["file"] in excluded
                    for one in [span, *span.get("alternatives", [])]
                )
            )
        ]
        if why:
            left_out[case["id"]] = why
        else:
            kept.append(case)
    return kept, left_out


# --- the measure ----------------------------------------------------------------------
# A case is a hit at k when the context handed to the answerer (the top-k sections
# after expansion and merging) covers every required span completely; several
# retrieved ranges of one source may cover a span jointly. A span with alternatives
# is covered when any one of them is.

Range = tuple[str, int, int]  # file, start, end


def covered(span: dict[str, Any], ranges: list[Range]) -> bool:
    return any(_covers(one, ranges) for one in [span, *span.get("alternatives", [])])


def _covers(span: dict[str, Any], ranges: list[Range]) -> bool:
    pos, end = span["start"], span["end"]
    for _, start, stop in sorted(r for r in ranges if r[0] == span["file"]):
        if start > pos:
            break
        pos = max(pos, stop)
        if pos >= end:
            return True
    return pos >= end


def score_case(case: dict[str, Any], ranges_by_rank: list[list[Range]]) -> dict:
    """Hit, partial credit and the rank at which the case first became a hit."""
    spans = case["required_spans"]
    every = [r for ranges in ranges_by_rank for r in ranges]
    done = [covered(s, every) for s in spans]
    first_hit_rank = None
    if all(done):
        for rank in range(1, len(ranges_by_rank) + 1):
            top = [r for ranges in ranges_by_rank[:rank] for r in ranges]
            if all(covered(s, top) for s in spans):
                first_hit_rank = rank
                break
    return {
        "hit": all(done),
        "partial": sum(done) / len(spans),
        "first_hit_rank": first_hit_rank,
    }


def duplicates(result) -> int:
    """Passages in the context that repeat or overlap another one."""
    seen: list[tuple[int, int, int]] = []
    texts: set[str] = set()
    count = 0
    for p in result.passages:
        if p.is_header:
            continue  # tables' header lines: alike by design, tiny, not repeats
        key = " ".join(p.text.split())
        overlap = any(
            sid == p.source_id and s < p.end and p.start < e for sid, s, e in seen
        )
        if overlap or key in texts:
            count += 1
        seen.append((p.source_id, p.start, p.end))
        texts.add(key)
    return count


def ranked_ranges(passages) -> list[list[Range]]:
    """Each result's cited ranges, best first. A table's header line is not a
    result of its own: it counts with the rows that follow it."""
    ranked: list[list[Range]] = []
    header: list[Range] = []
    for p in passages:
        ranges = [(p.file_name, loc.start, loc.end) for loc in p.locations]
        if p.is_header:
            header += ranges
            continue
        ranked.append(header + ranges)
        header = []
    if header:
        ranked.append(header)
    return ranked


def answer_figures(case: dict[str, Any], reply) -> dict[str, int]:
    """How the extractive answer's quoted sentences meet the case's evidence:
    required spans at least one quoted sentence overlaps, and quoted sentences
    that overlap a required span (an alternative counts as its span)."""
    quoted = [(s.passage.file_name, s.start, s.end) for s in reply.sentences]
    spans = case["required_spans"]

    def meets(span: dict[str, Any], found: Range) -> bool:
        name, start, end = found
        return any(
            one["file"] == name and start < one["end"] and one["start"] < end
            for one in [span, *span.get("alternatives", [])]
        )

    return {
        "spans": len(spans),
        "spans_quoted": sum(any(meets(sp, q) for q in quoted) for sp in spans),
        "sentences": len(quoted),
        "on_evidence": sum(any(meets(sp, q) for sp in spans) for q in quoted),
        "words": len(reply.text.split()),
    }


def evaluate_case(collection: Collection, case: dict[str, Any], **options) -> dict:
    result = retrieval.retrieve(collection, case["question"], **options)
    reply = answering.extractive(result)
    scored = score_case(case, ranked_ranges(result.passages))
    answer = answer_figures(case, reply)
    whole = answer["spans_quoted"] == answer["spans"]
    on_answer = bool(case.get("on_answer"))
    return {
        "id": case["id"],
        "kind": case["kind"],
        "question": case["question"],
        # Made from a logged question (the content gaps page): recall apart.
        "real": bool(case.get("real")),
        **scored,
        # Whether the answer quotes every required span; a case scored on the
        # answer (made from an answer marked not helpful) passes only then.
        "answer_hit": whole,
        "on_answer": on_answer,
        "passed": scored["hit"] and (whole or not on_answer),
        # The answerer would decline it as off-topic (answering.off_topic).
        "declined": answering.off_topic(result) is not None,
        "top_similarity": _similarity(result),
        "context_tokens": result.context_tokens,
        "duplicates": duplicates(result),
        "latency_ms": result.timings_ms.get("total", 0.0),
        # The extractive answer, against the evidence (aggregate: answer_*).
        "answer": answer,
        "retrieved": [
            {
                "file": p.file_name,
                "start": p.start,
                "end": p.end,
                "heading_path": p.heading_path,
                "tokens": p.tokens,
                "matched": p.matched_label,
                "text": p.text,  # as handed to the answerer
            }
            for p in result.passages
        ],
    }


def aggregate(results: list[dict[str, Any]], k: int) -> dict[str, Any]:
    def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(rows)
        if not n:
            return {"n": 0}
        latencies = sorted(r["latency_ms"] for r in rows)
        hits = sum(r["hit"] for r in rows)
        return {
            "n": n,
            "recall_at_k": round(hits / n, 4),
            "recall_ci95": [round(x, 4) for x in wilson(hits, n)],
            "partial": round(sum(r["partial"] for r in rows) / n, 4),
            "mrr": round(
                sum(1 / r["first_hit_rank"] for r in rows if r["first_hit_rank"]) / n, 4
            ),
            "context_tokens_mean": round(sum(r["context_tokens"] for r in rows) / n, 1),
            "duplicates_mean": round(sum(r["duplicates"] for r in rows) / n, 3),
            "latency_p50_ms": round(percentile(latencies, 50), 2),
            "latency_p95_ms": round(percentile(latencies, 95), 2),
            "declined": sum(bool(r.get("declined")) for r in rows),
            **_answer_aggregate(rows),
        }

    kinds = sorted({r["kind"] for r in results})
    return {
        "k": k,
        **figures(results),
        "by_kind": {
            kind: figures([r for r in results if r["kind"] == kind]) for kind in kinds
        },
        # Cases made from questions staff really asked (issue #18).
        "real_questions": figures([r for r in results if r.get("real")]),
    }


def _answer_aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Answer span recall: the mean share of a case's required spans its answer
    quotes from; precision: the share of quoted sentences on evidence; words."""
    answers = [r["answer"] for r in rows if r.get("answer")]
    if not answers:
        return {}
    sentences = sum(a["sentences"] for a in answers)
    return {
        "answer_span_recall": round(
            sum(a["spans_quoted"] / a["spans"] for a in answers) / len(answers), 4
        ),
        "answer_all_spans": sum(a["spans_quoted"] == a["spans"] for a in answers),
        "answer_precision": round(sum(a["on_evidence"] for a in answers) / sentences, 4)
        if sentences
        else None,
        "answer_words_mean": round(sum(a["words"] for a in answers) / len(answers), 1),
    }


def _similarity(result) -> float | None:
    found = result.top_similarity
    return None if found is None else round(found, 4)


def evaluate_unanswerable(
    collection: Collection, questions: list[dict[str, str]], **options
) -> dict[str, Any]:
    """How many questions the collection does not answer are declined, not
    answered from unrelated passages (answering.off_topic)."""
    rows = []
    for question in questions:
        result = retrieval.retrieve(collection, question["question"], **options)
        rows.append(
            {
                **question,
                "declined": answering.off_topic(result) is not None,
                "top_similarity": _similarity(result),
            }
        )
    declined = sum(r["declined"] for r in rows)
    return {
        "n": len(rows),
        "declined": declined,
        "declined_share": round(declined / len(rows), 4) if rows else 0.0,
        "questions": rows,
    }


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a share (95 % by default): what recall@k could
    be on other questions of the same kind, given `n` cases. With 30 cases, 27 hits
    (0.90) is anything from 0.74 to 0.97."""
    if not n:
        return 0.0, 0.0
    share = hits / n
    centre = share + z * z / (2 * n)
    spread = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def unlike(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    before_config: dict[str, Any],
    after_config: dict[str, Any],
) -> list[str]:
    """Why two runs do not compare like for like (empty when they do): recall is
    only comparable on the same cases, k and context budget."""
    reasons = []
    for key, name in [("top_k", "k"), ("context_budget", "context budget")]:
        old, new = before_config.get(key), after_config.get(key)
        if old != new:  # "?": a run recorded without it
            reasons.append(
                f"{name} {'?' if old is None else old} vs {'?' if new is None else new}"
            )
    old_ids = {c["id"] for c in before}
    new_ids = {c["id"] for c in after}
    if new_ids - old_ids:
        reasons.append(f"{len(new_ids - old_ids)} case(s) only in the later run")
    if old_ids - new_ids:
        reasons.append(f"{len(old_ids - new_ids)} case(s) only in the earlier run")
    return reasons


def paired_difference(changed: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether B answers more cases than A beyond chance, from the cases that
    changed outcome (exact McNemar test: under no difference, each changed case
    is a fair coin). Cases both runs hit or both miss say nothing either way."""
    gained = sum(1 for c in changed if c["after"])
    lost = len(changed) - gained
    n = gained + lost
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1)) / 2**n
    p = min(1.0, 2 * tail)
    if p >= 0.05:
        verdict = "within noise"
    else:
        verdict = "better" if gained > lost else "worse"
    return {"gained": gained, "lost": lost, "p": round(p, 4), "verdict": verdict}


def evaluate(
    collection: Collection,
    cases: list[dict[str, Any]],
    *,
    k: int | None = None,
    budget: int | None = None,
    mode: str | None = None,
    progress=None,
    strategy: str | None = None,
    late_interaction: bool | None = None,
) -> dict[str, Any]:
    """Run every case against the collection's current index (`strategy`: see
    retrieval.STRATEGIES; None is the collection's own; `late_interaction`:
    None as KB_LATE_INTERACTION says)."""
    k = k or collection.top_k
    options = {"k": k, "budget": budget, "mode": mode}
    if strategy:
        options["strategy"] = strategy
    if late_interaction is not None:
        options["late_interaction"] = late_interaction
    results = []
    for i, case in enumerate(cases, 1):
        results.append(evaluate_case(collection, case, **options))
        if progress:
            progress(i, len(cases))
    return {"aggregate": aggregate(results, k), "cases": results}


# --- configurations ----------------------------------------------------------

CONFIG_FIELDS = Collection.CONFIG_FIELDS


# A run's overrides of these apply to the live index (evaluate's options); the
# others (index_config.INDEX_FIELDS) need an index of their own, on a scratch copy.
RETRIEVAL_OPTIONS = {
    "top_k": "k",
    "context_budget": "budget",
    "retrieval_mode": "mode",
    "strategy": "strategy",
    "late_interaction": "late_interaction",
}


def config_of(
    collection: Collection,
    strategy: str | None = None,
    late_interaction: bool | None = None,
) -> dict[str, Any]:
    """Everything that decides retrieval quality, as recorded with a run: the
    strategy, the chunking its index was actually built with (values listed when
    its sources differ), and how that index differs from the settings."""
    embedder = embedding.for_collection(collection)
    built = index_config.index_config(collection)
    return {
        **{f: getattr(collection, f) for f in CONFIG_FIELDS},
        **{f: built[f] for f in index_config.INDEX_FIELDS if f in built},
        "metadata_policy": index_config.policy_for(collection).decisions,
        "model": embedder.model_name,
        "precision": embedder.precision,
        "window": embedder.window,
        "index_out_of_date": index_config.index_differences(collection),
        "strategy": retrieval.strategy_of(collection, strategy),
        "keyword_ranking": keywords.ranking(),
        "section_weight": settings.KB_SECTION_WEIGHT,
        **reranking.run_config(),  # issue #17: only when a reranker is set
        **late_interaction_stage.run_config(late_interaction),  # only when on
    }


def is_experiment(run: EvalRun) -> bool:
    """A run under other settings than the live ones: not what staff get."""
    return bool(run.config.get("overrides") or run.config.get("scratch"))


def scratch_copy(
    collection: Collection,
    overrides: dict[str, Any],
    *,
    policy: dict[str, str] | None = None,
    sources=None,
) -> Collection:
    """A hidden collection with the sources of the live index (or these) under
    other settings (and another metadata policy); cases stay with the collection.
    Its text is as restricted as the collection's, whose groups decide who may
    see it (`live`, CollectionQuerySet.open_to)."""
    scratch = scratch_collection(
        collection,
        overrides,
        description=f"Evaluation copy of {collection.name}",
        metadata_policy=collection.metadata_policy if policy is None else policy,
        live=collection,
    )
    for source in indexed_sources(collection) if sources is None else sources:
        copy, _ = uploads.store_source(
            scratch,
            source.file_name,
            _stored_bytes(source),
            title=source.title,
            metadata=source.metadata,
        )
        if source.language:  # the editor's choice holds for the copy too
            Source.objects.filter(pk=copy.pk).update(language=source.language)
    return scratch


def indexed_sources(collection: Collection):
    """The sources the live index holds (some version of each indexed): what a
    copy under other settings is built from. One that failed and was never
    indexed is in no index, and would only fail the copy again."""
    return collection.sources.filter(indexed_version__isnull=False).order_by("pk")


def scratch_collection(
    base: Collection, overrides: dict[str, Any], **fields: Any
) -> Collection:
    """A new hidden collection (`is_scratch`) with the settings of `base` (saved or
    not: `Collection()` is the defaults) but for the `overrides` that are not None,
    named after `base` and the time to the microsecond."""
    config = {f: getattr(base, f) for f in CONFIG_FIELDS}
    config.update(
        {k: v for k, v in overrides.items() if k in CONFIG_FIELDS and v is not None}
    )
    return Collection.objects.create(
        name=f"{base.name} [scratch {timezone.now():%Y%m%d-%H%M%S-%f}]",
        is_scratch=True,
        **config,
        **fields,
    )


def strategy_chunking(
    strategy: str | None, chunk_tokens: int | None = None
) -> dict[str, Any]:
    """The chunking a named strategy (retrieval.STRATEGIES) is built on: its
    chunk strategy, and a baseline's chunk budget unless `chunk_tokens` is given;
    {} for none."""
    structure, fixed = Collection.Strategy.STRUCTURE, Collection.Strategy.FIXED
    if strategy == retrieval.SECTIONS:
        tokens = chunk_tokens or retrieval.SECTIONS_CHUNK_TOKENS
        return {"chunk_strategy": structure, "chunk_tokens": tokens}
    if strategy == retrieval.FIXED:
        tokens = chunk_tokens or retrieval.FIXED_CHUNK_TOKENS
        return {"chunk_strategy": fixed, "chunk_tokens": tokens}
    if strategy == retrieval.DEFAULT:
        return {"chunk_strategy": structure}
    return {}


def _stored_bytes(source: Source) -> bytes:
    """The original of a file the worker reads (PDF, ...), else the stored text."""
    if readers.format_of(source.file_name) and source.file:
        with source.file.open("rb") as stored:
            return stored.read()
    return source.text.encode("utf-8")


def index_all(collection: Collection, progress=None, keep_going=False) -> None:
    """Index every source of the collection in this process. With `keep_going`,
    a source that fails (its reason recorded on it, as a worker records it) is
    left out and the others are indexed; else the failure ends the call."""
    sources = list(collection.sources.all())
    for i, source in enumerate(sources, 1):
        try:
            ingestion.ingest(source.pk)
        except (parsing.ParseError, ingestion.IngestionError):
            if not keep_going:  # the file's own fault: recorded on the source
                raise
        if progress:
            progress(i, len(sources))
    hnsw_recall.after_publish(collection)


# --- runs (the dashboard's button) -------------------------------------------


def start_run(collection: Collection, overrides: dict[str, Any] | None = None):
    """Create a queued run; the caller enqueues `kb.jobs.run_evaluation`."""
    return EvalRun.objects.create(
        collection=collection,
        config={"overrides": {k: v for k, v in (overrides or {}).items() if v}},
    )


def execute_run(run_id: int) -> EvalRun:
    """Evaluate and store it all: k, budget and mode overrides on the live index,
    chunking overrides on a scratch copy indexed for the run."""
    run = EvalRun.objects.select_related("collection").get(pk=run_id)
    if run.status in (EvalRun.Status.DONE, EvalRun.Status.FAILED):
        return run  # the same job again (issue #26): the run has its outcome
    collection = run.collection
    overrides = run.config.get("overrides", {})
    rebuild = {k: v for k, v in overrides.items() if k in index_config.INDEX_FIELDS}
    retrieval = {k: v for k, v in overrides.items() if k in RETRIEVAL_OPTIONS}
    _progress(run, status=EvalRun.Status.RUNNING, stage="starting")
    target, not_indexed = collection, []
    try:
        if rebuild:
            not_indexed = _not_indexed(collection)
            # The copy and its id on the run, or neither: a run whose job is lost
            # has its copy dropped (kb.recovery).
            with uploads.storing():
                target = scratch_copy(collection, rebuild)
                EvalRun.objects.filter(pk=run.pk).update(
                    config={**run.config, "scratch_id": target.pk}
                )
            index_all(
                target, lambda i, n: _progress(run, stage="indexing", done=i, total=n)
            )
        # Stale spans cannot be covered: such cases are reported, not scored.
        stale = [
            {k: c[k] for k in ("id", "question", "problems")}
            for c in stale_cases(collection)
        ]
        left_out = {c["id"] for c in stale}
        cases = [c for c in cases_of(collection) if c["id"] not in left_out]
        outcome = evaluate(
            target,
            cases,
            **{RETRIEVAL_OPTIONS[k]: v for k, v in retrieval.items()},
            progress=lambda i, n: _progress(run, stage="evaluating", done=i, total=n),
        )
        found = config_of(
            target, overrides.get("strategy"), overrides.get("late_interaction")
        )
        run.config = {
            **found,
            **retrieval,
            "overrides": overrides,
            "scratch": bool(rebuild),
            "cases": len(cases),
            "stale_cases": stale,
            "sources_left_out": not_indexed,
        }
        run.aggregate = outcome["aggregate"]
        run.cases = outcome["cases"]
        run.status = EvalRun.Status.DONE
        run.finished = timezone.now()
        run.save()
        if not is_experiment(run):  # what staff get now: gaps it answers close
            passed = [c["id"] for c in run.cases if c.get("passed")]
            questions.close_answered(collection, passed, run.pk)
    except Exception as exc:
        EvalRun.objects.filter(pk=run.pk).update(
            status=EvalRun.Status.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            finished=timezone.now(),
        )
        raise
    finally:
        if target is not collection:
            target.delete()
    return run


def _not_indexed(collection: Collection) -> list[str]:
    """The files a scratch copy leaves out (not in the live index), logged."""
    names = list(
        collection.sources.filter(indexed_version__isnull=True)
        .order_by("file_name")
        .values_list("file_name", flat=True)
    )
    if names:
        logger.info(
            "evaluation copy of %s leaves out %d source(s) not in the live index: %s",
            collection,
            len(names),
            ", ".join(names),
        )
    return names


def _progress(run: EvalRun, status: str | None = None, **progress: Any) -> None:
    fields: dict[str, Any] = {"progress": progress}
    if status:
        fields["status"] = status
    EvalRun.objects.filter(pk=run.pk).update(**fields)


def compare(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    before_config: dict[str, Any],
    after_config: dict[str, Any],
) -> dict[str, Any]:
    """Two runs' cases side by side: which changed outcome, whether the
    difference is beyond chance, and why they may not compare like for like;
    the same for the answers quoting every span when both runs measured them."""
    changed = changed_between(before, after)
    found = {
        "changed": changed,
        "difference": paired_difference(changed),
        "unlike": unlike(before, after, before_config, after_config),
        "answer_changed": [],
        "answer_difference": None,
    }
    if answers_measured(before) and answers_measured(after):
        answered = changed_between(before, after, ANSWER)
        found["answer_changed"] = answered
        found["answer_difference"] = paired_difference(answered)
    return found


# What a case, a floor or a comparison is about: retrieval holds every required
# span in the context, or the answer quotes every one of them.
RETRIEVAL, ANSWER = Collection.FloorOn.RETRIEVAL.value, Collection.FloorOn.ANSWER.value


def held(case: dict[str, Any], measure: str = RETRIEVAL) -> bool:
    """Whether the case holds on this measure (runs made before answers were
    measured have no answer: it does not hold)."""
    if measure == RETRIEVAL:
        return bool(case["hit"])
    if "answer_hit" in case:
        return bool(case["answer_hit"])
    answer = case.get("answer")
    return bool(answer) and answer["spans_quoted"] == answer["spans"]


def answers_measured(cases: list[dict[str, Any]]) -> bool:
    """Whether a run measured its answers (runs since issue #28 do)."""
    return all(case.get("answer") for case in cases)


def changed_cases(
    before: EvalRun, after: EvalRun, measure: str = RETRIEVAL
) -> list[dict[str, Any]]:
    """Cases whose outcome differs between two runs."""
    return changed_between(before.cases, after.cases, measure)


def changed_between(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    measure: str = RETRIEVAL,
) -> list[dict[str, Any]]:
    """Cases (by id, in both lists) whose outcome on the measure differs:
    `after` True is a gain."""
    old = {c["id"]: c for c in before}
    changes = []
    for case in after:
        prev = old.get(case["id"])
        if prev is not None and held(prev, measure) != held(case, measure):
            changes.append(
                {
                    "id": case["id"],
                    "question": case.get("question", ""),
                    "kind": case.get("kind", ""),
                    "before": held(prev, measure),
                    "after": held(case, measure),
                    "measure": measure,
                }
            )
    return changes


def answer_rate(aggregate: dict[str, Any]) -> float | None:
    """The share of cases whose answer quotes every required span; None for a
    run made before answers were measured."""
    if "answer_all_spans" not in aggregate or not aggregate.get("n"):
        return None
    return round(aggregate["answer_all_spans"] / aggregate["n"], 4)


def measures(collection: Collection) -> list[str]:
    """What the collection's floor applies to."""
    if collection.floor_on == Collection.FloorOn.BOTH:
        return [RETRIEVAL, ANSWER]
    return [collection.floor_on]


def figure(aggregate: dict[str, Any], measure: str) -> float | None:
    """A run's figure on a measure: recall@k, or the answers' all-spans rate."""
    if measure == RETRIEVAL:
        return aggregate.get("recall_at_k")
    return answer_rate(aggregate)


def floor_of(collection: Collection, measure: str) -> float | None:
    if measure == RETRIEVAL:
        return collection.recall_floor
    return collection.answer_floor


def can_raise_floor(collection: Collection, run: EvalRun) -> bool:
    """Whether setting the floor from this run raises it: a finished run of
    the live configuration, at or above the floor on every measure it applies
    to and above it on one (a floor not set yet is raised by any figure)."""
    if run.status != EvalRun.Status.DONE or is_experiment(run):
        return False
    pairs = [
        (figure(run.aggregate, m), floor_of(collection, m))
        for m in measures(collection)
    ]
    if any(value is None for value, _ in pairs):
        return False
    if any(floor is not None and value < floor for value, floor in pairs):
        return False
    return any(floor is None or value > floor for value, floor in pairs)


def raise_floor(collection: Collection, run: EvalRun) -> bool:
    """Set the floor (recall and answer figures both, from one run) when it
    raises it on what it applies to: it is only ever raised."""
    if not can_raise_floor(collection, run):
        return False
    collection.recall_floor = run.aggregate.get("recall_at_k")
    collection.answer_floor = answer_rate(run.aggregate)
    collection.floor_run = run
    collection.save(update_fields=["recall_floor", "answer_floor", "floor_run"])
    return True


def below_floor(collection: Collection, run: EvalRun) -> list[str]:
    """The measures on which a run of the live configuration is under the floor
    (an experiment is no regression of the live configuration)."""
    if is_experiment(run) or run.status != EvalRun.Status.DONE:
        return []
    below = []
    for measure in measures(collection):
        value, floor = figure(run.aggregate, measure), floor_of(collection, measure)
        if floor is not None and value is not None and value < floor:
            below.append(measure)
    return below


def regressions(run: EvalRun) -> list[dict[str, Any]]:
    """Below the floor: the cases that the floor's run held and this one misses,
    on each measure the run is below the floor on."""
    collection = run.collection
    if not collection.floor_run:
        return []
    lost = []
    for measure in below_floor(collection, run):
        changed = changed_cases(collection.floor_run, run, measure)
        lost += [c for c in changed if not c["after"]]
    return lost
