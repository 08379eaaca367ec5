"""The admin HTTP API (aiohttp.web): health probes, metrics, JSON under /v1/.

An entry point: it wires the service, reports and metrics together, and
keeps the server's one route table (ROUTES, at the end), from which its
routes, who may call each and the OpenAPI paths are made. Checking who
calls and what every answer carries is web.security's, the dashboard's
pages are web.pages', the portal's web.portal's. Everything but
/healthz, /readyz and the sign-ins requires `Authorization: Bearer
$DISPATCHER_ADMIN_TOKEN` (or the dashboard's session cookie), or for the
routes an application may use, one of its `dtk_` tokens (or a portal
session): such a call acts inside that application only (`_scope`).
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import asyncpg
from aiohttp import web

from dispatcher import db
from dispatcher.core.errors import BadInput, Forbidden
from dispatcher.metrics import CONTENT_TYPE, Metrics
from dispatcher.ops import eventtypes, opswebhooks, reports, service, tenancy, wake
from dispatcher.ops.inputs import spec_from_fields
from dispatcher.settings import OwnServer, Settings
from dispatcher.web import browse, idempotency, pages, portal, postbacks, security, svix
from dispatcher.web import openapi as oas
from dispatcher.web.keys import POOL, SETTINGS, read_object
from dispatcher.web.routes import Access, Handler, Route, add_routes
from dispatcher.web.security import json_response as _json

PERCENTILE_REFRESH_S = 5.0


@dataclass(slots=True)
class PercentileRefresh:
    """When this server last had the latency percentiles recomputed.

    A dashboard polls three routes every 2 s and Prometheus scrapes /metrics;
    each recomputing the window (0.44 s of database time per million samples)
    would put the cost on every read, so a server asks for it at most every
    `every_s`. `serve` runs no maintenance task, so this is also what keeps
    its figures fresh.
    """

    every_s: float = PERCENTILE_REFRESH_S
    last: float = float("-inf")

    def claim(self, now: float) -> bool:
        """Whether a refresh is due at `now`; if so it counts as done from
        `now`, so that of the reads in one interval only the first refreshes."""
        if now - self.last < self.every_s:
            return False
        self.last = now
        return True


METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
REFRESH: web.AppKey[PercentileRefresh] = web.AppKey("percentile_refresh", PercentileRefresh)


def _conn(request: web.Request) -> contextlib.AbstractAsyncContextManager[db.Conn]:
    return db.acquire(request.app[POOL])


def _int(value: str, name: str) -> int:
    # ASCII digits only: int() also reads other scripts' digits ("٣" is 3).
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise BadInput(f"{name} must be a positive integer")
    n = int(value)
    if not 0 < n < 2**63:
        raise BadInput(f"{name} is out of range")
    return n


def _scope(request: web.Request, named: Any = None) -> str | None:
    """The application a call acts in, from `named` (a body's "app") or
    `?app=`. An application's credential: its own (naming another, in a
    body or the query, is 403). The admin: the one named, None for all (or,
    where something is created, the default)."""
    query = request.query.get("app")
    if named is not None and not isinstance(named, str):
        raise BadInput("app must be an application id")
    own: str | None = request.get(security.APP)
    if own is not None:
        if any(n is not None and n != own for n in (named, query)):
            raise Forbidden("this credential acts only inside its own application")
        return own
    if named is not None and query is not None and named != query:
        raise BadInput("app is given twice, differently")
    return named if named is not None else query


def _own(request: web.Request) -> bool:
    """The call is an application's own credential's: what it provokes
    (ops deliveries, replays) is taken from that application's quotas."""
    return request.get(security.APP) is not None


def _refresh_due(request: web.Request) -> bool:
    """Recompute percentiles on this read? (PercentileRefresh)"""
    return request.app[REFRESH].claim(time.monotonic())


# ---------------------------------------------------------------- probes


