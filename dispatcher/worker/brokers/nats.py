"""NATS JetStream: a publish is done when the stream acknowledged it.

`Nats-Msg-Id` is the delivery's webhook-id: within the stream's duplicate
window the stream keeps one copy of a re-sent message (the PubAck says
`duplicate`), so a retry after a lost acknowledgement does not store the
event twice. No stream listening on the subject: `unroutable`, permanent.
The client's own reconnecting is off: a lost connection is the pool's to
reopen (brokers/__init__.py), as for the other brokers.
"""

from __future__ import annotations

import ssl

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from dispatcher.core.destinations import BrokerTarget
from dispatcher.worker.brokers.link import BrokerFailure, BrokerMessage, lost

CONNECT_TIMEOUT_S = 10
# The endpoint's timeout (the sender's deadline) cuts a publish short; the
# client's own request timeout only has to be longer than any of them.
REQUEST_TIMEOUT_S = 300.0


_AUTH_REFUSED = "authorization violation"


async def _quiet(*_: object) -> None:
    """The client's callbacks: its errors reach us as exceptions."""


class NatsLink:
    def __init__(self, client: Client) -> None:
        self._client = client
        self._js = client.jetstream()

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        if self._client.is_closed:
            raise lost()
        headers = {**msg.headers, "Nats-Msg-Id": msg.msg_id}
        try:
            await self._js.publish(target.subject, msg.body, timeout=REQUEST_TIMEOUT_S,
                                   headers=headers)  # fmt: skip
        except nats.js.errors.NoStreamResponseError:
            raise BrokerFailure("unroutable: no stream takes the subject", permanent=True) from None
        except nats.js.errors.APIError as exc:
            code = getattr(exc, "err_code", None) or getattr(exc, "code", None)
            raise BrokerFailure(f"nack: the stream refused it (code {code})",
                                permanent=False) from None  # fmt: skip
        except nats.errors.MaxPayloadError:
            raise BrokerFailure("nack: larger than the server's max_payload",
                                permanent=True) from None  # fmt: skip
        except (nats.errors.ConnectionClosedError, nats.errors.StaleConnectionError,
                nats.errors.OutboundBufferLimitError, nats.errors.ConnectionReconnectingError,
                nats.errors.ConnectionDrainingError):  # fmt: skip
            raise lost() from None

    async def close(self) -> None:
        await self._client.close()


async def connect(target: BrokerTarget, host: str, context: ssl.SSLContext | None) -> NatsLink:
    shown = f"[{host}]" if ":" in host else host
    # user:password, or a token: `:TOKEN@` (destinations.py), or `TOKEN@`
    # as NATS writes it, in an endpoint stored before that was refused.
    paired = bool(target.username) and target.password is not None
    client = Client()
    try:
        await client.connect(
            servers=[f"{'tls' if context else 'nats'}://{shown}:{target.port}"],
            user=target.username if paired else None,
            password=target.password if paired else None,
            token=None if paired else (target.password or target.username or None),
            tls=context,
            tls_hostname=target.host if context else None,
            allow_reconnect=False,
            connect_timeout=CONNECT_TIMEOUT_S,
            error_cb=_quiet,
            disconnected_cb=_quiet,
            closed_cb=_quiet,
            name="dispatcher",
        )
    except BaseException as exc:
        # A refused connect leaves the client's socket open (nats-py 2.x).
        await client.close()
        raise _failure(exc) from None
    return NatsLink(client)


def _failure(exc: BaseException) -> BaseException:
    """What a failed connect means in our words (brokers/link.py)."""
    if isinstance(exc, nats.errors.AuthorizationError) or (
        # A wrong user, password or token comes as the server's -ERR line
        # in a plain nats.errors.Error, not as AuthorizationError.
        type(exc) is nats.errors.Error and _AUTH_REFUSED in str(exc).lower()
    ):
        return BrokerFailure("auth: the server refused the credentials", permanent=True)
    if isinstance(exc, nats.errors.NoServersError):
        return ConnectionRefusedError("no NATS server answered")
    return exc
