"""The span picker's source texts and importing golden cases (JSON Lines)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext

from kb import golden
from kb.forms import GoldenImportForm, parse_id
from kb.models import Collection, GoldenCase, Source
from kb.staff import form_page, may_view, upload_form


@admin.site.admin_view
def span_sources(request: HttpRequest) -> JsonResponse:
    """The span picker's texts: every source of one collection with text, as
    stored."""
    if not may_view(request.user, GoldenCase):
        raise PermissionDenied
    pk = parse_id(request.GET.get("collection", ""))
    if pk is None:
        return JsonResponse(
            {"error": "collection must be a collection id (digits 0-9)."},
            status=400,
        )
    visible = Collection.objects.open_to(request.user)
    collection = get_object_or_404(visible, pk=pk)
    # A source whose reading failed has no text a span could point into, and one
    # that failed and was never indexed is in no index a run could cover it in.
    sources = (
        collection.sources.exclude(text="")
        .exclude(status=Source.Status.FAILED, indexed_version__isnull=True)
        .order_by("file_name")
        .values("file_name", "text")
    )
    return JsonResponse(
        {"sources": [{"file": s["file_name"], "text": s["text"]} for s in sources]}
    )


@admin.site.admin_view
def import_cases(request: HttpRequest) -> HttpResponse:
    form = upload_form(request, GoldenImportForm, "kb.add_goldencase")
    if request.method == "POST" and form.is_valid():
        collection = form.cleaned_data["collection"]
        try:
            report = golden.import_cases(collection, form.cleaned_data["file"])
        except golden.GoldenImportError as exc:
            form.add_error("file", str(exc))
        else:
            messages.success(request, golden.import_summary(collection, report))
            for note in report["ignored"][:20]:
                messages.warning(request, note)
            return redirect("admin:kb_goldencase_changelist")
    template = "admin/kb/goldencase/import.html"
    return form_page(
        request, template, gettext("Import golden cases"), form, GoldenCase
    )
