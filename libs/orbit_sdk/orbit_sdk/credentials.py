"""Where the ``orbit`` command line keeps API tokens: one per gateway, in a file of the user's.

``orbit login`` (and ``orbit dev``, for the token it makes) writes
``$XDG_CONFIG_HOME/orbit/credentials.json`` (``~/.config/orbit/…`` by
default; ``ORBIT_CREDENTIALS`` names another file), readable by its owner
only. A command finds its token in ``ORBIT_TOKEN`` first, then in that file
under the gateway's URL. The loopback names (``localhost``, ``127.0.0.1``,
``[::1]``) count as one host, so a token saved for ``http://127.0.0.1:8080``
serves ``http://localhost:8080`` too.

``orbit dev`` also keeps there the RabbitMQ login of a worker and a client of
its namespace: a worker or client started without ``ORBIT_AMQP_URL`` uses it
(:func:`orbit_sdk.settings.load_client_settings`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def credentials_path() -> Path:
    """The credentials file of this user (it may not exist yet)."""
    named = os.environ.get("ORBIT_CREDENTIALS")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "orbit" / "credentials.json"


def gateway_key(url: str) -> str:
    """The key a gateway's token is kept under: scheme, host, port and path of its URL
    (two gateways behind one host under different paths keep tokens of their own)."""
    parts = urlsplit(url.strip())
    scheme = (parts.scheme or "http").lower()
    host = (parts.hostname or "").lower()
    if host in _LOOPBACK:
        host = "loopback"
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:  # not a port: the key of no gateway (the URL is refused elsewhere)
        port = 0
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def saved_token(url: str, path: Path | None = None) -> str | None:
    """The token saved for the gateway at ``url``, if any."""
    entry = _read(path or credentials_path()).get("gateways", {}).get(gateway_key(url))
    token = entry.get("token") if isinstance(entry, dict) else None
    return token if isinstance(token, str) and token else None


def token_for(url: str) -> str | None:
    """The token a command sends to ``url``: ``ORBIT_TOKEN``, else the one saved for it."""
    return os.environ.get("ORBIT_TOKEN") or saved_token(url)


def save_token(url: str, token: str, name: str | None = None, path: Path | None = None) -> Path:
    """Keep ``token`` for the gateway at ``url`` (replacing one kept before); the file.

    The file is written whole to a temporary file beside it and renamed over
    it, readable and writable by its owner only.
    """
    path = path or credentials_path()
    data = _read(path)
    gateways = data.setdefault("gateways", {})
    gateways[gateway_key(url)] = {"token": token, "name": name, "url": url}
    _write(path, data)
    return path


def forget_token(url: str, path: Path | None = None) -> bool:
    """Remove the token kept for ``url``; whether there was one."""
    path = path or credentials_path()
    data = _read(path)
    removed = data.get("gateways", {}).pop(gateway_key(url), None) is not None
    if removed:
        _write(path, data)
    return removed


def save_broker_url(namespace: str, role: str, amqp_url: str, path: Path | None = None) -> Path:
    """Keep the broker URL a ``worker`` or ``client`` of ``namespace`` logs in with (as
    ``orbit dev`` does for the users it makes); the file."""
    path = path or credentials_path()
    data = _read(path)
    data.setdefault("brokers", {}).setdefault(namespace, {})[role] = amqp_url
    _write(path, data)
    return path


def saved_broker_url(namespace: str, role: str, path: Path | None = None) -> str | None:
    """The broker URL kept for a ``worker`` or ``client`` of ``namespace``, if any."""
    entry = _read(path or credentials_path()).get("brokers", {}).get(namespace)
    url = entry.get(role) if isinstance(entry, dict) else None
    return url if isinstance(url, str) and url else None


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".credentials-")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
