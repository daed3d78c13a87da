"""C1: the console's executions list with many executions (``make bench-console``).

Every service runs as a process (:class:`~bench.stack.BenchStack`); the
executions table is then filled to ``--executions`` rows (100,000 by default)
straight in SQL (rows only: the list reads no history), spread over the five
statuses, four workflows and one day of start times, and analysed. Each page
below is then fetched through the gateway, signed in as the console is (its
cookie), ``--repeat`` times after one cold fetch; the figures are the time to
the whole answer, template rendering included. Postgres's plan of each
statement behind the page is printed with the indexes it uses.

    python -m bench.console [--executions 100000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.stack import BenchStack
from orbit_services.gateway.edge.console_session import SESSION_COOKIE
from orbit_services.store.sql.console import COUNT_BY_STATUS, LIST_PAGE

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TARGET_MS = 300.0
WORKFLOWS = ("orders", "payments", "invoices", "shipping")

FILL = """
INSERT INTO executions (execution_id, workflow, version, definition_hash, status, input,
                        last_seq, created_at, updated_at, closed_at)
SELECT 'c1-' || lpad(g::text, 7, '0'),
       ($4::text[])[1 + g % 4], '1.0.0', $2,
       (ARRAY['running','completed','completed','completed','failed','cancelled',
              'timed_out','completed','completed','completed'])[1 + g % 10],
       '{}'::jsonb, 3,
       $3::timestamptz - make_interval(secs => ($1 - g) * 86400.0 / $1),
       $3::timestamptz - make_interval(secs => ($1 - g) * 86400.0 / $1),
       CASE WHEN g % 10 = 0 THEN NULL
            ELSE $3::timestamptz - make_interval(secs => ($1 - g) * 86400.0 / $1 - 1) END
FROM generate_series(1, $1) AS g
"""


def _pages(now: datetime) -> dict[str, dict[str, str]]:
    """The pages fetched: the first, each filter alone, and a page further on."""
    hour_ago = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    noon = (now - timedelta(hours=12)).strftime("%Y-%m-%dT%H:%M")
    return {
        "first page": {},
        "status=failed": {"status": "failed"},
        "status=running": {"status": "running"},
        "workflow=payments": {"workflow": "payments"},
        "since 1 h ago": {"since": hour_ago},
        "a 12 h old hour": {"since": noon, "until": hour_ago},
        "id prefix": {"q": "c1-00123"},
    }


async def _fill(conn: asyncpg.Connection, executions: int, now: datetime) -> float:
    definition_hash = await conn.fetchval("SELECT hash FROM definitions LIMIT 1")
    # Every stored workflow name must be a registered definition's for the filter list;
    # the rows only need one that exists (the foreign key).
    started = time.perf_counter()
    await conn.execute(FILL, executions, definition_hash, now, list(WORKFLOWS))
    await conn.execute("VACUUM ANALYZE executions")  # as autovacuum soon would
    return time.perf_counter() - started


def _scans(plan: Any) -> list[str]:
    found: list[str] = []
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.append(f"{plan['Node Type']} on {plan['Index Name']}")
        elif plan.get("Node Type") == "Seq Scan":
            found.append(f"Seq Scan on {plan['Relation Name']}")
        for value in plan.values():
            found += _scans(value)
    elif isinstance(plan, list):
        for item in plan:
            found += _scans(item)
    return found


async def _plans(conn: asyncpg.Connection) -> dict[str, dict[str, Any]]:
    """Each statement of the first page, as Postgres runs it: its indexes and its time."""
    values = {"workflow": None, "workflows": None, "since": None, "until": None, "prefix": None}
    plans = {}
    for name, statement, extra in (
        ("page", LIST_PAGE, {"status": None, "before": None, "limit": 51}),
        ("counts", COUNT_BY_STATUS, {}),
    ):
        given = {k: v for k, v in {**values, **extra}.items() if k in statement.names}
        args = statement.args(**given)
        explained = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.text}", *args)
        plan = json.loads(explained)[0]
        plans[name] = {
            "scans": sorted(set(_scans(plan))),
            "execution_ms": round(plan["Execution Time"], 2),
        }
    return plans


async def _time_pages(
    client: httpx.AsyncClient, pages: dict[str, dict[str, str]], repeat: int
) -> dict[str, dict[str, float]]:
    figures = {}
    for name, params in pages.items():
        times = []
        for _ in range(repeat + 1):
            started = time.perf_counter()
            answer = await client.get("/ui", params=params)
            times.append((time.perf_counter() - started) * 1000)
            if answer.status_code != 200 or "executions" not in answer.text:
                raise SystemExit(f"{name}: answered {answer.status_code}: {answer.text[:300]}")
        warm = times[1:]
        figures[name] = {
            "cold_ms": round(times[0], 1),
            "p50_ms": round(statistics.median(warm), 1),
            "max_ms": round(max(warm), 1),
        }
        print(
            f"  {name:<20} cold {times[0]:7.1f} ms   p50 {figures[name]['p50_ms']:7.1f} ms"
            f"   max {figures[name]['max_ms']:7.1f} ms",
            flush=True,
        )
    return figures


async def _sign_in(client: httpx.AsyncClient, token: str) -> None:
    """Sign in as a person does, through the login form: the console's cookie then holds
    a session of the client's (docs/console.md)."""
    login = await client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
    if csrf is None:
        raise SystemExit(f"the login page has no form: {login.status_code}")
    answer = await client.post("/ui/login", data={"csrf": csrf[1], "token": token, "next": "/ui"})
    if answer.status_code != 303 or SESSION_COOKIE not in client.cookies:
        raise SystemExit(f"signing in answered {answer.status_code}: {answer.text[:300]}")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    stack = BenchStack(args.database_url, args.amqp_url, RESULTS / "logs" / f"console-{stamp}")
    async with stack:
        conn = await asyncpg.connect(stack.settings.database_url)
        try:
            now = datetime.now(UTC)
            print(f"C1: filling the executions table with {args.executions:,} rows", flush=True)
            seconds = await _fill(conn, args.executions, now)
            print(f"  filled and analysed in {seconds:.1f} s", flush=True)
            plans = await _plans(conn)
        finally:
            await conn.close()
        for name, plan in plans.items():
            print(f"  {name}: {plan['execution_ms']} ms in Postgres, {', '.join(plan['scans'])}")
        base = f"http://127.0.0.1:{stack.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await _sign_in(client, stack.token or "")
            figures = await _time_pages(client, _pages(now), args.repeat)
            first = await client.get("/ui")
            shown = first.text.count('<tr data-execution="')
            if shown != 50 or f'<span class="n">{args.executions}</span>' not in first.text:
                raise SystemExit(f"the first page shows {shown} executions, or a wrong count")
    worst = max(f["max_ms"] for f in figures.values())
    verdict = "met" if figures["first page"]["max_ms"] < TARGET_MS else "MISSED"
    print(
        f"C1 first page at {args.executions:,}: p50 {figures['first page']['p50_ms']} ms,"
        f" max {figures['first page']['max_ms']} ms; target < {TARGET_MS:.0f} ms: {verdict};"
        f" slowest page {worst} ms"
    )
    return {
        "executions": args.executions,
        "repeat": args.repeat,
        "pages": figures,
        "plans": plans,
        "target_ms": TARGET_MS,
        "first_page_met": verdict == "met",
    }


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__)
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--output", type=Path, default=RESULTS / "console-latest.json")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = _args()
    result = asyncio.run(main(arguments))
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {arguments.output}")
