"""Operational webhooks (SPEC "Operational webhooks"): add, list, get,
update and delete, one function each, shared by the CLI, the admin API and
the Svix-compatible API. (What they are told is emitted elsewhere: the
endpoint.* events by ops.service, the rest by the worker's recorder.)

An ops webhook is the operator's (`app` None: told about every
application's endpoints) or one application's (told about its own only).
`app` given to get / update / delete is the caller's scope: an application
credential reaches only its own application's, and anything else reads as
missing. Documents are plain dicts with snake_case keys; the secret is in
`add`'s answer only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.core import opsevents
from dispatcher.core.destinations import HTTP, kind_of
from dispatcher.core.errors import BadInput, NotFound
from dispatcher.core.rows import OpsWebhook
from dispatcher.core.secretbox import SecretBox, unseal
from dispatcher.core.signing import validate_secret
from dispatcher.core.ssrf import TargetPolicy
from dispatcher.db import Conn, applications, catalog
from dispatcher.db import opswebhooks as db
from dispatcher.ops.endpoints import DEFAULT_GRACE_S, new_secret, vet_target
from dispatcher.ops.inputs import check_id, spec_from_fields
from dispatcher.ops.tenancy import check_app

FIELDS = ("url", "event_types", "description", "disabled")  # what update takes


def public(record: OpsWebhook, *, secret: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": record.id,
        "url": record.url,
        "event_types": [] if record.event_types == ("*",) else list(record.event_types),
        "app": record.app,
        "description": record.description,
        "disabled": not record.enabled,
        "disabled_reason": record.disabled_reason,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }
    if secret is not None:
        out["secret"] = secret
    return out


def check_event_types(value: Any) -> tuple[str, ...]:
    """None or []: every type; otherwise each one of opsevents.EVENT_TYPES."""
    if value is None:
        return ("*",)
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise BadInput("event_types must be a list of operational event types")
    for t in value:
        if t not in opsevents.EVENT_TYPES:
            raise BadInput(
                f"event type {t[:60]!r} is not an operational event type: one of "
                + ", ".join(opsevents.EVENT_TYPES)
            )
    return tuple(dict.fromkeys(value)) or ("*",)


async def _checked(
    url: Any, description: Any, secret: Any, targets: TargetPolicy | None
) -> tuple[str, str | None]:
    """The URL and the description, checked as an endpoint's are (shape,
    then the SSRF guard); a secret, if given, must be a whsec_ one."""
    fields: dict[str, Any] = {"url": url, "description": description}
    if secret is not None:
        if not isinstance(secret, str) or not secret.startswith("whsec_"):
            raise BadInput("secret must be a whsec_… secret")
        fields["secret"] = secret
    spec = spec_from_fields(fields)
    if kind_of(spec.url) != HTTP:
        # Signed webhooks (SPEC "Operational webhooks"): a broker's URL would
        # skip the tenants' broker allow-list and the sealing of its
        # password, which endpoints have; nobody reads a poll: one.
        raise BadInput("an operational webhook's url is http:// or https://")
    if targets is not None:
        await vet_target(spec.url, targets)
    return spec.url, spec.description


async def add(
    conn: Conn,
    url: Any,
    *,
    event_types: Any = None,
    app: Any = None,
    secret: Any = None,
    description: Any = None,
    box: SecretBox | None = None,
    targets: TargetPolicy | None = None,
    within_quota: bool = False,
) -> dict[str, Any]:
    """A new ops webhook; `app` None: the operator's. Without `secret`, a
    new whsec_ one; the answer carries it (and only this answer does).
    `within_quota` (the HTTP API): an application's counts toward its
    max_endpoints (Conflict past it), as endpoints do; the operator's own
    count toward nothing."""
    types = check_event_types(event_types)
    if app is not None:
        app = check_app(app)
        await applications.require_applications(conn, [app])
    url, description = await _checked(url, description, secret, targets)
    secret = secret or new_secret(None)
    record = await db.add(
        conn, url, secret, types, description, app, box, within_quota=within_quota
    )
    return public(record, secret=secret)


async def list_webhooks(
    conn: Conn, app: str | None = None, *, operator_only: bool = False
) -> list[dict[str, Any]]:
    """`app`'s (an unknown application: NotFound); with `operator_only`, the
    operator's; neither: every one (each says whose in "app")."""
    if app is not None:
        await applications.require_applications(conn, [check_app(app)])
    return [public(r) for r in await db.list_all(conn, app, operator=operator_only)]


async def _visible(conn: Conn, webhook_id: Any, app: str | None) -> OpsWebhook:
    wid = check_id(webhook_id, "id")
    if wid is None:
        raise BadInput("id is required")
    record = await db.get(conn, wid)
    if app is not None and record.app != app:
        raise NotFound(f"no ops webhook with id {wid}")
    return record


async def get(conn: Conn, webhook_id: Any, app: str | None = None) -> dict[str, Any]:
    return public(await _visible(conn, webhook_id, app))


async def update(
    conn: Conn,
    webhook_id: Any,
    patch: Mapping[str, Any],
    *,
    app: str | None = None,
    targets: TargetPolicy | None = None,
) -> dict[str, Any]:
    """Changes `url`, `event_types`, `description` or `disabled`; the rest
    stays (an ops webhook stays whose it is: "app" may only repeat it)."""
    current = await _visible(conn, webhook_id, app)
    unknown = sorted(set(patch) - {*FIELDS, "app"})
    if unknown:
        raise BadInput(f"unknown field: {unknown[0]}")
    if patch.get("app", current.app) != current.app:
        raise BadInput("an ops webhook stays whose it is (app)")
    types = (
        check_event_types(patch["event_types"]) if "event_types" in patch else current.event_types
    )
    disabled = patch.get("disabled", not current.enabled)
    if not isinstance(disabled, bool):
        raise BadInput("disabled must be true or false")
    url, description = current.url, current.description
    if "url" in patch or "description" in patch:
        url, description = await _checked(
            patch.get("url", url), patch.get("description", description), None, targets
        )
    record = await db.update(conn, current.id, url, types, description, not disabled)
    return public(record)


async def delete(conn: Conn, webhook_id: Any, app: str | None = None) -> dict[str, Any]:
    """Deletes it; what it still had queued is dead-lettered with it."""
    current = await _visible(conn, webhook_id, app)
    record = await db.delete(conn, current.id)
    return {"id": record.id, "deleted": True}


async def secret(
    conn: Conn, webhook_id: Any, app: str | None = None, box: SecretBox | None = None
) -> str:
    """The secret it signs with now (the Svix API shows it on request)."""
    return unseal(box, (await _visible(conn, webhook_id, app)).sealed_secret)


async def rotate_secret(
    conn: Conn,
    webhook_id: Any,
    app: str | None = None,
    box: SecretBox | None = None,
    new: str | None = None,
) -> str:
    """A new secret (`new`, or a generated whsec_ one); the old one keeps
    signing beside it for a day, as an endpoint's."""
    current = await _visible(conn, webhook_id, app)
    if new is not None:
        validate_secret(new)
    key = new or new_secret(None)
    await catalog.rotate_secret(conn, current.id, key, DEFAULT_GRACE_S, box)
    return key
