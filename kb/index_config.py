"""What a collection's index is built with, against what its settings say now.

Each source's stats record the settings its published index was built with
(`build_config`, stored by the job in kb.ingestion), so that a changed chunk
budget shows as an out-of-date index (`index_differences`, `index_state`)
instead of passing for the index it would take; `index_config` is what the
published index was built with (an evaluation run records it). INDEX_FIELDS
are the collection's settings that need a new index. `policy_for`: the
collection's metadata policy, over the keys its sources' metadata holds.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils.translation import gettext

from kb import embedding
from kb.metadata import Policy
from kb.models import Collection, Source

INDEX_FIELDS = ["chunk_strategy", "chunk_tokens", "chunk_overlap", "embedding_model"]


def build_config(collection: Collection) -> dict[str, Any]:
    """The settings an index built now would have (the metadata policy apart: a
    new policy is built as a shadow index and swapped in whole, kb/reindexing.py).
    The embedding model is recorded by its own name, under "model"."""
    embedder = embedding.for_collection(collection)
    return {
        **{f: getattr(collection, f) for f in INDEX_FIELDS if f != "embedding_model"},
        "model": embedder.model_name,
        "precision": embedder.precision,
        "window": embedder.window,
    }


def index_config(collection: Collection) -> dict[str, Any]:
    """What the collection's published index was built with: per setting its value,
    or the sorted values when sources differ (a re-index half done); settings no
    source recorded are missing."""
    built = _built_configs(collection)
    values: dict[str, set] = {}
    for config in filter(None, built):
        for key, value in config.items():
            values.setdefault(key, set()).add(value)
    return {
        key: found.pop() if len(found) == 1 else sorted(found, key=str)
        for key, found in values.items()
    }


def index_differences(collection: Collection) -> list[str]:
    """How the collection's index differs from its settings (empty: up to date)."""
    built = _built_configs(collection)
    reasons = []
    for key, wanted in build_config(collection).items():
        other = sorted({c[key] for c in built if c and c.get(key) != wanted}, key=str)
        if other:
            shown = "/".join(str(v) for v in other)
            reasons.append(
                gettext("%(key)s %(shown)s in the index, %(wanted)s in the settings")
                % {"key": key, "shown": shown, "wanted": wanted}
            )
    if unknown := sum(1 for c in built if not c):
        reasons.append(
            gettext("%(count)d source(s) indexed before settings were recorded")
            % {"count": unknown}
        )
    # Only sources the index holds in an older version: one that failed and was
    # never indexed is in no index (re-indexing would fail it again; the source
    # list shows it failed, with the reason).
    failed = collection.sources.filter(
        status=Source.Status.FAILED, indexed_version__isnull=False
    )
    if count := failed.count():
        reasons.append(
            gettext(
                "%(count)d source(s) failed their last indexing, %(count)d searched "
                "in their previous version"
            )
            % {"count": count}
        )
    return reasons


def index_state(collection: Collection) -> str:
    """The index against the settings, in words (the collection admin shows it)."""
    reasons = index_differences(collection)
    if not reasons:
        return gettext("up to date")
    return gettext("out of date (%(reasons)s): re-index") % {
        "reasons": "; ".join(reasons)
    }


def _built_configs(collection: Collection) -> list[dict[str, Any] | None]:
    indexed = collection.sources.filter(indexed_version__isnull=False)
    return list(indexed.values_list("stats__config", flat=True))


def policy_for(collection: Collection) -> Policy:
    return Policy.build(collection.metadata_policy, free_keys(collection))


def free_keys(collection: Collection) -> list[str]:
    """Metadata keys editors added to the collection's sources (not built-in)."""
    from kb.metadata import BUILTIN_FIELDS

    # One query for the distinct keys, instead of reading every source's JSON.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT jsonb_object_keys(metadata) FROM kb_source "
            "WHERE collection_id = %s AND jsonb_typeof(metadata) = 'object'",
            [collection.pk],
        )
        keys = {row[0] for row in cursor.fetchall()}
    return sorted(keys - set(BUILTIN_FIELDS))
