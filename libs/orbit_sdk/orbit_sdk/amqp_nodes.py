"""``ORBIT_AMQP_URL`` names one RabbitMQ node, or the nodes of a cluster.

Two ways to write a list, and both may be mixed:

- full URLs, comma-separated:
  ``amqp://user:pass@h1:5672/,amqp://user:pass@h2:5672/``;
- one URL with several hosts, each with its own port:
  ``amqp://user:pass@h1:5672,h2:5673,h3/vhost?heartbeat=10`` (each host gets
  the login, the virtual host and the query of the URL around it).

Every node must log in as the same user to the same virtual host: they are
the nodes of one broker, and Orbit's roles check who sent what by that user.
A comma inside a password must be written ``%2C``, as URLs want it (the
passwords Orbit makes never hold one). Everything here is pure string work,
so the settings can check a list without importing the AMQP client.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit, urlunsplit

_NEXT_URL = re.compile(r",\s*(?=amqps?://)", re.IGNORECASE)
"""A comma that starts another full URL (a comma of a host list does not)."""
SCHEMES = ("amqp", "amqps")


def split_nodes(value: str) -> tuple[str, ...]:
    """The URL of each node ``value`` names, in its order, each a full ``amqp[s]://`` URL.

    Raises:
        ValueError: Saying what is wrong, for the line that names ``ORBIT_AMQP_URL``.
    """
    text = value.strip()
    if not text:
        raise ValueError("is empty: give the URL of a RabbitMQ node (amqp://user:pass@host:5672/)")
    nodes: list[str] = []
    for number, entry in enumerate(_NEXT_URL.split(text), start=1):
        piece = entry.strip()
        scheme, separator, _ = piece.partition("://")
        if not separator or scheme.lower() not in SCHEMES:
            raise _not_a_url(number, piece)
        nodes.extend(_expand(piece, number))
    _check_same_broker(nodes)
    return tuple(nodes)


def _not_a_url(number: int, entry: str) -> ValueError:
    return ValueError(
        f"entry {number} ({_shown(entry.strip())}) is not an amqp:// or amqps:// URL:"
        " separate full URLs with commas (amqp://u:p@h1:5672/,amqp://u:p@h2:5672/),"
        " or list the hosts in one (amqp://u:p@h1:5672,h2:5672/)"
    )


def _expand(url: str, number: int) -> list[str]:
    """``url`` as one URL per host of its host list (itself when it names one host)."""
    scheme, _, rest = url.partition("://")
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    netloc, tail = (rest, "") if end < 0 else (rest[:end], rest[end:])
    if "," in tail:  # a vhost or a query holds a comma only as %2C: another entry follows
        raise _not_a_url(number + 1, tail.split(",", 1)[1])
    login, at, hosts = netloc.rpartition("@")
    found = []
    for host in hosts.split(","):
        node = f"{scheme.lower()}://{login}{at}{host.strip()}{tail}"
        _check_node(node, number)
        found.append(node)
    return found


def _check_node(node: str, number: int) -> None:
    parts = urlsplit(node)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1 or parts.netloc.endswith(":"):
        raise ValueError(
            f"entry {number} names a node without a host, or with a bad port:"
            f" {_shown(node)} (host or host:port, the port 1-65535)"
        )


def _check_same_broker(nodes: list[str]) -> None:
    seen: set[tuple[str, int]] = set()
    first = nodes[0]
    for node in nodes:
        address = (host_of(node).lower(), port_of(node))
        if address in seen:
            raise ValueError(f"lists the node {address[0]}:{address[1]} twice")
        seen.add(address)
        if (_login(node), _vhost(node)) != (_login(first), _vhost(first)):
            raise ValueError(
                "the nodes must log in as the same user to the same virtual host"
                f" ({_shown(first)} and {_shown(node)} do not)"
            )


def _shown(url: str) -> str:
    """``url`` fit for an error message: without its password, and not too long."""
    parts = urlsplit(url)
    if parts.password is not None:
        user = parts.username or ""
        url = url.replace(f"{user}:{parts.password}@", f"{user}:***@", 1)
    return repr(url if len(url) <= 120 else url[:117] + "...")


def port_of(node: str) -> int:
    """The AMQP port of one node's URL (5672, or 5671 for amqps, when it names none)."""
    parts = urlsplit(node)
    return parts.port or (5671 if parts.scheme == "amqps" else 5672)


def host_of(node: str) -> str:
    """The host of one node's URL as it stands in a URL (an IPv6 address in brackets)."""
    host = urlsplit(node).hostname or "localhost"
    return f"[{host}]" if ":" in host else host


def login_of(value: str) -> str:
    """The user ``value`` logs in as (``guest`` when it names none, as RabbitMQ does);
    every node of a list has the same."""
    return _login(_first(value))


def vhost_of(value: str) -> str:
    """The virtual host ``value`` names (``/`` when it names none, as RabbitMQ does)."""
    return _vhost(_first(value))


def _login(node: str) -> str:
    return unquote(urlsplit(node).username or "guest")


def _vhost(node: str) -> str:
    path = urlsplit(node).path
    return unquote(path[1:]) if len(path) > 1 else "/"


def first_node(value: str) -> str:
    """The URL of the first node ``value`` names."""
    return _first(value)


def _first(value: str) -> str:
    try:
        return split_nodes(value)[0]
    except ValueError:
        return value  # the settings refused it already; answer for what it is


def with_login(value: str, user: str, password: str) -> str:
    """``value`` logging in as ``user`` with ``password`` instead, on every node it names
    (a list comes back as full URLs, comma-separated)."""
    login = f"{quote(user, safe='')}:{quote(password, safe='')}"
    nodes = []
    for node in split_nodes(value):
        parts = urlsplit(node)
        port = f":{parts.port}" if parts.port else ""
        nodes.append(urlunsplit(parts._replace(netloc=f"{login}@{host_of(node)}{port}")))
    return ",".join(nodes)
