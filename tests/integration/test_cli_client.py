"""The ``orbit`` client commands as a user runs them, against a live gateway.

The commands call ``asyncio.run``, which cannot run inside a running event
loop, so the whole Orbit (every service and a worker) runs in a thread of its
own with its own loop, and the tests are synchronous: they invoke the
commands with typer's ``CliRunner`` and read the API over plain HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from orbit_sdk import TaskContext, TaskError, task
from orbit_sdk.cli.app import build_app
from orbit_services.runtime.settings import Settings
from tests.e2e.stack import free_port, running_stack

from .conftest import OrbitEnv

app = build_app()

ORDER = """
orbit: 1
workflow: cli-order
version: 1.0.0
input: {type: object, required: [item], properties: {item: {type: string}}}
signals:
  approval: {type: object, required: [ok], properties: {ok: {type: boolean}}}
queries:
  packed: ${ steps.pack.output != null }
tasks:
  pack: {version: "1"}
steps:
  - id: pack
    task: pack
    input: {item: "${ input.item }"}
  - id: approval
    await: approval
output:
  parcel: ${ steps.pack.output.parcel }
  approved: ${ steps.approval.output.ok }
"""

QUICK = """
orbit: 1
workflow: cli-quick
version: 1.0.0
input: {type: object, properties: {item: {type: string, default: tea}}}
tasks:
  pack: {version: "1"}
steps:
  - id: pack
    task: pack
    input: {item: "${ input.item }"}
output: ${ steps.pack.output }
"""

BROKEN = """
orbit: 1
workflow: cli-broken
version: 1.0.0
tasks:
  explode: {version: "1"}
steps:
  - id: boom
    task: explode
    retry: {max_attempts: 1}
"""

# One step of each kind of waiting, all at once: a signal, a timer, a retry, a
# worker no one runs, and a step behind another.
WAITS = """
orbit: 1
workflow: cli-waits
version: 1.0.0
signals: {go: {}}
tasks:
  flaky: {version: "1"}
  orphan: {version: "3"}
  pack: {version: "1"}
steps:
  - id: hold
    await: go
    timeout: 1h
  - id: nap
    sleep: 1h
    after: []
  - id: flaky
    task: flaky
    retry: {max_attempts: 3, initial_interval: 1h}
    after: []
  - id: orphan
    task: orphan
    after: []
  - id: fan
    for: [1, 2]
    task: orphan
    input: ${ item }
    after: []
  - id: last
    task: pack
    input: {item: tea}
    after: [hold]
"""

# A step that succeeds and is undone when the next one fails.
UNDONE = """
orbit: 1
workflow: cli-undone
version: 1.0.0
tasks:
  pack: {version: "1"}
  explode: {version: "1"}
steps:
  - id: wrap
    task: pack
    input: {item: gift}
    compensate:
      task: pack
      input: {item: unwrap}
  - id: boom
    task: explode
    retry: {max_attempts: 1}
"""

CHILD = """
orbit: 1
workflow: cli-child
version: 1.0.0
tasks:
  pack: {version: "1"}
steps:
  - id: pack
    task: pack
    input: {item: child}
"""

PARENT = """
orbit: 1
workflow: cli-parent
version: 1.0.0
steps:
  - id: kid
    workflow: cli-child@1.0.0
