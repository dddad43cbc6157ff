"""Rate limits kept in the Redis-compatible server: failed logins and questions.

Counters are fixed windows: one key per (what, who), created with its expiry and
incremented in one MULTI/EXEC, so every process (web workers on several machines)
shares them. If Redis cannot be reached the limits are not applied (logged), for
logins as for questions: an outage of the queue must not lock every admin out or
turn pages into 500s (issue #15).
"""

from __future__ import annotations

import hashlib
import logging
import math

import django_rq
from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils.translation import gettext, ngettext
from redis import Redis
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

PREFIX = "kb:ratelimit:"
_clients: dict[str, Redis] = {}


def counters() -> Redis:
    # One client (and connection pool) per process: django_rq makes a new one per
    # call. Keyed by the queue's settings, which the tests override.
    config = repr(sorted(settings.RQ_QUEUES["default"].items()))
    if config not in _clients:
        _clients[config] = django_rq.get_connection("default")
    return _clients[config]


def _key(kind: str, who: str) -> str:
    # Hashed: user names and tokens are never stored, and keys stay short.
    digest = hashlib.sha256(who.encode(errors="surrogatepass")).hexdigest()
    return f"{PREFIX}{kind}:{digest[:32]}"


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR, or, behind KB_TRUSTED_PROXIES reverse proxies, the address the
    outermost of them saw (each proxy appends its client to X-Forwarded-For)."""
    hops = settings.KB_TRUSTED_PROXIES
    if hops:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        forwarded = [a.strip() for a in forwarded if a.strip()]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return request.META.get("REMOTE_ADDR", "")


def minutes(seconds: int) -> str:
    n = max(1, math.ceil(seconds / 60))
    return ngettext("%(n)d minute", "%(n)d minutes", n) % {"n": n}


# --- Logins -------------------------------------------------------------------


def _login_keys(username: str, ip: str) -> list[tuple[str, int]]:
    """The counters a login attempt is judged by, with their limits (0 = none)."""
    keys = [
        (_key("login-user", username.casefold()), settings.KB_LOGIN_MAX_FAILURES),
        (_key("login-ip", ip), settings.KB_LOGIN_MAX_FAILURES_PER_IP),
    ]
    return [(key, limit) for key, limit in keys if limit > 0]


def login_locked_for(username: str, request: HttpRequest) -> int:
    """Seconds until this username or address may try a password again; 0 if now.

    Called before the password is checked, so locked attempts cost no hashing.
    """
    keys = _login_keys(username or "", client_ip(request))
    if not keys:
        return 0
    try:
        pipe = counters().pipeline()
        for key, _ in keys:
            pipe.get(key)
            pipe.ttl(key)
        replies = pipe.execute()
    except RedisError:
        logger.warning("Redis unreachable: login attempts are not limited now")
        return 0
    wait = 0
    for (_, limit), count, ttl in zip(keys, replies[::2], replies[1::2]):
        if count is not None and int(count) >= limit:
            wait = max(wait, ttl if ttl > 0 else 1)
    return wait


@receiver(user_login_failed)
def _count_failure(sender, credentials, request=None, **kwargs) -> None:
    if request is None:
        return
    lockout = settings.KB_LOGIN_LOCKOUT_SECONDS
    username = credentials.get("username") or ""
    try:
        for key, limit in _login_keys(username, client_ip(request)):
            if _hit(key, lockout) == limit:
                # Locked from the failure that reached the limit, for the full period.
                counters().expire(key, lockout)
    except RedisError:
        logger.warning("Redis unreachable: a failed login was not counted")


@receiver(user_logged_in)
def _forget_failures(sender, request=None, user=None, **kwargs) -> None:
    # Only the user's count: a valid account must not reset its address's count.
    if request is None or user is None:
        return
    try:
        counters().delete(_key("login-user", user.get_username().casefold()))
    except RedisError:
        logger.warning("Redis unreachable: failed logins were not reset")


def login_message(seconds: int) -> str:
    return gettext("Too many failed attempts; try again in %(wait)s.") % {
        "wait": minutes(seconds)
    }


# --- Questions ----------------------------------------------------------------


def question_wait(user, request: HttpRequest) -> int:
    """Count a question by `user` (and by its bearer token, if one was used);
    return the seconds to wait if it is over KB_ASK_PER_MINUTE, else 0."""
    limit = settings.KB_ASK_PER_MINUTE
    if not limit:
        return 0
    keys = [_key("ask-user", str(user.pk))]
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        keys.append(_key("ask-token", header[7:].strip()))
    try:
        over = [key for key in keys if _hit(key, 60) > limit]
        return max((max(counters().ttl(key), 1) for key in over), default=0)
    except RedisError:
        logger.warning("Redis unreachable: questions are not rate limited now")
        return 0


def question_message(seconds: int) -> str:
    limit = settings.KB_ASK_PER_MINUTE
    return " ".join(
        [
            gettext("Too many questions: at most %(limit)d a minute.")
            % {"limit": limit},
            ngettext(
                "Try again in %(seconds)d second.",
                "Try again in %(seconds)d seconds.",
                seconds,
            )
            % {"seconds": seconds},
        ]
    )


def _hit(key: str, window: int) -> int:
    """Count one event in `key`'s window (started by its first event); the count."""
    pipe = counters().pipeline()  # MULTI/EXEC: never a counter left without expiry
    pipe.set(key, 0, ex=window, nx=True)
    pipe.incr(key)
    return pipe.execute()[1]