async def healthz(_: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        async with _conn(request) as conn:
            current = await db.migrations_current(conn)
    except db.DATABASE_ERRORS:
        return _json({"ready": False, "reason": "database unreachable"}, 503)
    if not current:
        return _json({"ready": False, "reason": "migrations pending"}, 503)
    return _json({"ready": True})


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    window_s = request.app[SETTINGS].latency_window_s
    async with _conn(request) as conn:
        g, alerts = await reports.metrics_view(conn, window_s, refresh=_refresh_due(request))
    m.set_database_view(
        {"pending": g.pending, "failed": g.failed, "in_flight": g.in_flight,
         "dead_letter": g.dead_letter},
        g.oldest_pending_s,
        {"closed": g.closed, "open": g.open, "half_open": g.half_open},
        alerts,
    )  # fmt: skip
    return web.Response(body=m.render(), headers={"Content-Type": CONTENT_TYPE})


async def openapi(_: web.Request) -> web.Response:
    return _json(OPENAPI)  # made from ROUTES, below


# ---------------------------------------------------------------- endpoints


def _id(request: web.Request) -> int:
    return _int(request.match_info["id"], "id")


async def endpoints_list(request: web.Request) -> web.Response:
    app = _scope(request)
    async with _conn(request) as conn:
        return _json(await service.list_endpoints(conn, app))


async def endpoints_create(request: web.Request) -> web.Response:
    body = await read_object(request)
    app = _scope(request, body.pop("app", None))
    spec = spec_from_fields(body)
    settings = request.app[SETTINGS]
    async with _conn(request) as conn:
        doc = await service.add_endpoint(
            conn,
            spec,
            signature=body.get("signature"),
            box=settings.secret_box(),
            targets=settings.target_policy(),
            app=app,
            within_quota=True,
            charged=_own(request),
        )
    return _json(doc, 201)


async def endpoint_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await service.get_endpoint(conn, _id(request), _scope(request)))


async def endpoint_update(request: web.Request) -> web.Response:
    eid = _id(request)
    patch = await read_object(request)
    _scope(request, patch.get("app"))  # naming another application: 403
    settings = request.app[SETTINGS]
    async with _conn(request) as conn:
        doc = await service.update_endpoint(
            conn,
            eid,
            patch,
            box=settings.secret_box(),
            targets=settings.target_policy(),
            app=_scope(request),
            charged=_own(request),
        )
    return _json(doc)


_FLAGS = {"true": True, "1": True, "false": False, "0": False}


async def endpoint_delete(request: web.Request) -> web.Response:
    """`?force=true` or a body `{"force": true}`: either one forces."""
    eid = _id(request)
    body = await read_object(request, ("force", "app"))
    query = request.query.get("force")
    if query is not None and query.lower() not in _FLAGS:
        raise BadInput("force must be true or false")
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise BadInput("force must be true or false")
    force = force or (query is not None and _FLAGS[query.lower()])
    async with _conn(request) as conn:
        doc = await service.delete_endpoint(
            conn, eid, force, _scope(request, body.get("app")), charged=_own(request)
        )
    return _json(doc)


