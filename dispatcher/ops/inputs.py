"""User input as validated values: endpoint fields, events, times.

Pure (no I/O but reading a JSONL file the user named): flags, JSON bodies
and JSONL lines become the typed values the service layer works with, or a
BadInput naming what is wrong. Every entry point checks input through here,
so the CLI, the admin API and the Python API refuse the same things with the
same words.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from dispatcher.core.destinations import check_new_url, validate_destination
from dispatcher.core.errors import BadInput
from dispatcher.core.models import INTEGRAL, RANGES, EndpointSpec, fmt_number
from dispatcher.core.shaping import compile_success_body, parse_value_map
from dispatcher.core.signing import validate_secret

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024

# ---------------------------------------------------------------- events


def payload_text(payload: Any, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """The exact JSON text to store (and later sign and send).

    JSON text or bytes are kept byte for byte (after checking they parse);
    any other value is encoded with orjson.
    """
    text = _payload_text(payload)
    size = len(text.encode())
    if size > max_bytes:
        raise BadInput(_too_large(size, max_bytes))
    return text


def _too_large(size: int, limit: int) -> str:
    return f"payload is {size} bytes, over the limit of {limit} (DISPATCHER_MAX_PAYLOAD_BYTES)"


def read_payload(arg: str) -> str | bytes:
    """`--payload`'s value: JSON text as given, `@FILE` the file's bytes, `-`
    standard input's bytes, each kept exactly (payload_text checks them).
    Neither form can be JSON text itself, which never starts with @ or is -."""
    if arg == "-":
        return sys.stdin.buffer.read()
    if arg.startswith("@"):
        path = arg[1:]
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise BadInput(f"cannot read payload file {path}: {exc.strerror}") from None
    return arg


def read_text_file(path: str, what: str, limit: int = 65_536) -> str:
    """A small text file named on the command line (a PEM, say)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as exc:
        raise BadInput(f"cannot read {what} file {path}: {exc.strerror}") from None
    if len(raw) > limit:
        raise BadInput(f"{what} file {path} is over {limit} bytes")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise BadInput(f"{what} file {path} is not text (PEM expected)") from None


def _payload_text(payload: Any) -> str:
    if isinstance(payload, bytes | bytearray | memoryview):
        raw = bytes(payload)
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"payload is not valid JSON: {exc}") from None
        try:
            return raw.decode()
        except UnicodeDecodeError:  # pragma: no cover - orjson refuses invalid UTF-8 first
            raise BadInput("payload is not UTF-8") from None
    if isinstance(payload, str):
        try:
            orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"payload is not valid JSON: {exc}") from None
        return payload
    try:
        return orjson.dumps(payload).decode()
    except TypeError as exc:
        raise BadInput(f"payload cannot be encoded as JSON: {exc}") from None


def _printable_id(value: Any, most: int = 200) -> bool:
    return isinstance(value, str) and 0 < len(value) <= most and value.isprintable()


# SPEC "Event types": names of 1 to 256 characters; what can be declared can
# be sent and subscribed to.
MAX_EVENT_TYPE = 256


def check_event_type(value: Any) -> str:
    if not _printable_id(value, MAX_EVENT_TYPE):
        raise BadInput(f"event_type must be 1..{MAX_EVENT_TYPE} printable characters")
    return str(value)


def check_event_id(value: Any) -> str | None:
    """None stays None (an id is generated); anything else must be a usable id."""
    if value is not None and not _printable_id(value):
        raise BadInput("event_id must be 1..200 printable characters")
    return None if value is None else str(value)


def check_id(value: Any, name: str = "endpoint") -> int | None:
    """None, or a positive bigint id (never a bool)."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63
    ):
        raise BadInput(f"{name} must be an integer id")
    return value


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def event_id_of(value: Any) -> str:
    return check_event_id(value) or new_event_id()


# event_id, event_type, payload text, endpoint, application
Event = tuple[str, str, str, int | None, str | None]
EVENT_FIELDS = frozenset({"event_type", "payload", "event_id", "endpoint", "endpoint_id", "app"})


def parse_event(doc: Mapping[str, Any], max_payload_bytes: int) -> Event:
    """One event document (an API body, a JSONL line) as the values to queue.

    Strict, because a mistake here fails open: a misspelt or doubled
    endpoint field would otherwise fan the event out to every subscriber."""
    unknown = sorted(set(doc) - EVENT_FIELDS)
    if unknown:
        raise BadInput(f"unknown field: {unknown[0]}")
    if "endpoint" in doc and "endpoint_id" in doc:
        raise BadInput("give endpoint or endpoint_id, not both")
    event_type = check_event_type(doc.get("event_type"))
    if "payload" not in doc:
        raise BadInput("payload is required")
    endpoint = check_id(doc.get("endpoint", doc.get("endpoint_id")))
    # The payload arrives parsed inside the document; its canonical encoding
    # is what gets stored, signed and sent (valid by construction, so it is
    # not parsed again).
    try:
        encoded = orjson.dumps(doc["payload"])
    except TypeError as exc:
        raise BadInput(f"payload cannot be encoded as JSON: {exc}") from None
    if len(encoded) > max_payload_bytes:
        raise BadInput(_too_large(len(encoded), max_payload_bytes))
    app = doc.get("app")
    if app is not None and not isinstance(app, str):
        raise BadInput("app must be an application id")
    return event_id_of(doc.get("event_id")), event_type, encoded.decode(), endpoint, app


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


# ---------------------------------------------------------------- times and numbers


def parse_time(value: Any, name: str) -> datetime | None:
    """An ISO-8601 time (`Z` accepted; no zone means UTC), or None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        t = value
    elif isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise BadInput(f"{name} must be an ISO-8601 time, got {value!r:.60}") from None
    else:
        raise BadInput(f"{name} must be an ISO-8601 string")
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    try:
        # In UTC it must still be a date (9999-12-31T23:00-05:00 is not).
        return t.astimezone(UTC)
    except OverflowError:
        raise BadInput(f"{name} is out of range") from None


