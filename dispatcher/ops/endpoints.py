"""The operations on endpoints: one function each, and what a user sees of one.

Add, update, enable or disable, rotate or read the secret, list, get,
delete; each change announces itself (an endpoint.* ops event) in its own
transaction. The checks made only here: the SSRF guard on the URL at
creation (`vet_target`, with what the name resolves to now), no header
value carrying this server's credentials, masked header values
(HEADER_MASK) kept from the stored ones. What a user sees of an endpoint
is `endpoint_public`: header values and client keys masked, the secret
only when just made. Callers reach these through ops.service; this module
never runs SQL (the catalog does) and never formats output.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from dispatcher.core import opsevents
from dispatcher.core.destinations import (
    HTTP,
    POLL,
    broker_refusal,
    kept_password,
    kind_of,
    masked_url,
    parse_broker,
)
from dispatcher.core.errors import BadInput
from dispatcher.core.models import SETTING_NAMES, EndpointSpec, carried_credential
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
from dispatcher.db import Conn, applications, catalog, columns, opswebhooks
from dispatcher.ops.events import take_event_quota
from dispatcher.ops.inputs import check_id, check_number, spec_from_fields
from dispatcher.ops.tenancy import DEFAULT_APP, check_app

DEFAULT_GRACE_S = 86_400.0  # a rotated-out secret keeps signing for a day
MAX_GRACE_S = float(2**31)
# What every output shows for a header value; sent back in an update, it
# keeps the stored value of that header.
HEADER_MASK = "••••"
RESOLVE_TIMEOUT_S = 3.0


async def vet_target(
    url: str, targets: TargetPolicy, style: str = "brace", *, tenant: bool = False
) -> None:
    """The SSRF guard at `endpoint add`: the literal address, then what the
    name resolves to now. A name that does not resolve (yet), or a resolver
    that does not answer in time, is accepted: the sender checks every
    connection after DNS anyway, and a receiver's DNS may go live later.
    `tenant`: an application's own credential asks (a broker must then be
    one DISPATCHER_BROKERS_ALLOWED lists)."""
    kind = kind_of(url)
    if kind == POLL:
        return
    if kind != HTTP:
        broker = parse_broker(url)
        why = broker_refusal(broker, targets, tenant=tenant)
        if why is not None:
            raise BadInput(why)
        if broker.allow_key not in targets.brokers_allowed and not targets.allow_private:
            check_resolved(broker.host, await _addresses(broker.host), targets)
        return
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
    addresses = await _addresses(host)
    if not addresses:
        return
    port = target.explicit_port or (443 if target.scheme == "https" else 80)
    why = own_address_refusal(host, port, addresses, targets.own_origins)
    if why is not None:
        raise BadInput(f"url refused: {why} (an endpoint may not call this server)")
    if judge_private:
        check_resolved(host, addresses, targets)


async def _addresses(host: str) -> list[str]:
    """What `host` resolves to now; none when it does not (yet), or the
    resolver does not answer in time."""
    if literal_address(host) is not None:
        return []  # judged as a literal already
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
        )
    except (OSError, TimeoutError, UnicodeError):
        return []
    return [str(info[4][0]) for info in infos]


def check_credentials(headers: Sequence[tuple[str, str]], targets: TargetPolicy | None) -> None:
    """No header value may carry this server's admin token (what counts as
    carrying a credential, an application's token included, is
    core.models.carried_credential's; validate_headers has refused those
    already). Masked values are stored ones, checked when they were set."""
    if targets is None:
        return
    for name, value in headers:
        if value == HEADER_MASK:
            continue
        carried = carried_credential(value, targets.credentials)
        if carried is not None:
            raise BadInput(f"header {name}: value must not carry {carried}")


def endpoint_public(record: EndpointRecord, *, secret: str | None = None) -> dict[str, Any]:
    """An endpoint as users see it: the secret (and for an ed25519 key its
    public half) only when just created or rotated."""
    out: dict[str, Any] = {"id": record.id, "app": record.application_id, "name": record.name}
    out["url"] = masked_url(record.url)  # a broker's password is never shown
    out["kind"] = kind_of(record.url)
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
        await vet_target(spec.url, targets, spec.macro_style, tenant=charged)
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
        if isinstance(patch.get("url"), str):  # the masked password keeps the stored one
            patch = {**patch, "url": kept_password(patch["url"], current.url)}
        # The stored headers may be sealed: they are carried over, not re-validated.
        base = EndpointSpec(
            url=current.url,
            name=current.name,
            description=current.description,
            **{k: getattr(current, k) for k in SETTING_NAMES if k != "headers"},
        )
        spec = spec_from_fields(patch, base)
        if targets is not None and spec.url != current.url:
            await vet_target(spec.url, targets, spec.macro_style, tenant=charged)
        elif targets is not None and kind_of(spec.url) == HTTP:
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
    return endpoint_public(await endpoint_record(conn, endpoint_id, app))


async def endpoint_record(conn: Conn, endpoint_id: int, app: str | None = None) -> EndpointRecord:
    """The stored endpoint (sealed values and all), within `app`."""
    await catalog.check_owner(conn, endpoint_id, app)
    return await catalog.get_endpoint(conn, endpoint_id)


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
    return {"id": record.id, "url": masked_url(record.url), "deleted": True, "dead_lettered": dead}
