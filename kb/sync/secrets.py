"""A sync source's credentials, encrypted at rest (issue #30): Fernet
(AES-128-CBC with an HMAC-SHA256 tag, from `cryptography`), keyed from
KB_SYNC_SECRET, else from SECRET_KEY (both from the environment in
production). Rotating the key makes the stored tokens unreadable: the sync
then fails with that reason and an editor enters the token again.

A token is only ever written (the admin's field never shows it back) and
handed to the Git client; it is not logged, and errors do not repeat it.
"""

from __future__ import annotations

import base64
import hashlib

from django.conf import settings
from django.utils.translation import gettext as _


class SecretError(Exception):
    """A stored credential cannot be read with this deployment's key."""


def _fernet():
    from cryptography.fernet import Fernet

    secret = settings.KB_SYNC_SECRET or settings.SECRET_KEY
    digest = hashlib.sha256(b"kb-sync-credentials\0" + secret.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(token: str) -> str:
    """The token encrypted, as text to store; "" stays ""."""
    return _fernet().encrypt(token.encode()).decode() if token else ""


def unseal(sealed: str) -> str:
    """The stored token in clear, for the Git client only."""
    from cryptography.fernet import InvalidToken

    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        raise SecretError(
            _(
                "The stored token cannot be read with this server's key "
                "(KB_SYNC_SECRET or SECRET_KEY changed); enter it again."
            )
        ) from None
