"""The operations on endpoints, events and dead letters: one function each.

The CLI, the admin API, the Python API and the demo all call these with a
connection and values already read from their input; the operation, its
defaults and its checks live here once. What a user sees of an endpoint
(`endpoint_public`) is decided here too. This module never runs SQL (the
catalog does) and never formats output for a terminal or an HTTP response.
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from dispatcher.core import opsevents
from dispatcher.core.errors import BadInput, NotFound, Throttled
from dispatcher.core.models import SETTING_NAMES, EndpointSpec
from dispatcher.core.rows import EndpointRecord
from dispatcher.core.secretbox import SecretBox, seal, unseal
from dispatcher.core.shaping import url_sample
from dispatcher.core.signing import (
    SIGNING_KEY_PREFIX,
    generate_secret,
    generate_signing_key,
    public_key,
    validate_secret,
)
from dispatcher.core.ssrf import (
    TargetPolicy,
    check_resolved,
    check_target,
    literal_address,
    own_address_refusal,
    parse_target,
)
from dispatcher.db import Conn, applications, catalog, columns, deliveries, opswebhooks
from dispatcher.ops.eventtypes import validate_events, validate_payload
from dispatcher.ops.inputs import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    check_deliver_at,
    check_event_id,
    check_event_type,
    check_id,
    check_number,
    event_id_of,
    parse_event,
    parse_time,
    payload_text,
    read_events,
    spec_from_fields,
)
from dispatcher.ops.tenancy import DEFAULT_APP, check_app

DEFAULT_GRACE_S = 86_400.0  # a rotated-out secret keeps signing for a day
MAX_GRACE_S = float(2**31)
DEFAULT_REPLAY_LIMIT = 10_000  # dead letters requeued per replay call
# What every output shows for a header value; sent back in an update, it
# keeps the stored value of that header.
HEADER_MASK = "••••"

# ---------------------------------------------------------------- endpoints


RESOLVE_TIMEOUT_S = 3.0


async def vet_target(url: str, targets: TargetPolicy, style: str = "brace") -> None:
    """The SSRF guard at `endpoint add`: the literal address, then what the
    name resolves to now. A name that does not resolve (yet), or a resolver
    that does not answer in time, is accepted: the sender checks every
    connection after DNS anyway, and a receiver's DNS may go live later."""
    url = url_sample(url, style)
    check_target(url, targets)
    # This server's own origin is refused whatever allows private targets:
    # a name for it (localhost.example, the host's own name) is judged by
    # what it resolves to now.
    judge_private = not (targets.allow_private or targets.names_via_proxy)
    if not judge_private and not targets.own_origins:
        return
    target = parse_target(url)
    host = target.host
    if host is None or literal_address(target.raw_host or "") is not None:
        return
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
        )
    except (OSError, TimeoutError, UnicodeError):
        return
    addresses = [str(info[4][0]) for info in infos]
    port = target.explicit_port or (443 if target.scheme == "https" else 80)
    why = own_address_refusal(host, port, addresses, targets.own_origins)
    if why is not None:
        raise BadInput(f"url refused: {why} (an endpoint may not call this server)")
    if judge_private:
        check_resolved(host, addresses, targets)


def check_credentials(headers: Sequence[tuple[str, str]], targets: TargetPolicy | None) -> None:
    """No header value may carry this server's admin token (application
    tokens are refused by the spec's own checks, validate_headers): sent
    with every delivery, it would hand the operator's credential to the
    receiver, or let an endpoint drive this server's API. A short token
    (allowed on loopback) counts only as a whole word, not inside others."""
    if targets is None:
        return
    for name, value in headers:
        if value == HEADER_MASK:
            continue
        for token in targets.credentials:
            if token in value.split() or (len(token) >= 16 and token in value):
                raise BadInput(f"header {name}: value must not carry this server's credentials")


