"""The official Python `svix` SDK (unchanged, pinned in the dev extras)
pointed at dispatcher's Svix-compatible API: a team that switches only
changes `server_url`. Every call below is the SDK's own; what arrives at
the receiver is checked with the SDK's own `Webhook.verify`.

The SDK's calls are synchronous (as most integrations use it); each takes
milliseconds against the local server, while the receivers and the
browser run on this test's event loop and catch up at every `await`."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from svix.api import (
    ApplicationCreateOptions,
    ApplicationIn,
    ApplicationListOptions,
    ApplicationPatch,
    AppPortalAccessIn,
    EndpointHeadersIn,
    EndpointHeadersPatchIn,
    EndpointIn,
    EndpointPatch,
    EndpointSecretRotateIn,
    EndpointUpsertIn,
    EventTypeIn,
    EventTypeListOptions,
    EventTypePatch,
    EventTypeUpsertIn,
    MessageAttemptListByMsgOptions,
    MessageCreateOptions,
    MessageGetOptions,
    MessageIn,
    MessageListOptions,
    OperationalWebhookEndpointIn,
    RecoverIn,
    Svix,
    SvixOptions,
)
from svix.exceptions import HttpError, HTTPValidationError
from svix.models import (
    BackgroundTaskStatus,
    EndpointHeadersOut,
    MessageAttemptOut,
    MessageAttemptTriggerType,
    MessageStatus,
    MessageStatusText,
)
from svix.webhooks import Webhook, WebhookVerificationError

from tests.browser import CHROMIUM, browser
from tests.receivers import Received, Receiver
from tests.sdk.conftest import Server, admin

T = TypeVar("T")

INVOICE_SCHEMA = {
    "type": "object",
    "properties": {
        "invoice": {"type": "string"},
        "amount": {"type": "integer", "minimum": 0},
    },
    "required": ["invoice", "amount"],
}


_open: list[Svix] = []


def client(server: Server, token: str | None = None) -> Svix:
    # No retries: a 5xx must show as the failure it is, not be papered over.
    sx = Svix(token or server.token, SvixOptions(server_url=server.url, retry_schedule=[]))
    _open.append(sx)
    return sx


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """The SDK offers no close(); its connection pool is closed here so no
    socket is left for the garbage collector to warn about."""
    yield
    while _open:
        _open.pop()._httpx_client.close()


async def until(probe: Callable[[], T | None], what: str, timeout: float = 30) -> T:
    """Polls `probe` until it returns something truthy (bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = probe()
        if got:
            return got
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


def arrivals(receiver: Receiver, path: str, marker: str) -> list[Received]:
    """What reached `path` whose JSON body carries `"marker": marker`."""
    found = []
    for r in receiver.requests_to(path):
        try:
            if json.loads(r.body).get("marker") == marker:
                found.append(r)
        except ValueError:
            continue
    return found


def verified(secret: str, got: Received) -> bool:
    try:
        Webhook(secret).verify(got.body, got.headers)
    except WebhookVerificationError:
        return False
    return True


def http_status(call: Callable[[], Any]) -> int:
    """The status of the HttpError the SDK raises (fails if none)."""
    with pytest.raises((HttpError, HTTPValidationError)) as info:
        call()
    err = info.value
    if isinstance(err, HttpError):  # the body was {"code", "detail"}
        assert isinstance(err.code, str) and err.code and isinstance(err.detail, str)
    return int(err.status_code)


def pages(fetch: Callable[[str | None], Any], limit_pages: int = 20) -> list[Any]:
    """Follows `iterator` until `done` (bounded): every item, in order."""
    items: list[Any] = []
    iterator: str | None = None
    for _ in range(limit_pages):
        page = fetch(iterator)
        items.extend(page.data)
        if page.done:
            return items
        assert page.iterator, "a page that is not done must carry an iterator"
        iterator = page.iterator
    raise AssertionError(f"still not done after {limit_pages} pages")


def header_names(out: EndpointHeadersOut) -> set[str]:
    """Names shown: with their value, or listed as sensitive (value hidden;
    dispatcher hides every value, Svix only the sensitive ones)."""
    for name, value in out.headers.items():
        assert value, f"{name} is shown with no value"
    return {n.lower() for n in out.headers} | {n.lower() for n in out.sensitive}


def successes(sx: Svix, app: str, msg: str) -> list[MessageAttemptOut]:
    return [a for a in sx.message_attempt.list_by_msg(app, msg).data
            if a.status == MessageStatus.SUCCESS]  # fmt: skip


# -- The core flow: application, event type, endpoint, message, attempts -------


async def test_a_message_arrives_signed_and_its_attempts_are_listed(
    server: Server, receiver: Receiver
) -> None:
    sx = client(server)
    sx.health.get()

    # get_or_create by uid: created once, then the same application.
    app = sx.application.get_or_create(ApplicationIn(name="Acme", uid="acme-sdk"))
    assert app.name == "Acme" and app.uid == "acme-sdk" and app.id
    assert sx.application.get_or_create(ApplicationIn(name="Acme", uid="acme-sdk")).id == app.id
    assert sx.application.get("acme-sdk").id == app.id  # by uid
    assert sx.application.get(app.id).name == "Acme"

    et = sx.event_type.create(EventTypeIn(
        name="invoice.paid", description="An invoice was paid", schemas={"1": INVOICE_SCHEMA}
    ))  # fmt: skip
    assert et.name == "invoice.paid" and et.description == "An invoice was paid"
    assert not et.deprecated

    ep = sx.endpoint.create(app.id, EndpointIn(
        url=receiver.url("/acme"), description="Billing", event_types=["invoice.paid"]
    ))  # fmt: skip
    assert ep.url == receiver.url("/acme") and ep.description == "Billing"
    assert ep.event_types == ["invoice.paid"]
    secret = sx.endpoint.get_secret(app.id, ep.id).key
    assert secret.startswith("whsec_")

    payload = {"invoice": "in_1", "amount": 4200, "marker": "first"}
    msg = sx.message.create(
        app.id,
        MessageIn(event_type="invoice.paid", event_id="evt-first", payload=payload,
                  channels=["acme-billing"]),
        MessageCreateOptions(with_content=True),
    )  # fmt: skip
    assert msg.id and msg.event_type == "invoice.paid" and msg.event_id == "evt-first"
    assert msg.payload == payload and msg.channels == ["acme-billing"]
    assert msg.timestamp.tzinfo is not None

    (got,) = await until(lambda: arrivals(receiver, "/acme", "first"), "the message to arrive")
    assert json.loads(got.body) == payload
    Webhook(secret).verify(got.body, got.headers)  # the SDK's own verification
    assert not verified("whsec_" + base64.b64encode(os.urandom(24)).decode(), got)

    # Its attempt, by message and by endpoint.
    (attempt,) = await until(lambda: successes(sx, app.id, msg.id), "a successful attempt")
    assert attempt.msg_id == msg.id and attempt.endpoint_id == ep.id
    assert attempt.url == receiver.url("/acme") and attempt.response_status_code == 200
    assert attempt.status_text == MessageStatusText.SUCCESS
    assert attempt.trigger_type == MessageAttemptTriggerType.SCHEDULED
    assert attempt.response_duration_ms >= 0 and attempt.timestamp.tzinfo is not None
    by_ep = sx.message_attempt.list_by_endpoint(app.id, ep.id)
    assert attempt.id in [a.id for a in by_ep.data]
    assert all(a.endpoint_id == ep.id for a in by_ep.data)
    failed = sx.message_attempt.list_by_msg(
        app.id, msg.id, MessageAttemptListByMsgOptions(status=MessageStatus.FAIL)
    )
    assert failed.data == [] and failed.done

    # The message, with and without its content; by id and by eventId.
    assert sx.message.get(app.id, msg.id, MessageGetOptions(with_content=True)).payload == payload
    assert sx.message.get(app.id, "evt-first", MessageGetOptions(with_content=True)).id == msg.id
    assert sx.message.get(app.id, msg.id).payload == {}  # the SDK's default: with_content=false

    # The same eventId again: 409, nothing new.
    again = MessageIn(event_type="invoice.paid", event_id="evt-first", payload=payload)
    assert http_status(lambda: sx.message.create(app.id, again)) == 409

    # A payload its event type's schema refuses: 422, in the SDK's shape.
    bad = MessageIn(event_type="invoice.paid", payload={"invoice": "in_2", "amount": "lots"})
    with pytest.raises(HTTPValidationError) as invalid:
        sx.message.create(app.id, bad)
    assert invalid.value.status_code == 422
    assert invalid.value.detail and all(e.msg for e in invalid.value.detail)

    # Pages of messages: 4 more, read two at a time.
    for i in range(4):
        sx.message.create(app.id, MessageIn(
            event_type="invoice.paid", event_id=f"evt-page-{i}",
            payload={"invoice": f"in_p{i}", "amount": i, "marker": f"page-{i}"},
        ))  # fmt: skip
    listed = pages(lambda it: sx.message.list(app.id, MessageListOptions(limit=2, iterator=it)))
    ids = [m.id for m in listed]
    assert len(ids) == len(set(ids)) == 5 and msg.id in ids
    assert {m.event_id for m in listed} == {"evt-first"} | {f"evt-page-{i}" for i in range(4)}

    # Resend: the same message again, a manual attempt.
    sx.message_attempt.resend(app.id, msg.id, ep.id)
    twice = await until(lambda: arrivals(receiver, "/acme", "first")[1:], "the resend to arrive")
    assert twice[0].headers["webhook-id"] == got.headers["webhook-id"]
    Webhook(secret).verify(twice[0].body, twice[0].headers)
    manual = await until(
        lambda: [
            a
            for a in successes(sx, app.id, msg.id)
            if a.trigger_type == MessageAttemptTriggerType.MANUAL
        ],
        "the manual attempt",
    )
    assert len(manual) == 1


async def test_message_options_idempotency_and_deliver_at(
    server: Server, receiver: Receiver
) -> None:
    sx = client(server)
    app = sx.application.create(ApplicationIn(name="Initech"))
    sx.endpoint.create(app.id, EndpointIn(url=receiver.url("/initech")))

    # The same idempotency-key twice: the first answer, one delivery.
    key = f"key-{uuid.uuid4()}"
    body = MessageIn(event_type="report.ready", payload={"marker": "idem"})
    first = sx.message.create(app.id, body, MessageCreateOptions(idempotency_key=key))
    second = sx.message.create(app.id, body, MessageCreateOptions(idempotency_key=key))
    assert second.id == first.id and second.timestamp == first.timestamp
    await until(lambda: arrivals(receiver, "/initech", "idem"), "the message to arrive")
    assert first.payload == {}  # created with the SDK's default with_content=false

    # deliverAt in the future: accepted, echoed, not sent now.
    at = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=0)
    later = sx.message.create(app.id, MessageIn(
        event_type="report.ready", payload={"marker": "later"}, deliver_at=at
    ))  # fmt: skip
    assert later.deliver_at == at
    got = sx.message.get(app.id, later.id)
    assert got.deliver_at == at
    await asyncio.sleep(1.5)
    assert arrivals(receiver, "/initech", "later") == []
    assert len(arrivals(receiver, "/initech", "idem")) == 1
    assert all(a.status != MessageStatus.SUCCESS
               for a in sx.message_attempt.list_by_msg(app.id, later.id).data)  # fmt: skip


