from __future__ import annotations

from django.contrib import admin
from django.db.models import Count

from kb.models import Chunk, Collection, EvalRun, GoldenCase, Section, Source


@admin.register(Collection)
class CollectionAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "chunk_strategy",
        "chunk_tokens",
        "chunk_overlap",
        "top_k",
        "context_budget",
        "retrieval_mode",
        "source_count",
        "is_index_stale",
    ]
    list_filter = ["is_scratch", "chunk_strategy"]
    search_fields = ["name", "description"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(n_sources=Count("sources"))

    @admin.display(description="Sources", ordering="n_sources")
    def source_count(self, obj: Collection) -> int:
        return obj.n_sources


@admin.register(Source)
class SourceAdmin(admin.ModelAdmin):
    list_display = ["title", "collection", "file_name", "status", "indexed", "updated"]
    list_filter = ["status", "collection"]
    list_select_related = ["collection"]
    search_fields = ["title", "file_name"]
    readonly_fields = ["content_hash", "status", "error", "progress", "indexed"]


@admin.register(Section)
class SectionAdmin(admin.ModelAdmin):
    list_display = ["heading_path", "source", "level", "order", "start", "end"]
    list_filter = ["source__collection"]
    list_select_related = ["source"]
    search_fields = ["heading_path"]
    raw_id_fields = ["source", "parent"]


@admin.register(Chunk)
class ChunkAdmin(admin.ModelAdmin):
    list_display = ["__str__", "kind", "token_count", "start", "end", "section"]
    list_filter = ["kind", "source__collection"]
    list_select_related = ["source", "section"]
    raw_id_fields = ["source", "section"]
    show_full_result_count = False
    exclude = ["embedding"]


@admin.register(GoldenCase)
class GoldenCaseAdmin(admin.ModelAdmin):
    list_display = ["external_id", "question", "kind", "collection"]
    list_filter = ["kind", "collection"]
    search_fields = ["question", "external_id"]


@admin.register(EvalRun)
class EvalRunAdmin(admin.ModelAdmin):
    list_display = ["__str__", "status", "recall", "created", "finished"]
    list_filter = ["status", "collection"]
