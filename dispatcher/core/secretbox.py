"""Endpoint secrets at rest: AES-GCM when DISPATCHER_SECRET_KEY is set.

Pure: a key and a string in, a string out. Stored form: `enc:v1:` followed by
base64(nonce ‖ ciphertext). Values without the prefix are plaintext (written
before a key was configured) and are read as they are, so turning
encryption on needs no migration; rotating a secret re-encrypts it.
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from dispatcher.core.errors import OperationalError

PREFIX = "enc:v1:"
_AAD = b"dispatcher endpoint secret"


class SecretUnreadable(OperationalError):
    """A sealed value this process cannot open (no key, or not this key)."""


class SecretBox:
    __slots__ = ("_aead",)

    def __init__(self, key_material: str) -> None:
        # Any string becomes a 256-bit key; a 32-byte base64 key is used as is.
        try:
            raw = base64.b64decode(key_material, validate=True)
        except ValueError:
            raw = b""
        key = raw if len(raw) == 32 else hashlib.sha256(key_material.encode()).digest()
        self._aead = AESGCM(key)

    def seal(self, secret: str) -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, secret.encode(), _AAD)
        return PREFIX + base64.b64encode(nonce + sealed).decode()

    def open(self, stored: str) -> str:
        if not stored.startswith(PREFIX):
            return stored
        blob = base64.b64decode(stored[len(PREFIX) :])
        try:
            return self._aead.decrypt(blob[:12], blob[12:], _AAD).decode()
        except InvalidTag:
            raise SecretUnreadable(
                "an endpoint secret cannot be decrypted: DISPATCHER_SECRET_KEY changed?"
            ) from None


def seal(box: SecretBox | None, secret: str) -> str:
    return secret if box is None else box.seal(secret)


def unseal(box: SecretBox | None, stored: str) -> str:
    if box is not None:
        return box.open(stored)
    if stored.startswith(PREFIX):
        raise SecretUnreadable("endpoint secrets are encrypted: set DISPATCHER_SECRET_KEY")
    return stored
