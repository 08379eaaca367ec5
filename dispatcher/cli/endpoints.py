"""`dispatcher endpoint …`: add, update, list, rotate-secret, disable/enable, health, delete.

An entry point like the rest of the CLI (dispatcher.cli.main.main builds
the parser and calls `add_endpoint_commands`; `endpoint test` and the
postback flags are postbacks.py's). The flags are read into the fields
ops.inputs checks, once for add and update alike; a secret is printed only
here, once.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from typing import Any

from dispatcher.cli import views
from dispatcher.cli.common import Handler, report, row_id, table
from dispatcher.cli.help import ENDPOINT_FLAGS, SHAPING_FLAGS
from dispatcher.cli.postbacks import add_endpoint_flags
from dispatcher.core.errors import BadInput
from dispatcher.core.models import EndpointSpec
from dispatcher.ops import reports, service
from dispatcher.ops.inputs import SPEC_FIELDS, read_text_file, spec_from_fields
from dispatcher.settings import Settings


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """The endpoint fields the flags name: all of them for add, the ones to
    change for update (a flag not given is None and names nothing)."""
    fields: dict[str, Any] = {
        name: getattr(args, name)
        for name in SPEC_FIELDS
        if name not in ("event_types", "headers") and getattr(args, name, None) is not None
    }
    if args.event_type:
        fields["event_types"] = args.event_type
    if args.header:
        fields["headers"] = args.header
    for name in ("client_cert", "client_key"):  # files on the command line, PEM text stored
        if name in fields:
            fields[name] = read_text_file(fields[name], f"--{name.replace('_', '-')}")
    return fields


def _spec(args: argparse.Namespace) -> EndpointSpec:
    return spec_from_fields(_fields(args))


async def cmd_endpoint_add(args: argparse.Namespace, settings: Settings) -> int:
    spec = _spec(args)
    box = settings.secret_box()
    return await report(
        args,
        settings,
        lambda conn: service.add_endpoint(
            conn,
            spec,
            signature=args.signature,
            box=box,
            targets=settings.target_policy(),
            app=args.app,
        ),
        lambda doc: print(f"endpoint {doc['id']} {doc['url']}\nsecret {doc['secret']}"),
    )


async def cmd_endpoint_update(args: argparse.Namespace, settings: Settings) -> int:
    # The PATCH operation: the flags given replace, the others stay.
    patch = _fields(args)
    if getattr(args, "signature", None) is not None:
        raise BadInput("use rotate-secret to change a secret (its scheme comes with a new one)")
    if getattr(args, "app", None) is not None:
        # Taken as add takes it; it may only name the endpoint's own
        # application (an endpoint stays where it is: ops.endpoints).
        patch["app"] = args.app
    if not patch:
        raise BadInput("endpoint update needs a flag to change (see `endpoint update --help`)")
    box = settings.secret_box()
    return await report(
        args,
        settings,
        lambda conn: service.update_endpoint(
            conn, args.id, patch, box=box, targets=settings.target_policy()
        ),
        lambda doc: print(f"endpoint {doc['id']} updated: {', '.join(sorted(patch))}"),
    )


# Every flag of endpoint add is one of update (SPEC): `--app` may only
# repeat the endpoint's application, and `--signature`, like `--secret`,
# is refused with a line naming rotate-secret (a secret's scheme comes
# with a new secret).
_NOT_UPDATED = frozenset({"help", "json"})


def _update_flags(add: argparse.ArgumentParser, update: argparse.ArgumentParser) -> None:
    """Every flag of `endpoint add` that sets a field, optional on `update`.
    Read from add's parser rather than listed again, so that a flag added
    to add is one update takes too."""
    for action in add._actions:
        if action.option_strings and action.dest not in _NOT_UPDATED:
            flag = copy.copy(action)
            flag.required = False
            update._add_action(flag)


async def cmd_endpoint_list(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args, settings, lambda conn: service.list_endpoints(conn, args.app), views.endpoint_list
    )


async def cmd_endpoint_rotate(args: argparse.Namespace, settings: Settings) -> int:
    box = settings.secret_box()
    return await report(
        args,
        settings,
        lambda conn: service.rotate_secret(conn, args.id, args.grace_s, box),
        lambda doc: print(f"endpoint {doc['id']} new secret {doc['secret']}"),
    )


def _toggle(enabled: bool) -> Handler:
    state = "enabled" if enabled else "disabled"

    async def handler(args: argparse.Namespace, settings: Settings) -> int:
        return await report(
            args,
            settings,
            lambda conn: service.set_enabled(conn, args.id, enabled),
            lambda doc: print(f"endpoint {doc['id']} {state}"),
        )

    return handler


async def cmd_endpoint_delete(args: argparse.Namespace, settings: Settings) -> int:
    def human(doc: dict[str, Any]) -> None:
        dead = f" ({doc['dead_lettered']} queued deliveries dead-lettered)" if args.force else ""
        print(f"endpoint {doc['id']} deleted{dead}")

    return await report(
        args, settings, lambda conn: service.delete_endpoint(conn, args.id, args.force), human
    )


HEALTH_COLUMNS = ["endpoint_id", "app", "name", "state", "consecutive_failures", "p50_ms", "p95_ms",
                  "p99_ms", "sample_count", "enabled", "url"]  # fmt: skip


async def cmd_endpoint_health(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: reports.endpoint_health(conn, settings.latency_window_s),
        table(HEALTH_COLUMNS),
    )


def _endpoint_id(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("id", type=row_id, help="the endpoint's id")


def add_endpoint_commands(
    cmd: Callable[..., argparse.ArgumentParser], group: Callable[[str, str], Any]
) -> Any:
    """The `endpoint` group and its commands; returns the group, for the
    commands other modules add to it."""
    eps = group("endpoint", "manage endpoints: add, list, delete, secrets, health")
    add = cmd("add", cmd_endpoint_add, eps, help="create an endpoint (prints its secret once)")
    add.add_argument("--url", required=True,
                     help="where deliveries go: http(s)://… ({field} macros in path/query),"
                          " or a broker: amqp://…?exchange=X&routing_key=K, nats://host/SUBJECT,"
                          " redis://host/0?stream=KEY")  # fmt: skip
    add.add_argument("--name", help="a label for people: lists and the dashboard show it")
    add.add_argument("--description", help="a longer note on what the endpoint is for")
    add.add_argument("--secret", help="whsec_… or whsk_… (default: a new one is generated)")
    add.add_argument("--event-type", action="extend", nargs="+", metavar="T",
                     help="subscribe to these types (default: every type)")  # fmt: skip
    for flag, kind, text in ENDPOINT_FLAGS:
        add.add_argument(flag, type=kind, default=None, help=text)
    add.add_argument("--header", action="append", metavar="'NAME: VALUE'",
                     help="an extra request header (repeatable)")  # fmt: skip
    for flag, choices, text in SHAPING_FLAGS:
        upper = flag == "--method"  # GET and get alike
        add.add_argument(flag, choices=choices, default=None, help=text,
                         type=str.upper if upper else str)  # fmt: skip
    add.add_argument(
        "--signature",
        choices=("v1", "v1a"),
        default=None,
        help="v1: HMAC-SHA256 (whsec_); v1a: ed25519 (whsk_; receivers verify with whpk_)",
    )
    add.add_argument("--app", metavar="ID", help="the application it belongs to (default: default)")
    add_endpoint_flags(add)
    ls = cmd("list", cmd_endpoint_list, eps, help="all endpoints with their settings")
    ls.add_argument("--app", metavar="ID", help="only this application's")
    rot = cmd("rotate-secret", cmd_endpoint_rotate, eps,
              help="new secret; the old one keeps signing for a grace period")  # fmt: skip
    _endpoint_id(rot)
    rot.add_argument(
        "--grace-s",
        type=float,
        default=None,
        help=f"seconds the old secret keeps signing (default: {service.DEFAULT_GRACE_S:g})",
    )
    for name, enabled, text in (("disable", False, "stop deliveries to it; nothing queued is lost"),
                                ("enable", True, "resume deliveries to it")):  # fmt: skip
        _endpoint_id(cmd(name, _toggle(enabled), eps, help=text))
    upd = cmd("update", cmd_endpoint_update, eps,
              help="change an endpoint in place: same id, same secret; flags not given stay",
              epilog="Each flag replaces that setting (--event-type and --header the whole "
                     "set); the defaults shown are endpoint add's.")  # fmt: skip
    _endpoint_id(upd)
    _update_flags(add, upd)
    cmd("health", cmd_endpoint_health, eps,
        help="per endpoint: breaker state, consecutive failures, p50/p95/p99")  # fmt: skip
    rm = cmd("delete", cmd_endpoint_delete, eps,
             help="delete it (refused while it has queued deliveries, unless --force)")  # fmt: skip
    _endpoint_id(rm)
    rm.add_argument(
        "--force",
        action="store_true",
        help="dead-letter its queued deliveries first ('endpoint deleted')",
    )
    return eps
