"""The question log (issue #18): answered questions with what they were answered
from, the askers' feedback, replay on the current index, and content gaps.

Every question answered on the ask page or by POST /api/ask is stored (log) with
its answer, retrieved sections, citations (with the cited text, so the answer
stays readable after a re-index) and the index fingerprint. Entries are kept
KB_QUESTION_LOG_DAYS days (0: nothing is logged) and at most KB_QUESTION_LOG_MAX
per collection: the cap is held as questions are logged, age by a job that
workers queue every KB_QUESTION_PRUNE_SECONDS (maybe_enqueue_prune).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from kb.citations import citation_url
from kb.models import Chunk, Collection, Question, ReplayReport, Section
from kb.retrieval import below_title, unstorable

logger = logging.getLogger(__name__)

MAX_NOTE = 2000
HISTORY_SHOWN = 10
# The same user asking the same question of an unchanged index again within this
# long (a reload of the ask page, a client's retry) is not logged again.
REPEAT_WINDOW = timedelta(minutes=10)
# Questions a replay report answers again after a re-index.
REPLAY_LAST = 50
# Gap questions grouped on the content gaps page (the newest): grouping compares
# each with the groups found so far.
GAPS_READ = 1000
PRUNE_LOCK = "kb:prune-questions"


def is_on() -> bool:
    return settings.KB_QUESTION_LOG_DAYS > 0


def visible_to(user) -> QuerySet[Question]:
    """Entries of the collections a user may see (group limits, as in the admin)."""
    return Question.objects.filter(collection__in=Collection.objects.open_to(user))


# --- logging an answer -----------------------------------------------------------


def fingerprint(collection: Collection) -> dict[str, Any]:
    """The index a question is answered from: the chunking, model, precision and
    window its sources were built with (the values listed when sources differ;
    today's settings for what no source recorded), the metadata policy, and each
    source's indexed version ({source id: version})."""
    from kb import index_config

    current = index_config.build_config(collection)
    rows = collection.sources.filter(indexed_version__isnull=False).values_list(
        "pk", "indexed_version", "stats__config"
    )
    built: dict[str, set] = {key: set() for key in current}
    versions = {}
    for pk, version, config in rows:
        versions[str(pk)] = version
        for key in current:
            if config and key in config:
                built[key].add(config[key])
    return {
        **{key: _one_or_all(built[key], current[key]) for key in current},
        "metadata_policy": index_config.policy_for(collection).decisions,
        "sources": versions,
    }


def _one_or_all(values: set, default: Any) -> Any:
    if not values:
        return default
    return values.pop() if len(values) == 1 else sorted(values, key=str)


def log(user, collection: Collection, result, reply) -> Question | None:
    """Store an answered question; None when the log is off (KB_QUESTION_LOG_DAYS=0)."""
    if not is_on():
        return None
    now = timezone.now()
    stamp = fingerprint(collection)
    repeat = (
        Question.objects.filter(
            user=user,
            collection=collection,
            question=result.question,
            answer=reply.text,
            created__gte=now - REPEAT_WINDOW,
        )
        .order_by("-created")
        .first()
    )
    if repeat is not None and repeat.fingerprint == json.loads(json.dumps(stamp)):
        Question.objects.filter(pk=repeat.pk).update(
            repeats=F("repeats") + 1, last_asked=now
        )
        return repeat
    entry = Question.objects.create(
        user=user,
        collection=collection,
        question=result.question,
        answer=reply.text,
        answerer=reply.answerer,
        is_declined=reply.answerer == "none" or not reply.citations,
        is_trustworthy=reply.is_trustworthy,
        top_similarity=result.top_similarity,
        retrieved=retrieved(result),
        citations=citations(result, reply),
        latency_ms=result.timings_ms.get("total", 0.0),
        fingerprint=stamp,
        embedding=_vector(collection, result),
        created=now,
    )
    prune_collection(collection.pk)
    return entry


def _vector(collection: Collection, result) -> list[float]:
    if result.vector is not None:
        return list(map(float, result.vector))
    from kb import embedding  # keyword-only retrieval embeds no question

    vector = embedding.for_collection(collection).embed_query(result.question)
    return list(map(float, vector))


def retrieved(result) -> list[dict[str, Any]]:
    """The retrieved passages with their sections' and chunks' ids (one query)."""
    section_ids = {loc.section_id for p in result.passages for loc in p.locations}
    chunk_ids = {
        (section, index): pk
        for pk, section, index in Chunk.objects.filter(
            section_id__in=section_ids
        ).values_list("pk", "section_id", "chunk_index")
    }
    return [
        {
            "n": p.rank,
            "source_id": p.source_id,
            "file": p.file_name,
            "heading_path": p.heading_path,
            "section_ids": sorted({loc.section_id for loc in p.locations}),
            "chunk_ids": sorted(
                chunk_ids[(loc.section_id, i)]
                for loc in p.locations
                for i in loc.chunk_indexes
                if (loc.section_id, i) in chunk_ids
            ),
            "chunk_indexes": p.chunk_indexes,
            "start": p.start,
            "end": p.end,
            "score": round(p.score, 5),
            "matched": p.matched_label,
        }
        for p in result.passages
    ]


def citations(result, reply) -> list[dict[str, Any]]:
    """The citations as in the ask API, each with the source text it cites."""
    return [{**c.as_dict(), "text": _cited_text(result, c)} for c in reply.citations]


def _cited_text(result, cite) -> str:
    for p in result.passages:
        if p.source_id != cite.source_id:
            continue
        if p.start <= cite.start and cite.end <= p.end:
            return p.text[cite.start - p.start : cite.end - p.start]
        try:  # widened to whole sentences: still in the loaded section text
            return p.source_text[cite.start : cite.end]
        except IndexError:
            continue
    section = Section.objects.filter(pk=cite.section_id).only("start", "body").first()
    if section and section.start <= cite.start <= section.start + len(section.body):
        return section.body[cite.start - section.start : cite.end - section.start]
    return ""


def answer_parts(entry: Question) -> list[tuple[str, dict[str, Any] | None]]:
    """The logged answer as the ask page shows an answer (answerer.marked_parts):
    each [n] with its logged citation, which links to the cited characters (and
    still does after the source is re-indexed, kb.citations)."""
    from kb import answerer
    from kb.retrieval import heading_label

    versions = (entry.fingerprint or {}).get("sources", {})  # {id: version}
    by_n = {
        c["n"]: {
            **c,
            "label": heading_label(c.get("source", ""), c.get("heading_path", "")),
            "url": citation_url(
                c["section_id"],
                c["start"],
                c["end"],
                c.get("source_id"),
                versions.get(str(c.get("source_id"))),
            ),
        }
        for c in entry.citations
    }
    return answerer.marked_parts(entry.answer, by_n)


def history_of(user) -> QuerySet[Question]:
    """A user's own entries, in collections they may still ask in."""
    visible = Collection.objects.visible_to(user)
    return Question.objects.filter(user=user, collection__in=visible)


def history(user, n: int = HISTORY_SHOWN) -> list[Question]:
    """A user's own latest questions."""
    entries = history_of(user).select_related("collection")
    return list(entries.order_by("-created", "-pk")[:n])


# --- retention -------------------------------------------------------------------


def prune_collection(collection_id: int) -> int:
    """Hold a collection's log to KB_QUESTION_LOG_MAX entries, the oldest pruned
    first; returns how many went."""
    entries = Question.objects.filter(collection_id=collection_id)
    cap = settings.KB_QUESTION_LOG_MAX
    # The newest entry beyond the cap: it and everything older go (an index scan
    # of the collection's newest entries, however long the log).
    beyond = entries.order_by("-created", "-pk").values_list("created", "pk")
    first_out = beyond[cap : cap + 1].first()
    if first_out is None:
        return 0
    created, pk = first_out
    older = Q(created__lt=created) | Q(created=created, pk__lte=pk)
    return entries.filter(older).delete()[0]


def prune(now: datetime | None = None) -> int:
    """Delete entries older than KB_QUESTION_LOG_DAYS (all of them at 0) and hold
    every collection to the cap; returns how many went."""
    days = settings.KB_QUESTION_LOG_DAYS
    old = Question.objects.all()
    if days:
        old = old.filter(created__lt=(now or timezone.now()) - timedelta(days=days))
    count = old.delete()[0]
    for collection_id in Question.objects.values_list(
        "collection_id", flat=True
    ).distinct():
        count += prune_collection(collection_id)
    return count


def maybe_enqueue_prune(redis) -> bool:
    """Queue the pruning job unless one was queued in the last
    KB_QUESTION_PRUNE_SECONDS (by any worker: a key in Redis); workers call this
    from their maintenance loop (kb/worker.py), so no scheduler is needed."""
    import django_rq

    every = max(1, settings.KB_QUESTION_PRUNE_SECONDS)
    if not redis.set(PRUNE_LOCK, "1", nx=True, ex=every):
        return False
    django_rq.get_queue().enqueue(
        "kb.jobs.prune_questions", job_id="kb-prune-questions"
    )
    return True


# --- feedback ----------------------------------------------------------------------


class FeedbackError(ValueError):
    """Feedback that cannot be recorded; `status` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def record_feedback(user, entry_id: Any, helpful: Any, note: Any = "") -> Question:
    """The asker's helpful / not helpful and note on their own logged answer."""
    if isinstance(entry_id, bool) or not isinstance(entry_id, int):
        raise FeedbackError('"id" must be the id (an integer) of a logged answer.')
    if not isinstance(helpful, bool):
        raise FeedbackError('"helpful" must be true or false.')
    if note is None:
        note = ""
    if not isinstance(note, str):
        raise FeedbackError('"note" must be a string.')
    if len(note) > MAX_NOTE:
        raise FeedbackError(
            f"The note has {len(note):,} characters; at most {MAX_NOTE:,} are kept."
        )
    if problem := unstorable(note):  # as in a question: a 400, not a 500
        raise FeedbackError(f"The note contains {problem}; remove it.")
    in_range = 0 < entry_id < 2**63  # a bigint: PostgreSQL refuses larger ids
    # Only in a collection the user may still ask in, as the answer's own page.
    entry = visible_to(user).filter(pk=entry_id).first() if in_range else None
    if entry is None:
        raise FeedbackError("No such logged answer.", status=404)
    if entry.user_id != user.pk:
        raise FeedbackError("This answer was given to someone else.", status=403)
    entry.is_helpful, entry.note = helpful, note.strip()
    entry.feedback_at = timezone.now()
    entry.save(update_fields=["is_helpful", "note", "feedback_at"])
    return entry


# --- replay ------------------------------------------------------------------------

# A citation is the same when it cites the same text under the same heading of
# the same file: text moved by an edit above it is no change. Entries logged
# without the cited text are compared by range.
CITATION_KEYS = ("file", "heading_path", "text")
RANGE_KEYS = ("file", "heading_path", "start", "end")


@dataclass
class Replay:
    """A logged answer beside the answer the current index gives."""

    entry: Question
    result: Any
    reply: Any
    citations_after: list[dict[str, Any]] = field(default_factory=list)
    sections_gained: list[dict[str, Any]] = field(default_factory=list)
    sections_lost: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """The answer cites other text (by file, heading and text) than before:
        a citation gained or lost, which the report names (labels)."""
        return _cited(self.entry.citations) != _cited(self.citations_after)

    def labels(self) -> dict[str, list[str]]:
        """What changed, as labels a reader can tell apart: each source's title
        and heading path, with its file name when two differ only by that."""
        before, after = self.entry.citations, self.citations_after
        groups = {
            "citations_gained": _unmatched(after, before),
            "citations_lost": _unmatched(before, after),
            "sections_gained": self.sections_gained,
            "sections_lost": self.sections_lost,
        }
        files: dict[str, set[str]] = {}
        for row in [*before, *after, *self.sections_gained, *self.sections_lost]:
            files.setdefault(row.get("heading_path", ""), set()).add(row.get("file"))

        def label(row: dict[str, Any]) -> str:
            path = row.get("heading_path", "")
            return f"{path} ({row.get('file')})" if len(files[path]) > 1 else path

        found = {k: list(dict.fromkeys(map(label, rows))) for k, rows in groups.items()}
        # Cited again, but other text of it: named once, not as gained and lost.
        both = [x for x in found["citations_gained"] if x in found["citations_lost"]]
        for key in ("citations_gained", "citations_lost"):
            found[key] = [x for x in found[key] if x not in both]
        return {"citations_reworded": both, **found}

    def as_json(self) -> dict[str, Any]:
        """The shape of `kb_replay ID --json`: citations as in the ask API."""
        return {
            "id": self.entry.pk,
            "changed": self.changed,
            "citations_before": [_api_citation(c) for c in self.entry.citations],
            "citations_after": [_api_citation(c) for c in self.citations_after],
            "sections_gained": self.sections_gained,
            "sections_lost": self.sections_lost,
        }


def replay(entry: Question) -> Replay:
    """Answer a logged question again on the collection's current index."""
    from kb import answering

    result, reply = answering.ask(entry.collection, entry.question)
    before = _sections(entry.retrieved)
    after = _sections(retrieved(result))
    return Replay(
        entry=entry,
        result=result,
        reply=reply,
        citations_after=citations(result, reply),
        sections_gained=_unlisted(after, before),
        sections_lost=_unlisted(before, after),
    )


def _cited(cites: list[dict[str, Any]]) -> list[tuple]:
    """The texts cited, in any order: the same ones reordered are no change."""
    return sorted({_citation_key(c) for c in cites}, key=repr)


def _citation_key(cite: dict[str, Any]) -> tuple:
    """A citation by what it cites; its heading path below the source title (a
    retitled source cites the same places)."""
    keys = CITATION_KEYS if cite.get("text") else RANGE_KEYS
    return tuple(
        below_title(cite.get(k) or "") if k == "heading_path" else cite.get(k)
        for k in keys
    )


def _unmatched(cites: list[dict[str, Any]], others: list[dict[str, Any]]) -> list:
    """The citations of `cites` that cite nothing `others` cite."""
    known = {_citation_key(c) for c in others}
    return [c for c in cites if _citation_key(c) not in known]


def _api_citation(cite: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cite.items() if k != "text"}


def _unlisted(sections: list[dict[str, str]], others: list[dict[str, str]]) -> list:
    """The sections of `sections` not among `others` (titles aside: below_title)."""
    known = {(s["file"], below_title(s["heading_path"])) for s in others}
    return [
        s for s in sections if (s["file"], below_title(s["heading_path"])) not in known
    ]


def _sections(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Retrieved sections by file and heading path: ids change with a re-index."""
    found: list[dict[str, str]] = []
    for row in rows:
        key = {"file": row["file"], "heading_path": row["heading_path"]}
        if key not in found:
            found.append(key)
    return found


def replay_recent(
    collection: Collection, n: int = REPLAY_LAST, report_id: int | None = None
) -> ReplayReport:
    """Answer the collection's last `n` logged questions again; the report (the
    one made when it was queued, else a new one) lists those whose citations
    changed."""
    report = ReplayReport.objects.filter(pk=report_id, collection=collection).first()
    if report is not None and report.status != ReplayReport.Status.RUNNING:
        return report  # the same job again (issue #26): the report has its outcome
    report = report or ReplayReport.objects.create(collection=collection)
    entries = collection.questions.order_by("-created", "-pk")[:n]
    try:
        changed = []
        count = 0
        for entry in entries:
            outcome = replay(entry)
            count += 1
            if outcome.changed:
                changed.append(
                    {
                        **outcome.as_json(),
                        "question": entry.question,
                        "labels": outcome.labels(),
                    }
                )
    except Exception as exc:
        ReplayReport.objects.filter(pk=report.pk).update(
            status=ReplayReport.Status.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            finished=timezone.now(),
        )
        raise
    report.replayed, report.changed = count, changed
    report.status, report.finished = ReplayReport.Status.DONE, timezone.now()
    report.save()
    return report


def enqueue_replay_report(collection: Collection, n: int = REPLAY_LAST):
    """Queue a replay report of the collection (after a re-index goes live). Its
    row is made now, running, so that a lost job ends it (kb.recovery)."""
    import django_rq

    from kb.queueing import replay_job_id

    report = ReplayReport.objects.create(collection=collection)
    return django_rq.enqueue(
        "kb.jobs.replay_recent",
        collection.pk,
        n,
        report.pk,
        job_id=replay_job_id(report.pk),
    )


# --- content gaps --------------------------------------------------------------------


@dataclass
class Gap:
    """Similar unanswered or unhelpful questions of one collection."""

    collection: Collection
    entries: list[Question]

    @property
    def latest(self) -> Question:
        return self.entries[0]

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def declined(self) -> int:
        return sum(e.is_declined for e in self.entries)

    @property
    def not_helpful(self) -> int:
        return sum(e.is_helpful is False for e in self.entries)

    @property
    def notes(self) -> list[str]:
        return [e.note for e in self.entries if e.note]

    @property
    def ids(self) -> list[int]:
        return [e.pk for e in self.entries]


# A gap: a question declined, or whose answer was marked not helpful.
GAP = Q(is_declined=True) | Q(is_helpful=False)


def open_gaps(user) -> QuerySet[Question]:
    """Declined or not-helpful answers no editor has handled yet."""
    return (
        visible_to(user)
        .filter(collection__is_scratch=False, handled__isnull=True)
        .filter(GAP)
    )


def gaps(user, collection: Collection | None = None) -> list[Gap]:
    """Open gaps grouped: a question joins the first group (newest first) whose
    first question's embedding is at least KB_GAP_SIMILARITY similar to its own.
    Groups with the most questions come first."""
    entries = open_gaps(user).select_related("collection")
    if collection is not None:
        entries = entries.filter(collection=collection)
    entries = list(entries.order_by("-created", "-pk")[:GAPS_READ])
    groups: list[Gap] = []
    heads: dict[int, list[tuple[np.ndarray, Gap]]] = {}
    for entry in entries:
        vector = _unit(entry.embedding)
        found = next(
            (
                gap
                for head, gap in heads.get(entry.collection_id, [])
                if vector is not None and _similar(vector, head)
            ),
            None,
        )
        if found is not None:
            found.entries.append(entry)
            continue
        gap = Gap(entry.collection, [entry])
        groups.append(gap)
        if vector is not None:
            heads.setdefault(entry.collection_id, []).append((vector, gap))
    return sorted(groups, key=lambda g: (-g.count, -g.latest.created.timestamp()))


def _similar(a: np.ndarray, b: np.ndarray) -> bool:
    return float(a @ b) >= settings.KB_GAP_SIMILARITY


def _unit(vector) -> np.ndarray | None:
    if vector is None:
        return None
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm else None


def similar_open(entry: Question) -> list[int]:
    """The ids of the open gaps of the entry's collection grouped with it."""
    vector = _unit(entry.embedding)
    ids = [entry.pk]
    if vector is None:
        return ids
    others = Question.objects.filter(
        collection_id=entry.collection_id, handled__isnull=True
    ).filter(GAP)
    others = others.exclude(pk=entry.pk).order_by("-created")[:GAPS_READ]
    for pk, other in others.values_list("pk", "embedding"):
        unit = _unit(other)
        if unit is not None and _similar(vector, unit):
            ids.append(pk)
    return ids


def mark_handled(user, ids: list[int], note: str) -> int:
    """Mark these gaps (of collections the user may see) handled; how many."""
    with transaction.atomic():
        return (
            open_gaps(user)
            .filter(pk__in=ids)
            .update(handled=timezone.now(), handled_note=note, handled_by=user)
        )


def case_made(user, case) -> int:
    """A golden case was made from a logged question: the case is marked as real,
    the question and the open gaps grouped with it handled; how many. A case made
    from an answer marked not helpful is scored on the answer (issue #28): its
    gaps stay open until a run of the live configuration shows the answer
    quoting every span (`close_answered`), and none is handled now."""
    from kb.models import GoldenCase

    fields = {"is_real_question": True}
    if case.from_question.is_helpful is False:
        fields["on_answer"] = True
    GoldenCase.objects.filter(pk=case.pk).update(**fields)
    for name, value in fields.items():
        setattr(case, name, value)
    if case.on_answer:
        return 0
    note = f"Golden case {case.external_id}"
    return mark_handled(user, similar_open(case.from_question), note)


def close_answered(collection: Collection, case_ids: list[str], run_id: int) -> int:
    """The gaps behind golden cases scored on the answer that a run of the live
    configuration passed (their answers quote every span) are handled now, with
    the run named; how many."""
    from kb.models import GoldenCase

    cases = GoldenCase.objects.filter(
        collection=collection,
        external_id__in=case_ids,
        on_answer=True,
        from_question__isnull=False,
    ).select_related("from_question")
    closed = 0
    for case in cases:
        note = (
            f"Golden case {case.external_id}: its answer quotes every span "
            f"in run #{run_id}"
        )
        closed += (
            Question.objects.filter(
                pk__in=similar_open(case.from_question), handled__isnull=True
            )
            .filter(GAP)
            .update(handled=timezone.now(), handled_note=note)
        )
    return closed
