"""The decider service against the real broker and Postgres, with the test playing the worker.

The test appends starts directly to the store (as the gateway does), reads
what the decider sends to the dispatch queue, and answers with results on
the decider's own queues.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

from orbit_model import compile_definition
from orbit_model.events import StaleResultIgnored, StepAttemptFailed, TaskFailure
from orbit_model.messages import DeliveryLost, TaskResult, Wake

from .conftest import OrbitEnv
from .eventually import eventually
from .rig import Rig, decider_rig

EXAMPLES = Path(__file__).parents[2] / "examples"
HELLO = compile_definition((EXAMPLES / "hello-world.yaml").read_text())


@pytest.fixture
async def rig(orbit_env: OrbitEnv) -> AsyncIterator[Rig]:
    async with decider_rig(orbit_env.settings, orbit_env.topology) as rig:
        await rig.store.register_definition(HELLO)
        yield rig


async def test_a_start_is_dispatched_and_a_result_completes_it(rig: Rig) -> None:
    await rig.start(HELLO, "e-1", {"name": "ada"})
    task = await rig.next_dispatch()
    assert (task.execution_id, task.unit, task.task, task.task_version) == (
        "e-1",
        "greet",
        "greet",
        "1",
    )
    assert (task.attempt, task.idempotency_key, task.input) == (1, "e-1:greet", {"name": "ada"})
    assert task.result_route == rig.topology.results_route("e-1")
    await rig.send(TaskResult(execution_id="e-1", token=task.token, output={"greeting": "hi"}))
    await eventually(lambda: rig.status("e-1"), lambda s: s == "completed", what="completion")
    row = await rig.store.execution("e-1")
    assert row is not None
    assert row.output == {"greeting": "hi"}
    assert row.closed_at is not None


async def test_a_duplicate_result_is_recorded_as_stale(rig: Rig) -> None:
    await rig.start(HELLO, "e-2", {})
    task = await rig.next_dispatch()
    result = TaskResult(execution_id="e-2", token=task.token, output={"greeting": "hi"})
    await rig.send(result)
    await eventually(lambda: rig.status("e-2"), lambda s: s == "completed")
    # A terminal execution takes nothing more; a result for another unresolved unit token
    # is stale. Start a second execution to check the stale record while it runs.
    await rig.start(HELLO, "e-3", {})
    first = await rig.next_dispatch()
    await rig.send(TaskResult(execution_id="e-3", token=first.token, error=_flaky()))
    retry_wait = await eventually(lambda: rig.state("e-3"), lambda s: s.unit("greet").due_at)
    assert retry_wait.unit("greet").status == "retry_wait"
    # The same failure delivered again is no longer the delivery in flight: stale.
    await rig.send(TaskResult(execution_id="e-3", token=first.token, error=_flaky()))
    history = await eventually(
        lambda: rig.store.read_events("e-3"),
        lambda events: any(isinstance(e.event, StaleResultIgnored) for e in events),
        what="a stale record",
    )
    assert sum(isinstance(e.event, StepAttemptFailed) for e in history) == 1


async def test_a_result_under_a_token_its_sender_never_received_is_not_applied(
    rig: Rig,
) -> None:
    """A forger that knows the execution id and the step guesses ``ID:UNIT:N``; with the
    execution's delivery secret the real token has a MAC it cannot guess."""
    await rig.start(HELLO, "e-forged", {}, delivery_secret="s" * 32)
    task = await rig.next_dispatch()
    assert task.token.startswith("e-forged:greet:1.")
    for token in ("e-forged:greet:1", "e-forged:greet:1.AAAAAAAAAAAAAAAAAAAAAA"):
        await rig.send(TaskResult(execution_id="e-forged", token=token, output={"greeting": "x"}))
    # The decider took both: each recorded as stale, nothing else changed.
    await eventually(
        lambda: rig.store.read_events("e-forged"),
        lambda events: sum(isinstance(e.event, StaleResultIgnored) for e in events) == 2,
        what="both forged results recorded as stale",
    )
    assert (await rig.state("e-forged")).unit("greet").status == "dispatched"
    await rig.send(TaskResult(execution_id="e-forged", token=task.token, output={"greeting": "hi"}))
    await eventually(lambda: rig.status("e-forged"), lambda s: s == "completed")
    row = await rig.store.execution("e-forged")
    assert row is not None
    assert row.output == {"greeting": "hi"}
    history = await rig.store.read_events("e-forged")
    stale = [e.event for e in history if isinstance(e.event, StaleResultIgnored)]
    assert [(s.unit, s.token) for s in stale] == [
        ("greet", "e-forged:greet:1"),
        ("greet", "e-forged:greet:1.AAAAAAAAAAAAAAAAAAAAAA"),
    ]
    assert {s.reason for s in stale} == {"a token this execution never issued"}


