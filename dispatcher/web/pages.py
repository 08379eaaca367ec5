"""The dashboard's pages: sign-in, sign-out, the page itself and its static files.

An entry point beside admin.py. The dashboard signs in once (the admin token
typed into /login, exchanged for a session cookie) and then calls /v1/ with
the cookie. A token in a URL is accepted nowhere: it would stay in browser
history, proxy logs and screenshots. No token is ever kept in the page or in
browser storage. Every page runs under the strict CSP set by web.security:
no inline script or style.
"""

from __future__ import annotations

import html
import importlib.resources
from typing import Final, NoReturn

from aiohttp import web

from dispatcher.web.security import (
    APP,
    CSRF,
    SESSION_COOKIE,
    SESSIONS,
    authenticate,
    credential_failed,
    json_error,
    refuse_if_locked_out,
    set_session_cookie,
)

STATIC_TYPES: Final = {
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "api.js": "text/javascript",
    "charts.js": "text/javascript",
    "overview.js": "text/javascript",
    "endpoint.js": "text/javascript",
    "events.js": "text/javascript",
    "deadletters.js": "text/javascript",
    "deliveries.js": "text/javascript",
    "delivery.js": "text/javascript",
    "editor.js": "text/javascript",
    "apps.js": "text/javascript",
    "portal.js": "text/javascript",
    "portal.css": "text/css",
}
CSRF_PLACEHOLDER = "{{csrf}}"
ERROR_PLACEHOLDER = "<!--error-->"


def _static(name: str) -> bytes:
    return importlib.resources.files("dispatcher.web").joinpath("static", name).read_bytes()


def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html")


def _login_page(error: str | None = None, status: int = 200) -> web.Response:
    page = _static("login.html").decode()
    if error:
        page = page.replace(ERROR_PLACEHOLDER, f'<p class="error">{html.escape(error)}</p>')
    response = _html(page, status)
    # Its form's POST must carry this server's Origin (see security.PAGE_MAY_SET).
    response.headers["Referrer-Policy"] = "same-origin"
    return response


def _signed_in(request: web.Request) -> NoReturn:
    """303 to the dashboard, with the session cookie."""
    sid, _ = request.app[SESSIONS].open()
    redirect = web.HTTPSeeOther("/")
    set_session_cookie(request, redirect, sid)
    raise redirect


def _wants_html(request: web.Request) -> bool:
    return "text/html" in request.headers.get("Accept", "")


async def dashboard(request: web.Request) -> web.Response:
    """The page, for a signed-in session (or a bearer token); or, with
    `?token=`, the one sign-in the SPEC allows a token in the address:
    exchanged at once for the session cookie and a 303 to the page
    itself, so the token leaves the address bar and history. No other
    route takes a token from the address."""
    if "token" in request.query:
        refuse_if_locked_out(request)  # 429 from the guard, as /login
        return _sign_in(request, request.query["token"])
    why = await authenticate(request)
    if why is not None:
        return _login_page(None, 401) if _wants_html(request) else json_error(401, why)
    if APP in request:
        return json_error(403, "an application's credential cannot use the dashboard")
    page = _static("dashboard.html").decode()
    csrf = request.get(CSRF, "")
    return _html(page.replace(CSRF_PLACEHOLDER, html.escape(csrf)))


async def login_form(_: web.Request) -> web.Response:
    return _login_page()


async def login(request: web.Request) -> web.Response:
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        return json_error(403, "sign in from this server's own page")
    refuse_if_locked_out(request)  # 429 from the guard
    try:
        form = await request.post()
    except ValueError:
        return _login_page("The form could not be read.", 400)
    refuse_if_locked_out(request)  # again: other guesses may have failed meanwhile
    return _sign_in(request, form.get("token"))


def _sign_in(request: web.Request, token: object) -> web.Response:
    """The admin token for a session (a 303 with its cookie), or the
    sign-in page again, the failure counted toward the lockout."""
    if isinstance(token, str) and request.app[SESSIONS].token_ok(token):
        _signed_in(request)
    credential_failed(request)
    return _login_page("That token is not the admin token.", 401)


async def logout(request: web.Request) -> web.Response:
    """Needs the session's CSRF token like every other state change (guard)."""
    request.app[SESSIONS].close(request.cookies.get(SESSION_COOKIE, ""))
    redirect = web.HTTPSeeOther("/login")
    redirect.del_cookie(SESSION_COOKIE, path="/")
    raise redirect


async def static_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    content_type = STATIC_TYPES.get(name)
    if content_type is None:
        return json_error(404, "not found")
    return web.Response(body=_static(name), content_type=content_type)