# How far ahead a delivery may be scheduled (deliver_at, Svix's deliverAt,
# delay_s): a year and a day, so no row waits in the queue for ever.
MAX_AHEAD = timedelta(days=366)


def check_deliver_at(value: Any, name: str, now: datetime | None = None) -> datetime | None:
    """parse_time, and at most MAX_AHEAD after `now` (the clock's by default)."""
    at = parse_time(value, name)
    if at is not None and at > (now or datetime.now(UTC)) + MAX_AHEAD:
        raise BadInput(f"{name} must be at most {MAX_AHEAD.days} days ahead")
    return at


# Application and endpoint metadata, as serialized JSON (SPEC "Limits").
MAX_METADATA_BYTES = 16 * 1024


def check_metadata_size(value: Mapping[str, Any], name: str = "metadata") -> None:
    size = len(orjson.dumps(value))
    if size > MAX_METADATA_BYTES:
        raise BadInput(
            f"{name} is {size} bytes of JSON, over the limit of {MAX_METADATA_BYTES} (16 KiB)"
        )


def check_number(value: Any, name: str, low: float, high: float) -> float:
    """A number (never a bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise BadInput(f"{name} must be a number between {low:g} and {high:g}")
    return value


# ---------------------------------------------------------------- endpoints

SPEC_FIELDS = frozenset(f.name for f in fields(EndpointSpec))


_NULLABLE = frozenset({"rate_per_s", "burst", "secret", "name", "description", "body",
                       "success_body", "filter", "ordering_key", "client_cert",
                       "client_key", "value_map", "disable_after",
                       "disable_within_s"})  # fmt: skip
_TEXT_FIELDS = frozenset({"url", "secret", "name", "description", "method", "body",
                          "ordering", "ordering_key", "client_cert", "client_key",
                          "macro_style"})  # fmt: skip


def _filter_text(value: Any) -> str:
    """A filter as canonical JSON text: an object, given as one or as its text."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise BadInput(
                f"filter is not valid JSON ({exc}): quote names and text, "
                """as in '{"status": "paid"}'"""
            ) from None
    if not isinstance(value, dict):
        raise BadInput("filter must be a JSON object")
    text = orjson.dumps(value).decode()
    if len(text) > 10_000:
        raise BadInput("filter must be at most 10000 characters of JSON")
    return text


def _typed(name: str, value: Any) -> Any:
    if value is None:
        if name in _NULLABLE:
            return None
        raise BadInput(f"{name} must not be null")
    if name == "filter":
        return _filter_text(value)
    if name == "value_map":
        return parse_value_map(value)
    if name == "success_body":
        if not isinstance(value, str):
            raise BadInput("success_body must be a string")
        compile_success_body(value)
        return value
    if name == "method" and isinstance(value, str):
        value = value.upper()
    if name in ("client_cert", "client_key") and isinstance(value, str):
        if value.startswith("enc:v1:"):
            raise BadInput(f"{name} must be PEM text, not a stored value")
    if name in INTEGRAL:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadInput(f"{name} must be an integer {_range(name)}")
    elif name in RANGES:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadInput(f"{name} must be a number {_range(name)}")
        if isinstance(value, int) and abs(value) > 2**53:
            value = float("inf")  # out of range anyway: spec.validate names the range
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
    elif name in _TEXT_FIELDS and not isinstance(value, str):
        raise BadInput(f"{name} must be a string")
    return value


def _range(name: str) -> str:
    low, high = RANGES[name]
    return f"between {fmt_number(low)} and {fmt_number(high)}"


def _header_line(line: str) -> tuple[str, str]:
    name, sep, value = line.partition(":")
    if not sep:
        raise BadInput(f"header {line!r} must look like 'Name: value'")
    return name.strip(), value.strip()


def spec_from_fields(data: Mapping[str, Any], base: EndpointSpec | None = None) -> EndpointSpec:
    """A validated, complete spec: user fields over `base` (for updates) or
    over EndpointSettings' defaults. `signature` (the scheme of a secret to
    generate) is not a setting and is skipped here."""
    data = {k: v for k, v in data.items() if k != "signature"}
    unknown = set(data) - SPEC_FIELDS
    if unknown:
        raise BadInput(f"unknown field: {sorted(unknown)[0]}")
    values = {} if base is None else {f: getattr(base, f) for f in SPEC_FIELDS}
    for name, value in data.items():
        values[name] = _typed(name, value)
    if "url" not in values:
        raise BadInput("url is required")
    validate_destination(values["url"], values.get("macro_style", "brace"))
    if "url" in data:  # given now, not kept from before
        check_new_url(values["url"])
    secret = values.get("secret")
    if secret is not None:
        validate_secret(secret)
    spec = EndpointSpec(**values)
    spec.validate()
    return spec
