"""Where an ``http:`` step may go: the URL rules and the SSRF guard of the HTTP adapter.

A workflow's URL often comes from its input, so the adapter must not become a
way into the network it runs in. :class:`HttpGuard` refuses:

- any scheme but ``http`` and ``https``, and URLs without a host;
- loopback, private, link-local, shared (CGNAT, 100.64/10), multicast,
  unspecified, broadcast, reserved and documentation addresses, and the cloud
  metadata addresses (169.254.169.254, fd00:ec2::254);
- IPv6 forms that carry an IPv4 address: IPv4-mapped (``::ffff:a.b.c.d``),
  IPv4-translated, NAT64 (``64:ff9b::/96``, which Python's :mod:`ipaddress`
  calls global) and 6to4 (``2002::/16``) are judged by the IPv4 address they
  carry; IPv4-compatible (``::a.b.c.d``, deprecated) and Teredo always;
- IP literals in every notation the C resolver accepts (``2130706433``,
  ``0177.0.0.1``, ``0x7f.1``, ``127.1``), bracketed IPv6 and zone ids
  (``[fe80::1%25eth0]``);
- names that mean this machine (``localhost``, ``*.localhost``) or the cloud
  metadata service.

A name is judged by every address it resolves to (the adapter resolves it and
connects only to the addresses checked here). ``ORBIT_HTTP_ALLOW_HOSTS``
(:class:`AllowList`) lets trusted names and networks through: tests, or a
service on the private network that workflows are meant to call.

Pure: no I/O, no resolver. URLs are parsed with :mod:`yarl`, as aiohttp
parses them, so the host checked is the host connected to.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import JsonValue
from yarl import URL

from orbit_model.outcome_codes import OutcomeCode
from orbit_sdk.tasks import TaskError
from orbit_services.runtime.addresses import (
    AllowList,
    IPAddress,
    IPNetwork,
    host_name,
    parse_ip_literal,
)

HTTP_DESTINATION_FORBIDDEN = OutcomeCode.HTTP_DESTINATION_FORBIDDEN
HTTP_INVALID_URL = OutcomeCode.HTTP_INVALID_URL

SCHEMES = ("http", "https")


class HttpStepError(TaskError):
    """A failed ``http:`` step: a code for retry policies, and whether trying again can help.

    A :class:`~orbit_sdk.tasks.TaskError` of the adapter's task: raised from
    it, it fails the attempt with its code and retryable flag.
    """

    def __init__(
        self, code: str, message: str, *, retryable: bool, details: JsonValue = None
    ) -> None:
        super().__init__(code, message, retryable=retryable, details=details)


class DestinationForbidden(HttpStepError):
    """The URL's host, or an address it resolves to, may not be reached (never retryable)."""

    def __init__(self, host: str, reason: str, *, address: str | None = None) -> None:
        where = host if address is None or address == host else f"{host} ({address})"
        details: dict[str, JsonValue] = {"host": host, "reason": reason}
        if address is not None:
            details["address"] = address
        super().__init__(
            HTTP_DESTINATION_FORBIDDEN,
            f"refusing to connect to {where}: {reason}"
            " (ORBIT_HTTP_ALLOW_HOSTS can allow trusted hosts and networks)",
            retryable=False,
            details=details,
        )
        self.host = host
        self.reason = reason
        self.address = address


def _net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text)


_METADATA = "a cloud metadata address"