def endpoint_public(record: EndpointRecord, *, secret: str | None = None) -> dict[str, Any]:
    """An endpoint as users see it: the secret (and for an ed25519 key its
    public half) only when just created or rotated."""
    out: dict[str, Any] = {"id": record.id, "app": record.application_id, "name": record.name}
    out["url"] = record.url
    out["description"] = record.description
    out.update((name, getattr(record, name)) for name in SETTING_NAMES)
    out["event_types"] = list(record.event_types)
    # Header values are often a receiver's credentials: names only.
    out["headers"] = {name: HEADER_MASK for name, _ in record.headers}
    out["body"] = record.body_mode
    out["filter"] = None if record.filter is None else orjson.loads(record.filter)
    out["value_map"] = None if record.value_map is None else orjson.loads(record.value_map)
    # A client key is a credential, and the certificate goes with it.
    out["client_cert"] = None if record.client_cert is None else HEADER_MASK
    out["client_key"] = None if record.client_key is None else HEADER_MASK
    out["enabled"] = record.enabled
    out["disabled_reason"] = record.disabled_reason
    out["created_at"] = record.created_at
    out["updated_at"] = record.updated_at
    if secret is not None:
        out["secret"] = secret
        if secret.startswith(SIGNING_KEY_PREFIX):
            out["public_key"] = public_key(secret)
    return out


def new_secret(scheme: str | None) -> str:
    """A fresh secret: HMAC (`v1`, default) or an ed25519 signing key (`v1a`)."""
    if scheme in (None, "v1"):
        return generate_secret()
    if scheme == "v1a":
        return generate_signing_key()
    raise BadInput("signature must be v1 (HMAC) or v1a (ed25519)")


def scheme_of(secret: str) -> str:
    return "v1a" if secret.startswith(SIGNING_KEY_PREFIX) else "v1"


async def add_endpoint(
    conn: Conn,
    spec: EndpointSpec,
    *,
    signature: str | None = None,
    box: SecretBox | None = None,
    targets: TargetPolicy | None = None,
    app: str | None = None,
    within_quota: bool = False,
    charged: bool = False,
) -> dict[str, Any]:
    """Creates an endpoint of `app` (None: the default application);
    without a secret in `spec`, one of `signature`'s scheme.

    `targets`: the deployment's SSRF policy, checked against the URL's
    literal address (the CLI and the API pass theirs; None only for trusted
    callers of the Python API, whose URLs the worker still checks).
    `within_quota` (the HTTP API): Conflict past the application's
    max_endpoints; the operator's CLI and the Python API are not held to it."""
    spec.validate()  # a spec built in Python skips spec_from_fields: same ranges
    if targets is not None:
        await vet_target(spec.url, targets, spec.macro_style)
    if any(value == HEADER_MASK for _, value in spec.headers):
        raise BadInput(f"a header value {HEADER_MASK} only keeps a stored value in an update")
    check_credentials(spec.headers, targets)
    secret = spec.secret or new_secret(signature)
    app = check_app(app or DEFAULT_APP)
    async with conn.transaction():
        record = await catalog.add_endpoint(conn, spec, secret, box, app, within_quota=within_quota)
        await _announce(conn, opsevents.ENDPOINT_CREATED, record.id, charge=_charge(app, charged))
    return endpoint_public(record, secret=secret)


async def _announce(
    conn: Conn, event_type: str, endpoint_id: int, *, charge: str | None = None, **extra: Any
) -> None:
    """An endpoint.* operational event, in the change's own transaction:
    queued if and only if the change commits.

    `charge` (the change was made with that application's own credential,
    `charged` in the callers): one event of its max_events_per_s per
    delivery to its own ops webhooks, or Throttled and the change rolls
    back, so that ops webhooks do not multiply changes past the quota
    (issue 32). The operator's ops webhooks are told for free: they are
    the operator's, and the change itself was the tenant's to make."""
    if charge is not None:
        n = await opswebhooks.app_wanting(conn, charge, event_type)
        if n:
            await take_event_quota(conn, charge, n)
    event = opsevents.OpsEvent(event_type, endpoint_id, extra=extra or None)
    await opswebhooks.emit(conn, [event])


