"""Deleting sources and collections with their index, and counting what goes
with them, without loading the rows (issue #26).

The admin's delete page listed every row deleted with a source, loading each
chunk with its text and vector: a 35,022-chunk source grew the web process to
21 GB. Counting is one COUNT per model; deleting is one statement per table of
the index, then the ORM for the sources themselves (their receivers delete the
uploads and recount the collection's words).
"""

from __future__ import annotations

from django.db import connection, models, transaction
from django.db.models import Q, QuerySet

from kb.models import Chunk, Collection, OverflowRejection, Section, Source

# A source's index, deleted by source id in one statement per table: through the
# ORM, each section would be loaded to cascade to its chunks and children.
INDEX_MODELS = (Chunk, OverflowRejection, Section)


def cascade_counts(rows: QuerySet) -> dict[type[models.Model], int]:
    """How many rows of each model deleting `rows` deletes with them (foreign
    keys with on_delete=CASCADE), counted in the database."""
    conditions: dict[type[models.Model], list[Q]] = {}
    _collect(rows, conditions, seen=(rows.model,))
    counts = {rows.model: rows.count()}
    for model, found in conditions.items():
        either = Q()
        for condition in found:
            either |= condition
        counts[model] = model._base_manager.filter(either).count()
    return counts


def _collect(rows: QuerySet, conditions: dict, seen: tuple) -> None:
    """Add, per model, a condition matching its rows deleted with `rows`, and
    go on to theirs. A row reached by several paths (a chunk by its source and
    its section) is counted once: the conditions of one model are or-ed. A model
    already on the path (a section's children) holds rows already counted."""
    for relation in rows.model._meta.related_objects:
        model = relation.related_model
        if relation.many_to_many or relation.on_delete is not models.CASCADE:
            continue
        if model in seen:
            continue
        condition = Q(**{f"{relation.field.name}__in": rows.values("pk")})
        conditions.setdefault(model, []).append(condition)
        _collect(model._base_manager.filter(condition), conditions, (*seen, model))


def delete_sources(sources: QuerySet) -> int:
    """Delete the sources and their index; returns how many sources."""
    ids = list(sources.values_list("pk", flat=True))
    with transaction.atomic():
        _delete_index(ids)
        # The sources themselves through the ORM, for their receivers (kb.models,
        # kb.queueing), which need no text.
        _, deleted = Source.objects.filter(pk__in=ids).defer("text").delete()
    return deleted.get(Source._meta.label, 0)


def delete_collections(collections: QuerySet) -> int:
    """Delete the collections with their sources and indexes, and their scratch
    copies (shadow indexes' and evaluation runs'); returns how many collections
    (copies left out)."""
    ids = list(collections.values_list("pk", flat=True))
    copies = list(
        Collection.objects.filter(live__in=ids, is_scratch=True).values_list(
            "pk", flat=True
        )
    )
    with transaction.atomic():
        delete_sources(Source.objects.filter(collection__in=[*ids, *copies]))
        Collection.objects.filter(pk__in=copies, is_scratch=True).delete()
        _, deleted = Collection.objects.filter(pk__in=ids).delete()
    return deleted.get(Collection._meta.label, 0)


def _delete_index(ids: list[int]) -> None:
    # Section.parent is a foreign key checked at commit (Django makes them
    # DEFERRABLE INITIALLY DEFERRED), so a source's sections go in one statement.
    with connection.cursor() as cursor:
        for model in INDEX_MODELS:
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"DELETE FROM {table} WHERE source_id = ANY(%s)", [ids])
