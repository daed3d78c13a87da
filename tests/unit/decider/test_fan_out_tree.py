"""``ORBIT_MAX_FAN_OUT`` bounds a whole tree of executions, not each ``for`` step.

The probe of issue 31 (item 12) started one execution whose ``for`` over child
workflows each fanned out again: 12,000 units against a limit of 10,000, as the
limit was per step. Here a small world of pure executions runs such trees: each
execution's turn is :func:`orbit_model.plan.plan`, as in the decider service,
and the messages a turn sends (a task to a worker, a child's start, a child's
outcome to its parent) are delivered in order until nothing is left. Every
task answers at once; no tree here sleeps or waits.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orbit_model import compile_definition
from orbit_model.children import child_outcome, pin_children
from orbit_model.compiler import Definition
from orbit_model.decider import Limits
from orbit_model.events import StepFanOut, TaskFailure, WorkflowFailed
from orbit_model.inputs import start_execution
from orbit_model.messages import (
    CancelChild,
    DeciderInput,
    StartChild,
    TaskAssignment,
    TaskResult,
    TimerDue,
    Wake,
)
from orbit_model.plan import Facts, Policy, plan
from orbit_model.state import NO_EVENTS, ExecutionState, evolve, replay
from orbit_model.topology import Topology
from orbit_model.unreadable import fail_unreadable

TOPOLOGY = Topology("tree", 2)


@dataclass
class World:
    """Executions of pinned definitions, and the messages between them."""

    limit: int
    definitions: dict[str, Definition] = field(default_factory=dict)
    """By workflow name."""
    states: dict[str, ExecutionState] = field(default_factory=dict)
    inbox: deque[DeciderInput] = field(default_factory=deque)
    now: int = 1_000_000
    hold_children: bool = False
    """Whether child starts are held back (in :attr:`held`) instead of delivered."""
    held: list[StartChild] = field(default_factory=list)

    def register(self, yaml: str) -> None:
        definition = compile_definition(yaml)
        by_version = {
            (d.ir.name, d.ir.version): d for d in self.definitions.values()
        }  # children first: a parent is pinned to them
        pinned = pin_children(definition, by_version)
        self.definitions[pinned.ir.name] = pinned

    @property
    def by_hash(self) -> dict[str, Any]:
        return {d.hash: d.ir for d in self.definitions.values()}

    def start(self, workflow: str, input: Any, execution_id: str = "root") -> ExecutionState:
        definition = self.definitions[workflow]
        created = start_execution(definition.ir, definition.hash, execution_id, input)
        self.states[execution_id] = replay([created])
        self.inbox.append(Wake(execution_id=execution_id))
        self.run()
        return self.states[execution_id]

    def fire_timers(self) -> None:
        """Move the clock to the last timer due, fire every timer, and run."""
        due = [
            (execution_id, key, at)
            for execution_id, state in self.states.items()
            for key, at in state.timers.items()
        ]
        self.now = max([self.now, *(at for _, _, at in due)])
        for execution_id, key, at in due:
            self.inbox.append(TimerDue(execution_id=execution_id, key=key, due_at=at))
        self.run()

    def run(self, max_turns: int = 100_000) -> None:
        if not self.hold_children:
            self.inbox.extend(self.held)
            self.held.clear()
        for _ in range(max_turns):
            if not self.inbox:
                return
            self._turn(self.inbox.popleft())
        raise AssertionError("the tree never settled")

    def _turn(self, item: DeciderInput) -> None:
        state = self.states.get(item.execution_id, NO_EVENTS)
        definition = self.by_hash.get(state.definition_hash) if state.last_seq else None
        parents = {}
        if isinstance(item, StartChild) and item.parent_execution_id in self.states:
            parents[item.parent_execution_id] = self.states[item.parent_execution_id]
        facts = Facts(definition=definition, children=self.by_hash, parents=parents)
        policy = Policy(limits=Limits(max_fan_out=self.limit))
        turn = plan(state, [item], facts, now=self.now, policy=policy, topology=TOPOLOGY)
        if turn is None:
            return
        assert not turn.refused, turn.refused
        self.states[item.execution_id] = turn.state
        for outgoing in turn.messages:
            message = outgoing.message
            if isinstance(message, TaskAssignment):  # a worker answers at once
                answer = {"item": message.input, "from": message.unit}
                self.inbox.append(
                    TaskResult(
                        execution_id=message.execution_id, token=message.token, output=answer
                    )
                )
            elif isinstance(message, StartChild) and self.hold_children:
                self.held.append(message)
            elif isinstance(message, StartChild | TaskResult | CancelChild):
                self.inbox.append(message)

    def fanned_out(self) -> int:
        """The ``for`` elements of every execution of the world, all together."""
        return sum(len(event.items) for state in self.states.values() for event in _fan_outs(state))


def _fan_outs(state: ExecutionState) -> list[StepFanOut]:
    # The fold counts them; the test counts from the items each fanned-out unit holds.
    return [
        StepFanOut(unit=key, items=list(unit.items))
        for key, unit in state.units.items()
        if unit.items is not None
    ]


def leaf(name: str, width: int) -> str:
    """A workflow whose one ``for`` step fans out over ``width`` elements."""
    return f"""
