"""W5 and W6: one huge execution (``--workloads W5,W6``; not in the default run).

- **W5**: one execution of a ``for`` over N/10 elements and one over N
  (default 10,000), concurrency 200, each element a no-op ``inc`` task. The
  figures per element at both sizes show whether the decider's cost per
  element grows with the fan-out (it must not: at most 1.5x).
- **W6**: one execution whose history is grown to about N events (default
  50,000) by two ``for`` steps of no-op tasks, then probed with 500 signals
  (buffered: nothing awaits them; the execution ends on a ``stop`` signal),
  sent one after another, each answered once the gateway appended it. The
  same probe runs first against an execution of about 1,000 events. The
  decider's time and CPU per signal, its memory, and what a cold load of
  each costs (snapshot and tail, against a replay from the first event) at
  both sizes.

The workflow language has no loop, so the history is grown by tasks and the
probes are signals: each probe is a gateway append plus a decider turn
(read the one new event, fold it, decide, nothing to write) on the big
state. The decider is restarted before W6, so its memory figures owe nothing
to what ran before (Python keeps the memory it once took).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import procs
from bench.counters import Counters
from bench.huge_state import cold_load
from bench.stack import BenchStack
from bench.workflows import _INC_CONTRACT
from bench.workloads import CheckFailed, Say, _check, _publish_starts, _rows, _ts, _wait_closed
from orbit_sdk import AmqpClient

W5_CONCURRENCY = 200
W6_PROBES = 500
W6_SMALL_EVENTS = 1_000
W6_HISTORY_LIMIT = 60_000
"""``ORBIT_MAX_HISTORY_EVENTS`` for a run with W6: its execution holds about 50,000
events, stop included, and may pass a default limit of 50,000."""

FOR_EACH = (
    """orbit: 1
workflow: bench-for
version: 1.0.0
input: {type: object, required: [numbers], properties: {numbers: {type: array}}}
tasks:"""
    + _INC_CONTRACT.rstrip()
    + f"""
defaults:
  timeout: 120s
steps:
  - id: each
    for: ${{ input.numbers }}
    concurrency: {W5_CONCURRENCY}
    task: inc
    input: {{value: '${{ item }}'}}
output:
  count: ${{ size(steps.each.output) }}
  outputs: ${{ steps.each.output }}
"""
)

LONG = (
    """orbit: 1
workflow: bench-long
version: 1.0.0
input: {type: object, required: [numbers], properties: {numbers: {type: array}}}
signals:
  tick: {type: object}
  stop: {type: object}
tasks:"""
    + _INC_CONTRACT.rstrip()
    + f"""
defaults:
  timeout: 120s
steps:
  - id: a
    for: ${{ input.numbers }}
    concurrency: {W5_CONCURRENCY}
    task: inc
    input: {{value: '${{ item }}'}}
  - id: b
    for: ${{ input.numbers }}
    concurrency: {W5_CONCURRENCY}
    task: inc
    input: {{value: '${{ item }}'}}
  - id: stop
    await: stop
output:
  count: ${{ size(steps.a.output) + size(steps.b.output) }}
"""
)

DEFINITIONS = {"bench-for": FOR_EACH, "bench-long": LONG}
_FIXED_EVENTS = 8
"""Events of a bench-long execution besides its elements' 3 each (WorkflowCreated, each
for step's fan-out and success, the await's schedule and success, the end)."""

_DECIDER_METRICS = (
    "orbit_decider_decide_seconds_sum",
    "orbit_decider_decide_seconds_count",
    "orbit_decider_commit_seconds_sum",
    "orbit_decider_batch_inputs_sum",
)


def _expected_for(size: int) -> dict[str, Any]:
    # Not a ``map`` over the outputs: the CEL library's map is quadratic (2.8 s over
    # 10,000 elements, 33 ms over 1,000), a cost of the expression and not of the fan-out.
    return {"count": size, "outputs": [{"value": n + 1} for n in range(size)]}


def _cpu(stack: BenchStack, name: str) -> float:
    return procs.cpu_seconds(stack.procs[name].pid) or 0.0


def _rss_mib(stack: BenchStack, name: str, field: str = "VmRSS") -> float | None:
    rss = procs.status_kib(stack.procs[name].pid, field)
    return None if rss is None else round(rss / 1024, 1)


async def _decider_metrics(counters: Counters) -> dict[str, float]:
    """The decider's batch counters (``/metrics`` of the one decider)."""
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(counters.metrics_urls["decider"])
        response.raise_for_status()
    found = dict.fromkeys(_DECIDER_METRICS, 0.0)
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name in found:
                found[sample.name] += sample.value
    return found


