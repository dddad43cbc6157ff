"""The indexing job: a stored source version in, searchable sections and chunks out.

kb.uploads stores the file in the request (or the shell) and queues the job.
`ingest` runs in a worker: read (HTML, DOCX, PDF -> Markdown) and parse under
a time limit (KB_PARSE_TIMEOUT, `run_limited`, which the upload checks use
too), chunk, build each chunk's embedded text from the metadata policy, check
it against the window, embed, then publish the new version in one
transaction. A failure leaves the previous version searchable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import PurePosixPath
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext, ngettext

from kb import (
    chunking,
    dates,
    embedding,
    embedding_reuse,
    exact_tokens,
    golden,
    languages,
    limits,
    parsing,
    readers,
    unit_vectors,
)
from kb.index_config import build_config, policy_for
from kb.metadata import Policy, chunk_values
from kb.models import (
    EMBEDDING_DIM,
    Chunk,
    Collection,
    OverflowRejection,
    Section,
    Source,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Chunks embedded between two progress updates (embed() batches them by
# settings.KB_EMBED_BATCH).
PROGRESS_EVERY = 32
TITLE_CHARS = 300  # Source.title's length; a longer first heading is cut here
MIN_CONTENT_TOKENS = 48  # never shrink a chunk budget below this for a prefix


class IngestionError(Exception):
    pass


class ParseTimeout(IngestionError):
    """Reading and parsing a file ran over KB_PARSE_TIMEOUT."""


class StaleJob(Exception):
    """A newer edit of the source was queued; its own job will index it."""


# --- preparing chunks (no writes) ----------------------------------------------


@dataclass
class PreparedChunk:
    data: chunking.ChunkData
    embedded_text: str
    token_count: int
    content_tokens: int
    metadata: dict[str, Any]


@dataclass
class Prepared:
    document: parsing.Document
    chunks: list[PreparedChunk]
    rejections: list[PreparedChunk]
    window: int
    # The collection's model: it counts and embeds the chunks (issue #27).
    embedder: embedding.Embedder
    word_fallbacks: int = 0
    blocks: int = 0
    headings_shortened: int = 0  # chunks whose prefix cut a long heading
    reused: int = 0  # chunks that took a stored chunk's vectors (_embed)
    timings: dict[str, float] = field(default_factory=dict)
    language: str = ""  # the document's, detected (ISO 639-1)
    # Each section's text-search configuration (kb.languages), by section index.
    configs: list[str] = field(default_factory=list)


def values_of(
    title: str, file_name: str, metadata: dict, text: str
) -> Callable[[str, int, int, int], dict]:
    """A document's chunks' metadata values (kb.metadata.chunk_values) by
    heading path, section index, chunk index and total; the date found in the
    document (kb.dates.document_date) read once."""
    found_date = dates.document_date(text, title, file_name)

    def values(heading_path: str, section: int, index: int, total: int) -> dict:
        return chunk_values(
            title=title,
            file_name=file_name,
            source_metadata=metadata,
            heading_path=heading_path,
            section_id=section,
            chunk_index=index,
            total_chunks=total,
            found_date=found_date,
        )

    return values


def prefix_room(
    document: parsing.Document,
    embedder: embedding.Embedder,
    policy: Policy,
    values: Callable[[str, int, int, int], dict],
    max_tokens: int,
) -> dict[int, int]:
    """Tokens each section's metadata prefix takes (its heading path differs),
    by section index, leaving at least MIN_CONTENT_TOKENS of `max_tokens` for
    the text. `values(heading_path, section, chunk index, total)`: a chunk's
    metadata values (kb.metadata.chunk_values)."""
    return {
        s.index: min(
            embedder.count_text_tokens(
                policy.prefix(values(s.heading_path, s.index, 0, 0))
            ),
            max_tokens - MIN_CONTENT_TOKENS,
        )
        for s in document.sections
    }


def prepare(
    source: Source,
    collection: Collection,
    policy: Policy,
    document: parsing.Document | None = None,
) -> Prepared:
    """Parse (unless `document` is given) and chunk `source.text`; build and
    measure every embedded text, in the collection's model's tokens (its passage
    prompt included)."""
    embedder = embedding.for_collection(collection)
    started = time.perf_counter()
    if document is None:
        document = parsing.parse(source.text, source.file_name, title=source.title)
    parsed = time.perf_counter()
    values = values_of(source.title, source.file_name, source.metadata, source.text)
    if collection.chunk_strategy == Collection.Strategy.FIXED:
        max_tokens = collection.chunk_tokens  # may exceed the window: evaluation only
        per_section = None
    else:
        max_tokens = min(collection.chunk_tokens, embedder.window)
        per_section = prefix_room(document, embedder, policy, values, max_tokens)
    result = chunking.chunk_document(
        document,
        source.text,
        count_tokens=embedder.count_passage_tokens,
        max_tokens=max_tokens,
        overlap=collection.chunk_overlap,
        strategy=collection.chunk_strategy,
        section_prefix_tokens=per_section,
    )
    chunked = time.perf_counter()
    language = languages.document_language(source.text)
    sections = [source.text[s.start : s.end] for s in document.sections]
    configs = [
        languages.config_for(code)
        for code in languages.section_languages(
            sections, language, override=source.language
        )
    ]
    detected = time.perf_counter()
    total = len(result.chunks)
    _check_chunk_count(source.file_name, total)
    prepared = Prepared(document, [], [], embedder.window, embedder)
    prepared.language, prepared.configs = language, configs
    prepared.word_fallbacks = sum(1 for c in result.chunks if c.is_fallback)
    prepared.blocks = sum(len(s.blocks) for s in document.sections)
    for data in result.chunks:
        vals = values(data.heading_path, data.section_index, data.chunk_index, total)
        prefix = policy.prefix(vals)
        prepared.headings_shortened += policy.shortens_heading(vals)
        embedded = prefix + data.embed_text
        count = embedder.count_passage_tokens(embedded) if prefix else data.token_count
        item = PreparedChunk(
            data, embedded, count, data.token_count, policy.retrieved(vals)
        )
        prepared.chunks.append(item)
        if count > embedder.window and collection.chunk_strategy != "fixed":
            prepared.rejections.append(item)
    prepared.timings = {
        "parse_s": parsed - started,
        "chunk_s": chunked - parsed,
        "language_s": detected - chunked,
    }
    return prepared


def _check_chunk_count(name: str, total: int) -> None:
    """Refuse a source over KB_MAX_CHUNKS_PER_SOURCE before embedding it: one
    such file would hold its worker for the better part of an hour."""
    cap = settings.KB_MAX_CHUNKS_PER_SOURCE
    if cap > 0 and total > cap:
        raise IngestionError(
            gettext(
                "%(file)s makes %(total)s chunks, over the limit of %(cap)s per "
                "source (KB_MAX_CHUNKS_PER_SOURCE): split it into smaller files; "
                "the previous version stays live"
            )
            % {
                "file": name,
                "total": number_format(total, force_grouping=True),
                "cap": number_format(cap, force_grouping=True),
            }
        )


# --- the job ---------------------------------------------------------------------


def ingest(source_id: int, version: int | None = None) -> str:
    """Index one version of a source; return a one-line outcome.

    Jobs for one source take a PostgreSQL advisory lock so they never interleave; a
    job whose version was superseded while it waited stands down, and a job of
    the version already indexed does nothing. Without `version` (a call from
    code, not a job), the current version is indexed again whatever its state.
    """
    with _source_lock(source_id):
        source = Source.objects.select_related("collection").get(pk=source_id)
        job = version is not None  # a queued job names its version
        version = version or source.version
        if source.version != version:
            return f"skipped: version {version} superseded by {source.version}"
        if job and source.indexed_version == version:
            # The same job again (a queue restored from an older snapshot runs
            # finished jobs again, issue #26): its work is done.
            return f"skipped: version {version} is already indexed"
        started = time.perf_counter()
        retried = source.progress.get("retried") == version
        _set_progress(source, Source.Status.INDEXING, stage="parsing")
        try:
            return _ingest(source, version, started)
        except StaleJob as exc:
            return f"skipped: {exc}"
        except ParseTimeout as exc:
            if retried or settings.KB_PARSE_RETRY_SECONDS <= 0:
                _fail(source, version, str(exc))
            else:
                _fail_to_retry(source, version, str(exc))
            raise
        except Exception as exc:
            if not isinstance(exc, FORESEEN):
                logger.exception("ingestion of source %s failed", source_id)
            _fail(source, version, failure_message(source.file_name, exc))
            raise


# errors whose message says what is wrong with the file or the model
FORESEEN = (parsing.ParseError, IngestionError, embedding.EmbeddingError)


def failure_message(name: str, exc: Exception) -> str:
    """What a source shows for the error that failed its indexing: the message
    of a foreseen one; for an error no check foresaw, a sentence, not the
    library's words (a tokenizer's "TextEncodeInput must be Union[...]"), which
    go to the worker's log with the traceback (issue #26)."""
    if isinstance(exc, FORESEEN):
        return str(exc)
    return gettext(
        "%(file)s: indexing stopped on an internal error (%(error)s; the "
        "worker's log has the details); the previous version stays live. Retry, "
        "or report it with the file"
    ) % {"file": name, "error": type(exc).__name__}


