"""Celery, its ordinary way: RabbitMQ as the broker, the rpc result backend, a prefork worker.

``python -m bench.peers.celery_peer --amqp-url URL --output FILE [--w1 N --w3 N]``
(in the peers' venv) starts ``celery worker --pool=prefork --concurrency=2`` on
a queue of its own, runs W1 and W3 against it and stops it. A workflow is a
``chain`` of ``inc`` tasks: the client sends it with ``apply_async`` and waits
with ``AsyncResult.get`` (the rpc backend answers on the client's own reply
queue; each client thread has its backend, as Celery keeps one per thread).
W2 is not run: a fan-out joined by a task is a ``chord``, and the rpc backend
does not support chords (Celery raises NotImplementedError); a backend that does
(Redis, a database) is not Celery with RabbitMQ alone.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from typing import Any

from celery import Celery, chain

from bench.peers import shapes

QUEUE = os.environ.get("BENCH_PEER_CELERY_QUEUE", "orbit-bench-peer")
app = Celery(
    "orbit_bench_peer",
    broker=os.environ.get("BENCH_PEER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"),
    backend="rpc://",
)
app.conf.update(task_default_queue=QUEUE, worker_hijack_root_logger=False)


@app.task(name="inc")  # one name whether this module is __main__ (the client) or not
def inc(value: int) -> int:
    return value + 1


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] Celery: {line}", file=sys.stderr, flush=True)


def _sequential(value: int, steps: int) -> int:
    flow = chain(inc.s(value), *(inc.s() for _ in range(steps - 1)))
    return int(flow.apply_async().get(timeout=60))


def run(n_w1: int, n_w3: int) -> dict[str, Any]:
    _sequential(0, 1)  # warm-up: the worker is up and the client's reply queue exists
    t0 = time.monotonic()
    with ThreadPoolExecutor(shapes.CALLERS) as pool:
        outputs = list(pool.map(lambda i: _sequential(i, shapes.W1_STEPS), range(n_w1)))
    wall = time.monotonic() - t0
    wrong = [
        (i, got)
        for i, got in enumerate(outputs)
        if got != shapes.sequential_output(i, shapes.W1_STEPS)
    ]
    if wrong:
        raise SystemExit(f"Celery W1: {len(wrong)} of {n_w1} wrong, e.g. {wrong[:3]}")
    _say(f"W1: {n_w1} checked, wall {wall:.2f} s")
    round_trips = []
    for r in range(n_w3):
        started = time.monotonic()
        got = _sequential(r, shapes.W3_STEPS)
        round_trips.append(time.monotonic() - started)
        if got != shapes.sequential_output(r, shapes.W3_STEPS):
            raise SystemExit(f"Celery W3: run {r} answered {got}")
    _say(f"W3: {n_w3} checked")
    return {
        "W1": {
            "executions": n_w1,
            "wall_s": round(wall, 3),
            "steps_per_s": n_w1 * shapes.W1_STEPS / wall,
        },
        "W2": None,
        "W3": {
            "runs": n_w3,
            "round_trip_ms_per_step_p50": shapes.percentile(round_trips, 50)
            * 1000
            / shapes.W3_STEPS,
        },
    }


def _worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "celery", "--quiet", "-A", "bench.peers.celery_peer", "worker"]
    command += ["--pool=prefork", "--concurrency=2", "--loglevel=WARNING", "--without-gossip"]
    command += ["--without-mingle", "--without-heartbeat"]
    return subprocess.Popen(command, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.celery_peer")
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--w1", type=int, default=shapes.SIZES["W1"])
    parser.add_argument("--w3", type=int, default=shapes.SIZES["W3"])
    args = parser.parse_args()
    queue = f"orbit-bench-peer-{secrets.token_hex(4)}"
    env = {**os.environ, "BENCH_PEER_AMQP_URL": args.amqp_url, "BENCH_PEER_CELERY_QUEUE": queue}
    app.conf.update(broker_url=args.amqp_url, task_default_queue=queue)
    worker = _worker(env)
    try:
        _say(f"worker started (pid {worker.pid}) on queue {queue}")
        result = run(args.w1, args.w3)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        with app.connection_for_write() as connection:
            connection.default_channel.queue_delete(queue)
            connection.default_channel.exchange_delete(queue)
    result["settings"] = {
        "version": f"celery {version('celery')}, kombu {version('kombu')}",
        "how": "broker RabbitMQ (the same node as Orbit's), result backend rpc://,"
        " `celery worker --pool=prefork --concurrency=2` (gossip, mingle and event"
        " heartbeats off); defaults otherwise (prefetch multiplier 4, acks early)",
        "started_and_waited": f"W1: {shapes.CALLERS} threads, each sending a chain with"
        " apply_async and waiting with AsyncResult.get(); W3: one chain at a time",
        "fan_out": "not run: a fan-out joined by a task is a chord, which the rpc backend"
        " does not support",
    }
    with open(args.output, "w") as out:
        json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
