"""Write the ``.env`` that ``compose.yaml`` needs: random passwords and an admin API token.

    python3 ops/compose/write_env.py          # or: make compose-secrets

compose.yaml refuses to start without any of them, so that no installation
runs with a well-known password:

- ``POSTGRES_PASSWORD`` and ``RABBITMQ_PASSWORD``: the administrators' (the
  ``postgres`` user; the RabbitMQ user ``orbit``, which only the one-shot
  ``broker-*`` containers log in as). They take effect when their volume is
  first created.
- ``RABBITMQ_<ROLE>_PASSWORD``: one RabbitMQ user per role (GATEWAY, DECIDER,
  DISPATCHER, TIMER, HTTP_ADAPTER: ``orbit.gateway``, ...; WORKER: the
  examples' worker ``orbit.worker.examples``; CLIENT: ``orbit.client.examples``).
  The ``broker-*`` containers set them at every start, so a new value takes
  effect at the next ``docker compose up -d``.
- ``ORBIT_ADMIN_TOKEN``: registered (by digest) by the ``admin-token``
  container at every start; the ``orbit`` commands inside the stack use it.

This draws each one that ``.env`` does not hold yet (the passwords URL-safe:
they go into ``ORBIT_DATABASE_URL`` and ``ORBIT_AMQP_URL`` as they are),
keeps the others, and writes the file readable by its owner only. Standard
library only: it runs before anything is installed.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path


def _password() -> str:
    return secrets.token_urlsafe(24)


# The RabbitMQ users of compose.yaml, one per role (RABBITMQ_<ROLE>_PASSWORD).
BROKER_ROLES = ("GATEWAY", "DECIDER", "DISPATCHER", "TIMER", "HTTP_ADAPTER", "WORKER", "CLIENT")

DRAWN = {
    "POSTGRES_PASSWORD": _password,
    "RABBITMQ_PASSWORD": _password,
    "ORBIT_ADMIN_TOKEN": lambda: "orbit_" + secrets.token_urlsafe(32),
    **{f"RABBITMQ_{role}_PASSWORD": _password for role in BROKER_ROLES},
}


def _existing(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            found[name.strip()] = value.strip()
    return found


def main(path: Path) -> int:
    existing = _existing(path)
    missing = [name for name in DRAWN if not existing.get(name)]
    if not missing:
        print(f"{path} holds every secret compose.yaml needs; nothing changed")
        return 0
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    lines += [f"{name}={DRAWN[name]()}" for name in missing]
    # Owner-only before a byte is written: never readable by others, not even briefly.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print(f"wrote {', '.join(missing)} to {path} (readable by you only)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".env")))