def _toggle(enabled: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        async with _conn(request) as conn:
            doc = await service.set_enabled(
                conn, _id(request), enabled, _scope(request), charged=_own(request)
            )
            return _json(doc)

    return handler


async def endpoint_rotate(request: web.Request) -> web.Response:
    eid = _id(request)
    body = await read_object(request, ("grace_s", "app"))
    app = _scope(request, body.get("app"))
    box = request.app[SETTINGS].secret_box()
    async with _conn(request) as conn:
        doc = await service.rotate_secret(conn, eid, body.get("grace_s"), box, app)
    return _json(doc)


async def endpoint_test(request: web.Request) -> web.Response:
    eid = _id(request)
    app = _scope(request, (await read_object(request, ("app",))).get("app"))
    async with _conn(request) as conn:
        return _json(await service.send_test_event(conn, eid, app, within_quota=True), 202)


async def endpoints_health(request: web.Request) -> web.Response:
    window_s = request.app[SETTINGS].latency_window_s
    app = _scope(request)
    async with _conn(request) as conn:
        rows = await reports.endpoint_health(conn, window_s, refresh=_refresh_due(request), app=app)
    return _json(rows)


# ---------------------------------------------------------------- events and deliveries


async def events_create(request: web.Request) -> web.Response:
    doc = await read_object(request)
    app = _scope(request, doc.get("app"))
    max_bytes = request.app[SETTINGS].max_payload_bytes
    async with _conn(request) as conn:
        result = await service.enqueue_event(conn, doc, max_bytes, app, within_quota=True)
    return _json(result, 202)


# ---------------------------------------------------------------- dead letters


def _query_int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    return None if value is None else _int(value, name)


def _query_number(request: web.Request, name: str) -> float | None:
    value = request.query.get(name)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise BadInput(f"{name} must be a number") from None


async def dead_letters_analyze(request: web.Request) -> web.Response:
    hours = _query_number(request, "hours")
    async with _conn(request) as conn:
        return _json(await reports.dlq_analyze(conn, hours))


async def dead_letters_replay(request: web.Request) -> web.Response:
    body = await read_object(request, ("ids", "endpoint_id", "endpoint", "since", "until", "app"))
    if "endpoint" in body and "endpoint_id" in body:
        raise BadInput("give endpoint or endpoint_id, not both")
    app = _scope(request, body.get("app"))
    async with _conn(request) as conn:
        done = await service.replay(
            conn,
            ids=body.get("ids"),
            endpoint_id=body.get("endpoint_id", body.get("endpoint")),
            since=body.get("since"),
            until=body.get("until"),
            app=app,
            # An application's own credential: what it requeues is taken
            # from its events quota; the operator's replays are not.
            within_quota=_own(request),
        )
    return _json({"requeued": done.requeued})


# ---------------------------------------------------------------- event types
# Without ?app= (or "app"), the admin addresses the catalogue-wide scope; an
# application's credential, its own (reads also see the catalogue-wide).


def _flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "false").lower()
    if value not in _FLAGS:
        raise BadInput(f"{name} must be true or false")
    return _FLAGS[value]


async def event_types_list(request: web.Request) -> web.Response:
    app, limit = _scope(request), _query_int(request, "limit")
    archived, after = _flag(request, "include_archived"), request.query.get("after")
    async with _conn(request) as conn:
        docs = await eventtypes.list_event_types(conn, app, archived, limit, after)
    # Each type's latest schema, not also every version: GET one type for those.
    return _json([{k: v for k, v in d.items() if k != "schemas"} for d in docs])


async def event_types_create(request: web.Request) -> web.Response:
    body = await read_object(request, ("name", *eventtypes.PATCH_FIELDS - {"archived"}, "app"))
    app = _scope(request, body.get("app"))
    async with _conn(request) as conn:
        doc = await eventtypes.add_event_type(
            conn, body.get("name"), description=body.get("description"),
            schema=body.get("schema"), schemas=body.get("schemas"), app=app,
            feature_flag=body.get("feature_flag"),
        )  # fmt: skip
    return _json(doc, 201)


async def event_type_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await eventtypes.get_event_type(conn, request.match_info["name"],
                                                     _scope(request)))  # fmt: skip


async def event_type_update(request: web.Request) -> web.Response:
    patch = await read_object(request, (*eventtypes.PATCH_FIELDS, "app"))
    app = _scope(request, patch.pop("app", None))
    async with _conn(request) as conn:
        return _json(await eventtypes.update_event_type(conn, request.match_info["name"], patch,
                                                        app))  # fmt: skip


async def event_type_delete(request: web.Request) -> web.Response:
    """Archives it; `?expunge=true` removes it."""
    app = _scope(request, (await read_object(request, ("app",))).get("app"))
    name, expunge = request.match_info["name"], _flag(request, "expunge")
    async with _conn(request) as conn:
        return _json(await eventtypes.delete_event_type(conn, name, app, expunge))


# ---------------------------------------------------------------- applications (admin only)


async def applications_list(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await tenancy.list_applications(conn))


async def applications_create(request: web.Request) -> web.Response:
    body = await read_object(request, ("id", "name"))
    async with _conn(request) as conn:
        return _json(await tenancy.add_application(conn, body.get("id"), body.get("name")), 201)


async def application_update(request: web.Request) -> web.Response:
    """Rename, set or clear (null) quotas: the application document."""
    body = await read_object(request, tenancy.APPLICATION_FIELDS)
    async with _conn(request) as conn:
        return _json(await tenancy.update_application(conn, request.match_info["app"], body))


