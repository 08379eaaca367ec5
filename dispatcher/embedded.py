"""The embedded PostgreSQL (pgserver) used when DATABASE_URL is unset.

The server is left running when the process exits, so `make run` and
`make demo` (or a second worker) share it; its data lives under
$DISPATCHER_HOME/pgdata.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .errors import OperationalError


def embedded_url(home: Path) -> str:
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
        try:
            get_server = pgserver.get_server  # type: ignore[attr-defined]
            server = get_server(home / "pgdata", cleanup_mode=None)
        except Exception as exc:
            raise OperationalError(f"embedded PostgreSQL failed to start: {exc}") from None
    return str(server.get_uri())


def with_database(url: str, name: str) -> str:
    """The same server URL, pointing at database `name`."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def resolve_database_url(database_url: str | None, home: Path) -> str:
    return database_url if database_url else embedded_url(home)