def _ingest(source: Source, version: int, started: float) -> str:
    collection = source.collection
    reading, document = read_source(source)
    read = time.perf_counter()
    prepared = prepare(source, collection, policy_for(collection), document)
    prepared.timings["parse_s"] = read - started  # reading the file included
    if not prepared.chunks:  # indexed, it would be found by no question
        raise parsing.ParseError(_nothing_to_index(source.file_name, document))
    if prepared.rejections:
        _record_rejections(source, prepared)
        first = prepared.rejections[0]
        raise IngestionError(
            ngettext(
                "%(count)d chunk exceeds the embedding window; first: chunk "
                "%(chunk)d in '%(path)s' has %(tokens)d tokens, the model reads "
                "%(window)d",
                "%(count)d chunks exceed the embedding window; first: chunk "
                "%(chunk)d in '%(path)s' has %(tokens)d tokens, the model reads "
                "%(window)d",
                len(prepared.rejections),
            )
            % {
                "count": len(prepared.rejections),
                "chunk": first.data.chunk_index,
                "path": first.data.heading_path,
                "tokens": first.token_count,
                "window": prepared.window,
            }
        )
    vectors, units, keys = _embed(source, version, prepared)
    # Storing a large source takes a while (35,022 chunks: 90 s): say so, rather
    # than "embedding 35022 of 35022" until it is done.
    storing = {
        "stage": "storing",
        "blocks": prepared.blocks,
        "chunks_total": len(prepared.chunks),
    }
    if not Source.objects.filter(pk=source.pk, version=version).update(
        progress=storing
    ):
        raise StaleJob(f"version {version} deleted or superseded while embedded")
    duration = time.perf_counter() - started
    stats = {**statistics(prepared, duration), "config": build_config(collection)}
    publish(source, version, prepared, (vectors, units, keys), stats, reading)
    return f"indexed {source.file_name}: {len(prepared.chunks)} chunks"


