"""What the evaluation dashboard shows: runs, figures, failures, comparisons."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import QueryDict
from django.utils import formats
from django.utils.translation import gettext, gettext_lazy

from kb import charts, evaluation, golden, reindexing
from kb.forms import EvalRunForm, parse_id
from kb.models import Collection, EvalRun
from kb.retrieval import search
from kb.sync import runs as sync_runs

RUNS_SHOWN = 20
ACTIVE = [EvalRun.Status.QUEUED, EvalRun.Status.RUNNING]


def context(params: QueryDict, user) -> dict[str, Any]:
    """The dashboard of one of the collections the user may see (a group-limited
    collection's cases and runs quote its text)."""
    collections = Collection.objects.visible_to(user)
    collections = collections.order_by("name")
    collection = _pick(collections, params.get("collection"))
    if collection is None:
        return {"collections": collections, "collection": None}
    runs = list(
        EvalRun.objects.filter(collection=collection).order_by("-created")[:RUNS_SHOWN]
    )
    # The headline, the chart and the floor are about the live configuration (what
    # staff get); runs under other settings are experiments beside it.
    live = [
        r
        for r in runs
        if r.status == EvalRun.Status.DONE and not evaluation.is_experiment(r)
    ]
    latest = _run(runs, params.get("run")) or (live[0] if live else None)
    shadows = reindexing.shown(collection)
    working = [r for r in shadows if r["open"] and not r["can_decide"]]
    return {
        "collections": collections,
        "collection": collection,
        "form": EvalRunForm(initial=_initial(collection)),
        "runs": [_row(r, collection) for r in runs],
        "auto_refresh": any(r.status in ACTIVE for r in runs) or bool(working),
        "shadows": shadows,
        "latest": latest and _details(latest, collection),
        "chart": charts.line_chart_svg(
            [r.recall for r in reversed(live) if r.recall is not None]
        ),
        "comparison": _comparison(runs, params.get("a"), params.get("b")),
        "stale": golden.stale_cases(collection),
        "vector_search": _vector_search(collection),
        "syncs": sync_runs.states(collection),
    }


def _vector_search(collection: Collection) -> dict[str, Any]:
    """How the collection's nearest chunks are found: exactly when small, else
    through the shared HNSW index unless its recall, measured after every
    publish (kb.retrieval.hnsw_recall), is below the minimum (issue #26)."""
    return {
        "counted": collection.terms_counted is not None,
        "chunks": collection.terms_chunks,
        "by_size": collection.terms_chunks < settings.KB_EXACT_SEARCH_CHUNKS,
        "threshold": settings.KB_EXACT_SEARCH_CHUNKS,
        "exactly": search.searched_exactly(collection),
        "recall": collection.hnsw_recall,
        "measured": collection.hnsw_recall_measured,
        "minimum": settings.KB_HNSW_MIN_RECALL,
    }


class BadParameter(ValueError):
    """A query parameter that cannot mean anything; the message says why."""


def _pick(collections, ref: str | None) -> Collection | None:
    """The asked-for collection, else (none, or one not shown to the user) the first."""
    if not ref:
        return collections.first()
    if (pk := parse_id(ref)) is None:
        raise BadParameter(
            f"collection must be a collection id (digits 0-9), not {ref[:20]!r}"
        )
    return collections.filter(pk=pk).first() or collections.first()


def _run(runs: list[EvalRun], ref: str | None) -> EvalRun | None:
    return next((r for r in runs if ref and str(r.pk) == ref), None)


def _initial(collection: Collection) -> dict[str, Any]:
    return {"collection": collection.pk}


def _row(run: EvalRun, collection: Collection) -> dict[str, Any]:
    return {
        "run": run,
        "experiment": evaluation.is_experiment(run),
        "below_floor": evaluation.below_floor(collection, run),
        "raises_floor": evaluation.can_raise_floor(collection, run),
        "summary": _config_summary(run.config),
        "answer_all_spans": evaluation.answer_rate(run.aggregate),
    }


def _config_summary(config: dict[str, Any]) -> str:
    overrides = config.get("overrides") or {}
    if "chunk_strategy" not in config:
        return ", ".join(f"{k}={v}" for k, v in overrides.items()) or gettext(
            "as configured"
        )
    text = gettext(
        "%(strategy)s %(tokens)s tok, overlap %(overlap)s, k=%(k)s, budget %(budget)s, "
        "%(mode)s"
    ) % {
        "strategy": config["chunk_strategy"],
        "tokens": _value(config["chunk_tokens"]),
        "overlap": _value(config["chunk_overlap"]),
        "k": config["top_k"],
        "budget": config["context_budget"],
        "mode": config["retrieval_mode"],
    }
    if config.get("model"):  # the embedding model (per collection since #27)
        text += f", {config['model']}"
    if config.get("strategy"):  # recorded since issue #17
        text = gettext("%(pipeline)s pipeline: %(settings)s") % {
            "pipeline": config["strategy"],
            "settings": text,
        }
    if config.get("keyword_ranking"):
        text += f" ({config['keyword_ranking']})"
    if config.get("late_interaction"):
        text += gettext(", late interaction")
    if config.get("shadow"):  # issue #18
        text += gettext(" (shadow index #%(pk)s)") % {"pk": config["shadow"]}
    elif config.get("measured_on_shadow"):
        text += gettext(" (measured on shadow index #%(pk)s, now live)") % {
            "pk": config["measured_on_shadow"]
        }
    elif config.get("scratch"):
        text += gettext(" (scratch copy)")
    if overrides:
        text = gettext("experiment: %(settings)s") % {"settings": text}
    if config.get("index_out_of_date"):
        text += gettext("; index out of date: %(reasons)s") % {
            "reasons": "; ".join(config["index_out_of_date"])
        }
    if left_out := config.get("sources_left_out"):
        named = ", ".join(left_out[:3]) + (", …" if len(left_out) > 3 else "")
        text += gettext(
            "; %(count)d source(s) not in the live index left out of the "
            "copy (%(named)s)"
        ) % {"count": len(left_out), "named": named}
    return text


def _value(value: Any) -> str:
    """A recorded index setting: sources built under several show them all."""
    return "/".join(map(str, value)) if isinstance(value, list) else str(value)


def _details(run: EvalRun, collection: Collection) -> dict[str, Any]:
    left_out = run.config.get("stale_cases", [])
    return {
        "run": run,
        "experiment": evaluation.is_experiment(run),
        "left_out": left_out,
        "total": run.config.get("cases", 0) + len(left_out),
        "summary": _config_summary(run.config),
        "by_kind": sorted(run.aggregate.get("by_kind", {}).items()),
        "real_questions": run.aggregate.get("real_questions") or {"n": 0},
        "failed": failed_cases(run.cases),
        "below_floor": evaluation.below_floor(collection, run),
        "regressions": evaluation.regressions(run),
    }


def failed_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's cases that failed, each with `missed_by`: "retrieval" when the
    context lacked a required span, "answer" when the context held them all but
    the extractive answer did not quote them all (issue #28: the staff member
    reads an answer without the fact that sits in a section below it). A case
    scored on the answer (`on_answer`) fails then; the others pass on retrieval
    and are listed as failures of the answer all the same."""
    failed = []
    for case in cases:
        answer = case.get("answer") or {}
        if not case["hit"]:
            failed.append({**case, "missed_by": "retrieval"})
        elif answer and answer["spans_quoted"] < answer["spans"]:
            failed.append({**case, "missed_by": "answer"})
    return failed


def _comparison(runs: list[EvalRun], a: str | None, b: str | None) -> dict | None:
    if not (a or b):
        return None
    before, after = _run(runs, a), _run(runs, b)
    if not (before and after):
        return {"error": gettext("Choose one of the runs below as A and another as B.")}
    if before == after:
        return {
            "error": gettext(
                "Choose two different runs: a run compared with itself says nothing."
            )
        }
    for run in (before, after):
        if run.status != EvalRun.Status.DONE:
            status = _status_words(run)
            error = gettext("Run #%(pk)s %(status)s: only finished runs compare.")
            return {"error": error % {"pk": run.pk, "status": status}}
    return {
        "a": before,
        "b": after,
        "a_summary": _config_summary(before.config),
        "b_summary": _config_summary(after.config),
        "rows": [
            (
                label,
                _figure(before.aggregate.get(key), digits),
                _figure(after.aggregate.get(key), digits),
            )
            for key, label, digits in COMPARED
        ],
        **evaluation.compare(before.cases, after.cases, before.config, after.config),
    }


# The figures set side by side: aggregate key, label, decimals.
COMPARED = [
    ("recall_at_k", "recall@k", 3),
    ("partial", gettext_lazy("partial coverage"), 3),
    ("mrr", "MRR", 3),
    ("answer_span_recall", gettext_lazy("answer: share of spans quoted"), 3),
    ("answer_all_spans", gettext_lazy("answer: cases quoting every span"), 0),
    ("answer_precision", gettext_lazy("answer: sentences on evidence"), 3),
    ("answer_words_mean", gettext_lazy("answer: words (mean)"), 0),
    ("context_tokens_mean", gettext_lazy("context tokens (mean)"), 0),
    ("duplicates_mean", gettext_lazy("duplicate passages (mean)"), 2),
    ("latency_p50_ms", gettext_lazy("latency p50 (ms)"), 1),
    ("latency_p95_ms", gettext_lazy("latency p95 (ms)"), 1),
]


def _figure(value: Any, digits: int) -> str:
    """A figure in the page's language: 1,158.5 in English, 1 158,5 in French."""
    if value is None:
        return "–"
    return formats.number_format(value, digits, force_grouping=True)


def _status_words(run: EvalRun) -> str:
    if run.status == EvalRun.Status.FAILED:
        return gettext("failed")
    return gettext("is %(status)s") % {"status": run.get_status_display().lower()}
