"""Which destinations the sender may connect to (the SSRF guard).

No I/O: the address checks take resolved addresses; the sender's resolver
calls them after DNS and connects to the vetted addresses only, so a name
cannot resolve once to a public address and once more to a private one.
URLs are read with the sender's own parser (yarl, with its IDNA rules), so
what `endpoint add` accepts is exactly what the sender can send to, and a
literal address is judged in every form the C resolver would accept.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

from yarl import URL

from dispatcher.core.errors import BadInput, TargetRefused

# The kinds of refusal. Every refusal's message holds one of these phrases,
# written with them here, so whoever stores a refusal can say which kind it
# was without the host or the address (refusal_kind).
NON_PUBLIC = "non-public address"
NOT_CANONICAL = "not a canonical IPv4 address"
UNPARSEABLE = "unparseable address"
UNRESOLVED = "did not resolve"


def refusal_kind(message: str) -> str:
    """The kind of a refusal's message (NON_PUBLIC if it names none)."""
    return next((k for k in (NOT_CANONICAL, UNPARSEABLE, UNRESOLVED) if k in message), NON_PUBLIC)


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
# Deprecated IPv4-compatible (::a.b.c.d, RFC 4291) and SIIT IPv4-translated
# (::ffff:0:a.b.c.d, RFC 2765) forms; `ipaddress` marks neither as non-global.
_V4_COMPATIBLE = ipaddress.ip_network("::/96")
_V4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or ip in _V4_COMPATIBLE or ip in _V4_TRANSLATED:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_allowed(ip: IPAddress) -> bool:
    """Public unicast only: no loopback, private, CGNAT, link-local (cloud
    metadata), multicast, reserved or unspecified addresses, in any form."""
    if ip.is_multicast or not ip.is_global:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return False
        inner = _embedded_v4(ip)
        if inner is not None:
            return address_allowed(inner)
    return True


def check_address(
    host: str, address: str, *, allow_private: bool, allowed_networks: tuple[str, ...] = ()
) -> None:
    if allow_private:
        return
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        raise TargetRefused(f"{host}: {UNPARSEABLE}") from None
    if address_allowed(ip):
        return
    # The allow-list of a private deployment: exactly these networks, in the
    # address's own family (a mapped form does not sneak through).
    for net in allowed_networks:
        network = ipaddress.ip_network(net)
        if ip.version == network.version and ip in network:
            return
    raise TargetRefused(f"{host} resolves to a {NON_PUBLIC} ({ip})")


# host[:port][/…] with no scheme: what people type for a URL.
_SCHEMELESS = re.compile(r"[\w.-]+(:\d+)?(/|$)")


def check_url_text(url: object) -> None:
    """What every endpoint URL must be, whatever its scheme."""
    if not isinstance(url, str) or not url or len(url) > 2048:
        raise BadInput("url must be a non-empty string of at most 2048 characters")
    if any(c in url for c in "\r\n\t ") or not url.isprintable():
        raise BadInput("url must not contain whitespace or control characters")


def parse_target(url: str) -> URL:
    """The URL exactly as the sender will send to it, or BadInput.

    The sender's own parser (yarl) and its IDNA rules decide: a host that
    yarl cannot encode, or whose encoded form does not decode again (aiohttp
    and the sender both read `URL.host`), is refused here rather than found
    by the worker later. Hosts made only of digits and dots, which aiohttp
    sends only in canonical dotted-quad form, must be an address.
    """
    check_url_text(url)
    try:
        target = URL(url)
        host = target.raw_host
        port = target.explicit_port
        if host:
            target.host  # noqa: B018 - the decoding aiohttp does; it must not raise
    except (ValueError, UnicodeError) as exc:
        raise BadInput(f"url is not valid: {_reason(exc)}") from None
    except IndexError:  # yarl on an empty bracketed host with userinfo ("http://[]@/")
        raise BadInput("url is not valid: its host cannot be read") from None
    if "://" not in url and _SCHEMELESS.match(url):
        # `localhost:8081/x` parses as scheme "localhost": say what was meant.
        raise BadInput(f"url needs a scheme: did you mean http://{url}?")
    if target.scheme not in ("http", "https"):
        raise BadInput("url scheme must be http or https")
    if not host:
        raise BadInput("url must name a host")
    if target.raw_user is not None or target.raw_password is not None:
        raise BadInput("url must not carry credentials")
    if port == 0:
        raise BadInput("url port must be 1..65535")
    if literal_address(host) is None and _legacy_ipv4(host) is None:
        _check_name(host)
    return target


def validate_url(url: str) -> str:
    """Shape check done when an endpoint is created or changed (see parse_target)."""
    parse_target(url)
    return url


