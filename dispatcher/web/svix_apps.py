"""Svix's applications (`/api/v1/app…`), the portal sign-in link
(`/api/v1/auth/app-portal-access/{app_id}`) and `/api/v1/health`: an
application's Svix shape (`app_out`) and the handlers, rows of the Svix
table (web.svix.ROUTES). An application's id is ours: its `uid`, when it
fits our id syntax, or `app_…`; a path takes either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dispatcher.core.errors import Forbidden
from dispatcher.ops import svix as ops
from dispatcher.ops import tenancy
from dispatcher.web import security
from dispatcher.web.keys import acquire
from dispatcher.web.params import own
from dispatcher.web.routes import Handler
from dispatcher.web.security import json_response as _json
from dispatcher.web.svix_common import (
    application,
    application_or_new,
    caller,
    no_content,
    page_after,
    page_limit,
    page_of,
    read_body,
)


def app_out(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "uid": row.get("uid"),
        "name": row["name"],
        "metadata": row.get("metadata") or {},
        "throttleRate": None,
        "createdAt": row["created_at"],
        "updatedAt": row.get("updated_at") or row["created_at"],
    }


async def apps_list(request: web.Request) -> web.Response:
    limit = page_limit(request)
    after = page_after(request)
    async with acquire(request) as conn:
        rows = await ops.list_applications(conn, after[0] if after else None, limit + 1, None)
    data = [app_out(r) for r in rows]
    return _json(page_of(data, limit, (data[:limit][-1]["id"],) if data else None))


async def apps_create(request: web.Request) -> web.Response:
    body = await read_body(request)
    get_if_exists = request.query.get("get_if_exists", "").lower() == "true"
    async with acquire(request) as conn:
        row, created = await ops.create_application(conn, body, get_if_exists=get_if_exists)
    return _json(app_out(row), 201 if created else 200)


async def app_get(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(app_out(await application(request, conn)))


def app_update(partial: bool) -> Handler:
    """PUT (`partial` False: creates one the path names that does not exist) or PATCH."""

    async def handler(request: web.Request) -> web.Response:
        body = await read_body(request)
        async with acquire(request) as conn:
            if not partial and not await ops.application_exists(conn, request.match_info["app_id"]):
                # PUT creates (Svix's upsert): the path names it.
                row, _ = await ops.create_application(
                    conn, {**body, "uid": request.match_info["app_id"]}, get_if_exists=True
                )
                return _json(app_out(row), 201)
            app = await application(request, conn)
            # The scope goes down: an application's credential may change
            # its metadata only, never its uid or name (issue 32).
            row = await ops.update_application(
                conn, app["id"], body, caller(request), partial=partial
            )
        return _json(app_out(row))

    return handler


async def app_delete(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        await ops.delete_application(conn, request.match_info["app_id"], caller(request))
    return no_content()


# ---------------------------------------------------------------- the portal, health


async def portal_access(request: web.Request) -> web.Response:
    """A one-time sign-in link to this application's portal (`url`); its
    code is also the `token`. `expiry` (seconds, 1 to 604800, default 3600;
    outside: 422 naming the range, as Svix answers) bounds it. Minted with
    an application token, the code also expires no later than that token
    and dies with it; a portal session may not mint one (403): access
    opened by a link must end when the link's session does."""
    body = await read_body(request)
    if own(request) and security.APP_TOKEN not in request:
        raise Forbidden("a portal session cannot mint portal access")
    base = f"{request.scheme}://{request.host}"
    async with acquire(request) as conn:
        app = await application_or_new(request, conn)
        doc = await tenancy.portal_link(
            conn, app["id"], base, body.get("expiry"),
            minted_by=request.get(security.APP_TOKEN), ttl_name="expiry",
        )  # fmt: skip
    return _json({"url": doc["url"], "token": doc["code"]})


async def health(_: web.Request) -> web.Response:
    return no_content()