async def update_endpoint(
    conn: Conn,
    endpoint_id: int,
    patch: Mapping[str, Any],
    *,
    box: SecretBox | None = None,
    targets: TargetPolicy | None = None,
    app: str | None = None,
    charged: bool = False,
) -> dict[str, Any]:
    """Applies `patch` over the endpoint's current settings, validated whole
    (the URL again too, as at creation). Headers not in `patch` stay as they
    are; in `patch`, they replace the set, HEADER_MASK keeping a stored value."""
    if "secret" in patch:
        raise BadInput("use rotate-secret to change a secret")
    if "enabled" in patch:
        raise BadInput("use the disable / enable routes")
    await catalog.check_owner(conn, endpoint_id, app)
    async with conn.transaction():
        current = await catalog.get_endpoint(conn, endpoint_id, lock=True)
        # "app" may name the endpoint's own application, and nothing else.
        if patch.get("app", current.application_id) != current.application_id:
            raise BadInput("an endpoint stays in its application")
        patch = {k: v for k, v in patch.items() if k != "app"}
        # The stored headers may be sealed: they are carried over, not re-validated.
        base = EndpointSpec(
            url=current.url,
            name=current.name,
            description=current.description,
            **{k: getattr(current, k) for k in SETTING_NAMES if k != "headers"},
        )
        spec = spec_from_fields(patch, base)
        if targets is not None and spec.url != current.url:
            await vet_target(spec.url, targets, spec.macro_style)
        elif targets is not None:
            check_target(url_sample(spec.url, spec.macro_style), targets)
        stored = current.headers
        if "headers" in patch:
            check_credentials(spec.headers, targets)
            stored = _patched_headers(current.headers, spec.headers, box)
        record = await catalog.update_endpoint(conn, endpoint_id, spec, stored, box)
        await _announce(conn, opsevents.ENDPOINT_UPDATED, endpoint_id, charge=_charge(app, charged))
    return endpoint_public(record)


def _charge(app: str | None, charged: bool) -> str | None:
    """The application `_announce` charges: the caller's own, when `charged`."""
    return check_app(app) if charged and app is not None else None


def _patched_headers(
    stored: columns.Headers, given: columns.Headers, box: SecretBox | None
) -> columns.Headers:
    kept = {name.lower(): value for name, value in stored}
    out = []
    for name, value in given:
        if value != HEADER_MASK:
            out.append((name, seal(box, value)))
        elif name.lower() in kept:
            out.append((name, kept[name.lower()]))
        else:
            raise BadInput(f"header {name}: {HEADER_MASK} keeps a stored value, and there is none")
    return tuple(out)


async def set_enabled(
    conn: Conn, endpoint_id: int, enabled: bool, app: str | None = None, *, charged: bool = False
) -> dict[str, Any]:
    """Stops or resumes deliveries to an endpoint; nothing queued is lost."""
    await catalog.check_owner(conn, endpoint_id, app)
    async with conn.transaction():
        record = await catalog.set_enabled(conn, endpoint_id, enabled)
        if enabled:
            await _announce(conn, opsevents.ENDPOINT_ENABLED, endpoint_id,
                            charge=_charge(app, charged))  # fmt: skip
        else:
            await _announce(conn, opsevents.ENDPOINT_DISABLED, endpoint_id,
                            charge=_charge(app, charged), reason=opsevents.OPERATOR)  # fmt: skip
    return endpoint_public(record)


async def rotate_secret(
    conn: Conn,
    endpoint_id: int,
    grace_s: float | None = None,
    box: SecretBox | None = None,
    app: str | None = None,
    secret: str | None = None,
) -> dict[str, Any]:
    """A new secret (`secret`, or one generated of the endpoint's own scheme:
    HMAC stays HMAC, ed25519 stays ed25519); the old one keeps signing
    alongside it for `grace_s`."""
    grace = DEFAULT_GRACE_S if grace_s is None else check_number(grace_s, "grace_s", 0, MAX_GRACE_S)
    if secret is not None:
        validate_secret(secret)
    await catalog.check_owner(conn, endpoint_id, app)
    async with conn.transaction():
        current = await catalog.get_endpoint(conn, endpoint_id, lock=True)
        # The stored secret may be sealed: its scheme is that of the plaintext.
        secret = secret or new_secret(scheme_of(unseal(box, current.sealed_secret)))
        record = await catalog.rotate_secret(conn, endpoint_id, secret, grace, box)
    doc = endpoint_public(record, secret=secret)
    doc["grace_s"] = grace
    return doc


