"""A sync source's credentials, encrypted at rest (issue #30): Fernet
(AES-128-CBC with an HMAC-SHA256 tag, from `cryptography`), keyed from
KB_SYNC_SECRET, else from SECRET_KEY (both from the environment in
production). Rotating the key makes the stored tokens unreadable: the sync
then fails with that reason and an editor enters the token again.

A token or deploy key is only ever written (the admin's field never shows it
back) and handed to the Git client; it is not logged, and errors do not
repeat it. A deploy key must be an OpenSSH or PEM private key without a
passphrase (a sync runs unattended): `deploy_key_public` says which, and
gives the public line to register with the repository.
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
                "The stored token or deploy key cannot be read with this "
                "server's key (KB_SYNC_SECRET or SECRET_KEY changed); enter it "
                "again."
            )
        ) from None


def deploy_key_public(private: str) -> str:
    """The public line (`ssh-ed25519 AAAA…`) of an unencrypted private key in
    OpenSSH or PEM form; SecretError with the reason when it is not one."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = private.strip().encode() + b"\n"
    loaders = (serialization.load_ssh_private_key, serialization.load_pem_private_key)
    for load in loaders:
        try:
            key = load(data, password=None)
        except TypeError:  # encrypted: a password is needed
            raise SecretError(
                _(
                    "This key has a passphrase; a sync runs unattended and "
                    "cannot type it. Use a key without one (a deploy key with "
                    "read rights only)."
                )
            ) from None
        except (ValueError, UnsupportedAlgorithm):
            continue
        try:
            public = key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
            )
        except ValueError:
            break
        return public.decode()
    raise SecretError(
        _(
            "This is not a private key kb can use: paste the whole private key "
            "file (it begins with -----BEGIN OPENSSH PRIVATE KEY-----)."
        )
    )
