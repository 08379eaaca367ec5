"""`dispatcher app …`: applications (tenants), their API tokens and portal links.

An entry point like the rest of the CLI (dispatcher.cli builds the parser
and calls `add_app_commands`). A token or a portal link is printed only
here, once; the database keeps its digest.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from . import tenancy
from .cli_common import report, table
from .settings import Settings

APP_COLUMNS = ["id", "name", "endpoints", "queue_depth", "created_at"]


async def cmd_app_add(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: tenancy.add_application(conn, args.id, args.name),
        lambda doc: print(f"application {doc['id']} ({doc['name']})"),
    )


async def cmd_app_list(args: argparse.Namespace, settings: Settings) -> int:
    return await report(args, settings, tenancy.list_applications, table(APP_COLUMNS))


def _expiry(doc: dict[str, Any]) -> str:
    return "never expires" if doc["expires_at"] is None else f"expires {doc['expires_at']}"


async def cmd_app_token(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: tenancy.issue_token(conn, args.id, args.ttl_s),
        lambda doc: print(f"{doc['token']}\n(shown only now; {_expiry(doc)})"),
    )


async def cmd_app_revoke_token(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: tenancy.revoke_token(conn, args.token),
        lambda doc: print(f"token of application {doc['app']} revoked"),
    )


async def _link(conn: Any, app: str, base_url: str, ttl_s: float | None) -> dict[str, Any]:
    """The SPEC's `{"url", "expires_at"}`: the code is in the URL already."""
    doc = await tenancy.portal_link(conn, app, base_url, ttl_s)
    return {"url": doc["url"], "expires_at": doc["expires_at"]}


async def cmd_app_portal_link(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: _link(conn, args.id, args.base_url, args.ttl_s),
        lambda doc: print(f"{doc['url']}\n(works once; {_expiry(doc)})"),
    )


def add_app_commands(
    cmd: Callable[..., argparse.ArgumentParser], group: Callable[[str, str], Any]
) -> None:
    apps = group("app", "applications (tenants): add, list, API tokens, portal links")
    add = cmd("add", cmd_app_add, apps, help="create an application (an id taken: exit 2)")
    add.add_argument("id", help="1-64 of a-z, 0-9, _ and -")
    add.add_argument("--name", help="a label for people (default: the id)")
    cmd("list", cmd_app_list, apps, help="applications with endpoint counts and queue depth")
    tok = cmd("token", cmd_app_token, apps, help="a new API token of the application (shown once)")
    tok.add_argument("id", help="the application")
    tok.add_argument(
        "--ttl-s", type=float, default=None, help="seconds until it expires (default: never)"
    )
    rev = cmd("revoke-token", cmd_app_revoke_token, apps, help="revoke a token (dtk_…)")
    rev.add_argument("token", help="the token itself, as it was shown")
    link = cmd("portal-link", cmd_app_portal_link, apps,
               help="a one-time sign-in link to the application's portal")  # fmt: skip
    link.add_argument("id", help="the application")
    link.add_argument(
        "--base-url", required=True, help="where customers reach this server (https://…)"
    )
    ttl = tenancy.DEFAULT_PORTAL_TTL_S
    link.add_argument(
        "--ttl-s", type=float, default=None, help=f"seconds the link works (default: {ttl:g})"
    )
