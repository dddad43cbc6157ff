"""Collections of sources, their sections and embedded chunks, golden cases, runs."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.conf.locale import LANG_INFO
from django.contrib.auth.models import Group
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models, transaction
from django.db.models import Count, Value
from django.db.models.functions import Coalesce, NullIf
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from pgvector.django import HnswIndex, VectorField

from kb import chunking, embedding_models, languages

EMBEDDING_DIM = 384
LANGUAGE_CHOICES = [
    # Named in Django's own catalogs ("French": "français")
    (code, _(LANG_INFO.get(code, {}).get("name", "Chinese")))  # noqa: INT001
    for code in languages.CANDIDATES
]


class RegConfigField(models.CharField):
    """A PostgreSQL text-search configuration's name, stored as `regconfig`: a
    generated column may then call to_tsvector with it (issue #27)."""

    def db_type(self, connection) -> str:
        return "regconfig"


@RegConfigField.register_lookup
class RegConfigExact(models.lookups.Exact):
    """`language="french"`: the name read as a configuration (regconfig has no
    operator of its own, and compared as an oid "french" is no number)."""

    def process_rhs(self, compiler, connection):
        sql, params = super().process_rhs(compiler, connection)
        return f"({sql})::regconfig", params


HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64


def cosine_hnsw(name: str, condition: models.Q | None = None) -> HnswIndex:
    """An HNSW index for nearest-by-cosine searches over `embedding`."""
    return HnswIndex(
        name=name,
        fields=["embedding"],
        opclasses=["vector_cosine_ops"],
        m=HNSW_M,
        ef_construction=HNSW_EF_CONSTRUCTION,
        condition=condition,
    )


# One HNSW graph per embedding model (issue #27): vectors of two models are in
# two spaces, and in one graph a search for one model's vectors wandered through
# the other's. With 110,000 multilingual-e5-small chunks beside it, an English
# collection of 102,250 MiniLM chunks got no rows at all for 27 of 101 questions
# (the scan ended at hnsw.max_scan_tuples, 90-106 ms each). The built-in models
# have a graph each; the models of KB_EXTRA_MODELS share a third.
BUILT_IN_MODELS = (embedding_models.DEFAULT, embedding_models.E5_SMALL)


def model_hnsw(table: str) -> list[HnswIndex]:
    """The HNSW indexes of `table` ("chunk" or "section"), one per model; the
    query names its model (retrieval.search), so the planner takes its graph."""
    return [
        cosine_hnsw(
            f"{table}_embedding_hnsw", models.Q(embedding_model=BUILT_IN_MODELS[0])
        ),
        cosine_hnsw(
            f"{table}_e5_embedding_hnsw", models.Q(embedding_model=BUILT_IN_MODELS[1])
        ),
        cosine_hnsw(
            f"{table}_other_embedding_hnsw",
            ~models.Q(embedding_model__in=BUILT_IN_MODELS),
        ),
    ]


class CollectionQuerySet(models.QuerySet):
    def open_to(self, user) -> CollectionQuerySet:
        """Collections a user may see, in the admin too (staff only; restricted
        ones: their groups; superusers: all). A scratch copy is open to whoever
        may see its live collection, as that one's groups are now (issue #26);
        one of no live collection (kb_eval, benchmarks) to superusers only."""
        if not (user.is_authenticated and user.is_active and user.is_staff):
            return self.none()
        if user.is_superuser:
            return self.all()
        live = Collection.objects.filter(is_scratch=False).filter(
            models.Q(groups__isnull=True) | models.Q(groups__in=user.groups.all())
        )
        live = live.values("pk")
        return self.filter(
            models.Q(is_scratch=False, pk__in=live)
            | models.Q(is_scratch=True, live__in=live)
        )

    def visible_to(self, user) -> CollectionQuerySet:
        """Collections a user may ask in (and pick in forms): open, not scratch."""
        return self.filter(is_scratch=False).open_to(user)


class Collection(models.Model):
    """A knowledge base: its sources share chunking, retrieval and metadata settings."""

    class Strategy(models.TextChoices):
        STRUCTURE = "structure", _("Structure-first")
        FIXED = "fixed", _("Fixed-size baseline (evaluation only)")

    class Retrieval(models.TextChoices):
        HYBRID = "hybrid", _("Hybrid (vector + keyword)")
        VECTOR = "vector", _("Vector only")
        KEYWORD = "keyword", _("Keyword only")

    name = models.CharField(_("name"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)
    chunk_strategy = models.CharField(
        _("chunk strategy"),
        max_length=20,
        choices=Strategy.choices,
        default=Strategy.STRUCTURE,
    )
    chunk_tokens = models.PositiveIntegerField(
        _("chunk tokens"),
        default=chunking.DEFAULT_MAX_TOKENS,
        help_text=_("Chunk budget in the embedding model's tokens."),
    )
    chunk_overlap = models.PositiveIntegerField(
        _("chunk overlap"),
        default=chunking.DEFAULT_OVERLAP,
        help_text=_("Tokens repeated from the previous chunk."),
    )
    top_k = models.PositiveIntegerField(
        _("top k"), default=5, help_text=_("Sections handed to the answerer.")
    )
    context_budget = models.PositiveIntegerField(
        _("context budget"),
        default=1200,
        help_text=_("Context tokens handed to the answerer."),
    )
    retrieval_mode = models.CharField(
        _("retrieval mode"),
        max_length=10,
        choices=Retrieval.choices,
        default=Retrieval.HYBRID,
    )
    # A name of kb/embedding_models.py; a change is built as a shadow index.
    embedding_model = models.CharField(
        _("embedding model"),
        max_length=100,
        choices=embedding_models.choices,
        default=embedding_models.DEFAULT,
        help_text=_("The model that embeds its sources and questions."),
    )
    # {field name: "embed" | "retrieve" | "ignore"}; see kb/metadata.py
    metadata_policy = models.JSONField(_("metadata policy"), default=dict, blank=True)
    is_scratch = models.BooleanField(
        _("is scratch"),
        default=False,
        help_text=_("Built by an evaluation; not shown to staff."),
    )
    # The collection a scratch copy was made from: its groups decide who may
    # see the copy (CollectionQuerySet.open_to), and the copy goes with it.
    live = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="scratch_copies",
    )
    recall_floor = models.FloatField(
        _("recall floor"),
        null=True,
        blank=True,
        help_text=_("Set from a run; only ever raised."),
    )
    floor_run = models.ForeignKey(
        "EvalRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The share of cases whose extractive answer quotes every required span, set
    # from the same run as the recall floor (issue #28).
    answer_floor = models.FloatField(
        _("answer floor"),
        null=True,
        blank=True,
        help_text=_(
            "The share of cases whose answer quotes every required span; set from "
            "a run with the recall floor."
        ),
    )

    class FloorOn(models.TextChoices):
        RETRIEVAL = "retrieval", _("retrieval (recall@k)")
        ANSWER = "answer", _("the answer (cases quoting every span)")
        BOTH = "both", _("both")

    floor_on = models.CharField(
        _("floor applies to"),
        max_length=10,
        choices=FloorOn.choices,
        default=FloorOn.RETRIEVAL,
        db_default=FloorOn.RETRIEVAL,
        help_text=_(
            "What a run of the live configuration and a shadow index must not fall "
            "below: retrieval recall@k, the share of answers quoting every required "
            "span, or both."
        ),
    )
    groups = models.ManyToManyField(
        Group,
        blank=True,
        related_name="collections",
        help_text=_("Only these groups may ask in it; empty means all staff."),
        verbose_name=_("groups"),
    )
    created = models.DateTimeField(_("created"), default=timezone.now)
    # When the keyword statistics (Term rows) were last counted, and over how many
    # chunks; see kb/retrieval/keywords.py.
    terms_counted = models.DateTimeField(_("terms counted"), null=True, blank=True)
    terms_chunks = models.PositiveIntegerField(_("terms chunks"), default=0)
    # Chunks per text-search configuration at that count ({"french": 120, ...}):
    # the languages a question is analysed in, and BM25's N in each.
    terms_languages = models.JSONField(
        _("terms languages"), default=dict, blank=True, editable=False
    )
    # The shared HNSW index's recall against exact search for this collection, on
    # a sample of its own chunk vectors, measured after every publish once it is
    # past KB_EXACT_SEARCH_CHUNKS (None: not needed or not yet measured); below
    # KB_HNSW_MIN_RECALL it is searched exactly (kb/retrieval/hnsw_recall.py, #26).
    hnsw_recall = models.FloatField(
        _("hnsw recall"), null=True, blank=True, editable=False
    )
    hnsw_recall_measured = models.DateTimeField(
        _("hnsw recall measured"), null=True, blank=True, editable=False
    )

    # The settings that decide retrieval quality: recorded with every evaluation run.
    CONFIG_FIELDS = [
        "chunk_strategy",
        "chunk_tokens",
        "chunk_overlap",
        "top_k",
        "context_budget",
        "retrieval_mode",
        "embedding_model",
    ]

    objects = CollectionQuerySet.as_manager()

    class Meta:
        verbose_name = _("collection")
        verbose_name_plural = _("collections")

    def __str__(self) -> str:
        return self.name

    def source_languages(self) -> dict[str, int]:
        """{language: sources} over its sources: the editor's choice,
        else the language the worker detected ("" while not yet read)."""
        chosen = Coalesce(NullIf("language", Value("")), "detected_language")
        rows = (
            self.sources.annotate(read_in=chosen)
            .values("read_in")
            .annotate(n=Count("pk"))
            .order_by()
        )
        return {row["read_in"]: row["n"] for row in rows}

    def is_visible_to(self, user) -> bool:
        return Collection.objects.visible_to(user).filter(pk=self.pk).exists()


class Source(models.Model):
    """An uploaded document and the outcome of its last ingestion."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        QUEUED = "queued", _("Queued")
        INDEXING = "indexing", _("Indexing")
        INDEXED = "indexed", _("Indexed")
        FAILED = "failed", _("Failed")

    # Statuses with an ingestion job queued or running (pages refresh, workers
    # check that the job still exists).
    ACTIVE = (Status.QUEUED, Status.INDEXING)

    collection = models.ForeignKey(
        Collection,
        on_delete=models.CASCADE,
        related_name="sources",
        verbose_name=_("collection"),
    )
    title = models.CharField(_("title"), max_length=300)
    # Taken from the document (its front matter or first heading) by the worker,
    # rather than given by an editor.
    is_title_auto = models.BooleanField(_("is title auto"), default=False)
    file = models.FileField(_("file"), upload_to="sources/%Y/%m/", blank=True)
    file_name = models.CharField(
        _("file name"),
        max_length=500,
        help_text=_("Path relative to the uploaded folder or corpus."),
    )
    text = models.TextField(_("text"), blank=True)
    content_hash = models.CharField(_("content hash"), max_length=64, db_index=True)
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    status = models.CharField(
        _("status"), max_length=10, choices=Status.choices, default=Status.PENDING
    )
    error = models.TextField(_("error"), blank=True)
    progress = models.JSONField(_("progress"), default=dict, blank=True)
    # Bumped by every edit; a job only publishes the version it was started for.
    version = models.PositiveIntegerField(_("version"), default=1)
    indexed_version = models.PositiveIntegerField(
        _("indexed version"), null=True, blank=True
    )
    stats = models.JSONField(_("stats"), default=dict, blank=True)
    # What the reader of an HTML, DOCX or PDF file kept and lost (kb.readers.Reading
    # summary and warnings), set by the worker with the text it read.
    reader_summary = models.JSONField(_("reader summary"), default=dict, blank=True)
    # [[page, start, end], ...]: the page of the original PDF each range of
    # `text` came from (kb.readers.Reading.pages), set with the text; a
    # citation names the page of its own first character (issue #28).
    page_map = models.JSONField(_("page map"), default=list, blank=True, editable=False)
    # The document's language (ISO 639-1): an editor's choice for the whole
    # source, else detected by the worker section by section (kb/languages.py).
    language = models.CharField(
        _("language"),
        max_length=8,
        blank=True,
        choices=LANGUAGE_CHOICES,
        help_text=_(
            "Blank: detected for each section. Chosen: the whole source "
            "is read in it (keyword search, the answer's word matching)."
        ),
    )
    detected_language = models.CharField(
        _("detected language"), max_length=8, blank=True, editable=False
    )
    created = models.DateTimeField(_("created"), default=timezone.now)
    updated = models.DateTimeField(_("updated"), auto_now=True)
    indexed = models.DateTimeField(_("indexed"), null=True, blank=True)
    # The sync that brought it (kb.sync, issue #30); None: uploaded by hand,
    # which no sync ever changes or deletes.
    sync_source = models.ForeignKey(
        "SyncSource",
        null=True,
        blank=True,
        editable=False,
        on_delete=models.SET_NULL,
        related_name="sources",
        verbose_name=_("sync source"),
    )
    # What the sync last saw of its file: "size:mtime" (folder), the blob id
    # (Git); a file seen the same is not read again.
    sync_fingerprint = models.CharField(
        max_length=200, blank=True, default="", db_default="", editable=False
    )

    class Meta:
        verbose_name = _("source")
        verbose_name_plural = _("sources")
        constraints = [
            # kb_ingest and golden-case spans find a source by its file path.
            models.UniqueConstraint(
                fields=["collection", "file_name"], name="source_unique_file"
            )
        ]
        indexes = [
            # A collection's deprecated sources, which the nearest-sections
            # search leaves out (retrieval.search): few, so found at once in a
            # collection of thousands of sources.
            models.Index(
                fields=["collection"],
                condition=models.Q(metadata__contains={"deprecated": True}),
                name="source_deprecated",
            ),
        ]

    def __str__(self) -> str:
        return self.title

    def queue_new_version(self) -> None:
        """Make the source a new version to index, queued: a job only publishes
        the version it was started for, so jobs of older ones stand down. One
        UPDATE counts from the stored version, not the one this row was read
        with (an upload or an edit may have bumped it meanwhile), and locks the
        row until the caller's transaction commits. A source not saved yet is
        its first version."""
        self.status = Source.Status.QUEUED
        if self.pk is None:
            return
        Source.objects.filter(pk=self.pk).update(
            version=models.F("version") + 1, status=self.status
        )
        self.refresh_from_db(fields=["version", "status"])

    def forget_file(self, name: str | None) -> None:
        """Delete a stored upload (this source's old one, or its current one when
        the source is deleted), once the change commits."""
        if name:
            storage = self.file.storage
            transaction.on_commit(lambda: storage.delete(name))


@receiver(post_delete, sender=Source)
def _delete_upload(sender, instance: Source, **kwargs) -> None:
    """A deleted source's upload goes with it (admin, bulk or collection delete);
    its words leave the collection's counts too (kb.queueing's receiver)."""
    instance.forget_file(instance.file.name)


class Section(models.Model):
    """A heading's part of a source; `source.text[start:end]` is its evidence."""

    source = models.ForeignKey(
        Source,
        on_delete=models.CASCADE,
        related_name="sections",
        verbose_name=_("source"),
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    # A text: a setext "heading" can be a whole underlined paragraph.
    heading = models.TextField(_("heading"), blank=True)
    heading_path = models.TextField(_("heading path"), blank=True)
    level = models.PositiveSmallIntegerField(_("level"), default=0)
    order = models.PositiveIntegerField(_("order"))
    start = models.PositiveIntegerField(_("start"))
    end = models.PositiveIntegerField(_("end"))
    # source.text[start:next section's start]: the evidence and what follows it up
    # to the next heading (blank lines, link definitions). Bodies tile the document,
    # so retrieval reads sections without loading whole sources.
    body = models.TextField(_("body"), blank=True)
    # Tokens of text[start:end] (no [CLS]/[SEP]); retrieval spends its budget in these.
    tokens = models.PositiveIntegerField(_("tokens"), default=0)
    # Pages of the original file that text[start:end] came from (PDF only).
    page_start = models.PositiveIntegerField(_("page start"), null=True, blank=True)
    page_end = models.PositiveIntegerField(_("page end"), null=True, blank=True)
    # The id its heading had in the original HTML (a Javadoc member's
    # "isBlank(java.lang.CharSequence)", a DocBook term's id): with the source's
    # URL, a citation opens the original at the cited entry (issue #29).
    anchor = models.CharField(
        _("anchor"), max_length=255, blank=True, default="", db_default=""
    )
    # The normalised mean of its chunks' vectors: what the section is about.
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    # The model its vector is from: its collection's when it was written, set
    # by a trigger on insert (migration 0023) and kept when a shadow swap moves
    # it onto a live source. Each model's vectors have their own HNSW graph.
    embedding_model = models.CharField(
        _("embedding model"), max_length=100, default="", editable=False
    )
    # Its source's collection, copied by triggers (migration 0022) as Chunk's
    # is: the nearest-sections search through the HNSW index tests it on each
    # row it reads, instead of an array of the collection's sources (issue #27).
    collection = models.ForeignKey(
        Collection,
        null=True,
        editable=False,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        verbose_name=_("collection"),
    )

    class Meta:
        verbose_name = _("section")
        verbose_name_plural = _("sections")
        ordering = ["source_id", "order"]
        # Nearest sections by cosine distance (retrieval.search.section_ranks).
        indexes = model_hnsw("section")

    def __str__(self) -> str:
        return self.heading_path or self.heading or f"section {self.order}"

    def get_absolute_url(self) -> str:
        return reverse("kb:section", args=[self.pk])

    @property
    def pages(self) -> str:
        """ "4", "4–5", or "" when the source has no pages."""
        if self.page_start is None:
            return ""
        if self.page_end in (None, self.page_start):
            return str(self.page_start)
        return f"{self.page_start}–{self.page_end}"


class Chunk(models.Model):
    """One embedded vector and the exact source range it stands for."""

    source = models.ForeignKey(
        Source,
        on_delete=models.CASCADE,
        related_name="chunks",
        verbose_name=_("source"),
    )
    section = models.ForeignKey(
        Section,
        on_delete=models.CASCADE,
        related_name="chunks",
        verbose_name=_("section"),
    )
    chunk_index = models.PositiveIntegerField(_("chunk index"))
    kind = models.CharField(_("kind"), max_length=20, default=chunking.ChunkKind.TEXT)
    start = models.PositiveIntegerField(_("start"))
    end = models.PositiveIntegerField(_("end"))
    text = models.TextField(_("text"))
    # source.text between the previous chunk's end and this chunk's start ("" when
    # they touch or overlap): leads and texts tile the document, so retrieval can
    # cite a stretch of a long section without loading the section (issue #8).
    lead = models.TextField(_("lead"), blank=True, default="")
    embedded_text = models.TextField(_("embedded text"))
    token_count = models.PositiveIntegerField(
        _("token count"),
        help_text=_("Tokens of the embedded text, [CLS]/[SEP] included."),
    )
    text_tokens = models.PositiveIntegerField(
        _("text tokens"),
        default=0,
        help_text=_("Tokens of the source text alone, no special tokens."),
    )
    is_fallback = models.BooleanField(_("is fallback"), default=False)
    # Metadata fields with the "retrieve" policy: returned and cited, never embedded.
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    # Its answerable units (sentences, items, rows, code) as start, end pairs in
    # the source text, and their vectors, read in the chunk's own pass: int8
    # rows (kb.unit_vectors). The answerer scores sentences by them (issue #28).
    unit_offsets = ArrayField(
        models.PositiveIntegerField(), null=True, blank=True, editable=False
    )
    unit_vectors = models.BinaryField(null=True, blank=True, editable=False)
    # What its vectors are a function of (kb.embedding_reuse): a chunk with the
    # same key takes them instead of being embedded again. "" before issue #30.
    embedding_key = models.CharField(
        max_length=64, blank=True, default="", db_default="", editable=False
    )
    # The model its vector is from: its collection's when it was written, set
    # by a trigger on insert (migration 0023) and kept when a shadow swap moves
    # it onto a live source. Each model's vectors have their own HNSW graph.
    embedding_model = models.CharField(
        _("embedding model"), max_length=100, default="", editable=False
    )
    # Its source's collection, copied by triggers (migration 0016) on every insert,
    # move to another source, or source moved to another collection: the keyword
    # index is keyed by it, so a search reads only the asked collection's matches
    # (issue #26). Never set by the application; chunks go with their source.
    collection = models.ForeignKey(
        Collection,
        null=True,
        editable=False,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        verbose_name=_("collection"),
    )
    # The text-search configuration its section's language is read with
    # (kb.languages.config_for): its words are stemmed in that language.
    language = RegConfigField(max_length=64, default="english", db_default="english")
    # Stored so keyword ranking reads it instead of re-parsing every matching row.
    search_vector = models.GeneratedField(
        expression=models.Func(
            "language",
            "embedded_text",
            function="to_tsvector",
            output_field=SearchVectorField(),
        ),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # Its exact tokens (kb.exact_tokens): codes, options, identifiers, versions
    # and paths as written, which the stemmed search_vector splits or drops
    # (`-S`, `unique_violation`), and the folded form of those with capitals.
    # Filled from the embedded text when the chunk is published (issue #29).
    exact_tokens = ArrayField(
        models.TextField(), default=list, db_default=[], blank=True, editable=False
    )

    class Meta:
        verbose_name = _("chunk")
        verbose_name_plural = _("chunks")
        ordering = ["source_id", "chunk_index"]
        indexes = [
            # Nearest chunks by cosine distance (retrieval.search.vector_ids).
            *model_hnsw("chunk"),
            # Keyword matches with PostgreSQL full-text search (retrieval.keywords); the
            # embedded text, so headings and titles match too. Keyed by collection
            # first (btree_gin): on the words alone, a 504-chunk collection's search
            # read every collection's matches (2.9 -> 51 ms beside two of 20,160
            # chunks, issue #26). No pending list (fastupdate): every search read
            # the entries an ingestion left there until the next vacuum (keyword
            # search 10 -> 6 ms at 10,000 chunks).
            GinIndex(
                fields=["collection", "search_vector"],
                name="chunk_collection_search_gin",
                fastupdate=False,
            ),
            # The exact leg (keywords.exact_search): the collection's chunks
            # holding any of the question's exact tokens (`&&`), as above.
            GinIndex(
                fields=["collection", "exact_tokens"],
                name="chunk_collection_exact_gin",
                fastupdate=False,
            ),
            # Stored vectors by content (kb.embedding_reuse); keyless chunks out.
            models.Index(
                fields=["embedding_key"],
                name="chunk_embedding_key",
                condition=~models.Q(embedding_key=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source} #{self.chunk_index}"


class GoldenCase(models.Model):
    """A question and the evidence spans its answer must be built from."""

    class Kind(models.TextChoices):
        DEFINITION = "definition", _("Definition")
        PROCEDURE = "procedure", _("Procedure")
        EXCEPTION = "exception", _("Exception")
        TABLE = "table", _("Table")
        CODE = "code", _("Code")
        MULTI_PART = "multi_part", _("Multi-part")
        TAIL = "tail", _("Tail")
        # Incident reports (issue #29): questions about past incidents.
        DATE = "date", _("Date")
        ACROSS_DOCUMENTS = "across_documents", _("Across documents")
        CAUSE = "cause", _("Cause")
        IMPACT = "impact", _("Impact")
        ACTION = "action", _("Action")
        FREE = "free", _("Free text")

    collection = models.ForeignKey(
        Collection,
        on_delete=models.CASCADE,
        related_name="golden_cases",
        verbose_name=_("collection"),
    )
    external_id = models.CharField(_("external id"), max_length=100)
    question = models.TextField(_("question"))
    kind = models.CharField(
        _("kind"), max_length=20, choices=Kind.choices, default=Kind.FREE
    )
    # [{"file": "a.md", "start": 0, "end": 10, "text": "...", "alternatives": [...]}]
    required_spans = models.JSONField(_("required spans"), default=list)
    # Made from a question staff really asked (the content gaps page): evaluation
    # shows recall on these apart. The flag stays when the logged question is pruned.
    is_real_question = models.BooleanField(_("is real question"), default=False)
    from_question = models.ForeignKey(
        "Question",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="golden_cases",
    )
    # Made from an answer marked not helpful: retrieval alone does not settle it,
    # so the case passes only when the answer quotes every span, and the gap it
    # came from stays open until a run of the live configuration shows that.
    on_answer = models.BooleanField(
        _("scored on the answer"),
        default=False,
        db_default=False,
        help_text=_(
            "The case passes only when the extractive answer quotes every required "
            "span, not as soon as retrieval finds them."
        ),
    )
    created = models.DateTimeField(_("created"), default=timezone.now)

    class Meta:
        verbose_name = _("golden case")
        verbose_name_plural = _("golden cases")
        constraints = [
            models.UniqueConstraint(
                fields=["collection", "external_id"], name="golden_unique_id"
            )
        ]

    def __str__(self) -> str:
        return self.question


class EvalRun(models.Model):
    """One evaluation of a collection's golden cases under a recorded configuration."""

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")

    collection = models.ForeignKey(
        Collection,
        on_delete=models.CASCADE,
        related_name="eval_runs",
        verbose_name=_("collection"),
    )
    status = models.CharField(
        _("status"), max_length=10, choices=Status.choices, default=Status.QUEUED
    )
    config = models.JSONField(_("config"), default=dict, blank=True)
    aggregate = models.JSONField(_("aggregate"), default=dict, blank=True)
    cases = models.JSONField(_("cases"), default=list, blank=True)
    progress = models.JSONField(_("progress"), default=dict, blank=True)
    error = models.TextField(_("error"), blank=True)
    created = models.DateTimeField(_("created"), default=timezone.now)
    finished = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        verbose_name = _("evaluation run")
        verbose_name_plural = _("evaluation runs")

    def __str__(self) -> str:
        return f"{self.collection} run {self.pk}"

    @property
    def recall(self) -> float | None:
        return self.aggregate.get("recall_at_k")


class ShadowIndex(models.Model):
    """A collection's index rebuilt under new chunking settings or a new metadata
    policy in a hidden scratch collection, evaluated on the golden set, and swapped
    into live only when it holds (kb/reindexing.py, issue #18)."""

    class Status(models.TextChoices):
        BUILDING = "building", _("Building")
        EVALUATING = "evaluating", _("Evaluating")
        HELD = "held", _("Held: waiting for an admin")
        APPROVED = "approved", _("Approved: swapping")
        SWAPPED = "swapped", _("Swapped into live")
        DISCARDED = "discarded", _("Discarded")
        FAILED = "failed", _("Failed")

    collection = models.ForeignKey(
        Collection,
        on_delete=models.CASCADE,
        related_name="shadows",
        verbose_name=_("collection"),
    )
    scratch = models.ForeignKey(
        Collection,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("scratch"),
    )
    # The settings it is built with, and the live ones when it started:
    # {"chunk_strategy", "chunk_tokens", "chunk_overlap", "metadata_policy"}.
    new_settings = models.JSONField(_("new settings"), default=dict)
    old_settings = models.JSONField(_("old settings"), default=dict)
    # {live source id: [scratch source id, the live version copied]}
    sources = models.JSONField(_("sources"), default=dict, blank=True)
    status = models.CharField(
        _("status"), max_length=10, choices=Status.choices, default=Status.BUILDING
    )
    progress = models.JSONField(_("progress"), default=dict, blank=True)
    error = models.TextField(_("error"), blank=True)
    # The golden set on the shadow, the bar it had to reach (the floor, else the
    # live index's recall measured alongside), and the cases it lost.
    recall = models.FloatField(_("recall"), null=True, blank=True)
    bar = models.FloatField(_("bar"), null=True, blank=True)
    live_recall = models.FloatField(_("live recall"), null=True, blank=True)
    regressed = models.JSONField(_("regressed"), default=list, blank=True)
    decision = models.TextField(_("decision"), blank=True)
    run = models.ForeignKey(
        "EvalRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    live_run = models.ForeignKey(
        "EvalRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("requested by"),
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("decided by"),
    )
    created = models.DateTimeField(_("created"), default=timezone.now)
    finished = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        verbose_name = _("shadow index")
        verbose_name_plural = _("shadow indexes")

    def __str__(self) -> str:
        return f"{self.collection} shadow index {self.pk}"


@receiver(post_delete, sender=ShadowIndex)
def _delete_scratch(sender, instance: ShadowIndex, **kwargs) -> None:
    """A shadow's hidden copy goes with it (its collection deleted, say)."""
    if instance.scratch_id:
        Collection.objects.filter(pk=instance.scratch_id, is_scratch=True).delete()


class Term(models.Model):
    """How many of a collection's chunks hold a stemmed word (kb/retrieval/keywords.py).

    Counted after ingestion, so it can lag behind the index; retrieval uses it only
    to leave words that match too many chunks out of the any-word query.
    """

    # No index of its own: the unique (collection, language, lexeme) index below
    # serves every lookup by collection. With both, the planner took the
    # collection's index while a freshly counted collection had no statistics,
    # and filtered all of its rows for each question (issue #27).
    collection = models.ForeignKey(
        Collection, on_delete=models.CASCADE, related_name="terms", db_index=False
    )
    # The configuration its chunks were stemmed with: counts are per language.
    language = RegConfigField(max_length=64, default="english", db_default="english")
    lexeme = models.TextField()
    chunks = models.PositiveIntegerField()

    class Meta:
        verbose_name = _("term count")
        verbose_name_plural = _("term counts")
        constraints = [
            # The keyword search's Term counts of the question's words, one
            # collection, in each of its languages.
            models.UniqueConstraint(
                fields=["collection", "language", "lexeme"],
                name="term_collection_language_lexeme",
            )
        ]
        indexes = [
            # The collection's words near a misspelled one (retrieval.spelling).
            GinIndex(fields=["lexeme"], opclasses=["gin_trgm_ops"], name="term_trgm"),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme} ({self.chunks})"


class OverflowRejection(models.Model):
    """A chunk refused because the model would not read all of its embedded text."""

    source = models.ForeignKey(
        Source,
        on_delete=models.CASCADE,
        related_name="rejections",
        verbose_name=_("source"),
    )
    heading_path = models.TextField(_("heading path"), blank=True)
    section_order = models.PositiveIntegerField(
        _("section order"), null=True, blank=True
    )
    chunk_index = models.PositiveIntegerField(_("chunk index"))
    token_count = models.PositiveIntegerField(_("token count"))
    content_tokens = models.PositiveIntegerField(
        _("content tokens"),
        help_text=_("Tokens of the chunk's own text, without the metadata prefix."),
    )
    window = models.PositiveIntegerField(_("window"))
    text = models.TextField(
        _("text"), help_text=_("The embedded text that did not fit.")
    )
    created = models.DateTimeField(_("created"), default=timezone.now)

    class Meta:
        verbose_name = _("overflow rejection")
        verbose_name_plural = _("overflow rejections")
        ordering = ["source_id", "chunk_index"]

    def __str__(self) -> str:
        return f"{self.source} #{self.chunk_index}: {self.reason}"

    @property
    def is_prefix_overflow(self) -> bool:
        """The text alone fits; the metadata prefix pushed it over."""
        return self.content_tokens <= self.window < self.token_count

    @property
    def reason(self) -> str:
        words = f"{self.token_count} tokens; the model reads {self.window}"
        if self.is_prefix_overflow:
            words += (
                f" (the text alone has {self.content_tokens}: the metadata prefix"
                " pushed it over)"
            )
        return words


class ApiToken(models.Model):
    """A bearer token for POST /api/ask, acting as its user. Only a hash is kept."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        verbose_name=_("user"),
    )
    name = models.CharField(_("name"), max_length=100)
    key_hash = models.CharField(_("key hash"), max_length=64, unique=True)
    created = models.DateTimeField(_("created"), default=timezone.now)
    # Written at most once a minute (kb/access.py), not on every request.
    last_used = models.DateTimeField(_("last used"), null=True, blank=True)
    expires = models.DateTimeField(_("expires"), null=True, blank=True)
    revoked = models.DateTimeField(_("revoked"), null=True, blank=True)
    # A digest of the user's password hash when the token was made: a password
    # change invalidates the token (kb/access.py), as it ends sessions.
    password_stamp = models.CharField(_("password stamp"), max_length=64, blank=True)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    @staticmethod
    def stamp(user) -> str:
        """A digest of the user's password hash: it changes with the password."""
        return hashlib.sha256((user.password or "").encode()).hexdigest()

    def state(self, now=None) -> str:
        """Why the token no longer works, or "active"."""
        now = now or timezone.now()
        if self.revoked:
            return "revoked"
        if self.expires and self.expires <= now:
            return "expired"
        if self.password_stamp != self.stamp(self.user):
            return "password changed"
        if not (self.user.is_active and self.user.is_staff):
            return "user inactive or not staff"  # revoked at its next use
        return "active"


class Question(models.Model):
    """A question answered on the ask page or by POST /api/ask, with what it was
    answered from (kb/questions.py): kept KB_QUESTION_LOG_DAYS, and at most
    KB_QUESTION_LOG_MAX per collection."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="questions",
        verbose_name=_("user"),
    )
    collection = models.ForeignKey(
        Collection,
        on_delete=models.CASCADE,
        related_name="questions",
        verbose_name=_("collection"),
    )
    question = models.TextField(_("question"))
    answer = models.TextField(_("answer"), blank=True)
    answerer = models.CharField(_("answerer"), max_length=20)
    is_declined = models.BooleanField(_("declined"), default=False)
    is_trustworthy = models.BooleanField(_("is trustworthy"), default=True)
    top_similarity = models.FloatField(_("top similarity"), null=True, blank=True)
    # [{"n", "source_id", "file", "heading_path", "section_ids", "chunk_ids",
    #   "chunk_indexes", "start", "end", "score", "matched"}]
    retrieved = models.JSONField(_("retrieved"), default=list, blank=True)
    # As in the ask API, each with "text": the cited source text when it was asked,
    # so a logged answer stays readable after its source changes.
    citations = models.JSONField(_("citations"), default=list, blank=True)
    latency_ms = models.FloatField(_("latency ms"), default=0)
    # The index it was answered from: chunking, model, precision, window, metadata
    # policy and each source's indexed version (questions.fingerprint).
    fingerprint = models.JSONField(_("fingerprint"), default=dict, blank=True)
    # The same user asking the same question of the same index again within
    # kb.questions.REPEAT_WINDOW of `created` (a reload, a client's retry): counted
    # here, and the last time kept, not logged as another row (issue #26).
    repeats = models.PositiveIntegerField(_("repeats"), default=0)
    last_asked = models.DateTimeField(_("last asked"), null=True, blank=True)
    # The question's embedding: the content gaps page groups similar questions.
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    created = models.DateTimeField(_("created"), default=timezone.now)
    # Feedback from the asker (None: none given).
    is_helpful = models.BooleanField(_("is helpful"), null=True, blank=True)
    note = models.TextField(_("note"), blank=True)
    feedback_at = models.DateTimeField(_("feedback at"), null=True, blank=True)
    # An editor dealt with it on the content gaps page.
    handled = models.DateTimeField(_("handled"), null=True, blank=True)
    handled_note = models.TextField(_("handled note"), blank=True)
    handled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("handled by"),
    )

    class Meta:
        verbose_name = _("logged question")
        verbose_name_plural = _("question log")
        indexes = [
            # Pruning the oldest of a collection (questions.prune), the gaps page.
            models.Index(
                fields=["collection", "created"], name="question_coll_created"
            ),
            # A user's history on the ask page.
            models.Index(fields=["user", "created"], name="question_user_created"),
            # Retention: everything older than KB_QUESTION_LOG_DAYS.
            models.Index(fields=["created"], name="question_created"),
        ]

    def __str__(self) -> str:
        return self.question[:80]

    @property
    def feedback(self) -> str:
        if self.is_helpful is None:
            return "none"
        return "helpful" if self.is_helpful else "not helpful"


class ReplayReport(models.Model):
    """The last questions of a collection answered again on its current index
    (after a re-index): which answers' citations changed (kb/questions.py)."""

    class Status(models.TextChoices):
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")

    collection = models.ForeignKey(
        Collection,
        on_delete=models.CASCADE,
        related_name="replay_reports",
        verbose_name=_("collection"),
    )
    status = models.CharField(
        _("status"), max_length=10, choices=Status.choices, default=Status.RUNNING
    )
    replayed = models.PositiveIntegerField(_("replayed"), default=0)
    # One questions.replay() outcome per changed answer.
    changed = models.JSONField(_("changed"), default=list, blank=True)
    error = models.TextField(_("error"), blank=True)
    created = models.DateTimeField(_("created"), default=timezone.now)
    finished = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        verbose_name = _("replay report")
        verbose_name_plural = _("replay reports")

    def __str__(self) -> str:
        return f"{self.collection} replay {self.pk}"


class SyncSource(models.Model):
    """Where a collection's documents live, kept in step by kb.sync (issue #30):
    a Git repository, a folder on the server or a website."""

    class Kind(models.TextChoices):
        GIT = "git", _("Git repository")
        FOLDER = "folder", _("Folder on the server")
        WEBSITE = "website", _("Website")

    name = models.SlugField(_("name"), max_length=100, unique=True)
    collection = models.ForeignKey(
        Collection,
        on_delete=models.CASCADE,
        related_name="sync_sources",
        verbose_name=_("collection"),
    )
    kind = models.CharField(_("kind"), max_length=10, choices=Kind.choices)
    location = models.CharField(
        _("location"),
        max_length=1000,
        help_text=_(
            "Git: an https or ssh URL (ssh://git@host/path or git@host:path) or "
            "a local path of a repository. Folder: a path "
            "under one of the roots the deployment allows (KB_SYNC_ROOTS). "
            "Website: a start page, or a sitemap.xml."
        ),
    )
    branch = models.CharField(
        _("branch"), max_length=200, blank=True, help_text=_("Git only; blank: main.")
    )
    subfolder = models.CharField(
        _("sub-folder"),
        max_length=500,
        blank=True,
        help_text=_("Only the files under this folder of the origin."),
    )
    include = models.TextField(
        _("include"),
        blank=True,
        help_text=_(
            "Shell patterns of the paths to take, one per line ('docs/**/*.md'); "
            "blank: every file of a format kb reads."
        ),
    )
    exclude = models.TextField(
        _("exclude"), blank=True, help_text=_("Shell patterns of paths to leave out.")
    )
    link_template = models.CharField(
        _("link template"),
        max_length=500,
        blank=True,
        help_text=_(
            "Git only: the web view of a file, with {commit} and {path}, e.g. "
            "https://git.example.org/docs/blob/{commit}/{path}. Citations link "
            "to the cited text there."
        ),
    )
    username = models.CharField(
        _("user name"),
        max_length=200,
        blank=True,
        help_text=_(
            "Git over https: the user name the token goes with (your host's "
            "docs say which: often the account, 'oauth2' or 'x-access-token')."
        ),
    )
    # The token, encrypted (kb.sync.secrets); never shown again once saved.
    token_sealed = models.TextField(blank=True, default="", editable=False)
    # Git over SSH: the deploy key's private half, encrypted likewise; its
    # public line is shown, for the repository's deploy keys.
    deploy_key_sealed = models.TextField(
        blank=True, default="", db_default="", editable=False
    )
    deploy_key_public = models.CharField(
        _("deploy key (public)"),
        max_length=2000,
        blank=True,
        default="",
        db_default="",
        editable=False,
    )
    url_prefix = models.CharField(
        _("URL prefix"),
        max_length=1000,
        blank=True,
        help_text=_(
            "Website only: pages are synced only under this address; blank: the "
            "start page's folder (a sitemap's: its site)."
        ),
    )
    page_limit = models.PositiveIntegerField(
        _("page limit"),
        default=500,
        help_text=_("Website only: pages a run visits at most."),
    )
    every_minutes = models.PositiveIntegerField(
        _("every (minutes)"),
        default=0,
        help_text=_("0: only when someone syncs it."),
    )
    keep_deleted = models.BooleanField(
        _("keep deleted files"),
        default=False,
        help_text=_(
            "Off: a file deleted at the origin leaves the answers. On: its "
            "source stays, and the sync log says the file is gone."
        ),
    )
    # What the last complete run saw: the commit (Git).
    seen = models.CharField(_("last seen"), max_length=200, blank=True, editable=False)
    created = models.DateTimeField(_("created"), default=timezone.now)

    class Meta:
        verbose_name = _("sync source")
        verbose_name_plural = _("sync sources")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def mirror_path(self):
        """Where a Git sync keeps its bare mirror (removed with the sync), and
        beside it, over SSH, the host keys it trusts (`<pk>.known_hosts`)."""
        from pathlib import Path

        return Path(settings.KB_SYNC_DIR) / f"{self.pk}.git"

    def last_run(self) -> SyncRun | None:
        return self.runs.order_by("-started").first()

    def last_success(self) -> SyncRun | None:
        return (
            self.runs.filter(status__in=[SyncRun.Status.DONE, SyncRun.Status.PARTIAL])
            .order_by("-started")
            .first()
        )


@receiver(post_delete, sender=SyncSource)
def _delete_mirror(sender, instance: SyncSource, **kwargs) -> None:
    """A deleted Git sync's mirror and trusted host keys go with it, once the
    delete commits."""
    import shutil

    from kb.sync.origins import known_hosts

    mirror = instance.mirror_path()

    def remove() -> None:
        shutil.rmtree(mirror, ignore_errors=True)
        known_hosts(mirror).unlink(missing_ok=True)

    transaction.on_commit(remove)


class SyncRun(models.Model):
    """One run of a sync: what it found and did, for the sync log."""

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        PARTIAL = "partial", _("Done, some files failed")
        FAILED = "failed", _("Failed")
        INTERRUPTED = "interrupted", _("Interrupted")

    sync_source = models.ForeignKey(
        SyncSource,
        on_delete=models.CASCADE,
        related_name="runs",
        verbose_name=_("sync source"),
    )
    status = models.CharField(
        _("status"), max_length=12, choices=Status.choices, default=Status.QUEUED
    )
    started = models.DateTimeField(_("started"), default=timezone.now)
    finished = models.DateTimeField(_("finished"), null=True, blank=True)
    seen = models.CharField(_("seen"), max_length=200, blank=True)
    added = models.PositiveIntegerField(_("added"), default=0)
    changed = models.PositiveIntegerField(_("changed"), default=0)
    renamed = models.PositiveIntegerField(_("renamed"), default=0)
    deleted = models.PositiveIntegerField(_("deleted"), default=0)
    unchanged = models.PositiveIntegerField(_("unchanged"), default=0)
    # [{"path", "reason"}]: files that could not be synced, with why.
    failed = models.JSONField(_("failed"), default=list, blank=True)
    chunks_embedded = models.PositiveIntegerField(_("chunks embedded"), default=0)
    chunks_reused = models.PositiveIntegerField(_("chunks reused"), default=0)
    seconds = models.FloatField(_("seconds"), default=0.0)
    error = models.TextField(_("error"), blank=True)
    # Each file's outcome, in the order done: [{"path", "outcome", ...}].
    log = models.JSONField(_("log"), default=list, blank=True)

    class Meta:
        verbose_name = _("sync run")
        verbose_name_plural = _("sync runs")
        ordering = ["-started"]

    def __str__(self) -> str:
        return f"{self.sync_source} {self.started:%Y-%m-%d %H:%M}"

    def as_json(self) -> dict:
        """The figures `kb_sync run --json` prints (issue #30's shape)."""
        return {
            "added": self.added,
            "changed": self.changed,
            "renamed": self.renamed,
            "deleted": self.deleted,
            "unchanged": self.unchanged,
            "failed": list(self.failed),
            "chunks_embedded": self.chunks_embedded,
            "chunks_reused": self.chunks_reused,
            "seconds": round(self.seconds, 3),
            "status": self.status,
            "seen": self.seen,
            "error": self.error,
        }