orbit: 1
workflow: {name}
version: 1.0.0
tasks:
  work: {{version: "1"}}
steps:
  - id: each
    for: ${{ lists.range({width}) }}
    task: work
    input: ${{ item }}
"""


def parent(name: str, child: str, width: int, concurrency: int | None = None) -> str:
    """A workflow whose ``for`` step starts ``width`` children ``child``."""
    limit = f"\n    concurrency: {concurrency}" if concurrency else ""
    return f"""
orbit: 1
workflow: {name}
version: 1.0.0
steps:
  - id: each
    for: ${{ lists.range({width}) }}
    workflow: {child}@1.0.0{limit}
"""


def test_children_that_fan_out_cannot_pass_the_limit_together() -> None:
    # The probe's shape, a hundredth of its size: 12 + 12 x 100 = 1,212 units, limit 1,000.
    world = World(limit=1_000)
    world.register(leaf("leaf", 100))
    world.register(parent("root", "leaf", 12))
    root = world.start("root", None)
    assert world.fanned_out() <= 1_000
    assert root.status == "failed"
    assert root.error is not None
    assert root.error.code == "CHILD_FAILED"
    assert root.error.chain()[-1].code == "LIMIT_EXCEEDED"  # where it happened: a child
    refused = [
        state for key, state in world.states.items() if key != "root" and state.status == "failed"
    ]
    assert refused, "some child was refused its fan-out"
    error = refused[0].error
    assert error is not None
    assert "exceeds the fan-out left to this execution" in error.message
    assert "ORBIT_MAX_FAN_OUT bounds the for elements of a whole tree" in error.message


def test_a_tree_within_the_limit_runs_whole() -> None:
    world = World(limit=1_000)
    world.register(leaf("leaf", 50))
    world.register(parent("root", "leaf", 12))  # 12 + 600
    root = world.start("root", None)
    assert root.status == "completed"
    assert world.fanned_out() == 12 + 12 * 50
    assert len(root.output) == 12
    assert root.fan_out_spent == 12 + 12 * 50  # each child gave back what it did not use
    assert not any(unit.fan_out_shares for unit in root.units.values())  # none held


def test_what_a_child_did_not_use_comes_back_for_the_next() -> None:
    # One child at a time: each takes what is left, and gives back what it did not use.
    world = World(limit=100)
    world.register(leaf("leaf", 30))
    world.register(parent("root", "leaf", 3, concurrency=1))  # 3 + 90
    root = world.start("root", None)
    assert root.status == "completed"
    assert world.fanned_out() == 93
    shares = [state.fan_out_budget for key, state in sorted(world.states.items()) if key != "root"]
    assert shares == [97, 67, 37]  # what was left at each start


def test_grandchildren_count_against_the_same_limit() -> None:
    world = World(limit=200)
    world.register(leaf("leaf", 20))
    world.register(parent("middle", "leaf", 4))  # 4 + 80 each
    world.register(parent("root", "middle", 3))  # 3 + 3 x 84 = 255
    root = world.start("root", None)
    assert world.fanned_out() <= 200
    assert root.status == "failed"


def test_a_top_level_for_past_the_limit_keeps_its_message() -> None:
    world = World(limit=10)
    world.register(leaf("leaf", 11))
    root = world.start("leaf", None)
    assert root.status == "failed"
    assert root.error is not None
    assert "for over 11 elements exceeds the fan-out limit of 10" in root.error.message


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(1, 120),
    widths=st.lists(st.integers(0, 8), min_size=1, max_size=3),
    concurrency=st.one_of(st.none(), st.integers(1, 4)),
)
def test_no_tree_passes_the_limit(limit: int, widths: list[int], concurrency: int | None) -> None:
    """Trees of up to four levels (each a ``for`` over children, the last over tasks)
    fan out at most ``limit`` elements in all, whatever their widths."""
    world = World(limit=limit)
    world.register(leaf("level0", widths[0]))
    for depth, width in enumerate(widths[1:], start=1):
        world.register(parent(f"level{depth}", f"level{depth - 1}", width, concurrency))
    top = f"level{len(widths) - 1}"
    root = world.start(top, None)
    assert root.terminal
    assert world.fanned_out() <= limit
    demanded = 0
    for width in widths:
        demanded = width + width * demanded
    if demanded <= limit and concurrency is None and len(widths) == 1:
        assert root.status == "completed"


def test_children_started_together_split_what_is_left() -> None:
    # Two steps start their children in one round: each gets half, not all of it.
    world = World(limit=100)
    world.register(leaf("leaf", 60))
    world.register(
        """
