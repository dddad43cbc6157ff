"""The evaluation dashboard and what it posts: start a run, raise the recall
floor from one, approve or discard a shadow index."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
    QueryDict,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import formats
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from kb import dashboard, evaluation, jobs, permissions, reindexing
from kb.forms import EvalRunForm, readable_errors
from kb.models import Collection, EvalRun, ShadowIndex
from kb.staff import may_view, open_to


@admin.site.admin_view
def evaluation_dashboard(request: HttpRequest) -> HttpResponse:
    if not may_view(request.user, EvalRun):
        raise PermissionDenied
    try:
        shown = dashboard.context(request.GET, request.user)
    except dashboard.BadParameter as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain")
    return _dashboard_page(request, shown)


def _dashboard_page(request: HttpRequest, shown: dict, status: int = 200):
    context = {
        **admin.site.each_context(request),
        **shown,
        "title": gettext("Retrieval evaluation"),
        "opts": EvalRun._meta,
        "can_run": permissions.can_change_policy(request.user),
    }
    template = "admin/kb/evalrun/dashboard.html"
    return TemplateResponse(request, template, context, status=status)


def _to_dashboard(collection_id: int, anchor: str = "") -> HttpResponse:
    url = reverse("admin:kb_evalrun_dashboard")
    return HttpResponseRedirect(f"{url}?collection={collection_id}{anchor}")


@admin.site.admin_view
@require_POST
def run(request: HttpRequest) -> HttpResponse:
    if not permissions.can_change_policy(request.user):
        raise PermissionDenied
    form = EvalRunForm(request.POST)
    form.fields["collection"].queryset = Collection.objects.visible_to(request.user)
    form.fields["collection"].error_messages["invalid_choice"] = gettext(
        "There is no collection %(value)s that you may see."
    )
    if not form.is_valid():  # the dashboard again, with what was typed
        params = QueryDict(mutable=True)
        params["collection"] = request.POST.get("collection", "")
        try:
            shown = dashboard.context(params, request.user)
        except dashboard.BadParameter as exc:  # as the dashboard's own GET says it
            return HttpResponseBadRequest(
                gettext("Not started: %(reason)s") % {"reason": exc},
                content_type="text/plain",
            )
        reason = readable_errors(form)
        messages.error(request, gettext("Not started: %(reason)s") % {"reason": reason})
        return _dashboard_page(request, {**shown, "form": form}, status=400)
    collection = form.cleaned_data["collection"]
    with transaction.atomic():
        started = evaluation.start_run(collection, form.overrides())
        jobs.enqueue_evaluation(started)
    messages.success(
        request,
        gettext("Evaluation run %(pk)s of %(collection)s queued.")
        % {"pk": started.pk, "collection": collection},
    )
    return _to_dashboard(collection.pk)


@admin.site.admin_view
@require_POST
def floor(request: HttpRequest, pk: int) -> HttpResponse:
    if not permissions.can_change_policy(request.user):
        raise PermissionDenied
    chosen = get_object_or_404(open_to(request.user, EvalRun.objects.all()), pk=pk)
    if evaluation.is_experiment(chosen):
        messages.warning(
            request, gettext("Only a run of the live configuration sets the floor.")
        )
    elif evaluation.raise_floor(chosen.collection, chosen):
        recall = formats.number_format(chosen.recall, 3)
        answers = evaluation.answer_rate(chosen.aggregate)
        if answers is None:
            text = gettext("Recall floor raised to %(recall)s.") % {"recall": recall}
        else:
            text = gettext(
                "Floor raised: recall %(recall)s, answers quoting every span "
                "%(answers)s."
            ) % {"recall": recall, "answers": formats.number_format(answers, 3)}
        messages.success(request, text)
    else:
        messages.warning(
            request, gettext("The floor is only ever raised; left as it was.")
        )
    return _to_dashboard(chosen.collection_id)


@admin.site.admin_view
@require_POST
def approve_shadow(request: HttpRequest, pk: int) -> HttpResponse:
    """Swapping in a shadow the gate held (below the bar) takes a second POST
    from a page that shows what it loses, as deleting does in the admin."""
    if request.POST.get("confirmed") != "yes":
        return _confirm_approval(request, pk)
    return _decide_shadow(
        request,
        pk,
        reindexing.approve,
        gettext("Shadow index %(pk)s approved: swapping it in."),
        gettext("Shadow index %(pk)s is not held; left as it is."),
    )


@admin.site.admin_view
@require_POST
def discard_shadow(request: HttpRequest, pk: int) -> HttpResponse:
    return _decide_shadow(
        request,
        pk,
        reindexing.discard,
        gettext("Shadow index %(pk)s discarded; live unchanged."),
        gettext("Shadow index %(pk)s is live or already gone; left as it is."),
    )


def _shadow_for(request: HttpRequest, pk: int) -> ShadowIndex:
    """The shadow index `pk`, for an admin who sees its collection (else 403/404)."""
    if not permissions.can_change_policy(request.user):
        raise PermissionDenied
    allowed = Collection.objects.visible_to(request.user)
    return get_object_or_404(ShadowIndex, pk=pk, collection__in=allowed)


def _confirm_approval(request: HttpRequest, pk: int) -> HttpResponse:
    shadow = _shadow_for(request, pk)
    if shadow.status != ShadowIndex.Status.HELD:
        message = gettext("Shadow index %(pk)s is not held; left as it is.")
        messages.warning(request, message % {"pk": pk})
        return _to_dashboard(shadow.collection_id, "#shadows")
    context = {
        **admin.site.each_context(request),
        "title": gettext("Swap shadow index #%(pk)s into live?") % {"pk": pk},
        "opts": EvalRun._meta,
        "shadow": shadow,
        "changes": reindexing.changed_settings(shadow),
    }
    return TemplateResponse(request, "admin/kb/evalrun/approve_shadow.html", context)


def _decide_shadow(
    request: HttpRequest,
    pk: int,
    decide: Callable[[ShadowIndex, Any], bool],
    done: str,
    too_late: str,
) -> HttpResponse:
    """Approve or discard a shadow index (`decide`); the message says it is `done`,
    or why it was `too_late` to (it is no longer held): texts with %(pk)s."""
    shadow = _shadow_for(request, pk)
    if decide(shadow, request.user):
        messages.success(request, done % {"pk": pk})
    else:
        messages.warning(request, too_late % {"pk": pk})
    return _to_dashboard(shadow.collection_id, "#shadows")
