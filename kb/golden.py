"""Golden cases: the questions with the evidence spans that answer them.

Reading them (JSON Lines, refused whole with the line named), importing and
exporting them, checking and locating their spans in the sources' text, moving
spans when a source's new text is indexed (re-anchoring) and listing the cases
whose spans went stale. Measuring retrieval against them is kb.evaluation's."""

from __future__ import annotations

import difflib
import functools
import json
from typing import Any

from django.db import transaction
from django.utils.translation import gettext, ngettext

from kb import jsontext, retrieval
from kb import spans as locator
from kb.models import Collection, GoldenCase, Source

KINDS = [k.value for k in GoldenCase.Kind]
MAX_ID_CHARS = GoldenCase._meta.get_field("external_id").max_length


class GoldenImportError(ValueError):
    pass


def parse_cases(
    jsonl: str, collection: Collection | None = None
) -> list[dict[str, Any]]:
    """Read JSON Lines golden cases; unknown keys are ignored, a leading byte order
    mark too. Each case keeps its "line" so later refusals can name it. Questions
    are checked against the window of the collection's model (of the default
    model without one)."""
    cases = _json_lines(jsonl, functools.partial(parse_case, collection=collection))
    if not cases:  # an import of nothing is no success
        raise GoldenImportError(
            gettext("the file holds no cases: write one JSON object per line")
        )
    return cases


def _json_lines(jsonl: str, parse) -> list[dict[str, Any]]:
    """Each non-blank line's object through `parse(raw, lineno)` (which returns a
    dict with an "id"), refusing lines that are not JSON and repeated ids."""
    items: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(jsonl.removeprefix("\ufeff").splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = jsontext.loads(line)
        except jsontext.JsonError as exc:
            raise GoldenImportError(
                gettext("line %(line)d %(problem)s") % {"line": lineno, "problem": exc}
            ) from None
        item = parse(raw, lineno)
        if item["id"] in first_line:
            raise GoldenImportError(
                gettext(
                    "%(where)s: line %(line)d has the same id; each case needs its own"
                )
                % {
                    "where": _where({**item, "line": lineno}),
                    "line": first_line[item["id"]],
                }
            )
        first_line[item["id"]] = lineno
        items.append(item)
    return items


CASE_KEYS = ("id", "question", "kind", "required_spans", "real_question", "on_answer")
SPAN_KEYS = ("file", "start", "end", "text", "alternatives")


def ignored_keys(cases: list[dict[str, Any]]) -> list[str]:
    """What parse_case left out of each case: keys it does not know, with the
    known one they are likely a slip for ('alternative' for 'alternatives'), so
    a misspelt requirement is not dropped unseen. Other keys are allowed."""
    return [note for case in cases for note in case.get("ignored", [])]


def _unknown(raw: dict, known: tuple[str, ...], where: str, what: str) -> list[str]:
    notes = []
    for key in raw:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.75)
        if what == "case":
            note = gettext("%(where)s: case key %(key)s ignored")
        else:
            note = gettext("%(where)s: span key %(key)s ignored")
        note %= {"where": where, "key": _shown(key)}
        if close:
            note += gettext(" (did you mean %(key)s?)") % {"key": repr(close[0])}
        notes.append(note)
    return notes


def parse_case(
    raw: Any, lineno: int | None = None, collection: Collection | None = None
) -> dict[str, Any]:
    """One golden case from its decoded JSON, or GoldenImportError naming it: each
    field of the case and of its spans is checked for its JSON type, and text for
    what PostgreSQL cannot store, so no shape of JSON reaches the database."""
    if not isinstance(raw, dict):
        raise GoldenImportError(
            gettext("line %(line)s: expected a JSON object, not %(value)s")
            % {"line": lineno, "value": _shown(raw)}
        )
    case = {"id": _case_id(raw.get("id"), lineno), "line": lineno}
    question = raw.get("question")
    if question is None or isinstance(question, str) and not question.strip():
        raise GoldenImportError(
            gettext("%(where)s: 'question' is missing") % {"where": _where(case)}
        )
    if not isinstance(question, str):
        raise GoldenImportError(
            gettext("%(where)s: 'question' must be text, not %(value)s")
            % {"where": _where(case), "value": _shown(question)}
        )
    try:  # the ask path's own check (NULs too): a run would fail on it otherwise
        retrieval.check_question(question, collection)
    except retrieval.QuestionError as exc:
        raise GoldenImportError(f"{_where(case)}: {exc}") from None
    kind = raw.get("kind")
    if kind is None or kind == "":
        kind = GoldenCase.Kind.FREE
    _check_text(kind, "'kind'", _where(case))
    if kind not in KINDS:
        raise GoldenImportError(
            gettext("%(where)s: unknown kind %(kind)s; the kinds are %(kinds)s")
            % {"where": _where(case), "kind": repr(kind), "kinds": ", ".join(KINDS)}
        )
    spans = raw.get("required_spans")
    if not isinstance(spans, list) or not spans:
        raise GoldenImportError(
            gettext(
                "%(where)s: 'required_spans' must be a list of at least one span, "
                "not %(value)s"
            )
            % {"where": _where(case), "value": _shown(spans)}
        )
    real = raw.get("real_question", False)
    if not isinstance(real, bool):
        raise GoldenImportError(
            gettext("%(where)s: 'real_question' must be true/false, not %(value)s")
            % {"where": _where(case), "value": _shown(real)}
        )
    on_answer = raw.get("on_answer", False)
    if not isinstance(on_answer, bool):
        raise GoldenImportError(
            gettext("%(where)s: 'on_answer' must be true/false, not %(value)s")
            % {"where": _where(case), "value": _shown(on_answer)}
        )
    ignored = _unknown(raw, CASE_KEYS, _where(case), "case")
    required = [_span(s, _where(case), ignored) for s in spans]
    return {
        **case,
        "question": question.strip(),
        "kind": str(kind),
        "required_spans": required,
        # Made from a question staff asked (issue #18): recall shown apart.
        "real": real,
        # Scored on the answer (issue #28): passes when it quotes every span.
        "on_answer": on_answer,
        **({"ignored": ignored} if ignored else {}),
    }


