"""The operator views (orbit_model.views), computed from states the simulator reaches."""

from __future__ import annotations

from orbit_model.events import TaskFailure
from orbit_model.views import steps_view, view_json

from .decider.simulator import Simulator

FLAKY = """
orbit: 1
workflow: flaky
version: 1.0.0
tasks:
  t: {version: "1"}
steps:
  - id: a
    task: t
    retry: {max_attempts: 3, initial_interval: 1s}
"""

BROKE = TaskFailure(code="FLAKY", message="not today", retryable=True)


def test_a_step_shows_the_error_of_its_current_attempt_only() -> None:
    sim = Simulator.from_yaml(FLAKY, {})
    sim.start()
    sim.result("e-1:a:1", error=BROKE)
    waiting = view_json(steps_view(sim.state, sim.definition)["a"])
    assert waiting["status"] == "retry_wait"
    assert waiting["error"]["code"] == "FLAKY"  # the attempt that failed, about to be retried
    assert waiting["waiting_for"]["last_error"] == "FLAKY"
    sim.fire("retry:a", at=sim.state.units["a"].due_at)
    running = view_json(steps_view(sim.state, sim.definition)["a"])
    assert (running["status"], running["attempt"], running["error"]) == ("dispatched", 2, None)
    sim.result("e-1:a:2", {"ok": True})
    done = view_json(steps_view(sim.state, sim.definition)["a"])
    # The first attempt's failure is history now, not the step's state.
    assert (done["status"], done["error"], done["output"]) == ("succeeded", None, {"ok": True})


def test_a_failed_step_shows_its_error() -> None:
    sim = Simulator.from_yaml(FLAKY.replace("max_attempts: 3", "max_attempts: 1"), {})
    sim.start()
    sim.result("e-1:a:1", error=BROKE)
    failed = view_json(steps_view(sim.state, sim.definition)["a"])
    assert (failed["status"], failed["error"]["code"]) == ("failed", "FLAKY")
