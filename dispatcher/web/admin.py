"""The admin HTTP server: its one route table (ROUTES), the app factory
(`build_app`, `start_admin`) and the probes (/healthz, /readyz, /metrics,
the OpenAPI document).

An entry point: from the table come the aiohttp routes, who may call each
(RULES) and the OpenAPI paths (OPENAPI). The /v1/ handlers are web.v1's
(and web.browse's, web.postbacks'), the Svix-compatible ones web.svix's;
checking who calls and what every answer carries is web.security's, the
dashboard's pages are web.pages', the portal's web.portal's. Everything
but /healthz, /readyz and the sign-ins requires `Authorization: Bearer
$DISPATCHER_ADMIN_TOKEN` (or the dashboard's session cookie), or for the
routes an application may use, one of its `dtk_` tokens (or a portal
session): such a call acts inside that application only (params.scope).
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import replace

import asyncpg
from aiohttp import web

from dispatcher import db
from dispatcher.core.errors import BadInput
from dispatcher.metrics import CONTENT_TYPE, Metrics
from dispatcher.ops import reports
from dispatcher.settings import OwnServer, Settings
from dispatcher.web import (
    browse,
    erasure,
    idempotency,
    pages,
    polling,
    portal,
    postbacks,
    security,
    svix,
    v1,
)
from dispatcher.web import openapi as oas
from dispatcher.web.keys import (
    METRICS,
    POOL,
    REFRESH,
    SETTINGS,
    PercentileRefresh,
    acquire,
    refresh_due,
)
from dispatcher.web.routes import Access, Route, add_routes
from dispatcher.web.security import json_response as _json

# ---------------------------------------------------------------- probes


async def healthz(_: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        async with acquire(request) as conn:
            current = await db.migrations_current(conn)
    except db.DATABASE_ERRORS:
        return _json({"ready": False, "reason": "database unreachable"}, 503)
    if not current:
        return _json({"ready": False, "reason": "migrations pending"}, 503)
    return _json({"ready": True})


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    window_s = request.app[SETTINGS].latency_window_s
    async with acquire(request) as conn:
        g, alerts = await reports.metrics_view(conn, window_s, refresh=refresh_due(request))
    m.set_database_view(g, alerts)
    return web.Response(body=m.render(), headers={"Content-Type": CONTENT_TYPE})


async def openapi(_: web.Request) -> web.Response:
    return _json(OPENAPI)  # made from ROUTES, below


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
          healthz,                  oas.HEALTHZ),
    Route("GET",    "/readyz",                              OPEN,
          readyz,                   oas.READYZ),
    Route("GET",    "/metrics",                             ADMIN,
          metrics,                  oas.METRICS),
    # The dashboard: `/` shows a caller without a session the sign-in form (401).
    Route("GET",    "/",                                    OPEN,
          pages.dashboard,          None),
    Route("GET",    "/login",                               OPEN,
          pages.login_form,         None),
    Route("POST",   "/login",                               OPEN,
          pages.login,              None),
    Route("POST",   "/logout",                              ADMIN,
          pages.logout,             None),
    Route("GET",    "/static/{name}",                       OPEN,
          pages.static_file,        None),
    Route("GET",    "/v1/openapi.json",                     ADMIN,
          openapi,                  oas.OPENAPI_V1),
    # Where tools look first; the same document, the same access.
    Route("GET",    "/openapi.json",                        ADMIN,
          openapi,                  oas.OPENAPI_ROOT),
    Route("GET",    "/v1/endpoints",                        APP,
          v1.endpoints_list,        oas.ENDPOINTS_LIST),
    Route("POST",   "/v1/endpoints",                        APP,
          v1.endpoints_create,      oas.ENDPOINTS_CREATE),
    Route("GET",    "/v1/endpoints/health",                 APP,
          v1.endpoints_health,      oas.ENDPOINTS_HEALTH),
    Route("GET",    f"/v1/endpoints/{ID}",                  APP,
          v1.endpoint_get,          oas.ENDPOINT_GET),
    Route("PATCH",  f"/v1/endpoints/{ID}",                  APP,
          v1.endpoint_update,       oas.ENDPOINT_UPDATE),
    Route("DELETE", f"/v1/endpoints/{ID}",                  APP,
          v1.endpoint_delete,       oas.ENDPOINT_DELETE),
    Route("POST",   f"/v1/endpoints/{ID}/disable",          APP,
          v1.toggle(False),         oas.ENDPOINT_DISABLE),
    Route("POST",   f"/v1/endpoints/{ID}/enable",           APP,
          v1.toggle(True),          oas.ENDPOINT_ENABLE),
    Route("POST",   f"/v1/endpoints/{ID}/rotate-secret",    APP,
          v1.endpoint_rotate,       oas.ENDPOINT_ROTATE),
    Route("POST",   f"/v1/endpoints/{ID}/test",             APP,
          v1.endpoint_test,         oas.ENDPOINT_TEST),
    Route("GET",    f"/v1/endpoints/{ID}/activity",         ADMIN,
          v1.endpoint_activity,     oas.ENDPOINT_ACTIVITY),
    Route("POST",   "/v1/events",                           APP,
          v1.events_create,         oas.EVENTS_CREATE),
    Route("GET",    "/v1/event-types",                      APP,
          v1.event_types_list,      oas.EVENT_TYPES_LIST),
    Route("POST",   "/v1/event-types",                      APP,
          v1.event_types_create,    oas.EVENT_TYPES_CREATE),
    Route("GET",    "/v1/event-types/{name}",               APP,
          v1.event_type_get,        oas.EVENT_TYPE_GET),
    Route("PATCH",  "/v1/event-types/{name}",               APP,
          v1.event_type_update,     oas.EVENT_TYPE_UPDATE),
    Route("DELETE", "/v1/event-types/{name}",               APP,
          v1.event_type_delete,     oas.EVENT_TYPE_DELETE),
    *browse.ROUTES,  # deliveries, one delivery, dead letters
    *polling.ROUTES,  # a polling endpoint's deliveries
    Route("GET",    "/v1/dead-letters/analyze",             ADMIN,
          v1.dead_letters_analyze,  oas.DEAD_LETTERS_ANALYZE),
    Route("POST",   "/v1/dead-letters/replay",              APP,
          v1.dead_letters_replay,   oas.DEAD_LETTERS_REPLAY),
    Route("GET",    "/v1/ops-webhooks",                     APP,
          v1.ops_webhooks_list,     oas.OPS_WEBHOOKS_LIST),
    Route("POST",   "/v1/ops-webhooks",                     APP,
          v1.ops_webhooks_create,   oas.OPS_WEBHOOKS_CREATE),
    Route("GET",    f"/v1/ops-webhooks/{ID}",               APP,
          v1.ops_webhook_get,       oas.OPS_WEBHOOK_GET),
    Route("PATCH",  f"/v1/ops-webhooks/{ID}",               APP,
          v1.ops_webhook_update,    oas.OPS_WEBHOOK_UPDATE),
    Route("DELETE", f"/v1/ops-webhooks/{ID}",               APP,
          v1.ops_webhook_delete,    oas.OPS_WEBHOOK_DELETE),
    Route("GET",    "/v1/health",                           ADMIN,
          v1.health,                oas.HEALTH),
    Route("GET",    "/v1/alerts",                           ADMIN,
          v1.alerts,                oas.ALERTS),
    Route("GET",    "/v1/timeline",                         ADMIN,
          v1.timeline,              oas.TIMELINE),
    Route("GET",    "/v1/settings/wake",                    ADMIN,
          v1.wake_get,              oas.WAKE_GET),
    Route("PUT",    "/v1/settings/wake",                    ADMIN,
          v1.wake_put,              oas.WAKE_PUT),
    Route("GET",    "/v1/applications",                     ADMIN,
          v1.applications_list,     oas.APPLICATIONS_LIST),
    Route("POST",   "/v1/applications",                     ADMIN,
          v1.applications_create,   oas.APPLICATIONS_CREATE),
    Route("PATCH",  "/v1/applications/{app}",               ADMIN,
          v1.application_update,    oas.APPLICATION_UPDATE),
    Route("POST",   "/v1/applications/{app}/tokens",        ADMIN,
          v1.application_token,     oas.APPLICATION_TOKEN),
    Route("POST",   "/v1/applications/{app}/portal-links",  ADMIN,
          v1.application_portal_link, oas.APPLICATION_PORTAL_LINK),
    Route("POST",   "/v1/applications/{app}/revoke-portal", ADMIN,
          v1.application_revoke_portal, oas.APPLICATION_REVOKE_PORTAL),
    # The portal: its sign-in and page answer for themselves (a code, a session).
    Route("GET",    "/portal/login",                        OPEN,
          portal.login,             oas.PORTAL_LOGIN),
    Route("GET",    portal.PORTAL_PATH,                     OPEN,
          portal.page,              None),
    Route("POST",   "/portal/logout",                       APP,
          portal.logout,            None),
    *svix.ROUTES,
    *postbacks.ROUTES,
    *erasure.ROUTES,
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
