"""Values shared by every layer: endpoints, claimed deliveries, outcomes.

Stdlib only. Nothing here performs I/O or reads the clock.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import NamedTuple


class Status(enum.StrEnum):
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    DELIVERED = "delivered"
    FAILED = "failed"  # failed, a retry is scheduled at next_attempt_at
    DEAD_LETTER = "dead_letter"
    HELD = "held"  # enqueued with hold: not sent until released
    CANCELLED = "cancelled"  # ended by event cancel: never sent


class WakeMode(enum.StrEnum):
    """How idle workers learn of new rows (schema 016; one value per database)."""

    PROBE = "probe"  # each idle worker probes every 10 ms; producers never NOTIFY
    NOTIFY = "notify"  # the enqueue functions NOTIFY; idle workers run no query


class Verdict(enum.Enum):
    """How one HTTP attempt ended, before retry policy is applied."""

    SUCCESS = "success"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


@dataclass(frozen=True, kw_only=True, slots=True)
class EndpointSettings:
    """An endpoint's tunables and their defaults: the one place they are written.

    The CLI's flags, the API's fields, the store and the engine all take
    their defaults from here (the schema's column defaults mirror them for
    rows inserted by hand; a test keeps the two in step).
    """

    event_types: tuple[str, ...] = ("*",)
    rate_per_s: float | None = None
    burst: int | None = None
    max_in_flight: int = 100
    timeout_ms: int = 15_000
    max_attempts: int = 5
    retry_base_ms: int = 30_000
    retry_cap_ms: int = 3_600_000
    failure_threshold: int = 10
    cooldown_s: float = 300.0
    headers: tuple[tuple[str, str], ...] = ()
    # The request's shape (shaping.py): method, body, and what a 2xx body
    # must contain to count as a success.
    method: str = "POST"
    body: str | None = None  # None: "json" for POST and PUT, "none" for GET
    success_body: str | None = None
    # Which events (jsonb containment over the payload, as JSON text) and in
    # which order: "fifo" sends one at a time per ordering_key value.
    filter: str | None = None
    ordering: str = "none"
    ordering_key: str | None = None
    # mTLS: PEM client certificate and key (sealed at rest like secrets).
    client_cert: str | None = None
    client_key: str | None = None
    # Affiliate postbacks (shaping.py): how macros are spelt, and per macro
    # name the partner's code for each value (JSON text, as filter).
    macro_style: str = "brace"
    value_map: str | None = None
    # N consecutive failed attempts within S seconds disable the endpoint
    # (disabled_reason "auto"); None: never.
    disable_after: int | None = None
    disable_within_s: float | None = None

    @property
    def body_mode(self) -> str:
        if self.body is not None:
            return self.body
        return "none" if self.method == "GET" else "json"


SETTING_NAMES = tuple(f.name for f in fields(EndpointSettings))


@dataclass(frozen=True, kw_only=True, slots=True)
class Endpoint(EndpointSettings):
    """An endpoint as the engine sends to it: secrets unsealed, newest first."""

    id: int
    url: str
    secrets: tuple[str, ...]  # current first, then rotated-out ones still in grace
    enabled: bool = True
    app: str = "default"  # its application: claims share capacity across these first


class ClaimedRow(NamedTuple):
    """A claimed row as the claim returns it, column for column
    (queries.sql claim_batch): built in C from each record, with no
    __init__ to run per row (a dataclass's set its twelve fields one by
    one, and the claim's keyword call was as many lines again)."""

    id: int
    endpoint_id: int
    event_id: str
    body: bytes
    attempt_count: int  # attempts recorded before this one
    max_attempts: int
    event_type: str = ""
    traceparent: str | None = None  # the producer's W3C trace context (schema 024)
    tracestate: str | None = None
    erased: bool = False  # its payload was expunged: never to be sent


class Delivery(ClaimedRow):
    """A claimed row, and the engine's two marks on it: started (on the
    wire: a shutdown gives it the grace period) and its place in the
    endpoint's send order. They are class defaults until the admission
    sets them on the instance (a tuple subclass with a __dict__, made only
    then)."""

    started: bool = False
    seq: int = -1


# An answered attempt's (DNS, TCP connect, TLS handshake, first byte) in
# seconds, for the metrics and the span's events: the first three None on a
# reused connection, DNS for an address literal, TLS on plain HTTP.
Timing = tuple[float | None, float | None, float | None, float]


class AttemptResult(NamedTuple):
    """What the sender saw on the wire for one attempt. A NamedTuple, as
    Outcome: one is built per attempt, and a tuple is built in one step
    where a dataclass's __init__ sets its eleven fields one by one (a
    frozen one through object.__setattr__: 2.6 µs against 0.75)."""

    verdict: Verdict
    status_code: int | None
    response_ms: int
    error: str | None = None
    retry_after_s: float | None = None
    gone: bool = False  # 410: the receiver asks us to stop
    overloaded: bool = False  # 429 or 503: the receiver says it has too much
    timed_out: bool = False  # no status line within the timeout
    detail: bytes | None = None  # core.attemptdetail's record of what was seen
    timing: Timing | None = None  # None when no answer came
    remote_addr: str | None = None  # who answered (for a span; the record has it too)


@dataclass(slots=True)
class Stats:
    """What one worker has done, for logs, benchmarks and tests. Each
    component counts what it did in a Stats of its own (the engine its
    claims, the recorder what it wrote, the refresher the probes it won);
    the engine's `stats` is their sum."""

    claimed: int = 0
    claims: int = 0
    delivered: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    flushes: int = 0
    statements: int = 0
    breaker_transitions: list[tuple[int, str, str]] = field(default_factory=list)

    @classmethod
    def total(cls, parts: Sequence[Stats]) -> Stats:
        out = cls()
        for part in parts:
            for f in fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(part, f.name))
        return out


