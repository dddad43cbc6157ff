"""A collection's metadata policy and re-index; uploading and re-indexing sources."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext, gettext_lazy, ngettext
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from kb import index_config, multipart, permissions, queueing, reindexing, uploads
from kb.forms import PolicyForm, SourceUploadForm
from kb.models import Chunk, Collection, ShadowIndex, Source
from kb.staff import form_page, open_to, upload_form


@admin.site.admin_view
def policy(request: HttpRequest, pk: int) -> HttpResponse:
    collection = get_object_or_404(Collection.objects.visible_to(request.user), pk=pk)
    if not permissions.can_change_policy(request.user):
        raise PermissionDenied(permissions.POLICY_REFUSED)
    current = index_config.policy_for(collection)
    form = PolicyForm(request.POST or None, policy=current)
    if request.method == "POST" and form.is_valid():
        if form.cleaned_data != current.decisions:
            shadow = reindexing.set_metadata_policy(
                collection, form.cleaned_data, request.user
            )
            shadow_message(request, shadow, "metadata policy")
        return redirect("admin:kb_collection_policy", pk=pk)
    context = {
        **admin.site.each_context(request),
        "title": gettext("Metadata policy: %(collection)s")
        % {"collection": collection},
        "collection": collection,
        "form": form,
        "opts": Collection._meta,
        "example": _example_chunk(collection),
    }
    return TemplateResponse(request, "admin/kb/collection/policy.html", context)


# What became of changed settings, for each `what` shadow_message is given:
# unchanged index, failed shadow, shadow building (whole sentences, to translate).
SHADOW_MESSAGES = {
    "chunking settings": (
        gettext_lazy("The chunking settings apply as set: no index to rebuild."),
        gettext_lazy("The new chunking settings are not applied: %(error)s."),
        gettext_lazy(
            "The new chunking settings are being built as shadow index %(pk)s beside "
            "the live one, which answers until the shadow holds on the golden set "
            "and swaps in (evaluation dashboard)."
        ),
    ),
    "metadata policy": (
        gettext_lazy("The metadata policy applies as set: no index to rebuild."),
        gettext_lazy("The new metadata policy is not applied: %(error)s."),
        gettext_lazy(
            "The new metadata policy is being built as shadow index %(pk)s beside "
            "the live one, which answers until the shadow holds on the golden set "
            "and swaps in (evaluation dashboard)."
        ),
    ),
}


def shadow_message(request: HttpRequest, shadow: ShadowIndex | None, what: str):
    """Tell what became of changed settings (kb/reindexing.py start); `what`
    names them ("chunking settings", "metadata policy": SHADOW_MESSAGES)."""
    unchanged, failed, building = SHADOW_MESSAGES[what]
    if shadow is None:
        messages.info(request, unchanged)
    elif shadow.status == ShadowIndex.Status.FAILED:
        messages.error(request, failed % {"error": shadow.error})
    else:
        messages.info(request, building % {"pk": shadow.pk})


def _example_chunk(collection: Collection) -> Chunk | None:
    return (
        Chunk.objects.filter(source__collection=collection)
        .select_related("source")
        .order_by("source_id", "chunk_index")
        .first()
    )


@admin.site.admin_view
@require_POST
def reindex_collection(request: HttpRequest, pk: int) -> HttpResponse:
    collection = get_object_or_404(Collection.objects.visible_to(request.user), pk=pk)
    if not permissions.can_change_policy(request.user):
        raise PermissionDenied
    with transaction.atomic():
        count, queued = queueing.requeue_collection(collection)
    note = _waiting(queued)
    text = ngettext(
        "Re-indexing %(count)d source of %(collection)s%(note)s.",
        "Re-indexing %(count)d sources of %(collection)s%(note)s.",
        count,
    )
    messages.success(
        request, text % {"count": count, "collection": collection, "note": note}
    )
    return redirect("admin:kb_source_changelist")


def requeue(sources) -> tuple[int, str]:
    """Queue the sources again; returns how many, and "" or why they wait."""
    count, queued = queueing.requeue(sources)
    return count, _waiting(queued)


def reindex_message(what: str, note: str) -> str:
    """What an editor is told after asking for a re-index (`note`: requeue's)."""
    if note:  # the queue is down: recorded, not queued (issue #26)
        return gettext(
            "%(what)s: re-indexing recorded; it will be queued when the queue is "
            "back (within a minute of it)."
        ) % {"what": what}
    return gettext("Queued %(what)s for re-indexing.") % {"what": what}


def _waiting(queued: bool) -> str:
    return "" if queued else f" ({queueing.QUEUE_DOWN})"


@admin.site.admin_view
def upload(request: HttpRequest) -> HttpResponse:
    form = upload_form(request, SourceUploadForm, "kb.add_source")
    if request.method == "POST":
        form.refuse_names(multipart.dropped_names(request))
    if request.method == "POST" and form.is_valid():
        for name, outcome in _store_uploads(form):
            messages.info(request, f"{name}: {outcome}")
        for reason in form.refused:  # the others are stored (issue #26)
            reason = reason.rstrip(".")
            messages.error(
                request, gettext("Not stored: %(reason)s.") % {"reason": reason}
            )
        return redirect("admin:kb_source_changelist")
    return _upload_page(request, form)


@csrf_exempt  # its body unread (RequestLimitsMiddleware), it stores nothing
def _refused_upload(request: HttpRequest, message: str) -> HttpResponse:
    """The upload page again with `message` under the files (400), for an upload
    refused before its fields were read: what was chosen is not shown again."""
    form = upload_form(request, SourceUploadForm, "kb.add_source")
    form.refuse_files(message)
    return _upload_page(request, form)


def _upload_page(request: HttpRequest, form: SourceUploadForm) -> HttpResponse:
    return form_page(
        request,
        "admin/kb/source/upload.html",
        gettext("Upload sources"),
        form,
        Source,
        max_bytes=settings.KB_MAX_UPLOAD_BYTES,
    )


upload.refused_upload = admin.site.admin_view(_refused_upload)


def _store_uploads(form: SourceUploadForm) -> list[tuple[str, str]]:
    outcomes = []
    with uploads.storing():  # all files or none, on disk too
        for checked in form.cleaned_data["files"]:  # checked by the form
            source, outcome = uploads.store_checked(
                form.cleaned_data["collection"],
                checked,
                title=form.cleaned_data.get("title", ""),
                metadata=form.metadata_changes(),
                replace=form.cleaned_data.get("replace", False),
            )
            if outcome == "unchanged" and source.status == Source.Status.FAILED:
                # Uploading it again is how editors retry (a full queue, a limit).
                _, waiting = requeue([source])
                outcome = (
                    "same content as the stored version, whose indexing failed: "
                    f"queued again{waiting}"
                )
            elif outcome == "unchanged":
                outcome = "same content as the stored version; not re-indexed"
            elif queueing.enqueue_ingest(source):
                outcome = f"{outcome}, queued for indexing"
            else:
                outcome = f"{outcome}: {queueing.QUEUE_DOWN}"
            outcomes.append((checked.file_name, outcome))
    return outcomes


@admin.site.admin_view
@require_POST
def reindex_source(request: HttpRequest, pk: int) -> HttpResponse:
    source = get_object_or_404(open_to(request.user, Source.objects.all()), pk=pk)
    if not request.user.has_perm("kb.change_source"):
        raise PermissionDenied
    with transaction.atomic():
        _, note = requeue([source])
    messages.success(request, reindex_message(str(source), note))
    return redirect("admin:kb_source_change", source.pk)