def _nothing_to_index(name: str, document: parsing.Document) -> str:
    """Why a parsed source yields no chunk: headings alone make no passage."""
    if not any(section.blocks for section in document.sections):
        return gettext("%(file)s has no text to index besides its headings") % {
            "file": name
        }
    return gettext("%(file)s has no text to index") % {"file": name}


def read_source(source: Source) -> tuple[readers.Reading | None, parsing.Document]:
    """Read the source's file (HTML, DOCX, PDF) to Markdown and parse its text,
    in a child process killed after KB_PARSE_TIMEOUT seconds (and limited to
    KB_PARSE_MEMORY_MB more megabytes of memory); `source.text` and an automatic
    title are updated in memory (`publish` stores them with the new version)."""
    name = source.file_name
    data = _original(source) if readers.format_of(name) else b""
    args = (name, data, source.text, source.title, source.is_title_auto)
    reading, text, title, document = run_limited(
        read_and_parse,
        *args,
        name=name,
        doing="reading and parsing",
        outcome=gettext("the previous version stays live"),
    )
    source.text, source.title = text, title
    return reading, document


def run_limited(
    function: Callable[..., T], *args: Any, name: str, doing: str, outcome: str
) -> T:
    """`function(*args)` in a child process killed after KB_PARSE_TIMEOUT seconds
    and limited to KB_PARSE_MEMORY_MB more megabytes of memory (kb/limits.py), or
    here when both are 0. Over a limit, ParseTimeout or IngestionError: "<name>:
    <doing> took longer than the limit of ...; <outcome>"."""
    seconds, memory = settings.KB_PARSE_TIMEOUT, settings.KB_PARSE_MEMORY_MB
    if seconds <= 0 and memory <= 0:
        return function(*args)
    readers.preload()  # imported once here, not in every child
    try:
        return limits.run(function, *args, seconds=seconds, memory_mb=memory)
    except limits.TimeLimitExceeded as exc:
        raise ParseTimeout(
            gettext(
                "%(file)s: %(doing)s took longer than the limit of %(seconds)s s "
                "(KB_PARSE_TIMEOUT); %(outcome)s"
            )
            % {
                "file": name,
                "doing": doing,
                "seconds": f"{seconds:g}",
                "outcome": outcome,
            }
        ) from exc
    except limits.MemoryLimitExceeded as exc:
        raise IngestionError(
            gettext(
                "%(file)s: %(doing)s needed more memory than the limit of "
                "%(memory)d MB (KB_PARSE_MEMORY_MB); %(outcome)s"
            )
            % {"file": name, "doing": doing, "memory": memory, "outcome": outcome}
        ) from exc
    except limits.ChildDied as exc:
        raise IngestionError(
            gettext("%(file)s: %(doing)s stopped: its process was %(how)s")
            % {"file": name, "doing": doing, "how": exc}
            + (f" (over KB_PARSE_MEMORY_MB={memory}?)" if memory > 0 else "")
            + f"; {outcome}"
        ) from exc