class Outcome(NamedTuple):
    """The decision for one delivery after an attempt, ready to persist.

    A NamedTuple rather than a frozen dataclass: one is built per delivery on
    the hot path, and a tuple is three times cheaper to build.
    """

    delivery_id: int
    endpoint_id: int
    status: Status
    next_attempt_in_s: float  # ignored unless status is FAILED or PENDING
    spent_attempt: bool  # False when a row is handed back unsent
    status_code: int | None = None
    response_ms: int | None = None
    error: str | None = None
    disable_endpoint: bool = False
    pause_s: float | None = None  # Retry-After: pause the whole endpoint this long
    # The row's attempt count when it was claimed (-1: unknown): after a
    # failover, tells this outcome from a newer attempt (core.failover).
    attempt: int = -1
    detail: bytes | None = None  # the attempt's record (core.attemptdetail)
    timing: Timing | None = None  # AttemptResult.timing

    @classmethod
    def unsendable(cls, d: Delivery, error: str) -> Outcome:
        """Dead-lettered without an attempt: nothing it could be sent to, or
        a payload the endpoint's shape cannot use."""
        return cls(d.id, d.endpoint_id, Status.DEAD_LETTER, 0.0, False, error=error[:300],
                   attempt=d.attempt_count)  # fmt: skip

    @classmethod
    def handed_back(cls, d: Delivery, delay_s: float = 0.0) -> Outcome:
        """A claimed row handed back unsent: no attempt spent."""
        return cls(d.id, d.endpoint_id, Status.PENDING, delay_s, False, attempt=d.attempt_count)

    @classmethod
    def attempted(cls, d: Delivery, r: AttemptResult, status: Status, delay_s: float) -> Outcome:
        """After an attempt: what the retry policy made of it, with what the
        attempt saw (a 410 disables the endpoint; a 429/503's Retry-After
        pauses it)."""
        return cls(d.id, d.endpoint_id, status, delay_s, True, r.status_code, r.response_ms,
                   r.error, r.gone, r.retry_after_s if r.overloaded else None,
                   d.attempt_count, r.detail, r.timing)  # fmt: skip


