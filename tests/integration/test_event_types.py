"""The event-type catalogue (SPEC "Event types") on a real PostgreSQL and a
live admin API: CRUD, scopes and who may change what, and payloads checked
at enqueue (422 naming the path, nothing queued) on the HTTP API, the
Python API and the bulk file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson
import pytest

import dispatcher
from dispatcher import db
from dispatcher.core.errors import Conflict, Forbidden, NotFound, Unprocessable
from dispatcher.core.models import EndpointSpec
from dispatcher.ops import eventtypes, service, tenancy
from tests.helpers import FAST, admin_api
from tests.releases import build_release

PAID = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "currency": {"enum": ["EUR", "USD"]}},
    "required": ["amount"],
}
QUEUED = "SELECT count(*) FROM webhook_queue"


class Api:
    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http, self.base = http, base

    async def call(self, method: str, path: str, body: Any = None, token: str | None = None,
                   ) -> tuple[int, Any]:  # fmt: skip
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        data = None if body is None else orjson.dumps(body)
        async with self.http.request(method, self.base + path, data=data, headers=headers) as r:
            return r.status, orjson.loads(await r.read())


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    async with admin_api(db_url, FAST) as (http, base):
        yield Api(http, base)


async def _subscribed(conn: asyncpg.Connection, app: str = "default") -> int:
    """An endpoint of `app` that every type reaches: a valid event is queued."""
    spec = EndpointSpec(url="https://receiver.example/hook")
    doc = await service.add_endpoint(conn, spec, app=app)
    return int(doc["id"])


async def test_crud_over_http(api: Api, conn: asyncpg.Connection) -> None:
    body = {"name": "order.paid", "description": "paid", "schema": PAID}
    status, doc = await api.call("POST", "/v1/event-types", body)
    assert status == 201, doc
    assert doc["app"] is None and doc["schema"] == PAID and doc["schemas"] == {"1": PAID}
    assert doc["example"] == {"amount": 0, "currency": "EUR"} and doc["archived"] is False
    assert (await api.call("POST", "/v1/event-types", {"name": "order.paid"}))[0] == 409
    status, doc = await api.call("GET", "/v1/event-types/order.paid")
    assert status == 200 and doc["description"] == "paid"
    patch = {"description": "an order was paid", "feature_flag": "beta"}
    status, doc = await api.call("PATCH", "/v1/event-types/order.paid", patch)
    assert status == 200 and doc["description"] == "an order was paid"
    assert doc["feature_flag"] == "beta" and doc["schema"] == PAID  # untouched
    status, doc = await api.call("DELETE", "/v1/event-types/order.paid")
    assert status == 200 and doc["archived"] is True  # DELETE archives
    assert (await api.call("GET", "/v1/event-types"))[1] == []
    status, listed = await api.call("GET", "/v1/event-types?include_archived=true")
    assert [t["name"] for t in listed] == ["order.paid"]
    status, doc = await api.call("PATCH", "/v1/event-types/order.paid", {"archived": False})
    assert status == 200 and doc["archived"] is False
    status, doc = await api.call("DELETE", "/v1/event-types/order.paid?expunge=true")
    assert status == 200
    assert await conn.fetchval("SELECT count(*) FROM event_types") == 0
    assert (await api.call("GET", "/v1/event-types/order.paid"))[0] == 404


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"name": "bad name"}, "name"),
        ({"name": "x" * 257}, "name"),
        ({"name": "t", "schema": {"type": "foo"}}, "$.type"),
        ({"name": "t", "schema": "not an object"}, "schema"),
        (
            {"name": "t", "schema": {"$schema": "http://json-schema.org/draft-07/schema#"}},
            "2020-12",
        ),
        ({"name": "t", "schema": {"type": "string", "pattern": "(?<=a)b"}}, "RE2"),
        ({"name": "t", "schemas": {"v1": {}}}, "versions"),
        ({"name": "t", "bogus": 1}, "bogus"),
    ],
)
async def test_bad_input_is_refused_at_add(api: Api, body: Any, words: str) -> None:
    status, doc = await api.call("POST", "/v1/event-types", body)
    assert status == 400 and words in doc["error"], doc


async def test_scopes_and_who_may_change_what(api: Api, conn: asyncpg.Connection) -> None:
    for app in ("acme", "globex"):
        await tenancy.add_application(conn, app)
    acme = (await tenancy.issue_token(conn, "acme"))["token"]
    globex = (await tenancy.issue_token(conn, "globex"))["token"]
    await api.call("POST", "/v1/event-types", {"name": "wide", "description": "for all"})
    status, doc = await api.call("POST", "/v1/event-types", {"name": "mine"}, acme)
    assert status == 201 and doc["app"] == "acme"
    # The same name in another scope is another type.
    assert (await api.call("POST", "/v1/event-types", {"name": "mine"}, globex))[0] == 201

    names = [
        (t["name"], t["app"]) for t in (await api.call("GET", "/v1/event-types", None, acme))[1]
    ]
    assert names == [("mine", "acme"), ("wide", None)]
    admin = [(t["name"], t["app"]) for t in (await api.call("GET", "/v1/event-types"))[1]]
    assert admin == [("wide", None)]  # the admin without ?app: the catalogue-wide scope
    as_acme = (await api.call("GET", "/v1/event-types?app=acme"))[1]
    assert [t["app"] for t in as_acme] == ["acme", None]

    assert (await api.call("GET", "/v1/event-types/wide", None, acme))[0] == 200
    status, doc = await api.call("PATCH", "/v1/event-types/wide", {"description": "x"}, acme)
    assert status == 403 and "catalogue-wide" in doc["error"]
    assert (await api.call("DELETE", "/v1/event-types/wide", None, acme))[0] == 403
    status, doc = await api.call("PATCH", "/v1/event-types/mine", {"description": "ours"}, acme)
    assert status == 200 and doc["app"] == "acme"
    # globex's own "mine" is untouched, and acme cannot name globex.
    assert (await api.call("GET", "/v1/event-types/mine", None, globex))[1]["description"] == ""
    assert (await api.call("GET", "/v1/event-types?app=globex", None, acme))[0] == 403
    await api.call("DELETE", "/v1/event-types/mine?expunge=true", None, globex)
    assert (await api.call("GET", "/v1/event-types/mine", None, globex))[0] == 404
    # The admin changes an application's type by naming it.
    status, doc = await api.call("PATCH", "/v1/event-types/mine?app=acme", {"archived": True})
    assert status == 200 and doc["archived"] is True


async def test_a_mismatch_is_422_naming_the_path_and_queues_nothing(
    api: Api, conn: asyncpg.Connection
) -> None:
    await _subscribed(conn)
    await eventtypes.add_event_type(conn, "order.paid", schema=PAID)
    event = {"event_type": "order.paid", "payload": {"amount": "x"}}
    status, doc = await api.call("POST", "/v1/events", event)
    assert status == 422, doc
    assert doc["error"] == (
        "payload does not match event type order.paid's schema at $.amount: "
        "'x' is not of type 'number'"
    )
    assert await conn.fetchval(QUEUED) == 0
    status, doc = await api.call("POST", "/v1/events", {**event, "payload": {"amount": 9.5}})
    assert status == 202 and len(doc["deliveries"]) == 1
    # A type not in the catalogue is queued as before: the catalogue is opt-in.
    assert (await api.call("POST", "/v1/events", {**event, "event_type": "other"}))[0] == 202
    await eventtypes.archive_event_type(conn, "order.paid")
    status, doc = await api.call("POST", "/v1/events", {**event, "payload": {"amount": 1}})
    assert status == 422 and doc["error"] == "event type order.paid is archived"
    assert await conn.fetchval(QUEUED) == 2


async def test_the_python_api_checks_too(conn: asyncpg.Connection) -> None:
    await _subscribed(conn)
    await eventtypes.add_event_type(conn, "order.paid", schema=PAID)
    with pytest.raises(Unprocessable, match=r"at \$: 'amount' is a required property"):
        await dispatcher.enqueue(conn, "order.paid", {"currency": "EUR"})
    with pytest.raises(Unprocessable, match=r"at \$.currency"):
        await dispatcher.enqueue(conn, "order.paid", '{"amount": 1, "currency": "GBP"}')
    assert await conn.fetchval(QUEUED) == 0
    assert len(await dispatcher.enqueue(conn, "order.paid", b'{"amount": 1}')) == 1
    # The SQL functions are for trusted producers: they check nothing.
    await conn.execute("SELECT dispatcher_enqueue('order.paid', '{\"amount\": \"x\"}')")
    assert await conn.fetchval(QUEUED) == 2


async def test_a_new_schema_takes_effect_at_once(conn: asyncpg.Connection) -> None:
    """The validators' cache is keyed by updated_at: no stale schema."""
    await eventtypes.add_event_type(conn, "t", schema={"type": "object"})
    await dispatcher.enqueue(conn, "t", {"n": "text"})
    await eventtypes.update_event_type(
        conn, "t", {"schema": {"properties": {"n": {"type": "integer"}}}}
    )
    with pytest.raises(Unprocessable, match=r"\$\.n"):
        await dispatcher.enqueue(conn, "t", {"n": "text"})
    await eventtypes.update_event_type(conn, "t", {"schema": None})
    await dispatcher.enqueue(conn, "t", {"n": "text"})


