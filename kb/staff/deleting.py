"""The admin's delete pages and action for sources and collections: counts of
what goes with them instead of a list of every row, and deletion in a few
statements (kb/deletion.py; issue #26)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import capfirst

from kb import deletion


class BulkDelete:
    """A ModelAdmin mixin. `bulk_delete` deletes a queryset of the model (a function
    of kb/deletion.py); `owned` are the models deleted with a row whatever the
    user's permissions on them."""

    bulk_delete: staticmethod  # e.g. staticmethod(deletion.delete_sources)
    owned: tuple[type[Model], ...] = ()

    def get_deleted_objects(self, objs, request: HttpRequest):
        """What the delete confirmation shows: the rows chosen, the number of
        rows of each model deleted with them, the models the user may not
        delete rows of; nothing is protected (no PROTECT foreign keys)."""
        if not isinstance(objs, QuerySet):
            objs = self.get_queryset(request).filter(pk__in=[obj.pk for obj in objs])
        counts = deletion.cascade_counts(objs)
        needed = {
            model._meta.verbose_name
            for model, count in counts.items()
            if count and model not in self.owned and not _may_delete(request, model)
        }
        named = {m._meta.verbose_name_plural: n for m, n in counts.items() if n}
        return [self._chosen(obj) for obj in objs], named, needed, []

    def _chosen(self, obj: Model) -> str:
        opts = obj._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
        return format_html(
            '{}: <a href="{}">{}</a>', capfirst(opts.verbose_name), url, obj
        )

    def delete_model(self, request: HttpRequest, obj: Model) -> None:
        self.bulk_delete(self.model._base_manager.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        self.bulk_delete(queryset)


def _may_delete(request: HttpRequest, model: type[Model]) -> bool:
    """The delete permission of the model's admin, as Django's delete page asks
    it (a model without an admin page is not asked)."""
    try:
        model_admin = admin.site.get_model_admin(model)
    except NotRegistered:
        return True
    return model_admin.has_delete_permission(request)
