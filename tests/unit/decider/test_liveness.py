"""Schedule and heartbeat deadlines: checked when due, against who holds the delivery."""

from __future__ import annotations

from orbit_model.events import AttemptAlive, RetryScheduled, StepAttemptFailed, StepDispatched
from orbit_model.inputs import accept_liveness_check, accept_timer

from .simulator import Hang, Simulator
from .test_scenarios import SECOND, T0, make, tok

BODY = """
tasks: {t: {version: "1"}}
steps:
  - id: a
    task: t
    schedule_timeout: 2s
    heartbeat_timeout: 5s
    retry: {max_attempts: 2, initial_interval: 1s}
"""


def _started() -> Simulator:
    sim = make(BODY)
    sim.start()
    return sim


def test_dispatch_sets_both_deadlines() -> None:
    sim = _started()
    first = next(e for e in sim.history if isinstance(e, StepDispatched))
    assert (first.schedule_deadline_at, first.heartbeat_timeout_ms, first.heartbeat_check_at) == (
        T0 + 2 * SECOND,
        5 * SECOND,
        T0 + 5 * SECOND,
    )
    assert sim.state.timers == {
        f"schedule:{tok('a')}": T0 + 2 * SECOND,
        f"heartbeat:{tok('a')}": T0 + 5 * SECOND,
    }


def test_nothing_happens_before_a_deadline_or_through_the_plain_timer_path() -> None:
    sim = _started()
    key = f"schedule:{tok('a')}"
    assert accept_liveness_check(sim.state, key, T0 + 2 * SECOND - 1, None) == []
    assert accept_timer(sim.state, key, T0 + 10 * SECOND) == []


def test_a_delivery_no_worker_took_times_out_in_the_queue_and_is_retried() -> None:
    sim = _started()
    events = accept_liveness_check(sim.state, f"schedule:{tok('a')}", T0 + 2 * SECOND, None)
    assert len(events) == 1
    failed = events[0]
    assert isinstance(failed, StepAttemptFailed)
    assert failed.error.code == "SCHEDULE_TIMEOUT"
    sim.now = T0 + 2 * SECOND
    sim.append(events)
    assert isinstance(sim.settle()[0], RetryScheduled)


def test_a_taken_delivery_drops_its_schedule_deadline() -> None:
    sim = _started()
    now = T0 + 2 * SECOND
    events = accept_liveness_check(sim.state, f"schedule:{tok('a')}", now, T0 + SECOND)
    assert events == [
        AttemptAlive(unit="a", token=tok("a"), started=True, heartbeat_check_at=T0 + 5 * SECOND)
    ]
    sim.append(events)
    assert sim.state.timers == {f"heartbeat:{tok('a')}": T0 + 5 * SECOND}


def test_a_task_that_heartbeats_stays_alive_and_one_that_stops_times_out() -> None:
    sim = _started()
    key = f"heartbeat:{tok('a')}"
    # Heartbeated 1 s before the check: look again 5 s after that heartbeat.
    alive = accept_liveness_check(sim.state, key, T0 + 5 * SECOND, T0 + 4 * SECOND)
    assert alive == [
        AttemptAlive(unit="a", token=tok("a"), started=True, heartbeat_check_at=T0 + 9 * SECOND)
    ]
    sim.append(alive)
    assert sim.state.timers == {key: T0 + 9 * SECOND}
    # Silent since then: at the next check it has gone 5 s without a heartbeat.
    dead = accept_liveness_check(sim.state, key, T0 + 9 * SECOND, T0 + 4 * SECOND)
    assert len(dead) == 1
    assert isinstance(dead[0], StepAttemptFailed)
    assert dead[0].error.code == "HEARTBEAT_TIMEOUT"


def test_a_queued_delivery_is_not_timed_out_by_its_heartbeat_deadline() -> None:
    sim = _started()
    key = f"heartbeat:{tok('a')}"
    events = accept_liveness_check(sim.state, key, T0 + 5 * SECOND, None)
    assert events == [
        AttemptAlive(unit="a", token=tok("a"), started=False, heartbeat_check_at=T0 + 10 * SECOND)
    ]


def test_a_hung_worker_is_timed_out_in_the_simulator() -> None:
    def hang(_input: object, _delivery: object) -> object:
        raise Hang

    sim = make(BODY, {"t": hang})
    sim.start()
    state = sim.run()
    codes = [e.error.code for e in sim.history if isinstance(e, StepAttemptFailed)]
    assert codes == ["HEARTBEAT_TIMEOUT", "HEARTBEAT_TIMEOUT"]
    assert state.status == "failed"