"""


@task("pack", version="1")
async def pack(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"parcel": f"box of {inp['item']}"}


@task("explode", version="1")
async def explode(inp: Any, ctx: TaskContext) -> None:
    raise TaskError("BROKEN", "it broke", retryable=False)


@task("flaky", version="1")
async def flaky(inp: Any, ctx: TaskContext) -> None:
    raise TaskError("FLAKY", "not today")


@contextlib.contextmanager
def stack_in_thread(settings: Settings, tasks: Sequence[Any]) -> Iterator[str]:
    """:func:`running_stack` in a thread with its own event loop; yields the gateway's URL.

    The test's thread stays free of a running loop, so the commands' own
    ``asyncio.run`` works there.
    """
    ready = threading.Event()
    found: dict[str, Any] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        async with running_stack(settings, tasks) as stack:
            found.update(url=stack.client.url, stop=stop, loop=asyncio.get_running_loop())
            ready.set()
            await stop.wait()

    def main() -> None:
        try:
            asyncio.run(serve())
        except BaseException as error:  # handed to the test's thread below
            found["error"] = error
        finally:
            ready.set()

    thread = threading.Thread(target=main, name="orbit-stack", daemon=True)
    thread.start()
    ready.wait(30)
    if "url" not in found:
        thread.join(5)
        raise RuntimeError("the stack did not start") from found.get("error")
    try:
        yield str(found["url"])
    finally:
        found["loop"].call_soon_threadsafe(found["stop"].set)
        thread.join(30)
        if "error" in found:
            raise found["error"]


@pytest.fixture
def url(orbit_env: OrbitEnv) -> Iterator[str]:
    with stack_in_thread(orbit_env.settings, [pack, explode, flaky]) as gateway:
        yield gateway


Orbit = Callable[..., Result]


@pytest.fixture
def orbit(url: str, tmp_path: Path) -> Orbit:
    """Runs ``orbit ARGS… --url URL`` with the test workflows deployed."""
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(app, [*args, "--url", url])

    workflows = {"order": ORDER, "quick": QUICK, "broken": BROKEN, "waits": WAITS, "undone": UNDONE}
    for name, text in workflows.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    deployed = invoke("deploy", str(tmp_path))
    assert deployed.exit_code == 0, deployed.output
    return invoke


def _no_traceback(result: Result) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _execution(url: str, execution_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{url}/v1/executions/{execution_id}").json()
    return answer


def _until(
    url: str, execution_id: str, holds: Callable[[dict[str, Any]], bool], timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        execution = _execution(url, execution_id)
        if holds(execution):
            return execution
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {execution!r}")
        time.sleep(0.05)


def _steps_are(**statuses: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: all(e["steps"][step]["status"] == s for step, s in statuses.items())


def _start(orbit: Orbit, *args: str) -> str:
    execution_id = f"cli-{uuid.uuid4().hex[:8]}"
    result = orbit("start", *args, "--id", execution_id)
    assert result.exit_code == 0, result.output
    return execution_id


# -- deploy ----------------------------------------------------------------------------


def test_deploy_registers_children_first_then_reports_unchanged(url: str, tmp_path: Path) -> None:
    (tmp_path / "a-parent.yaml").write_text(PARENT)  # sorts first, but starts the child
    (tmp_path / "b-child.yaml").write_text(CHILD)
    runner = CliRunner()

    first = runner.invoke(app, ["deploy", str(tmp_path), "--url", url])
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["registered", "cli-child@1.0.0"],
        ["registered", "cli-parent@1.0.0"],
    ]
    assert all(line.split()[2].startswith("sha256:") for line in lines)

    again = runner.invoke(app, ["deploy", str(tmp_path / "b-child.yaml"), "--url", url, "--json"])
    assert again.exit_code == 0, again.output
    [answer] = json.loads(again.stdout)
    assert (answer["name"], answer["created"]) == ("cli-child", False)
    unchanged = runner.invoke(app, ["deploy", str(tmp_path / "b-child.yaml"), "--url", url])
    assert unchanged.stdout.startswith("unchanged cli-child@1.0.0 sha256:")


def test_deploy_sends_nothing_when_a_file_does_not_compile(url: str, tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(QUICK)
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "orbit: 1\nworkflow: w\nversion: 1.0.0\ntasks: {t: {version: '1'}}\n"
        "steps:\n  - id: a\n    task: t\n    retyr: {}\n"
    )
    result = CliRunner().invoke(app, ["deploy", str(good), str(broken), "--url", url])
    assert result.exit_code == 1
    assert f"{broken}:8: steps[0].retyr: unknown key 'retyr'" in result.stderr
    assert result.stdout == ""
    _no_traceback(result)
    assert httpx.get(f"{url}/v1/definitions").json() == []


# -- start -----------------------------------------------------------------------------


def test_start_with_json_input_and_an_id(orbit: Orbit, url: str) -> None:
    result = orbit("start", "cli-order", "--input", '{"item": "tea"}', "--id", "order-1")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "started order-1"
    assert _execution(url, "order-1")["input"] == {"item": "tea"}

    again = orbit("start", "cli-order", "--input", '{"item": "tea"}', "--id", "order-1", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == {"execution_id": "order-1", "created": False}

    # Another input under that id is a conflict, named; --use-existing takes the one there.
    other = orbit("start", "cli-order", "--input", '{"item": "milk"}', "--id", "order-1")
    assert other.exit_code == 1, other.output
    assert "EXECUTION_EXISTS" in other.output
    assert "another input" in other.output
    _no_traceback(other)
    existing = ("start", "cli-order", "--input", '{"item": "milk"}', "--id", "order-1")
    taken = orbit(*existing, "--use-existing")
    assert (taken.exit_code, taken.stdout.strip()) == (0, "already started order-1")
    assert _execution(url, "order-1")["input"] == {"item": "tea"}


def test_start_reads_the_input_from_a_file(orbit: Orbit, url: str, tmp_path: Path) -> None:
    source = tmp_path / "input.json"
    source.write_text('{"item": "cups"}')
    result = orbit("start", "cli-order", "--version", "1.0.0", "--input", f"@{source}", "--json")
    assert result.exit_code == 0, result.output
    started = json.loads(result.stdout)
    assert started["created"] is True
    assert _execution(url, started["execution_id"])["input"] == {"item": "cups"}


def test_bad_json_is_a_usage_error(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["start", "w", "--input", "{item: tea}", "--url", "http://x:1"])
    assert bad.exit_code == 2
    assert "--input" in bad.stderr
    assert "not valid JSON" in bad.stderr
    missing = runner.invoke(app, ["start", "w", "--input", f"@{tmp_path}/nope.json"])
    assert missing.exit_code == 2
    assert "cannot read" in missing.stderr
    signal = runner.invoke(app, ["signal", "id", "go", "[1,"])
    assert signal.exit_code == 2
    assert "not valid JSON" in signal.stderr
    for result in (bad, missing, signal):
        _no_traceback(result)


def test_start_batch_starts_every_line_and_reports_the_refused(
    orbit: Orbit, url: str, tmp_path: Path
) -> None:
    lines = [json.dumps({"execution_id": f"bulk-{i}", "input": {"item": "tea"}}) for i in range(5)]
    lines.insert(2, "")
    lines.append(json.dumps({"workflow": "cli-quick", "execution_id": "bulk-quick"}))
    lines.append(json.dumps({"execution_id": "bulk-bad", "input": {"item": 5}}))
    source = tmp_path / "starts.jsonl"
    source.write_text("\n".join(lines) + "\n")
    result = orbit("start", "cli-order", "--batch", str(source))
    assert result.exit_code == 1, result.output  # one was refused
    assert result.stdout.strip() == "started 6, already started 0, refused 1"
    assert "start 7 (bulk-bad): INVALID_INPUT:" in result.stderr
    assert "7/7" in result.stderr  # the progress bar, finished
    _no_traceback(result)
    assert _execution(url, "bulk-4")["input"] == {"item": "tea"}
    assert _execution(url, "bulk-quick")["workflow"] == "cli-quick"

    source.write_text("\n".join(lines[:3]) + "\n")
    again = orbit("start", "cli-order", "--batch", str(source), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == {
        "results": [{"execution_id": f"bulk-{i}", "created": False} for i in range(2)]
    }


def test_start_batch_sends_nothing_when_a_line_is_bad(url: str, tmp_path: Path) -> None:
    runner = CliRunner()
    source = tmp_path / "starts.jsonl"
    for text, message in (
        ('{"workflow": "w"}\n{oops}\n', "starts.jsonl:2: not valid JSON"),
        ('{"input": 1}\n', "starts.jsonl:1: no workflow"),
        ('{"workflow": "w", "inptu": 1}\n', "starts.jsonl:1: unknown field 'inptu'"),
        ("[1]\n", "starts.jsonl:1: a start is a JSON object"),
    ):
        source.write_text(text)
        result = runner.invoke(app, ["start", "--batch", str(source), "--url", url])
        assert result.exit_code == 2, result.output
        assert message in result.stderr
        _no_traceback(result)
    both = runner.invoke(app, ["start", "w", "--batch", str(source), "--id", "x", "--url", url])
    assert both.exit_code == 2
    assert "--batch takes no --id" in both.stderr
    assert httpx.get(f"{url}/v1/executions").json()["items"] == []


def test_start_wait_shows_progress_and_exits_0_when_completed(orbit: Orbit) -> None:
    result = orbit("start", "cli-quick", "--input", '{"item": "jam"}', "--wait")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("started ")
    assert "completed" in result.stdout
    assert '"parcel": "box of jam"' in result.stdout
    progress = result.stderr
    assert "pack" in progress
    assert "succeeded" in progress
    assert progress.rstrip().endswith("completed")


def test_start_wait_exits_1_when_the_execution_fails(orbit: Orbit) -> None:
    result = orbit("start", "cli-broken", "--wait")
    assert result.exit_code == 1, result.output
    assert "failed" in result.stdout
    assert "BROKEN: it broke" in result.stdout
    _no_traceback(result)

    as_json = orbit("start", "cli-broken", "--wait", "--json")
    assert as_json.exit_code == 1
    ended = json.loads(as_json.stdout)
    assert ended["status"] == "failed"
    assert ended["steps"]["boom"]["error"]["code"] == "BROKEN"


def test_start_wait_shows_compensations(orbit: Orbit) -> None:
    result = orbit("start", "cli-undone", "--wait")
    assert result.exit_code == 1, result.output
    assert "wrap ↳ compensate" in result.stderr
    [row] = [line for line in result.stdout.splitlines() if "↳ compensate" in line]
    assert "succeeded" in row
    assert "box of unwrap" in row


def test_start_wait_gives_up_after_its_timeout(orbit: Orbit) -> None:
    result = orbit("start", "cli-order", "--input", '{"item": "tea"}', "--wait", "--timeout", "1")
    assert result.exit_code == 1
    assert "TIMEOUT: execution " in result.stderr
    assert "approval" in result.stderr  # it was seen waiting for the signal
    _no_traceback(result)


def test_an_unknown_workflow_is_an_error(orbit: Orbit) -> None:
    result = orbit("start", "no-such-workflow")
    assert result.exit_code == 1
    assert result.stderr.startswith("WORKFLOW_NOT_FOUND: ")
    _no_traceback(result)


# -- get, history, list ----------------------------------------------------------------


def test_get_shows_what_each_step_waits_for(orbit: Orbit, url: str) -> None:
    execution_id = _start(orbit, "cli-waits")
    _until(
        url,
        execution_id,
        _steps_are(hold="scheduled", nap="scheduled", flaky="retry_wait", orphan="dispatched"),
    )
    result = orbit("get", execution_id)
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert rows["execution"].split()[1] == execution_id
    assert rows["workflow"].split()[1] == "cli-waits@1.0.0"
    assert rows["status"].split()[1] == "running"
    assert "signal go (times out at " in rows["hold"]
    assert "(in 59m" in rows["hold"]
    assert "timer at " in rows["nap"]
    assert "(in 59m" in rows["nap"]
    assert "retry_wait" in rows["flaky"]
    assert "retry (attempt 2) at " in rows["flaky"]
    assert "a worker for orphan@3 (none online)" in rows["orphan"]
    assert "dispatched" in rows["orphan"]
    assert "elements: 2 dispatched (a worker for orphan@3: none online)" in rows["fan"]
    assert "steps hold" in rows["last"]


def test_get_of_an_ended_execution_and_as_json(orbit: Orbit, url: str) -> None:
    execution_id = _start(orbit, "cli-quick", "--input", '{"item": "figs"}')
    _until(url, execution_id, lambda e: e["status"] == "completed")
    human = orbit("get", execution_id)
    assert human.exit_code == 0, human.output
    assert "completed" in human.stdout
    assert 'output     {"parcel": "box of figs"}' in human.stdout
    assert '→ {"parcel": "box of figs"}' in human.stdout

    as_json = orbit("get", execution_id, "--json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == _execution(url, execution_id)


def test_history_lists_every_event(orbit: Orbit, url: str) -> None:
    execution_id = _start(orbit, "cli-quick")
    _until(url, execution_id, lambda e: e["status"] == "completed")
    human = orbit("history", execution_id)
    assert human.exit_code == 0, human.output
    for event in ("WorkflowCreated", "StepDispatched", "StepSucceeded", "WorkflowCompleted"):
        assert event in human.stdout

    events = json.loads(orbit("history", execution_id, "--json").stdout)
    assert events[0]["seq"] == 1
    assert events[0]["type"] == "WorkflowCreated"
    assert events[-1]["type"] == "WorkflowCompleted"


def test_list_with_filters(orbit: Orbit, url: str) -> None:
    quick = [_start(orbit, "cli-quick") for _ in range(2)]
    order = _start(orbit, "cli-order", "--input", '{"item": "tea"}')
    for execution_id in quick:
        _until(url, execution_id, lambda e: e["status"] == "completed")

    every = orbit("list")
    assert every.exit_code == 0, every.output
    assert all(execution_id in every.stdout for execution_id in [*quick, order])

    running = orbit("list", "--status", "running")
    assert order in running.stdout
    assert not any(execution_id in running.stdout for execution_id in quick)

    by_workflow = json.loads(orbit("list", "--workflow", "cli-quick", "--json").stdout)
    assert sorted(item["execution_id"] for item in by_workflow["items"]) == sorted(quick)

    page = orbit("list", "--limit", "1")
    assert "more: --cursor " in page.stdout
    cursor = page.stdout.split("more: --cursor ")[1].split()[0]
    assert orbit("list", "--limit", "1", "--cursor", cursor).exit_code == 0

    assert orbit("list", "--status", "lost").exit_code == 2
    assert "no executions" in orbit("list", "--workflow", "cli-nothing").stdout


# -- signal, query, cancel, workers ----------------------------------------------------


def test_signal_and_query(orbit: Orbit, url: str) -> None:
    execution_id = _start(orbit, "cli-order", "--input", '{"item": "tea"}')
    _until(url, execution_id, _steps_are(approval="scheduled"))

    packed = orbit("query", execution_id, "packed")
    assert packed.exit_code == 0, packed.output
    assert packed.stdout.strip() == "true"
    assert json.loads(orbit("query", execution_id, "packed", "--json").stdout) == {"value": True}
    unknown = orbit("query", execution_id, "weather")
    assert unknown.exit_code == 1
    assert unknown.stderr.startswith("UNKNOWN_QUERY: ")

    invalid = orbit("signal", execution_id, "approval", '{"ok": "yes"}')
    assert invalid.exit_code == 1
    assert invalid.stderr.startswith("SIGNAL_PAYLOAD_INVALID: ")

    sent = orbit("signal", execution_id, "approval", '{"ok": true}')
    assert sent.exit_code == 0, sent.output
    assert sent.stdout.startswith(f"signal approval sent to {execution_id} (seq ")
    done = _until(url, execution_id, lambda e: e["status"] == "completed")
    assert done["output"] == {"parcel": "box of tea", "approved": True}


def test_cancel(orbit: Orbit, url: str) -> None:
    execution_id = _start(orbit, "cli-order", "--input", '{"item": "tea"}')
    result = orbit("cancel", execution_id, "--reason", "changed my mind")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"cancel requested for {execution_id}")
    _until(url, execution_id, lambda e: e["status"] == "cancelled")
    history = json.loads(orbit("history", execution_id, "--json").stdout)
    assert {"type": "CancelRequested", "reason": "changed my mind"} in [
        {"type": e["type"], **e["data"]} for e in history
    ]

    again = orbit("cancel", execution_id)
    assert again.exit_code == 1
    assert again.stderr.startswith("EXECUTION_FINISHED: ")


def test_workers(orbit: Orbit) -> None:
    human = orbit("workers")
    assert human.exit_code == 0, human.output
    [row] = [line for line in human.stdout.splitlines() if line.startswith("e2e")]
    assert "yes" in row
    assert "pack@1" in row
    [worker] = json.loads(orbit("workers", "--json").stdout)
    assert worker["worker_id"] == "e2e"
    assert {"task": "explode", "version": "1"} in worker["contracts"]


def test_deciders(orbit: Orbit) -> None:
    # The stack's one decider holds both partitions of the test's installation.
    human = orbit("deciders")
    assert human.exit_code == 0, human.output
    [row] = [line for line in human.stdout.splitlines() if " yes " in line]
    assert " 0-1 " in row
    assert "2 partitions, balanced" in human.stdout
    found = json.loads(orbit("deciders", "--json").stdout)
    assert found["balanced"] is True
    assert found["unowned"] == []
    [decider] = found["deciders"]
    assert decider["live"] is True
    assert decider["partitions"] == [0, 1]


# -- errors and the gateway's address --------------------------------------------------


def test_an_unknown_execution_is_not_found(url: str) -> None:
    runner = CliRunner()
    for command in (
        ["get", "nope"],
        ["history", "nope"],
        ["cancel", "nope"],
        ["query", "nope", "q"],
        ["signal", "nope", "s", "{}"],
    ):
        result = runner.invoke(app, [*command, "--url", url])
        assert result.exit_code == 1, (command, result.output)
        assert result.stderr.startswith("NOT_FOUND: "), (command, result.stderr)
        assert result.stdout == ""
        _no_traceback(result)


def test_an_unreachable_gateway_is_a_clear_error() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["list", "--url", nowhere])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"UNAVAILABLE: cannot reach the gateway at {nowhere}")
    _no_traceback(result)

    not_a_url = CliRunner().invoke(app, ["list", "--url", "gateway:8080"])
    assert not_a_url.exit_code == 2
    assert "is not an http:// or https:// URL" in not_a_url.stderr


def test_orbit_url_names_the_gateway(url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["workers", "--json"], env={"ORBIT_URL": url})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["worker_id"] == "e2e"
    elsewhere = runner.invoke(app, ["workers"], env={"ORBIT_URL": "http://127.0.0.1:1"})
    assert elsewhere.exit_code == 1
    assert "http://127.0.0.1:1" in elsewhere.stderr
