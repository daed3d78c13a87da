"""What the dispatcher refuses at registration for a worker user's --tasks patterns, and
that it says exactly what RabbitMQ's permissions for those patterns let the user read."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.broker_roles import Role, covers, permissions
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import ContractAnnouncement, RegisterWorker
from orbit_model.topology import Topology
from orbit_services.dispatcher.control import check_permitted

TOPOLOGY = Topology("orbit", 32)
NAME = st.from_regex(r"[a-z][a-z0-9_.-]{0,12}", fullmatch=True)
PATTERN = st.from_regex(r"[a-z*][a-z0-9_.*-]{0,8}", fullmatch=True)


@given(patterns=st.lists(PATTERN, min_size=1, max_size=3), task=NAME | st.just("orbit.http"))
def test_covers_says_what_rabbitmq_lets_the_user_read(patterns: list[str], task: str) -> None:
    readable = permissions(TOPOLOGY, Role.WORKER, patterns).read
    queue = TOPOLOGY.task_queue(task, "1")
    assert covers(patterns, task) == bool(re.fullmatch(readable, queue))


def _register(*tasks: str) -> RegisterWorker:
    contracts = tuple(ContractAnnouncement(task=task, version="1") for task in tasks)
    return RegisterWorker(worker_id="w", contracts=contracts)


def test_a_contract_outside_the_patterns_is_refused_naming_them() -> None:
    with pytest.raises(OrbitError) as refused:
        check_permitted(
            _register("pay-in", "ship", "payments.refund", "orbit.http.request"),
            "orbit.worker.pay",
            ("pay*", "payments.*"),
        )
    assert refused.value.code == ErrorCode.TASK_NOT_PERMITTED
    assert refused.value.message.startswith(
        "RabbitMQ user 'orbit.worker.pay' may read only the task queues of its --tasks"
        " patterns (pay*, payments.*), so it could not consume ship@1, orbit.http.request@1:"
    )


def test_patterns_that_cover_every_contract_or_none_recorded_pass() -> None:
    check_permitted(_register("pay-in", "payments.refund"), "orbit.worker.pay", ("pay*",))
    check_permitted(_register("anything"), "orbit.worker.by-hand", None)
