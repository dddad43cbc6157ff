"""What the evaluation dashboard shows: runs, figures, failures, comparisons."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict

from kb import charts, evaluation
from kb.forms import EvalRunForm
from kb.models import Collection, EvalRun

RUNS_SHOWN = 20
ACTIVE = [EvalRun.Status.QUEUED, EvalRun.Status.RUNNING]


def context(params: QueryDict) -> dict[str, Any]:
    collections = Collection.objects.filter(is_scratch=False).order_by("name")
    collection = _pick(collections, params.get("collection"))
    if collection is None:
        return {"collections": collections, "collection": None}
    runs = list(
        EvalRun.objects.filter(collection=collection).order_by("-created")[:RUNS_SHOWN]
    )
    done = [r for r in runs if r.status == EvalRun.Status.DONE]
    latest = _run(runs, params.get("run")) or (done[0] if done else None)
    floor = collection.recall_floor
    return {
        "collections": collections,
        "collection": collection,
        "form": EvalRunForm(initial=_initial(collection)),
        "runs": [_row(r, floor) for r in runs],
        "auto_refresh": any(r.status in ACTIVE for r in runs),
        "latest": latest and _details(latest, floor),
        "chart": charts.line_chart_svg(
            [r.recall for r in reversed(done) if r.recall is not None]
        ),
        "comparison": _comparison(runs, params.get("a"), params.get("b")),
        "stale": evaluation.stale_cases(collection),
    }


def _pick(collections, ref: str | None) -> Collection | None:
    if ref and ref.isdigit():
        return collections.filter(pk=int(ref)).first()
    return collections.first()


def _run(runs: list[EvalRun], ref: str | None) -> EvalRun | None:
    return next((r for r in runs if ref and str(r.pk) == ref), None)


def _initial(collection: Collection) -> dict[str, Any]:
    return {"collection": collection.pk}


def _row(run: EvalRun, floor: float | None) -> dict[str, Any]:
    recall = run.recall
    return {
        "run": run,
        "below_floor": floor is not None and recall is not None and recall < floor,
        "summary": _config_summary(run.config),
    }


def _config_summary(config: dict[str, Any]) -> str:
    if "chunk_strategy" not in config:
        overrides = config.get("overrides") or {}
        return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "as configured"
    text = (
        f"{config['chunk_strategy']} {config['chunk_tokens']} tok, overlap "
        f"{config['chunk_overlap']}, k={config['top_k']}, budget "
        f"{config['context_budget']}, {config['retrieval_mode']}"
    )
    return text + (" (scratch copy)" if config.get("scratch") else "")


def _details(run: EvalRun, floor: float | None) -> dict[str, Any]:
    left_out = run.config.get("stale_cases", [])
    return {
        "run": run,
        "left_out": left_out,
        "total": run.config.get("cases", 0) + len(left_out),
        "summary": _config_summary(run.config),
        "by_kind": sorted(run.aggregate.get("by_kind", {}).items()),
        "failed": [c for c in run.cases if not c["hit"]],
        "below_floor": floor is not None and (run.recall or 0) < floor,
        "regressions": evaluation.regressions(run),
    }


def _comparison(runs: list[EvalRun], a: str | None, b: str | None) -> dict | None:
    before, after = _run(runs, a), _run(runs, b)
    if not (before and after):
        return None
    keys = ["recall_at_k", "partial", "mrr", "context_tokens_mean",
            "duplicates_mean", "latency_p50_ms", "latency_p95_ms"]  # fmt: skip
    return {
        "a": before,
        "b": after,
        "a_summary": _config_summary(before.config),
        "b_summary": _config_summary(after.config),
        "rows": [(k, before.aggregate.get(k), after.aggregate.get(k)) for k in keys],
        **evaluation.compare(before.cases, after.cases, before.config, after.config),
    }
