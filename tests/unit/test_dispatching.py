"""The dispatcher's rules: task routes, registration checks, warnings, which tokens stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbit_model import compile_definition
from orbit_model.decider import decide_until_stable
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.inputs import accept_cancel, accept_lost_delivery, start_execution
from orbit_model.messages import (
    ContractAnnouncement,
    DeliveryLost,
    InflightTask,
    RegisterWorker,
    Route,
)
from orbit_model.state import ExecutionState, evolve, replay
from orbit_model.topology import Topology
from orbit_services.dispatcher.control import (
    check_registration,
    contract_warnings,
    lost_deliveries,
    token_is_live,
    tokens_to_cancel,
)

EXAMPLES = Path(__file__).parents[2] / "examples"
HELLO = compile_definition((EXAMPLES / "hello-world.yaml").read_text())
TOPOLOGY = Topology("ns", 4)


def test_a_task_goes_to_the_queue_of_its_contract() -> None:
    assert TOPOLOGY.task_route("ship-item", "1") == Route(
        exchange="ns.tasks", routing_key="ship-item@1"
    )
    assert TOPOLOGY.task_route("ship-item", "2.1").routing_key == "ship-item@2.1"
    assert TOPOLOGY.task_queue("ship-item", "2.1") == "ns.task.ship-item@2.1"


def _register(
    *contracts: tuple[str, str], worker_id: str = "w", runtime: str = "python"
) -> RegisterWorker:
    return RegisterWorker(
        worker_id=worker_id,
        runtime=runtime,
        contracts=tuple(ContractAnnouncement(task=t, version=v) for t, v in contracts),
    )


def test_a_good_registration_passes() -> None:
    check_registration(_register(("charge-card", "2"), ("ship-item", "1")), builtin_allowed=False)


@pytest.mark.parametrize(
    ("request_", "code", "words"),
    [
        (_register(("a", "1"), worker_id=""), ErrorCode.INVALID_REQUEST, "worker_id is required"),
        (_register(), ErrorCode.INVALID_REQUEST, "at least one task contract"),
        (_register(("workflow:send-invoice", "1")), ErrorCode.RESERVED_TASK, "child workflow"),
        (_register(("orbit.http.request", "1")), ErrorCode.RESERVED_TASK, "built-in"),
        # Orbit's own adapter may serve the built-in contracts, and nothing else reserved.
        (
            _register(("orbit.http.request", "2"), runtime="orbit"),
            ErrorCode.RESERVED_TASK,
            "built-in",
        ),
        (_register(("orbit.mine", "1"), runtime="orbit"), ErrorCode.RESERVED_TASK, "built-in"),
        (
            _register(("orbit.http.request", "1"), ("workflow:x", "1"), runtime="orbit"),
            ErrorCode.RESERVED_TASK,
            "child workflow",
        ),
        (_register(("has space", "1")), ErrorCode.INVALID_REQUEST, "task name"),
        (_register(("ok", "no/slash")), ErrorCode.INVALID_REQUEST, "contract version"),
    ],
)
def test_registrations_that_cannot_be_served_are_refused(
    request_: RegisterWorker, code: ErrorCode, words: str
) -> None:
    with pytest.raises(OrbitError) as refused:
        check_registration(request_, builtin_allowed=request_.runtime == "orbit")
    assert refused.value.code == code
    assert words in refused.value.message


def test_orbit_s_own_adapter_may_serve_the_built_in_http_task() -> None:
    check_registration(_register(("orbit.http.request", "1")), builtin_allowed=True)
    check_registration(_register(("orbit.http.request", "1"), ("echo", "1")), builtin_allowed=True)


def test_a_worker_not_allowed_built_ins_is_refused_whatever_runtime_it_claims() -> None:
    with pytest.raises(OrbitError) as refused:
        check_registration(
            _register(("orbit.http.request", "1"), runtime="orbit"), builtin_allowed=False
        )
    assert refused.value.code == ErrorCode.RESERVED_TASK


def test_contracts_no_workflow_calls_are_warned_about() -> None:
    contracts = _register(("greet", "1"), ("greet", "3"), ("charge", "9"), ("unused", "1"))
    in_use = {"greet": {"1", "2"}, "charge": {"2"}}
    warnings = contract_warnings(contracts.contracts, in_use)
    uncalled = (
        "'unused' (version 1) is called by no registered workflow: check its name; its"
        " tasks reach this worker once a workflow that calls it is registered"
    )
    assert warnings == [
        "'greet' is announced at version 3, but registered workflows call it at 1, 2;"
        " no task of theirs will reach this worker",
        "'charge' is announced at version 9, but registered workflows call it at 2;"
        " no task of theirs will reach this worker",
        uncalled,
    ]
    assert len(contract_warnings(contracts.contracts, {})) == 4


def test_the_built_in_tasks_get_no_warning() -> None:
    builtin = _register(("orbit.http.request", "1"))
    assert contract_warnings(builtin.contracts, {}) == []


def _dispatched() -> tuple[ExecutionState, str]:
    created = start_execution(HELLO.ir, HELLO.hash, "e-1", {"name": "ada"})
    state, _ = decide_until_stable(replay([created]), HELLO.ir, now=1_000)
    token = state.unit("greet").token
    assert token is not None
    return state, token


def test_the_token_in_flight_is_live_others_are_not() -> None:
    state, token = _dispatched()
    assert token_is_live(state, token)
    assert not token_is_live(state, "someone-else")
    assert tokens_to_cancel(
        {"e-1": state},
        [
            InflightTask(execution_id="e-1", token=token),
            InflightTask(execution_id="e-1", token="old"),
            InflightTask(execution_id="e-unknown", token="x"),
        ],
    ) == ("old", "x")


def test_a_lost_or_cancelled_delivery_is_no_longer_live() -> None:
    state, token = _dispatched()
    lost = state
    for event in accept_lost_delivery(state, token, "gone"):
        lost = evolve(lost, event)
    assert not token_is_live(lost, token)

    cancelled = state
    for event in accept_cancel(state, "no longer needed"):
        cancelled = evolve(cancelled, event)
    cancelled, _ = decide_until_stable(cancelled, HELLO.ir, now=2_000)
    assert not token_is_live(cancelled, token)


def test_lost_deliveries_name_each_task() -> None:
    held = [
        InflightTask(execution_id="e-1", token="a"),
        InflightTask(execution_id="e-2", token="b"),
    ]
    assert lost_deliveries(held) == [
        DeliveryLost(execution_id="e-1", token="a", reason="worker unregistered"),
        DeliveryLost(execution_id="e-2", token="b", reason="worker unregistered"),
    ]
