"""What a failed attempt's error is stored as (SPEC "Limits"): a fixed
class and at most a short detail of ours, from the exception's type and
errno, never its text. The sender's (sender.py) vocabulary, kept apart so
the adapter stays about sending.
"""

from __future__ import annotations

import errno
import socket
import ssl

import aiohttp

from dispatcher.core.ssrf import NON_PUBLIC, UNRESOLVED, refusal_kind

# What an attempt's error says: a fixed class and at most a short detail of
# ours (SPEC "Limits"). Never an exception's own text: aiohttp's messages
# carry the request URL (macro values filled in) and bytes the receiver
# sent, and last_error is shown to operators, customers and pg_dump.
_ERRNO_CLASSES = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.EPIPE: "connection reset",
    errno.ECONNABORTED: "connection reset",
    errno.ENETUNREACH: "connection error: network unreachable",
    errno.EHOSTUNREACH: "connection error: host unreachable",
    errno.ETIMEDOUT: "timeout",
}


def attempt_error(exc: BaseException) -> str:
    """The class of a failed attempt's error, from the exception's type
    (and errno), never from its message."""
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return f"proxy: HTTP {exc.status}"
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return "proxy: connection failed"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "tls: certificate not trusted"
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return "tls: handshake failed"
    if isinstance(exc, aiohttp.ClientConnectorDNSError | socket.gaierror):
        return "dns: name did not resolve"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "connection reset: closed before the response"
    if isinstance(exc, aiohttp.ClientConnectionResetError | ConnectionResetError):
        return "connection reset"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "bad response: body"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "bad response"
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.InvalidUrlClientError):
        return "url invalid"
    oserror = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(oserror, OSError) and oserror.errno in _ERRNO_CLASSES:
        return _ERRNO_CLASSES[oserror.errno]
    if isinstance(exc, aiohttp.ClientConnectionError | OSError):
        return "connection error"
    return f"request failed ({type(exc).__name__})"


# How each kind of refusal is stored: the kind, and for a private address
# the setting that allows it; never the host or the address.
_REFUSED = {
    NON_PUBLIC: f"{NON_PUBLIC} (DISPATCHER_ALLOW_PRIVATE_TARGETS)",
    UNRESOLVED: "name did not resolve",
}


def refused_target(reason: str) -> str:
    """The SSRF guard's refusal, as stored: which kind, not which host."""
    kind = refusal_kind(reason)
    return f"refused target: {_REFUSED.get(kind, kind)}"
