"""``orbit token``, ``orbit login`` and ``ORBIT_TOKEN``, run as a user runs them.

The token commands work on the database alone; the others reach a real
gateway with auth on. Each command is a subprocess with this test's Orbit in
its ``ORBIT_*`` environment and its own credentials file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tests.integration.conftest import OrbitEnv

from .stack import free_port, running_stack

ORBIT = str(Path(sys.executable).parent / "orbit")


async def _orbit(env: dict[str, str], *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        ORBIT,
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else b""), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_tokens_are_made_on_the_database_and_used_through_login(
    orbit_env: OrbitEnv, tmp_path: Path
) -> None:
    settings = orbit_env.settings_with(auth="tokens", http_port=free_port())
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")},
        "ORBIT_DATABASE_URL": settings.database_url,
        "ORBIT_CREDENTIALS": str(tmp_path / "credentials.json"),
    }
    # Before any gateway runs: the first admin token, and a narrow one.
    status, out, err = await _orbit(
        env, "token", "create", "--name", "first-admin", "--scope", "admin"
    )
    assert status == 0, err
    admin = out.strip()
    assert admin.startswith("orbit_")
    assert out.count("\n") == 1
    assert "not shown again" in err
    status, out, _ = await _orbit(
        env, "token", "create", "--name", "reader", "--scope", "workers:read", "--expires", "30d"
    )
    reader = out.strip()
    status, out, err = await _orbit(env, "token", "create", "--name", "x", "--scope", "root")
    assert (status, out) == (1, "")
    assert err.startswith("INVALID_REQUEST: unknown scope 'root'")
    status, _, err = await _orbit(env, "token", "create", "--name", "reader", "--scope", "admin")
    assert (status, err.split(":")[0]) == (1, "TOKEN_EXISTS")

    # A secret made by a secrets manager is stored as given (its digest), never printed.
    managed = {**env, "CI_SECRET": "m" * 40, "SHORT_SECRET": "short"}
    create_ci = ("token", "create", "--name", "ci", "--scope", "executions:start")
    status, out, err = await _orbit(managed, *create_ci, "--secret-env", "CI_SECRET")
    assert (status, out) == (0, ""), err
    # Again with the same secret (an init step run twice): done, and not a conflict.
    status, out, err = await _orbit(managed, *create_ci, "--secret-env", "CI_SECRET")
    assert (status, out) == (0, ""), err
    status, _, err = await _orbit(
        managed, *create_ci[:3], "ci-2", *create_ci[4:], "--secret-env", "CI_SECRET"
    )
    assert (status, err.split(":")[0]) == (1, "TOKEN_EXISTS")
    status, _, err = await _orbit(managed, *create_ci, "--secret-env", "SHORT_SECRET")
    assert (status, err.split(":")[0]) == (1, "INVALID_REQUEST")

    status, out, _ = await _orbit(env, "token", "list", "--json")
    listed = {item["name"]: item for item in json.loads(out)}
    assert set(listed) == {"first-admin", "reader", "ci"}
    assert listed["reader"]["expires_at"] is not None
    assert admin not in out
    assert reader not in out

    async with running_stack(settings, services=("gateway",)) as stack:
        url = f"http://127.0.0.1:{stack.settings.http_port}"
        env["ORBIT_URL"] = url
        status, _, err = await _orbit(env, "workers")
        assert (status, err.split(":")[0]) == (1, "UNAUTHENTICATED")

        status, out, err = await _orbit(env, "login", "--token", "-", stdin=reader + "\n")
        assert status == 0, err
        assert (await _orbit(env, "workers", "--json"))[0] == 0
        # The narrow token may not start anything; ORBIT_TOKEN wins over the saved one.
        status, _, err = await _orbit(env, "list")
        assert (status, err.split(":")[0]) == (1, "PERMISSION_DENIED")
        status, _, err = await _orbit({**env, "ORBIT_TOKEN": admin}, "list")
        assert status == 0, err
        assert (await _orbit(env, "login", "--show"))[1].strip() == reader

        status, out, _ = await _orbit(env, "token", "revoke", "reader")
        assert status == 0
        assert out.startswith("revoked reader")
        status, _, err = await _orbit(env, "workers")
        assert (status, err.split(":")[0]) == (1, "UNAUTHENTICATED")

        status, _, err = await _orbit(env, "login", "--token", f"orbit_{'x' * 43}")
        assert (status, err.split(":")[0]) == (1, "UNAUTHENTICATED")
        assert (await _orbit(env, "logout"))[1].startswith("logged out")
