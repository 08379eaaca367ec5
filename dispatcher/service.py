"""Operations shared by the CLI and the admin API.

User input (flags or JSON) becomes validated values here, then goes to the
store; both entry points report errors the same way.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import orjson

from . import store
from .api import check_endpoint_id, check_event_id, check_event_type
from .errors import BadInput
from .models import EndpointSpec
from .secretbox import SecretBox, unseal
from .signing import generate_secret, generate_signing_key, validate_secret
from .ssrf import validate_url

_INT_FIELDS = {"burst", "max_in_flight", "timeout_ms", "max_attempts", "retry_base_ms",
               "retry_cap_ms", "failure_threshold"}  # fmt: skip
_FLOAT_FIELDS = {"rate_per_s", "cooldown_s"}
SPEC_FIELDS = frozenset(f.name for f in fields(EndpointSpec))


def _typed(name: str, value: Any) -> Any:
    if value is None:
        if name in ("rate_per_s", "burst", "secret"):
            return None
        raise BadInput(f"{name} must not be null")
    if name in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadInput(f"{name} must be an integer")
        if abs(value) > 2**31 - 1:
            raise BadInput(f"{name} is out of range")
    elif name in _FLOAT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadInput(f"{name} must be a number")
        value = float(value)
    elif name == "event_types":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
            raise BadInput("event_types must be a list of strings")
        value = tuple(value)
    elif name == "headers":
        if isinstance(value, dict):
            value = tuple(value.items())
        elif isinstance(value, list | tuple):
            value = tuple(_header_line(h) if isinstance(h, str) else h for h in value)
        else:
            raise BadInput("headers must be an object of name: value")
        if not all(isinstance(h, tuple) and len(h) == 2 for h in value):
            raise BadInput("headers must be an object of name: value")
    elif name in ("url", "secret") and not isinstance(value, str):
        raise BadInput(f"{name} must be a string")
    return value


def _header_line(line: str) -> tuple[str, str]:
    name, sep, value = line.partition(":")
    if not sep:
        raise BadInput(f"header {line!r} must look like 'Name: value'")
    return name.strip(), value.strip()


def spec_from_fields(data: Mapping[str, Any], base: EndpointSpec | None = None) -> EndpointSpec:
    """A validated spec from user fields, over `base` (for updates) or defaults."""
    data = {k: v for k, v in data.items() if k != "signature"}
    unknown = set(data) - SPEC_FIELDS
    if unknown:
        raise BadInput(f"unknown field: {sorted(unknown)[0]}")
    values = {} if base is None else {f: getattr(base, f) for f in SPEC_FIELDS}
    for name, value in data.items():
        values[name] = _typed(name, value)
    if "url" not in values:
        raise BadInput("url is required")
    validate_url(values["url"])
    secret = values.get("secret")
    if secret is not None:
        validate_secret(secret)
    spec = EndpointSpec(**values)
    spec.validate()
    return spec


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def event_id_of(value: Any) -> str:
    return check_event_id(value) or new_event_id()


Event = tuple[str, str, str, int | None]  # event_id, event_type, payload text, endpoint


def parse_event(doc: Mapping[str, Any], max_payload_bytes: int) -> Event:
    """One event document (an API body, a JSONL line) as the values to queue."""
    event_type = check_event_type(doc.get("event_type"))
    if "payload" not in doc:
        raise BadInput("payload is required")
    endpoint = check_endpoint_id(doc.get("endpoint", doc.get("endpoint_id")))
    # The payload arrives parsed inside the document; its canonical encoding
    # is what gets stored, signed and sent (valid by construction, so it is
    # not parsed again).
    try:
        encoded = orjson.dumps(doc["payload"])
    except TypeError as exc:
        raise BadInput(f"payload cannot be encoded as JSON: {exc}") from None
    if len(encoded) > max_payload_bytes:
        raise BadInput(f"payload is {len(encoded)} bytes, over the limit of {max_payload_bytes}")
    return event_id_of(doc.get("event_id")), event_type, encoded.decode(), endpoint


def read_events(path: str, max_payload_bytes: int) -> list[Event]:
    """A JSONL file (or - for stdin) of event documents, validated whole."""
    try:
        f = sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    events = []
    with f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                doc = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise BadInput(f"{path}:{lineno}: not valid JSON") from None
            if not isinstance(doc, dict):
                raise BadInput(f"{path}:{lineno}: each line must be a JSON object")
            try:
                events.append(parse_event(doc, max_payload_bytes))
            except BadInput as exc:
                raise BadInput(f"{path}:{lineno}: {exc}") from None
    return events


async def enqueue_event(
    conn: store.Conn, doc: Mapping[str, Any], max_payload_bytes: int = 256 * 1024
) -> dict[str, Any]:
    """The `enqueue` semantics for one event given as a JSON-shaped document."""
    event_id, event_type, payload, endpoint = parse_event(doc, max_payload_bytes)
    ids = await store.enqueue(conn, event_type, payload, event_id, endpoint)
    return {"event_id": event_id, "deliveries": ids}


def new_secret(scheme: str | None) -> str:
    """A fresh secret: HMAC (`v1`, default) or an ed25519 signing key (`v1a`)."""
    if scheme in (None, "v1"):
        return generate_secret()
    if scheme == "v1a":
        return generate_signing_key()
    raise BadInput("signature must be v1 (HMAC) or v1a (ed25519)")


async def rotate_secret(
    conn: store.Conn, endpoint_id: int, grace_s: float, box: SecretBox | None
) -> tuple[Any, str]:
    """A new secret of the endpoint's scheme; the old one signs alongside it for grace_s."""
    current = await store.get_endpoint(conn, endpoint_id)
    scheme = "v1a" if unseal(box, current["secret"]).startswith("whsk_") else "v1"
    secret = new_secret(scheme)
    row = await store.rotate_secret(conn, endpoint_id, secret, grace_s, box)
    return row, secret