def read_and_parse(
    name: str, data: bytes, text: str, title: str, auto_title: bool
) -> tuple[readers.Reading | None, str, str, parsing.Document]:
    """The reading, text, title and parsed document of a source (no ORM: this
    runs in a child process)."""
    reading = None
    if readers.format_of(name):
        reading = readers.read(name, data)
        text = reading.text
    structure = reading.structure if reading else None
    if auto_title:
        title = _title_from(text, name, structure)
    try:
        document = parsing.parse(text, name, title=title, structure=structure)
    except parsing.ParseError as exc:
        raise parsing.ParseError(_naming(str(exc), title, name)) from exc
    return reading, text, title, document


def _title_from(
    text: str, file_name: str, structure: list[parsing.Mark] | None = None
) -> str:
    """Front matter title, else a leading level-1 heading, else the file name."""
    title = ""
    markdown = (".md", ".markdown", *parsing.CONVERTED_EXTENSIONS)
    if PurePosixPath(file_name).suffix.lower() in markdown:
        title = parsing.markdown_title(text, structure)
    title = " ".join((title or parsing.title_from_filename(file_name)).split())
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"


def _naming(message: str, title: str, name: str) -> str:
    """A parser's message ("<title> is empty") naming the file instead."""
    if name in message:
        return message
    if title and message.startswith(title):
        return name + message[len(title) :]
    return f"{name}: {message}"


def _original(source: Source) -> bytes:
    if not source.file:
        raise IngestionError(
            gettext("%(file)s: the uploaded file is missing")
            % {"file": source.file_name}
        )
    with source.file.open("rb") as stored:
        return stored.read()


