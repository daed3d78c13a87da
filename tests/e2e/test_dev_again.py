"""``orbit dev`` started again: the RabbitMQ passwords of the first stay good.

A second ``make demo`` once gave every broker user a new password before it
failed on the taken port, so the running one (and any worker started before)
was refused at its next reconnection, forever. Now the passwords saved in the
credentials file are kept unless a rotation is asked for, and a taken port is
refused before any broker user is touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from pathlib import Path

import aio_pika

from orbit_services.commands.broker_setup import provision_local_roles
from tests.integration.conftest import OrbitEnv

from .stack import free_port
from .test_tokens_cli import ORBIT, _orbit


async def _logs_in(url: str) -> bool:
    try:
        connection = await aio_pika.connect(url)
    except aio_pika.exceptions.ProbableAuthenticationError:
        return False
    await connection.close()
    return True


def _saved_logins(credentials: Path, namespace: str) -> dict[str, str]:
    brokers = json.loads(credentials.read_text(encoding="utf-8")).get("brokers", {})
    return dict(brokers.get(namespace, {}))


async def test_a_second_dev_on_a_taken_port_names_the_setting_and_keeps_the_firsts_logins(
    orbit_env: OrbitEnv, tmp_path: Path
) -> None:
    settings = orbit_env.settings
    credentials = tmp_path / "credentials.json"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")},
        "ORBIT_DATABASE_URL": settings.database_url,
        "ORBIT_AMQP_URL": settings.amqp_url,
        "ORBIT_NAMESPACE": settings.namespace,
        "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
        "ORBIT_HTTP_PORT": str(free_port()),
        "ORBIT_CREDENTIALS": str(credentials),
        # As after `make demo`: the orbit command is not on the PATH.
        "PATH": os.pathsep.join(
            d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "orbit").exists()
        ),
    }
    first = await asyncio.create_subprocess_exec(
        ORBIT,
        "dev",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert first.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not any("serving until Ctrl-C" in line for line in seen):
                line = (await first.stdout.readline()).decode()
                assert line, "the first orbit dev ended early:\n" + "".join(seen)
                seen.append(line)
        # Its hints name the orbit that runs, which the PATH would not find.
        hinted = re.search(r"`(\S+) login --show`", "".join(seen))
        assert hinted is not None, "".join(seen)
        assert (Path.cwd() / hinted[1]).resolve() == Path(ORBIT).resolve()
        logins = _saved_logins(credentials, settings.namespace)
        assert {"worker", "client", "gateway", "decider"} <= set(logins), logins

        status, out, err = await _orbit(env, "dev")
        assert status != 0
        assert "ORBIT_HTTP_PORT" in err, out + err
        assert "Traceback" not in out + err
        # Nothing of the broker was touched: the logins saved, and those the running
        # services and workers reconnect with, still log in.
        assert _saved_logins(credentials, settings.namespace) == logins
        for role, url in logins.items():
            assert await _logs_in(url), role
        assert first.returncode is None, "the first orbit dev stopped"
    finally:
        first.send_signal(signal.SIGINT)
        await asyncio.wait_for(first.communicate(), timeout=30)


async def test_two_setups_in_a_row_keep_the_passwords_and_rotate_only_when_asked(
    orbit_env: OrbitEnv,
) -> None:
    settings = orbit_env.settings
    first = await provision_local_roles(settings)
    again = await provision_local_roles(settings)
    assert again == first
    logins = [*first.services.values(), first.worker, first.client]
    for url in logins:
        assert await _logs_in(url), url
    rotated = await provision_local_roles(settings, rotate=True)
    fresh = [*rotated.services.values(), rotated.worker, rotated.client]
    assert not set(fresh) & set(logins)
    for old, new in zip(logins, fresh, strict=True):
        assert not await _logs_in(old), old
        assert await _logs_in(new), new