async def current_secret(
    conn: Conn, endpoint_id: int, box: SecretBox | None = None, app: str | None = None
) -> str:
    """The secret the endpoint signs with now (the Svix API shows it on request)."""
    await catalog.check_owner(conn, endpoint_id, app)
    return unseal(box, (await catalog.get_endpoint(conn, endpoint_id)).sealed_secret)


async def list_endpoints(conn: Conn, app: str | None = None) -> list[dict[str, Any]]:
    """Every live endpoint, or `app`'s (an unknown application: NotFound)."""
    if app is not None:
        await applications.require_applications(conn, [check_app(app)])
    return [endpoint_public(r) for r in await catalog.list_endpoints(conn, app)]


async def get_endpoint(conn: Conn, endpoint_id: int, app: str | None = None) -> dict[str, Any]:
    await catalog.check_owner(conn, endpoint_id, app)
    return endpoint_public(await catalog.get_endpoint(conn, endpoint_id))


async def delete_endpoint(
    conn: Conn,
    endpoint_id: int,
    force: bool = False,
    app: str | None = None,
    *,
    charged: bool = False,
) -> dict[str, Any]:
    """Deletes an endpoint: it is no longer listed and gets nothing more; its
    dead letters and history stay. Refused (Conflict) while it has pending,
    failed or in-flight deliveries, unless `force`, which first moves them
    to dead_letter with last_error `endpoint deleted`."""
    check_id(endpoint_id, "id")
    if not isinstance(force, bool):
        raise BadInput("force must be true or false")
    await catalog.check_owner(conn, endpoint_id, app)
    async with conn.transaction():
        record, dead = await catalog.delete_endpoint(conn, endpoint_id, force=force)
        await _announce(conn, opsevents.ENDPOINT_DELETED, endpoint_id, charge=_charge(app, charged))
    return {"id": record.id, "url": record.url, "deleted": True, "dead_lettered": dead}


# ---------------------------------------------------------------- events


async def enqueue(
    conn: Conn,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    endpoint_id: int | None = None,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    app: str | None = None,
    deliver_at: str | datetime | None = None,
    delay_s: float | None = None,
    hold: bool = False,
) -> dict[str, Any]:
    """Queues one event of `app` (None: the default application, or the
    given endpoint's): a delivery per subscribed endpoint of that application
    (or only to `endpoint_id`). JSON text or bytes are kept byte for byte.
    The same event id again in the same application creates nothing new and
    answers the existing deliveries. `hold`: sent only once released;
    `deliver_at` (a time) or `delay_s`: not before then."""
    event_type = check_event_type(event_type)
    event_id = event_id_of(event_id)
    endpoint_id = check_id(endpoint_id)
    text = payload_text(payload, max_payload_bytes)
    app = _app(app)
    await validate_payload(conn, app, event_type, text, endpoint_id=endpoint_id)
    when = _schedule(deliver_at, delay_s, hold)
    ids = await catalog.enqueue(conn, event_type, text, event_id, endpoint_id, app, **when)
    return {"event_id": event_id, "deliveries": ids}


MAX_DELAY_S = 366 * 86_400.0  # a year and a day: a conversion's approval window at most


def _schedule(deliver_at: Any, delay_s: Any, hold: Any) -> dict[str, Any]:
    """deliver_at / delay_s / hold, checked, as catalog.enqueue takes them."""
    if deliver_at is not None and delay_s is not None:
        raise BadInput("give deliver_at or delay_s, not both")
    if not isinstance(hold, bool):
        raise BadInput("hold must be true or false")
    delay = None if delay_s is None else check_number(delay_s, "delay_s", 0, MAX_DELAY_S)
    at = check_deliver_at(deliver_at, "deliver_at")
    return {"deliver_at": at, "delay_s": delay, "hold": hold}