def _embed(source: Source, version: int, prepared: Prepared):
    """The chunks' vectors and their units' (kb.unit_vectors, packed), and
    their keys (kb.embedding_reuse): a chunk whose key a stored chunk has
    takes its vectors, the others are embedded batch by batch. A source
    deleted, or given a newer version, meanwhile stops the job at the next
    batch (StaleJob) instead of keeping the worker busy with text nobody will
    search."""
    import numpy as np

    chunks = prepared.chunks
    total = len(chunks)
    truncate = source.collection.chunk_strategy == "fixed"
    embedder = prepared.embedder
    parts = [_unit_parts(c) for c in chunks]
    keys = [
        embedding_reuse.key(
            embedder.model_name,
            embedder.precision,
            truncate,
            c.embedded_text,
            read,
            [(u[0] - c.data.start, u[1] - c.data.start) for u in c.data.units],
        )
        for c, read in zip(chunks, parts, strict=True)
    ]
    found = embedding_reuse.stored(keys) if embedding_reuse.enabled() else {}
    vectors: list = [None] * total
    units: list = [None] * total
    for i, chunk in enumerate(chunks):
        if (kept := found.get(keys[i])) is not None:
            vectors[i] = kept.vector
            units[i] = embedding_reuse.units_at(kept, chunk.data.start)
    todo = [i for i in range(total) if vectors[i] is None]
    prepared.reused = total - len(todo)
    for start in range(0, len(todo), PROGRESS_EVERY):
        batch = todo[start : start + PROGRESS_EVERY]
        vectors_found, unit_rows = embedder.embed_passages_with_parts(
            [chunks[i].embedded_text for i in batch],
            [parts[i] for i in batch],
            origins=[
                f"chunk {chunks[i].data.chunk_index} of '{source.title}' "
                f"({chunks[i].data.heading_path})"
                for i in batch
            ],
            truncate=truncate,
        )
        for i, vector, rows in zip(batch, vectors_found, unit_rows, strict=True):
            vectors[i] = vector
            units[i] = unit_vectors.pack([u[:2] for u in chunks[i].data.units], rows)
        progress = {
            "stage": "embedding",
            "blocks": prepared.blocks,
            "chunks_embedded": prepared.reused + start + len(batch),
            "chunks_total": total,
        }
        if not Source.objects.filter(pk=source.pk, version=version).update(
            progress=progress
        ):
            raise StaleJob(f"version {version} deleted or superseded while embedded")
    if not chunks:
        return np.zeros((0, EMBEDDING_DIM), dtype="float32"), [], []
    return np.stack(vectors).astype("float32", copy=False), units, keys


def _unit_parts(chunk: PreparedChunk) -> list[tuple[int, int]]:
    """Where each of the chunk's units is read in its embedded text (after the
    metadata prefix)."""
    shift = len(chunk.embedded_text) - len(chunk.data.embed_text)
    return [(lo + shift, hi + shift) for _, _, lo, hi in chunk.data.units]


def statistics(prepared: Prepared, duration: float) -> dict[str, Any]:
    counts = sorted(c.token_count for c in prepared.chunks)
    window = prepared.window
    return {
        "sections": len(prepared.document.sections),
        "chunks": len(counts),
        "blocks": prepared.blocks,
        **chunking.length_figures(counts),
        "token_counts": counts,
        "window": window,
        "truncated": sum(1 for c in counts if c > window),
        # Issue #26: a heading over metadata.HEADING_CHARS is cut with "…" in the
        # embedded prefix (the chunk's own text never is).
        "headings_shortened": prepared.headings_shortened,
        "word_fallbacks": prepared.word_fallbacks,
        "word_fallback_share": prepared.word_fallbacks / len(counts) if counts else 0,
        "chunks_embedded": len(counts) - prepared.reused,
        "chunks_reused": prepared.reused,
        "duration_s": round(duration, 3),
        **{k: round(v, 4) for k, v in prepared.timings.items()},
    }


