from __future__ import annotations

import functools

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
    QueryDict,
)
from django.middleware.csrf import CsrfViewMiddleware
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from kb import (
    access,
    answering,
    citations,
    questions,
    ratelimit,
    readers,
    retrieval,
)
from kb.forms import AskForm, FeedbackForm, is_utf8, parse_id
from kb.jsontext import JsonError, loads
from kb.models import Collection, Source

FILE_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}


@staff_member_required
@never_cache
def ask(request: HttpRequest) -> HttpResponse:
    # Asked when the question is in the query string; other parameters (a
    # bookmark's utm_source, a collection to preselect) ask nothing.
    asked = "q" in request.GET
    initial = {"collection": request.GET.get("collection", "")}
    form = AskForm(request.GET if asked else None, user=request.user, initial=initial)
    context = {"form": form}
    status, wait = 200, 0
    if asked and not form.is_valid():
        status = 400
    elif asked:
        # Only a question that could be asked counts towards the limit.
        if wait := ratelimit.question_wait(request.user, request):
            context["limited"] = ratelimit.question_message(wait)
            status = 429
        else:
            status = _answer(request, form, context)
    context["history"] = questions.history(request.user)  # with this question
    response = render(request, "kb/ask.html", context, status=status)
    if wait:
        response["Retry-After"] = str(wait)
    return response


def _answer(request: HttpRequest, form: AskForm, context: dict) -> int:
    """Answer the form's question into the ask page's context; the status."""
    collection = form.cleaned_data["collection"]
    try:
        result, reply = answering.ask(collection, form.cleaned_data["q"])
    except retrieval.QuestionError as exc:
        form.add_error("q", str(exc))
        return 400
    entry = questions.log(request.user, collection, result, reply)
    context.update(
        result=result,
        answer=reply,
        collection=collection,
        entry=entry,
        feedback=FeedbackForm(),
    )
    return 200


class BadRequest(ValueError):
    """The API request cannot be answered as sent; the message says why."""


def _json_api(view):
    """A JSON endpoint for a bearer token or a staff session (_api_user): `view`
    gets the user and the body's JSON object, and a BadRequest it raises is
    answered 400 with its message."""

    @functools.wraps(view)
    def checked(request: HttpRequest) -> JsonResponse:
        user, refusal = _api_user(request)
        if refusal is not None:
            return refusal
        try:
            return view(request, user, _json_object(request.body))
        except BadRequest as exc:
            return JsonResponse({"error": str(exc)}, status=400)

    return checked


@csrf_exempt  # token requests carry no cookie; session requests are checked
@require_POST
@never_cache
@_json_api
def api_ask(request: HttpRequest, user, payload: dict) -> JsonResponse:
    question = payload.get("question", "")
    if not isinstance(question, str):
        raise BadRequest(gettext('"question" must be a string.'))
    try:
        retrieval.clean_question(question)
    except retrieval.QuestionError as exc:
        raise BadRequest(str(exc)) from None
    collection = _collection_for(user, payload.get("collection"))
    if collection is None:
        return JsonResponse(
            {"error": gettext("No such collection for this user.")}, status=404
        )
    # Only a question that could be asked counts towards the limit.
    if (refusal := _over_limit(user, request)) is not None:
        return refusal
    try:
        result, reply = answering.ask(collection, question)
    except retrieval.QuestionError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    shown = answering.as_json(result, reply)
    if entry := questions.log(user, collection, result, reply):
        shown = {"id": entry.pk, **shown}
    return JsonResponse(shown)


@csrf_exempt  # as api_ask
@require_POST
@never_cache
@_json_api
def api_feedback(request: HttpRequest, user, payload: dict) -> JsonResponse:
    if (refusal := _over_limit(user, request)) is not None:
        return refusal
    try:
        questions.record_feedback(
            user, payload.get("id"), payload.get("helpful"), payload.get("note", "")
        )
    except questions.FeedbackError as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
    return JsonResponse({"ok": True})


def _api_user(request: HttpRequest):
    """The asking user and None, or None and the JSON refusal: a bearer token or a
    staff session (with its CSRF token)."""
    user = access.token_user(request) if access.has_bearer(request) else request.user
    if user is None or not user.is_authenticated:
        return None, JsonResponse(
            {"error": gettext("Authentication required.")}, status=401
        )
    if not access.has_bearer(request) and _csrf_failure(request):
        return None, JsonResponse({"error": gettext("CSRF check failed.")}, status=403)
    if not user.is_staff:  # as on the ask page, which sends them to the login
        return None, JsonResponse(
            {"error": gettext("Only staff users may ask.")}, status=403
        )
    return user, None


def _over_limit(user, request: HttpRequest) -> JsonResponse | None:
    """Count a request (body read as JSON) towards the question rate limit; the
    429 refusal when it is over."""
    if wait := ratelimit.question_wait(user, request):
        error = {"error": ratelimit.question_message(wait)}
        return JsonResponse(error, status=429, headers={"Retry-After": str(wait)})
    return None


