"""Destinations beyond HTTP: what an endpoint URL's scheme names (SPEC
"Destinations"). Pure: URLs in, a parsed broker target or BadInput out.

`http`/`https` stay the sender's; `amqp(s)` (RabbitMQ), `nats`/`tls` (a
JetStream subject), `redis(s)` (a stream) are published to by
worker/brokers; `poll:` endpoints keep their deliveries for a consumer
(never claimed by a worker; read and acknowledged through ops.polling).

A broker URL may carry credentials (`user:pass@`; a NATS token as
`:TOKEN@`): stored with the password sealed like an endpoint secret
(`seal_url`), opened only for the worker (`open_url`), and shown masked
(`masked_url`). An update that sends the masked URL back keeps the stored
password (`kept_password`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from dispatcher.core.errors import BadInput, TargetRefused
from dispatcher.core.secretbox import PREFIX, SecretBox, seal, unseal
from dispatcher.core.shaping import url_sample
from dispatcher.core.ssrf import (
    TargetPolicy,
    check_address,
    check_url_text,
    literal_address,
    refusal,
    validate_url,
)

HTTP = "http"
AMQP = "amqp"
NATS = "nats"
REDIS = "redis"
POLL = "poll"

# scheme → (kind, TLS, default port)
SCHEMES: dict[str, tuple[str, bool, int]] = {
    "amqp": (AMQP, False, 5672),
    "amqps": (AMQP, True, 5671),
    "nats": (NATS, False, 4222),
    "tls": (NATS, True, 4222),
    "redis": (REDIS, False, 6379),
    "rediss": (REDIS, True, 6379),
}
BROKER_KINDS = frozenset({AMQP, NATS, REDIS})
PASSWORD_MASK = "****"

# A JetStream subject to publish to: tokens of printable characters without
# the wildcards (a publish names one subject).
_SUBJECT = re.compile(r"[!-)+-=?-~]+(\.[!-)+-=?-~]+)*")
_AMQP_NAME = re.compile(r"[\w.:/-]{0,255}")  # exchange names RabbitMQ accepts


def kind_of(url: str) -> str:
    """The endpoint kind a URL names (http for anything else: its own
    checks, core.ssrf's, say what is wrong with it)."""
    scheme = url.partition(":")[0].lower()
    if scheme == POLL:
        return POLL
    return SCHEMES[scheme][0] if scheme in SCHEMES else HTTP


@dataclass(frozen=True, slots=True)
class BrokerTarget:
    """A broker endpoint's URL, read. `link` is what one connection serves:
    endpoints sharing it share the connection."""

    kind: str
    scheme: str
    tls: bool
    host: str
    port: int
    username: str | None
    password: str | None
    vhost: str = "/"  # amqp
    exchange: str = ""  # amqp: "" is the default exchange
    routing_key: str = ""  # amqp
    subject: str = ""  # nats
    db: int = 0  # redis
    stream: str = ""  # redis
    maxlen: int | None = None  # redis: XADD MAXLEN ~ N

    @property
    def link(self) -> tuple[object, ...]:
        return (self.scheme, self.host, self.port, self.username, self.password,
                self.vhost, self.db)  # fmt: skip

    @property
    def where(self) -> str:
        """For messages and spans: never the credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def allow_key(self) -> str:
        """As DISPATCHER_BROKERS_ALLOWED lists it: scheme://host:port."""
        return self.where.lower()


def parse_broker(url: str) -> BrokerTarget:
    """A broker URL as the worker publishes to it, or BadInput saying what
    is wrong. The URL as stored may hold a sealed password: open it first."""
    check_url_text(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadInput(f"url is not valid: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise BadInput(f"url scheme {scheme} is not a broker's")
    kind, tls, default_port = SCHEMES[scheme]
    host = parts.hostname
    if not host:
        raise BadInput("url must name the broker's host")
    if port == 0:
        raise BadInput("url port must be 1..65535")
    if parts.fragment:
        raise BadInput("url must not have a fragment")
    if "{" in url or "}" in url:
        raise BadInput("url macros are for http endpoints only")
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    query = _query(parts.query)
    base = dict(kind=kind, scheme=scheme, tls=tls, host=host, port=port or default_port,
                username=user, password=password)  # fmt: skip
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
    if kind == AMQP:
        return _amqp(base, path, query)
    if kind == NATS:
        _no_query(query, "nats")
        if not path or not _SUBJECT.fullmatch(path):
            raise BadInput("a nats url names one subject as its path: nats://host:4222/orders.paid")
        return BrokerTarget(**base, subject=path)  # type: ignore[arg-type]
    return _redis(base, path, query)


def _query(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in parse_qsl(raw, keep_blank_values=True, strict_parsing=False):
        if name in out:
            raise BadInput(f"url query parameter {name} is given twice")
        out[name] = value
    return out


def _no_query(query: dict[str, str], what: str, known: tuple[str, ...] = ()) -> None:
    for name in query:
        if name not in known:
            allowed = ", ".join(known) or "none"
            raise BadInput(f"a {what} url takes no query parameter {name} (allowed: {allowed})")


def _amqp(base: dict[str, object], path: str, query: dict[str, str]) -> BrokerTarget:
    _no_query(query, "amqp", ("exchange", "routing_key"))
    exchange = query.get("exchange", "")
    routing_key = query.get("routing_key", "")
    if not _AMQP_NAME.fullmatch(exchange):
        raise BadInput("amqp exchange name is not valid (letters, digits, . _ - : /; 255 at most)")
    if len(routing_key.encode()) > 255:
        raise BadInput("amqp routing_key is longer than 255 bytes")
    if not exchange and not routing_key:
        raise BadInput(
            "an amqp url names where to publish: ?exchange=X&routing_key=K"
            " (or a queue as routing_key on the default exchange)"
        )
    return BrokerTarget(**base, vhost=path or "/", exchange=exchange,  # type: ignore[arg-type]
                        routing_key=routing_key)  # fmt: skip


def _redis(base: dict[str, object], path: str, query: dict[str, str]) -> BrokerTarget:
    _no_query(query, "redis", ("stream", "maxlen"))
    if path and not path.isdigit():
        raise BadInput("a redis url's path is the database number: redis://host:6379/0?stream=K")
    db = int(path) if path else 0
    stream = query.get("stream", "")
    if not stream or len(stream) > 1024:
        raise BadInput("a redis url names its stream: redis://host:6379/0?stream=KEY")
    maxlen = None
    if "maxlen" in query:
        raw = query["maxlen"]
        if not raw.isdigit() or not 1 <= int(raw) <= 10**12:
            raise BadInput("redis maxlen must be a whole number of entries, at least 1")
        maxlen = int(raw)
    return BrokerTarget(**base, db=db, stream=stream, maxlen=maxlen)  # type: ignore[arg-type]


def broker_address(text: str) -> str:
    """`scheme://host[:port]` as BrokerTarget.allow_key has it (the default
    port filled in), for DISPATCHER_BROKERS_ALLOWED."""
    try:
        parts = urlsplit(text.strip().rstrip("/"))
        port = parts.port
    except ValueError:
        port, parts = None, urlsplit("")
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES or not parts.hostname or parts.path or parts.query:
        raise BadInput(f"{text!r} is not a broker as scheme://host:port (amqp, nats, redis...)")
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port or SCHEMES[scheme][2]}".lower()


def validate_destination(url: str, style: str = "brace") -> str:
    """The URL's shape check when an endpoint is created or changed (and by
    the worker before it builds a wire): an HTTP URL's as core.ssrf reads
    it, with its macros as sample values; a broker's as parse_broker does."""
    kind = kind_of(url) if isinstance(url, str) else HTTP
    if kind == HTTP:
        validate_url(url_sample(url, style))
    elif kind == POLL:
        if url != "poll:":
            raise BadInput("a polling endpoint's url is poll: (nothing after it)")
    else:
        parse_broker(url)
    return url


def check_new_url(url: str) -> None:
    """What a URL given now must also be (not one stored before): NATS's
    own `nats://TOKEN@host` form would keep the token where it is neither
    sealed nor masked; it goes in the password's place. (One stored in that
    form still works: worker/brokers/nats.py sends it as the token.)"""
    if kind_of(url) != NATS:
        return
    target = parse_broker(url)
    if target.username and target.password is None:
        raise BadInput("a NATS token goes where a password would: nats://:TOKEN@host/subject")


def broker_refusal(target: BrokerTarget, policy: TargetPolicy, *, tenant: bool) -> str | None:
    """Why an endpoint may not publish to `target`, judged at creation: a
    tenant only to the brokers DISPATCHER_BROKERS_ALLOWED lists, which are
    trusted wherever they are; anyone else's literal address by the SSRF
    guard (names are judged after DNS by the caller and by the worker)."""
    if target.allow_key in policy.brokers_allowed:
        return None
    if tenant:
        return (
            f"broker {target.allow_key} is not in DISPATCHER_BROKERS_ALLOWED"
            " (an application's endpoints publish only to brokers the operator allows)"
        )
    if literal_address(target.host) is not None:
        try:
            check_address(target.host, target.host, allow_private=policy.allow_private,
                          allowed_networks=policy.allowed_networks)  # fmt: skip
        except TargetRefused as exc:
            return refusal(str(exc))
    return None


def _with_password(url: str, password: str, *, raw: bool = False) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    secret = ":" + (password if raw else quote(password, safe=""))
    return urlunsplit(parts._replace(netloc=f"{user}{secret}@{host}"))


def _password(url: str) -> str | None:
    parts = urlsplit(url)
    return None if parts.password is None else unquote(parts.password)


def seal_url(box: SecretBox | None, url: str) -> str:
    """The URL as stored: a broker URL's password sealed (plain when no
    DISPATCHER_SECRET_KEY is set, as endpoint secrets are)."""
    password = _password(url) if kind_of(url) not in (HTTP, POLL) else None
    if password is None or password.startswith(PREFIX):  # sealed already (kept)
        return url
    return _with_password(url, seal(box, password))


def open_url(box: SecretBox | None, stored: str) -> str:
    """The URL to connect to, from the stored one."""
    password = _password(stored) if kind_of(stored) not in (HTTP, POLL) else None
    if password is None:
        return stored
    return _with_password(stored, unseal(box, password))


def masked_url(stored: str) -> str:
    """The URL as shown anywhere: a password as PASSWORD_MASK."""
    if kind_of(stored) in (HTTP, POLL) or _password(stored) is None:
        return stored
    return _with_password(stored, PASSWORD_MASK, raw=True)


def kept_password(new: str, stored: str) -> str:
    """`new` as given in an update; the masked password (what users were
    shown) stands for the stored one, so an update that sends the URL back
    does not overwrite it."""
    if kind_of(new) in (HTTP, POLL) or _password(new) != PASSWORD_MASK:
        return new
    if masked_url(stored) != new:
        raise BadInput(f"a password {PASSWORD_MASK} only keeps the stored one for the same url")
    return stored
