"""Golden cases and the measurement of retrieval against their evidence spans."""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from kb.models import Collection, EvalRun, GoldenCase, Source
from kb.percentiles import percentile

KINDS = [k.value for k in GoldenCase.Kind]
MAX_ID_CHARS = GoldenCase._meta.get_field("external_id").max_length


class GoldenImportError(ValueError):
    pass


def parse_cases(jsonl: str) -> list[dict[str, Any]]:
    """Read JSON Lines golden cases; unknown keys are ignored, a leading byte order
    mark too. Each case keeps its "line" so later refusals can name it."""
    return _json_lines(jsonl, parse_case)


def _json_lines(jsonl: str, parse) -> list[dict[str, Any]]:
    """Each non-blank line's object through `parse(raw, lineno)` (which returns a
    dict with an "id"), refusing lines that are not JSON and repeated ids."""
    items: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(jsonl.removeprefix("\ufeff").splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GoldenImportError(f"line {lineno}: not JSON ({exc.msg})") from None
        item = parse(raw, lineno)
        if item["id"] in first_line:
            raise GoldenImportError(
                f"{_where({**item, 'line': lineno})}: line {first_line[item['id']]} "
                "has the same id; each case needs its own"
            )
        first_line[item["id"]] = lineno
        items.append(item)
    return items


def parse_case(raw: Any, lineno: int | None = None) -> dict[str, Any]:
    """One golden case from its decoded JSON, or GoldenImportError naming it."""
    from kb import retrieval

    if not isinstance(raw, dict):
        raise GoldenImportError(f"line {lineno}: expected a JSON object")
    case = {"id": str(raw.get("id") or f"line-{lineno}"), "line": lineno}
    if len(case["id"]) > MAX_ID_CHARS:
        raise GoldenImportError(
            f"{_where(case)}: the id is {len(case['id'])} characters long; "
            f"the limit is {MAX_ID_CHARS}"
        )
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        raise GoldenImportError(f"{_where(case)}: 'question' is missing")
    try:  # the ask path's own check: a run would fail on this question otherwise
        retrieval.check_question(question)
    except retrieval.QuestionError as exc:
        raise GoldenImportError(f"{_where(case)}: {exc}") from None
    kind = raw.get("kind") or GoldenCase.Kind.FREE
    if kind not in KINDS:
        raise GoldenImportError(
            f"{_where(case)}: unknown kind {kind!r}; the kinds are {', '.join(KINDS)}"
        )
    spans = raw.get("required_spans")
    if not isinstance(spans, list) or not spans:
        raise GoldenImportError(f"{_where(case)}: 'required_spans' must be a list")
    real = raw.get("real_question", False)
    if not isinstance(real, bool):
        raise GoldenImportError(f"{_where(case)}: 'real_question' must be true/false")
    return {
        **case,
        "question": question.strip(),
        "kind": str(kind),
        "required_spans": [_span(s, _where(case)) for s in spans],
        # Made from a question staff asked (issue #18): recall shown apart.
        "real": real,
    }


def _where(case: dict[str, Any]) -> str:
    """How a refusal names a case: its line (when read from a file) and id."""
    shown = case["id"] if len(case["id"]) <= 40 else case["id"][:40] + "…"
    line = case.get("line")
    return f"line {line}, case {shown}" if line else f"case {shown}"


def _span(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or not all(
        isinstance(raw.get(key), str) and raw[key] for key in ("file", "text")
    ):
        raise GoldenImportError(f"{where}: each span needs file, start, end and text")
    span = {
        "file": raw["file"],
        "start": _offset(raw, "start", where),
        "end": _offset(raw, "end", where),
        "text": raw["text"],
    }
    if not 0 <= span["start"] < span["end"]:
        raise GoldenImportError(f"{where}: span {span['start']}-{span['end']}")
    alternatives = raw.get("alternatives") or []
    if alternatives:
        span["alternatives"] = [_span(a, where) for a in alternatives]
    return span


def _offset(raw: dict[str, Any], key: str, where: str) -> int:
    value = raw.get(key)
    # JSON true is a Python int, and 2827.7 would be truncated: neither is an offset.
    if isinstance(value, bool) or not isinstance(value, int):
        raise GoldenImportError(
            f"{where}: span {key} must be a whole number of characters, "
            f"not {json.dumps(value)}"
        )
    return value


def check_spans(collection: Collection, cases: list[dict[str, Any]]) -> None:
    """Every span's text must equal its source's text between the offsets."""
    texts = dict(collection.sources.values_list("file_name", "text"))
    for case in cases:
        for span in case["required_spans"]:
            for one in [span, *span.get("alternatives", [])]:
                text = texts.get(one["file"])
                if text is None:
                    raise GoldenImportError(
                        f"{_where(case)}: no source {one['file']!r} in {collection}"
                    )
                if text[one["start"] : one["end"]] != one["text"]:
                    raise GoldenImportError(
                        f"{_where(case)}: {one['file']}[{one['start']}:{one['end']}]"
                        " does not match the span's text"
                    )


def locate_cases(
    collection: Collection, cases: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """`kb_eval --match text`: the cases with every span moved to where its text
    is in the collection's stored texts (kb.spans.locate), in the source of the
    same name or stem ("docs/a.md" finds "docs/a.pdf"), so one golden file scores
    a corpus in any format. Returns the located cases and, by case id, why spans
    could not be located: such a span stays required but cannot be covered (the
    case is a miss, and counted apart)."""
    from kb import spans as locator

    texts = dict(collection.sources.values_list("file_name", "text"))
    skeletons: dict[str, locator.Skeleton] = {}
    located, problems = [], {}
    for case in cases:
        required = []
        for span in case["required_spans"]:
            found, why = [], []
            for one in [span, *span.get("alternatives", [])]:
                try:
                    found.append(_locate(one, texts, skeletons))
                except locator.Unlocatable as exc:
                    why.append(f"{one['file']}[{one['start']}:{one['end']}]: {exc}")
            if not found:
                problems.setdefault(case["id"], []).extend(why)
                required.append({**span, "file": "", "start": 0, "end": 1,
                                 "alternatives": []})  # fmt: skip
                continue
            first, *rest = found
            required.append({**first, "alternatives": rest} if rest else first)
        located.append({**case, "required_spans": required})
    return located, problems


def _locate(span: dict[str, Any], texts: dict[str, str], skeletons: dict) -> dict:
    from kb import spans as locator

    names = [span["file"]] if span["file"] in texts else sorted(
        n for n in texts if locator.same_document(span["file"], n)
    )  # fmt: skip
    if not names:
        raise locator.Unlocatable("no source of that name in the collection")
    for name in names:
        text = texts[name]
        if text[span["start"] : span["end"]] == span["text"]:  # offsets still right
            return {"file": name, **{k: span[k] for k in ("start", "end", "text")}}
        if name not in skeletons:
            skeletons[name] = locator.skeleton(text)
        hint = span["start"] / max(len(text), 1)
        try:
            start, end = locator.locate(
                span["text"], text, hint, within=skeletons[name]
            )
        except locator.Unlocatable:
            if name == names[-1]:
                raise
            continue
        return {"file": name, "start": start, "end": end, "text": text[start:end]}
    raise locator.Unlocatable("no source of that name in the collection")


def mark_unlocatable(outcome: dict[str, Any], problems: dict[str, list[str]]) -> None:
    """Add the spans `locate_cases` could not place to a run's cases and count
    the cases concerned in its aggregate."""
    for case in outcome["cases"]:
        if case["id"] in problems:
            case["unlocatable"] = problems[case["id"]]
    outcome["aggregate"]["unlocatable"] = len(problems)


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
                "is_real_question": case["real"],
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


# --- spans against their sources' current text ---------------------------------
# Spans name their source by file name, not by a foreign key: cases travel between
# installations as JSON Lines. When a source's new text is indexed, each span whose
# text no longer sits at its offsets but occurs exactly once is moved there
# (reanchor_spans); the rest are stale: listed with the reason, and left out of runs
# (a stale span cannot be covered, so counting it as a miss would blame retrieval).


def reanchor_spans(source: Source) -> dict[str, int]:
    """Move the golden spans in `source` to where their text now stands when it
    occurs exactly once in it; count the spans moved and those left stale."""
    moved = stale = 0
    # Locked: two sources of one collection published at once would otherwise each
    # write back the list the other had not moved yet.
    cases = GoldenCase.objects.select_for_update().filter(
        collection_id=source.collection_id
    )
    for case in cases.order_by("pk"):
        changed = False
        for one in _every_span(case.required_spans):
            if one["file"] != source.file_name or _matches(one, source.text):
                continue
            at = _only_place(source.text, one["text"])
            if at is None:
                stale += 1
                continue
            one["start"], one["end"] = at, at + len(one["text"])
            moved += 1
            changed = True
        if changed:
            GoldenCase.objects.filter(pk=case.pk).update(
                required_spans=case.required_spans
            )
    return {"moved": moved, "stale": stale}


def stale_cases(
    collection: Collection | None = None, among=None
) -> list[dict[str, Any]]:
    """The cases (of every live collection when None, or of the collections in the
    queryset `among`) with spans that no longer match their source, each with the
    reason per span: [{"id", "pk", "question", "problems": [str]}]."""
    if collection is None:
        live = (among if among is not None else Collection.objects).filter(
            is_scratch=False, golden_cases__isnull=False
        )
        return [c for one in live.distinct().order_by("name") for c in stale_cases(one)]
    cases = list(collection.golden_cases.order_by("external_id"))
    files = {one["file"] for c in cases for one in _every_span(c.required_spans)}
    sources = {
        s.file_name: s
        for s in collection.sources.filter(file_name__in=files).only(
            "file_name", "text", "version", "indexed_version"
        )
    }
    found = []
    for case in cases:
        problems = [
            span_problem(one, sources.get(one["file"]))
            for one in _every_span(case.required_spans)
        ]
        if any(problems):
            found.append(
                {"id": case.external_id, "pk": case.pk, "question": case.question,
                 "problems": [p for p in problems if p]}
            )  # fmt: skip
    return found


def cases_using(sources) -> list[GoldenCase]:
    """Golden cases with a span in any of these sources (by collection and file)."""
    files: dict[int, set[str]] = {}
    for source in sources:
        files.setdefault(source.collection_id, set()).add(source.file_name)
    return [
        case
        for case in GoldenCase.objects.filter(collection_id__in=files).order_by(
            "external_id"
        )
        if any(
            one["file"] in files[case.collection_id]
            for one in _every_span(case.required_spans)
        )
    ]


def _every_span(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [one for span in spans for one in [span, *span.get("alternatives", [])]]


def _matches(span: dict[str, Any], text: str) -> bool:
    return text[span["start"] : span["end"]] == span["text"]


def _only_place(text: str, part: str) -> int | None:
    first = text.find(part)
    if first < 0 or text.find(part, first + 1) >= 0:
        return None
    return first


def span_problem(span: dict[str, Any], source: Source | None) -> str:
    """Why a span no longer matches its source ("" when it does)."""
    where = f"{span['file']}[{span['start']}:{span['end']}]"
    if source is None:
        return f"{where}: {span['file']} is gone from the collection"
    if _matches(span, source.text):
        return ""
    count = source.text.count(span["text"])
    if count == 0:
        why = f"its text is no longer in {span['file']}"
    elif count > 1:
        why = f"its text now occurs {count} times in {span['file']}: pick one"
    else:
        why = "its text moved"
    if source.indexed_version != source.version:
        why += "; the source's new text is not indexed yet (spans move when it is)"
    return f"{where}: {why}"


def import_summary(collection: Collection, report: dict[str, int]) -> str:
    """What import_cases did, as a sentence."""
    total = sum(report.values())
    return (
        f"Imported {total} golden case{'' if total == 1 else 's'} into {collection}: "
        f"{report['created']} created, {report['updated']} updated, "
        f"{report['unchanged']} unchanged."
    )


def case_line(case: GoldenCase) -> str:
    """One case in the JSON Lines format, newline included."""
    record = {
        "id": case.external_id,
        "question": case.question,
        "kind": case.kind,
        "required_spans": case.required_spans,
    }
    if case.is_real_question:
        record["real_question"] = True
    return json.dumps(record, ensure_ascii=False) + "\n"


def export_cases(collection: Collection) -> str:
    return "".join(
        case_line(case) for case in collection.golden_cases.order_by("external_id")
    )


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


def evaluate_case(collection: Collection, case: dict[str, Any], **options) -> dict:
    from kb import answering, retrieval

    result = retrieval.retrieve(collection, case["question"], **options)
    return {
        "id": case["id"],
        "kind": case["kind"],
        "question": case["question"],
        # Made from a logged question (the content gaps page): recall apart.
        "real": bool(case.get("real")),
        **score_case(case, ranked_ranges(result.passages)),
        # The answerer would decline it as off-topic (answering.off_topic).
        "declined": answering.off_topic(result) is not None,
        "top_similarity": _similarity(result),
        "context_tokens": result.context_tokens,
        "duplicates": duplicates(result),
        "latency_ms": result.timings_ms.get("total", 0.0),
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


def _similarity(result) -> float | None:
    found = result.top_similarity
    return None if found is None else round(found, 4)


def parse_questions(jsonl: str) -> list[dict[str, str]]:
    """Questions the corpus does not answer, one JSON object per line with "id" and
    "question" (other keys are ignored): the answerer should decline them."""
    questions = _json_lines(jsonl, _question)
    if not questions:
        raise GoldenImportError("no questions in the file")
    return questions


def _question(raw: Any, lineno: int) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(
        isinstance(raw.get(key), str) and raw[key].strip() for key in ("id", "question")
    ):
        raise GoldenImportError(f'line {lineno}: needs "id" and "question" text')
    return {"id": raw["id"], "question": raw["question"]}


def evaluate_unanswerable(
    collection: Collection, questions: list[dict[str, str]], **options
) -> dict[str, Any]:
    """How many questions the collection does not answer are declined, not
    answered from unrelated passages (answering.off_topic)."""
    from kb import answering, retrieval

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
            reasons.append(f"{name} {'?' if old is None else old} vs "
                           f"{'?' if new is None else new}")  # fmt: skip
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
) -> dict[str, Any]:
    """Run every case against the collection's current index (`strategy`: see
    retrieval.STRATEGIES; None is the collection's own)."""
    k = k or collection.top_k
    options = {"k": k, "budget": budget, "mode": mode}
    if strategy:
        options["strategy"] = strategy
    results = []
    for i, case in enumerate(cases, 1):
        results.append(evaluate_case(collection, case, **options))
        if progress:
            progress(i, len(cases))
    return {"aggregate": aggregate(results, k), "cases": results}


def cases_of(collection: Collection) -> list[dict[str, Any]]:
    return [
        {
            "id": c.external_id,
            "question": c.question,
            "kind": c.kind,
            "required_spans": c.required_spans,
            "real": c.is_real_question,
        }
        for c in collection.golden_cases.order_by("external_id")
    ]


# --- configurations ----------------------------------------------------------

CONFIG_FIELDS = Collection.CONFIG_FIELDS


# A run's overrides of these apply to the live index (evaluate's options); the
# others (ingestion.INDEX_FIELDS) need an index of their own, on a scratch copy.
RETRIEVAL_OPTIONS = {"top_k": "k", "context_budget": "budget", "retrieval_mode": "mode",
                     "strategy": "strategy"}  # fmt: skip


def config_of(collection: Collection, strategy: str | None = None) -> dict[str, Any]:
    """Everything that decides retrieval quality, as recorded with a run: the
    strategy, the chunking its index was actually built with (values listed when
    its sources differ), and how that index differs from the settings."""
    from kb import embedding, ingestion, keywords, reranking, retrieval

    embedder = embedding.get_embedder()
    built = ingestion.index_config(collection)
    return {
        **{f: getattr(collection, f) for f in CONFIG_FIELDS},
        **{f: built[f] for f in ingestion.INDEX_FIELDS if f in built},
        "metadata_policy": ingestion.policy_for(collection).decisions,
        "model": embedder.model_name,
        "precision": embedder.precision,
        "window": embedder.window,
        "index_out_of_date": ingestion.index_differences(collection),
        "strategy": retrieval.strategy_of(collection, strategy),
        "keyword_ranking": keywords.ranking(),
        "section_weight": settings.KB_SECTION_WEIGHT,
        **reranking.run_config(),  # issue #17: only when a reranker is set
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
    """A hidden collection with the same sources (or these of them) under other
    settings (and another metadata policy); cases stay with the collection."""
    from kb import ingestion

    fields = {f: getattr(collection, f) for f in CONFIG_FIELDS}
    fields.update(
        {k: v for k, v in overrides.items() if k in CONFIG_FIELDS and v is not None}
    )
    scratch = Collection.objects.create(
        name=f"{collection.name} [scratch {timezone.now():%Y%m%d-%H%M%S-%f}]",
        description=f"Evaluation copy of {collection.name}",
        metadata_policy=collection.metadata_policy if policy is None else policy,
        is_scratch=True,
        **fields,
    )
    scratch.groups.set(collection.groups.all())  # its text is as restricted
    for source in collection.sources.all() if sources is None else sources:
        ingestion.store_source(
            scratch,
            source.file_name,
            _stored_bytes(source),
            title=source.title,
            metadata=source.metadata,
        )
    return scratch


def _stored_bytes(source: Source) -> bytes:
    """The original of a file the worker reads (PDF, ...), else the stored text."""
    from kb import readers

    if readers.format_of(source.file_name) and source.file:
        with source.file.open("rb") as stored:
            return stored.read()
    return source.text.encode("utf-8")


def index_all(collection: Collection, progress=None) -> None:
    from kb import ingestion, keywords

    sources = list(collection.sources.all())
    for i, source in enumerate(sources, 1):
        ingestion.ingest(source.pk)
        if progress:
            progress(i, len(sources))
    keywords.count_terms(collection)


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
    from kb import ingestion

    run = EvalRun.objects.select_related("collection").get(pk=run_id)
    collection = run.collection
    overrides = run.config.get("overrides", {})
    rebuild = {k: v for k, v in overrides.items() if k in ingestion.INDEX_FIELDS}
    retrieval = {k: v for k, v in overrides.items() if k in RETRIEVAL_OPTIONS}
    _progress(run, status=EvalRun.Status.RUNNING, stage="starting")
    target = collection
    try:
        if rebuild:
            target = scratch_copy(collection, rebuild)
            index_all(
                target, lambda i, n: _progress(run, stage="indexing", done=i, total=n)
            )
        # Stale spans cannot be covered: such cases are reported, not scored.
        stale = [{k: c[k] for k in ("id", "question", "problems")}
                 for c in stale_cases(collection)]  # fmt: skip
        left_out = {c["id"] for c in stale}
        cases = [c for c in cases_of(collection) if c["id"] not in left_out]
        outcome = evaluate(
            target,
            cases,
            **{RETRIEVAL_OPTIONS[k]: v for k, v in retrieval.items()},
            progress=lambda i, n: _progress(run, stage="evaluating", done=i, total=n),
        )
        found = config_of(target, overrides.get("strategy"))
        run.config = {**found, **retrieval, "overrides": overrides,
                      "scratch": bool(rebuild), "cases": len(cases),
                      "stale_cases": stale}  # fmt: skip
        run.aggregate = outcome["aggregate"]
        run.cases = outcome["cases"]
        run.status = EvalRun.Status.DONE
        run.finished = timezone.now()
        run.save()
    except Exception as exc:
        EvalRun.objects.filter(pk=run.pk).update(
            status=EvalRun.Status.FAILED, error=f"{type(exc).__name__}: {exc}",
            finished=timezone.now(),
        )  # fmt: skip
        raise
    finally:
        if target is not collection:
            target.delete()
    return run


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
    difference is beyond chance, and why they may not compare like for like."""
    changed = changed_between(before, after)
    return {
        "changed": changed,
        "difference": paired_difference(changed),
        "unlike": unlike(before, after, before_config, after_config),
    }


def changed_cases(before: EvalRun, after: EvalRun) -> list[dict[str, Any]]:
    """Cases whose outcome differs between two runs."""
    return changed_between(before.cases, after.cases)


def changed_between(
    before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Cases (by id, in both lists) whose hit differs: `after` True is a gain."""
    old = {c["id"]: c for c in before}
    changes = []
    for case in after:
        prev = old.get(case["id"])
        if prev is not None and prev["hit"] != case["hit"]:
            changes.append(
                {"id": case["id"], "question": case.get("question", ""),
                 "kind": case.get("kind", ""), "before": prev["hit"],
                 "after": case["hit"]}
            )  # fmt: skip
    return changes


def raise_floor(collection: Collection, run: EvalRun) -> bool:
    """Set the recall floor from a finished run of the live configuration; it is
    only ever raised."""
    recall = run.aggregate.get("recall_at_k")
    if run.status != EvalRun.Status.DONE or is_experiment(run):
        return False
    if recall is None or (
        collection.recall_floor is not None and recall <= collection.recall_floor
    ):
        return False
    collection.recall_floor = recall
    collection.floor_run = run
    collection.save(update_fields=["recall_floor", "floor_run"])
    return True


def regressions(run: EvalRun) -> list[dict[str, Any]]:
    """Below the floor: the cases that the floor's run answered and this one misses."""
    collection = run.collection
    floor = collection.recall_floor
    recall = run.aggregate.get("recall_at_k")
    if is_experiment(run) or not collection.floor_run:
        return []  # an experiment is no regression of the live configuration
    if floor is None or recall is None or recall >= floor:
        return []
    return [c for c in changed_cases(collection.floor_run, run) if not c["after"]]