async def _one_for(stack: BenchStack, counters: Counters, say: Say, size: int) -> dict[str, Any]:
    eid = f"w5-{size}"
    before = await counters.snapshot()
    cpu0 = _cpu(stack, "decider")
    t0 = time.time()
    await _publish_starts(stack, "bench-for", [(eid, {"numbers": list(range(size))})])
    await _wait_closed(stack, counters, "bench-for", eid, 1, say, f"W5 {size}", 1800, t0)
    decider = _cpu(stack, "decider") - cpu0
    rows = await _rows(counters, "bench-for", eid)
    _check(rows, {eid: _expected_for(size)}, "W5")
    wall = _ts(rows[0]["closed_at"]) - t0
    after = await counters.snapshot()
    delta = counters.delta(before, after, size, wall)
    say(
        f"  W5 {size}: {wall:.2f} s ({size / wall:.0f} elements/s),"
        f" decider {decider * 1000 / size:.3f} ms CPU per element"
    )
    return {
        "elements": size,
        "concurrency": W5_CONCURRENCY,
        "wall_s": round(wall, 3),
        "wall_is": "bench's clock before the start → closed_at",
        "elements_per_s": round(size / wall, 1),
        "ms_per_element": round(wall * 1000 / size, 4),
        "decider_cpu_s": round(decider, 3),
        "decider_cpu_is": "the decider's CPU from before the start to the close seen",
        "decider_cpu_ms_per_element": round(decider * 1000 / size, 4),
        "decider_rss_mib_after": _rss_mib(stack, "decider"),
        "cost": delta,
    }


