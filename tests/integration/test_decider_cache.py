"""The decider trusts its cached state, unless an input says the history grew.

Another writer (the gateway, or a decider that held the partition before) may
have appended since the state was cached. Deciding on the stale state either
appends, and loses on the history's unique key (the batch is re-read and
decided again), or appends nothing, and is then re-read and decided again at
once. Either way nothing is lost.
"""

from __future__ import annotations

from prometheus_client import REGISTRY

from orbit_model import compile_definition
from orbit_model.events import StepAttemptUncertain, StepDispatched, StepSucceeded, TaskFailure
from orbit_model.inputs import accept_cancel, start_execution
from orbit_model.messages import DeliveryLost, TaskResult, TimerDue, Wake
from orbit_model.state import evolve, replay
from orbit_services.decider.deciding import Deciding
from orbit_services.store import Append, EventStore

from .conftest import OrbitEnv

RETRIED = compile_definition(
    """
orbit: 1
workflow: cached
version: 1.0.0
tasks:
  work: {version: "1"}
steps:
  - id: work
    task: work
    retry: {max_attempts: 3, initial_interval: 1ms}
"""
)


async def _history(store: EventStore, execution_id: str) -> list[object]:
    return [stored.event for stored in await store.read_events(execution_id)]


async def _tokens(store: EventStore, execution_id: str) -> list[str]:
    events = await _history(store, execution_id)
    return [e.token for e in events if isinstance(e, StepDispatched)]


async def test_an_input_the_stale_state_cannot_place_is_decided_on_the_fresh_one(
    orbit_env: OrbitEnv,
) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        await store.register_definition(RETRIED)
        created = start_execution(RETRIED.ir, RETRIED.hash, "c-1")
        await store.append([Append("c-1", 0, [created], replay([created]))])
        cached = Deciding(store, orbit_env.topology, orbit_env.settings)
        other = Deciding(store, orbit_env.topology, orbit_env.settings)
        await cached.handle([Wake(execution_id="c-1")])  # caches the state: work dispatched
        (first,) = await _tokens(store, "c-1")
        # Meanwhile the other decider fails that attempt and dispatches the retry.
        failure = TaskFailure(code="FLAKY", message="try again")
        await other.handle([TaskResult(execution_id="c-1", token=first, error=failure)])
        await other.handle([TimerDue(execution_id="c-1", key="retry:work", due_at=0)])
        first, second = await _tokens(store, "c-1")
        # The cached state does not know the second token: it would make nothing of
        # the lost delivery; the fresh state makes it uncertain and redelivers it.
        await cached.handle([DeliveryLost(execution_id="c-1", token=second)])
        history = await _history(store, "c-1")
        lost = [e for e in history if isinstance(e, StepAttemptUncertain)]
        assert [e.token for e in lost] == [second]
        assert len(await _tokens(store, "c-1")) == 3
        assert cached.states.get("c-1") == replay(history)  # caught up
    finally:
        await store.close()


async def test_a_decision_on_a_stale_state_loses_on_the_key_and_is_made_again(
    orbit_env: OrbitEnv,
) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        await store.register_definition(RETRIED)
        created = start_execution(RETRIED.ir, RETRIED.hash, "c-2")
        await store.append([Append("c-2", 0, [created], replay([created]))])
        cached = Deciding(store, orbit_env.topology, orbit_env.settings)
        await cached.handle([Wake(execution_id="c-2")])
        (token,) = await _tokens(store, "c-2")
        # The gateway records a cancel; its Wake has not arrived yet.
        state = replay(await _history(store, "c-2"))
        events = accept_cancel(state, "stop")
        after = state
        for event in events:
            after = evolve(after, event)
        await store.append([Append("c-2", state.last_seq, events, after)])
        # The result is decided on the stale state first, loses, and is decided again.
        conflicts = REGISTRY.get_sample_value("orbit_decider_conflicts_total") or 0.0
        await cached.handle([TaskResult(execution_id="c-2", token=token, output={"n": 1})])
        assert REGISTRY.get_sample_value("orbit_decider_conflicts_total") == conflicts + 1
        history = await _history(store, "c-2")
        seqs = [stored.seq for stored in await store.read_events("c-2")]
        assert seqs == list(range(1, len(seqs) + 1))
        assert any(type(e).__name__ == "CancelRequested" for e in history)
        assert sum(isinstance(e, StepSucceeded) for e in history) == 1
        assert replay(history).status == "cancelled"
    finally:
        await store.close()
