"""Re-indexing that goes live only when it holds (issue #18).

A change of a collection's chunking settings or metadata policy is not applied to
the live index source by source. `start` records it on a ShadowIndex and queues
`kb.jobs.build_shadow`, which runs `run`:

1. `build`: every indexed source is copied into a hidden scratch collection under
   the new settings (evaluation.scratch_copy) and indexed there. Asks and runs keep
   using the live index meanwhile; a source that fails under the new settings fails
   the shadow, with the reason, and the live index is left as it is.
2. `evaluate`: the golden set on the shadow and, alongside, on the live index (the
   same cases, k and context budget: the collection's), both kept as runs.
3. `decide`: recall@k at or above the bar swaps the shadow into live in one
   transaction (`swap`); below it, the shadow is held until an admin approves or
   discards it on the dashboard, with the cases it lost listed. The bar is the
   collection's floor on what it applies to (recall@k, the share of answers
   quoting every span, or both); without a floor, the live index's figure
   measured alongside (a rebuild may not lose recall unseen). Without golden
   cases there is nothing to measure: the shadow swaps, and the dashboard says so.

The swap keeps the live Section rows: sections come from parsing the source's
text, which neither the chunking settings nor the policy change, so a citation
(source, section id, character range) made before the swap still opens the same
text after it. Chunks, their ids and indexes, and the sections' vectors are the
shadow's. A source uploaded or edited while the shadow was built (its version is
not the one copied), or still being indexed, is queued again in the swap's
transaction and indexed under the new settings: no upload is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial
from typing import Any

from django.db import connection, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from kb import (
    embedding,
    evaluation,
    golden,
    index_config,
    ingestion,
    parsing,
    questions,
    queueing,
    recovery,
    uploads,
)
from kb.metadata import BUILTIN_FIELDS, Policy
from kb.models import (
    Chunk,
    Collection,
    EvalRun,
    OverflowRejection,
    Question,
    Section,
    ShadowIndex,
    Source,
)
from kb.retrieval import hnsw_recall

logger = logging.getLogger(__name__)

SETTING_FIELDS = [*index_config.INDEX_FIELDS, "metadata_policy"]
Status = ShadowIndex.Status
OPEN = [Status.BUILDING, Status.EVALUATING, Status.HELD, Status.APPROVED]
SHOWN = 3  # shadows listed on the dashboard


class ShadowFailed(Exception):
    """The shadow cannot be built; the message says why."""


class StoodDown(Exception):
    """The shadow was discarded or superseded while it was built."""


# --- starting -------------------------------------------------------------------


def settings_of(collection: Collection) -> dict[str, Any]:
    return {f: getattr(collection, f) for f in SETTING_FIELDS}


def open_shadow(collection: Collection) -> ShadowIndex | None:
    """The collection's shadow not yet swapped, discarded or failed."""
    return (
        ShadowIndex.objects.filter(collection=collection, status__in=OPEN)
        .order_by("-created")
        .first()
    )


def start(
    collection: Collection, changes: dict[str, Any], user=None, *, queue: bool = True
) -> ShadowIndex | None:
    """Build the collection's index under `changes` (of SETTING_FIELDS) as a shadow.

    The change adds to an open shadow's settings, which it supersedes. Returns the
    new shadow, or None when nothing needs building: the change undoes the open
    one's, or no source is indexed yet (the settings then apply at once). With
    `queue` False the caller runs it (`run`) instead of a worker.
    """
    with transaction.atomic():
        live = Collection.objects.select_for_update().get(pk=collection.pk)
        earlier = list(
            ShadowIndex.objects.select_for_update()
            .filter(collection=live, status__in=OPEN)
            .order_by("created")
        )
        wanted = {**settings_of(live)}
        if earlier:
            wanted.update(earlier[-1].new_settings)
        wanted.update({k: v for k, v in changes.items() if k in SETTING_FIELDS})
        for shadow in earlier:
            _close(shadow, Status.DISCARDED, "superseded by a later change", user)
        if _same(live, wanted, settings_of(live)):
            return None
        if not live.sources.filter(indexed_version__isnull=False).exists():
            Collection.objects.filter(pk=live.pk).update(**wanted)
            return None
        shadow = ShadowIndex.objects.create(
            collection=live,
            new_settings=wanted,
            old_settings=settings_of(live),
            requested_by=user,
        )
        if queue and not queueing.enqueue_shadow(shadow):
            _close(
                shadow,
                Status.FAILED,
                "the job queue cannot be reached; make "
                "the change again once it is back",
                user,
            )
    return shadow


