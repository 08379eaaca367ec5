"""Standard Webhooks signatures and secrets.

v1: HMAC-SHA256 with a shared `whsec_` secret (what the public
`standardwebhooks` and `svix` verifiers check). v1a: ed25519 with a `whsk_`
signing key, so receivers verify with the `whpk_` public key and hold no
secret that could forge requests.

Pure: keys in, header values out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as _secrets

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from dispatcher.core.errors import BadInput

SECRET_PREFIX = "whsec_"
SIGNING_KEY_PREFIX = "whsk_"
PUBLIC_KEY_PREFIX = "whpk_"


def generate_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(24)).decode()


def secret_key(secret: str) -> bytes:
    """The raw HMAC key of a `whsec_` secret; raises BadInput if malformed."""
    encoded = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    try:
        key = base64.b64decode(encoded, validate=True)
    except (ValueError, TypeError):
        raise BadInput("secret must be 'whsec_' followed by base64") from None
    if not 16 <= len(key) <= 64:
        raise BadInput("secret key must decode to 16..64 bytes")
    return key


def _b64(value: str, prefix: str, what: str) -> bytes:
    try:
        return base64.b64decode(value[len(prefix) :], validate=True)
    except (ValueError, TypeError):
        raise BadInput(f"{what} must be '{prefix}' followed by base64") from None


def signing_key(secret: str) -> Ed25519PrivateKey:
    """The ed25519 key of a `whsk_` secret (32-byte seed, or libsodium's 64 bytes)."""
    raw = _b64(secret, SIGNING_KEY_PREFIX, "signing key")
    if len(raw) not in (32, 64):
        raise BadInput("signing key must decode to 32 or 64 bytes")
    return Ed25519PrivateKey.from_private_bytes(raw[:32])


def _raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def generate_signing_key() -> str:
    """A new `whsk_` key in libsodium's layout (seed followed by public key)."""
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return SIGNING_KEY_PREFIX + base64.b64encode(seed + _raw_public(key)).decode()


def public_key(secret: str) -> str:
    """The `whpk_` public key receivers verify v1a signatures with."""
    return PUBLIC_KEY_PREFIX + base64.b64encode(_raw_public(signing_key(secret))).decode()


def validate_secret(secret: str) -> str:
    if secret.startswith(SECRET_PREFIX):
        secret_key(secret)
    elif secret.startswith(SIGNING_KEY_PREFIX):
        signing_key(secret)
    else:
        raise BadInput("secret must start with whsec_ (HMAC) or whsk_ (ed25519)")
    return secret


class Signer:
    """Signs for one endpoint with every secret currently valid.

    The HMAC objects are keyed once and copied per request: keying is most of
    the cost of a short message.
    """

    __slots__ = ("_keys", "_macs")

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._macs = [
            hmac.new(secret_key(s), digestmod=hashlib.sha256)
            for s in secrets
            if not s.startswith(SIGNING_KEY_PREFIX)
        ]
        self._keys = [signing_key(s) for s in secrets if s.startswith(SIGNING_KEY_PREFIX)]

    def signature(self, msg_id: str, timestamp: int, body: bytes) -> str:
        prefix = f"{msg_id}.{timestamp}.".encode()
        parts = []
        for mac in self._macs:
            m = mac.copy()
            m.update(prefix)
            m.update(body)
            # b2a_base64 is what b64encode calls, less a Python frame per request.
            parts.append("v1," + binascii.b2a_base64(m.digest(), newline=False).decode())
        for key in self._keys:
            parts.append("v1a," + base64.b64encode(key.sign(prefix + body)).decode())
        return " ".join(parts)


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    return Signer((secret,)).signature(msg_id, timestamp, body)
