from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db import transaction
from django.db.models import Count, F, Func, IntegerField, OuterRef, Subquery
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import formats
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, gettext_lazy, ngettext

from kb import (
    charts,
    deletion,
    embedding_models,
    golden,
    index_config,
    jobs,
    permissions,
    questions,
    queueing,
    readers,
    reindexing,
    staff,
    uploads,
)
from kb.forms import (
    CollectionForm,
    GoldenCaseForm,
    LoginForm,
    SourceChangeForm,
    SyncSourceForm,
)
from kb.middleware import large_form_fields
from kb.models import (
    ApiToken,
    Chunk,
    Collection,
    EvalRun,
    GoldenCase,
    OverflowRejection,
    Question,
    ReplayReport,
    Section,
    Source,
    SyncRun,
    SyncSource,
)
from kb.staff import sources as source_pages
from kb.staff import urls as staff_pages
from kb.staff.deleting import BulkDelete
from kb.sync import runs as sync_runs

# Failed logins lock a user name and an address out for a while (kb/ratelimit.py).
admin.site.login_form = LoginForm


class CollectionScoped:
    """Admin lists and pages of a model only show the rows of collections the user
    may see (CollectionQuerySet.open_to): group limits hold in the admin too.
    Lists leave scratch copies out (staff.admin_rows)."""

    collection_path = "collection"

    def get_queryset(self, request):
        rows = super().get_queryset(request)
        return staff.admin_rows(request, rows, self.collection_path)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "collection":
            kwargs["queryset"] = Collection.objects.visible_to(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class StaffPages:
    """Serves the model's staff pages (kb/staff/urls.py) under its admin URLs,
    before the admin's own catch-all object URLs."""

    staff_urls: list = []

    def get_urls(self):
        return [*self.staff_urls, *super().get_urls()]


class ReadOnly:
    """Rows made by ingestion, evaluation or the question log: shown, never added
    or edited by hand."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Collection)
class CollectionAdmin(BulkDelete, StaffPages, CollectionScoped, admin.ModelAdmin):
    staff_urls = staff_pages.COLLECTION
    bulk_delete = staticmethod(deletion.delete_collections)
    collection_path = "pk"
    form = CollectionForm
    list_display = ["name", *Collection.CONFIG_FIELDS, "source_count", "index_state"]
    list_filter = ["chunk_strategy"]
    search_fields = ["name", "description"]
    # Set by evaluation runs and jobs, not by hand: a floor is only ever raised
    # (from a run, on the dashboard), and a scratch copy is made by a run.
    readonly_fields = [
        "policy_link",
        "off_topic_floor",
        "is_scratch",
        "live",
        "recall_floor",
        "answer_floor",
        "floor_run",
        "terms_counted",
        "terms_chunks",
        "created",
    ]
    exclude = ["metadata_policy"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(n_sources=Count("sources"))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        collection = self.get_object(request, unquote(object_id))
        if collection is not None and request.method == "GET":
            note = embedding_models.language_note(
                collection.embedding_model, collection.source_languages()
            )
            if note:
                messages.warning(request, note)
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description=gettext_lazy("Sources"), ordering="n_sources")
    def source_count(self, obj: Collection) -> int:
        return obj.n_sources

    @admin.display(description=gettext_lazy("Index"))
    def index_state(self, obj: Collection) -> str:
        state = index_config.index_state(obj)
        if shadow := reindexing.open_shadow(obj):  # a change not live yet
            state += gettext("; shadow index #%(pk)d %(status)s") % {
                "pk": shadow.pk,
                "status": shadow.get_status_display(),
            }
        return state

    @admin.display(description=gettext_lazy("Metadata policy"))
    def policy_link(self, obj: Collection) -> str:
        if not obj.pk:
            return gettext("Save the collection first.")
        if obj.is_scratch:  # its shadow index's or run's, not edited by hand
            return "-"
        url = reverse("admin:kb_collection_policy", args=[obj.pk])
        return format_html(
            '<a href="{}">{}</a>', url, gettext("Edit the metadata policy")
        )

    @admin.display(description=gettext_lazy("Off-topic floor"))
    def off_topic_floor(self, obj: Collection) -> str:
        floor = embedding_models.min_similarity(obj.embedding_model)
        if floor:
            return gettext(
                "%(floor)s: a question whose nearest passage is less similar is "
                "declined (the floor of %(model)s)"
            ) % {"floor": formats.number_format(floor, 2), "model": obj.embedding_model}
        setting = "KB_MODEL_FLOORS"
        if obj.embedding_model == embedding_models.DEFAULT:
            setting = "KB_MIN_SIMILARITY"
        return gettext(
            "Off: %(model)s has no floor, so every question is answered, however "
            "far off (set %(setting)s)"
        ) % {"model": obj.embedding_model, "setting": setting}

    def get_readonly_fields(self, request, obj=None):
        # Groups lift or set a collection's limit, and the widget lists every
        # group: superusers only (issue #15).
        fields = super().get_readonly_fields(request, obj)
        if not permissions.can_change_policy(request.user):  # it would be a 403
            fields = [f for f in fields if f != "policy_link"]
        if request.user.is_superuser:
            return fields
        return [*fields, "groups"]

    def has_change_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.is_scratch:  # made and dropped by its job
            return False
        return permissions.can_change_policy(request.user)

    def has_add_permission(self, request) -> bool:
        return permissions.can_change_policy(request.user)

    def has_delete_permission(self, request, obj=None) -> bool:
        return permissions.can_change_policy(request.user)

    def save_model(self, request, obj: Collection, form, change) -> None:
        # Chunking settings go live with a shadow index that holds on the golden
        # set (kb/reindexing.py): until it swaps, the collection keeps the live ones.
        changes = {}
        if change:
            changes = reindexing.hold_index_settings(obj, form.changed_data)
        super().save_model(request, obj, form, change)
        if changes:
            shadow = reindexing.start(obj, changes, request.user)
            source_pages.shadow_message(request, shadow, "chunking settings")


class EmbeddingFilter(admin.SimpleListFilter):
    title = gettext_lazy("embedding")
    parameter_name = "embedded"

    def lookups(self, request, model_admin):
        return [("yes", gettext("Embedded")), ("no", gettext("Without an embedding"))]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(embedding__isnull=self.value() == "no")
        return queryset


def _stored_count(key: str, model) -> Coalesce:
    """A source's section or chunk count for the source list: the figure its
    ingestion stored with the published index, else counted in a subquery of its
    own rows. Two Count(distinct=True) joined sections with chunks: 4.1 M rows
    and 44 s for one 2.2 MB source (issue #15). PostgreSQL's COALESCE runs the
    subquery only for sources without stored statistics."""
    counted = (
        model.objects.filter(source=OuterRef("pk"))
        .order_by()
        .annotate(n=Func(F("pk"), function="COUNT"))
        .values("n")
    )
    return Coalesce(
        Cast(KeyTextTransform(key, "stats"), IntegerField()),
        Subquery(counted, output_field=IntegerField()),
    )


@admin.register(Source)
class SourceAdmin(BulkDelete, StaffPages, CollectionScoped, admin.ModelAdmin):
    staff_urls = staff_pages.SOURCE
    bulk_delete = staticmethod(deletion.delete_sources)
    # A source's index goes with it: whoever may delete the source deletes them
    # (editors have no delete permission on them one by one).
    owned = (Section, Chunk, OverflowRejection)
    form = SourceChangeForm
    list_display = [
        "title",
        "collection",
        "file_name",
        "status_badge",
        "progress_display",
        "section_count",
        "chunk_count",
        "indexed",
    ]
    list_filter = ["status", ("collection", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["collection"]
    search_fields = ["title", "file_name"]
    actions = ["reindex"]
    readonly_fields = [
        "collection",
        "file_name",
        "file_link",
        "content_hash",
        "status_badge",
        "error",
        "progress_display",
        "statistics",
        "indexed",
        "rejection_link",
        "reading",
        "detected_language",
    ]
    fieldsets = [
        (None, {"fields": ["collection", "title", "file_name", "file_link"]}),
        (gettext_lazy("Language"), {"fields": ["language", "detected_language"]}),
        (
            gettext_lazy("Index"),
            {
                "fields": [
                    "status_badge",
                    "progress_display",
                    "error",
                    "rejection_link",
                    "indexed",
                    "content_hash",
                ]
            },
        ),
        (gettext_lazy("Statistics"), {"fields": ["statistics"]}),
        (gettext_lazy("Reading"), {"fields": ["reading"]}),
        (
            gettext_lazy("Metadata"),
            {"fields": ["author", "tags", "url", "doc_version", "deprecated", "extra"]},
        ),
        (gettext_lazy("Text"), {"classes": ["collapse"], "fields": ["text"]}),
    ]
    change_list_template = "admin/kb/source/change_list.html"
    change_form_template = "admin/kb/source/change_form.html"

    def get_queryset(self, request):
        # Not the text, up to 10 MB a source, but for the page that shows it (a
        # list, a delete action and its log named each row with it; issue #26).
        return (
            super()
            .get_queryset(request)
            .defer("text")
            .annotate(
                n_sections=_stored_count("sections", Section),
                n_chunks=_stored_count("chunks", Chunk),
            )
        )

    @large_form_fields  # its text: up to KB_MAX_EDIT_FORM_BYTES for editors
    def change_view(self, request, object_id, form_url="", extra_context=None):
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description=gettext_lazy("Uploaded file"))
    def file_link(self, obj: Source) -> str:
        if not obj.file:
            return "-"
        url = reverse("kb:source-file", args=[obj.pk])
        return format_html(
            '<a href="{}">{}</a> <span class="help">{}</span>',
            url,
            gettext("Download as uploaded"),
            gettext(
                "The text below is what gets indexed; it may have been edited since."
            ),
        )

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and readers.format_of(obj.file_name):
            fields.append("text")  # the reader's: edit the original and upload it
        return fields

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not readers.format_of(obj.file_name):
            return [f for f in fieldsets if "reading" not in f[1]["fields"]]
        return fieldsets

    @admin.display(description=gettext_lazy("What the reader kept and lost"))
    def reading(self, obj: Source) -> str:
        return render_to_string(
            "admin/kb/source/_reader_summary.html", reading_context(obj)
        )

    @admin.display(description=gettext_lazy("Sections"), ordering="n_sections")
    def section_count(self, obj: Source) -> int:
        return obj.n_sections

    @admin.display(description=gettext_lazy("Chunks"), ordering="n_chunks")
    def chunk_count(self, obj: Source) -> int:
        return obj.n_chunks

    @admin.display(description=gettext_lazy("Status"), ordering="status")
    def status_badge(self, obj: Source) -> str:
        colour = {
            Source.Status.INDEXED: "kb-status-indexed",
            Source.Status.FAILED: "kb-status-failed",
        }.get(obj.status, "kb-status")
        note = ""
        if obj.status == Source.Status.FAILED and obj.indexed_version:
            note = " " + gettext("(previous version still searchable)")
        return format_html(
            '<strong class="{}">{}</strong>{}',
            colour,
            obj.get_status_display(),
            note,
        )

    @admin.display(description=gettext_lazy("Progress"))
    def progress_display(self, obj: Source) -> str:
        p = obj.progress or {}
        if obj.status not in Source.ACTIVE:
            return "-"
        if getattr(obj, "job_lost", False):
            return gettext("its job was lost: re-index it")
        ahead = getattr(obj, "jobs_ahead", None)
        if obj.status == Source.Status.QUEUED and ahead:
            return gettext("queued behind %(count)s job(s)") % {"count": ahead}
        if p.get("stage") == "embedding":
            done, total = p.get("chunks_embedded", 0), p.get("chunks_total", "?")
            return gettext("embedding %(done)s of %(total)s") % {
                "done": done,
                "total": total,
            }
        if p.get("stage") == "storing":
            total = p.get("chunks_total", "?")
            return gettext("storing %(total)s chunks") % {"total": total}
        return p.get("stage") or obj.get_status_display()

    @admin.display(description=gettext_lazy("Statistics"))
    def statistics(self, obj: Source) -> str:
        return charts.source_statistics(obj.stats)

    @admin.display(description=gettext_lazy("Overflow rejections"))
    def rejection_link(self, obj: Source) -> str:
        count = obj.rejections.count()
        if not count:
            return gettext("none")
        url = (
            reverse("admin:kb_overflowrejection_changelist")
            + f"?source__id__exact={obj.pk}"
        )
        text = gettext("%(count)d chunk(s) rejected") % {"count": count}
        return format_html('<a href="{}">{}</a>', url, text)

    @admin.action(description=gettext_lazy("Re-index selected sources"))
    def reindex(self, request: HttpRequest, queryset) -> None:
        with transaction.atomic():
            count, note = source_pages.requeue(queryset)
        self.message_user(
            request,
            source_pages.reindex_message(
                ngettext("%(count)d source", "%(count)d sources", count)
                % {"count": count},
                note,
            ),
        )

    def save_model(self, request, obj: Source, form, change) -> None:
        meta = form.metadata_value()
        changed = uploads.apply_edit(obj, form.changed_data, meta)
        super().save_model(request, obj, form, change)
        if changed and queueing.enqueue_ingest(obj):
            messages.info(
                request, gettext("Changes saved; the source is queued for indexing.")
            )
        elif changed:
            down = queueing.QUEUE_DOWN
            messages.info(
                request, gettext("Changes saved and %(down)s.") % {"down": down}
            )

    def get_changelist_instance(self, request):
        listed = super().get_changelist_instance(request)
        _mark_lost_jobs(listed.result_list)
        return listed

    def get_object(self, request, object_id, from_field=None):
        source = super().get_object(request, object_id, from_field)
        if source is not None:
            _mark_lost_jobs([source])
        return source

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        listed = getattr(response, "context_data", {}).get("cl")
        if listed is not None:  # refresh while a source shown is being indexed
            active = [s for s in listed.result_list if s.status in Source.ACTIVE]
            lost = [s for s in active if s.job_lost]
            response.context_data["auto_refresh"] = len(active) > len(lost)
            if lost:
                messages.warning(
                    request,
                    gettext(
                        "%(count)d source(s) have no working job any more (the queue "
                        "was emptied or restarted, or a worker died): select them and "
                        "re-index."
                    )
                    % {"count": len(lost)},
                )
        return response

    def render_change_form(self, request, context, *args, obj=None, **kwargs):
        # obj comes from get_object, which marked whether its job was lost.
        working = bool(obj and obj.status in Source.ACTIVE and not obj.job_lost)
        context["auto_refresh"] = working
        return super().render_change_form(request, context, *args, obj=obj, **kwargs)


READING_COUNTS = [
    ("pages", gettext_lazy("Pages")),
    ("headings", gettext_lazy("Headings")),
    ("paragraphs", gettext_lazy("Paragraphs")),
    ("list_items", gettext_lazy("List items")),
    ("tables_with_header", gettext_lazy("Tables with a header row")),
    ("tables_without_header", gettext_lazy("Tables without one")),
    ("code_blocks", gettext_lazy("Code blocks")),
    ("block_quotes", gettext_lazy("Block quotes")),
    ("links", gettext_lazy("Links (text kept, address dropped)")),
    ("images_dropped", gettext_lazy("Images dropped (alt text kept)")),
    (
        "running_lines_removed",
        gettext_lazy("Running headers, footers, page numbers removed"),
    ),
]


def reading_context(source: Source) -> dict:
    """The reader summary of a converted source, as the source page shows it."""
    summary = source.reader_summary or {}
    chars = summary.get("chars_per_page") or []
    return {
        "source": source,
        "format": readers.format_of(source.file_name).upper(),
        "summary": summary,
        "counts": [
            (label, summary.get(key, 0))
            for key, label in READING_COUNTS
            if key in summary or key not in ("pages", "running_lines_removed")
        ],
        "tables_without_header": summary.get("tables_without_header", 0),
        "chars_per_page": [
            {"number": i, "chars": n, "empty": n == 0} for i, n in enumerate(chars, 1)
        ],
    }


def _mark_lost_jobs(sources) -> None:
    lost = {source.pk for source in jobs.stranded(sources)}
    ahead = jobs.jobs_ahead(sources)
    for source in sources:
        source.job_lost = source.pk in lost
        source.jobs_ahead = ahead.get(source.pk)


# What a row of a list or page names of its source or section: not their texts
# and vectors, loaded again for every row (a 10 MB source, 100 times a page).
RELATED_TEXTS = {"source": ["text"], "section": ["body", "embedding"]}


def _without_texts(rows, *related: str):
    rows = rows.select_related(*related)
    return rows.defer(*[f"{r}__{f}" for r in related for f in RELATED_TEXTS[r]])


@admin.register(Section)
class SectionAdmin(ReadOnly, CollectionScoped, admin.ModelAdmin):
    collection_path = "source__collection"
    list_display = ["heading_path", "source", "level", "order", "start", "end"]
    list_filter = [("source__collection", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["source"]
    search_fields = ["heading_path"]
    raw_id_fields = ["source", "parent"]
    exclude = ["embedding"]

    def get_queryset(self, request):
        # Its own body too: a long section's is most of its source (its page
        # loads it when it shows it).
        rows = _without_texts(super().get_queryset(request), "source")
        return rows.defer(*RELATED_TEXTS["section"])

    # Sections are what ingestion made of a source: edit the source, not them.


@admin.register(Chunk)
class ChunkAdmin(ReadOnly, CollectionScoped, admin.ModelAdmin):
    collection_path = "source__collection"
    list_display = ["__str__", "heading", "kind", "token_count", "start", "end"]
    list_filter = [
        "kind",
        EmbeddingFilter,
        "is_fallback",
        ("source__collection", admin.RelatedOnlyFieldListFilter),
    ]
    list_select_related = ["source", "section"]
    raw_id_fields = ["source", "section"]
    search_fields = ["text"]
    show_full_result_count = False
    exclude = ["embedding"]
    readonly_fields = ["side_by_side", "metadata"]
    fields = [
        "source",
        "section",
        "chunk_index",
        "kind",
        "start",
        "end",
        "token_count",
        "is_fallback",
        "metadata",
        "side_by_side",
    ]

    def get_queryset(self, request):
        return _without_texts(super().get_queryset(request), "source", "section")

    @admin.display(
        description=gettext_lazy("Section"), ordering="section__heading_path"
    )
    def heading(self, obj: Chunk) -> str:
        return obj.section.heading_path

    @admin.display(description=gettext_lazy("Embedded text | source text"))
    def side_by_side(self, obj: Chunk) -> str:
        # As indexed (the section's body): the source may have been edited since.
        base = obj.section.start
        return format_html(
            '<div class="kb-side-by-side">'
            "<div><h4>Exactly what was embedded ({} tokens)</h4>"
            '<pre class="kb-text">{}</pre></div>'
            "<div><h4>Source text [{}:{}]</h4>"
            '<pre class="kb-text">{}</pre></div></div>',
            obj.token_count,
            obj.embedded_text,
            obj.start,
            obj.end,
            obj.section.body[obj.start - base : obj.end - base],
        )


@admin.register(OverflowRejection)
class OverflowRejectionAdmin(ReadOnly, CollectionScoped, admin.ModelAdmin):
    collection_path = "source__collection"
    list_display = [
        "source",
        "chunk_index",
        "heading_path",
        "reason_text",
        "section_link",
    ]
    list_filter = [
        ("source__collection", admin.RelatedOnlyFieldListFilter),
        ("source", admin.RelatedOnlyFieldListFilter),
    ]
    list_select_related = ["source"]
    readonly_fields = [
        "source",
        "heading_path",
        "chunk_index",
        "token_count",
        "content_tokens",
        "window",
        "reason_text",
        "text",
    ]

    def get_queryset(self, request):
        return _without_texts(super().get_queryset(request), "source")

    @admin.display(description=gettext_lazy("Reason"))
    def reason_text(self, obj: OverflowRejection) -> str:
        return obj.reason

    @admin.display(description=gettext_lazy("Section"))
    def section_link(self, obj: OverflowRejection) -> str:
        found = obj.source.sections.filter(heading_path=obj.heading_path)
        section = found.only("pk").first()
        if section is None:
            return gettext("(not indexed yet)")
        url = section.get_absolute_url()
        return format_html('<a href="{}">{}</a>', url, gettext("open"))


class StaleSpansFilter(admin.SimpleListFilter):
    title = gettext_lazy("spans")
    parameter_name = "spans"

    def lookups(self, request, model_admin):
        return [("stale", gettext("No longer matching their source"))]

    def queryset(self, request, queryset):
        if self.value() == "stale":
            among = Collection.objects.open_to(request.user)
            stale = golden.stale_cases(among=among)
            return queryset.filter(pk__in=[c["pk"] for c in stale])
        return queryset


@admin.register(GoldenCase)
class GoldenCaseAdmin(StaffPages, CollectionScoped, admin.ModelAdmin):
    staff_urls = staff_pages.GOLDEN_CASE
    form = GoldenCaseForm
    list_display = [
        "external_id",
        "question",
        "kind",
        "collection",
        "span_count",
        "is_real_question",
        "on_answer",
    ]
    list_filter = [
        "kind",
        ("collection", admin.RelatedOnlyFieldListFilter),
        StaleSpansFilter,
        "is_real_question",
        "on_answer",
    ]
    list_select_related = ["collection"]
    search_fields = ["question", "external_id"]
    readonly_fields = ["spans_in_context", "span_picker"]
    actions = ["export_jsonl"]
    change_list_template = "admin/kb/goldencase/change_list.html"

    class Media:
        js = ["kb/span_picker.js"]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "from_question":  # group limits: only visible entries
            kwargs["queryset"] = questions.visible_to(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj: GoldenCase, form, change) -> None:
        super().save_model(request, obj, form, change)
        if not change and obj.from_question_id:
            handled = questions.case_made(request.user, obj)
            if obj.on_answer:
                text = gettext(
                    "The case is scored on the answer: the logged question stays "
                    "open until a run of the live configuration shows its answer "
                    "quoting every span."
                )
                messages.info(request, text)
                return
            text = gettext("%(count)d logged question(s) marked handled.")
            messages.info(request, text % {"count": handled})

    @admin.display(description=gettext_lazy("Spans"))
    def span_count(self, obj: GoldenCase) -> int:
        return len(obj.required_spans)

    @admin.display(description=gettext_lazy("Spans in context"))
    def spans_in_context(self, obj: GoldenCase) -> str:
        if not obj.pk:
            return "-"
        sources = {s.file_name: s for s in obj.collection.sources.all()}
        rows = []
        for span in obj.required_spans:
            source = sources.get(span["file"])
            text = source.text if source else ""
            s, e = span["start"], span["end"]
            rows.append(
                format_html(
                    "<p><strong>{}</strong> [{}:{}]<br><span class='kb-pre-wrap'>"
                    "…{}<mark>{}</mark>{}…</span></p>",
                    span["file"],
                    s,
                    e,
                    text[max(0, s - 120) : s],
                    text[s:e],
                    text[e : e + 120],
                )
            )
            if problem := golden.span_problem(span, source):
                rows.append(format_html('<p class="errornote">{}</p>', problem))
        return format_html_join("", "{}", ((r,) for r in rows))

    @admin.display(description=gettext_lazy("Pick a span"))
    def span_picker(self, obj: GoldenCase) -> str:
        # The sources' texts come as JSON and go into a <pre> as text, not HTML:
        # HTML parsing drops a newline right after <pre>, which shifted every
        # offset in a source starting with one.
        return format_html(
            '<div id="kb-span-picker" data-sources-url="{}"><label>Source '
            '<select id="kb-span-file"><option value="">choose…</option></select>'
            '</label> <button type="button" id="kb-span-add" class="button">Add '
            "selected text as a span</button> <span id='kb-span-status' "
            "class='help'>Choose the case's collection first.</span>"
            '<pre class="kb-span-source" hidden></pre></div>',
            reverse("admin:kb_goldencase_sources"),
        )

    def changelist_view(self, request, extra_context=None):
        among = Collection.objects.open_to(request.user)
        stale = golden.stale_cases(among=among)
        extra_context = {**(extra_context or {}), "stale": stale}
        return super().changelist_view(request, extra_context)

    @admin.action(description=gettext_lazy("Export selected cases as JSON Lines"))
    def export_jsonl(self, request: HttpRequest, queryset) -> HttpResponse:
        lines = [golden.case_line(case) for case in queryset.order_by("external_id")]
        response = HttpResponse("".join(lines), content_type="application/x-ndjson")
        response["Content-Disposition"] = 'attachment; filename="golden.jsonl"'
        return response


@admin.register(EvalRun)
class EvalRunAdmin(StaffPages, CollectionScoped, admin.ModelAdmin):
    staff_urls = staff_pages.EVAL_RUN
    list_display = ["__str__", "status", "recall", "created", "finished"]
    list_filter = ["status", ("collection", admin.RelatedOnlyFieldListFilter)]
    readonly_fields = [
        "collection",
        "status",
        "config",
        "aggregate",
        "progress",
        "error",
        "created",
        "finished",
    ]
    exclude = ["cases"]
    change_list_template = "admin/kb/evalrun/change_list.html"

    def has_add_permission(self, request) -> bool:
        return False


class FeedbackFilter(admin.SimpleListFilter):
    title = gettext_lazy("feedback")
    parameter_name = "feedback"

    def lookups(self, request, model_admin):
        return [
            ("helpful", gettext("Helpful")),
            ("not", gettext("Not helpful")),
            ("none", gettext("None")),
        ]

    def queryset(self, request, queryset):
        value = {"helpful": True, "not": False, "none": None}.get(self.value(), "")
        if value == "":
            return queryset
        if value is None:
            return queryset.filter(is_helpful__isnull=True)
        return queryset.filter(is_helpful=value)


@admin.register(Question)
class QuestionAdmin(StaffPages, ReadOnly, CollectionScoped, admin.ModelAdmin):
    staff_urls = staff_pages.QUESTION
    """The question log: read-only; pruned by age and size (kb/questions.py)."""

    list_display = [
        "question",
        "collection",
        "user",
        "created",
        "repeats",
        "answerer",
        "is_declined",
        "feedback",
        "similarity",
        "latency",
    ]
    list_filter = [
        ("collection", admin.RelatedOnlyFieldListFilter),
        "is_declined",
        FeedbackFilter,
        "created",
        "handled",
    ]
    list_select_related = ["collection", "user"]
    search_fields = ["question", "answer", "note", "user__username"]
    date_hierarchy = "created"
    exclude = ["embedding", "citations", "retrieved"]
    readonly_fields = ["replay_link", "given", "cited", "sections"]

    @admin.display(description=gettext_lazy("Feedback"), ordering="is_helpful")
    def feedback(self, obj: Question) -> str:
        return obj.feedback

    @admin.display(
        description=gettext_lazy("Top similarity"), ordering="top_similarity"
    )
    def similarity(self, obj: Question) -> str:
        return "-" if obj.top_similarity is None else f"{obj.top_similarity:.2f}"

    @admin.display(description=gettext_lazy("ms"), ordering="latency_ms")
    def latency(self, obj: Question) -> str:
        return f"{obj.latency_ms:.0f}"

    @admin.display(description=gettext_lazy("Replay"))
    def replay_link(self, obj: Question) -> str:
        url = reverse("admin:kb_question_replay", args=[obj.pk])
        return format_html('<a href="{}">Answer it again on the current index</a>', url)

    @admin.display(description=gettext_lazy("Answer as shown"))
    def given(self, obj: Question) -> str:
        return render_to_string(
            "kb/_answer.html", {"parts": questions.answer_parts(obj)}
        )

    @admin.display(description=gettext_lazy("Citations (text as cited then)"))
    def cited(self, obj: Question) -> str:
        return render_to_string(
            "admin/kb/question/_citations.html", {"citations": obj.citations}
        )

    @admin.display(description=gettext_lazy("Retrieved sections"))
    def sections(self, obj: Question) -> str:
        return render_to_string(
            "admin/kb/question/_retrieved.html", {"retrieved": obj.retrieved}
        )


@admin.register(ReplayReport)
class ReplayReportAdmin(ReadOnly, CollectionScoped, admin.ModelAdmin):
    """Logged questions answered again after a re-index (kb.questions)."""

    list_display = ["__str__", "status", "replayed", "changed_count", "created"]
    list_filter = ["status", ("collection", admin.RelatedOnlyFieldListFilter)]
    exclude = ["changed"]
    readonly_fields = [
        "collection",
        "status",
        "replayed",
        "error",
        "created",
        "finished",
        "changed_answers",
    ]

    @admin.display(description=gettext_lazy("Changed answers"))
    def changed_count(self, obj: ReplayReport) -> int:
        return len(obj.changed)

    @admin.display(description=gettext_lazy("Answers whose citations changed"))
    def changed_answers(self, obj: ReplayReport) -> str:
        return render_to_string(
            "admin/kb/question/_report.html", {"changed": obj.changed}
        )


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Superusers only. Tokens are made by `kb_token USERNAME`, which prints the
    secret once; only its hash is stored, so no page can show it."""

    list_display = [
        "name",
        "user",
        "created",
        "last_used",
        "expires",
        "revoked",
        "state",
    ]
    list_filter = ["revoked", "expires"]
    list_select_related = ["user"]
    search_fields = ["name", "user__username"]
    fields = ["name", "user", "created", "last_used", "expires", "revoked", "state"]
    readonly_fields = ["user", "created", "last_used", "revoked", "state"]
    actions = ["revoke"]

    @admin.display(description=gettext_lazy("State"))
    def state(self, obj: ApiToken) -> str:
        return obj.state()

    @admin.action(description=gettext_lazy("Revoke selected tokens"))
    def revoke(self, request: HttpRequest, queryset) -> None:
        from kb import access

        count = access.revoke(queryset)
        self.message_user(
            request, gettext("Revoked %(count)d token(s).") % {"count": count}
        )

    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_add_permission(self, request) -> bool:
        return False


RECENT_RUNS = 20  # runs shown on a sync source's page; all in the sync runs list

_RUN_COLUMNS = [
    "started",
    "status",
    "seen",
    "added",
    "changed",
    "renamed",
    "deleted",
    "unchanged",
    "chunks_embedded",
    "chunks_reused",
]


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnly, CollectionScoped, admin.ModelAdmin):
    """The sync log: every run, what it found and did, and its failures."""

    collection_path = "sync_source__collection"
    list_display = [*_RUN_COLUMNS, "failures", "seconds"]
    list_filter = ["status", ("sync_source", admin.RelatedOnlyFieldListFilter)]
    exclude = ["log", "failed"]
    readonly_fields = ["failures", "files"]

    @admin.display(description=gettext_lazy("Failed"))
    def failures(self, obj: SyncRun) -> str:
        return format_html_join(
            "", "<div>{}: {}</div>", ((f["path"], f["reason"]) for f in obj.failed)
        )

    @admin.display(description=gettext_lazy("Files"))
    def files(self, obj: SyncRun) -> str:
        return format_html_join(
            "", "<div>{}: {}</div>", ((e["path"], e["outcome"]) for e in obj.log)
        )


@admin.register(SyncSource)
class SyncSourceAdmin(CollectionScoped, admin.ModelAdmin):
    """Git repositories and server folders kept in step with a collection
    (kb.sync, issue #30)."""

    form = SyncSourceForm
    list_display = [
        "name",
        "collection",
        "kind",
        "location",
        "schedule",
        "last_run_status",
        "last_success",
    ]
    list_filter = ["kind", ("collection", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["name", "location"]
    readonly_fields = [
        "seen",
        "created",
        "token_stored",
        "deploy_key_stored",
        "freshness",
        "recent_runs",
    ]
    actions = ["sync_now"]

    @admin.display(description=gettext_lazy("Token"))
    def token_stored(self, obj: SyncSource) -> str:
        return gettext("stored, encrypted") if obj.token_sealed else gettext("none")

    @admin.display(description=gettext_lazy("Deploy key"))
    def deploy_key_stored(self, obj: SyncSource) -> str:
        """The stored key's public line, to add to the repository's deploy keys."""
        if not obj.deploy_key_sealed:
            return gettext("none")
        return format_html(
            "{}<br><code style='word-break: break-all'>{}</code>",
            gettext("stored, encrypted; its public key:"),
            obj.deploy_key_public,
        )

    @admin.display(description=gettext_lazy("Schedule"))
    def schedule(self, obj: SyncSource) -> str:
        if not obj.every_minutes:
            return gettext("manual")
        return gettext("every %(minutes)d min") % {"minutes": obj.every_minutes}

    @admin.display(description=gettext_lazy("Last run"))
    def last_run_status(self, obj: SyncSource) -> str:
        run = obj.last_run()
        if run is None:
            return gettext("never")
        label = run.get_status_display()
        if run.failed:
            label += " " + ngettext(
                "(%(count)d file failed)", "(%(count)d files failed)", len(run.failed)
            ) % {"count": len(run.failed)}
        return label

    @admin.display(description=gettext_lazy("Last success"))
    def last_success(self, obj: SyncSource) -> str:
        run = obj.last_success()
        return formats.localize(run.started) if run else gettext("never")

    @admin.display(description=gettext_lazy("Freshness"))
    def freshness(self, obj: SyncSource) -> str:
        run = obj.last_success()
        if run is None:
            return gettext("Never synced.")
        text = gettext("Last synced %(when)s") % {
            "when": formats.localize(run.finished or run.started)
        }
        if run.seen:
            text += " " + gettext("at commit %(commit)s") % {"commit": run.seen[:12]}
        if commits := sync_runs.behind(obj):
            text += ". " + ngettext(
                "The origin has %(count)d newer commit, not synced yet.",
                "The origin has %(count)d newer commits, not synced yet.",
                commits,
            ) % {"count": commits}
        if files := sync_runs.folder_changes(obj):
            text += ". " + ngettext(
                "%(count)d file in the folder changed since, not synced yet.",
                "%(count)d files in the folder changed since, not synced yet.",
                files,
            ) % {"count": files}
        return text

    @admin.display(description=gettext_lazy("Recent runs"))
    def recent_runs(self, obj: SyncSource) -> str:
        runs = obj.runs.order_by("-started")[:RECENT_RUNS]
        head = format_html_join(
            "",
            "<th>{}</th>",
            ((SyncRun._meta.get_field(c).verbose_name,) for c in _RUN_COLUMNS),
        )
        rows = format_html_join(
            "",
            "<tr><td><a href='{}'>{}</a></td><td>{}</td>{}</tr>",
            (
                (
                    reverse("admin:kb_syncrun_change", args=[run.pk]),
                    formats.localize(run.started),
                    run.get_status_display() + (f": {run.error}" if run.error else ""),
                    format_html_join(
                        "",
                        "<td>{}</td>",
                        ((getattr(run, c),) for c in _RUN_COLUMNS[2:]),
                    ),
                )
                for run in runs
            ),
        )
        return format_html("<table><tr>{}</tr>{}</table>", head, rows)

    @admin.action(description=gettext_lazy("Sync now"))
    def sync_now(self, request, queryset) -> None:
        for sync in queryset:
            sync_runs.queue(sync)
        self.message_user(
            request,
            ngettext(
                "%(count)d sync queued; its log is on its page.",
                "%(count)d syncs queued; their logs are on their pages.",
                queryset.count(),
            )
            % {"count": queryset.count()},
            messages.SUCCESS,
        )
