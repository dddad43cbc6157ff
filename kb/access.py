"""Who is asking: a staff session, or a bearer token acting as its user.

A token works until it is revoked, expires, or its user's password changes; a
user who is deactivated or loses staff status has their tokens revoked (signals
below), so restoring the flag does not bring them back. A bulk update or raw SQL
sends no signal: the user's state is checked again each time a token is used,
and a token found with its user inactive or not staff is revoked then (issue
#26). Only a demotion undone before any use of the token goes unseen.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.db.models.signals import pre_save
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone

from kb.models import ApiToken

TOKEN_PREFIX = "kb_"
# last_used is a statistic: one write a minute per token, not one per request.
LAST_USED_EVERY = timedelta(minutes=1)


def create_token(
    user: AbstractBaseUser, name: str, expires_days: int | None = None
) -> str:
    """Create a token and return its only plain copy (only its hash is stored)."""
    key = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires = timezone.now() + timedelta(days=expires_days) if expires_days else None
    ApiToken.objects.create(
        user=user,
        name=name,
        key_hash=_hash(key),
        expires=expires,
        password_stamp=ApiToken.stamp(user),
    )
    return key


def token_user(request: HttpRequest) -> AbstractBaseUser | None:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=_hash(key.strip()), revoked=None)
        .filter(Q(expires=None) | Q(expires__gt=now))
        .first()
    )
    if token is None or token.password_stamp != ApiToken.stamp(token.user):
        return None
    if not (token.user.is_active and token.user.is_staff):
        # demoted without a save() (QuerySet.update): revoked as on a save()
        revoke(ApiToken.objects.filter(user_id=token.user_id))
        if not token.user.is_active:
            return None
        return token.user  # this once: refused as not staff, with the reason
    if token.last_used is None or token.last_used < now - LAST_USED_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
    return token.user


def has_bearer(request: HttpRequest) -> bool:
    return request.headers.get("Authorization", "").lower().startswith("bearer ")


def revoke(tokens) -> int:
    """Revoke the tokens of a queryset that still work; returns how many."""
    return tokens.filter(revoked=None).update(revoked=timezone.now())


def find_tokens(name_or_id: str):
    """Tokens named so, or the one with that id."""
    tokens = ApiToken.objects.select_related("user")
    if name_or_id.isascii() and name_or_id.isdigit() and len(name_or_id) < 19:
        by_id = tokens.filter(pk=int(name_or_id))
        if by_id.exists():
            return by_id
    return tokens.filter(name=name_or_id)


@receiver(pre_save, sender=settings.AUTH_USER_MODEL)
def _revoke_on_demotion(
    sender, instance, raw=False, update_fields=None, **kwargs
) -> None:
    """A user deactivated or no longer staff loses their tokens for good."""
    if raw or instance.pk is None:
        return
    if update_fields is not None and not {"is_active", "is_staff"} & set(update_fields):
        return  # e.g. last_login at each login: no query
    before = sender.objects.filter(pk=instance.pk).values("is_active", "is_staff")
    before = before.first()
    if before is None:
        return
    lost = (before["is_active"] and not instance.is_active) or (
        before["is_staff"] and not instance.is_staff
    )
    if lost:
        revoke(ApiToken.objects.filter(user_id=instance.pk))


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
