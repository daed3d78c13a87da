"""``orbit broker setup|user``, run as an operator runs them, on the real broker.

Each command is a subprocess with this test's namespace in its environment;
the users it makes are the test's (removed with its namespace).
"""

from __future__ import annotations

import os
import shlex

import aio_pika
import pytest

from orbit_model.broker_roles import SERVICE_ROLES, permissions, user_name
from orbit_services.commands.broker_setup import with_login
from tests.integration.conftest import OrbitEnv

from .test_tokens_cli import _orbit


def _environment(env: OrbitEnv) -> dict[str, str]:
    settings = env.settings
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")},
        "ORBIT_AMQP_URL": settings.amqp_url,
        "ORBIT_NAMESPACE": settings.namespace,
        "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
    }


async def _logs_in(url: str) -> bool:
    try:
        connection = await aio_pika.connect(url)
    except aio_pika.exceptions.ProbableAuthenticationError:
        return False
    await connection.close()
    return True


async def test_setup_makes_each_service_user_once_and_keeps_its_password(
    orbit_env: OrbitEnv,
) -> None:
    env = _environment(orbit_env)
    namespace = orbit_env.settings.namespace
    status, out, err = await _orbit(env, "broker", "setup")
    assert status == 0, err
    made = dict(line.split(" ", 1) for line in out.splitlines())
    assert set(made) == {user_name(namespace, role) for role in SERVICE_ROLES}
    for user, password in made.items():
        assert await _logs_in(with_login(env["ORBIT_AMQP_URL"], user, password)), user
    # Again: nothing new is printed, every password still works.
    status, out, err = await _orbit(env, "broker", "setup")
    assert (status, out) == (0, "")
    assert err.count("password kept") == len(SERVICE_ROLES)
    decider = user_name(namespace, SERVICE_ROLES[1])
    assert await _logs_in(with_login(env["ORBIT_AMQP_URL"], decider, made[decider]))
    # Rotating one: the old password no longer logs in, the new one does.
    status, out, err = await _orbit(env, "broker", "setup", "--rotate", "decider")
    assert status == 0, err
    rotated = dict(line.split(" ", 1) for line in out.splitlines())
    assert list(rotated) == [decider]
    assert not await _logs_in(with_login(env["ORBIT_AMQP_URL"], decider, made[decider]))
    assert await _logs_in(with_login(env["ORBIT_AMQP_URL"], decider, rotated[decider]))


async def test_setup_prints_the_same_as_rabbitmqctl_commands(orbit_env: OrbitEnv) -> None:
    status, out, err = await _orbit(_environment(orbit_env), "broker", "setup", "--print")
    assert status == 0, err
    commands = [shlex.split(line) for line in out.splitlines()]
    assert [c[1] for c in commands].count("add_user") == len(SERVICE_ROLES)
    granted = {c[4]: tuple(c[5:]) for c in commands if c[1] == "set_permissions"}
    for role in SERVICE_ROLES:
        allowed = permissions(orbit_env.topology, role)
        user = user_name(orbit_env.settings.namespace, role)
        assert granted[user] == (allowed.configure, allowed.write, allowed.read)
    assert commands[-1][1] == "set_policy"


async def test_a_worker_user_is_added_with_its_password_shown_once_then_deleted(
    orbit_env: OrbitEnv,
) -> None:
    env = _environment(orbit_env)
    add = ("broker", "user", "add", "--role", "worker", "--tasks", "payments.*", "pay")
    status, out, err = await _orbit(env, *add)
    assert status == 0, err
    assert out.count("\n") == 1
    user = f"{orbit_env.settings.namespace}.worker.pay"
    assert user in err
    assert await _logs_in(with_login(env["ORBIT_AMQP_URL"], user, out.strip()))
    status, out, err = await _orbit(env, "broker", "user", "delete", "--role", "worker", "pay")
    assert status == 0, err
    status, _, err = await _orbit(env, "broker", "user", "delete", "--role", "worker", "pay")
    assert status == 1
    assert "no user" in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("user", "add", "--role", "worker", "w"), "needs --tasks"),
        (("user", "add", "--role", "gateway", "g"), "--role is one of"),
        (("user", "add", "--role", "client", "bad name"), "a client user's name"),
        (("setup", "--rotate", "worker"), "--rotate takes a service role"),
    ],
)
async def test_bad_broker_commands_are_refused_with_a_reason(
    orbit_env: OrbitEnv, args: tuple[str, ...], says: str
) -> None:
    status, out, err = await _orbit(_environment(orbit_env), "broker", *args)
    assert (status, out) == (2, "")
    assert says in err
    assert "Traceback" not in err