async def w5(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    say(f"W5: one for over {n // 10} and one over {n} elements, concurrency {W5_CONCURRENCY}")
    small = await _one_for(stack, counters, say, n // 10)
    large = await _one_for(stack, counters, say, n)
    return {
        "small": small,
        "large": large,
        "decider_cpu_per_element_large_over_small": round(
            large["decider_cpu_ms_per_element"] / small["decider_cpu_ms_per_element"], 3
        ),
        "time_per_element_large_over_small": round(
            large["ms_per_element"] / small["ms_per_element"], 3
        ),
        "target": "decider CPU per element: large at most 1.5x small",
        "checked": "both completed with the expected output",
    }


async def _grown(stack: BenchStack, counters: Counters, say: Say, eid: str, width: int) -> int:
    """Start a bench-long execution of two fors over ``width`` elements, and wait until
    it waits on ``stop``; its last seq then."""
    t0 = time.time()
    await _publish_starts(stack, "bench-long", [(eid, {"numbers": list(range(width))})])
    while True:
        stack.check_alive()
        seq = await counters.fetchval(
            "SELECT e.last_seq FROM executions AS e JOIN history AS h"
            " ON h.execution_id = e.execution_id AND h.seq = e.last_seq"
            " WHERE e.execution_id = $1 AND h.type = 'StepScheduled'"
            " AND h.data->>'unit' = 'stop'",
            eid,
        )
        if seq is not None:
            say(f"  W6 {eid}: {seq} events, waiting on stop, after {time.time() - t0:.1f} s")
            return int(seq)
        status = await counters.fetchval(
            "SELECT status FROM executions WHERE execution_id = $1", eid
        )
        if status not in (None, "running"):
            raise CheckFailed(f"W6: {eid} ended ({status}) before its probes")
        if time.time() - t0 > 1800:
            raise CheckFailed(f"W6: {eid} did not reach its await in time")
        await asyncio.sleep(0.5)


async def _probe(stack: BenchStack, counters: Counters, eid: str, seq: int) -> dict[str, Any]:
    """The probes, one after another; the decider's cost of them."""
    rss_before = _rss_mib(stack, "decider")
    before = await counters.snapshot()
    metrics0 = await _decider_metrics(counters)
    cpu0 = _cpu(stack, "decider")
    t0 = time.time()
    async with AmqpClient(stack.client_settings) as amqp:
        for number in range(W6_PROBES):
            await amqp.publish_signal(eid, "tick", {"n": number}, wait_reply=True)
    deadline = time.monotonic() + 120
    while True:  # every Wake decided
        metrics = await _decider_metrics(counters)
        inputs = "orbit_decider_batch_inputs_sum"
        decided = metrics[inputs] - metrics0[inputs]
        if decided >= W6_PROBES:
            break
        if time.monotonic() > deadline:
            raise CheckFailed(f"W6: the decider took {decided} of {W6_PROBES} Wakes in 120 s")
        await asyncio.sleep(0.05)
    decider = _cpu(stack, "decider") - cpu0
    wall = time.time() - t0
    after = await counters.snapshot()
    delta = counters.delta(before, after, W6_PROBES, wall)
    last = await counters.fetchval("SELECT last_seq FROM executions WHERE execution_id = $1", eid)
    if last != seq + W6_PROBES:
        raise CheckFailed(f"W6: {eid} has {last} events, expected {seq + W6_PROBES}")
    diff = {k: metrics[k] - metrics0[k] for k in _DECIDER_METRICS}
    batches = diff["orbit_decider_decide_seconds_count"] or 1
    return {
        "events_before": seq,
        "events_after": last,
        "signals": W6_PROBES,
        "wall_s": round(wall, 3),
        "signal_round_trip_ms": round(wall * 1000 / W6_PROBES, 3),
        "decider_batches": int(diff["orbit_decider_decide_seconds_count"]),
        "decider_inputs": int(diff["orbit_decider_batch_inputs_sum"]),
        "decider_ms_per_turn": round(diff["orbit_decider_decide_seconds_sum"] * 1000 / batches, 4),
        "decider_ms_per_turn_is": "orbit_decider_decide_seconds (load the new event, fold,"
        " decide) per batch; each batch here is one signal's Wake",
        "decider_commit_ms_per_turn": round(
            diff["orbit_decider_commit_seconds_sum"] * 1000 / batches, 4
        ),
        "decider_cpu_ms_per_signal": round(decider * 1000 / W6_PROBES, 4),
        "decider_cpu_is": "the decider's CPU from the first probe to the last Wake decided",
        "gateway_cpu_ms_per_signal": round(delta["cpu_seconds"]["gateway"] * 1000 / W6_PROBES, 4),
        "decider_rss_mib_before": rss_before,
        "decider_rss_mib": _rss_mib(stack, "decider"),
        "decider_peak_rss_mib": _rss_mib(stack, "decider", "VmHWM"),
        "gateway_rss_mib": _rss_mib(stack, "gateway"),
        "gateway_rss_is": "the gateway folds the state too, to accept each signal",
        "cost": delta,
    }


async def w6(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    say(f"W6: an execution of ~{W6_SMALL_EVENTS} events, then ~{n}; {W6_PROBES} signals each")
    proc = await stack.restart("decider")
    counters.pids["decider"] = proc.pid
    figures: dict[str, Any] = {"decider_rss_mib_fresh": _rss_mib(stack, "decider")}
    widths = {}
    for label, events in (("small", W6_SMALL_EVENTS), ("large", n)):
        eid = f"w6-{label}"
        widths[label] = max(1, (events - W6_PROBES - _FIXED_EVENTS) // 6)
        seq = await _grown(stack, counters, say, eid, widths[label])
        figures[label] = await _probe(stack, counters, eid, seq)
        figures[label]["cold_load"] = await cold_load(stack.settings.database_url, eid)
        f = figures[label]
        say(
            f"  W6 {label}: {f['events_after']} events, decider {f['decider_ms_per_turn']} ms"
            f" per turn, {f['decider_cpu_ms_per_signal']} ms CPU per signal,"
            f" RSS {f['decider_rss_mib']} MiB; cold load {f['cold_load']}"
        )
    async with AmqpClient(stack.client_settings) as amqp:
        for label in widths:
            await amqp.publish_signal(f"w6-{label}", "stop", {})
    t0 = time.time()
    await _wait_closed(stack, counters, "bench-long", "w6-", 2, say, "W6 stop", 300, t0)
    rows = await _rows(counters, "bench-long", "w6-")
    _check(rows, {f"w6-{k}": {"count": 2 * w} for k, w in widths.items()}, "W6")
    return {**figures, **_w6_ratios(figures)}


def _w6_ratios(figures: dict[str, Any]) -> dict[str, Any]:
    small, large = figures["small"], figures["large"]
    fresh = figures["decider_rss_mib_fresh"] or 0

    def ratio(key: str) -> float:
        return round(float(large[key]) / float(small[key]), 3)

    held = (large["decider_rss_mib"] or 0) - (small["decider_rss_mib"] or 0)
    events = large["events_after"] - small["events_after"]
    return {
        "decider_ms_per_turn_large_over_small": ratio("decider_ms_per_turn"),
        "decider_cpu_per_signal_large_over_small": ratio("decider_cpu_ms_per_signal"),
        "decider_rss_large_over_small": ratio("decider_rss_mib"),
        "decider_rss_kib_per_event": round(held * 1024 / events, 2),
        "decider_rss_kib_per_event_is": "(RSS after the large probes - after the small ones)"
        " / (their events' difference): the state, and what growing it left allocated",
        "decider_rss_mib_over_fresh": {
            "small": round((small["decider_rss_mib"] or 0) - fresh, 1),
            "large": round((large["decider_rss_mib"] or 0) - fresh, 1),
        },
        "target": "time per signal and memory: large at most 1.5x small",
        "history_limit": f"ORBIT_MAX_HISTORY_EVENTS={W6_HISTORY_LIMIT} for this run",
        "checked": "both completed with the expected output after stop",
    }
