"""Reading what the steps of an execution wait for, and following one until it ends.

Used by ``orbit get`` (once) and ``orbit start --wait`` (until the end).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from rich.console import Console

from orbit_sdk.cli_render import status_text, step_line
from orbit_sdk.cli_steps import StepKind, due_times, needs_due_times, step_kinds, waiting_for
from orbit_sdk.client import TERMINAL, OrbitClient, OrbitClientError

POLL_SECONDS = 0.25
"""How often ``--wait`` looks at the execution: step changes do not end a ``?wait=`` early."""


async def step_kinds_of(
    client: OrbitClient, execution: Mapping[str, Any]
) -> dict[str, StepKind] | None:
    """The kinds of the execution's steps, from its definition; None if that cannot be read.

    The steps table is still useful without them (statuses, attempts, errors),
    so a definition that cannot be read does not fail the command.
    """
    try:
        ir = await client.definition(str(execution["workflow"]), str(execution["version"]))
    except OrbitClientError:
        return None
    return step_kinds(ir)


async def timers_of(
    client: OrbitClient, execution: Mapping[str, Any], kinds: Mapping[str, StepKind] | None
) -> dict[str, int] | None:
    """When the retries and sleeps the execution waits on are due (from its history), if any."""
    if kinds is None or not needs_due_times(execution, kinds):
        return None
    return due_times(await client.history(str(execution["execution_id"])))


def _signature(view: Mapping[str, Any]) -> str:
    """What must change for ``--wait`` to print a step again."""
    compensation = view.get("compensation") or {}
    return json.dumps(
        [
            view.get("status"),
            view.get("attempt"),
            view.get("elements"),
            compensation.get("status"),
            compensation.get("attempt"),
        ]
    )


async def follow(
    client: OrbitClient, execution_id: str, say: Console, timeout: float | None = None
) -> dict[str, Any]:
    """Print each step whose status changes, until the execution ends; the last view.

    Steps still pending when first seen are not printed: they have not moved yet.

    Raises:
        TimeoutError: It is still running after ``timeout`` seconds.
        OrbitClientError: A request failed.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    seen: dict[str, str] = {}
    kinds: dict[str, StepKind] | None = None
    while True:
        execution = await client.get(execution_id)
        if kinds is None:
            kinds = await step_kinds_of(client, execution) or {}
        steps: dict[str, Any] = execution.get("steps") or {}
        changed = {
            step_id: view
            for step_id, view in steps.items()
            if seen.get(step_id) != _signature(view)
            and (step_id in seen or view.get("status") != "pending")
        }
        if changed:
            due = await timers_of(client, execution, kinds)
            running = execution.get("status") == "running"
            for step_id, view in changed.items():
                seen[step_id] = _signature(view)
                wait = waiting_for(view, kinds.get(step_id), running=running, due=due)
                say.print(step_line(step_id, view, wait))
                if view.get("compensation"):
                    say.print(step_line(f"{step_id} ↳ compensate", view["compensation"], ""))
        if execution.get("status") in TERMINAL:
            line = status_text(str(execution.get("status")))
            line.stylize("bold")
            say.print(f"{execution_id} ", line, sep="", end="\n", markup=False)
            return execution
        if deadline is not None and loop.time() >= deadline:
            raise TimeoutError(
                f"execution {execution_id} is still {execution.get('status')} after {timeout:g}s"
            )
        await asyncio.sleep(POLL_SECONDS)
