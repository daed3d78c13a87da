"""Two deciders on the same executions at once: the history key keeps every history right.

Partition queues with a single active consumer normally keep two deciders
apart; this test takes that away and hands every input to two deciders at
the same moment, so they race on every append. The loser of each race
re-reads and decides again: every history stays gapless and every step
succeeds exactly once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

from orbit_model.events import StepDispatched, StepSucceeded, WorkflowCompleted
from orbit_model.inputs import start_execution
from orbit_model.messages import TaskResult, Wake
from orbit_model.state import replay
from orbit_services.decider.deciding import Deciding
from orbit_services.store import Append, AppendConflict, EventStore
from tests.integration.conftest import OrbitEnv

from .workflows import THREE_STEPS

EXECUTIONS = 30


class CountingStore(EventStore):
    """Counts the appends that lost a race."""

    conflicts = 0

    async def append(self, appends: Sequence[Append]) -> list[int]:
        try:
            return await super().append(appends)
        except AppendConflict:
            CountingStore.conflicts += 1
            raise


async def test_racing_deciders_keep_histories_gapless_and_steps_single(
    orbit_env: OrbitEnv,
) -> None:
    stores = [await CountingStore.connect(orbit_env.settings.database_url) for _ in range(2)]
    try:
        await stores[0].register_definition(THREE_STEPS)
        deciders = [Deciding(s, orbit_env.topology, orbit_env.settings) for s in stores]
        ids = [f"race-{n}" for n in range(EXECUTIONS)]
        for execution_id in ids:
            event = start_execution(THREE_STEPS.ir, THREE_STEPS.hash, execution_id, {"name": "x"})
            await stores[0].append([Append(execution_id, 0, [event], replay([event]))])

        async def both(inputs: list[Wake | TaskResult]) -> None:
            await asyncio.gather(*(decider.handle(inputs) for decider in deciders))

        await both([Wake(execution_id=i) for i in ids])
        for _ in range(3):  # one round per step: answer whatever is in flight
            inputs: list[Wake | TaskResult] = []
            for execution_id in ids:
                state = replay(e.event for e in await stores[0].read_events(execution_id))
                inputs += [
                    TaskResult(execution_id=execution_id, token=u.token, output={"greeting": "g"})
                    for u in state.units.values()
                    if u.token is not None
                ]
            await both(inputs)

        assert CountingStore.conflicts >= 1  # they really raced
        for execution_id in ids:
            stored = await stores[0].read_events(execution_id)
            assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
            events = [e.event for e in stored]
            succeeded = Counter(e.unit for e in events if isinstance(e, StepSucceeded))
            assert succeeded == {"a": 1, "b": 1, "c": 1}, execution_id
            assert sum(isinstance(e, StepDispatched) for e in events) == 3
            assert sum(isinstance(e, WorkflowCompleted) for e in events) == 1
    finally:
        for store in stores:
            await store.close()
