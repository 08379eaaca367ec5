"""The Svix-compatible API over raw HTTP (SPEC "The Svix-compatible API"):
what the SDK flows (tests/sdk) do not pin down on their own: idempotency
keys across processes, error shapes, channels, deliverAt, uids, paging,
deleting an application, and an application token's reach."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.helpers import FAST, admin_api, drain
from tests.receivers import Receiver


class Api:
    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http, self.base = http, base

    async def call(
        self, method: str, path: str, body: Any = None, **headers: str
    ) -> tuple[int, Any]:
        async with self.http.request(
            method, self.base + path, json=body, headers=headers or None
        ) as r:
            text = await r.text()
            return r.status, (await r.json() if text else None)

    async def ok(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        status, doc = await self.call(method, path, body, **headers)
        assert status < 300, (method, path, status, doc)
        return doc


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    async with admin_api(db_url, FAST) as (http, base):
        yield Api(http, base)


async def test_an_application_by_uid_and_get_if_exists(api: Api) -> None:
    first = await api.call(
        "POST", "/api/v1/app?get_if_exists=true", {"name": "Acme", "uid": "acme"}
    )
    assert first[0] == 201 and first[1]["id"] == "acme" and first[1]["uid"] == "acme"
    again = await api.call(
        "POST", "/api/v1/app?get_if_exists=true", {"name": "Other", "uid": "acme"}
    )
    assert again == (200, first[1])
    # Without get_if_exists, the uid is taken.
    status, doc = await api.call("POST", "/api/v1/app", {"name": "Acme", "uid": "acme"})
    assert status == 409 and doc["code"] == "conflict" and doc["detail"]
    # A uid outside our id syntax keeps its uid; the id is ours.
    mixed = await api.ok("POST", "/api/v1/app", {"name": "Mixed", "uid": "Mixed.Case"})
    assert mixed["id"].startswith("app_") and mixed["uid"] == "Mixed.Case"
    assert (await api.ok("GET", "/api/v1/app/Mixed.Case"))["id"] == mixed["id"]
    assert (await api.ok("GET", f"/api/v1/app/{mixed['id']}"))["uid"] == "Mixed.Case"


async def test_what_has_no_equivalent_answers_404_saying_so(api: Api) -> None:
    await api.ok("POST", "/api/v1/app", {"name": "T", "uid": "tr"})
    for method, path, what in (
        ("GET", "/api/v1/app/tr/endpoint/ep_x/transformation", "transformations"),
        ("POST", "/api/v1/environment/export", "environments"),
        ("GET", "/api/v1/nothing-here", "no such route"),
    ):
        status, doc = await api.call(method, path)
        assert status == 404 and doc["code"] == "not_found" and what in doc["detail"], path
    # A message's type follows Svix's (and the catalogue's) rule: 422.
    status, doc = await api.call("POST", "/api/v1/app/tr/msg",
                                 {"eventType": "bad type!", "payload": {}})  # fmt: skip
    assert status == 422 and "eventType" in doc["detail"][0]["msg"]


async def test_errors_are_code_and_detail_and_input_errors_422(api: Api) -> None:
    status, doc = await api.call("GET", "/api/v1/app/nobody")
    assert status == 404 and doc == {"code": "not_found", "detail": "no such application"}
    status, doc = await api.call("POST", "/api/v1/app", {"uid": "x"})  # no name
    assert status == 422 and doc["code"] == "validation"
    assert doc["detail"][0]["msg"] == "name must be 1-200 characters"
    assert set(doc["detail"][0]) == {"loc", "msg", "type"}
    status, doc = await api.call("GET", "/api/v1/app", None, Authorization="Bearer wrong")
    assert status == 401 and doc["code"] == "authentication_failed"
    # /v1/ keeps its own shape.
    status, doc = await api.call("GET", "/v1/endpoints/99999")
    assert status == 404 and "error" in doc


async def test_an_idempotency_key_answers_once_across_processes(db_url: str) -> None:
    """Two servers on one database: the key's second use, on the other
    server, answers the first answer and creates nothing."""
    async with AsyncExitStack() as stack:
        one = Api(*await stack.enter_async_context(admin_api(db_url, FAST)))
        two = Api(*await stack.enter_async_context(admin_api(db_url, FAST)))
        key = f"k-{uuid.uuid4().hex}"
        body = {"name": "Idem"}
        status, first = await one.call("POST", "/api/v1/app", body, **{"idempotency-key": key})
        assert status == 201
        async with two.http.post(
            two.base + "/api/v1/app", json=body, headers={"idempotency-key": key}
        ) as r:
            assert r.status == 201 and await r.json() == first
            assert r.headers["Idempotent-Replayed"] == "true"
        apps = await one.ok("GET", "/api/v1/app?limit=250")
        assert [a["name"] for a in apps["data"]].count("Idem") == 1
        # The same key with another request is refused; without a key, a new one.
        status, doc = await two.call(
            "POST", "/api/v1/app", {"name": "Else"}, **{"idempotency-key": key}
        )
        assert status == 409 and "idempotency-key" in doc["detail"]
        # It holds on /v1/ too, per caller.
        ev = {"event_type": "t", "payload": {"n": 1}}
        a = await one.ok("POST", "/v1/events", ev, **{"idempotency-key": key + "-v1"})
        b = await two.ok("POST", "/v1/events", ev, **{"idempotency-key": key + "-v1"})
        assert a == b


async def test_a_failed_request_keeps_no_answer(api: Api) -> None:
    """An error is not stored: the retry with the same key runs again."""
    key = f"k-{uuid.uuid4().hex}"
    status, _ = await api.call(
        "POST",
        "/api/v1/app/nobody/msg",
        {"eventType": "t", "payload": {}},
        **{"idempotency-key": key},
    )
    assert status == 404
    await api.ok("POST", "/api/v1/app", {"name": "Late", "uid": "nobody"})
    status, _ = await api.call(
        "POST",
        "/api/v1/app/nobody/msg",
        {"eventType": "t", "payload": {}},
        **{"idempotency-key": key},
    )
    assert status == 202


async def test_messages_channels_deliver_at_and_event_id_conflicts(
    api: Api, db_url: str, receiver: Receiver
) -> None:
    await api.ok("POST", "/api/v1/app", {"name": "Shop", "uid": "shop"})
    plain = await api.ok("POST", "/api/v1/app/shop/endpoint", {"url": receiver.url("/plain")})
    eu = await api.ok(
        "POST",
        "/api/v1/app/shop/endpoint",
        {"url": receiver.url("/eu"), "channels": ["eu"], "uid": "eu-hook"},
    )
    assert eu["channels"] == ["eu"] and eu["uid"] == "eu-hook" and plain["channels"] is None

    msg = await api.ok(
        "POST",
        "/api/v1/app/shop/msg?with_content=true",
        {"eventType": "order.paid", "payload": {"n": 1}, "channels": ["eu"], "eventId": "order-1"},
    )
    assert msg["id"] == "order-1" and msg["eventId"] == "order-1" and msg["payload"] == {"n": 1}
    status, doc = await api.call(
        "POST",
        "/api/v1/app/shop/msg",
        {"eventType": "order.paid", "payload": {"n": 2}, "eventId": "order-1"},
    )
    assert status == 409 and doc["code"] == "conflict"
    bare = await api.ok("POST", "/api/v1/app/shop/msg", {"eventType": "order.paid", "payload": {}})
    assert bare["id"].startswith("msg_") and bare["eventId"] is None
    # At most 366 days ahead (SPEC "Limits").
    at = (datetime.now(UTC) + timedelta(days=300)).replace(microsecond=0)
    later = await api.ok(
        "POST",
        "/api/v1/app/shop/msg",
        {"eventType": "order.paid", "payload": {"n": 3}, "deliverAt": at.isoformat()},
    )
    assert later["deliverAt"].startswith(at.date().isoformat())

    await drain(db_url)
    # Channels: the eu endpoint got only the eu message; the plain one every message.
    assert {r.headers["webhook-id"] for r in receiver.requests_to("/eu")} == {"order-1"}
    assert {r.headers["webhook-id"] for r in receiver.requests_to("/plain")} == {
        "order-1",
        bare["id"],
    }
    conn = await asyncpg.connect(db_url)
    try:
        due = await conn.fetchval(
            "SELECT next_attempt_at FROM webhook_queue WHERE event_id = $1", later["id"]
        )
        assert due == at  # not sent, waiting for its time
    finally:
        await conn.close()
    # with_content=false (what the SDKs send unless told): the payload as {}, as Svix.
    got = await api.ok("GET", "/api/v1/app/shop/msg/order-1?with_content=false")
    assert got["payload"] == {}
    got = await api.ok("GET", "/api/v1/app/shop/msg/order-1")
    assert got["payload"] == {"n": 1}
    attempts = await api.ok("GET", "/api/v1/app/shop/attempt/endpoint/eu-hook")
    assert [(a["msgId"], a["status"], a["responseStatusCode"]) for a in attempts["data"]] == [
        ("order-1", 0, 200)
    ]


async def test_lists_page_with_iterators(api: Api) -> None:
    await api.ok("POST", "/api/v1/app", {"name": "Pages", "uid": "pages"})
    for n in range(5):
        await api.ok("POST", "/api/v1/app/pages/msg", {"eventType": "t", "payload": {"n": n}})
    seen: list[str] = []
    path = "/api/v1/app/pages/msg?limit=2"
    for _ in range(5):
        page = await api.ok("GET", path)
        seen += [m["id"] for m in page["data"]]
        assert set(page) == {"data", "iterator", "prevIterator", "done"}
        if page["done"]:
            break
        path = f"/api/v1/app/pages/msg?limit=2&iterator={page['iterator']}"
    assert len(seen) == 5 == len(set(seen))
    status, _ = await api.call("GET", "/api/v1/app/pages/msg?iterator=garbage")
    assert status == 422


async def test_deleting_an_application_ends_its_endpoints_and_tokens(api: Api, db_url: str) -> None:
    app = (await api.ok("POST", "/api/v1/app", {"name": "Gone", "uid": "gone"}))["id"]
    ep = await api.ok("POST", "/api/v1/app/gone/endpoint", {"url": "https://gone.example/h"})
    token = (await api.ok("POST", "/v1/applications/gone/tokens", {}))["token"]
    await api.ok("POST", "/api/v1/app/gone/msg", {"eventType": "t", "payload": {}})
    assert await api.call("DELETE", "/api/v1/app/gone") == (204, None)
    assert (await api.call("GET", "/api/v1/app/gone"))[0] == 404
    assert (await api.call("GET", "/v1/endpoints", None, Authorization=f"Bearer {token}"))[0] == 401
    # Gone for every other way in too: no endpoint, no event, no token.
    status, doc = await api.call("POST", "/v1/endpoints", {"url": "https://gone.example/2",
                                                           "app": app})  # fmt: skip
    assert status in (400, 404) and "unknown application" in doc["error"]
    status, doc = await api.call("POST", "/v1/events", {"app": app, "event_type": "t",
                                                        "payload": {}})  # fmt: skip
    assert status in (400, 404) and "unknown application" in doc["error"]
    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch(
            "SELECT status, last_error FROM webhook_queue WHERE endpoint_id = $1", int(ep["id"])
        )
        assert [(r["status"], r["last_error"]) for r in rows] == [
            ("dead_letter", "endpoint deleted")
        ]
    finally:
        await conn.close()
    assert (await api.call("DELETE", "/api/v1/app/default"))[0] == 422


async def test_an_application_token_acts_in_its_own_application_only(api: Api) -> None:
    for uid in ("mine", "theirs"):
        await api.ok("POST", "/api/v1/app", {"name": uid, "uid": uid})
    token = (await api.ok("POST", "/v1/applications/mine/tokens", {}))["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert (await api.call("GET", "/api/v1/app/mine", None, **bearer))[0] == 200
    status, doc = await api.call("GET", "/api/v1/app/theirs", None, **bearer)
    assert (status, doc["detail"]) == (404, "no such application")
    assert (await api.call("GET", "/api/v1/app", None, **bearer))[0] == 403
    ep = await api.ok("POST", "/api/v1/app/mine/endpoint", {"url": "https://m.example/h"}, **bearer)
    # Its endpoint is not reachable through the other application's path.
    assert (await api.call("GET", f"/api/v1/app/theirs/endpoint/{ep['id']}"))[0] == 404


async def test_endpoint_secret_rotation_and_headers(api: Api) -> None:
    await api.ok("POST", "/api/v1/app", {"name": "Keys", "uid": "keys"})
    ep = await api.ok(
        "POST",
        "/api/v1/app/keys/endpoint",
        {
            "url": "https://k.example/h",
            "secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "headers": {"X-Api-Key": "s3cret"},
        },
    )
    key = (await api.ok("GET", f"/api/v1/app/keys/endpoint/{ep['id']}/secret"))["key"]
    assert key == "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    rotated = await api.ok("POST", f"/api/v1/app/keys/endpoint/{ep['id']}/secret/rotate", {})
    assert rotated["key"] != key
    assert (await api.ok("GET", f"/api/v1/app/keys/endpoint/{ep['id']}/secret"))["key"] == rotated[
        "key"
    ]
    headers = await api.ok("GET", f"/api/v1/app/keys/endpoint/{ep['id']}/headers")
    # A credential's value is never shown (X-Api-Key: its name says so).
    assert headers == {"headers": {}, "sensitive": ["X-Api-Key"]}
    assert (
        await api.call(
            "PATCH", f"/api/v1/app/keys/endpoint/{ep['id']}/headers", {"headers": {"X-Two": "2"}}
        )
    )[0] == 204
    headers = await api.ok("GET", f"/api/v1/app/keys/endpoint/{ep['id']}/headers")
    # Others come back as set, as Svix shows them (an SDK's set-then-get).
    assert headers == {"headers": {"X-Two": "2"}, "sensitive": ["X-Api-Key"]}
    patched = await api.ok(
        "PATCH",
        f"/api/v1/app/keys/endpoint/{ep['id']}",
        {"disabled": True, "eventTypes": ["a.b"], "metadata": {"k": "v"}},
    )
    assert (
        patched["disabled"]
        and patched["eventTypes"] == ["a.b"]
        and patched["metadata"] == {"k": "v"}
    )
    assert patched["url"] == "https://k.example/h"


async def test_resend_sends_a_delivered_message_again(
    api: Api, db_url: str, receiver: Receiver
) -> None:
    await api.ok("POST", "/api/v1/app", {"name": "Again", "uid": "again"})
    ep = await api.ok("POST", "/api/v1/app/again/endpoint", {"url": receiver.url("/r")})
    msg = await api.ok("POST", "/api/v1/app/again/msg", {"eventType": "t", "payload": {"a": 1}})
    await drain(db_url)
    assert len(receiver.requests_to("/r")) == 1
    status, _ = await api.call(
        "POST", f"/api/v1/app/again/msg/{msg['id']}/endpoint/{ep['id']}/resend", {}
    )
    assert status == 202
    await drain(db_url)
    sent = receiver.requests_to("/r")
    assert len(sent) == 2 and sent[0].body == sent[1].body == b'{"a":1}'
    attempts = await api.ok("GET", f"/api/v1/app/again/attempt/msg/{msg['id']}")
    assert len(attempts["data"]) == 2


async def test_health_is_open(api: Api) -> None:
    async with aiohttp.ClientSession() as anon, anon.get(api.base + "/api/v1/health") as r:
        assert r.status == 204
    await asyncio.sleep(0)


async def test_a_message_may_create_its_application(api: Api) -> None:
    body = {"eventType": "t", "payload": {}, "application": {"name": "Born"}}
    msg = await api.ok("POST", "/api/v1/app/born/msg", body)
    assert msg["eventType"] == "t"
    app = await api.ok("GET", "/api/v1/app/born")
    assert (app["id"], app["uid"], app["name"]) == ("born", "born", "Born")
    # Without "application", an unknown application is 404 and nothing is made.
    status, _ = await api.call("POST", "/api/v1/app/unborn/msg", {"eventType": "t", "payload": {}})
    assert status == 404 and (await api.call("GET", "/api/v1/app/unborn"))[0] == 404
