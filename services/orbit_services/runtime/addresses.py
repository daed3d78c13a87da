"""IP literals, host names and the allow-list of trusted destinations (``ORBIT_HTTP_ALLOW_HOSTS``).

Pure parsing, shared by the settings (a bad entry stops a service at start)
and the HTTP adapter's SSRF guard (``orbit_services.http_adapter.guard``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")
_NAME_LABEL = r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?"
HOST_NAME = re.compile(rf"(?:\*\.)?{_NAME_LABEL}(?:\.{_NAME_LABEL})*")


def parse_ipv4_literal(text: str) -> ipaddress.IPv4Address | None:
    """The address of an IPv4 literal in any notation ``inet_aton`` accepts, else None.

    One to four parts separated by dots, each decimal, octal (a leading ``0``)
    or hex (``0x``); the last part fills the remaining bytes: ``2130706433``,
    ``0177.0.0.1``, ``0x7f.1`` and ``127.1`` are all 127.0.0.1. One trailing
    dot is allowed, as the resolver allows it.
    """
    parts = text.removesuffix(".").split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(part) for part in parts):
        return None
    values = []
    for part in parts:
        if part[:2].lower() == "0x":
            values.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *leading, last = values
    if any(value > 0xFF for value in leading) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = last
    for position, value in enumerate(leading):
        number |= value << (8 * (3 - position))
    return ipaddress.IPv4Address(number)


def parse_ip_literal(host: str) -> tuple[IPAddress, str | None] | None:
    """The address of a host that is an IP literal, with its IPv6 zone id; None for a name.

    ``host`` is as in a URL: IPv6 may be bracketed, and a zone id may be
    percent-encoded (``fe80::1%25eth0``).
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        address, percent, zone = unquote(text).partition("%")
        try:
            return ipaddress.IPv6Address(address), (zone if percent else None)
        except ValueError:
            return None
    found = parse_ipv4_literal(text)
    return None if found is None else (found, None)


def normalized(address: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address as the IPv4 address it is; any other unchanged."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def host_name(host: str) -> str:
    return host.strip().lower().removesuffix(".")


@dataclass(frozen=True)
class AllowList:
    """Trusted destinations: host names (``*.example.com`` for every subdomain) and networks.

    A name in the list is trusted whatever it resolves to; an address in one
    of the networks is allowed whatever name led to it.
    """

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    """From ``*.example.com``: ``.example.com``."""
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """The list from entries such as ``api.internal``, ``*.corp.example``, ``10.1.0.0/16``.

        A bare address is a network of one (``127.0.0.1``, ``::1``, ``[::1]``).

        Raises:
            ValueError: An entry that is neither a host name nor an address or
                network, named in the message.
        """
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            literal = parse_ip_literal(entry)
            if literal is not None:
                address, zone = literal
                if zone is not None:
                    raise ValueError(f"{entry!r}: an allowed address takes no zone id")
                networks.append(ipaddress.ip_network(normalized(address)))
                continue
            if "/" in entry and "://" not in entry:
                try:
                    networks.append(ipaddress.ip_network(entry.strip("[]")))
                except ValueError as error:
                    raise ValueError(f"{entry!r} is not a network: {error}") from None
                continue
            try:
                name = host_name(entry).encode("idna").decode("ascii")
            except UnicodeError:
                name = ""
            if not HOST_NAME.fullmatch(name):
                raise ValueError(
                    f"{entry!r} is neither a host name (or *.domain) nor an address or network"
                )
            if name.startswith("*."):
                suffixes.append(name[1:])
            else:
                names.add(name)
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.names or self.suffixes or self.networks)

    def allows_name(self, host: str) -> bool:
        name = host_name(host)
        return name in self.names or any(name.endswith(suffix) for suffix in self.suffixes)

    def allows_address(self, address: IPAddress) -> bool:
        address = normalized(address)
        return any(
            address.version == network.version and address in network for network in self.networks
        )
