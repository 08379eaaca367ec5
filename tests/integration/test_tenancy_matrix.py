"""Applications never see each other: every route of the admin server by
every kind of caller, on a live server (SPEC: "Applications (tenants) and
the customer portal").

The matrix is data: one row per route (or more: the same route asked
differently), one column per caller, each cell the status it must answer
(None: the cell has no meaning, said why in UNMEANING). With the open
routes (OPEN) its rows cover exactly the server's route table
(admin.ROUTES): a route added there fails here until it has a row. Every
cell also checks what did not happen: no answer to an application's
credential mentions the other application, the other application's rows
are untouched, and a refused call changed nothing.
Below the matrix, what the lists, counts, replays, test events, event ids,
stored credentials and the server's log do with two applications side by side.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import asyncpg
import orjson
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from dispatcher.core.models import EndpointSpec
from dispatcher.db import catalog
from dispatcher.db.embedded import with_database
from dispatcher.ops import eventtypes, opswebhooks, tenancy
from dispatcher.web.admin import ROUTES, start_admin
from dispatcher.web.routes import Access, Route, add_routes
from dispatcher.web.security import CSRF_HEADER, PORTAL_COOKIE
from tests.conftest import _admin
from tests.helpers import FAST
from tests.integration.test_admin_hardening import _raw as raw_request

# One server and database for the module; every cell makes its own objects.
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

ADMIN = "matrix-admin-token"
ACME, GLOBEX = "acme", "globex"
MISSING = 9_000_000_001  # an id no object has

# ---------------------------------------------------------------- the matrix

COLUMNS = ("own", "other", "names", "admin", "expired", "revoked", "cookie", "csrf")
# own      acme's token on acme's objects
# other    acme's token on globex's objects (the same request, globex's ids)
# names    acme's token naming "app": "globex" (in the body, or ?app= without one)
# admin    the admin token on acme's objects
# expired  an expired token of acme; revoked: a revoked one
# cookie   acme's portal session cookie, no X-CSRF-Token; csrf: with it
X = 403  # an application's credential cannot use this route

# fmt: off
MATRIX: dict[str, tuple[int | None, ...]] = {
    #                                              own  other names admin exp  rev  cookie csrf
    "GET /v1/endpoints":                          (200, 200,  403,  200,  401, 401, 200,  200),
    "POST /v1/endpoints":                         (201, None, 403,  201,  401, 401, 403,  201),
    "GET /v1/endpoints/{ep}":                     (200, 404,  403,  200,  401, 401, 200,  200),
    "PATCH /v1/endpoints/{ep}":                   (200, 404,  403,  200,  401, 401, 403,  200),
    "DELETE /v1/endpoints/{ep}":                  (200, 404,  403,  200,  401, 401, 403,  200),
    "POST /v1/endpoints/{ep}/disable":            (200, 404,  403,  200,  401, 401, 403,  200),
    "POST /v1/endpoints/{ep}/enable":             (200, 404,  403,  200,  401, 401, 403,  200),
    "POST /v1/endpoints/{ep}/rotate-secret":      (200, 404,  403,  200,  401, 401, 403,  200),
    "POST /v1/endpoints/{ep}/test":               (202, 404,  403,  202,  401, 401, 403,  202),
    "POST /v1/endpoints/{ep}/send-test":          (200, 404,  403,  200,  401, 401, 403,  200),
    "POST /v1/events/{event}/release":            (200, 404,  403,  200,  401, 401, 403,  200),
    "POST /v1/events/{event}/cancel":             (200, 404,  403,  200,  401, 401, 403,  200),
    "DELETE /v1/events/{event}/content":          (200, 404,  403,  200,  401, 401, 403,  200),
    # The application is in the path: another's is refused whatever it is.
    "POST /v1/applications/{app}/expunge":        (200, 403,  403,  200,  401, 401, 403,  200),
    "POST /v1/expunge":                           (200, 200,  403,  200,  401, 401, 403,  200),
    "GET /v1/endpoints/health":                   (200, 200,  403,  200,  401, 401, 200,  200),
    "POST /v1/events":                            (202, 404,  403,  202,  401, 401, 403,  202),
    "GET /v1/deliveries?event_id={event}":        (200, 200,  403,  200,  401, 401, 200,  200),
    "GET /v1/deliveries?endpoint_id={ep}":        (200, 404,  403,  200,  401, 401, 200,  200),
    "GET /v1/deliveries/{dead}":                  (200, 404,  403,  200,  401, 401, 200,  200),
    "GET /v1/dead-letters":                       (200, 200,  403,  200,  401, 401, 200,  200),
    "GET /v1/poll/{poll}":                        (200, 404,  403,  200,  401, 401, 200,  200),
    "GET /v1/dead-letters?endpoint_id={ep}":      (200, 404,  403,  200,  401, 401, 200,  200),
    "POST /v1/dead-letters/replay":               (200, 200,  403,  200,  401, 401, 403,  200),
    "POST /v1/dead-letters/replay endpoint":      (200, 404,  403,  200,  401, 401, 403,  200),
    # {et}: the application's own type; the admin without ?app= addresses
    # the catalogue-wide scope, where it is not. {wide}: a catalogue-wide
    # type, which every application reads (changing one is 403:
    # test_event_types.test_scopes_and_who_may_change_what).
    "GET /v1/event-types":                        (200, 200,  403,  200,  401, 401, 200,  200),
    "POST /v1/event-types":                       (201, None, 403,  201,  401, 401, 403,  201),
    "GET /v1/event-types/{et}":                   (200, 404,  403,  404,  401, 401, 200,  200),
    "GET /v1/event-types/{wide}":                 (200, 200,  403,  200,  401, 401, 200,  200),
    "PATCH /v1/event-types/{et}":                 (200, 404,  403,  404,  401, 401, 403,  200),
    "DELETE /v1/event-types/{et}":                (200, 404,  403,  404,  401, 401, 403,  200),
    "GET /v1/ops-webhooks":                       (200, 200,  403,  200,  401, 401, 200,  200),
    "POST /v1/ops-webhooks":                      (201, None, 403,  201,  401, 401, 403,  201),
    "GET /v1/ops-webhooks/{ops}":                 (200, 404,  403,  200,  401, 401, 200,  200),
    "PATCH /v1/ops-webhooks/{ops}":               (200, 404,  403,  200,  401, 401, 403,  200),
    "DELETE /v1/ops-webhooks/{ops}":              (200, 404,  403,  200,  401, 401, 403,  200),
    # admin only
    "GET /metrics":                               (X,   X,    X,    200,  401, 401, X,    X),
    "GET /v1/settings/wake":                      (X,   X,    X,    200,  401, 401, X,    X),
    "PUT /v1/settings/wake":                      (X,   X,    X,    200,  401, 401, X,    X),
    "GET /v1/applications":                       (X,   X,    X,    200,  401, 401, X,    X),
    "POST /v1/applications":                      (X,   X,    X,    201,  401, 401, X,    X),
    "PATCH /v1/applications/{app}":               (X,   X,    X,    200,  401, 401, X,    X),
    "POST /v1/applications/{app}/tokens":         (X,   X,    X,    201,  401, 401, X,    X),
    "POST /v1/applications/{app}/portal-links":   (X,   X,    X,    201,  401, 401, X,    X),
    "POST /v1/applications/{app}/revoke-portal":  (X,   X,    X,    None, 401, 401, X,    X),
    "GET /v1/health":                             (X,   X,    X,    200,  401, 401, X,    X),
    "GET /v1/alerts":                             (X,   X,    X,    200,  401, 401, X,    X),
    "GET /v1/dead-letters/analyze":               (X,   X,    X,    200,  401, 401, X,    X),
    "GET /v1/timeline":                           (X,   X,    X,    200,  401, 401, X,    X),
    "GET /v1/endpoints/{ep}/activity":            (X,   X,    X,    200,  401, 401, X,    X),
    "GET /":                                      (X,   X,    X,    200,  401, 401, X,    X),
    "GET /openapi.json":                          (X,   X,    X,    200,  401, 401, X,    X),
    "GET /v1/openapi.json":                       (X,   X,    X,    200,  401, 401, X,    X),
    "POST /logout":                               (X,   X,    X,    303,  401, 401, X,    X),
    # signs out the portal session it carries, if any
    "POST /portal/logout":                        (303, 303,  303,  303,  401, 401, 403,  None),
    # The Svix-compatible API: the application is in the path.
    "GET /api/v1/app/{app}":                      (200, 404,  403,  200,  401, 401, 200,  200),
    "PATCH /api/v1/app/{app}":                    (200, 404,  403,  200,  401, 401, 403,  200),
    "GET /api/v1/app/{app}/endpoint":             (200, 404,  403,  200,  401, 401, 200,  200),
    "POST /api/v1/app/{app}/endpoint":            (201, 404,  403,  201,  401, 401, 403,  201),
    "GET /api/v1/app/{app}/endpoint/{ep}":        (200, 404,  403,  200,  401, 401, 200,  200),
    "PUT /api/v1/app/{app}/endpoint/{ep}":        (200, 404,  403,  200,  401, 401, 403,  200),
    "PATCH /api/v1/app/{app}/endpoint/{ep}":      (200, 404,  403,  200,  401, 401, 403,  200),
    "DELETE /api/v1/app/{app}/endpoint/{ep}":     (204, 404,  403,  204,  401, 401, 403,  204),
    "GET /api/v1/app/{app}/endpoint/{ep}/secret": (200, 404,  403,  200,  401, 401, 200,  200),
    "POST /api/v1/app/{app}/endpoint/{ep}/secret/rotate":
                                                  (200, 404,  403,  200,  401, 401, 403,  200),
    "GET /api/v1/app/{app}/endpoint/{ep}/headers": (200, 404, 403,  200,  401, 401, 200,  200),
    "PUT /api/v1/app/{app}/endpoint/{ep}/headers": (204, 404, 403,  204,  401, 401, 403,  204),
    "PATCH /api/v1/app/{app}/endpoint/{ep}/headers":
                                                  (204, 404,  403,  204,  401, 401, 403,  204),
    "POST /api/v1/app/{app}/endpoint/{ep}/recover": (202, 404, 403, 202,  401, 401, 403,  202),
    "POST /api/v1/app/{app}/msg":                 (202, 404,  403,  202,  401, 401, 403,  202),
    "GET /api/v1/app/{app}/msg":                  (200, 404,  403,  200,  401, 401, 200,  200),
    "GET /api/v1/app/{app}/msg/{event}":          (200, 404,  403,  200,  401, 401, 200,  200),
    "POST /api/v1/app/{app}/msg/{event}/endpoint/{ep}/resend":
                                                  (202, 404,  403,  202,  401, 401, 403,  202),
    "GET /api/v1/app/{app}/attempt/msg/{event}":  (200, 404,  403,  200,  401, 401, 200,  200),
    "DELETE /api/v1/app/{app}/msg/{event}/content": (204, 404, 403, 204,  401, 401, 403,  204),
    "POST /api/v1/app/{app}/msg/bulk-expunge":    (200, 404,  403,  200,  401, 401, 403,  200),
    "POST /api/v1/app/{app}/msg/expunge-all-contents":
                                                  (202, 404,  403,  202,  401, 401, 403,  202),
    "GET /api/v1/app/{app}/attempt/endpoint/{ep}": (200, 404, 403,  200,  401, 401, 200,  200),
    "POST /api/v1/auth/app-portal-access/{app}":  (200, 404,  403,  200,  401, 401, 403,  None),
    "GET /api/v1/event-type":                     (200, 200,  403,  200,  401, 401, 200,  200),
    "POST /api/v1/event-type":                    (201, None, 403,  201,  401, 401, 403,  201),
    "GET /api/v1/event-type/{et}":                (200, 404,  403,  404,  401, 401, 200,  200),
    "GET /api/v1/event-type/{wide}":              (200, 200,  403,  200,  401, 401, 200,  200),
    "PUT /api/v1/event-type/{et}":                (200, 201,  403,  201,  401, 401, 403,  200),
    "PATCH /api/v1/event-type/{et}":              (200, 404,  403,  404,  401, 401, 403,  200),
    "DELETE /api/v1/event-type/{et}":             (204, 404,  403,  404,  401, 401, 403,  204),
    "GET /api/v1/operational-webhook/endpoint":   (X,   X,    X,    200,  401, 401, X,    X),
    "POST /api/v1/operational-webhook/endpoint":  (X,   X,    X,    201,  401, 401, X,    X),
    "GET /api/v1/operational-webhook/endpoint/{op}": (X, X,   X,    200,  401, 401, X,    X),
    "PUT /api/v1/operational-webhook/endpoint/{op}": (X, X,   X,    200,  401, 401, X,    X),
    "DELETE /api/v1/operational-webhook/endpoint/{op}": (X, X, X,   204,  401, 401, X,    X),
    "GET /api/v1/operational-webhook/endpoint/{op}/secret":
                                                  (X,   X,    X,    200,  401, 401, X,    X),
    "POST /api/v1/operational-webhook/endpoint/{op}/secret/rotate":
                                                  (X,   X,    X,    200,  401, 401, X,    X),
    "GET /api/v1/app":                            (X,   X,    X,    200,  401, 401, X,    X),
    "POST /api/v1/app":                           (X,   X,    X,    201,  401, 401, X,    X),
    # SPEC "Limits": its own metadata, never its uid or name (the body
    # repeats them): the SDK's application.update() is this PUT.
    "PUT /api/v1/app/{app}":                      (200, 404,  403,  200,  401, 401, 403,  200),
    "DELETE /api/v1/app/{app}":                   (X,   X,    X,    None, 401, 401, X,    X),
}
# A list's "other" cell is acme's list while globex has rows: 200, without them.
UNMEANING = {
    ("POST /v1/endpoints", "other"): "creating names no existing object",
    ("POST /v1/event-types", "other"): "creating names no existing object",
    ("POST /api/v1/event-type", "other"): "creating names no existing object",
    ("POST /v1/ops-webhooks", "other"): "creating names no existing object",
    ("POST /portal/logout", "csrf"): "would end the session the later cells use "
                                     "(test_signing_out_of_the_portal_ends_the_session)",
    ("DELETE /api/v1/app/{app}", "admin"): "would delete acme, which the later cells use "
                                           "(tests/integration/test_svix_api.py)",
    ("POST /v1/applications/{app}/revoke-portal", "admin"):
        "would end the session the later cells use (test_tenant_access_bounds)",
    ("POST /api/v1/auth/app-portal-access/{app}", "csrf"):
        "a portal session may not mint portal access: 403 (test_tenant_access_bounds)",
}

# The routes the guard leaves open, and what a caller without a credential
# gets; one with a wrong bearer token gets the same status.
OPEN: dict[str, int] = {
    "GET /healthz":                200,
    "GET /readyz":                 200,
    "GET /":                       401,  # the sign-in form: the dashboard asks for itself
    "GET /login":                  200,
    "POST /login":                 401,  # a form without a token: the sign-in form again
    "GET /static/dashboard.js":    200,
    "GET /portal/login":           401,  # no code
    "GET /portal":                 401,  # no portal session
    "GET /api/v1/health":          204,
}

# Bodies of the rows that send one; "{name}" alone is replaced by the object
# itself (an int id), inside a longer string by its text.
BODIES: dict[str, Any] = {
    "POST /v1/endpoints": {"url": "https://acme.example/new", "event_types": ["order.created"]},
    "PATCH /v1/endpoints/{ep}": {"description": "patched"},
    "POST /v1/endpoints/{ep}/rotate-secret": {"grace_s": 60},
    "POST /v1/endpoints/{ep}/test": {},
    "POST /v1/endpoints/{ep}/send-test": {},
    "POST /v1/events/{event}/release": {},
    "POST /v1/events/{event}/cancel": {},
    "POST /v1/expunge": {"payload_contains": {"matrix": "nobody"}},
    "POST /v1/applications/{app}/expunge": {"before": "2000-01-01T00:00:00Z"},
    "POST /api/v1/app/{app}/msg/bulk-expunge": {"ids": ["{event}"]},
    "POST /v1/events": {"event_type": "order.created", "payload": {"n": 1}, "endpoint_id": "{ep}"},
    "POST /v1/dead-letters/replay": {"ids": ["{dead}"]},
    "POST /v1/event-types": {"name": "{fresh}", "description": "new"},
    "PATCH /v1/event-types/{et}": {"description": "patched"},
    "POST /api/v1/event-type": {"name": "{fresh}", "description": "new"},
    "POST /api/v1/operational-webhook/endpoint": {"url": "https://ops.example/new"},
    "PUT /api/v1/operational-webhook/endpoint/{op}": {"url": "https://ops.example/put"},
    "POST /api/v1/operational-webhook/endpoint/{op}/secret/rotate": {},
    "PUT /api/v1/event-type/{et}": {"description": "put"},
    "PATCH /api/v1/event-type/{et}": {"description": "patched"},
    "POST /v1/dead-letters/replay endpoint": {"endpoint_id": "{ep}"},
    "POST /v1/ops-webhooks": {"url": "https://acme.example/ops-new", "app": "{app}"},
    "PATCH /v1/ops-webhooks/{ops}": {"description": "patched"},
    "PUT /v1/settings/wake": {"wake": "probe"},
    "POST /v1/applications": {"id": "{fresh}"},
    "PATCH /v1/applications/{app}": {"max_endpoints": 1_000_000},
    "POST /v1/applications/{app}/tokens": {"ttl_s": 60},
    "POST /v1/applications/{app}/portal-links": {"base_url": "https://hooks.example"},
    "POST /v1/applications/{app}/revoke-portal": {},
    "PATCH /api/v1/app/{app}": {"metadata": {"plan": "gold"}},
    "POST /api/v1/app/{app}/endpoint": {"url": "https://acme.example/svix",
                                        "eventTypes": ["order.created"]},
    "PUT /api/v1/app/{app}/endpoint/{ep}": {"url": "https://acme.example/put"},
    "PATCH /api/v1/app/{app}/endpoint/{ep}": {"description": "patched"},
    "POST /api/v1/app/{app}/endpoint/{ep}/secret/rotate": {},
    "PUT /api/v1/app/{app}/endpoint/{ep}/headers": {"headers": {"X-Svix": "1"}},
    "PATCH /api/v1/app/{app}/endpoint/{ep}/headers": {"headers": {"X-Other": "2"}},
    "POST /api/v1/app/{app}/endpoint/{ep}/recover": {"since": "2020-01-01T00:00:00Z"},
    "POST /api/v1/app/{app}/msg": {"eventType": "order.created", "payload": {"n": 1}},
    "POST /api/v1/app/{app}/msg/{event}/endpoint/{ep}/resend": {},
    "POST /api/v1/auth/app-portal-access/{app}": {},
    "POST /api/v1/app": {"name": "Fresh", "uid": "{fresh}"},
    "PUT /api/v1/app/{app}": {"name": "Acme"},
}
# fmt: on


def test_the_matrix_is_complete() -> None:
    assert all(len(row) == len(COLUMNS) for row in MATRIX.values())
    assert set(BODIES) <= set(MATRIX)
    for key, row in MATRIX.items():
        method = key.split()[0]
        if method in ("POST", "PATCH") and key not in BODIES:
            assert key.endswith(("/disable", "/enable", "/logout", "/expunge-all-contents")), key
        for column, expected in zip(COLUMNS, row, strict=True):
            assert (expected is None) == ((key, column) in UNMEANING), (key, column)


async def route_of(key: str) -> Route:
    """The route of the table a row asks, as the server's router finds it."""
    app = web.Application()
    add_routes(app.router, ROUTES)
    method, path = key.split()[:2]
    path = fill(
        path,
        {
            "ep": 1,
            "dead": 1,
            "event": "evt",
            "app": ACME,
            "et": "t",
            "wide": "t",
            "ops": 1,
            "op": 1,
            "poll": 1,
        },
    )
    match = await app.router.resolve(make_mocked_request(method, path))
    assert match.http_exception is None, f"{key}: no route of the table"
    resource = match.route.resource
    assert resource is not None
    [route] = [r for r in ROUTES if r.key == (match.route.method, resource.canonical)]
    return route