async def application_token(request: web.Request) -> web.Response:
    body = await read_object(request, ("ttl_s",))
    async with _conn(request) as conn:
        doc = await tenancy.issue_token(conn, request.match_info["app"], body.get("ttl_s"))
    return _json(doc, 201)


async def application_portal_link(request: web.Request) -> web.Response:
    """`base_url` defaults to this server's own address as the caller reached it."""
    body = await read_object(request, ("base_url", "ttl_s"))
    base = body.get("base_url") or f"{request.scheme}://{request.host}"
    async with _conn(request) as conn:
        doc = await tenancy.portal_link(conn, request.match_info["app"], base, body.get("ttl_s"))
    return _json(doc, 201)


async def application_revoke_portal(request: web.Request) -> web.Response:
    """Every portal code and session of the application ended: the counts."""
    await read_object(request, ())
    async with _conn(request) as conn:
        return _json(await tenancy.revoke_portal(conn, request.match_info["app"]))


# ---------------------------------------------------------------- operational webhooks
# The admin's: the operator's (no "app") or any application's; an
# application's credential: its own application's only (SPEC "Operational
# webhooks"), the operator's reading as missing.

_OPS_FIELDS = ("url", "event_types", "app", "secret", "description")


async def ops_webhooks_list(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await opswebhooks.list_webhooks(conn, _scope(request)))


async def ops_webhooks_create(request: web.Request) -> web.Response:
    body = await read_object(request, _OPS_FIELDS)
    settings = request.app[SETTINGS]
    async with _conn(request) as conn:
        doc = await opswebhooks.add(
            conn, body.get("url"), event_types=body.get("event_types"),
            app=_scope(request, body.get("app")), secret=body.get("secret"),
            description=body.get("description"), box=settings.secret_box(),
            targets=settings.target_policy(), within_quota=True,
        )  # fmt: skip
    return _json(doc, 201)


async def ops_webhook_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await opswebhooks.get(conn, _id(request), _scope(request)))


async def ops_webhook_update(request: web.Request) -> web.Response:
    wid = _id(request)
    patch = await read_object(request, (*opswebhooks.FIELDS, "app"))
    app = _scope(request, patch.get("app"))
    targets = request.app[SETTINGS].target_policy()
    async with _conn(request) as conn:
        return _json(await opswebhooks.update(conn, wid, patch, app=app, targets=targets))


async def ops_webhook_delete(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await opswebhooks.delete(conn, _id(request), _scope(request)))


# ---------------------------------------------------------------- summaries


async def health(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await reports.health_summary(conn))


async def timeline(request: web.Request) -> web.Response:
    minutes = _query_number(request, "minutes")
    async with _conn(request) as conn:
        return _json(await reports.timeline(conn, minutes))


async def endpoint_activity(request: web.Request) -> web.Response:
    eid = _id(request)
    minutes = _query_number(request, "minutes")
    async with _conn(request) as conn:
        return _json(await reports.endpoint_activity(conn, eid, minutes))


async def alerts(request: web.Request) -> web.Response:
    window_s = request.app[SETTINGS].latency_window_s
    async with _conn(request) as conn:
        doc = await reports.alerts(conn, window_s, refresh=_refresh_due(request))
    return _json(doc)


async def wake_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await wake.wake_mode(conn))


async def wake_put(request: web.Request) -> web.Response:
    body = await read_object(request, ("wake",))
    async with _conn(request) as conn:
        return _json(await wake.set_wake_mode(conn, body.get("wake")))


# ---------------------------------------------------------------- the routes

OPEN, ADMIN, APP = Access.OPEN, Access.ADMIN, Access.APP
ID = "{id:[0-9]+}"

