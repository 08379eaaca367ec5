"""`dispatcher app …`: applications (tenants), their quotas, API tokens and portal links.

An entry point like the rest of the CLI (dispatcher.cli.main.main builds the parser
and calls `add_app_commands`). A token or a portal link is printed only
here, once; the database keeps its digest.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dispatcher.cli.common import report, table
from dispatcher.ops import tenancy
from dispatcher.settings import Settings

APP_COLUMNS = ["id", "name", "endpoints", "queue_depth", "max_endpoints", "max_events_per_s",
               "created_at"]  # fmt: skip


async def cmd_app_add(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: tenancy.add_application(conn, args.id, args.name),
        lambda doc: print(f"application {doc['id']} ({doc['name']})"),
    )


def _rate(value: float | None) -> str | None:
    """A rate as typed (0.001, not the table's usual one decimal)."""
    return None if value is None else f"{value:g}"


async def cmd_app_list(args: argparse.Namespace, settings: Settings) -> int:
    show = table(APP_COLUMNS)
    return await report(
        args,
        settings,
        tenancy.list_applications,
        lambda rows: show([{**r, "max_events_per_s": _rate(r["max_events_per_s"])} for r in rows]),
    )


def _quota_flag(value: str, name: str, kind: type[int] | type[float]) -> int | float | None:
    """A quota flag's text: `none` clears it; the range is checked once, in tenancy."""
    if value.strip().lower() == "none":
        return None
    try:
        return kind(value)
    except ValueError:
        return tenancy.check_quota(name, value)  # not a number: raises, naming the range


def _update_patch(args: argparse.Namespace) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    if args.name is not None:
        patch["name"] = args.name
    if args.max_endpoints is not None:
        patch["max_endpoints"] = _quota_flag(args.max_endpoints, "max_endpoints", int)
    if args.max_events_per_s is not None:
        patch["max_events_per_s"] = _quota_flag(args.max_events_per_s, "max_events_per_s", float)
    return patch


def _quotas_line(doc: dict[str, Any]) -> str:
    quotas = ", ".join(
        f"{k} {_rate(doc[k]) or 'none'}" for k in ("max_endpoints", "max_events_per_s")
    )
    return f"application {doc['id']} ({doc['name']}): {quotas}"


async def cmd_app_update(args: argparse.Namespace, settings: Settings) -> int:
    patch = _update_patch(args)  # bad values exit 2 before any connection
    return await report(
        args,
        settings,
        lambda conn: tenancy.update_application(conn, args.id, patch),
        lambda doc: print(_quotas_line(doc)),
    )


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


async def cmd_app_revoke_portal(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: tenancy.revoke_portal(conn, args.id),
        lambda doc: print(
            f"application {doc['app']}: {doc['codes']} portal codes and"
            f" {doc['sessions']} portal sessions ended"
        ),
    )


def add_app_commands(
    cmd: Callable[..., argparse.ArgumentParser], group: Callable[[str, str], Any]
) -> Any:
    """Returns the `app` group (cli/erasure.py adds `expunge`)."""
    apps = group(
        "app",
        "applications (tenants): add, list, quotas, API tokens, portal links and revoking them",
    )
    add = cmd("add", cmd_app_add, apps, help="create an application (an id taken: exit 2)")
    add.add_argument("id", help="1-64 of a-z, 0-9, _ and -")
    add.add_argument("--name", help="a label for people (default: the id)")
    cmd("list", cmd_app_list, apps, help="applications with endpoint counts, queue depth, quotas")
    upd = cmd("update", cmd_app_update, apps,
              help="rename an application or set its quotas (held on the HTTP API)")  # fmt: skip
    upd.add_argument("id", help="the application")
    upd.add_argument("--name", help="a new label for people")
    upd.add_argument(
        "--max-endpoints", metavar="N",
        help="live endpoints it may create over the API, 0-1000000 (none: no quota)",
    )  # fmt: skip
    upd.add_argument(
        "--max-events-per-s", metavar="R",
        help="events per second it may send over the API, 0.001-1000000, bursts up to "
             "max(1, R) (none: no quota)",
    )  # fmt: skip
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
    ttl, most = tenancy.DEFAULT_PORTAL_TTL_S, tenancy.MAX_PORTAL_TTL_S
    link.add_argument(
        "--ttl-s", type=float, default=None,
        help=f"seconds the link works, 1-{most:g} (default: {ttl:g})",
    )  # fmt: skip
    end = cmd("revoke-portal", cmd_app_revoke_portal, apps,
              help="end every portal code and session of the application now")  # fmt: skip
    end.add_argument("id", help="the application")
    return apps
