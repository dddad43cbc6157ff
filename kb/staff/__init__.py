"""Staff pages beside the admin's lists and forms: plain function views that
render in the admin's look (admin.site.each_context) and are served under their
model's admin URLs (urls.py), so their names stay admin:kb_<model>_<page>.

  sources.py       a collection's metadata policy and re-index, uploading and
                   re-indexing sources
  golden_cases.py  the span picker's texts, importing golden cases
  runs.py          the evaluation dashboard: runs, the recall floor, shadow indexes
  question_log.py  replaying a logged question, content gaps
  deleting.py      the delete pages of sources and collections: counts, bulk
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from kb.models import Collection

# The admin's pages of one row: there a scratch copy's rows are open to whoever
# may see its live collection; every other admin page leaves them out.
OBJECT_PAGES = ("_change", "_delete", "_history")


def may_view(user, model: type[Model]) -> bool:
    """The admin's view permission on a model: its view or its change permission."""
    name = model._meta.model_name
    return user.has_perm(f"kb.view_{name}") or user.has_perm(f"kb.change_{name}")


def open_to(user, rows: QuerySet, path: str = "collection") -> QuerySet:
    """The rows in collections the user may see (CollectionQuerySet.open_to), the
    admin's lists too; `path` leads from a row to its collection's id."""
    allowed = Collection.objects.open_to(user).values("pk")
    return rows.filter(**{f"{path}__in": allowed})


def admin_rows(request: HttpRequest, rows: QuerySet, path: str) -> QuerySet:
    """The rows an admin page shows the user: those open to them (open_to), and
    on lists, filters and actions none of a scratch copy (issue #26)."""
    rows = open_to(request.user, rows, path)
    match = request.resolver_match
    if match is None or not (match.url_name or "").endswith(OBJECT_PAGES):
        flag = "is_scratch" if path == "pk" else f"{path}__is_scratch"
        rows = rows.filter(**{flag: False})
    return rows


def upload_form(
    request: HttpRequest, form_class: type[forms.Form], permission: str
) -> forms.Form:
    """The page's form with what was posted, files too, offering the collections
    the user may see; PermissionDenied without `permission` ("kb.add_source")."""
    if not request.user.has_perm(permission):
        raise PermissionDenied
    form = form_class(request.POST or None, request.FILES or None)
    form.fields["collection"].queryset = Collection.objects.visible_to(request.user)
    return form


def form_page(
    request: HttpRequest,
    template: str,
    title: str,
    form: forms.Form,
    model: type[Model],
    **extra,
) -> TemplateResponse:
    """A page with a form in the admin's look: 400 on a POST (its form was
    refused, or the view would have redirected)."""
    context = {
        **admin.site.each_context(request),
        "title": title,
        "form": form,
        "opts": model._meta,
        **extra,
    }
    status = 400 if request.method == "POST" else 200
    return TemplateResponse(request, template, context, status=status)
