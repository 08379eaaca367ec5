"""Standard Webhooks signatures (v1, HMAC-SHA256) and secrets.

Pure: keys in, header values out. Compatible with the public
`standardwebhooks` and `svix` verifiers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets as _secrets

from .errors import BadInput

SECRET_PREFIX = "whsec_"


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


class Signer:
    """Signs for one endpoint with every secret currently valid.

    The HMAC objects are keyed once and copied per request: keying is most of
    the cost of a short message.
    """

    __slots__ = ("_macs",)

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._macs = [hmac.new(secret_key(s), digestmod=hashlib.sha256) for s in secrets]

    def signature(self, msg_id: str, timestamp: int, body: bytes) -> str:
        prefix = f"{msg_id}.{timestamp}.".encode()
        parts = []
        for mac in self._macs:
            m = mac.copy()
            m.update(prefix)
            m.update(body)
            parts.append("v1," + base64.b64encode(m.digest()).decode())
        return " ".join(parts)


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    return Signer((secret,)).signature(msg_id, timestamp, body)


def verify_signature(
    secrets: tuple[str, ...], msg_id: str, timestamp: int, body: bytes, header: str
) -> bool:
    """True when any `v1,` entry of the header matches any of the secrets."""
    offered = [p.split(",", 1)[1] for p in header.split() if p.startswith("v1,")]
    for secret in secrets:
        expected = sign(secret, msg_id, timestamp, body).split(",", 1)[1]
        if any(hmac.compare_digest(expected, o) for o in offered):
            return True
    return False
