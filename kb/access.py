"""Who is asking: a staff session, or a bearer token acting as its user."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest
from django.utils import timezone

from kb.models import ApiToken

TOKEN_PREFIX = "kb_"


def create_token(user: AbstractBaseUser, name: str) -> str:
    """Create a token and return its only plain copy."""
    key = TOKEN_PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, name=name, key_hash=_hash(key))
    return key


def token_user(request: HttpRequest) -> AbstractBaseUser | None:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=_hash(key.strip()), user__is_active=True)
        .first()
    )
    if token is None:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used=timezone.now())
    return token.user


def has_bearer(request: HttpRequest) -> bool:
    return request.headers.get("Authorization", "").lower().startswith("bearer ")


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