# The server's one list of routes, in the order aiohttp matches them. Each
# row: method, path, who may call it (OPEN: no credential asked; ADMIN: the
# admin token or the dashboard's session; APP: also an application's
# credential, inside its application, SPEC "Applications (tenants) and the
# customer portal"); then the handler and its OpenAPI operation (None: a
# page the document leaves out). From it come the aiohttp routes
# (add_routes), the guard's rules (RULES) and the document's paths
# (OPENAPI). tests/integration/test_tenancy_matrix.py must cover every row.
# fmt: off
ROUTES: tuple[Route, ...] = (
    Route("GET",    "/healthz",                             OPEN,
          healthz,                 oas.HEALTHZ),
    Route("GET",    "/readyz",                              OPEN,
          readyz,                  oas.READYZ),
    Route("GET",    "/metrics",                             ADMIN,
          metrics,                 oas.METRICS),
    # The dashboard: `/` shows a caller without a session the sign-in form (401).
    Route("GET",    "/",                                    OPEN,
          pages.dashboard,         None),
    Route("GET",    "/login",                               OPEN,
          pages.login_form,        None),
    Route("POST",   "/login",                               OPEN,
          pages.login,             None),
    Route("POST",   "/logout",                              ADMIN,
          pages.logout,            None),
    Route("GET",    "/static/{name}",                       OPEN,
          pages.static_file,       None),
    Route("GET",    "/v1/openapi.json",                     ADMIN,
          openapi,                 oas.OPENAPI_V1),
    # Where tools look first; the same document, the same access.
    Route("GET",    "/openapi.json",                        ADMIN,
          openapi,                 oas.OPENAPI_ROOT),
    Route("GET",    "/v1/endpoints",                        APP,
          endpoints_list,          oas.ENDPOINTS_LIST),
    Route("POST",   "/v1/endpoints",                        APP,
          endpoints_create,        oas.ENDPOINTS_CREATE),
    Route("GET",    "/v1/endpoints/health",                 APP,
          endpoints_health,        oas.ENDPOINTS_HEALTH),
    Route("GET",    f"/v1/endpoints/{ID}",                  APP,
          endpoint_get,            oas.ENDPOINT_GET),
    Route("PATCH",  f"/v1/endpoints/{ID}",                  APP,
          endpoint_update,         oas.ENDPOINT_UPDATE),
    Route("DELETE", f"/v1/endpoints/{ID}",                  APP,
          endpoint_delete,         oas.ENDPOINT_DELETE),
    Route("POST",   f"/v1/endpoints/{ID}/disable",          APP,
          _toggle(False),          oas.ENDPOINT_DISABLE),
    Route("POST",   f"/v1/endpoints/{ID}/enable",           APP,
          _toggle(True),           oas.ENDPOINT_ENABLE),
    Route("POST",   f"/v1/endpoints/{ID}/rotate-secret",    APP,
          endpoint_rotate,         oas.ENDPOINT_ROTATE),
    Route("POST",   f"/v1/endpoints/{ID}/test",             APP,
          endpoint_test,           oas.ENDPOINT_TEST),
    Route("GET",    f"/v1/endpoints/{ID}/activity",         ADMIN,
          endpoint_activity,       oas.ENDPOINT_ACTIVITY),
    Route("POST",   "/v1/events",                           APP,
          events_create,           oas.EVENTS_CREATE),
    Route("GET",    "/v1/event-types",                      APP,
          event_types_list,        oas.EVENT_TYPES_LIST),
    Route("POST",   "/v1/event-types",                      APP,
          event_types_create,      oas.EVENT_TYPES_CREATE),
    Route("GET",    "/v1/event-types/{name}",               APP,
          event_type_get,          oas.EVENT_TYPE_GET),
    Route("PATCH",  "/v1/event-types/{name}",               APP,
          event_type_update,       oas.EVENT_TYPE_UPDATE),
    Route("DELETE", "/v1/event-types/{name}",               APP,
          event_type_delete,       oas.EVENT_TYPE_DELETE),
    *browse.ROUTES,  # deliveries, one delivery, dead letters
    Route("GET",    "/v1/dead-letters/analyze",             ADMIN,
          dead_letters_analyze,    oas.DEAD_LETTERS_ANALYZE),
    Route("POST",   "/v1/dead-letters/replay",              APP,
          dead_letters_replay,     oas.DEAD_LETTERS_REPLAY),
    Route("GET",    "/v1/ops-webhooks",                     APP,
          ops_webhooks_list,       oas.OPS_WEBHOOKS_LIST),
    Route("POST",   "/v1/ops-webhooks",                     APP,
          ops_webhooks_create,     oas.OPS_WEBHOOKS_CREATE),
    Route("GET",    f"/v1/ops-webhooks/{ID}",               APP,
          ops_webhook_get,         oas.OPS_WEBHOOK_GET),
    Route("PATCH",  f"/v1/ops-webhooks/{ID}",               APP,
          ops_webhook_update,      oas.OPS_WEBHOOK_UPDATE),
    Route("DELETE", f"/v1/ops-webhooks/{ID}",               APP,
          ops_webhook_delete,      oas.OPS_WEBHOOK_DELETE),
    Route("GET",    "/v1/health",                           ADMIN,
          health,                  oas.HEALTH),
    Route("GET",    "/v1/alerts",                           ADMIN,
          alerts,                  oas.ALERTS),
    Route("GET",    "/v1/timeline",                         ADMIN,
          timeline,                oas.TIMELINE),
    Route("GET",    "/v1/settings/wake",                    ADMIN,
          wake_get,                oas.WAKE_GET),
    Route("PUT",    "/v1/settings/wake",                    ADMIN,
          wake_put,                oas.WAKE_PUT),
    Route("GET",    "/v1/applications",                     ADMIN,
          applications_list,       oas.APPLICATIONS_LIST),
    Route("POST",   "/v1/applications",                     ADMIN,
          applications_create,     oas.APPLICATIONS_CREATE),
    Route("PATCH",  "/v1/applications/{app}",               ADMIN,
          application_update,      oas.APPLICATION_UPDATE),
    Route("POST",   "/v1/applications/{app}/tokens",        ADMIN,
          application_token,       oas.APPLICATION_TOKEN),
    Route("POST",   "/v1/applications/{app}/portal-links",  ADMIN,
          application_portal_link, oas.APPLICATION_PORTAL_LINK),
    Route("POST",   "/v1/applications/{app}/revoke-portal", ADMIN,
          application_revoke_portal, oas.APPLICATION_REVOKE_PORTAL),
    # The portal: its sign-in and page answer for themselves (a code, a session).
    Route("GET",    "/portal/login",                        OPEN,
          portal.login,            oas.PORTAL_LOGIN),
    Route("GET",    portal.PORTAL_PATH,                     OPEN,
          portal.page,             None),
    Route("POST",   "/portal/logout",                       APP,
          portal.logout,           None),
    *svix.ROUTES,
    *postbacks.ROUTES,
)
# fmt: on
RULES = security.AccessRules.of(ROUTES)
OPENAPI = oas.document(ROUTES)


