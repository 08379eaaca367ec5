"""RabbitMQ: publisher confirms, persistent messages, `mandatory`.

A publish is done when the broker confirmed it (Basic.Ack): for a durable
queue that is after the message was written to disk. A message no queue
takes comes back (Basic.Return): `unroutable`, permanent. A Basic.Nack (the
broker could not take it): `nack`, retried. One connection per link, one
channel per exchange on it: an exchange that does not exist closes only
its own channel (`unroutable`, permanent), not the others'.
"""

from __future__ import annotations

import ssl

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange

from dispatcher.core.destinations import BrokerTarget
from dispatcher.worker.brokers.link import CONNECTION_LOST, BrokerFailure, BrokerMessage, lost

CONNECT_TIMEOUT_S = 10.0


class AmqpLink:
    def __init__(self, connection: AbstractConnection) -> None:
        self._connection = connection
        self._exchanges: dict[str, tuple[AbstractChannel, AbstractExchange]] = {}

    async def _exchange(self, name: str) -> AbstractExchange:
        held = self._exchanges.get(name)
        if held is not None and not held[0].is_closed:
            return held[1]
        channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        exchange = (channel.default_exchange if not name
                    else await channel.get_exchange(name, ensure=False))  # fmt: skip
        self._exchanges[name] = (channel, exchange)
        return exchange

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        if self._connection.is_closed:
            raise lost()
        message = aio_pika.Message(
            msg.body,
            headers=dict(msg.headers),
            content_type=msg.headers.get("content-type"),
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=msg.msg_id,
            type=msg.event_type or None,
            timestamp=msg.timestamp,
        )
        try:
            exchange = await self._exchange(target.exchange)
            await exchange.publish(message, routing_key=target.routing_key, mandatory=True)
        except aiormq.exceptions.PublishError:
            raise BrokerFailure("unroutable: no queue is bound for it", permanent=True) from None
        except aiormq.exceptions.DeliveryError:
            raise BrokerFailure("nack: the broker did not take it", permanent=False) from None
        except aiormq.exceptions.ChannelNotFoundEntity:
            self._exchanges.pop(target.exchange, None)
            raise BrokerFailure("unroutable: no such exchange", permanent=True) from None
        except aiormq.exceptions.ChannelAccessRefused:
            self._exchanges.pop(target.exchange, None)
            raise BrokerFailure("auth: not allowed to publish there", permanent=True) from None
        except (aiormq.exceptions.AMQPChannelError,
                aiormq.exceptions.ChannelInvalidStateError) as exc:  # fmt: skip
            self._exchanges.pop(target.exchange, None)
            raise BrokerFailure(f"connection reset: channel closed ({type(exc).__name__})",
                                permanent=False) from None  # fmt: skip
        except aiormq.exceptions.AMQPConnectionError as exc:
            raise BrokerFailure(_connection_word(exc), permanent=False, drop=True) from None

    async def close(self) -> None:
        await self._connection.close()


def _connection_word(exc: BaseException) -> str:
    if isinstance(exc, aiormq.exceptions.ConnectionResourceError):
        return "nack: the broker refused the connection's work (resource alarm)"
    return CONNECTION_LOST


async def connect(target: BrokerTarget, host: str, context: ssl.SSLContext | None) -> AmqpLink:
    try:
        connection = await aio_pika.connect(
            host=host,
            port=target.port,
            login=target.username or "guest",
            password=target.password or "guest",
            virtualhost=target.vhost,
            ssl=context is not None,
            ssl_context=context,
            timeout=CONNECT_TIMEOUT_S,
            client_properties={"connection_name": "dispatcher"},
        )
    except (aiormq.exceptions.ProbableAuthenticationError,
            aiormq.exceptions.AuthenticationError):  # fmt: skip
        raise BrokerFailure("auth: the broker refused the credentials", permanent=True) from None
    except aiormq.exceptions.ConnectionNotAllowed:
        raise BrokerFailure("auth: no access to the vhost", permanent=True) from None
    except aiormq.exceptions.AMQPConnectionError as exc:
        if isinstance(exc.__cause__, OSError):
            raise exc.__cause__ from None
        raise BrokerFailure("bad response: the broker's handshake", permanent=False) from None
    return AmqpLink(connection)