def publish(source, version, prepared: Prepared, embedded, stats, reading=None):
    """Replace the source's sections and chunks, and its text as read, in one
    transaction; `embedded`: the chunks' vectors, their units' and their keys
    (_embed)."""
    vectors, units, keys = embedded
    with transaction.atomic():
        current = Source.objects.select_for_update().get(pk=source.pk)
        if current.version != version:
            raise StaleJob(f"version {version} superseded by {current.version}")
        current.text, current.title = source.text, source.title
        summary = {**reading.summary, "warnings": reading.warnings} if reading else {}
        Source.objects.filter(pk=current.pk).update(
            text=current.text,
            title=current.title,
            reader_summary=summary,
            page_map=[list(p) for p in reading.pages or ()] if reading else [],
            detected_language=prepared.language,
        )
        Chunk.objects.filter(source=current).delete()
        Section.objects.filter(source=current).delete()
        sections = _create_sections(current, prepared, reading)
        leads = _leads(current.text, [c.data for c in prepared.chunks])
        Chunk.objects.bulk_create(
            [
                Chunk(
                    source=current,
                    section=sections[c.data.section_index],
                    chunk_index=c.data.chunk_index,
                    kind=c.data.kind,
                    start=c.data.start,
                    end=c.data.end,
                    text=c.data.text,
                    lead=lead,
                    embedded_text=c.embedded_text,
                    token_count=c.token_count,
                    text_tokens=prepared.embedder.count_text_tokens(c.data.text),
                    is_fallback=c.data.is_fallback,
                    metadata=c.metadata,
                    embedding=vector,
                    unit_offsets=offsets,
                    unit_vectors=unit_rows,
                    language=prepared.configs[c.data.section_index],
                    exact_tokens=exact_tokens.lexemes(c.embedded_text),
                    embedding_key=key,
                )
                for c, vector, lead, (offsets, unit_rows), key in zip(
                    prepared.chunks, vectors, leads, units, keys, strict=True
                )
            ],
            batch_size=500,
        )
        _set_section_vectors(sections, prepared, vectors)
        # With the new text searchable, golden spans follow it (or are flagged).
        spans = golden.reanchor_spans(current)
        if spans["moved"] or spans["stale"]:
            logger.info(
                "%s: golden spans moved %d, stale %d",
                current.file_name,
                spans["moved"],
                spans["stale"],
            )
        current.rejections.all().delete()
        Source.objects.filter(pk=current.pk).update(
            status=Source.Status.INDEXED,
            error="",
            indexed_version=version,
            indexed=timezone.now(),
            stats=stats,
            progress={
                "stage": "done",
                "chunks_embedded": stats["chunks"],
                "chunks_total": stats["chunks"],
                "blocks": stats["blocks"],
            },
        )


def _leads(text: str, chunks) -> list[str]:
    """For each chunk, the text between the previous chunk's end and its start."""
    leads, end = [], 0
    for chunk in chunks:
        leads.append(text[end : chunk.start] if chunk.start > end else "")
        end = max(end, chunk.end)
    return leads


ANCHOR_CHARS = 255  # Section.anchor's length; a longer id is cut, not refused


def _create_sections(source: Source, prepared: Prepared, reading=None) -> list[Section]:
    document, count = prepared.document, prepared.embedder.count_text_tokens
    text = source.text
    # Bodies tile the document: each runs to the next section's start.
    ends = [s.start for s in document.sections[1:]] + [len(text)]
    pages = [
        (reading.pages_of(s.start, s.end) if reading else None) or (None, None)
        for s in document.sections
    ]
    # A heading's id in the original HTML, where its section starts.
    anchors = dict(reading.anchors) if reading else {}
    rows = Section.objects.bulk_create(
        [
            Section(
                source=source,
                heading=s.heading,
                heading_path=s.heading_path,
                level=s.level,
                order=i,
                start=s.start,
                end=s.end,
                body=text[s.start : ends[i]],
                tokens=count(text[s.start : s.end]),
                page_start=pages[i][0],
                page_end=pages[i][1],
                anchor=anchors.get(s.start, "")[:ANCHOR_CHARS],
            )
            for i, s in enumerate(document.sections)
        ]
    )
    for row, s in zip(rows, document.sections, strict=True):
        if s.parent is not None:
            row.parent = rows[s.parent]
    Section.objects.bulk_update(
        [r for r in rows if r.parent_id or r.parent], ["parent"]
    )
    return rows