async def test_an_application_type_governs_its_events(conn: asyncpg.Connection) -> None:
    await tenancy.add_application(conn, "acme")
    acme_ep = await _subscribed(conn, "acme")
    await eventtypes.add_event_type(conn, "t", schema={"type": "object"})
    await eventtypes.add_event_type(conn, "t", schema={"type": "array"}, app="acme")
    await dispatcher.enqueue(conn, "t", {})  # default: the catalogue-wide type
    with pytest.raises(Unprocessable):
        await dispatcher.enqueue(conn, "t", {}, app="acme")
    with pytest.raises(Unprocessable):  # acme's endpoint: acme's event
        await dispatcher.enqueue(conn, "t", {}, endpoint_id=acme_ep)
    assert len(await dispatcher.enqueue(conn, "t", [], app="acme")) == 1


async def test_a_bulk_file_is_checked_whole(conn: asyncpg.Connection, tmp_path: Path) -> None:
    await _subscribed(conn)
    await eventtypes.add_event_type(conn, "order.paid", schema=PAID)
    lines = [{"event_type": "order.paid", "payload": {"amount": n}, "event_id": f"e{n}"}
             for n in range(3)]  # fmt: skip
    lines.append({"event_type": "order.paid", "payload": {}, "event_id": "bad"})
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    with pytest.raises(Unprocessable, match=r"^event bad: payload does not match .* at \$"):
        await service.enqueue_file(conn, str(path))
    assert await conn.fetchval(QUEUED) == 0
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines[:3]))
    assert (await service.enqueue_file(conn, str(path)))["deliveries"] == 3