# -- Endpoints: update, patch, headers, secrets, recover, delete ---------------


async def test_endpoint_management(server: Server, receiver: Receiver) -> None:
    sx = client(server)
    app = sx.application.create(ApplicationIn(name="Globex", uid="globex-sdk"))
    ep = sx.endpoint.create(app.id, EndpointIn(
        url=receiver.url("/first"), uid="globex-main", description="first",
        metadata={"team": "billing"},
    ))  # fmt: skip
    assert ep.uid == "globex-main" and ep.metadata == {"team": "billing"}
    assert sx.endpoint.get(app.id, "globex-main").id == ep.id  # by uid
    assert sx.endpoint.get("globex-sdk", ep.id).id == ep.id  # the app by uid
    assert [e.id for e in sx.endpoint.list(app.id).data] == [ep.id]

    # PUT (upsert) replaces; PATCH changes only what it names.
    put = sx.endpoint.upsert(app.id, ep.id, EndpointUpsertIn(
        url=receiver.url("/second"), description="second"
    ))  # fmt: skip
    assert put.id == ep.id and put.url == receiver.url("/second") and put.description == "second"
    patched = sx.endpoint.patch(app.id, ep.id, EndpointPatch(description="third"))
    assert patched.url == receiver.url("/second") and patched.description == "third"
    assert sx.endpoint.patch(app.id, ep.id, EndpointPatch(disabled=True)).disabled is True
    assert sx.endpoint.get(app.id, ep.id).disabled is True
    assert not sx.endpoint.patch(app.id, ep.id, EndpointPatch(disabled=False)).disabled

    # Custom headers: set, patch, delete one; they go out with the webhook.
    sx.endpoint.set_headers(app.id, ep.id, EndpointHeadersIn(headers={"X-Tenant": "globex"}))
    sx.endpoint.patch_headers(app.id, ep.id, EndpointHeadersPatchIn(headers={"X-Region": "eu"}))
    assert header_names(sx.endpoint.get_headers(app.id, ep.id)) == {"x-tenant", "x-region"}
    sx.endpoint.patch_headers(
        app.id, ep.id, EndpointHeadersPatchIn(headers={}, delete_headers=["X-Region"])
    )
    assert header_names(sx.endpoint.get_headers(app.id, ep.id)) == {"x-tenant"}

    old = sx.endpoint.get_secret(app.id, ep.id).key
    sx.message.create(app.id, MessageIn(event_type="user.created", payload={"marker": "h"}))
    (got,) = await until(lambda: arrivals(receiver, "/second", "h"), "the message to arrive")
    assert got.headers.get("X-Tenant") == "globex" and "X-Region" not in got.headers
    assert verified(old, got)

    # Rotate: the new secret signs, the old one too during its grace period.
    rotated = sx.endpoint.rotate_secret(app.id, ep.id, EndpointSecretRotateIn())
    new = sx.endpoint.get_secret(app.id, ep.id).key
    assert new.startswith("whsec_") and new != old and rotated.key == new
    sx.message.create(app.id, MessageIn(event_type="user.created", payload={"marker": "r"}))
    (got,) = await until(lambda: arrivals(receiver, "/second", "r"), "the message to arrive")
    signed = {"new": verified(new, got), "old": verified(old, got)}
    assert signed == {"new": True, "old": True}, (signed, got.headers["webhook-signature"])
    assert len(got.headers["webhook-signature"].split()) == 2

    # Rotate to a key of one's own choosing.
    chosen = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    sx.endpoint.rotate_secret(app.id, ep.id, EndpointSecretRotateIn(key=chosen))
    assert sx.endpoint.get_secret(app.id, ep.id).key == chosen

    task = sx.endpoint.recover(
        app.id, ep.id, RecoverIn(since=datetime.now(UTC) - timedelta(hours=1))
    )
    assert task.id and task.status in set(BackgroundTaskStatus)

    sx.endpoint.delete(app.id, ep.id)
    assert http_status(lambda: sx.endpoint.get(app.id, ep.id)) == 404
    assert sx.endpoint.list(app.id).data == []


