"""Who may call the admin server, and what every one of its answers carries.

Owns the admin token check, the dashboard's sign-in sessions (an HttpOnly,
SameSite=Strict cookie with a CSRF token for state-changing calls), who an
application's credential is (a `dtk_` token, or a portal session cookie)
and which routes it may call, the security headers on every response, and
the turning of every error into a JSON answer: an input error is a 4xx with
`{"error": …}`, anything else a logged one-line 500, never a traceback. It
also owns the lockout of a client address that offered too many wrong
credentials (bearer tokens here, the sign-ins in the pages' modules, all
through `refuse_if_locked_out` and `credential_failed`; the policy is
throttle's), keyed on the connection's address, never on a header. It
never touches the database (application credentials are looked up through
the `Resolver` the server installs) and knows nothing of the routes but
which ones are open and which an application may use, the `AccessRules`
made from the route table (web.routes). It also serves the application
(`start_runner`): connections that answer even a request aiohttp cannot
parse like every other error.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import asyncpg
from aiohttp import web

from dispatcher import db, log
from dispatcher.core.encoding import to_json
from dispatcher.core.errors import (
    BadInput,
    Conflict,
    DispatcherError,
    Forbidden,
    NotFound,
    TargetRefused,
    Throttled,
    Unprocessable,
)
from dispatcher.core.throttle import FailureThrottle, address_key
from dispatcher.ops import svix
from dispatcher.web.routes import Access, Handler, Route

SESSION_COOKIE = "dispatcher_session"
PORTAL_COOKIE = "dispatcher_portal"
TOKEN_PREFIX = "dtk_"
CSRF_HEADER = "X-CSRF-Token"
SESSION_TTL_S = 12 * 3600.0
MAX_SESSIONS = 1000
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Server": "dispatcher",
}


def json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(body=to_json(doc), status=status, content_type="application/json")


def json_error(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status)


SVIX_PREFIX = "/api/"
# Svix's error codes by status, for the answers under SVIX_PREFIX.
_SVIX_CODES = {
    400: "bad_request",
    401: "authentication_failed",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "validation",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
}


def error_response(request: web.BaseRequest, status: int, message: str) -> web.Response:
    """An error in the shape its route family answers: `{"error"}` on ours,
    `{"code", "detail"}` on the Svix API, where input errors are 422 with a
    list of details, as the SDKs parse them (SPEC "The Svix-compatible API")."""
    if not request.path.startswith(SVIX_PREFIX):
        return json_error(status, message)
    if status in (400, 422):
        detail = [{"loc": ["body"], "msg": message, "type": "value_error"}]
        return json_response({"code": "validation", "detail": detail}, 422)
    return json_response({"code": _SVIX_CODES.get(status, "error"), "detail": message}, status)


class Sessions:
    """Signed-in dashboards: session id → (expiry, CSRF token), in memory.

    A restart signs everyone out, which is the safe direction. Only the
    admin token opens a session, so a session can do what the token can.
    """

    __slots__ = ("_live", "_token")

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self._live: dict[str, tuple[float, str]] = {}

    def token_ok(self, offered: str) -> bool:
        # Header values arrive as str decoded with surrogateescape: any byte
        # sequence compares (and fails) without raising.
        return hmac.compare_digest(offered.encode("utf-8", "surrogateescape"), self._token)

    def open(self) -> tuple[str, str]:
        now = time.monotonic()
        self._live = {k: v for k, v in self._live.items() if v[0] > now}
        if len(self._live) >= MAX_SESSIONS:
            del self._live[min(self._live, key=lambda k: self._live[k][0])]
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self._live[sid] = (now + SESSION_TTL_S, csrf)
        return sid, csrf

    def csrf_of(self, sid: str) -> str | None:
        entry = self._live.get(sid)
        if entry is None or entry[0] <= time.monotonic():
            return None
        return entry[1]

    def close(self, sid: str) -> None:
        self._live.pop(sid, None)


@dataclass(frozen=True, slots=True)
class Resolver:
    """Application credentials, looked up by the server that installs this:
    a token's (application, live), a portal session's application, and the
    CSRF token that goes with a portal session."""

    token: Callable[[str], Awaitable[tuple[str, bool] | None]]
    session: Callable[[str], Awaitable[str | None]]
    csrf: Callable[[str], str]


@dataclass(frozen=True, slots=True)
class AccessRules:
    """Which routes the guard leaves open and which an application's
    credential may call, made from the route table (`of`)."""

    open_paths: frozenset[str]
    open_prefixes: tuple[str, ...]
    app_routes: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, table: Iterable[Route]) -> AccessRules:
        rows = list(table)
        opened = [r.path for r in rows if r.access is Access.OPEN]
        prefixes = sorted({p.partition("{")[0] for p in opened if "{" in p})
        for prefix in prefixes:
            # "/static/{name}" opens "/static/…"; a variable any higher up
            # would open far more than its own route.
            if prefix.count("/") < 2 or not prefix.endswith("/"):
                raise ValueError(f"an open route's variable must sit in a folder: {prefix}…")
        return cls(
            open_paths=frozenset(p for p in opened if "{" not in p),
            open_prefixes=tuple(prefixes),
            app_routes=frozenset(r.key for r in rows if r.access is Access.APP),
        )

    def is_open(self, path: str) -> bool:
        """By path, whatever the method: a wrong method on an open path is
        aiohttp's 405, a path under an open folder that no route has its 404."""
        return path in self.open_paths or path.startswith(self.open_prefixes)

    def app_may_call(self, request: web.Request) -> bool:
        resource = request.match_info.route.resource
        if resource is None:
            return True  # no such route: aiohttp's own 404 / 405 follows
        method = "GET" if request.method == "HEAD" else request.method
        return (method, resource.canonical) in self.app_routes


