"""`dispatcher ops-webhook …`: operational webhooks (SPEC "Operational
webhooks"): add, list, delete.

An entry point like the rest of the CLI (dispatcher.cli.main.main builds
the parser and calls `add_ops_webhook_commands`). Without `--app`, the
operator's, told about every application's endpoints; with it, that
application's. The secret is printed by `add` only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dispatcher.cli.common import report, row_id, table
from dispatcher.core import opsevents
from dispatcher.ops import opswebhooks
from dispatcher.settings import Settings

COLUMNS = ["id", "app", "url", "event_types", "disabled", "created_at"]
ADDED = ("id", "url", "secret", "event_types", "app")  # what `add --json` prints


async def _add(conn: Any, args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    doc = await opswebhooks.add(
        conn, args.url, event_types=args.event_type, app=args.app, secret=args.secret,
        description=args.description, box=settings.secret_box(),
        targets=settings.target_policy(),
    )  # fmt: skip
    return {k: doc[k] for k in ADDED}


def _whose(app: str | None) -> str:
    return "the operator's" if app is None else f"application {app}'s"


async def cmd_ops_webhook_add(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: _add(conn, args, settings),
        lambda doc: print(
            f"ops webhook {doc['id']} ({_whose(doc['app'])}) → {doc['url']}\n"
            f"secret: {doc['secret']} (shown only now)"
        ),
    )


def _row(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        **doc,
        "app": doc["app"] or "(operator)",
        "event_types": ",".join(doc["event_types"]) or "*",
    }


async def cmd_ops_webhook_list(args: argparse.Namespace, settings: Settings) -> int:
    show = table(COLUMNS)
    return await report(
        args,
        settings,
        lambda conn: opswebhooks.list_webhooks(conn, args.app),
        lambda rows: show([_row(r) for r in rows]),
    )


async def cmd_ops_webhook_delete(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: opswebhooks.delete(conn, args.id),
        lambda doc: print(f"ops webhook {doc['id']} deleted"),
    )


def add_ops_webhook_commands(
    cmd: Callable[..., argparse.ArgumentParser], group: Callable[[str, str], Any]
) -> None:
    ops = group("ops-webhook", "operational webhooks: be told what happens to endpoints")
    add = cmd("add", cmd_ops_webhook_add, ops,
              help="create an ops webhook (prints its secret once)")  # fmt: skip
    add.add_argument("--url", required=True, help="where the operational events go")
    add.add_argument(
        "--event-type", action="extend", nargs="+", metavar="T",
        help="only these types (default: every type): " + ", ".join(opsevents.EVENT_TYPES),
    )  # fmt: skip
    add.add_argument(
        "--app", metavar="ID",
        help="this application's, told about its own endpoints only "
             "(default: the operator's, told about every application's)",
    )  # fmt: skip
    add.add_argument("--secret", help="whsec_… (default: a new one is generated)")
    add.add_argument("--description", help="a note for people")
    ls = cmd("list", cmd_ops_webhook_list, ops,
             help="ops webhooks: every one, or one application's")  # fmt: skip
    ls.add_argument("--app", metavar="ID", help="only this application's")
    rm = cmd("delete", cmd_ops_webhook_delete, ops, help="delete an ops webhook")
    rm.add_argument("id", type=row_id, help="the ops webhook's id")