async def test_the_rows_cover_exactly_the_route_table() -> None:
    asked = {key: await route_of(key) for key in [*MATRIX, *OPEN]}
    assert {r.key for r in asked.values()} == {r.key for r in ROUTES}
    for key, route in asked.items():
        if key in OPEN:
            assert route.access is Access.OPEN, key
            continue
        row = dict(zip(COLUMNS, MATRIX[key], strict=True))
        if route.access is Access.ADMIN:
            # An application's credential, whichever way it comes, is refused.
            assert {row[c] for c in ("own", "other", "names", "cookie", "csrf")} == {X}, key
        elif route.access is Access.APP:
            assert row["own"] is not None and row["own"] < 400, key
            assert row["csrf"] is None or row["csrf"] < 400, key
    # Every route that asks for a credential has its row in the matrix.
    assert {r.key for r in ROUTES if r.access is not Access.OPEN} <= {
        asked[key].key for key in MATRIX
    }


# ---------------------------------------------------------------- the world


@dataclass(frozen=True)
class World:
    base: str
    url: str  # the database
    http: aiohttp.ClientSession
    token: str  # acme's
    expired: str
    revoked: str
    sid: str  # acme's portal session
    csrf: str
    globex_token: str

    def headers(self, column: str) -> dict[str, str]:
        bearer = {
            "own": self.token, "other": self.token, "names": self.token, "admin": ADMIN,
            "expired": self.expired, "revoked": self.revoked,
        }.get(column)  # fmt: skip
        if bearer is not None:
            return {"Authorization": f"Bearer {bearer}"}
        cookie = {"Cookie": f"{PORTAL_COOKIE}={self.sid}"}
        return cookie | ({CSRF_HEADER: self.csrf} if column == "csrf" else {})

    async def call(
        self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        data = None if body is None else orjson.dumps(body)
        hdrs = dict(headers or {})
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        async with self.http.request(
            method, self.base + path, data=data, headers=hdrs, allow_redirects=False
        ) as r:
            return r.status, await r.text()

    async def admin(self, method: str, path: str, body: Any = None) -> Any:
        status, text = await self.call(method, path, body, self.headers("admin"))
        assert status < 300, (method, path, status, text)
        return orjson.loads(text)


async def portal_login(w: World, app: str) -> str:
    """A portal session of `app` as a customer gets one: link, then sign-in."""
    link = await w.admin("POST", f"/v1/applications/{app}/portal-links", {"base_url": w.base})
    async with w.http.get(link["url"], allow_redirects=False) as r:
        assert r.status == 303, await r.text()
        assert r.headers["Location"] == "/portal"
        cookie = r.cookies[PORTAL_COOKIE]
        assert cookie["httponly"] and cookie["samesite"] == "Strict"
        return cookie.value


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(server_url: str, template_db: str) -> AsyncIterator[World]:
    name = f"dispatcher_m_{uuid.uuid4().hex[:12]}"
    await _admin(server_url, f"CREATE DATABASE {name} TEMPLATE {template_db}")
    url = with_database(server_url, name)
    # Cells offer expired and revoked credentials by the hundred from one
    # address: throttling them is test_credential_limits' subject, not this one's.
    # A test shot (send-test) goes to a proxy that refuses at once: the
    # endpoints' hosts (acme.example) are never looked up.
    settings = replace(FAST, admin_token=ADMIN, auth_failures_per_min=1_000_000,
                       http_proxy="http://127.0.0.1:9")  # fmt: skip
    runner: web.BaseRunner = await start_admin("127.0.0.1:0", settings, url, quiet=True)
    host, port = runner.addresses[0][:2]
    jar = aiohttp.DummyCookieJar()  # every cookie is sent by hand
    try:
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            w = World(f"http://{host}:{port}", url, http, "", "", "", "", "", "")
            for app in (ACME, GLOBEX):
                await w.admin("POST", "/v1/applications", {"id": app, "name": app.title()})

            async def token(app: str, ttl: float | None = None) -> str:
                body = {} if ttl is None else {"ttl_s": ttl}
                doc = await w.admin("POST", f"/v1/applications/{app}/tokens", body)
                return str(doc["token"])

            expired, revoked = await token(ACME, 1), await token(ACME)
            conn = await asyncpg.connect(url)
            try:
                await tenancy.revoke_token(conn, revoked)
            finally:
                await conn.close()
            sid = await portal_login(w, ACME)
            w = replace(
                w, token=await token(ACME), expired=expired, revoked=revoked, sid=sid,
                csrf=tenancy.csrf_for(sid), globex_token=await token(GLOBEX),
            )  # fmt: skip
            # The page the customer is served carries the CSRF token the API wants.
            status, page = await w.call("GET", "/portal", headers=w.headers("cookie"))
            assert status == 200 and w.csrf in page
            await asyncio.sleep(1.2)  # `expired` is now
            yield w
    finally:
        await runner.cleanup()
        await _admin(server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest_asyncio.fixture(loop_scope="module")
async def conn(world: World) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(world.url)
    yield c
    await c.close()


async def objects(conn: asyncpg.Connection, app: str) -> dict[str, Any]:
    """Fresh objects of `app`: an endpoint subscribed to everything, an event
    delivered to it and left dead, the endpoint's secret (to look for), an
    event type of its own and a catalogue-wide one (named without `app`:
    every application lists it), and an ops webhook of the application's."""
    spec = EndpointSpec(url=f"https://{app}.example/hook", name=f"{app}-hook")
    spec.validate()
    secret = f"whsec_{uuid.uuid4().hex}"
    record = await catalog.add_endpoint(conn, spec, secret, app=app)
    event = f"evt-{app}-{uuid.uuid4().hex[:8]}"
    [dead] = await conn.fetchval(
        "SELECT dispatcher_enqueue_app($1, 'order.created', '{\"n\": 0}', $2, $3)",
        app, event, record.id,
    )  # fmt: skip
    await conn.execute(
        "UPDATE webhook_queue SET status = 'dead_letter', last_error = 'HTTP 500' WHERE id = $1",
        dead,
    )
    et, wide = f"et-{uuid.uuid4().hex[:8]}", f"et-wide-{uuid.uuid4().hex[:8]}"
    await eventtypes.add_event_type(conn, et, app=app)
    await eventtypes.add_event_type(conn, wide)
    ops = await opswebhooks.add(conn, f"https://{app}.example/ops", app=app)
    op = await opswebhooks.add(conn, f"https://{app}.example/operator")  # the operator's
    # A polling endpoint (GET /v1/poll), of a type no other cell sends.
    polled = EndpointSpec(url="poll:", event_types=("poll.only",))
    poll = await catalog.add_endpoint(conn, polled, secret, app=app)
    return {"ep": record.id, "dead": dead, "event": event, "app": app, "secret": secret,
            "et": et, "wide": wide, "ops": ops["id"], "op": op["id"],
            "poll": poll.id}  # fmt: skip


GLOBEX_ROWS = """
SELECT (SELECT coalesce(json_agg(e ORDER BY e.id), '[]') FROM endpoints e
        WHERE e.application_id = 'globex')::text,
       (SELECT coalesce(json_agg(q ORDER BY q.id), '[]') FROM webhook_queue q
        JOIN endpoints e ON e.id = q.endpoint_id WHERE e.application_id = 'globex')::text,
       (SELECT coalesce(json_agg(s ORDER BY s.endpoint_id, s.secret), '[]')
        FROM endpoint_secrets s JOIN endpoints e ON e.id = s.endpoint_id
        WHERE e.application_id = 'globex')::text,
       (SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM application_tokens t
        WHERE t.application_id = 'globex')::text,
       (SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM event_types t
        WHERE t.application_id = 'globex')::text
"""
EVERYTHING = """
SELECT (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM endpoints x)::text,
       (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM webhook_queue x)::text,
       (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM applications x)::text,
       (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM application_tokens x)::text,
       (SELECT coalesce(json_agg(x ORDER BY x.code_hash), '[]') FROM portal_codes x)::text,
       (SELECT coalesce(json_agg(x ORDER BY x.session_hash), '[]') FROM portal_sessions x)::text,
       (SELECT coalesce(json_agg(x ORDER BY x.endpoint_id, x.secret), '[]')
        FROM endpoint_secrets x)::text,
       (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM event_types x)::text
"""


def fill(template: Any, subs: Mapping[str, Any]) -> Any:
    if isinstance(template, dict):
        return {k: fill(v, subs) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, subs) for v in template]
    if isinstance(template, str):
        whole = re.fullmatch(r"\{(\w+)\}", template)
        if whole:
            return subs[whole[1]]
        return template.format_map(subs)
    return template


def request_of(
    key: str, column: str, subs: Mapping[str, Any], named: str = GLOBEX
) -> tuple[str, str, Any]:
    """(method, path, body) of a matrix cell; "names" names `named`."""
    method, path = key.split()[:2]
    body = fill(BODIES.get(key), subs)
    path = fill(path, subs)
    if column == "names":
        if body is not None:
            body = {**body, "app": named}
        else:
            path += ("&" if "?" in path else "?") + f"app={named}"
    return method, path, body


def message(text: str, *ids: Any) -> str:
    doc = orjson.loads(text)
    # Ours: {"error"}; the Svix API's: {"code", "detail"} (422: a list of details).
    out = doc["error"] if "error" in doc else doc["detail"]
    if isinstance(out, list):
        out = out[0]["msg"]
    for i in ids:
        out = out.replace(str(i), "N")
    return str(out)


CELLS = [
    pytest.param(key, column, expected, id=f"{key} | {column}")
    for key, row in MATRIX.items()
    for column, expected in zip(COLUMNS, row, strict=True)
    if expected is not None
]


@MODULE_LOOP
@pytest.mark.parametrize(("key", "column", "expected"), CELLS)
async def test_matrix(
    world: World, conn: asyncpg.Connection, key: str, column: str, expected: int
) -> None:
    mine, theirs = await objects(conn, ACME), await objects(conn, GLOBEX)
    subs = theirs if column == "other" else mine
    subs = {**subs, "fresh": f"app-{uuid.uuid4().hex[:8]}"}
    method, path, body = request_of(key, column, subs)
    globex_before = await conn.fetchrow(GLOBEX_ROWS)
    everything_before = await conn.fetchrow(EVERYTHING)

    status, text = await world.call(method, path, body, world.headers(column))

    assert status == expected, (method, path, body, text)
    assert await conn.fetchrow(GLOBEX_ROWS) == globex_before, "globex's rows changed"
    if status >= 400:
        assert await conn.fetchrow(EVERYTHING) == everything_before, "a refused call changed rows"
        doc = orjson.loads(text)
        assert "error" in doc or {"code", "detail"} <= set(doc)
    if column in ("expired", "revoked"):
        assert message(text) == "application token expired or revoked"
    if column != "admin":
        for trace in (GLOBEX, theirs["secret"], world.globex_token):
            assert trace not in text, f"{trace} leaked into {text[:300]}"
    if status == 404:
        # The other application's object reads exactly like one that does not exist.
        nothing = {**subs, "ep": MISSING, "dead": MISSING, "event": "evt-none", "et": "et-none",
                   "ops": MISSING, "poll": MISSING}  # fmt: skip
        _, path2, body2 = request_of(key, column, nothing)
        status2, text2 = await world.call(method, path2, body2, world.headers(column))
        assert status2 == 404
        # The names first: an id's digits may also stand in a name.
        assert message(
            text, subs["et"], theirs["ops"], theirs["ep"], theirs["dead"], theirs["poll"]
        ) == message(text2, "et-none", MISSING)
    if column == "names":
        # Naming an application that does not exist answers the same: no probing.
        _, path2, body2 = request_of(key, column, subs, named="no-such-app")
        assert await world.call(method, path2, body2, world.headers(column)) == (status, text)


@MODULE_LOOP
@pytest.mark.parametrize(("key", "expected"), OPEN.items(), ids=list(OPEN))
async def test_an_open_route_asks_no_credential(world: World, key: str, expected: int) -> None:
    method, path = key.split()
    for headers in ({}, {"Authorization": "Bearer dtk_wrong"}):
        assert (await world.call(method, path, headers=headers))[0] == expected, headers


# ---------------------------------------------------------------- what the matrix does not show


LISTED = "deleted_at IS NULL AND kind = 'webhook'"


async def ids_of(conn: asyncpg.Connection, app: str, where: str = LISTED) -> set[int]:
    """`app`'s endpoints: live ones (what lists show), or as `where` says
    (ops webhooks included: their deliveries are the application's too)."""
    rows = await conn.fetch(f"SELECT id FROM endpoints WHERE application_id = $1 AND {where}", app)
    return {r["id"] for r in rows}


async def as_app(w: World, token: str, method: str, path: str, body: Any = None) -> Any:
    status, text = await w.call(method, path, body, {"Authorization": f"Bearer {token}"})
    assert status < 300, (method, path, status, text)
    return orjson.loads(text)


@MODULE_LOOP
async def test_lists_and_counts_hold_only_the_callers_rows(
    world: World, conn: asyncpg.Connection
) -> None:
    for app in (ACME, GLOBEX, ACME):
        await objects(conn, app)
    acme, globex = await ids_of(conn, ACME), await ids_of(conn, GLOBEX)
    for token, app, own in ((world.token, ACME, acme), (world.globex_token, GLOBEX, globex)):
        assert {e["id"] for e in await as_app(world, token, "GET", "/v1/endpoints")} == own
        health = await as_app(world, token, "GET", "/v1/endpoints/health")
        assert {h["endpoint_id"] for h in health} == own
        # Rows of its deleted endpoints are still its own history.
        ever = await ids_of(conn, app, "true")
        dead = await as_app(world, token, "GET", "/v1/dead-letters?limit=1000")
        assert dead and {d["endpoint_id"] for d in dead} <= ever
        recent = (await as_app(world, token, "GET", "/v1/deliveries?limit=1000"))["deliveries"]
        assert recent and {d["endpoint_id"] for d in recent} <= ever
    # The admin sees each one by name, and counts them right.
    named = await world.admin("GET", f"/v1/endpoints?app={ACME}")
    assert {e["id"] for e in named} == acme
    counts = {a["id"]: a["endpoints"] for a in await world.admin("GET", "/v1/applications")}
    assert counts[ACME] == len(acme) and counts[GLOBEX] == len(globex)
    everyone = {e["id"] for e in await world.admin("GET", "/v1/endpoints")}
    assert acme | globex <= everyone


@MODULE_LOOP
async def test_the_same_event_id_in_two_applications_is_two_events(
    world: World, conn: asyncpg.Connection
) -> None:
    await objects(conn, ACME)
    await objects(conn, GLOBEX)
    event = {"event_id": f"evt-shared-{uuid.uuid4().hex[:8]}", "event_type": "order.created",
             "payload": {"n": 7}}  # fmt: skip
    a = await as_app(world, world.token, "POST", "/v1/events", event)
    g = await as_app(world, world.globex_token, "POST", "/v1/events", event)
    enabled = f"{LISTED} AND enabled AND url <> 'poll:'"  # objects()' poll: takes poll.only
    acme, globex = await ids_of(conn, ACME, enabled), await ids_of(conn, GLOBEX, enabled)
    assert len(a["deliveries"]) == len(acme) and len(g["deliveries"]) == len(globex)
    assert not set(a["deliveries"]) & set(g["deliveries"])
    # Inside one application, the same id again is the same event.
    rows = await conn.fetchval("SELECT count(*) FROM webhook_queue")
    assert await as_app(world, world.token, "POST", "/v1/events", event) == a
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == rows
    path = f"/v1/deliveries?event_id={event['event_id']}"

    def ids(doc: Any) -> list[int]:
        return sorted(d["id"] for d in doc["deliveries"])

    assert ids(await as_app(world, world.token, "GET", path)) == a["deliveries"]
    assert ids(await as_app(world, world.globex_token, "GET", path)) == g["deliveries"]
    # Both applications' deliveries can pass a page (1,000) once the
    # module's world has grown: the admin follows the cursor.
    both, doc = [], await world.admin("GET", path)
    while True:
        both += ids(doc)
        if doc["next_cursor"] is None:
            break
        doc = await world.admin("GET", f"{path}&cursor={doc['next_cursor']}")
    assert set(both) == set(a["deliveries"]) | set(g["deliveries"])
    assert ids(await world.admin("GET", f"{path}&app={GLOBEX}")) == g["deliveries"]


@MODULE_LOOP
async def test_replay_requeues_only_the_callers_dead_letters(
    world: World, conn: asyncpg.Connection
) -> None:
    mine, theirs = await objects(conn, ACME), await objects(conn, GLOBEX)
    only_theirs = await as_app(world, world.token, "POST", "/v1/dead-letters/replay",
                               {"ids": [theirs["dead"]]})  # fmt: skip
    assert only_theirs == {"requeued": 0}
    both = await as_app(world, world.token, "POST", "/v1/dead-letters/replay",
                        {"ids": [theirs["dead"], mine["dead"]]})  # fmt: skip
    assert both == {"requeued": 1}
    status = "SELECT status FROM webhook_queue WHERE id = $1"
    assert await conn.fetchval(status, theirs["dead"]) == "dead_letter"
    assert await conn.fetchval(status, mine["dead"]) == "pending"


@MODULE_LOOP
async def test_a_test_event_goes_to_that_endpoint_only(
    world: World, conn: asyncpg.Connection
) -> None:
    mine = await objects(conn, ACME)
    await objects(conn, ACME)  # another endpoint of acme, subscribed to everything
    doc = await as_app(world, world.token, "POST", f"/v1/endpoints/{mine['ep']}/test")
    assert set(doc) == {"event_id", "deliveries"} and len(doc["deliveries"]) == 1
    rows = await conn.fetch(
        "SELECT id, endpoint_id, event_type FROM webhook_queue WHERE event_id = $1",
        doc["event_id"],
    )
    assert [tuple(r) for r in rows] == [(doc["deliveries"][0], mine["ep"], "dispatcher.test")]


CREDENTIAL_TABLES = ("application_tokens", "portal_codes", "portal_sessions")


@MODULE_LOOP
async def test_credentials_are_stored_only_as_digests(
    world: World, conn: asyncpg.Connection
) -> None:
    token = (await world.admin("POST", f"/v1/applications/{ACME}/tokens", {}))["token"]
    link = await world.admin("POST", f"/v1/applications/{ACME}/portal-links", {})
    code = link["code"]
    assert link["url"].endswith(f"/portal/login?code={code}")
    sid = await portal_login(world, ACME)
    for secret, table, column in (
        (token, "application_tokens", "token_hash"),
        (code, "portal_codes", "code_hash"),
        (sid, "portal_sessions", "session_hash"),
    ):
        assert secret.startswith("dtk_") == (table == "application_tokens")
        for t in CREDENTIAL_TABLES:
            dump = await conn.fetchval(f"SELECT coalesce(string_agg(x::text, '|'), '') FROM {t} x")
            assert secret not in dump and secret.encode().hex() not in dump, (secret, t)
        stored = await conn.fetchval(
            f"SELECT count(*) FROM {table} WHERE {column} = $1", tenancy.digest(secret)
        )
        assert stored == 1, table


@MODULE_LOOP
async def test_a_portal_code_works_once_and_not_after_it_expires(world: World) -> None:
    link = await world.admin("POST", f"/v1/applications/{ACME}/portal-links", {})
    async with world.http.get(link["url"], allow_redirects=False) as r:
        assert r.status == 303 and "code" not in r.headers["Location"]
        sid = r.cookies[PORTAL_COOKIE].value
    async with world.http.get(link["url"], allow_redirects=False) as r:
        assert r.status == 401 and PORTAL_COOKIE not in r.cookies
    # The session it opened acts for acme, and only acme.
    status, text = await world.call(
        "GET", "/v1/endpoints", headers={"Cookie": f"{PORTAL_COOKIE}={sid}"}
    )
    assert status == 200 and {e["app"] for e in orjson.loads(text)} <= {ACME}
    short = await world.admin("POST", f"/v1/applications/{ACME}/portal-links", {"ttl_s": 1})
    await asyncio.sleep(1.2)
    async with world.http.get(short["url"], allow_redirects=False) as r:
        assert r.status == 401 and PORTAL_COOKIE not in r.cookies


@MODULE_LOOP
async def test_revoking_a_token_makes_its_next_call_401(
    world: World, conn: asyncpg.Connection
) -> None:
    token = (await world.admin("POST", f"/v1/applications/{ACME}/tokens", {}))["token"]
    auth = {"Authorization": f"Bearer {token}"}
    assert (await world.call("GET", "/v1/endpoints", headers=auth))[0] == 200
    assert await tenancy.revoke_token(conn, token) == {"app": ACME, "revoked": True}
    assert (await world.call("GET", "/v1/endpoints", headers=auth))[0] == 401
    assert (await world.call("GET", "/v1/endpoints", headers=world.headers("own")))[0] == 200


@MODULE_LOOP
async def test_no_token_or_code_reaches_the_servers_log(
    world: World, conn: asyncpg.Connection, caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    token = (await world.admin("POST", f"/v1/applications/{ACME}/tokens", {}))["token"]
    used = await world.admin("POST", f"/v1/applications/{ACME}/portal-links", {})
    fresh = await world.admin("POST", f"/v1/applications/{ACME}/portal-links", {})
    secrets_ = [token, used["code"], fresh["code"], world.sid, world.expired, world.revoked, ADMIN]
    sid = await portal_login_with(world, used["url"])
    secrets_.append(sid)
    bad = "dtk_" + "x" * 43
    for headers in (
        {"Authorization": f"Bearer {token}"}, {"Authorization": f"Bearer {bad}"},
        {"Authorization": f"Bearer {world.expired}"}, {"Cookie": f"{PORTAL_COOKIE}={sid}"},
    ):  # fmt: skip
        for method, path in (("GET", "/v1/endpoints"), ("GET", "/metrics"),
                             ("POST", "/v1/events"), ("GET", "/v1/endpoints/99999")):  # fmt: skip
            await world.call(method, path, {"payload": 1} if method == "POST" else None, headers)
    await world.call("GET", used["url"].removeprefix(world.base))  # used already: 401
    # Requests the server cannot even parse, carrying the credentials.
    for request in (
        f"GET /portal/login?code={fresh['code']} HTTP/1.1\r\nHost: x\r\nBad\x01: y\r\n\r\n",
        f"GET /v1/endpoints HTTP/1.1\r\nAuthorization: Bearer {token}\x00\r\n\r\n",
        f"GET /v1/endpoints?{token} HTTP/9.9\r\n\r\n",
        f"GET /portal/login?code={fresh['code']}\x7f HTTP/1.1\r\nHost: x\r\n\r\n",
    ):
        await raw_request(world.base, request.encode("latin-1"))
    out, err = capfd.readouterr()
    logged = out + err + "\n".join(repr(vars(r)) for r in caplog.records)
    for secret in secrets_:
        assert secret not in logged, f"a credential ({secret[:6]}…) is in the log"


async def portal_login_with(w: World, url: str) -> str:
    async with w.http.get(url, allow_redirects=False) as r:
        assert r.status == 303
        return r.cookies[PORTAL_COOKIE].value


@MODULE_LOOP
async def test_a_cookie_state_change_from_another_origin_is_refused(world: World) -> None:
    headers = world.headers("csrf")
    for origin, expected in (("http://evil.example", 403), (world.base, 200)):
        status, text = await world.call(
            "POST", "/v1/dead-letters/replay", {"ids": [MISSING]}, headers | {"Origin": origin}
        )
        assert status == expected, text


@MODULE_LOOP
async def test_signing_out_of_the_portal_ends_the_session(world: World) -> None:
    sid = await portal_login(world, ACME)
    cookie = {"Cookie": f"{PORTAL_COOKIE}={sid}"}
    assert (await world.call("POST", "/portal/logout", headers=cookie))[0] == 403  # no CSRF
    status, _ = await world.call(
        "POST", "/portal/logout", headers=cookie | {CSRF_HEADER: tenancy.csrf_for(sid)}
    )
    assert status == 303
    assert (await world.call("GET", "/v1/endpoints", headers=cookie))[0] == 401
    # Another session of the same application is not touched.
    assert (await world.call("GET", "/v1/endpoints", headers=world.headers("cookie")))[0] == 200


@MODULE_LOOP
async def test_a_portal_code_redeemed_at_once_by_many_signs_in_one(world: World) -> None:
    link = await world.admin("POST", f"/v1/applications/{ACME}/portal-links", {})

    async def attempt() -> int:
        async with world.http.get(link["url"], allow_redirects=False) as r:
            return r.status

    statuses = sorted(await asyncio.gather(*(attempt() for _ in range(8))))
    assert statuses == [303] + [401] * 7


@MODULE_LOOP
async def test_an_endpoint_stays_in_its_application(world: World, conn: asyncpg.Connection) -> None:
    mine = await objects(conn, ACME)
    path = f"/v1/endpoints/{mine['ep']}"
    status, text = await world.call("PATCH", path, {"app": GLOBEX}, world.headers("admin"))
    assert (status, message(text)) == (400, "an endpoint stays in its application")
    # Its own application named again is no change, for the admin and for acme.
    for column in ("admin", "own"):
        status, text = await world.call("PATCH", path, {"app": ACME}, world.headers(column))
        assert status == 200 and orjson.loads(text)["app"] == ACME
    owner = "SELECT application_id FROM endpoints WHERE id = $1"
    assert await conn.fetchval(owner, mine["ep"]) == ACME


@MODULE_LOOP
async def test_the_operators_ops_webhooks_are_out_of_an_applications_reach(
    world: World, conn: asyncpg.Connection
) -> None:
    mine = await objects(conn, ACME)
    operator = await world.admin("POST", "/v1/ops-webhooks", {"url": "https://ops.example/o"})
    assert operator["app"] is None and operator["secret"].startswith("whsec_")
    path = f"/v1/ops-webhooks/{operator['id']}"
    for column in ("own", "cookie", "csrf"):
        for method, body in (("GET", None), ("PATCH", {"description": "x"}), ("DELETE", None)):
            if method != "GET" and column == "cookie":
                continue
            status, text = await world.call(method, path, body, world.headers(column))
            assert status == 404, (column, method, text)
    listed = {w["id"] for w in await as_app(world, world.token, "GET", "/v1/ops-webhooks")}
    assert mine["ops"] in listed and operator["id"] not in listed
    assert all(
        w["app"] == ACME for w in await as_app(world, world.token, "GET", "/v1/ops-webhooks")
    )
    everything = {w["id"] for w in await world.admin("GET", "/v1/ops-webhooks")}
    assert {mine["ops"], operator["id"]} <= everything
    # Not an endpoint, on any endpoint route, for anyone.
    status, _ = await world.call("GET", f"/v1/endpoints/{mine['ops']}", None, world.headers("own"))
    assert status == 404
    status, _ = await world.call("GET", f"/v1/endpoints/{operator['id']}", None,
                                 world.headers("admin"))  # fmt: skip
    assert status == 404
    await world.admin("DELETE", path)