async def release_event(conn: Conn, event_id: str, app: str | None = None) -> dict[str, Any]:
    """Sends an event's held deliveries (of `app`; None: of the one
    application that has the event): `{"event_id", "released": [ids]}`.
    Releasing again changes nothing; an event the application does not
    have: NotFound."""
    event_id = _event_id(event_id)
    app = await _event_app(conn, event_id, app)
    return {"event_id": event_id, "released": await catalog.release_event(conn, app, event_id)}


async def cancel_event(conn: Conn, event_id: str, app: str | None = None) -> dict[str, Any]:
    """Ends an event's deliveries not yet sent (held, pending, awaiting a
    retry): status `cancelled`, never sent. One on the wire finishes.
    `{"event_id", "cancelled": [ids]}`."""
    event_id = _event_id(event_id)
    # Named (an application's caller, or the operator naming one): the
    # operator's ops deliveries are no tenant's and stay (issue 32).
    of = await _event_app(conn, event_id, app)
    cancelled = await catalog.cancel_event(conn, of, event_id, operator_ops=app is None)
    return {"event_id": event_id, "cancelled": cancelled}


def _event_id(value: Any) -> str:
    event_id = check_event_id(value)
    if event_id is None:
        raise BadInput("event_id is required")
    return event_id


async def _event_app(conn: Conn, event_id: str, app: str | None) -> str:
    """The application whose event this is: `app` (an application's caller,
    or the operator naming one) if it has the event; for the operator
    without one, the one application that has it. NotFound otherwise (the
    message names neither the id nor another application)."""
    apps = await catalog.event_applications(conn, event_id, tenant=app is not None)
    if app is not None:
        if check_app(app) not in apps:
            raise NotFound(f"no such event in application {app}")
        return app
    if not apps:
        raise NotFound("no such event")
    if len(apps) > 1:
        raise BadInput(f"this event id is in applications {', '.join(apps)}: name one (app)")
    return apps[0]


async def enqueue_event(
    conn: Conn,
    doc: Mapping[str, Any],
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    app: str | None = None,
    within_quota: bool = False,
) -> dict[str, Any]:
    """`enqueue` for one event given as a JSON document (an API body);
    `app` is the application the document's own "app" resolved to.
    `within_quota` (the HTTP API): Throttled, with nothing queued, past the
    application's max_events_per_s."""
    # Scheduling belongs to one event, not to a JSONL line: taken out here.
    when = _schedule(doc.get("deliver_at"), doc.get("delay_s"), doc.get("hold", False))
    doc = {k: v for k, v in doc.items() if k not in ("deliver_at", "delay_s", "hold")}
    event_id, event_type, payload, endpoint, _ = parse_event(doc, max_payload_bytes)
    app = _app(app)
    if within_quota:
        await take_event_quota(conn, app, 1, endpoint)
    await validate_payload(conn, app, event_type, payload, endpoint_id=endpoint)
    ids = await catalog.enqueue(conn, event_type, payload, event_id, endpoint, app, **when)
    return {"event_id": event_id, "deliveries": ids}


async def take_event_quota(
    conn: Conn, app: str | None, n: int, endpoint_id: int | None = None
) -> None:
    """Takes `n` events from the quota of the application they go to (as
    `enqueue` resolves it), or raises Throttled and takes nothing. Tokens
    taken stay taken if the enqueue then fails: a refused call costs its
    share like any other."""
    wait_s = await applications.take_event_tokens(conn, app, n, endpoint_id)
    if wait_s is not None:
        retry = max(1, math.ceil(wait_s))
        raise Throttled(
            f"over this application's events quota (max_events_per_s): retry in {retry} s", retry
        )


TEST_EVENT_TYPE = "dispatcher.test"