# -- Event types ----------------------------------------------------------------


async def test_event_type_catalogue(server: Server) -> None:
    sx = client(server)
    created = sx.event_type.create(EventTypeIn(
        name="order.shipped", description="An order left the warehouse",
        schemas={"1": INVOICE_SCHEMA},
    ))  # fmt: skip
    assert created.schemas and created.created_at.tzinfo is not None
    sx.event_type.create(EventTypeIn(name="order.cancelled", description="Cancelled"))
    assert sx.event_type.get("order.shipped").description == "An order left the warehouse"
    names = [e.name for e in pages(lambda it: sx.event_type.list(EventTypeListOptions(
        limit=1, iterator=it
    )))]  # fmt: skip
    assert {"order.shipped", "order.cancelled"} <= set(names) and len(names) == len(set(names))

    patched = sx.event_type.patch("order.shipped", EventTypePatch(description="Shipped"))
    assert patched.description == "Shipped"
    put = sx.event_type.upsert("order.shipped", EventTypeUpsertIn(description="Shipped!"))
    assert put.name == "order.shipped" and put.description == "Shipped!"
    assert sx.event_type.get("order.shipped").description == "Shipped!"
    assert http_status(lambda: sx.event_type.get("no.such.type")) == 404

    # Delete archives it: gone from the default list, refused for messages.
    sx.event_type.delete("order.cancelled")
    listed = sx.event_type.list(EventTypeListOptions(limit=100))
    assert "order.cancelled" not in [e.name for e in listed.data]
    archived = sx.event_type.list(EventTypeListOptions(limit=100, include_archived=True))
    assert [e.archived for e in archived.data if e.name == "order.cancelled"] == [True]
    app = sx.application.create(ApplicationIn(name="Shop"))
    with pytest.raises(HTTPValidationError) as refused:
        sx.message.create(app.id, MessageIn(event_type="order.cancelled", payload={"n": 1}))
    assert refused.value.status_code == 422


