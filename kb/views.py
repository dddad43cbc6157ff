from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from kb.models import Collection, Section


@staff_member_required
def home(request: HttpRequest) -> HttpResponse:
    collections = Collection.objects.filter(is_scratch=False).order_by("name")
    return render(request, "kb/home.html", {"collections": collections})


@staff_member_required
def section(request: HttpRequest, pk: int) -> HttpResponse:
    obj = get_object_or_404(Section.objects.select_related("source"), pk=pk)
    return render(request, "kb/section.html", {"section": obj})