def _same(collection: Collection, a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two sets of settings build the same index (a policy compares by its
    decisions: {} and the defaults spelt out are one policy)."""
    keys = index_config.free_keys(collection)
    if any(a[f] != b[f] for f in index_config.INDEX_FIELDS):
        return False
    decisions = [
        Policy.build(x["metadata_policy"] or {}, keys).decisions for x in (a, b)
    ]
    return decisions[0] == decisions[1]


def hold_index_settings(
    collection: Collection, changed: Iterable[str]
) -> dict[str, Any]:
    """Put the chunking settings among the `changed` fields of an edited collection
    back to their live values, and return the new ones: they go live with a
    shadow index (`start`), not at once."""
    live = Collection.objects.get(pk=collection.pk)
    changes = {
        f: getattr(collection, f) for f in index_config.INDEX_FIELDS if f in changed
    }
    for field in changes:
        setattr(collection, field, getattr(live, field))
    return changes


def set_metadata_policy(
    collection: Collection, decisions: dict[str, str], user=None
) -> ShadowIndex | None:
    """Ask for a new metadata policy ({field: decision}, kb/metadata.py). The live
    index keeps the current one until a shadow index built with the new one holds
    on the golden set and swaps in. Returns the ShadowIndex, or None when nothing
    needs building (the same policy, or nothing indexed yet: the policy then
    applies at once)."""
    return start(collection, {"metadata_policy": decisions}, user)


def changed_settings(shadow: ShadowIndex) -> dict[str, Any]:
    """What the shadow changes, field by field: {field: (live, new)}; a policy
    by the fields whose decision changes."""
    old, new = shadow.old_settings, shadow.new_settings
    # A shadow from before a field existed has none (embedding_model, #27).
    changes = {
        f: (old.get(f), new.get(f))
        for f in index_config.INDEX_FIELDS
        if f in new and old.get(f) != new[f]
    }
    named = set(old.get("metadata_policy") or {}) | set(new["metadata_policy"] or {})
    keys = sorted(named - set(BUILTIN_FIELDS))  # free fields default to retrieve
    before = Policy.build(old.get("metadata_policy") or {}, keys).decisions
    after = Policy.build(new["metadata_policy"] or {}, keys).decisions
    for key in sorted(after):
        if before.get(key) != after[key]:
            changes[f"policy of {key}"] = (before.get(key), after[key])
    return changes


# --- the job --------------------------------------------------------------------


def run(shadow_id: int) -> str:
    """Build, evaluate and decide (kb.jobs.build_shadow); a one-line outcome."""
    shadow = ShadowIndex.objects.select_related("collection").get(pk=shadow_id)
    if shadow.status != Status.BUILDING:
        return f"skipped: shadow {shadow_id} is {shadow.status}"
    try:
        build(shadow)
        runs = evaluate(shadow)
        return decide(shadow, *runs)
    except StoodDown:
        return _stand_down(shadow)
    except Exception as exc:
        if _status(shadow) not in (Status.BUILDING, Status.EVALUATING):
            return _stand_down(shadow)  # its scratch went with a discard
        reason = (
            str(exc)
            if isinstance(exc, ShadowFailed)
            else (f"{type(exc).__name__}: {exc}")
        )
        logger.exception("shadow index %s failed", shadow_id)
        _close(shadow, Status.FAILED, reason)
        raise


def build(shadow: ShadowIndex) -> Collection:
    """Copy the collection's indexed sources into a scratch collection under the
    shadow's settings and index them (in this process, as evaluation runs do)."""
    collection = shadow.collection
    settings = shadow.new_settings
    sources = list(evaluation.indexed_sources(collection))
    with uploads.storing():  # all copies or none, files included
        scratch = evaluation.scratch_copy(
            collection,
            {f: settings[f] for f in index_config.INDEX_FIELDS if f in settings},
            policy=settings["metadata_policy"],
            sources=sources,
        )
        copies = dict(scratch.sources.values_list("file_name", "pk"))
        shadow.scratch = scratch
        shadow.sources = {str(s.pk): [copies[s.file_name], s.version] for s in sources}
        # Sources that had failed and were never indexed: left alone by the swap
        # unless uploaded or edited again meanwhile (then their version moved).
        for pk, version in collection.sources.filter(
            indexed_version__isnull=True, status=Source.Status.FAILED
        ).values_list("pk", "version"):
            shadow.sources[str(pk)] = [None, version]
        shadow.save(update_fields=["scratch", "sources"])
    copied = list(scratch.sources.order_by("pk"))
    for done, source in enumerate(copied):
        _progress(shadow, stage="indexing", done=done, total=len(copied))
        try:
            ingestion.ingest(source.pk)
        except (
            parsing.ParseError,
            ingestion.IngestionError,
            embedding.EmbeddingError,
        ) as exc:
            if _status(shadow) != Status.BUILDING:
                raise StoodDown from exc
            message = str(exc)
            if source.file_name not in message:
                message = f"{source.file_name}: {message}"
            raise ShadowFailed(
                f"{message} (under the new settings; the live index is unchanged)"
            ) from exc
    hnsw_recall.after_publish(scratch)
    return scratch


def evaluate(shadow: ShadowIndex) -> tuple[EvalRun | None, EvalRun | None]:
    """The golden set on the built shadow and on the live index, both stored as
    runs; (None, None) when the collection has no case to score."""
    _advance(shadow, Status.BUILDING, Status.EVALUATING, stage="evaluating")
    collection = Collection.objects.get(pk=shadow.collection_id)
    stale = [
        {k: c[k] for k in ("id", "question", "problems")}
        for c in golden.stale_cases(collection)
    ]
    left_out = {c["id"] for c in stale}
    cases = [c for c in golden.cases_of(collection) if c["id"] not in left_out]
    if not cases:
        return None, None
    extra = {"cases": len(cases), "stale_cases": stale}
    overrides = {k: v[1] for k, v in changed_settings(shadow).items()}
    on_shadow = _stored_run(
        collection,
        shadow.scratch,
        cases,
        {**extra, "overrides": overrides, "scratch": True, "shadow": shadow.pk},
    )
    _check(shadow, Status.EVALUATING)
    on_live = _stored_run(collection, collection, cases, extra)
    ShadowIndex.objects.filter(pk=shadow.pk).update(run=on_shadow, live_run=on_live)
    return on_shadow, on_live


def _stored_run(collection, target, cases, config: dict[str, Any]) -> EvalRun:
    """evaluation.evaluate on `target` (the collection's k, budget and mode, which
    the scratch copy shares), stored as a finished run of the collection."""
    outcome = evaluation.evaluate(target, cases)
    return EvalRun.objects.create(
        collection=collection,
        status=EvalRun.Status.DONE,
        config={**evaluation.config_of(target), **config},
        aggregate=outcome["aggregate"],
        cases=outcome["cases"],
        finished=timezone.now(),
    )


def decide(shadow: ShadowIndex, on_shadow, on_live) -> str:
    """Swap when the shadow reaches the bar on every measure the collection's
    floor applies to (recall@k, the answers quoting every span, or both), else
    hold it for an admin."""
    collection = Collection.objects.get(pk=shadow.collection_id)
    if on_shadow is None:
        why = "no golden cases to evaluate: swapped without a check"
        return _outcome(swap(shadow.pk, Status.EVALUATING, why), shadow)
    measures = evaluation.measures(collection)
    checks = [_reaches(collection, m, on_shadow, on_live) for m in measures]
    floor, live = collection.recall_floor, on_live.recall
    lost = [
        c
        for m in measures
        for c in evaluation.changed_between(on_live.cases, on_shadow.cases, m)
        if not c["after"]
    ]
    ShadowIndex.objects.filter(pk=shadow.pk).update(
        recall=on_shadow.recall,
        bar=live if floor is None else floor,
        live_recall=live,
        regressed=lost,
    )
    why = "; ".join(text for _, text in checks)
    if all(ok for ok, _ in checks):
        return _outcome(swap(shadow.pk, Status.EVALUATING, why), shadow)
    held = ShadowIndex.objects.filter(pk=shadow.pk, status=Status.EVALUATING).update(
        status=Status.HELD, decision=why, progress={}
    )
    return f"held: {why}" if held else _stand_down(shadow)


def _reaches(collection: Collection, measure: str, on_shadow, on_live):
    """Whether the shadow's figure on a measure reaches its bar (the floor, else
    the live index's figure on the same cases), and the reason in words."""
    value = evaluation.figure(on_shadow.aggregate, measure) or 0.0
    floor = evaluation.floor_of(collection, measure)
    live = evaluation.figure(on_live.aggregate, measure) or 0.0
    if measure == evaluation.RETRIEVAL:
        name = f"recall@{on_shadow.aggregate['k']} {value:.3f}"
        floor_name, live_name = "the recall floor", "the live index's recall"
    else:
        name = f"answers quoting every span {value:.3f}"
        floor_name, live_name = "the answer floor", "the live index's answers"
    if floor is not None:
        bar, named = floor, f"{floor_name} {floor:.3f}"
    else:
        bar, named = live, f"{live_name} {live:.3f} (no floor set)"
    ok = value >= bar
    return ok, f"{name} {'≥' if ok else '<'} {named}"


def _outcome(swapped: bool, shadow: ShadowIndex) -> str:
    return "swapped" if swapped else _stand_down(shadow)


# --- deciding -------------------------------------------------------------------


def approve(shadow: ShadowIndex, user) -> bool:
    """An admin's go for a held shadow; the swap runs in a worker
    (kb.jobs.swap_shadow). False when it is no longer held."""
    # Since when its swap job waits (kb.recovery): approval comes long after
    # the shadow was created.
    approved = {"stage": "swapping", "approved": timezone.now().isoformat()}
    with transaction.atomic():
        held = ShadowIndex.objects.filter(pk=shadow.pk, status=Status.HELD).update(
            status=Status.APPROVED, decided_by=user, progress=approved, error=""
        )
        if held and not queueing.enqueue_swap(shadow):
            ShadowIndex.objects.filter(pk=shadow.pk).update(
                status=Status.HELD, decided_by=None, progress={}
            )
            return False
    return bool(held)


def swap_approved(shadow_id: int) -> str:
    """kb.jobs.swap_shadow: the swap an admin approved."""
    shadow = ShadowIndex.objects.select_related("decided_by").get(pk=shadow_id)
    who = shadow.decided_by or "an admin"
    why = f"{shadow.decision}; approved by {who}"
    return _outcome(swap(shadow_id, Status.APPROVED, why), shadow)


def discard(shadow: ShadowIndex, user) -> bool:
    """Drop a shadow that is not live, whatever its job is doing (a build stands
    down; an approved swap not yet made will not be), and its scratch copy; one
    that ended (failed, discarded) loses what is left of its copy. False when it
    is live (swapped), or ended with no copy left."""
    with transaction.atomic():
        locked = ShadowIndex.objects.select_for_update().get(pk=shadow.pk)
        if locked.status in OPEN:
            _close(locked, Status.DISCARDED, "discarded by an admin", user)
            return True
        if not can_discard(locked):  # live, or ended with no copy left
            return False
        transaction.on_commit(partial(queueing.enqueue_drop_scratch, locked.scratch_id))
    return True


def can_discard(shadow: ShadowIndex) -> bool:
    return shadow.status in OPEN or (
        shadow.status != Status.SWAPPED and shadow.scratch_id is not None
    )


def end_lost_shadows() -> int:
    """End every shadow whose build or swap job was lost (end_lost); how many."""
    lost = recovery.lost_shadows()
    shadows = ShadowIndex.objects.filter(pk__in=list(lost))
    return sum(end_lost(shadow, lost[shadow.pk]) for shadow in shadows)


def end_lost(shadow: ShadowIndex, why: str) -> bool:
    """End a shadow whose job was lost (kb.recovery): a build fails with the
    reason, its scratch copy dropped; an approved swap that did not happen (a
    swap is one transaction: the live index is as it was) is held again, with
    the reason, for an admin to approve again or discard. False when it moved
    on meanwhile."""
    with transaction.atomic():
        locked = ShadowIndex.objects.select_for_update().get(pk=shadow.pk)
        if locked.status != shadow.status:
            return False
        if locked.status == Status.APPROVED:
            ShadowIndex.objects.filter(pk=shadow.pk).update(
                status=Status.HELD,
                decided_by=None,
                progress={},
                error=f"The approved swap did not happen: {why}. The live index "
                "is unchanged: approve it again or discard it.",
            )
        else:
            _close(
                locked,
                Status.FAILED,
                f"Not finished: {why}. The live index "
                "is unchanged: make the change again.",
            )
    logger.warning("shadow index %s: %s", shadow.pk, why)
    return True


def _close(shadow: ShadowIndex, status: str, why: str, user=None) -> None:
    """End a shadow that will not go live; its scratch collection is dropped by a
    job (a build running on it stands down)."""
    fields = {"status": status, "finished": timezone.now(), "progress": {}}
    fields["error" if status == Status.FAILED else "decision"] = why
    if user is not None:
        fields["decided_by"] = user
    ShadowIndex.objects.filter(pk=shadow.pk).update(**fields)
    scratch = ShadowIndex.objects.filter(pk=shadow.pk).values_list(
        "scratch_id", flat=True
    )[0]
    if scratch:
        transaction.on_commit(partial(queueing.enqueue_drop_scratch, scratch))


# --- the swap -------------------------------------------------------------------


def swap(shadow_id: int, expected: str, why: str) -> bool:
    """Make the shadow the live index (`swap_in`), then drop what is left of its
    scratch copy; False when the shadow is no longer in the `expected` state
    (discarded, superseded, swapped)."""
    shadow = swap_in(shadow_id, expected, why)
    if shadow is None:
        return False
    adopt_run(shadow)
    drop_scratch(shadow.scratch_id or 0)
    logger.info(
        "%s: shadow index %s swapped in (%s); queued again: %s",
        shadow.collection,
        shadow.pk,
        why,
        shadow.progress.get("requeued"),
    )
    return True


def adopt_run(shadow: ShadowIndex) -> EvalRun | None:
    """The shadow's evaluation as a run of the live configuration, now that its
    index is the live one: the dashboard's headline and chart then show the
    settings in use, not the ones before the swap. Not when sources were queued
    again after the swap (they changed during the build): the index then differs
    from the one measured, and the next run measures it."""
    measured = shadow.run
    if measured is None or shadow.progress.get("requeued"):
        return None
    config = {
        key: value
        for key, value in measured.config.items()
        if key not in ("overrides", "scratch", "shadow")
    }
    return EvalRun.objects.create(
        collection_id=shadow.collection_id,
        status=EvalRun.Status.DONE,
        config={**config, "measured_on_shadow": shadow.pk},
        aggregate=measured.aggregate,
        cases=measured.cases,
        finished=timezone.now(),
    )


def swap_in(shadow_id: int, expected: str, why: str) -> ShadowIndex | None:
    """The swap's one transaction: the shadow's chunks onto the live sources, the
    new settings onto the collection, sources changed since the copy queued
    again. The shadow as swapped, or None when not in the `expected` state."""
    with transaction.atomic():
        shadow = ShadowIndex.objects.select_for_update().get(pk=shadow_id)
        if shadow.status != expected:
            return None
        collection = Collection.objects.select_for_update().get(pk=shadow.collection_id)
        # Locked in id order: uploads, edits and publishing jobs wait for the swap
        # (or the swap for them), so each lands on one side of it.
        live = list(
            Source.objects.select_for_update()
            .filter(collection=collection)
            .order_by("pk")
        )
        copies = {s.pk: s for s in Source.objects.filter(collection=shadow.scratch_id)}
        again = []
        for source in live:
            copy_id, version = shadow.sources.get(str(source.pk), [None, None])
            copy = copies.get(copy_id)
            if (
                copy is not None
                and copy.status == Source.Status.INDEXED
                and source.version == version
                and source.status not in Source.ACTIVE
            ):
                _move(copy, source)
            elif (
                copy_id is None
                and version == source.version
                and source.status == Source.Status.FAILED
            ):
                continue  # failed before the build and not touched since
            else:  # new, edited or being indexed since the copy: build it again
                again.append(source)
        for field, value in shadow.new_settings.items():
            setattr(collection, field, value)
        collection.save(update_fields=SETTING_FIELDS)
        for source in again:
            source.queue_new_version()  # a job of the old settings stands down
            queueing.enqueue_ingest(source)
        shadow.status, shadow.decision = Status.SWAPPED, why
        shadow.finished = timezone.now()
        shadow.progress = {"requeued": [s.file_name for s in again]}
        shadow.save(update_fields=["status", "decision", "finished", "progress"])
        transaction.on_commit(partial(queueing.enqueue_count_terms, collection.pk))
        transaction.on_commit(partial(after_swap, collection))
    return shadow


def _move(copy: Source, source: Source) -> None:
    """The copy's chunks onto the live source. Sections stay the live rows when
    the copy parsed into the same ones (their vectors are the copy's); otherwise
    (the text was read anew, differently) the copy's sections replace them."""
    Chunk.objects.filter(source=source).delete()
    same = _bounds(source) == _bounds(copy)
    with connection.cursor() as cursor:
        if same:
            cursor.execute(_SECTION_VECTORS, [source.pk, copy.pk])
            cursor.execute(_CHUNKS_ONTO_SECTIONS, [source.pk, copy.pk])
    if not same:
        Section.objects.filter(source=source).delete()
        Section.objects.filter(source=copy).update(source=source)
        Chunk.objects.filter(source=copy).update(source=source)
        Source.objects.filter(pk=source.pk).update(
            text=copy.text,
            reader_summary=copy.reader_summary,
            page_map=copy.page_map,
        )
        source.text = copy.text
        golden.reanchor_spans(source)
    OverflowRejection.objects.filter(source=source).delete()
    Source.objects.filter(pk=source.pk).update(
        status=Source.Status.INDEXED,
        error="",
        indexed_version=source.version,
        indexed=timezone.now(),
        stats=copy.stats,
        progress=copy.progress,
    )


def _bounds(source: Source) -> list[tuple[int, int, int]]:
    return list(source.sections.order_by("order").values_list("order", "start", "end"))


_SECTION_VECTORS = """
    UPDATE kb_section AS live
    SET embedding = copy.embedding, embedding_model = copy.embedding_model
    FROM kb_section AS copy
    WHERE live.source_id = %s AND copy.source_id = %s AND live."order" = copy."order"
"""
_CHUNKS_ONTO_SECTIONS = """
    UPDATE kb_chunk AS chunk SET source_id = live.source_id, section_id = live.id
    FROM kb_section AS copy, kb_section AS live
    WHERE live.source_id = %s AND chunk.source_id = %s
      AND copy.id = chunk.section_id AND live."order" = copy."order"
"""


def after_swap(collection: Collection) -> None:
    """Called once a swap has committed: the collection's last logged questions are
    answered again on the new index, and a replay report lists those whose
    citations changed (kb.questions)."""
    if not Question.objects.filter(collection=collection).exists():
        return
    logger.info("%s: a new index is live; replaying its logged questions", collection)
    try:
        questions.enqueue_replay_report(collection)
    except RedisError:  # the swap stands; a replay can be asked for by hand
        logger.warning("%s: Redis unreachable, no replay report queued", collection)


# --- helpers ----------------------------------------------------------------------


def _status(shadow: ShadowIndex) -> str | None:
    return (
        ShadowIndex.objects.filter(pk=shadow.pk)
        .values_list("status", flat=True)
        .first()
    )


def _check(shadow: ShadowIndex, expected: str) -> None:
    if _status(shadow) != expected:
        raise StoodDown


def _advance(shadow: ShadowIndex, before: str, after: str, **progress: Any) -> None:
    moved = ShadowIndex.objects.filter(pk=shadow.pk, status=before).update(
        status=after, progress=progress
    )
    if not moved:
        raise StoodDown


def _progress(shadow: ShadowIndex, **progress: Any) -> None:
    if not ShadowIndex.objects.filter(pk=shadow.pk, status=Status.BUILDING).update(
        progress=progress
    ):
        raise StoodDown


def _stand_down(shadow: ShadowIndex) -> str:
    """The job's word when its shadow was discarded or superseded meanwhile: the
    scratch copy it may have made after that goes too."""
    status = _status(shadow)
    if status != Status.SWAPPED:
        scratch = ShadowIndex.objects.filter(pk=shadow.pk).values_list(
            "scratch_id", flat=True
        )
        drop_scratch(scratch.first() or shadow.scratch_id or 0)
    return f"stood down: shadow {shadow.pk} is {status}"


def drop_scratch(collection_id: int) -> int:
    """Delete a shadow's scratch collection (never a live one)."""
    scratch = Collection.objects.filter(pk=collection_id, is_scratch=True)
    return scratch.delete()[1].get("kb.Collection", 0)


def shown(collection: Collection) -> list[dict[str, Any]]:
    """The collection's latest shadows as the dashboard shows them."""
    rows = ShadowIndex.objects.filter(collection=collection).select_related(
        "requested_by", "decided_by"
    )
    latest = list(rows.order_by("-created")[:SHOWN])
    # A build or swap whose job was lost is not shown as in progress.
    lost = recovery.lost_shadows(latest)
    return [
        {
            "shadow": s,
            "changes": changed_settings(s),
            "lost": lost.get(s.pk),
            "open": s.status in OPEN and s.pk not in lost,
            "can_decide": s.status == Status.HELD,
            "can_discard": can_discard(s),
        }
        for s in latest
    ]