# -- Applications, idempotency, errors -------------------------------------------


async def test_applications_idempotency_and_errors(server: Server) -> None:
    sx = client(server)
    key = f"app-{uuid.uuid4()}"
    once = ApplicationCreateOptions(idempotency_key=key)
    first = sx.application.create(ApplicationIn(name="Stark"), once)
    again = sx.application.create(ApplicationIn(name="Stark"), once)
    assert again.id == first.id and again.created_at == first.created_at

    meta = sx.application.create(ApplicationIn(name="Wayne", uid="wayne", metadata={"plan": "pro"}))
    assert meta.metadata == {"plan": "pro"} and meta.created_at.tzinfo is not None
    for n in range(3):
        sx.application.create(ApplicationIn(name=f"Tenant {n}"))
    apps = pages(lambda it: sx.application.list(ApplicationListOptions(limit=2, iterator=it)))
    names = [a.name for a in apps]
    assert names.count("Stark") == 1  # the repeated key created nothing again
    assert {"Stark", "Wayne", "Tenant 0", "Tenant 1", "Tenant 2"} <= set(names)
    assert len({a.id for a in apps}) == len(apps)

    renamed = sx.application.patch("wayne", ApplicationPatch(name="Wayne Enterprises"))
    assert renamed.id == meta.id and renamed.name == "Wayne Enterprises"
    assert sx.application.get(meta.id).metadata == {"plan": "pro"}  # PATCH kept it
    put = sx.application.upsert(meta.id, ApplicationIn(name="Wayne Corp"))
    assert put.id == meta.id and put.name == "Wayne Corp"

    sx.application.delete(meta.id)
    assert http_status(lambda: sx.application.get(meta.id)) == 404
    assert http_status(lambda: sx.endpoint.list("no-such-app")) == 404
    assert http_status(lambda: sx.message.create("no-such-app", MessageIn(
        event_type="x.y", payload={}
    ))) == 404  # fmt: skip

    # Errors are JSON the SDKs parse: {"code", "detail"}; 422 with a list.
    headers = {"Authorization": f"Bearer {server.token}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        async with s.get(f"{server.url}/api/v1/app/no-such-app") as r:
            assert r.status == 404 and r.content_type == "application/json"
            doc = await r.json()
            assert isinstance(doc["code"], str) and isinstance(doc["detail"], str)
        async with s.post(f"{server.url}/api/v1/app", json={"uid": "no-name"}) as r:
            assert r.status == 422, await r.text()
            doc = await r.json()
            assert isinstance(doc["detail"], list) and {"loc", "msg", "type"} <= set(
                doc["detail"][0]
            )
        async with s.get(f"{server.url}/api/v1/app", headers={"Authorization": "Bearer nope"}) as r:
            assert r.status == 401 and "detail" in await r.json()


# -- Application tokens see their own application only ----------------------------


async def test_an_application_token_acts_inside_its_application(
    server: Server, receiver: Receiver
) -> None:
    sx = client(server)
    mine = sx.application.create(ApplicationIn(name="Hooli", uid="hooli"))
    theirs = sx.application.create(ApplicationIn(name="Pied Piper", uid="piedpiper"))
    their_ep = sx.endpoint.create(theirs.id, EndpointIn(url=receiver.url("/piper")))
    token = (await admin(server, "POST", f"/v1/applications/{mine.id}/tokens", {}))["token"]
    assert token.startswith("dtk_")

    scoped = client(server, token)
    own = scoped.endpoint.create(mine.id, EndpointIn(url=receiver.url("/hooli")))
    assert [e.id for e in scoped.endpoint.list(mine.id).data] == [own.id]
    sent = scoped.message.create(mine.id, MessageIn(event_type="a.b", payload={"marker": "own"}))
    await until(lambda: arrivals(receiver, "/hooli", "own"), "the message to arrive")
    await until(lambda: successes(scoped, mine.id, sent.id), "its attempt, seen by the token")

    other = MessageIn(event_type="a.b", payload={"marker": "leak"})
    for name, call in {
        "application.get": lambda: scoped.application.get(theirs.id),
        "application.get by uid": lambda: scoped.application.get("piedpiper"),
        "endpoint.list": lambda: scoped.endpoint.list(theirs.id),
        "endpoint.get": lambda: scoped.endpoint.get(theirs.id, their_ep.id),
        "endpoint under own app": lambda: scoped.endpoint.get(mine.id, their_ep.id),
        "endpoint.get_secret": lambda: scoped.endpoint.get_secret(theirs.id, their_ep.id),
        "message.create": lambda: scoped.message.create(theirs.id, other),
        "message.list": lambda: scoped.message.list(theirs.id),
        "attempts by endpoint": lambda: scoped.message_attempt.list_by_endpoint(
            theirs.id, their_ep.id
        ),
        "portal access": lambda: scoped.authentication.app_portal_access(
            theirs.id, AppPortalAccessIn()
        ),
    }.items():
        assert http_status(call) == 404, name
    try:
        visible = {a.id for a in scoped.application.list().data}
    except HttpError as refused:
        assert refused.status_code == 403
    else:
        assert theirs.id not in visible
    await asyncio.sleep(0.5)
    assert receiver.requests_to("/piper") == []
    assert http_status(lambda: client(server, "dtk_not-a-real-token").endpoint.list(mine.id)) == 401


# -- Operational webhooks ------------------------------------------------------------


async def test_operational_webhook_endpoints(server: Server, receiver: Receiver) -> None:
    sx = client(server)
    ops = sx.operational_webhook.endpoint
    op = ops.create(OperationalWebhookEndpointIn(
        url=receiver.url("/ops"), description="ops feed", event_types=["endpoint.created"]
    ))  # fmt: skip
    assert op.url == receiver.url("/ops") and op.description == "ops feed"
    assert op.id in [e.id for e in ops.list().data]
    assert ops.get(op.id).event_types == ["endpoint.created"]
    secret = ops.get_secret(op.id).key
    assert secret.startswith("whsec_")

    app = sx.application.create(ApplicationIn(name="Vandelay"))
    ep = sx.endpoint.create(app.id, EndpointIn(url=receiver.url("/vandelay")))

    def created() -> list[dict[str, Any]]:
        docs = [json.loads(r.body) for r in receiver.requests_to("/ops")]
        return [d for d in docs if d.get("type") == "endpoint.created"
                and d.get("data", {}).get("endpointId") == ep.id]  # fmt: skip

    (event,) = await until(created, "the endpoint.created operational webhook")
    assert event["data"]["appId"] == app.id and event["timestamp"]
    (got,) = [r for r in receiver.requests_to("/ops")
              if json.loads(r.body).get("data", {}).get("endpointId") == ep.id]  # fmt: skip
    Webhook(secret).verify(got.body, got.headers)

    ops.delete(op.id)
    assert http_status(lambda: ops.get(op.id)) == 404


# -- The app portal, opened in a real browser ---------------------------------------


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
async def test_app_portal_access_signs_in_once(
    server: Server, receiver: Receiver, tmp_path: Path
) -> None:
    sx = client(server)
    app = sx.application.create(ApplicationIn(name="Dunder Mifflin", uid="dunder"))
    other = sx.application.create(ApplicationIn(name="Sabre", uid="sabre"))
    sx.endpoint.create(app.id, EndpointIn(url=receiver.url("/paper"), description="Paper"))
    sx.endpoint.create(other.id, EndpointIn(url=receiver.url("/sabre-secret-hook")))

    access = sx.authentication.app_portal_access(app.id, AppPortalAccessIn())
    assert access.url.startswith(server.url + "/") and access.token
    async with browser(tmp_path / "profile") as page:
        await page.goto(access.url)
        await page.wait("document.querySelector('#app')?.innerText.length > 0")
        assert await page.text("#app") == app.name  # its name, not its id (issue 25)
        assert await page.eval("location.href") == f"{server.url}/portal"
        await page.wait("document.querySelector('#endpoints').innerText.includes('/paper')")
        seen = await page.eval("document.documentElement.outerHTML")
        assert "sabre-secret-hook" not in seen and access.token not in seen
    # The link worked once.
    async with aiohttp.ClientSession() as s:
        async with s.get(access.url, allow_redirects=False) as r:
            assert r.status == 401