async def test_ops_errors(conn: asyncpg.Connection) -> None:
    await tenancy.add_application(conn, "acme")
    await eventtypes.add_event_type(conn, "wide")
    with pytest.raises(Conflict):
        await eventtypes.add_event_type(conn, "wide")
    with pytest.raises(NotFound):
        await eventtypes.add_event_type(conn, "x", app="nope")
    with pytest.raises(Forbidden):
        await eventtypes.archive_event_type(conn, "wide", "acme")
    with pytest.raises(NotFound):
        await eventtypes.get_event_type(conn, "missing", "acme")
    # Svix's shape: several versions; the highest is the one checked.
    doc = await eventtypes.add_event_type(
        conn, "v", schemas={"1": {"type": "object"}, "2": {"type": "array"}}
    )
    assert doc["schema"] == {"type": "array"}
    with pytest.raises(Unprocessable):
        await dispatcher.enqueue(conn, "v", {})


async def test_migration_010_on_a_database_at_009(empty_db_url: str) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 9)
        await conn.execute("INSERT INTO applications (id, name) VALUES ('acme', 'Acme')")
        await conn.execute("SELECT dispatcher_enqueue('t', '{}')")
        assert "010_event_types.sql" in await db.migrate(conn)
        await eventtypes.add_event_type(conn, "t", app="acme")
        await eventtypes.add_event_type(conn, "t")
        with pytest.raises(Conflict):  # NULLS NOT DISTINCT: one catalogue-wide row per name
            await eventtypes.add_event_type(conn, "t")
    finally:
        await conn.close()
