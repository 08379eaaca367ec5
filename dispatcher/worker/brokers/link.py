"""What a broker module and the sender share: the message, the failure, the
link a module's `connect` opens, and the word for a link the broker closed.
A module of its own so that each broker module (amqp.py, nats.py,
redisstream.py) and the package that loads them import it, not each other.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from dispatcher.core.destinations import BrokerTarget

# The shared vocabulary's word (SPEC "last_error") for a link the broker
# closed under us.
CONNECTION_LOST = "connection reset: the broker closed the connection"


@dataclass(frozen=True, slots=True)
class BrokerMessage:
    """One attempt as a broker message: the body exactly as an HTTP
    receiver gets it, and the signed headers (SPEC "Destinations")."""

    body: bytes
    headers: dict[str, str]
    msg_id: str  # webhook-id
    event_type: str
    timestamp: int


class BrokerFailure(Exception):
    """A publish the broker refused or did not confirm: `word` is what is
    stored (last_error), `permanent` whether retrying can help, `drop`
    whether the link is unusable after it."""

    def __init__(self, word: str, *, permanent: bool, drop: bool = False) -> None:
        super().__init__(word)
        self.word = word
        self.permanent = permanent
        self.drop = drop


def lost() -> BrokerFailure:
    """A link the broker closed under us: retried, and the link reopened."""
    return BrokerFailure(CONNECTION_LOST, permanent=False, drop=True)


class Link(Protocol):
    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        """Returns once the broker holds the message durably; raises
        BrokerFailure, or OSError / the client's connection errors."""

    async def close(self) -> None: ...


Connect = Callable[[BrokerTarget, str, "ssl.SSLContext | None"], Awaitable[Link]]
