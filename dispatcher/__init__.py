"""dispatcher: durable webhook and postback delivery on PostgreSQL.

The public surface is small: enqueue on a caller's connection (the
transactional outbox), the exception tree, and the receiver-side verifier.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .api import enqueue
from .errors import BadInput, DispatcherError, OperationalError, TargetRefused, UnknownEndpoint
from .receiver import VerificationError, claim_once, verify, verify_request, webhook_middleware

__all__ = [
    "BadInput",
    "DispatcherError",
    "OperationalError",
    "TargetRefused",
    "UnknownEndpoint",
    "VerificationError",
    "__version__",
    "claim_once",
    "enqueue",
    "verify",
    "verify_request",
    "webhook_middleware",
]
