"""A result is taken only from who could have been handed its delivery.

RabbitMQ's permissions say who can read a task's queue, and so learn its
token: a worker user whose ``--tasks`` patterns cover the task, the HTTP
adapter for the built-in tasks, and Orbit itself for a child workflow's
outcome. The decider holds every result (and every report of a parked one)
to the same rule (:func:`orbit_model.inputs.answer_refusal`), so a token that
leaked answers nothing from anyone else.
"""

from __future__ import annotations

import textwrap

import pytest

from orbit_model import compile_definition
from orbit_model.broker_roles import Role, Sender
from orbit_model.compiler import Definition
from orbit_model.decider import decide_until_stable
from orbit_model.errors import ErrorCode
from orbit_model.events import StepDispatched
from orbit_model.inputs import answer_refusal, start_execution
from orbit_model.messages import MessageParked, TaskResult
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.plan import Facts, Plan, Policy, plan
from orbit_model.state import ExecutionState, UnitStatus, evolve_all, replay

from .simulator import TOPOLOGY

NOW = 1_000_000

FLOW = compile_definition(
    textwrap.dedent(
        """
        orbit: 1
        workflow: paid
        version: 1.0.0
        tasks:
          payments.charge: {version: "1"}
        steps:
          - id: charge
            task: payments.charge
          - id: notify
            after: []
            http: {url: "https://example.com/hook"}
          - id: invoice
            after: []
            workflow: invoicing@1.0.0
        """
    )
)

NS = TOPOLOGY.namespace


def worker(label: str, tasks: tuple[str, ...] | None) -> Sender:
    return Sender(f"{NS}.worker.{label}", Role.WORKER, tasks)


def service(role: Role) -> Sender:
    return Sender(f"{NS}.{role}", role)


def dispatched(definition: Definition = FLOW) -> tuple[ExecutionState, dict[str, str]]:
    """An execution of ``definition`` with every step dispatched; each step's token."""
    created = start_execution(definition.ir, definition.hash, "e-1", delivery_secret="s" * 32)
    state, events = decide_until_stable(replay([created]), definition.ir, NOW)
    tokens = {e.unit: e.token for e in events if isinstance(e, StepDispatched)}
    return state, tokens


def answered(state: ExecutionState, token: str, sender: Sender | None) -> Plan:
    result = TaskResult(execution_id="e-1", token=token, output={"forged": "by evil"})
    facts = Facts(definition=FLOW.ir, senders=[sender])
    decided = plan(state, [result], facts, now=NOW, policy=Policy(), topology=TOPOLOGY)
    assert decided is not None
    return decided


@pytest.mark.parametrize(
    ("step", "sender"),
    [
        ("charge", worker("payments", ("payments.*",))),
        ("charge", worker("all", ("*",))),
        ("charge", worker("dev", None)),  # patterns not recorded: as before
        ("charge", None),  # one RabbitMQ user for all: nothing to check
        ("notify", service(Role.HTTP_ADAPTER)),
        ("invoice", service(Role.DECIDER)),
        ("invoice", service(Role.GATEWAY)),
    ],
)
def test_a_result_from_who_could_be_handed_the_task_is_taken(
    step: str, sender: Sender | None
) -> None:
    state, tokens = dispatched()
    decided = answered(state, tokens[step], sender)
    assert decided.refused == []
    assert decided.state.unit(step).status is UnitStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("step", "sender", "told"),
    [
        ("charge", worker("other", ("other.*",)), "(other.*), which do not cover"),
        ("charge", worker("pay", ("payments",)), "(payments), which do not cover"),
        ("charge", service(Role.HTTP_ADAPTER), "no worker's, may not answer task"),
        ("charge", service(Role.DECIDER), "no worker's, may not answer task"),
        ("charge", Sender("stranger", None), "no worker's, may not answer task"),
        ("notify", worker("all", ("*",)), "may not answer the built-in task"),
        ("notify", worker("dev", None), "may not answer the built-in task"),
        ("invoice", worker("dev", None), "may not answer a child workflow"),
        ("invoice", service(Role.HTTP_ADAPTER), "may not answer a child workflow"),
    ],
)
def test_a_result_from_who_could_not_be_handed_the_task_changes_nothing(
    step: str, sender: Sender, told: str
) -> None:
    state, tokens = dispatched()
    decided = answered(state, tokens[step], sender)
    assert decided.events == []
    assert decided.state.unit(step).status is UnitStatus.DISPATCHED
    [(_, error)] = decided.refused
    assert error.code is ErrorCode.PERMISSION_DENIED
    assert told in error.message
    assert sender.user in error.message


def test_the_rule_follows_the_permissions_of_a_worker_user() -> None:
    assert answer_refusal(worker("w", ("pay*",)), "payments.charge") is None
    assert answer_refusal(worker("w", ("pay*",)), "orbit.http.request") is not None
    assert answer_refusal(worker("w", ("*",)), "workflow:invoicing") is not None


def test_a_result_under_a_token_never_issued_is_still_recorded_as_stale() -> None:
    state, _ = dispatched()
    decided = answered(state, "e-1:charge:1.AAAAAAAAAAAAAAAAAAAAAA", worker("x", ("other",)))
    assert decided.refused == []
    assert [e.type for e in decided.events] == ["StaleResultIgnored"]


def test_a_later_result_in_the_same_turn_from_the_right_worker_is_taken() -> None:
    state, tokens = dispatched()
    token = tokens["charge"]
    forged = TaskResult(execution_id="e-1", token=token, output={"forged": "by evil"})
    real = TaskResult(execution_id="e-1", token=token, output={"real": True})
    facts = Facts(
        definition=FLOW.ir, senders=[worker("other", ("other.*",)), worker("pay", ("pay*",))]
    )
    decided = plan(state, [forged, real], facts, now=NOW, policy=Policy(), topology=TOPOLOGY)
    assert decided is not None
    assert decided.state.unit("charge").output == {"real": True}
    assert [item for item, _ in decided.refused] == [forged]


def test_a_parked_result_fails_the_attempt_only_if_its_sender_could_answer_the_task() -> None:
    state, tokens = dispatched()
    notice = MessageParked(
        execution_id="e-1",
        message_type="TaskResult",
        token=tokens["charge"],
        queue=f"{NS}.decider.0",
        reason="rejected",
    )

    def report(sender: Sender | None) -> Plan:
        # The decider's Facts name the parked result's sender (orbit_model.parked.speaker).
        facts = Facts(definition=FLOW.ir, senders=[sender])
        decided = plan(state, [notice], facts, now=NOW, policy=Policy(), topology=TOPOLOGY)
        assert decided is not None
        return decided

    refused = report(worker("other", ("other.*",)))
    assert refused.events == []
    assert [error.code for _, error in refused.refused] == [ErrorCode.PERMISSION_DENIED]
    taken = report(worker("pay", ("payments.*",)))
    failed = evolve_all(state, taken.events).unit("charge")
    assert failed.error is not None
    assert failed.error.code == OutcomeCode.MESSAGE_PARKED
