"""The state cache: executions' latest known states, brought up to date from their histories.

One class for every service that folds histories (the decider, the
dispatcher, the gateway). A state is brought up to date by reading only the
events after its last seq, for many executions in one query; a state read
before is so never replayed from the start again, and one not held is read
from its last snapshot and the events after it (:mod:`.snapshots`). The least recently used
states go first when the cache is full.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence

from orbit_model.state import NO_EVENTS, ExecutionState
from orbit_services.store.history import HistoryUnreadable, fold
from orbit_services.store.interface import Store


class StateCache:
    """Recently seen executions' states over one store.

    Args:
        store: Where the histories are.
        capacity: States kept at most.
        keep_terminal: Whether a finished execution's state is kept (the decider
            takes no more decisions for one, and keeps memory for live ones).
    """

    def __init__(self, store: Store, capacity: int, *, keep_terminal: bool = True) -> None:
        self.store = store
        self.capacity = capacity
        self.keep_terminal = keep_terminal
        self._states: OrderedDict[str, ExecutionState] = OrderedDict()

    def get(self, execution_id: str) -> ExecutionState | None:
        """The state as last cached, without reading the history; None if not cached."""
        state = self._states.get(execution_id)
        if state is not None:
            self._states.move_to_end(execution_id)
        return state

    def put(self, execution_id: str, state: ExecutionState) -> None:
        """Remember ``state`` (one the caller knows is current, such as one it just wrote)."""
        if state.terminal and not self.keep_terminal:
            self._states.pop(execution_id, None)
            return
        self._states[execution_id] = state
        self._states.move_to_end(execution_id)
        while len(self._states) > self.capacity:
            self._states.popitem(last=False)

    def clear(self) -> None:
        """Forget every state (after a reconnect: others may have written meanwhile)."""
        self._states.clear()

    def drop_where(self, predicate: Callable[[str], bool]) -> int:
        """Forget every state whose execution id ``predicate`` holds for (those of a
        partition a decider gives up or takes); how many."""
        gone = [execution_id for execution_id in self._states if predicate(execution_id)]
        self.drop(gone)
        return len(gone)

    def drop(self, execution_ids: Collection[str]) -> None:
        """Forget these states (after a failure that may come from a stale one)."""
        for execution_id in execution_ids:
            self._states.pop(execution_id, None)

    async def current(
        self, execution_ids: Sequence[str], trusted: Collection[str] = ()
    ) -> dict[str, ExecutionState]:
        """The state of each execution: as cached if it is in ``trusted`` (and cached),
        else brought up to date from the history (one query for all of them).

        An execution with no events has the empty state (``last_seq`` 0); it is not
        cached. The others are cached as read.

        Raises:
            HistoryUnreadable: The history of one of them holds an event that no
                longer decodes.
        """
        states, unreadable = await self.current_or_unreadable(execution_ids, trusted)
        if unreadable:
            raise next(iter(unreadable.values()))
        return states

    async def current_or_unreadable(
        self, execution_ids: Sequence[str], trusted: Collection[str] = ()
    ) -> tuple[dict[str, ExecutionState], dict[str, HistoryUnreadable]]:
        """As :meth:`current`, but an execution whose history no longer decodes is
        answered apart, by why, rather than failing the read of all the others."""
        known = {execution_id: self.get(execution_id) for execution_id in execution_ids}
        states: dict[str, ExecutionState] = {}
        unreadable: dict[str, HistoryUnreadable] = {}
        after: dict[str, int] = {}
        for execution_id, state in known.items():
            if state is not None and execution_id in trusted:
                states[execution_id] = state
            else:
                after[execution_id] = state.last_seq if state else 0
        # From the last snapshot where it is newer than what is held, then the events.
        loaded = await self.store.snapshots.read(after)
        new_events = loaded.events
        for execution_id in after:
            before = loaded.snapshots.get(execution_id) or known[execution_id] or NO_EVENTS
            try:
                current = fold(execution_id, before, new_events[execution_id])
            except HistoryUnreadable as error:
                # Not cached: the events before the bad one are read again next time.
                unreadable[execution_id] = error
                continue
            states[execution_id] = current
            if current.last_seq > 0:
                self.put(execution_id, current)
        return states, unreadable

    def __len__(self) -> int:
        return len(self._states)