async def send_test_event(
    conn: Conn, endpoint_id: int, app: str | None = None, *, within_quota: bool = False
) -> dict[str, Any]:
    """One `dispatcher.test` event to this endpoint only (its subscriptions
    and filter are not asked), as a receiver's owner checks the wiring.
    `within_quota` (the HTTP API): it counts against the events quota, or
    test events would be a way around it."""
    if within_quota:
        await take_event_quota(conn, app, 1, endpoint_id)
    event_id = event_id_of(None)
    text = test_payload(endpoint_id)
    # The catalog checks the endpoint is there and, with `app`, the application's.
    ids = await catalog.enqueue(conn, TEST_EVENT_TYPE, text, event_id, endpoint_id, app)
    return {"event_id": event_id, "deliveries": ids}


def test_payload(endpoint_id: int) -> str:
    """The payload of a test event or a test shot when none is given."""
    doc = {"type": TEST_EVENT_TYPE, "endpoint_id": endpoint_id, "message": "a test event"}
    return orjson.dumps(doc).decode()


def _app(app: str | None) -> str | None:
    return None if app is None else check_app(app)


async def enqueue_file(
    conn: Conn,
    path: str,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    app: str | None = None,
) -> dict[str, Any]:
    """Queues a JSONL file (- for stdin) of event documents, all or
    nothing; a line without "app" is `app`'s (None: as enqueue decides)."""
    events = read_events(path, max_payload_bytes)
    if app is not None:
        check_app(app)
        events = [(*e[:4], e[4] or app) for e in events]
    await validate_events(conn, events)
    created = await catalog.enqueue_bulk(conn, events)
    return {"events": len(events), "deliveries": created}


# ---------------------------------------------------------------- dead letters


@dataclass(frozen=True, kw_only=True, slots=True)
class Replayed:
    requeued: int
    limit_reached: bool  # more may be left: call again


async def replay(
    conn: Conn,
    *,
    ids: Sequence[int] | None = None,
    endpoint_id: int | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    limit: int | None = None,
    app: str | None = None,
    within_quota: bool = False,
) -> Replayed:
    """Moves dead letters back to pending with a fresh attempt budget: the
    given ids, or an endpoint's (optionally only those that died between
    `since` and `until`, at most `limit` per call), or without an endpoint
    those of every endpoint (of `app`) that died since `since`.

    `within_quota` (an application's own credential): the deliveries it
    requeues are taken from `app`'s max_events_per_s, in the same
    transaction, so that past the quota (Throttled) nothing is requeued. A
    call of more than the bucket holds passes when it is full and leaves it
    in debt, as a large take of events does: the average rate holds."""
    if not within_quota:
        return await _replay(conn, ids, endpoint_id, since, until, limit, app)
    async with conn.transaction():
        done = await _replay(conn, ids, endpoint_id, since, until, limit, app)
        if done.requeued:
            await take_event_quota(conn, app, done.requeued)
    return done


async def _replay(
    conn: Conn,
    ids: Sequence[int] | None,
    endpoint_id: int | None,
    since: str | datetime | None,
    until: str | datetime | None,
    limit: int | None,
    app: str | None,
) -> Replayed:
    if ids is not None and endpoint_id is not None:
        raise BadInput("use either ids or an endpoint, not both")
    if ids is not None:
        if not isinstance(ids, list | tuple):
            raise BadInput("ids must be a list of integer ids")
        for i in ids:
            check_id(i, "each id")
        n = await catalog.replay_ids(conn, list(ids), app)
        return Replayed(requeued=n, limit_reached=False)
    cap = DEFAULT_REPLAY_LIMIT if limit is None else limit
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise BadInput("limit must be at least 1")
    start, end = parse_time(since, "since"), parse_time(until, "until")
    if endpoint_id is None:
        # "Resend everything that failed since…": every endpoint of the
        # application (the admin: of every application), only with a time,
        # so that no call requeues a whole history by accident.
        if start is None:
            raise BadInput("replay needs ids, an endpoint, or a since time")
        n = await deliveries.replay_since(conn, app, start, end, cap)
        return Replayed(requeued=n, limit_reached=n == cap)
    check_id(endpoint_id, "endpoint")
    await catalog.check_owner(conn, endpoint_id, app)
    n = await catalog.replay_endpoint(conn, endpoint_id, start, end, cap)
    return Replayed(requeued=n, limit_reached=n == cap)
