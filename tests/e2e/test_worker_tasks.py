"""A worker user's --tasks patterns, checked when its worker registers.

RabbitMQ refuses a worker's consume of a task queue outside its user's
patterns (403), which closes the channel and every other consumer on it.
``orbit broker user add`` records the patterns in Postgres as well, so the
dispatcher refuses such a contract at registration instead, with
``TASK_NOT_PERMITTED``; the SDK says the same when RabbitMQ refuses it (a
user whose patterns were not recorded).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from orbit_model.broker_roles import Role
from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk import Worker, task
from orbit_services.commands.broker_setup import BrokerAdmin, add_user, with_login
from orbit_services.store import EventStore
from tests.integration.conftest import OrbitEnv

from .stack import running_stack
from .test_tokens_cli import _orbit


@task("pay-invoice", version="1")
async def pay_invoice(_input: Any) -> dict[str, Any]:
    return {}


@task("charge-card", version="2")
async def charge_card(_input: Any) -> dict[str, Any]:
    return {}


def _environment(env: OrbitEnv, **changes: str) -> dict[str, str]:
    settings = env.settings
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")},
        "ORBIT_AMQP_URL": settings.amqp_url,
        "ORBIT_NAMESPACE": settings.namespace,
        "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
        "ORBIT_DATABASE_URL": settings.database_url,
        **changes,
    }


async def _recorded(env: OrbitEnv, user: str) -> tuple[str, ...] | None:
    store = await EventStore.connect(env.settings.database_url, min_size=1, max_size=1)
    try:
        return await store.worker_users.tasks_of(user)
    finally:
        await store.close()


async def test_a_contract_outside_the_user_s_patterns_is_refused_at_registration(
    orbit_env: OrbitEnv,
) -> None:
    env = _environment(orbit_env)
    add = ("broker", "user", "add", "--role", "worker", "--tasks", "pay*", "--url", "payer")
    status, out, err = await _orbit(env, *add)
    assert status == 0, err
    assert "warning" not in err
    user = f"{orbit_env.settings.namespace}.worker.payer"
    assert await _recorded(orbit_env, user) == ("pay*",)
    as_payer = orbit_env.settings.model_copy(update={"amqp_url": out.strip()})
    async with running_stack(orbit_env.settings, services=("dispatcher",)):
        both = Worker([pay_invoice, charge_card], settings=as_payer)
        with pytest.raises(OrbitError) as refused:
            await both.start()
        assert refused.value.code == ErrorCode.TASK_NOT_PERMITTED
        told = refused.value.message
        assert f"RabbitMQ user {user!r} may read only the task queues" in told
        assert "(pay*)" in told
        assert "could not consume charge-card@2:" in told
        assert "pay-invoice" not in told
        covered = Worker([pay_invoice], settings=as_payer)
        await covered.start()
        assert covered.session_id is not None
        await covered.stop()
    status, _, err = await _orbit(env, "broker", "user", "delete", "--role", "worker", "payer")
    assert status == 0, err
    assert await _recorded(orbit_env, user) is None


async def test_a_user_whose_patterns_are_not_recorded_is_told_by_the_sdk(
    orbit_env: OrbitEnv,
) -> None:
    settings = orbit_env.settings
    async with BrokerAdmin.from_settings(settings) as admin:
        user, password = await add_user(
            admin, orbit_env.topology, Role.WORKER, "by-hand", tasks=["pay*"]
        )
    login = with_login(settings.amqp_url, user, password)
    as_user = settings.model_copy(update={"amqp_url": login})
    async with running_stack(settings, services=("dispatcher",)):
        worker = Worker([charge_card], settings=as_user)
        with pytest.raises(OrbitError) as refused:
            await worker.start()
    assert refused.value.code == ErrorCode.TASK_NOT_PERMITTED
    assert "ACCESS_REFUSED" in refused.value.message
    assert "do not cover charge-card@2" in refused.value.message


async def test_adding_a_worker_user_without_postgres_warns_that_nothing_is_checked(
    orbit_env: OrbitEnv,
) -> None:
    nowhere = orbit_env.settings.database_url.rsplit("/", 1)[0] + "/no_such_database"
    env = _environment(orbit_env, ORBIT_DATABASE_URL=nowhere)
    add = ("broker", "user", "add", "--role", "worker", "--tasks", "pay*", "unrecorded")
    status, out, err = await _orbit(env, *add)
    assert status == 0, err
    assert out.strip()  # the password: the user was made
    assert "warning: the task patterns of" in err
    assert "UNAVAILABLE" in err
    assert "Traceback" not in err