def _reason(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


_NAME = re.compile(r"[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?")


def _check_name(host: str) -> None:
    if host.replace(".", "").isdigit():
        # aiohttp sends such a host only as a canonical dotted quad.
        raise BadInput(f"url host {host} is not a valid IPv4 address")
    if len(host) > 253 or not _NAME.fullmatch(host):
        raise BadInput("url host is not a valid host name")


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address a non-canonical IPv4 form (2130706433, 0x7f000001, 127.1,
    0177.0.0.1) stands for: the C resolver maps every one of them onto an
    address, so the guard must see that address, not a name."""
    if not host or not host[0].isascii() or not host[0].isdigit() or not host.isascii():
        return None
    if not all(c.isalnum() or c == "." for c in host):
        return None
    try:
        packed = socket.inet_aton(host)
    except OSError:
        return None
    return ipaddress.IPv4Address(packed)


def target_refusal(
    host: str, *, allow_private: bool, allowed_networks: tuple[str, ...] = ()
) -> str | None:
    """Why the sender must never send to this (raw, encoded) host, or None.

    Only literal addresses are decided here (aiohttp skips the resolver for
    them); names are checked after DNS by the sender's resolver. A
    non-canonical IPv4 form is refused as the address it stands for, and
    even where that address is allowed (aiohttp will not send to the form).
    """
    ip = literal_address(host)
    legacy = _legacy_ipv4(host) if ip is None else None
    if ip is None and legacy is None:
        return None
    try:
        check_address(
            host,
            str(ip if ip is not None else legacy),
            allow_private=allow_private,
            allowed_networks=allowed_networks,
        )
    except TargetRefused as exc:
        return f"{exc}" if legacy is None else f"{host} is {legacy}, a {NON_PUBLIC}"
    if legacy is not None:
        return f"{host} is {NOT_CANONICAL} (write it as {legacy})"
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class TargetPolicy:
    """Which literal destinations a deployment allows (its settings)."""

    allow_private: bool = False
    allowed_networks: tuple[str, ...] = ()
    # DISPATCHER_BROKERS_ALLOWED (core.destinations' allow_key form).
    brokers_allowed: frozenset[str] = frozenset()
    # Behind DISPATCHER_HTTP_PROXY the proxy resolves names: only literal
    # addresses are judged here, and the proxy must enforce the rest.
    names_via_proxy: bool = False
    # Where this server's admin API listens, (host, port) as bound: never a
    # target, whatever allows private ones (an endpoint aimed at its own
    # resend route made two messages resend each other forever, issue 32).
    own_origins: tuple[tuple[str, int], ...] = ()
    # This server's credentials (the admin token): never in a header value,
    # where a receiver, or this server itself, would be handed them.
    credentials: tuple[str, ...] = ()


_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _plain(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 form stands for (mapped, compatible, …)."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            return inner
    return ip


def _local_forms(ip: IPAddress) -> bool:
    """Loopback or unspecified, in any form: what reaches a server bound to
    a wildcard or to loopback on this host."""
    inner = _plain(ip)
    return ip.is_loopback or ip.is_unspecified or inner.is_loopback or inner.is_unspecified


def own_origin_refusal(url: str, own: tuple[tuple[str, int], ...]) -> str | None:
    """Why `url` is this server's own origin, or None. Bound to a wildcard or
    to loopback, every loopback and unspecified form of the port is (and
    `localhost`); bound to one address or name, that one. A name that
    resolves to it is judged after DNS (own_address_refusal)."""
    if not own:
        return None
    target = parse_target(url)
    host = (target.host or "").rstrip(".").lower()
    port = target.explicit_port or _DEFAULT_PORTS.get(target.scheme, 0)
    raw = target.raw_host or ""
    ip = literal_address(raw) or _legacy_ipv4(raw)
    for bound_host, bound_port in own:
        if port != bound_port:
            continue
        if _is_own(host, ip, bound_host.strip("[]").lower()):
            shown = f"[{host}]" if ":" in host else host
            return f"{shown}:{port} is this server's own address"
    return None


def _is_own(host: str, ip: IPAddress | None, bound: str) -> bool:
    bound_ip = literal_address(bound)
    local = (
        bound in _WILDCARDS
        or bound == "localhost"
        or (bound_ip is not None and _local_forms(bound_ip))
    )
    if local and (host == "localhost" or host.endswith(".localhost")):
        return True
    if ip is None:
        return host == bound
    return (local and _local_forms(ip)) or (bound_ip is not None and _plain(ip) == _plain(bound_ip))


def own_address_refusal(
    host: str, port: int, addresses: list[str], own: tuple[tuple[str, int], ...]
) -> str | None:
    """`own_origin_refusal` for the addresses a name resolves to now."""
    for address in addresses:
        ip = literal_address(address)
        if ip is None:
            continue
        for bound_host, bound_port in own:
            if port == bound_port and _is_own("", ip, bound_host.strip("[]").lower()):
                return f"{host}:{port} resolves to this server's own address"
    return None


def refusal(why: str) -> str:
    """The line a target refused at creation gets, naming what allows it."""
    return (
        f"url refused by the SSRF guard: {why} (DISPATCHER_ALLOW_PRIVATE_TARGETS=1 "
        "or DISPATCHER_ALLOWED_NETWORKS allow private targets)"
    )


def _refused(why: str) -> BadInput:
    return BadInput(refusal(why))


def check_target(url: str, policy: TargetPolicy) -> None:
    """What `endpoint add` and every update check: the URL's shape (as the
    sender reads it) and its literal address (as the sender judges it)."""
    target = parse_target(url)
    why = target_refusal(
        target.raw_host or "",
        allow_private=policy.allow_private,
        allowed_networks=policy.allowed_networks,
    )
    if why is not None:
        raise _refused(why)
    why = own_origin_refusal(url, policy.own_origins)
    if why is not None:
        raise BadInput(f"url refused: {why} (an endpoint may not call this server)")


def check_resolved(host: str, addresses: list[str], policy: TargetPolicy) -> None:
    """A name whose every address the sender would refuse is refused now,
    at `endpoint add`, rather than dead-lettering every delivery later. One
    allowed address is enough: the sender connects to the allowed ones."""
    if not addresses:
        return
    refusal: TargetRefused | None = None
    for address in addresses:
        try:
            check_address(
                host,
                address,
                allow_private=policy.allow_private,
                allowed_networks=policy.allowed_networks,
            )
        except TargetRefused as exc:
            refusal = exc
            continue
        return
    raise _refused(str(refusal))


def literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
