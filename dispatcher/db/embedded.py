"""The embedded PostgreSQL (pgserver) used when DATABASE_URL is unset.

The server is left running when the process exits, so `make run` and
`make demo` (or a second worker) share it; its data lives under
$DISPATCHER_HOME/pgdata. `dispatcher db status|url|stop` look at it and stop
it. A URL's password never leaves this module unredacted in a report.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dispatcher.core.errors import OperationalError


def data_dir(home: Path) -> Path:
    return home.resolve() / "pgdata"


def _pgserver(home: Path) -> ModuleType:
    home = home.resolve()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OperationalError(f"cannot create DISPATCHER_HOME {home}: {exc}") from None
    # pgserver keeps its lock file in the XDG runtime folder; give it one of
    # ours rather than a warning about a missing variable.
    runtime = home / "run"
    runtime.mkdir(exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import pgserver
        except ImportError:
            raise OperationalError(
                "DATABASE_URL is unset and the embedded PostgreSQL (pgserver) is not installed"
            ) from None
    return pgserver


def _running(home: Path) -> Any | None:
    """pgserver's view of the server's postmaster.pid when it runs, else None."""
    pgdata = data_dir(home)
    if not (pgdata / "postmaster.pid").exists():
        return None
    _pgserver(home)
    from pgserver.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, KeyError):
        return None
    return info if info is not None and info.is_running() else None


def running_url(home: Path) -> str | None:
    """The embedded server's URL if it is running (starting nothing)."""
    info = _running(home)
    return None if info is None else str(info.get_uri())


def announce_start(pgdata: Path) -> None:
    sys.stderr.write(
        f"dispatcher: started the embedded PostgreSQL (data in {pgdata}); it keeps running"
        " until `dispatcher db stop`\n"
    )


def embedded_url(home: Path, on_start: Callable[[Path], None] | None = None) -> str:
    """Starts the embedded server unless it runs; `on_start(data_dir)` only
    when this call started it."""
    pgserver = _pgserver(home)
    was_running = _running(home) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            get_server = pgserver.get_server  # type: ignore[attr-defined]
            server = get_server(data_dir(home), cleanup_mode=None)
        except Exception as exc:
            raise OperationalError(f"embedded PostgreSQL failed to start: {exc}") from None
    if not was_running and on_start is not None:
        on_start(data_dir(home))
    return str(server.get_uri())


def stop(home: Path) -> bool:
    """Stops the embedded server; False when it was not running."""
    if _running(home) is None:
        return False
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

    # As root, pgserver runs PostgreSQL as its own user; pg_ctl must too.
    user = "pgserver" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir(home), user=user, timeout=60)
    except Exception as exc:
        raise OperationalError(f"cannot stop the embedded PostgreSQL: {exc}") from None
    return True


def redact(url: str) -> str:
    """The URL with its password (if any) replaced by ***."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostport}"))


def with_database(url: str, name: str) -> str:
    """The same server URL, pointing at database `name`."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def resolve_database_url(database_url: str | None, home: Path) -> str:
    """DATABASE_URL, or the embedded server's (started, and said so, if need be)."""
    return database_url if database_url else embedded_url(home, announce_start)