SESSIONS: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)
RULES: web.AppKey[AccessRules] = web.AppKey("access_rules", AccessRules)
THROTTLE: web.AppKey[FailureThrottle] = web.AppKey("throttle", FailureThrottle)
RESOLVER: web.AppKey[Resolver] = web.AppKey("resolver", Resolver)
CSRF: web.RequestKey[str] = web.RequestKey("csrf", str)
# Set when an application's credential made the request: the application.
APP: web.RequestKey[str] = web.RequestKey("app", str)
# Set beside APP when that credential is a `dtk_` token (not a portal
# session): the token, so that what it mints can die with it (issue 32).
APP_TOKEN: web.RequestKey[str] = web.RequestKey("app_token", str)
BODY_BROKEN: web.RequestKey[bool] = web.RequestKey("body_broken", bool)


class LockedOut(Exception):
    """This client address offered too many wrong credentials: 429."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("too many failed credentials from this address: try again later")
        self.retry_after_s = retry_after_s


def _client(request: web.Request) -> str:
    # The connection's own address: X-Forwarded-For is the client's to write.
    return address_key(request.remote)


def refuse_if_locked_out(request: web.Request) -> None:
    """LockedOut while this address is past its failures, even for a right
    credential (it could be the guess that works).

    Asked before a credential is checked, and again once a lookup that
    awaited has its answer, before that answer is shown or recorded: guesses
    sent all at once pass the first check together, and only the second
    keeps the answers to all but the first `limit` of them hidden."""
    wait = request.app[THROTTLE].retry_after(_client(request), time.monotonic())
    if wait is not None:
        raise LockedOut(wait)


def credential_failed(request: web.Request) -> None:
    """A credential this request offered was wrong (unknown, expired, revoked)."""
    request.app[THROTTLE].failed(_client(request), time.monotonic())


def _bearer(request: web.Request) -> str | None:
    value = request.headers.get("Authorization", "")
    scheme, _, credentials = value.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def _same_origin(request: web.Request) -> bool:
    """A cookie-carrying state change must come from our own pages."""
    origin = request.headers.get("Origin")
    return origin is None or origin == f"{request.scheme}://{request.host}"


async def authenticate(request: web.Request) -> str | None:
    """None when the request may go on, with APP set for an application's
    credential (and CSRF for a cookie); else why not (401). LockedOut
    (429) while this address is locked out; a wrong bearer token counts
    towards that."""
    refuse_if_locked_out(request)
    sessions = request.app[SESSIONS]
    offered = _bearer(request)
    if offered is not None:
        why = await _check_bearer(request, offered)
        refuse_if_locked_out(request)
        if why is not None:
            credential_failed(request)
        return why
    # A portal session before the dashboard's: if a browser holds both, it
    # acts with the lesser right.
    portal_sid = request.cookies.get(PORTAL_COOKIE)
    if portal_sid:
        app = await request.app[RESOLVER].session(portal_sid)
        if app is not None:
            request[APP] = app
            request[CSRF] = request.app[RESOLVER].csrf(portal_sid)
            return None
    csrf = sessions.csrf_of(request.cookies.get(SESSION_COOKIE, ""))
    if csrf is None:
        return "missing or wrong bearer token"
    request[CSRF] = csrf
    return None


async def _check_bearer(request: web.Request, offered: str) -> str | None:
    # The admin token first: an operator's token may begin like anything.
    if request.app[SESSIONS].token_ok(offered):
        return None
    if offered.startswith(TOKEN_PREFIX):
        found = await request.app[RESOLVER].token(offered)
        if found is None:
            return "unknown application token"
        if not found[1]:
            return "application token expired or revoked"
        request[APP] = found[0]
        request[APP_TOKEN] = offered
        return None
    return "missing or wrong bearer token"


def _over_tls(request: web.Request) -> bool:
    """TLS here, or ended by a proxy in front that says so: trusting the
    header can only make the cookie stricter."""
    return request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"


def set_session_cookie(
    request: web.Request, response: web.StreamResponse, sid: str, *, portal: bool = False
) -> None:
    """The one signed-in identity of this browser: signing in to the portal
    signs the dashboard out there, and the other way round."""
    name, other = (PORTAL_COOKIE, SESSION_COOKIE) if portal else (SESSION_COOKIE, PORTAL_COOKIE)
    response.set_cookie(
        name, sid, max_age=int(SESSION_TTL_S), path="/", httponly=True,
        samesite="Strict", secure=_over_tls(request),
    )  # fmt: skip
    if other in request.cookies:
        response.del_cookie(other, path="/")


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authentication, CSRF, and every error as JSON."""
    response = await _answer(request, handler)
    if request.get(BODY_BROKEN) or not request.content.is_eof():
        # A body left unread (refused before reading) or undecodable: the
        # connection closes after this answer (see HardenedRunner), and says so.
        response.force_close()
    return response


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        rules = request.app[RULES]
        if not rules.is_open(request.path):
            why = await authenticate(request)
            if why is not None:
                return error_response(request, 401, why)
            if APP in request and not rules.app_may_call(request):
                return error_response(
                    request, 403, "an application's credential cannot use this route"
                )
            csrf = request.get(CSRF)
            if csrf is not None and request.method not in SAFE_METHODS:
                offered = request.headers.get(CSRF_HEADER, "")
                ok = hmac.compare_digest(offered.encode("utf-8", "surrogateescape"), csrf.encode())
                if not ok or not _same_origin(request):
                    return error_response(request, 403, f"a signed-in page must send {CSRF_HEADER}")
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        # aiohttp's own answers (no route, wrong method, body too large) in
        # the same JSON shape as ours, keeping headers such as Allow.
        reason = exc.reason
        if exc.status == 404 and request.path.startswith(SVIX_PREFIX):
            reason = svix.missing_route(request.path)
        response = error_response(request, exc.status, reason)
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except (LockedOut, Throttled) as exc:
        response = error_response(request, 429, str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    except NotFound as exc:
        return error_response(request, 404, str(exc))
    except Forbidden as exc:
        return error_response(request, 403, str(exc))
    except Conflict as exc:
        return error_response(request, 409, str(exc))
    except Unprocessable as exc:
        return error_response(request, 422, str(exc))
    except (BadInput, TargetRefused) as exc:
        return error_response(request, 400, str(exc))
    except asyncpg.DataError as exc:
        # The database refused a value (out of range, not representable):
        # the request's fault, not an outage.
        return error_response(request, 400, f"value not accepted: {db.one_line(exc)}")
    except DispatcherError as exc:
        return error_response(request, 503, str(exc))
    except db.DATABASE_ERRORS as exc:
        log.event("admin_database_error", logging.WARNING, path=request.path,
                  error=f"{type(exc).__name__}: {db.one_line(exc)}")  # fmt: skip
        return error_response(request, 503, "database unavailable")
    except Exception as exc:
        log.event("admin_internal_error", logging.ERROR, path=request.path,
                  error=f"{type(exc).__name__}: {db.one_line(exc)}"[:300])  # fmt: skip
        return error_response(request, 500, "internal error")


# The sign-in page sends `same-origin` instead: under `no-referrer` a
# browser's form POST carries `Origin: null`, and /login, which checks the
# Origin, would refuse every real sign-in. Its URL never holds a secret.
PAGE_MAY_SET = frozenset({"Referrer-Policy"})


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: every answer, including aiohttp's own, carries them."""
    for name, value in SECURITY_HEADERS.items():
        if name in PAGE_MAY_SET:
            response.headers.setdefault(name, value)
        else:
            response.headers[name] = value


def install(
    app: web.Application,
    token: str,
    resolver: Resolver,
    rules: AccessRules,
    *,
    failures_per_min: int = 20,
) -> None:
    app[RULES] = rules
    app[SESSIONS] = Sessions(token)
    app[RESOLVER] = resolver
    app[THROTTLE] = FailureThrottle(failures_per_min)
    app.on_response_prepare.append(add_security_headers)


class _Protocol(web.RequestHandler):
    """aiohttp's connection handler, answering a request it could not even
    parse (bad header bytes, duplicate framing headers) like every other
    error: JSON, the security headers, one log line and no traceback.

    The one override of aiohttp's behaviour left, because it has no public
    hook for this answer (aio-libs/aiohttp#3287): no middleware or signal
    sees such a request, and aiohttp's own answer is text that echoes the
    bytes it could not parse (credentials included) after logging a
    traceback. So `handle_error`, which aiohttp calls for it, is replaced,
    and _Server, the protocol factory, hands out this class."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot answer the error")
        detail = db.one_line(exc) if exc is not None else (message or "")
        log.event("admin_bad_request", logging.INFO if status < 500 else logging.ERROR,
                  status=status, error=detail[:200])  # fmt: skip
        response = json_error(status, "malformed request" if status < 500 else "internal error")
        response.headers.update(SECURITY_HEADERS)
        response.force_close()
        return response


class _Server(web.Server):
    """The application's web.Server (its request handler and factory), as
    the protocol factory of connections that are _Protocol."""

    def __init__(self, made: web.Server, **kwargs: Any) -> None:
        super().__init__(made.request_handler, request_factory=made.request_factory, **kwargs)
        self._protocol_kwargs = kwargs

    def __call__(self) -> web.RequestHandler:
        return _Protocol(self, loop=asyncio.get_running_loop(), **self._protocol_kwargs)


class HardenedRunner(web.ServerRunner):
    """Serves an application that `app_runner` has set up on _Server, and
    cleans both up. Its connections close (rather than drain) a request
    body the handler did not read (`lingering_time=0`): draining one that
    does not decode would end in aiohttp's logged traceback."""

    def __init__(self, app_runner: web.AppRunner, **kwargs: Any) -> None:
        made = app_runner.server
        if made is None:
            raise RuntimeError("set the AppRunner up first")
        super().__init__(_Server(made, access_log=None, lingering_time=0), **kwargs)
        self._app_runner = app_runner

    async def cleanup(self) -> None:
        """The connections first, then the application's shutdown and cleanup."""
        try:
            await super().cleanup()
        finally:
            await self._app_runner.cleanup()


async def start_runner(app: web.Application, *, shutdown_timeout: float) -> HardenedRunner:
    """`app` started (its on_startup run, frozen) and ready for a site.

    Public aiohttp only: an AppRunner starts the application and makes its
    web.Server, whose handler and request factory _Server takes over."""
    app_runner = web.AppRunner(app, handle_signals=False)
    await app_runner.setup()
    runner = HardenedRunner(app_runner, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    return runner