def _case_id(value: Any, lineno: int | None) -> str:
    """The case's id ("line-3" when it has none), or GoldenImportError: one that is
    not text PostgreSQL can store is named by its line only (it cannot be shown)."""
    if value is None or value == "":
        return f"line-{lineno}"
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # numbered cases ({"id": 5}) are common in eval files
    where = (
        gettext("line %(line)d") % {"line": lineno} if lineno else gettext("the case")
    )
    _check_text(value, gettext("the id"), where)
    if len(value) > MAX_ID_CHARS:
        raise GoldenImportError(
            gettext(
                "%(where)s: the id is %(count)d characters long; the limit is %(max)d"
            )
            % {
                "where": _where({"id": value, "line": lineno}),
                "count": len(value),
                "max": MAX_ID_CHARS,
            }
        )
    return value


def _check_text(value: Any, field: str, where: str) -> None:
    """GoldenImportError unless `value` is a string PostgreSQL can store: no NUL,
    no lone surrogate (worded as the ask path words them in a question)."""
    if not isinstance(value, str):
        raise GoldenImportError(
            gettext("%(where)s: %(field)s must be text, not %(value)s")
            % {"where": where, "field": field, "value": _shown(value)}
        )
    if problem := retrieval.unstorable(value):
        raise GoldenImportError(
            gettext("%(where)s: %(field)s contains %(problem)s; remove it")
            % {"where": where, "field": field, "problem": problem}
        )


def _shown(value: Any) -> str:
    """A JSON value as a refusal quotes it: a list or an object by its kind, any
    other short and in ASCII (a lone surrogate could not be sent)."""
    if isinstance(value, (dict, list)) and value:
        return gettext("an object") if isinstance(value, dict) else gettext("a list")
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _where(case: dict[str, Any]) -> str:
    """How a refusal names a case: its line (when read from a file) and id."""
    shown = case["id"] if len(case["id"]) <= 40 else case["id"][:40] + "…"
    line = case.get("line")
    if line:
        return gettext("line %(line)d, case %(id)s") % {"line": line, "id": shown}
    return gettext("case %(id)s") % {"id": shown}


def _span(
    raw: Any, where: str, ignored: list[str], alternative: bool = False
) -> dict[str, Any]:
    """One span (or one of a span's alternatives) checked field by field; keys it
    does not know are noted in `ignored`."""
    name = gettext("an alternative") if alternative else gettext("a span")
    if not isinstance(raw, dict):
        raise GoldenImportError(
            gettext(
                "%(where)s: %(name)s must be an object with file, start, end and "
                "text, not %(value)s"
            )
            % {"where": where, "name": name, "value": _shown(raw)}
        )
    for key in ("file", "text"):
        if raw.get(key) is None or raw[key] == "":
            raise GoldenImportError(
                gettext(
                    "%(where)s: each span needs file, start, end and text; "
                    "%(name)s has no %(key)s"
                )
                % {"where": where, "name": name, "key": repr(key)}
            )
        field = gettext("%(name)s's %(key)s") % {"name": name, "key": repr(key)}
        _check_text(raw[key], field, where)
    known = SPAN_KEYS[:4] if alternative else SPAN_KEYS
    ignored += _unknown(raw, known, where, "span")
    span = {
        "file": raw["file"],
        "start": _offset(raw, "start", where),
        "end": _offset(raw, "end", where),
        "text": raw["text"],
    }
    if problem := _range_problem(span["start"], span["end"]):
        raise GoldenImportError(
            gettext("%(where)s: span %(start)d-%(end)d %(problem)s")
            % {
                "where": where,
                "start": span["start"],
                "end": span["end"],
                "problem": problem,
            }
        )
    alternatives = raw.get("alternatives")
    if alternatives is None or alternatives == []:
        return span
    if alternative:  # only one level: runs and checks read no deeper
        raise GoldenImportError(
            gettext("%(where)s: an alternative cannot have 'alternatives' of its own")
            % {"where": where}
        )
    if not isinstance(alternatives, list):
        raise GoldenImportError(
            gettext("%(where)s: 'alternatives' must be a list of spans, not %(value)s")
            % {"where": where, "value": _shown(alternatives)}
        )
    span["alternatives"] = [
        _span(a, where, ignored, alternative=True) for a in alternatives
    ]
    return span