orbit: 1
workflow: root
version: 1.0.0
steps:
  - id: one
    workflow: leaf@1.0.0
  - id: two
    workflow: leaf@1.0.0
    after: []
"""
    )
    root = world.start("root", None)
    assert world.fanned_out() == 0
    assert sorted(state.fan_out_budget for key, state in world.states.items() if key != "root") == [
        50,
        50,
    ]
    assert root.status == "failed"


def test_a_child_started_beside_a_running_one_gets_a_share() -> None:
    # b starts after t, while a's child runs: a kept half for it, not nothing.
    world = World(limit=10_000)
    world.register(leaf("leaf", 5))
    world.register(
        """
orbit: 1
workflow: root
version: 1.0.0
tasks:
  t: {version: "1"}
steps:
  - id: a
    workflow: leaf@1.0.0
  - id: t
    task: t
    after: []
  - id: b
    workflow: leaf@1.0.0
    after: [t]
"""
    )
    root = world.start("root", None)
    assert root.status == "completed"
    assert world.states["root:a"].fan_out_budget == 5_000


def test_a_for_after_a_child_waits_for_what_it_gives_back() -> None:
    # The for after a starts once a has answered: a gets all that is left, not half.
    world = World(limit=1_000)
    world.register(leaf("leaf", 600))
    world.register(
        """
orbit: 1
workflow: root
version: 1.0.0
tasks:
  t: {version: "1"}
steps:
  - id: a
    workflow: leaf@1.0.0
  - id: more
    for: ${ lists.range(10) }
    task: t
    after: [a]
"""
    )
    root = world.start("root", None)
    assert root.status == "completed"
    assert world.fanned_out() == 610
    assert world.states["root:a"].fan_out_budget == 1_000


def test_a_child_given_up_on_gives_back_when_it_answers_at_last() -> None:
    # The first attempt's child holds the whole budget; its parent gives up on it (the
    # attempt times out) and cancels it. Once its answer comes, stale as it is, what it
    # did not use comes back, and the retry's child gets it.
    world = World(limit=1_000)
    world.register(leaf("leaf", 5))
    world.register(
        """
orbit: 1
workflow: root
version: 1.0.0
steps:
  - id: c
    workflow: leaf@1.0.0
    timeout: 1s
    retry: {max_attempts: 2, initial_interval: 1s}
"""
    )
    world.hold_children = True  # the first child's start waits: its attempt times out
    root = world.start("root", None)
    assert root.units["c"].fan_out_shares == {1: 1_000}
    world.fire_timers()  # the attempt times out; the child is cancelled
    world.hold_children = False
    world.run()  # the held start creates the child cancelled; it answers, too late
    root = world.states["root"]
    assert root.units["c"].fan_out_shares.get(1) is None  # given back
    world.fire_timers()  # the retry
    root = world.states["root"]
    assert root.status == "completed", root.error
    assert world.states["root:c:attempt-2"].fan_out_budget == 1_000


def test_a_child_whose_history_cannot_be_read_keeps_its_share() -> None:
    # Its readable prefix may not show all its tree spent: the parent keeps the share.
    world = World(limit=100)
    world.register(leaf("leaf", 5))
    world.register(parent("root", "leaf", 1))
    world.hold_children = True
    world.start("root", None)
    [start] = world.held
    created = start_execution(
        world.definitions["leaf"].ir,
        start.definition_hash,
        start.execution_id,
        None,
        parent_execution_id=start.parent_execution_id,
        parent_token=start.parent_token,
        fan_out_budget=start.fan_out_budget,
    )
    child = replay([created])
    failure = TaskFailure(code="HISTORY_UNREADABLE", message="unreadable", retryable=False)
    ended = fail_unreadable(child, child.execution_id, failure, None, TOPOLOGY)
    [outcome] = ended.messages
    assert isinstance(outcome.message, TaskResult)
    assert outcome.message.fan_out_used is None
    known = child_outcome(evolve(child, WorkflowFailed(error=failure)), TOPOLOGY)
    assert isinstance(known.message, TaskResult)
    assert known.message.fan_out_used == 0
