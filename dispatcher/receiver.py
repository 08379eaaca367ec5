"""The receiving side: verify dispatcher's requests, then apply each event once.

dispatcher delivers at least once and signs every attempt the Standard
Webhooks way. A receiver therefore has three jobs, and this module does each
in one call so nobody re-invents them slightly wrong:

1. Check the signature over the *raw* body bytes (a re-serialised JSON body
   never matches), with a constant-time compare, accepting any of several
   secrets so a secret rotation does not drop traffic.
2. Refuse timestamps outside a tolerance window, so a captured request cannot
   be replayed later.
3. Use `webhook-id` (the same on every attempt of one event) as an
   idempotency key, claimed inside the receiver's own transaction, so a
   redelivery is acknowledged without being applied twice.

Layers: `Verifier` / `verify` / `verify_request` are framework-free;
`webhook_middleware` wraps them for aiohttp; `claim_once` and
`ensure_idempotency_table` are the PostgreSQL side. Error messages never
carry the body, a signature or a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import time
import warnings
from collections.abc import Collection, Mapping, Sequence

import asyncpg
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from asyncpg.pool import PoolConnectionProxy
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from dispatcher.core.errors import BadInput
from dispatcher.core.signing import PUBLIC_KEY_PREFIX, secret_key

__all__ = [
    "DEFAULT_TABLE",
    "DEFAULT_TOLERANCE_S",
    "WEBHOOK_BODY",
    "WEBHOOK_ID",
    "VerificationError",
    "Verifier",
    "claim_once",
    "ensure_idempotency_table",
    "verify",
    "verify_request",
    "webhook_middleware",
]

log = logging.getLogger("dispatcher.receiver")

Conn = asyncpg.Connection | PoolConnectionProxy

# Five minutes either way: what the Standard Webhooks and Svix libraries use.
DEFAULT_TOLERANCE_S = 300
DEFAULT_TABLE = "dispatcher_received"

# Header families, in order of preference. Svix sends the same three values
# under its own names; its libraries accept either family.
_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("webhook-id", "webhook-timestamp", "webhook-signature"),
    ("svix-id", "svix-timestamp", "svix-signature"),
)
_WANTED = frozenset(name for family in _FAMILIES for name in family)
# Unix seconds: ASCII digits only (str.isdigit() would also take '²'), and
# short enough that int() is cheap and the value a plausible date.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_DIGEST_SIZE = hashlib.sha256().digest_size


class VerificationError(Exception):
    """A request did not prove it came from dispatcher (or came too late).

    The one exception a receiver has to catch: answer 401 and move on. The
    message is short and safe to return to the sender or to log; it never
    contains the body, a signature or a secret.
    """


def _keys(
    secrets: str | Sequence[str],
) -> tuple[tuple[hmac.HMAC, ...], tuple[Ed25519PublicKey, ...]]:
    """One keyed HMAC per `whsec_` secret (built once, copied per request), and
    one ed25519 public key per `whpk_` key (v1a signatures).

    A bad secret is a configuration mistake, not a bad request, so it raises
    ValueError: answering 401 forever would hide it behind endless retries.
    """
    items = (secrets,) if isinstance(secrets, str) else tuple(secrets)
    if not items:
        raise ValueError("at least one webhook secret is required")
    macs = []
    public = []
    for n, secret in enumerate(items, 1):
        if not isinstance(secret, str):
            raise ValueError(f"webhook secret #{n} must be a string")
        if secret.startswith(PUBLIC_KEY_PREFIX):
            try:
                raw = base64.b64decode(secret[len(PUBLIC_KEY_PREFIX) :], validate=True)
                public.append(Ed25519PublicKey.from_public_bytes(raw))
            except ValueError:
                raise ValueError(f"webhook secret #{n}: not a whpk_ ed25519 public key") from None
            continue
        try:
            key = secret_key(secret)
        except BadInput as exc:  # its message never includes the secret
            raise ValueError(f"webhook secret #{n}: {exc}") from None
        macs.append(hmac.new(key, digestmod=hashlib.sha256))
    return tuple(macs), tuple(public)


def _lookup(headers: Mapping[str, str]) -> tuple[str, str, str]:
    """(id, timestamp, signature) from the first complete header family.

    Case-insensitive, whatever the mapping type (a plain dict from another
    framework, or aiohttp's multidict). On a repeated header the first value
    wins, as with `headers.get()` on a multidict.
    """
    found: dict[str, object] = {}
    for name, value in headers.items():
        if isinstance(name, str):
            low = name.lower()
            if low in _WANTED and low not in found:
                found[low] = value.strip(" \t") if isinstance(value, str) else value
    for family in _FAMILIES:
        values = [found.get(name) for name in family]
        if all(values):
            for name, got in zip(family, values, strict=True):
                if not isinstance(got, str):
                    raise VerificationError(f"malformed {name} header")
            return (str(values[0]), str(values[1]), str(values[2]))
    # Report against the family the sender seems to be using.
    svix_only = any(found.get(n) for n in _FAMILIES[1]) and not any(
        found.get(n) for n in _FAMILIES[0]
    )
    family = _FAMILIES[1] if svix_only else _FAMILIES[0]
    missing = [name for name in family if not found.get(name)]
    plural = "s" if len(missing) > 1 else ""
    raise VerificationError(f"missing {', '.join(missing)} header{plural}")


def _offered_signatures(header: str) -> tuple[list[bytes], list[bytes]]:
    """The decodable `v1,` (HMAC) and `v1a,` (ed25519) entries; other versions
    are skipped, as the spec asks.

    Entries are compared as decoded bytes: hmac.compare_digest refuses str
    with non-ASCII characters, and a header is attacker-controlled text.
    """
    v1: list[bytes] = []
    v1a: list[bytes] = []
    saw = False
    for entry in header.split():
        version, comma, value = entry.partition(",")
        if version not in ("v1", "v1a") or not comma:
            continue
        saw = True
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:  # binascii.Error, or non-ASCII text
            continue
        if version == "v1" and len(raw) == _DIGEST_SIZE:
            v1.append(raw)
        elif version == "v1a" and len(raw) == 64:
            v1a.append(raw)
    if not saw:
        raise VerificationError("no v1 or v1a signature in the signature header")
    return v1, v1a


class Verifier:
    """Checks requests against a fixed set of secrets.

    Build one at startup and reuse it: the secrets are validated once (a bad
    one fails loudly then, not as a 401 on every request) and each HMAC is
    keyed once.
    """

    __slots__ = ("_macs", "_public", "tolerance_s")

    def __init__(
        self, secrets: str | Sequence[str], tolerance_s: int = DEFAULT_TOLERANCE_S
    ) -> None:
        if isinstance(tolerance_s, bool) or not isinstance(tolerance_s, int | float):
            raise ValueError("tolerance_s must be a number of seconds")
        if tolerance_s < 0:
            raise ValueError("tolerance_s must not be negative")
        self._macs, self._public = _keys(secrets)
        self.tolerance_s = tolerance_s

    def verify(self, body: bytes, headers: Mapping[str, str], *, now: float | None = None) -> str:
        """The verified webhook id; raises VerificationError otherwise.

        Order matters only for the message: headers, then the timestamp
        window (cheap, and what a replayed capture fails on), then the
        signatures.
        """
        if not isinstance(body, bytes | bytearray | memoryview):
            raise TypeError("body must be the raw request bytes, exactly as received")
        msg_id, raw_ts, signature = _lookup(headers)
        if not _TIMESTAMP.fullmatch(raw_ts):
            raise VerificationError("timestamp header is not an integer of unix seconds")
        timestamp = int(raw_ts)
        current = time.time() if now is None else now
        if current - timestamp > self.tolerance_s:
            raise VerificationError(f"timestamp is too old (over {self.tolerance_s} s ago)")
        if timestamp - current > self.tolerance_s:
            raise VerificationError(f"timestamp is too new (over {self.tolerance_s} s ahead)")
        try:
            prefix = f"{msg_id}.{timestamp}.".encode()
        except UnicodeEncodeError:  # lone surrogates from a mis-decoded header
            raise VerificationError("webhook id is not valid text") from None
        offered, offered_v1a = _offered_signatures(signature)
        matched = False
        for mac in self._macs:
            m = mac.copy()
            m.update(prefix)
            m.update(body)
            expected = m.digest()
            for candidate in offered:
                # No early exit: the time taken does not depend on which
                # entry (or which secret) matched.
                matched |= hmac.compare_digest(expected, candidate)
        message = prefix + bytes(body)
        for key in self._public:
            for candidate in offered_v1a:
                try:
                    key.verify(candidate, message)
                    matched = True
                except InvalidSignature:
                    pass
        if not matched:
            raise VerificationError("no matching signature")
        return msg_id


def verify_request(
    body: bytes,
    headers: Mapping[str, str],
    secrets: str | Sequence[str],
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    *,
    now: float | None = None,
) -> str:
    """Verify one request and return its webhook id, the idempotency key.

    For any framework: pass the raw body bytes and the request headers.
    Raises VerificationError when the request must be refused (answer 401).
    """
    return Verifier(secrets, tolerance_s).verify(body, headers, now=now)


def verify(
    body: bytes,
    headers: Mapping[str, str],
    secrets: str | Sequence[str],
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    *,
    now: float | None = None,
) -> None:
    """Raise VerificationError unless the request is dispatcher's, and fresh.

    `secrets` may list several: the current one and one rotated out but still
    in its grace period. `now` (unix seconds) exists for tests and replays of
    recorded traffic.
    """
    Verifier(secrets, tolerance_s).verify(body, headers, now=now)


# ---------------------------------------------------------------------------
# aiohttp
# ---------------------------------------------------------------------------

# Typed keys, as aiohttp 3.14 recommends. The same values are also stored
# under the plain strings "webhook_id" and "webhook_body" for handlers that
# use the dict convention.
WEBHOOK_ID = web.RequestKey("webhook_id", str)
WEBHOOK_BODY = web.RequestKey("webhook_body", bytes)
_aliases_primed = False


def _store(request: web.Request, webhook_id: str, body: bytes) -> None:
    global _aliases_primed
    request[WEBHOOK_ID] = webhook_id
    request[WEBHOOK_BODY] = body
    if _aliases_primed:
        request["webhook_id"] = webhook_id
        request["webhook_body"] = body
        return
    # aiohttp warns once per process about string keys. The string keys are
    # this module's documented choice, not the application's mistake, so the
    # one-time warning is silenced here (catch_warnings is process-global,
    # hence only on the first request).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", web.NotAppKeyWarning)
        request["webhook_id"] = webhook_id
        request["webhook_body"] = body
    _aliases_primed = True


def _normalise(path: str) -> str:
    return path.rstrip("/") or "/"


def webhook_middleware(
    secrets: str | Sequence[str],
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    paths: Collection[str] | None = None,
) -> Middleware:
    """An aiohttp middleware refusing unsigned or stale webhook requests.

    With `paths`, every request to one of them is verified, whatever its
    method; a path matches the request path (trailing slash ignored) or the
    pattern of the route that matched (e.g. "/hooks/{name}"), so a router
    quirk cannot let a request past unverified. Without `paths`, every POST
    is verified and other methods pass through (health checks).

    Failure: 401 with JSON {"error": "..."}; the handler never runs.
    Success: the handler finds the webhook id in request["webhook_id"] (or
    request[WEBHOOK_ID]) and the raw body in request["webhook_body"]; since
    aiohttp caches the body, request.read()/json() keep working too.

    Secrets are checked here, at startup: a bad one raises ValueError.
    """
    if isinstance(paths, str):
        raise TypeError("paths must be a collection of paths, not a single string")
    verifier = Verifier(secrets, tolerance_s)
    wanted = None if paths is None else frozenset(_normalise(p) for p in paths)

    def applies(request: web.Request) -> bool:
        if wanted is None:
            return request.method == "POST"
        if _normalise(request.path) in wanted:
            return True
        route = request.match_info.route
        resource = route.resource if route is not None else None
        return resource is not None and _normalise(resource.canonical) in wanted

    @web.middleware
    async def verify_webhook(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not applies(request):
            return await handler(request)
        body = await request.read()
        try:
            webhook_id = verifier.verify(body, request.headers)
        except VerificationError as exc:
            log.warning("webhook refused on %s: %s", request.path, exc)
            return web.json_response({"error": str(exc)}, status=401)
        _store(request, webhook_id, body)
        return await handler(request)

    return verify_webhook


# ---------------------------------------------------------------------------
# PostgreSQL idempotency
# ---------------------------------------------------------------------------

# A plain (optionally schema-qualified) identifier, ASCII only. The name is
# interpolated into SQL, so nothing that could need quoting gets through.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(?:\.[A-Za-z_][A-Za-z0-9_]{0,62})?")


def _table(table: str) -> str:
    if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
        raise ValueError(
            "table must be a plain SQL identifier (letters, digits, underscores; "
            "optionally schema.name)"
        )
    return table


async def ensure_idempotency_table(conn: Conn, table: str = DEFAULT_TABLE) -> None:
    """Create the table of claimed webhook ids if it does not exist yet.

    Safe to call from every receiver process at startup: an advisory lock
    serialises the CREATE, which PostgreSQL does not make race-free on its
    own. `received_at` lets you prune ids older than any redelivery you
    still expect (dead letters can be replayed days later).
    """
    name = _table(table)
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))", f"dispatcher.receiver:{name}"
        )
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {name} ("
            " webhook_id text PRIMARY KEY,"
            " received_at timestamptz NOT NULL DEFAULT now())"
        )


async def claim_once(conn: Conn, webhook_id: str, *, table: str = DEFAULT_TABLE) -> bool:
    """True the first time this webhook id is claimed, False for a replay.

    Call it inside the transaction that applies the event: the claim then
    commits or rolls back together with the effect. A failed handler leaves
    no claim behind (the redelivery is applied), and a replay arriving while
    the first attempt is still running waits on the primary key and then
    sees False. Outside a transaction the claim would commit on its own and a
    crash right after it would lose the event, so that raises RuntimeError.
    """
    name = _table(table)
    if not isinstance(webhook_id, str) or not webhook_id:
        raise ValueError("webhook_id must be a non-empty string")
    if not conn.is_in_transaction():
        raise RuntimeError("claim_once must run inside the transaction that applies the event")
    inserted = await conn.fetchval(
        f"INSERT INTO {name} (webhook_id) VALUES ($1)"
        " ON CONFLICT (webhook_id) DO NOTHING RETURNING true",
        webhook_id,
    )
    return inserted is True