async def test_a_lost_delivery_a_worker_still_holds_is_not_dispatched_again(
    rig: Rig,
) -> None:
    """A DeliveryLost for a token an open session holds (forged, or stale after a
    redelivery) changes nothing; once no session holds it, it is dispatched again."""
    await rig.start(HELLO, "e-lost", {}, delivery_secret="s" * 32)
    task = await rig.next_dispatch()
    inflight = json.dumps([{"execution_id": "e-lost", "token": task.token}])
    await rig.database.execute(
        "INSERT INTO worker_sessions (session_id, worker_id, runtime, contracts, inflight)"
        " VALUES ('s-1', 'w-1', 'python', '[]', $1::jsonb)",
        inflight,
    )
    lost = DeliveryLost(execution_id="e-lost", token=task.token, reason="forged")
    await rig.decided(lost)  # it changes nothing
    assert (await rig.state("e-lost")).unit("greet").token == task.token
    await rig.database.execute("UPDATE worker_sessions SET closed_at = now()")
    await rig.send(lost)
    again = await rig.next_dispatch()
    assert again.token != task.token
    assert again.attempt == task.attempt


async def test_an_output_breaking_the_contract_fails_the_attempt(rig: Rig) -> None:
    await rig.start(HELLO, "e-4", {})
    task = await rig.next_dispatch()
    await rig.send(TaskResult(execution_id="e-4", token=task.token, output={"greeting": 42}))
    state = await eventually(lambda: rig.state("e-4"), lambda s: s.unit("greet").error)
    error = state.unit("greet").error
    assert error is not None
    assert error.code == "OUTPUT_CONTRACT_VIOLATION"


async def test_a_result_with_an_unknown_token_changes_nothing_but_is_recorded(rig: Rig) -> None:
    await rig.start(HELLO, "e-5", {})
    await rig.next_dispatch()
    before = await rig.state("e-5")
    await rig.send(TaskResult(execution_id="e-5", token="e-5:greet:99", output={}))
    after = await eventually(
        lambda: rig.state("e-5"), lambda s: s.last_seq > before.last_seq, what="the result"
    )
    await rig.send(Wake(execution_id="e-5"))
    await eventually(lambda: _acked(rig), what="the wake to be taken")
    assert after.last_seq == before.last_seq + 1  # the StaleResultIgnored, nothing else
    assert after.unit("greet") == before.unit("greet")
    assert (await rig.state("e-5")).last_seq == after.last_seq
    last = (await rig.store.read_events("e-5"))[-1].event
    assert isinstance(last, StaleResultIgnored)
    assert last.token == "e-5:greet:99"


async def test_a_poison_message_is_parked_and_the_decider_keeps_serving(rig: Rig) -> None:
    route = rig.topology.decider_route("e-6")
    exchange = await rig.channel.get_exchange(route.exchange)
    await exchange.publish(aio_pika.Message(b"not json"), route.routing_key)
    parked = await rig.channel.get_queue(rig.topology.dead_letter)

    async def probe() -> aio_pika.abc.AbstractIncomingMessage | None:
        return await parked.get(fail=False, no_ack=True)

    message = await eventually(probe, lambda m: m is not None, what="a parked message")
    assert message is not None
    assert message.body == b"not json"
    await rig.start(HELLO, "e-6", {})
    assert (await rig.next_dispatch()).execution_id == "e-6"


async def test_many_executions_are_decided_in_batches(rig: Rig) -> None:
    count = 60
    await asyncio.gather(*(rig.start(HELLO, f"b-{n}", {}) for n in range(count)))
    tasks = [await rig.next_dispatch() for _ in range(count)]
    await asyncio.gather(
        *(
            rig.send(
                TaskResult(execution_id=t.execution_id, token=t.token, output={"greeting": ""})
            )
            for t in tasks
        )
    )

    async def completed() -> int:
        rows = await rig.store.list_executions(status="completed", limit=1000)
        return len(rows)

    await eventually(completed, lambda n: n == count, what="all completions")
    assert rig.decider.batches < 2 * count  # inputs that arrived together were committed together


def _flaky() -> TaskFailure:
    return TaskFailure(code="FLAKY", message="try again", retryable=True)


async def _acked(rig: Rig) -> bool:
    for partition in range(rig.topology.partitions):
        queue = await rig.channel.declare_queue(rig.topology.decider_queue(partition), passive=True)
        if queue.declaration_result.message_count:
            return False
    return True


async def test_an_output_that_cannot_be_stored_fails_the_attempt(rig: Rig) -> None:
    await rig.start(HELLO, "e-7", {})
    task = await rig.next_dispatch()
    await rig.send(TaskResult(execution_id="e-7", token=task.token, output={"greeting": "a\x00b"}))
    state = await eventually(lambda: rig.state("e-7"), lambda s: s.unit("greet").error)
    error = state.unit("greet").error
    assert error is not None
    assert (error.code, error.retryable) == ("INVALID_OUTPUT", False)
    assert "NUL character at $.greeting" in error.message
    assert state.status == "failed"