# (network, why it is refused), first match wins.
_IPV4_RULES: tuple[tuple[IPNetwork, str], ...] = tuple(
    (_net(network), reason)
    for network, reason in (
        ("169.254.169.254/32", _METADATA),
        ("0.0.0.0/8", "an unspecified ('this network') address"),
        ("127.0.0.0/8", "a loopback address"),
        ("10.0.0.0/8", "a private address"),
        ("172.16.0.0/12", "a private address"),
        ("192.168.0.0/16", "a private address"),
        ("100.64.0.0/10", "a shared (CGNAT) address"),
        ("169.254.0.0/16", "a link-local address"),
        ("192.0.0.0/24", "reserved for IETF protocol assignments"),
        ("192.0.2.0/24", "a documentation address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("192.88.99.0/24", "a 6to4 relay anycast address"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("224.0.0.0/4", "a multicast address"),
        ("255.255.255.255/32", "the broadcast address"),
        ("240.0.0.0/4", "a reserved address"),
    )
)

_IPV6_RULES: tuple[tuple[IPNetwork, str], ...] = tuple(
    (_net(network), reason)
    for network, reason in (
        ("fd00:ec2::254/128", _METADATA),
        ("::/128", "the unspecified address"),
        ("::1/128", "the loopback address"),
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        ("2001::/32", "a Teredo tunnel address"),
        ("fc00::/7", "a unique local (private) address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),
        ("ff00::/8", "a multicast address"),
        ("100::/64", "a discard-only address"),
        ("2001:db8::/32", "a documentation address"),
        ("::/8", "a reserved address"),
    )
)

# IPv6 prefixes whose low 32 bits are an IPv4 address the packets end up at.
_MAPPED = _net("::ffff:0:0/96")
_TRANSLATED = _net("::ffff:0:0:0/96")
_COMPATIBLE = _net("::/96")
_NAT64 = _net("64:ff9b::/96")
_SIX_TO_FOUR = _net("2002::/16")
_GLOBAL_UNICAST = _net("2000::/3")

_LOOPBACK_NAMES = ("localhost", "localhost.localdomain")
_METADATA_NAMES = (
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 address carries, with what kind of carrier it is."""
    low = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    if address in _MAPPED:
        return "an IPv4-mapped IPv6 address", low
    if address in _TRANSLATED:
        return "an IPv4-translated IPv6 address", low
    if address in _NAT64:
        return "a NAT64 address", low
    if address in _SIX_TO_FOUR:
        assert address.sixtofour is not None
        return "a 6to4 address", address.sixtofour
    return None


def forbidden_reason(address: IPAddress) -> str | None:
    """Why Orbit refuses to connect to ``address``, or None if it is a public address."""
    if isinstance(address, ipaddress.IPv4Address):
        for network, reason in _IPV4_RULES:
            if address in network:
                return reason
        return None if address.is_global else "not a globally routable address"
    if address in _COMPATIBLE and int(address) > 1:  # :: and ::1 are in the rules
        low = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
        return f"an IPv4-compatible IPv6 address (deprecated) of {low}"
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        kind, inner = embedded
        why = forbidden_reason(inner)
        return None if why is None else f"{kind} of {inner}, which is {why}"
    for network, reason in _IPV6_RULES:
        if address in network:
            return reason
    if address not in _GLOBAL_UNICAST:
        return "outside the global unicast range 2000::/3"
    return None if address.is_global else "not a globally routable address"


@dataclass(frozen=True)
class Destination:
    """A URL the guard accepted."""

    url: URL
    host: str
    """The host as connected to: lowercase, IDNA-encoded, IPv6 without brackets."""
    address: IPAddress | None
    """The address, when the host is an IP literal."""
    trusted: bool
    """The host is a name in the allow-list: whatever it resolves to is allowed."""


@dataclass(frozen=True)
class HttpGuard:
    """The destination rules, with the allow-list of one installation."""

    allow: AllowList = field(default_factory=AllowList)

    def check_url(self, url: str | URL) -> Destination:
        """Parse ``url`` and check its scheme and host; for a name, before resolving it.

        Raises:
            HttpStepError: ``HTTP_INVALID_URL`` for a URL that is not absolute
                http(s) with a host.
            DestinationForbidden: The host is refused.
        """
        try:
            parsed = url if isinstance(url, URL) else URL(url)
        except (ValueError, TypeError) as error:
            raise _invalid_url(f"{url!r} is not a URL: {error}") from None
        if parsed.scheme not in SCHEMES:
            raise _invalid_url(
                f"only http:// and https:// URLs are allowed, not {parsed.scheme or 'none'}://"
                if parsed.scheme
                else f"{safe_url(parsed)!r} is not an absolute http:// or https:// URL"
            )
        host = parsed.raw_host
        if not host:
            raise _invalid_url(f"{safe_url(parsed)!r} has no host")
        host = host.lower()
        literal = parse_ip_literal(host)
        if literal is not None:
            address, zone = literal
            if zone is not None:
                raise DestinationForbidden(
                    host, "an IPv6 zone id names a local network interface", address=str(address)
                )
            self.check_address(host, address)
            return Destination(parsed, host, address, trusted=False)
        if self.allow.allows_name(host):
            return Destination(parsed, host, None, trusted=True)
        name = host_name(host)
        if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
            raise DestinationForbidden(host, "a name of this machine (loopback)")
        if name in _METADATA_NAMES:
            raise DestinationForbidden(host, "a cloud metadata service")
        return Destination(parsed, host, None, trusted=False)

    def check_address(self, host: str, address: IPAddress | str) -> IPAddress:
        """Check one address ``host`` is or resolves to; the parsed address.

        Raises:
            DestinationForbidden: The address is refused.
        """
        if isinstance(address, str):
            literal = parse_ip_literal(address)
            if literal is None:
                raise DestinationForbidden(
                    host, "its address is not an IP address", address=address
                )
            address = literal[0]
        if self.allow.allows_address(address):
            return address
        reason = forbidden_reason(address)
        if reason is not None:
            raise DestinationForbidden(host, reason, address=str(address))
        return address

    def check_resolved(
        self, destination: Destination | str, addresses: Iterable[IPAddress | str]
    ) -> list[IPAddress]:
        """Check every address a name resolved to; all of them, unless the name is trusted.

        Raises:
            DestinationForbidden: One of the addresses is refused, or there are none.
        """
        if isinstance(destination, str):
            host, trusted = destination, self.allow.allows_name(destination)
        else:
            host, trusted = destination.host, destination.trusted
        checked: list[IPAddress] = []
        for address in addresses:
            if trusted:
                parsed = parse_ip_literal(address) if isinstance(address, str) else (address, None)
                if parsed is None:
                    raise DestinationForbidden(
                        host, "its address is not an IP address", address=str(address)
                    )
                checked.append(parsed[0])
            else:
                checked.append(self.check_address(host, address))
        if not checked:
            raise DestinationForbidden(host, "it resolves to no address")
        return checked


def _invalid_url(message: str) -> HttpStepError:
    return HttpStepError(HTTP_INVALID_URL, message, retryable=False)


def safe_url(url: URL) -> str:
    """``url`` for messages and logs: without user info, query or fragment, which may be secret."""
    try:
        if url.is_absolute() and url.raw_host:
            return str(url.with_user(None).with_query(None).with_fragment(None))
        return str(url.with_query(None).with_fragment(None))
    except ValueError:
        return "(a malformed URL)"
