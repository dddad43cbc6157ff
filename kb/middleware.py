"""Request guards: body size caps before anything reads a body, and JSON answers
for every failure under /api/ (issue #15); small form bodies everywhere but on
a source's text edit by an editor (issue #26)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFilesSent
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.template.defaultfilters import filesizeformat
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.translation import gettext, gettext_lazy
from redis.exceptions import ConnectionError as RedisConnectionError

from kb import multipart

# filesizeformat writes a no-break space: the charset must be said.
PLAIN = "text/plain; charset=utf-8"

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
# A question is at most 2,000 characters (retrieval.MAX_QUESTION_CHARS): even
# written as \uXXXX escapes it is 12 KB of JSON.
API_MAX_BODY_BYTES = 64 * 1024
RETRY_AFTER_S = 30
URLENCODED = "application/x-www-form-urlencoded"
FORM_TYPES = ("multipart/form-data", URLENCODED)
# A body posted before signing in (the sign-in form) holds a few hundred bytes.
# Parsed, a body of %-escapes takes some 80 bytes of memory per byte (issue #26:
# 10 MB of "%41" took a web process past 1 GB).
ANONYMOUS_MAX_BODY_BYTES = 64 * 1024


DATABASE_DOWN = gettext_lazy("The database is unavailable")


def request_language(request: HttpRequest):
    """The language LocaleMiddleware would choose (the switcher's cookie, else
    Accept-Language), for answers given before it runs (issue #27)."""
    return translation.override(translation.get_language_from_request(request))


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def large_form_fields(view):
    """Mark a view whose form fields may hold up to KB_MAX_EDIT_FORM_BYTES when an
    editor (staff who may change sources) posts it; every other form is held to
    Django's DATA_UPLOAD_MAX_MEMORY_SIZE. Like csrf_exempt, the mark is kept by
    the wrappers (admin_view) around the view."""
    view.large_form_fields = True
    return view


class RequestLimitsMiddleware:
    """413 for a body announced (Content-Length) over its cap, before CSRF or a
    form reads it: KB_MAX_UPLOAD_REQUEST_BYTES for any request, 64 KB on the API.
    Django's DATA_UPLOAD_MAX_* settings then bound what a body may hold."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        length = content_length(request)
        api = is_api(request)
        limit = API_MAX_BODY_BYTES if api else settings.KB_MAX_UPLOAD_REQUEST_BYTES
        if length > limit:
            with request_language(request):  # before LocaleMiddleware
                message = gettext(
                    "The request is %(size)s; the limit is %(limit)s."
                ) % {
                    "size": filesizeformat(length),
                    "limit": filesizeformat(limit),
                }
                if not api:
                    message += " " + gettext(
                        "Upload a smaller file, or fewer files at a time (the limit "
                        "of one request: KB_MAX_UPLOAD_REQUEST_BYTES)."
                    )
            if not api:
                return HttpResponse(message, status=413, content_type=PLAIN)
            return JsonResponse({"error": message}, status=413)
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view, args, kwargs):
        """A form body read here, before CsrfViewMiddleware (next) would read it
        and answer a bare 400 past a limit: 413 with the reason for a body over
        64 KB before signing in, and for fields past their limit (Django's
        DATA_UPLOAD_MAX_MEMORY_SIZE, KB_MAX_EDIT_FORM_BYTES on a view marked
        large_form_fields for an editor); a view with a `refused_upload(request,
        message)` page answers too many files."""
        if request.method != "POST" or request.content_type not in FORM_TYPES:
            return None
        length = content_length(request)
        if length > ANONYMOUS_MAX_BODY_BYTES:
            try:  # who is asking: the session, from the database
                signed_in = request.user.is_authenticated
            except (OperationalError, InterfaceError) as exc:
                return outage_page(request, exc)
            if not signed_in:
                return HttpResponse(
                    gettext(
                        "The request is %(size)s; the limit before signing in "
                        "is %(limit)s."
                    )
                    % {
                        "size": filesizeformat(length),
                        "limit": filesizeformat(ANONYMOUS_MAX_BODY_BYTES),
                    },
                    status=413,
                    content_type=PLAIN,
                )
        if hasattr(view, "refused_upload"):  # its page names the files it drops
            multipart.watch(request)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            if _large_fields_allowed(request, view):
                limit = settings.KB_MAX_EDIT_FORM_BYTES
                _read_urlencoded(request, limit)
            request.POST  # noqa: B018 (parses the body, files spooled to disk)
        except TooManyFilesSent:
            message = gettext(
                "The request holds more than %(count)d files; upload fewer at a time."
            ) % {"count": settings.DATA_UPLOAD_MAX_NUMBER_FILES}
            # An upload page shows it on its form (kb/staff/sources.py upload).
            if refused := getattr(view, "refused_upload", None):
                return refused(request, message)
            return HttpResponse(message, status=400, content_type=PLAIN)
        except (OperationalError, InterfaceError) as exc:  # the user, for the limit
            return outage_page(request, exc)
        except RequestDataTooBig:
            return HttpResponse(
                gettext("The form's fields besides files hold over %(limit)s.")
                % {"limit": filesizeformat(limit)},
                status=413,
                content_type=PLAIN,
            )
        return None


def content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0  # Django reads no body it cannot measure


def _large_fields_allowed(request: HttpRequest, view) -> bool:
    user = request.user
    return (
        getattr(view, "large_form_fields", False)
        and request.content_type == URLENCODED
        and user.is_active
        and user.is_staff
        and user.has_perm("kb.change_source")
    )


def _read_urlencoded(request: HttpRequest, limit: int) -> None:
    """Set request.POST from a URL-encoded body of up to `limit` bytes, or raise
    RequestDataTooBig. Django's parser holds every request to the one
    DATA_UPLOAD_MAX_MEMORY_SIZE, a setting no request can change for itself
    (threads share it): the body is read here and parsed the way Django does."""
    if content_length(request) > limit:
        raise RequestDataTooBig(f"over {limit} bytes")
    content_type = request.content_type
    request.content_type = ""  # no form type: Django reads no body for FILES
    request.FILES  # noqa: B018 (empty, so that nothing parses the body again)
    request.content_type = content_type
    body = request.read(limit + 1)
    if len(body) > limit:
        raise RequestDataTooBig(f"over {limit} bytes")
    request.POST = QueryDict(body, encoding="utf-8")


class ApiErrorsMiddleware:
    """Under /api/, every failure is JSON {"error": ...}: a view's exception, a
    404 from the URL resolver, a 405 from require_POST, an HTML 500, and a
    database outage (503 with Retry-After instead of a 500)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if is_api(request) and response.status_code >= 400 and not _is_json(response):
            return _as_json(response)
        return response

    def process_exception(self, request: HttpRequest, exc: Exception):
        if not is_api(request):
            return None
        if isinstance(exc, (OperationalError, InterfaceError)):
            return outage_page(request, exc)  # JSON under /api/
        if isinstance(exc, RequestDataTooBig):
            message = gettext("The body is too large: %(reason)s") % {"reason": exc}
            return JsonResponse({"error": message}, status=413)
        return None  # Django answers (and logs) it; __call__ turns it into JSON


class OutagePageMiddleware:
    """Outside /api/, a database outage is a page saying so (503 with
    Retry-After), not a bare "Server Error (500)" (issue #26). The page is
    rendered without the request: its context would ask the database again."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception):
        if is_api(request):
            return None
        if isinstance(exc, (OperationalError, InterfaceError)):
            return outage_page(request, exc)
        if isinstance(exc, RedisConnectionError):  # the queue pages (/admin/rq/)
            return outage_page(
                request, exc, gettext_lazy("The job queue is unavailable")
            )
        return None


def outage_page(
    request: HttpRequest, exc: Exception, message: str = DATABASE_DOWN
) -> HttpResponse:
    """The 503 page of an outage (its JSON twin under /api/), in the request's
    language (it may come before LocaleMiddleware)."""
    with translation.override("en"):
        logger.error("%s for %s", message, request.path, exc_info=exc)
    with request_language(request):
        if request.method == "POST" and not is_api(request):
            # Translators: "The database is unavailable, so nothing was saved; ..."
            text = gettext("%(outage)s, so nothing was saved; try again shortly.")
        else:
            text = gettext("%(outage)s; try again shortly.")
        text %= {"outage": message}
        if is_api(request):
            response = JsonResponse({"error": text}, status=503)
        else:
            response = HttpResponse(
                render_to_string("503.html", {"message": text}), status=503
            )
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


_MESSAGES = {
    400: gettext_lazy("Bad request."),
    403: gettext_lazy("Forbidden."),
    404: gettext_lazy("Not found."),
    413: gettext_lazy("The request is too large."),
    500: gettext_lazy("Internal error; it has been logged."),
}


def _as_json(response: HttpResponse) -> JsonResponse:
    status = response.status_code
    message = str(_MESSAGES.get(status, f"{response.reason_phrase}."))
    if status == 405:
        message = gettext("Method not allowed; use %(methods)s.") % {
            "methods": response.get("Allow", "POST")
        }
    converted = JsonResponse({"error": message}, status=status)
    for header in ("Allow", "Retry-After"):
        if header in response:
            converted[header] = response[header]
    return converted
