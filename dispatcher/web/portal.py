"""The customer portal's pages: sign-in by one-time code, the page, sign-out.

An entry point beside web.pages (the dashboard). A team gives its customer a link made
by `dispatcher app portal-link` (or the admin API); the link's code works
once, and is exchanged for a session cookie (HttpOnly, SameSite=Strict,
Secure over TLS) that acts for that one application. The page then calls
the same /v1/ API as an application token could, with the cookie and, for
state changes, the CSRF token it was served with. After sign-in the code is
no longer in the address bar: the answer is a 303 to /portal.
"""

from __future__ import annotations

import html

import asyncpg
from aiohttp import web

from dispatcher import db
from dispatcher.ops import tenancy
from dispatcher.web.pages import CSRF_PLACEHOLDER, _html, _static
from dispatcher.web.security import (
    PORTAL_COOKIE,
    Resolver,
    credential_failed,
    refuse_if_locked_out,
    set_session_cookie,
)

PORTAL_PATH = "/portal"


POOL: web.AppKey[asyncpg.Pool] = web.AppKey("portal_pool", asyncpg.Pool)


def install(app: web.Application, pool: asyncpg.Pool) -> Resolver:
    """Application credentials as web.security asks for them, from the database."""
    app[POOL] = pool

    async def token(offered: str) -> tuple[str, bool] | None:
        async with db.acquire(pool) as conn:
            return await tenancy.token_application(conn, offered)

    async def session(sid: str) -> str | None:
        async with db.acquire(pool) as conn:
            return await tenancy.session_application(conn, sid)

    return Resolver(token=token, session=session, csrf=tenancy.csrf_for)


def _pool(request: web.Request) -> asyncpg.Pool:
    return request.app[POOL]


def _signed_out(message: str) -> web.Response:
    page = _static("portal_signin.html").decode()
    return _html(page.replace("<!--message-->", html.escape(message)), 401)


async def login(request: web.Request) -> web.Response:
    """`?code=` once: a session cookie and 303 to the portal; else 401.

    HEAD answers 200 and spends nothing: mail scanners fetch links so, and
    the code must still work for the person who clicks it. A wrong code
    counts towards the address's lockout (429 from the guard)."""
    if request.method == "HEAD":
        return web.Response(content_type="text/html")
    code = request.query.get("code", "")
    app, sid = None, ""
    if code:
        refuse_if_locked_out(request)
        if len(code) > 200:
            credential_failed(request)
        else:
            # One transaction: a session that cannot be opened leaves the code unspent.
            async with db.acquire(_pool(request)) as conn, conn.transaction():
                found = await tenancy.redeem_code(conn, code)
                app = None if found is None else found[0]
                # Other guesses may have failed meanwhile: 429, and the
                # rollback leaves a right code unspent. No await between
                # this check and the count.
                refuse_if_locked_out(request)
                if found is None:
                    credential_failed(request)
                else:
                    sid = await tenancy.open_session(conn, *found)
    if app is None:
        return _signed_out("This sign-in link is not valid: it was used already, or it expired.")
    redirect = web.HTTPSeeOther(PORTAL_PATH)
    set_session_cookie(request, redirect, sid, portal=True)
    raise redirect


async def page(request: web.Request) -> web.Response:
    """The page, for a portal session only: it is the cookie that the page's
    calls will carry (a bearer token on this request would not be)."""
    sid = request.cookies.get(PORTAL_COOKIE, "")
    app, name = None, ""
    if sid:
        async with db.acquire(_pool(request)) as conn:
            app = await tenancy.session_application(conn, sid)
            if app is not None:
                # A customer knows its application by the name the team gave it.
                found = await tenancy.list_applications(conn, app)
                name = found[0]["name"] if found else app
    if app is None:
        return _signed_out("Sign in with the link you were given.")
    body = _static("portal.html").decode()
    body = body.replace("{{app}}", html.escape(name))
    return _html(body.replace(CSRF_PLACEHOLDER, html.escape(tenancy.csrf_for(sid))))


async def logout(request: web.Request) -> web.Response:
    """Behind the guard: the session's cookie and CSRF token."""
    async with db.acquire(_pool(request)) as conn:
        await tenancy.close_session(conn, request.cookies.get(PORTAL_COOKIE, ""))
    redirect = web.HTTPSeeOther(PORTAL_PATH)
    redirect.del_cookie(PORTAL_COOKIE, path="/")
    raise redirect
