"""`dispatcher wake [notify|probe]`: the database's wake-up switch (schema 016).

An entry point like the rest of the CLI (dispatcher.cli.main.main builds the
parser and calls `add_wake_command`). Without a mode it prints the switch;
with one it sets it, and running workers follow within milliseconds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dispatcher.cli.common import report
from dispatcher.ops import wake
from dispatcher.settings import Settings

HELP = (
    "how idle workers learn of new rows: probe (default: each idle worker queries "
    "100 times a second; producers commit in parallel) or notify (enqueues NOTIFY; no "
    "idle queries; up to a few thousand producer commits a second)"
)


def _line(doc: dict[str, Any]) -> None:
    since = f" (since {doc['updated_at']})" if doc["updated_at"] else ""
    print(f"wake {doc['wake']}{since}")


async def cmd_wake(args: argparse.Namespace, settings: Settings) -> int:
    if args.mode is None:
        return await report(args, settings, wake.wake_mode, _line)
    return await report(args, settings, lambda conn: wake.set_wake_mode(conn, args.mode), _line)


def add_wake_command(cmd: Callable[..., argparse.ArgumentParser]) -> None:
    sp = cmd("wake", cmd_wake, help=HELP,
             epilog="Which to pick: docs/operations/scaling.md (notify or probe).")  # fmt: skip
    sp.add_argument("mode", nargs="?", choices=wake.MODES,
                    help="set the switch to this (default: print it)")  # fmt: skip
