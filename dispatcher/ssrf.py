"""Which destinations the sender may connect to (the SSRF guard).

Pure: the address checks take resolved addresses; the sender's resolver
calls them after DNS and connects to the vetted addresses only, so a name
cannot resolve once to a public address and once more to a private one.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from .errors import BadInput, TargetRefused

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
        raise TargetRefused(f"{host}: unparseable address") from None
    if address_allowed(ip):
        return
    # The allow-list of a private deployment: exactly these networks, in the
    # address's own family (a mapped form does not sneak through).
    for net in allowed_networks:
        network = ipaddress.ip_network(net)
        if ip.version == network.version and ip in network:
            return
    raise TargetRefused(f"{host} resolves to a non-public address ({ip})")


def validate_url(url: str) -> str:
    """Shape check done when an endpoint is created: scheme, host, no creds."""
    if not isinstance(url, str) or not url or len(url) > 2048:
        raise BadInput("url must be a non-empty string of at most 2048 characters")
    if any(c in url for c in "\r\n\t ") or not url.isprintable():
        raise BadInput("url must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadInput(f"url is not valid: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BadInput("url scheme must be http or https")
    if not parts.hostname:
        raise BadInput("url must name a host")
    if parts.username or parts.password:
        raise BadInput("url must not carry credentials")
    if port == 0:
        raise BadInput("url port must be 1..65535")
    return url


def literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
