"""Replaying a logged question on the current index; content gaps and marking
them handled."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext, ngettext
from django.views.decorators.http import require_POST

from kb import questions
from kb.forms import GapHandledForm, readable_errors
from kb.models import Question
from kb.staff import may_view, open_to


@admin.site.admin_view
def replay(request: HttpRequest, pk: int) -> HttpResponse:
    entry = get_object_or_404(open_to(request.user, Question.objects.all()), pk=pk)
    if not may_view(request.user, Question):
        raise PermissionDenied
    context = {
        **admin.site.each_context(request),
        "title": gettext("Replay: %(question)s") % {"question": entry.question[:60]},
        "opts": Question._meta,
        "entry": entry,
        "logged_parts": questions.answer_parts(entry),
        "replay": questions.replay(entry),
    }
    return TemplateResponse(request, "admin/kb/question/replay.html", context)


def _may_curate(user) -> bool:
    """Content gaps are for editors: whoever may write golden cases."""
    return user.has_perm("kb.add_goldencase")


@admin.site.admin_view
def gaps(request: HttpRequest) -> HttpResponse:
    if not _may_curate(request.user):
        raise PermissionDenied
    context = {
        **admin.site.each_context(request),
        "title": gettext("Content gaps"),
        "opts": Question._meta,
        "gaps": questions.gaps(request.user),
        "threshold": settings.KB_GAP_SIMILARITY,
        "form": GapHandledForm(),
    }
    return TemplateResponse(request, "admin/kb/question/gaps.html", context)


@admin.site.admin_view
@require_POST
def handled(request: HttpRequest) -> HttpResponse:
    if not _may_curate(request.user):
        raise PermissionDenied
    form = GapHandledForm(request.POST)
    if not form.is_valid():
        reason = readable_errors(form)
        messages.error(request, gettext("Not marked: %(reason)s") % {"reason": reason})
        return redirect("admin:kb_question_gaps")
    count = questions.mark_handled(
        request.user, form.cleaned_data["ids"], form.cleaned_data["note"]
    )
    text = ngettext(
        "%(count)d question marked handled.",
        "%(count)d questions marked handled.",
        count,
    )
    messages.success(request, text % {"count": count})
    return redirect("admin:kb_question_gaps")