def build_app(settings: Settings, pool: asyncpg.Pool, token: str,
              metrics_: Metrics | None = None) -> web.Application:  # fmt: skip
    app = web.Application(
        middlewares=[security.guard, idempotency.middleware], client_max_size=2 * 1024 * 1024
    )
    resolver = portal.install(app, pool)
    security.install(app, token, resolver, RULES, failures_per_min=settings.auth_failures_per_min)
    app[POOL] = pool
    app[SETTINGS] = settings
    app[METRICS] = metrics_ or Metrics()
    app[REFRESH] = PercentileRefresh()
    add_routes(app.router, ROUTES)
    return app


def parse_bind(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        n = int(port)
    except ValueError:
        raise BadInput(f"--http must be HOST:PORT, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise BadInput("--http port must be 0..65535")
    return host, n


async def start_admin(bind: str, settings: Settings, url: str, metrics_: Metrics | None = None,
                      *, quiet: bool = False) -> web.BaseRunner:  # fmt: skip
    host, port = parse_bind(bind)
    token = settings.admin_token
    if token is None:
        token = secrets.token_urlsafe(24)
        sys.stderr.write(f"dispatcher: DISPATCHER_ADMIN_TOKEN unset; this run's token: {token}\n")
    pool = await db.create_pool(url, size=3)
    # Filled in once bound: no endpoint may aim at this server or carry its token.
    own = OwnServer(token=token)
    app = build_app(replace(settings, own_server=own), pool, token, metrics_)

    async def close_pool(_: web.Application) -> None:
        await pool.close()

    app.on_cleanup.append(close_pool)
    runner = await security.start_runner(app, shutdown_timeout=2)
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    own.origins.extend((str(a[0]), int(a[1])) for a in runner.addresses)
    if not quiet:
        bound = runner.addresses[0]
        sys.stderr.write(f"dispatcher: admin API on http://{bound[0]}:{bound[1]}/\n")
    return runner