# The range of every numeric setting (SPEC "Limits"): checked where values
# enter (API, CLI, Python API), held by the schema's CHECK constraints, and
# checked again on every row the worker reads, so that no value one
# application can set (or an old release wrote) can stop or starve a worker.
RANGES: dict[str, tuple[float, float]] = {
    "rate_per_s": (0.001, 100_000),
    "burst": (1, 100_000),
    "max_in_flight": (1, 10_000),
    "timeout_ms": (100, 300_000),
    "max_attempts": (1, 100),
    "retry_base_ms": (0, 86_400_000),
    "retry_cap_ms": (0, 604_800_000),
    "failure_threshold": (1, 10_000),
    "cooldown_s": (1, 86_400),
    # At most 1000: the worker keeps the failures' times to judge "within".
    "disable_after": (1, 1_000),
    "disable_within_s": (1, 2_592_000),  # 30 days
}
# The numeric settings that are whole numbers; the others are floats.
INTEGRAL = frozenset(RANGES) - {"rate_per_s", "cooldown_s", "disable_within_s"}
# The numeric settings that may be unset (None).
UNSET_OK = frozenset({"rate_per_s", "burst", "disable_after", "disable_within_s"})


def out_of_range(settings: EndpointSettings) -> str | None:
    """The first numeric setting outside its range, as `name must be between
    low and high`; None when all are in range. NaN and infinities are out of
    every range; integral settings must be integers (never bools)."""
    for name, (low, high) in RANGES.items():
        value = getattr(settings, name)
        if value is None and name in UNSET_OK:
            continue
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and name in INTEGRAL:
            ok = isinstance(value, int)
        if not ok or not low <= value <= high:
            return f"{name} must be between {fmt_number(low)} and {fmt_number(high)}"
    return None


def fmt_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


# An endpoint's subscriptions: each one is matched at every enqueue.
MAX_EVENT_TYPES = 1000
# The event type of `endpoint test` and of the console's "send a test event".
TEST_EVENT_TYPE = "dispatcher.test"


@dataclass(frozen=True, kw_only=True, slots=True)
class EndpointSpec(EndpointSettings):
    """What a user asks for when creating or updating an endpoint."""

    url: str
    secret: str | None = None
    # Labels for people (dashboards, lists); the worker never reads them.
    name: str | None = None
    description: str | None = None

    def validate(self) -> None:
        from dispatcher.core.errors import BadInput

        problem = out_of_range(self)
        if problem is not None:
            raise BadInput(problem)
        if not self.event_types or any(
            not t or len(t) > 256 or not t.isprintable() for t in self.event_types
        ):
            raise BadInput("event types must be non-empty printable strings")
        if len(self.event_types) > MAX_EVENT_TYPES:
            raise BadInput(f"event_types: at most {MAX_EVENT_TYPES} per endpoint")
        validate_headers(self.headers)
        validate_labels(self.name, self.description)
        validate_shape(self)


SEALED_PREFIX = "enc:v1:"  # secretbox.PREFIX (models imports nothing of ours)
METHODS = ("POST", "GET", "PUT")
BODIES = ("json", "form", "none")
MACRO_STYLES = ("brace", "hash", "double")  # shaping.STYLES
ORDERINGS = ("none", "fifo")
_KEY_PATH = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----[\s\S]+-----END [A-Z0-9 ]+-----\s*")