@staff_member_required
@never_cache
def question(request: HttpRequest, pk: int) -> HttpResponse:
    """One of the user's own logged answers, as given, with its feedback form."""
    entry = get_object_or_404(questions.history_of(request.user), pk=pk)
    form = FeedbackForm(initial={"helpful": _helpful_choice(entry), "note": entry.note})
    return _question_page(request, entry, form)


def _question_page(request: HttpRequest, entry, form, status: int = 200):
    context = {"entry": entry, "parts": questions.answer_parts(entry), "feedback": form}
    return render(request, "kb/question.html", context, status=status)


@staff_member_required
@require_POST
def feedback(request: HttpRequest, pk: int) -> HttpResponse:
    entry = get_object_or_404(questions.history_of(request.user), pk=pk)
    form = FeedbackForm(request.POST)
    if not form.is_valid():
        return _question_page(request, entry, form, status=400)
    questions.record_feedback(
        request.user, entry.pk, form.cleaned_data["helpful"], form.cleaned_data["note"]
    )
    messages.success(request, gettext("Thank you: your feedback is recorded."))
    return redirect("kb:question", pk=entry.pk)


def _helpful_choice(entry) -> str:
    return {True: "yes", False: "no"}.get(entry.is_helpful, "")


def _csrf_failure(request: HttpRequest) -> bool:
    check = CsrfViewMiddleware(lambda r: HttpResponse())
    return check.process_view(request, None, (), {}) is not None


def _json_object(body: bytes) -> dict:
    try:
        payload = loads(body or b"{}")
    except JsonError as exc:
        raise BadRequest(gettext("The body %(problem)s.") % {"problem": exc}) from None
    if not isinstance(payload, dict):
        raise BadRequest(gettext("The body must be a JSON object."))
    return payload


def _collection_for(user, ref) -> Collection | None:
    """The visible collection `ref` names by id or name; None if there is none.

    Without `ref`, the user's only collection (as on the ask page), else BadRequest.
    """
    visible = Collection.objects.visible_to(user)
    if ref is None or ref == "":
        if visible.count() == 1:
            return visible.first()
        raise BadRequest('"collection" is required: a collection name or id.')
    if isinstance(ref, int) and not isinstance(ref, bool):
        return visible.filter(pk=ref).first()
    if not isinstance(ref, str):
        raise BadRequest('"collection" must be a collection name or id.')
    if (pk := parse_id(ref)) is not None:
        return visible.filter(pk=pk).first()
    if ref.isascii() and ref.isdigit():
        raise BadRequest('"collection" is no collection id: too many digits.')
    if not is_utf8(ref):
        raise BadRequest('"collection" holds a lone surrogate (such as \\ud800).')
    if "\x00" in ref:  # PostgreSQL cannot compare it, and no name holds one
        return None
    return visible.filter(name=ref).first()


@staff_member_required
@never_cache  # source text: never kept in a browser's or a proxy's cache
def section(request: HttpRequest, pk: int) -> HttpResponse:
    """A citation link's page (kb.citations): the section with the cited range
    marked, the section holding it now, or what is gone."""
    found = citations.resolve(request.user, pk, _citation_link(request.GET))
    if found is None:
        raise Http404
    if isinstance(found, citations.Elsewhere):
        return redirect(found.url(request.GET))
    if isinstance(found, citations.Gone):
        context = {"message": found.message}
        return render(request, "kb/section_gone.html", context, status=404)
    return render(request, "kb/section.html", found.context())


def _citation_link(query: QueryDict) -> citations.Link:
    """What a citation link's query says (citations.citation_url writes it)."""
    at_start, _, at_end = query.get("at", "").partition("-")
    at = (parse_id(at_start), parse_id(at_end))
    return citations.Link(
        start=parse_id(query.get("start")),
        end=parse_id(query.get("end")),
        source_id=parse_id(query.get("source")),
        version=parse_id(query.get("v")),
        at=None if None in at else at,
        span=_whole_numbers(query.get("start", ""), query.get("end", "")),
    )


def _whole_numbers(start: str, end: str) -> tuple[int, int] | None:
    """The range a section page marks (clamped to the section), of any sign."""
    try:
        return int(start), int(end)
    except ValueError:
        return None


@staff_member_required
@never_cache
def source_file(request: HttpRequest, pk: int) -> FileResponse:
    source = get_object_or_404(Source.objects.select_related("collection"), pk=pk)
    if not source.collection.is_visible_to(request.user) or not source.file:
        raise Http404
    # A PDF opens in the browser's viewer (citations link to #page=N); HTML is
    # shown as text, never rendered from this origin; DOCX is downloaded.
    kind = readers.format_of(source.file_name)
    return FileResponse(
        source.file.open("rb"),
        as_attachment=kind == "docx",
        filename=source.file_name.rsplit("/", 1)[-1],
        content_type=FILE_TYPES.get(kind, "text/plain; charset=utf-8"),
    )
