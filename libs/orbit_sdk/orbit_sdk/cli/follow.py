"""Reading what the steps of an execution wait for, and following one until it ends.

Used by ``orbit get`` (once) and ``orbit start --wait`` (until the end).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from rich.console import Console

from orbit_sdk.cli.render import status_text, step_line
from orbit_sdk.cli.steps import waiting_for
from orbit_sdk.client import TERMINAL, OrbitClient

if TYPE_CHECKING:
    from orbit_model.views import ExecutionView, StepView

POLL_SECONDS = 0.25
"""How long each look of ``--wait`` waits (``?wait=``): the ending answers at once,
step changes do not, so they are shown at most this late."""


def _signature(view: StepView) -> str:
    """What must change for ``--wait`` to print a step again."""
    compensation = view.compensation
    wait = view.waiting_for
    return json.dumps(
        [
            view.status,
            view.attempt,
            view.elements,
            None if wait is None else wait.model_dump(mode="json", exclude_unset=True),
            None if compensation is None else compensation.status,
            None if compensation is None else compensation.attempt,
        ]
    )


async def follow(
    client: OrbitClient, execution_id: str, say: Console, timeout: float | None = None
) -> ExecutionView:
    """Print each step whose status changes, until the execution ends; the last view.

    Steps still pending when first seen are not printed: they have not moved yet.

    Raises:
        TimeoutError: It is still running after ``timeout`` seconds.
        OrbitClientError: A request failed.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    seen: dict[str, str] = {}
    while True:
        look = (
            POLL_SECONDS
            if deadline is None
            else max(0.0, min(POLL_SECONDS, deadline - loop.time()))
        )
        execution = await client.get(execution_id, wait=look)
        changed = {
            step_id: view
            for step_id, view in execution.steps.items()
            if seen.get(step_id) != _signature(view)
            and (step_id in seen or view.status != "pending")
        }
        if changed:
            for step_id, view in changed.items():
                seen[step_id] = _signature(view)
                wait = waiting_for(view)
                say.print(step_line(step_id, view, wait))
                if view.compensation:
                    say.print(step_line(f"{step_id} ↳ compensate", view.compensation, ""))
        if execution.status in TERMINAL:
            line = status_text(execution.status)
            line.stylize("bold")
            say.print(f"{execution_id} ", line, sep="", end="\n", markup=False)
            return execution
        if deadline is not None and loop.time() >= deadline:
            raise TimeoutError(
                f"execution {execution_id} is still {execution.status} after {timeout:g}s"
            )