def validate_shape(spec: EndpointSettings) -> None:
    """Method, body, ordering and client credentials; the success-body
    pattern and the filter's JSON are checked where they are read (inputs)."""
    from dispatcher.core.errors import BadInput

    if spec.method not in METHODS:
        raise BadInput(f"method must be one of {', '.join(METHODS)}")
    if spec.body is not None and spec.body not in BODIES:
        raise BadInput(f"body must be one of {', '.join(BODIES)}")
    if spec.ordering not in ORDERINGS:
        raise BadInput(f"ordering must be one of {', '.join(ORDERINGS)}")
    if spec.ordering_key is not None:
        if spec.ordering != "fifo":
            raise BadInput("ordering_key needs ordering fifo")
        if len(spec.ordering_key) > 200 or not _KEY_PATH.fullmatch(spec.ordering_key):
            raise BadInput("ordering_key must be a field name (a.b for a nested one)")
    if spec.macro_style not in MACRO_STYLES:
        raise BadInput(f"macro_style must be one of {', '.join(MACRO_STYLES)}")
    if (spec.disable_after is None) != (spec.disable_within_s is None):
        raise BadInput("disable_after and disable_within_s go together")
    if (spec.client_cert is None) != (spec.client_key is None):
        raise BadInput("client_cert and client_key go together")
    for name, pem in (("client_cert", spec.client_cert), ("client_key", spec.client_key)):
        if pem is None or pem.startswith(SEALED_PREFIX):
            continue  # the stored, sealed value an update carries over
        if len(pem) > 65_536 or not _PEM.fullmatch(pem.strip() + "\n"):
            raise BadInput(f"{name} must be PEM text (-----BEGIN …-----)")


def validate_labels(name: str | None, description: str | None) -> None:
    from dispatcher.core.errors import BadInput

    if name is not None and (not 0 < len(name) <= 100 or not name.isprintable()):
        raise BadInput("name must be 1..100 printable characters")
    if description is not None and (
        len(description) > 1000 or not all(c in "\n\t" or c.isprintable() for c in description)
    ):
        raise BadInput("description must be at most 1000 characters, without control characters")


# Headers a user may not set: ours (the signature would no longer match what
# receivers verify) and the ones HTTP framing depends on.
RESERVED_HEADERS = frozenset({
    "webhook-id", "webhook-timestamp", "webhook-signature", "content-type", "content-length",
    "user-agent", "host", "transfer-encoding", "connection", "te", "upgrade", "expect",
    "keep-alive", "proxy-connection", "trailer",
})  # fmt: skip
# What ops.tenancy issues: dtk_ and 43 URL-safe characters; anything much
# like one is refused.
_APP_TOKEN = re.compile(r"dtk_[A-Za-z0-9_-]{16,}")
_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def validate_headers(headers: tuple[tuple[str, str], ...]) -> None:
    from dispatcher.core.errors import BadInput

    if len(headers) > 20:
        raise BadInput("at most 20 custom headers")
    seen = set()
    for name, value in headers:
        if (
            not isinstance(name, str)
            or not name
            or not set(name) <= _TOKEN_CHARS
            or len(name) > 100
        ):
            raise BadInput("header names must be HTTP tokens of 1..100 characters")
        low = name.lower()
        if low in RESERVED_HEADERS or low.startswith("webhook-"):
            raise BadInput(f"header {name} is set by dispatcher and cannot be overridden")
        if low in seen:
            raise BadInput(f"header {name} is given twice")
        seen.add(low)
        if not isinstance(value, str) or len(value) > 2048:
            raise BadInput(f"header {name}: value must be a string of at most 2048 characters")
        if any(c in value for c in "\r\n\0") or not all(
            c == "\t" or c.isprintable() for c in value
        ):
            raise BadInput(f"header {name}: value must not contain control characters")
        if value.startswith("enc:v1:"):
            # The stored form of a sealed value: a plain one must not look like it.
            raise BadInput(f"header {name}: value must not start with enc:v1:")
        carried = carried_credential(value)
        if carried is not None:
            # Also what the worker checks before sending (gate: "headers invalid").
            raise BadInput(f"header {name}: value must not carry {carried}")


def carried_credential(value: str, tokens: Sequence[str] = ()) -> str | None:
    """Which of this server's credentials a header value carries, if any:
    an application's API token (dtk_…, known by its form), or one of
    `tokens` (the admin token, which only the deployment knows: ops passes
    its TargetPolicy's). Sent with every delivery, it would hand the
    credential to the receiver, or let an endpoint drive this server's API
    (a loop, issue 32). A short token (allowed on loopback) counts only as
    a whole word, not inside others."""
    if _APP_TOKEN.search(value):
        return "an application token (dtk_…)"
    for token in tokens:
        if token in value.split() or (len(token) >= 16 and token in value):
            return "this server's credentials"
    return None
