"""The staff pages' URLs, per model: each ModelAdmin serves its list under its own
admin URLs (kb/admin.py StaffPages), so the paths stay admin/kb/<model>/<page>/
and the names admin:kb_<model>_<page>. Every view checks its own permissions."""

from __future__ import annotations

from django.urls import path

from kb.staff import golden_cases, question_log, runs, sources

COLLECTION = [
    path("<int:pk>/policy/", sources.policy, name="kb_collection_policy"),
    path(
        "<int:pk>/reindex/",
        sources.reindex_collection,
        name="kb_collection_reindex",
    ),
]
SOURCE = [
    path("upload/", sources.upload, name="kb_source_upload"),
    # The admin's add page is the upload page (too many files refused on it too).
    path("add/", sources.upload, name="kb_source_add"),
    path("<int:pk>/reindex/", sources.reindex_source, name="kb_source_reindex"),
]
GOLDEN_CASE = [
    path("import/", golden_cases.import_cases, name="kb_goldencase_import"),
    path("sources/", golden_cases.span_sources, name="kb_goldencase_sources"),
]
EVAL_RUN = [
    path("dashboard/", runs.evaluation_dashboard, name="kb_evalrun_dashboard"),
    path("dashboard/run/", runs.run, name="kb_evalrun_run"),
    path("<int:pk>/floor/", runs.floor, name="kb_evalrun_floor"),
    path("shadow/<int:pk>/approve/", runs.approve_shadow, name="kb_shadow_approve"),
    path("shadow/<int:pk>/discard/", runs.discard_shadow, name="kb_shadow_discard"),
]
QUESTION = [
    path("<int:pk>/replay/", question_log.replay, name="kb_question_replay"),
    path("gaps/", question_log.gaps, name="kb_question_gaps"),
    path("gaps/handled/", question_log.handled, name="kb_question_handled"),
]
