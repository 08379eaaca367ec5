"""What a database URL must look like before anything connects with it.

asyncpg's own words for a URL that is not a PostgreSQL one are a line about
a connection that was never tried ("cannot connect to … invalid DSN"), and
urllib's for a malformed one an internal error: here either is one line
saying what is wrong with the URL, as bad input (exit 2).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from dispatcher.core.errors import BadInput

FORM = "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"


def check_database_url(url: str, name: str = "DATABASE_URL") -> None:
    """BadInput unless `url` is a postgresql:// or postgres:// URL. The
    value is quoted only when it cannot hold a password."""
    shown = f" ({url!r})" if not any(c in url for c in "@:=") else ""
    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError as exc:  # "Invalid IPv6 URL" and the like
        raise BadInput(f"{name} is not a valid URL: {exc} (expected {FORM})") from None
    if "://" not in url and "=" in url:
        raise BadInput(f"{name} is a key=value connection string, not a URL: expected {FORM}")
    if not scheme or "://" not in url:
        raise BadInput(f"{name} is not a URL{shown}: expected {FORM}")
    if scheme not in ("postgresql", "postgres"):
        raise BadInput(f"{name} is not a PostgreSQL URL (scheme {scheme}://): expected {FORM}")