def _set_section_vectors(sections: list[Section], prepared: Prepared, vectors) -> None:
    import numpy as np

    members: dict[int, list[int]] = {}
    for i, c in enumerate(prepared.chunks):
        members.setdefault(c.data.section_index, []).append(i)
    changed = []
    for index, rows in members.items():
        mean = np.asarray(vectors)[rows].mean(axis=0)
        norm = float(np.linalg.norm(mean))
        if norm > 0:
            sections[index].embedding = mean / norm
            changed.append(sections[index])
    Section.objects.bulk_update(changed, ["embedding"], batch_size=500)


def _record_rejections(source: Source, prepared: Prepared) -> None:
    with transaction.atomic():
        source.rejections.all().delete()
        OverflowRejection.objects.bulk_create(
            OverflowRejection(
                source=source,
                heading_path=c.data.heading_path,
                section_order=c.data.section_index,
                chunk_index=c.data.chunk_index,
                token_count=c.token_count,
                content_tokens=c.content_tokens,
                window=prepared.window,
                text=c.embedded_text,
            )
            for c in prepared.rejections
        )


def _fail(source: Source, version: int, message: str) -> None:
    # Only the newest version's failure is shown; the previous index stays live.
    Source.objects.filter(pk=source.pk, version=version).update(
        status=Source.Status.FAILED, error=message[:5000]
    )


def _fail_to_retry(source: Source, version: int, message: str) -> None:
    """A parse over the time limit may be the machine's load, not the file's
    (issue #26): the version fails for now, and is tried once more
    KB_PARSE_RETRY_SECONDS later (retry_timed_out)."""
    delay = settings.KB_PARSE_RETRY_SECONDS
    when = timezone.now() + timedelta(seconds=delay)
    minutes = max(1, round(delay / 60))
    Source.objects.filter(pk=source.pk, version=version).update(
        status=Source.Status.FAILED,
        error=message[:4900]
        + ngettext(
            "; it will be tried once more in about %(minutes)d minute, in case "
            "the machine was busy",
            "; it will be tried once more in about %(minutes)d minutes, in case "
            "the machine was busy",
            minutes,
        )
        % {"minutes": minutes},
        progress={"retry_at": when.isoformat(), "retry_version": version},
    )


def retry_timed_out() -> int:
    """Queue once more each source whose parse ran over the time limit and whose
    retry is due (a worker looks every KB_WORKER_TTL / 2 seconds); how many."""
    from kb import queueing

    due = Source.objects.filter(
        status=Source.Status.FAILED,
        progress__retry_at__lte=timezone.now().isoformat(),
    )
    count = 0
    for source in due:
        if source.progress.get("retry_version") != source.version:
            continue
        with transaction.atomic():
            claimed = Source.objects.filter(
                pk=source.pk, version=source.version, status=Source.Status.FAILED
            ).update(
                status=Source.Status.QUEUED,
                progress={"stage": "queued", "retried": source.version},
            )
            if claimed:
                queueing.enqueue_retry(source)
                count += claimed
    return count


def _set_progress(source: Source, status: str | None, **progress: Any) -> None:
    fields: dict[str, Any] = {"progress": progress}
    if status:
        fields["status"] = status
    Source.objects.filter(pk=source.pk).update(**fields)


class _source_lock:
    """Session-level advisory lock on the source id (held across transactions)."""

    KEY = 0x6B62  # "kb": namespaces our advisory locks

    def __init__(self, source_id: int) -> None:
        self.source_id = source_id

    def __enter__(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_lock(%s, %s)", [self.KEY, self.source_id]
            )

    def __exit__(self, *exc: object) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_unlock(%s, %s)", [self.KEY, self.source_id]
            )