def _range_problem(start: int, end: int) -> str:
    """What is wrong with a span's offsets, as words after "span 10-5" ("")."""
    if start < 0:
        return gettext("starts before the text (offsets count from 0)")
    if end < start:
        return gettext("ends before it starts")
    if end == start:
        return gettext("is empty: it must hold at least one character")
    return ""


def _offset(raw: dict[str, Any], key: str, where: str) -> int:
    value = raw.get(key)
    # JSON true is a Python int, and 2827.7 would be truncated: neither is an offset.
    if isinstance(value, bool) or not isinstance(value, int):
        raise GoldenImportError(
            gettext(
                "%(where)s: span %(key)s must be a whole number of characters, "
                "not %(value)s"
            )
            % {"where": where, "key": key, "value": _shown(value)}
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
                        gettext("%(where)s: no source %(file)s in %(collection)s")
                        % {
                            "where": _where(case),
                            "file": repr(one["file"]),
                            "collection": collection,
                        }
                    )
                if text[one["start"] : one["end"]] != one["text"]:
                    raise GoldenImportError(
                        gettext("%(where)s: %(span)s does not match the span's text")
                        % {
                            "where": _where(case),
                            "span": f"{one['file']}[{one['start']}:{one['end']}]",
                        }
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
                required.append(
                    {**span, "file": "", "start": 0, "end": 1, "alternatives": []}
                )
                continue
            first, *rest = found
            required.append({**first, "alternatives": rest} if rest else first)
        located.append({**case, "required_spans": required})
    return located, problems


def _locate(span: dict[str, Any], texts: dict[str, str], skeletons: dict) -> dict:
    names = (
        [span["file"]]
        if span["file"] in texts
        else sorted(n for n in texts if locator.same_document(span["file"], n))
    )
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


def import_cases(collection: Collection, jsonl: str) -> dict[str, Any]:
    """Validate every case, then create or update them all (or none); the counts,
    and under "ignored" the keys left out (ignored_keys)."""
    cases = parse_cases(jsonl, collection)
    check_spans(collection, cases)
    report: dict[str, Any] = {"created": 0, "updated": 0, "unchanged": 0}
    with transaction.atomic():
        for case in cases:
            fields = {
                "question": case["question"],
                "kind": case["kind"],
                "required_spans": case["required_spans"],
                "is_real_question": case["real"],
                "on_answer": case["on_answer"],
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
    report["ignored"] = ignored_keys(cases)
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
        for one in every_span(case.required_spans):
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
    files = {one["file"] for c in cases for one in every_span(c.required_spans)}
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
            for one in every_span(case.required_spans)
        ]
        if any(problems):
            found.append(
                {
                    "id": case.external_id,
                    "pk": case.pk,
                    "question": case.question,
                    "problems": [p for p in problems if p],
                }
            )
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
            for one in every_span(case.required_spans)
        )
    ]


def every_span(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spans and their alternatives."""
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


def import_summary(collection: Collection, report: dict[str, Any]) -> str:
    """What import_cases did, as a sentence."""
    total = report["created"] + report["updated"] + report["unchanged"]
    return ngettext(
        "Imported %(total)d golden case into %(collection)s: %(created)d created, "
        "%(updated)d updated, %(unchanged)d unchanged.",
        "Imported %(total)d golden cases into %(collection)s: %(created)d created, "
        "%(updated)d updated, %(unchanged)d unchanged.",
        total,
    ) % {"total": total, "collection": collection, **report}


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
    if case.on_answer:
        record["on_answer"] = True
    return json.dumps(record, ensure_ascii=False) + "\n"


def export_cases(collection: Collection) -> str:
    return "".join(
        case_line(case) for case in collection.golden_cases.order_by("external_id")
    )


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


def cases_of(collection: Collection) -> list[dict[str, Any]]:
    return [
        {
            "id": c.external_id,
            "question": c.question,
            "kind": c.kind,
            "required_spans": c.required_spans,
            "real": c.is_real_question,
            "on_answer": c.on_answer,
        }
        for c in collection.golden_cases.order_by("external_id")
    ]
