"""Golden cases and the measurement of retrieval against their evidence spans."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from kb.models import Collection, GoldenCase

KINDS = {k.value for k in GoldenCase.Kind}


class GoldenImportError(ValueError):
    pass


def parse_cases(jsonl: str) -> list[dict[str, Any]]:
    """Read JSON Lines golden cases; unknown keys are ignored."""
    cases = []
    for lineno, line in enumerate(jsonl.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GoldenImportError(f"line {lineno}: not JSON ({exc.msg})") from None
        cases.append(_case(raw, lineno))
    return cases


def _case(raw: Any, lineno: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise GoldenImportError(f"line {lineno}: expected a JSON object")
    case_id = str(raw.get("id") or f"line-{lineno}")
    question = raw.get("question")
    spans = raw.get("required_spans")
    if not isinstance(question, str) or not question.strip():
        raise GoldenImportError(f"case {case_id}: 'question' is missing")
    if not isinstance(spans, list) or not spans:
        raise GoldenImportError(f"case {case_id}: 'required_spans' must be a list")
    kind = raw.get("kind") or GoldenCase.Kind.FREE
    return {
        "id": case_id,
        "question": question.strip(),
        "kind": kind if kind in KINDS else GoldenCase.Kind.FREE,
        "required_spans": [_span(s, case_id) for s in spans],
    }


def _span(raw: Any, case_id: str) -> dict[str, Any]:
    try:
        span = {
            "file": str(raw["file"]),
            "start": int(raw["start"]),
            "end": int(raw["end"]),
            "text": str(raw["text"]),
        }
    except (KeyError, TypeError, ValueError):
        raise GoldenImportError(
            f"case {case_id}: each span needs file, start, end and text"
        ) from None
    if not 0 <= span["start"] < span["end"]:
        raise GoldenImportError(f"case {case_id}: span {span['start']}-{span['end']}")
    alternatives = raw.get("alternatives") or []
    if alternatives:
        span["alternatives"] = [_span(a, case_id) for a in alternatives]
    return span


def check_spans(collection: Collection, cases: list[dict[str, Any]]) -> None:
    """Every span's text must equal its source's text between the offsets."""
    texts = dict(collection.sources.values_list("file_name", "text"))
    for case in cases:
        for span in case["required_spans"]:
            for one in [span, *span.get("alternatives", [])]:
                text = texts.get(one["file"])
                if text is None:
                    raise GoldenImportError(
                        f"case {case['id']}: no source {one['file']!r} in {collection}"
                    )
                if text[one["start"] : one["end"]] != one["text"]:
                    raise GoldenImportError(
                        f"case {case['id']}: {one['file']}[{one['start']}:{one['end']}]"
                        " does not match the span's text"
                    )


def import_cases(collection: Collection, jsonl: str) -> dict[str, int]:
    """Validate every case, then create or update them all (or none)."""
    cases = parse_cases(jsonl)
    check_spans(collection, cases)
    report = {"created": 0, "updated": 0, "unchanged": 0}
    with transaction.atomic():
        for case in cases:
            fields = {
                "question": case["question"],
                "kind": case["kind"],
                "required_spans": case["required_spans"],
            }
            obj, created = GoldenCase.objects.get_or_create(
                collection=collection, external_id=case["id"], defaults=fields
            )
            if created:
                report["created"] += 1
            elif any(getattr(obj, k) != v for k, v in fields.items()):
                GoldenCase.objects.filter(pk=obj.pk).update(**fields)
                report["updated"] += 1
            else:
                report["unchanged"] += 1
    return report


def export_cases(collection: Collection) -> str:
    lines = [
        json.dumps(
            {
                "id": case.external_id,
                "question": case.question,
                "kind": case.kind,
                "required_spans": case.required_spans,
            },
            ensure_ascii=False,
        )
        for case in collection.golden_cases.order_by("external_id")
    ]
    return "\n".join(lines) + ("\n" if lines else "")
