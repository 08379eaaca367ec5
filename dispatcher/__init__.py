"""dispatcher: durable webhook and postback delivery on PostgreSQL.

The public surface is small: enqueue on a caller's connection (the
transactional outbox), the exception tree, and the receiver-side verifier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dispatcher.core.errors import (
    BadInput,
    DispatcherError,
    OperationalError,
    TargetRefused,
    UnknownEndpoint,
    Unprocessable,
)
from dispatcher.version import __version__

if TYPE_CHECKING:
    from dispatcher.api import enqueue

_RECEIVER = ("VerificationError", "claim_once", "verify", "verify_request", "webhook_middleware")


def __getattr__(name: str) -> object:
    # The receiver kit pulls in aiohttp.web and cryptography, enqueue the
    # whole service layer: each is imported when asked for, so a worker
    # starts without the kit and `import dispatcher` (the CLI's first step,
    # where a Ctrl-C would otherwise be a traceback) stays light.
    if name == "enqueue":
        from dispatcher.api import enqueue

        return enqueue
    if name in _RECEIVER:
        from dispatcher import receiver

        return getattr(receiver, name)
    raise AttributeError(f"module 'dispatcher' has no attribute {name!r}")


__all__ = [
    "BadInput",
    "DispatcherError",
    "OperationalError",
    "TargetRefused",
    "UnknownEndpoint",
    "Unprocessable",
    "VerificationError",
    "__version__",
    "claim_once",
    "enqueue",
    "verify",
    "verify_request",
    "webhook_middleware",
]
