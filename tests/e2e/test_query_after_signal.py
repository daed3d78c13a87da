"""A query answered after a signal's acknowledgement reflects that signal (read-your-writes).

The gateway records the signal and answers; the ``await`` step takes it only at
the decider's next turn. A query evaluated on the stored history alone, sent right
after the answer, read the step as unfinished in 3 to 9 of 24 to 40 tries in an
outside run; the gateway now reads the decisions of the next turn too.
"""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually
from tests.views import as_sent

from .stack import running_stack

TRIES = 200

WORKFLOW = """
orbit: 1
workflow: decided
version: 1.0.0
signals:
  decision: {type: object, required: [ok], properties: {ok: {type: boolean}}}
queries:
  decision: ${ steps.decision.output }
steps:
  - id: decision
    await: decision
  - id: later
    await: decision
"""


async def test_a_query_right_after_a_signal_sees_it_every_time(
    orbit_env: OrbitEnv, tmp_path: Path
) -> None:
    (tmp_path / "decided.yaml").write_text(WORKFLOW)
    async with running_stack(orbit_env.settings, services=("decider", "gateway")) as stack:
        client = stack.client
        await client.deploy(tmp_path / "decided.yaml")
        ids = [f"rw-{n}" for n in range(TRIES)]
        await client.start_batch([{"workflow": "decided", "execution_id": i} for i in ids])
        # Each execution waits at its first await before its signal is sent.
        for execution_id in ids:
            await eventually(
                lambda: as_sent(client.get(execution_id)),  # noqa: B023 - awaited in this turn
                lambda view: view["steps"]["decision"]["status"] == "scheduled",
                timeout=60,
                what=f"{execution_id} waits for its signal",
            )
        stale = []
        for n, execution_id in enumerate(ids):
            await client.signal(execution_id, "decision", {"ok": n % 2 == 0})
            value = await client.query(execution_id, "decision")
            if value != {"ok": n % 2 == 0}:
                stale.append((execution_id, value))
        assert stale == []
        # What the query read is what the decider then wrote.
        for n, execution_id in enumerate(ids[:10]):
            view = await eventually(
                lambda: as_sent(client.get(execution_id)),  # noqa: B023 - awaited in this turn
                lambda view: view["steps"]["decision"]["status"] == "succeeded",
                timeout=60,
            )
            assert view["steps"]["decision"]["output"] == {"ok": n % 2 == 0}
