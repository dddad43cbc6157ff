"""Response headers that browsers enforce: the Content-Security-Policy (issue #15).

Django 5.2 has no CSP support of its own (it arrives in 6.0); the other headers
come from SecurityMiddleware and XFrameOptionsMiddleware (config/settings.py).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    """Sends KB_CONTENT_SECURITY_POLICY with every response, DEBUG or not, so that
    development and the tests see what production enforces."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if policy := settings.KB_CONTENT_SECURITY_POLICY:
            response.headers.setdefault("Content-Security-Policy", policy)
        return response
