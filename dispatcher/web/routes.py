"""Routes as data: what one row of the admin server's route table says.

The table itself is `admin.ROUTES`, the one list of the server's routes.
Everything else is made from it: the aiohttp routes (`add_routes`), who
the guard lets through (`security.AccessRules.of`) and the OpenAPI paths
(`openapi.document`). Adding a route is adding a row; the tenancy matrix
test fails until its rows cover it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Access(enum.Enum):
    """Who the guard lets call a route."""

    # No credential is asked. A page that needs one (the dashboard, the
    # portal) asks for it itself, so that it can answer with a sign-in page.
    OPEN = "open"
    # The admin token, or the dashboard's session; an application's
    # credential answers 403.
    ADMIN = "admin"
    # Also an application's credential (a dtk_ token or a portal session),
    # acting inside its own application only.
    APP = "app"


_VARIABLE = re.compile(r"\{(\w+):[^{}]+\}")


@dataclass(frozen=True, slots=True, eq=False)
class Route:
    """One route: `path` as aiohttp reads it (`{id:[0-9]+}` restricts a
    variable), `operation` its OpenAPI operation object, None for a page
    the document leaves out (sign-in, sign-out, static files, the portal)."""

    method: str
    path: str
    access: Access
    handler: Handler
    operation: Mapping[str, Any] | None

    @property
    def canonical(self) -> str:
        """The path without variables' patterns, as aiohttp's
        `resource.canonical` and OpenAPI write it: `/v1/endpoints/{id}`."""
        return _VARIABLE.sub(r"{\1}", self.path)

    @property
    def key(self) -> tuple[str, str]:
        return self.method, self.canonical


def add_routes(router: web.UrlDispatcher, table: Iterable[Route]) -> None:
    """The table's routes, in its order; a GET also answers HEAD."""
    for row in table:
        if row.method == "GET":
            route = router.add_get(row.path, row.handler)
        else:
            route = router.add_route(row.method, row.path, row.handler)
        # The guard looks routes up by aiohttp's canonical path: it must be ours.
        if route.resource is None or route.resource.canonical != row.canonical:
            raise ValueError(f"{row.method} {row.path}: canonical path is not {row.canonical}")
