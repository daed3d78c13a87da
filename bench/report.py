"""The readable table printed at the end (the JSON holds everything)."""

from __future__ import annotations

from typing import Any


def _fraction(value: float | None, limit: float | None) -> str:
    if not value or not limit:
        return ""
    return f"{value / limit:.0%}"


def table(result: dict[str, Any]) -> str:
    m = result["machine"]
    lim = result.get("limits", {})
    commit1 = lim.get("pg_commits_1_connection", {}).get("per_second")
    commit8 = lim.get("pg_commits_8_connections", {}).get("per_second")
    publish = lim.get("amqp_confirmed_publishes", {}).get("per_second")
    out = [
        f"Orbit benchmark — {result['finished_at']}  ({result['command']})",
        f"machine: {m['cores']} cores ({m['cpu_model']}), {m['ram_gib']} GiB RAM, Python"
        f" {m['python']}, Postgres {m['postgres']}, RabbitMQ {m['rabbitmq']}",
        result["note"],
        "",
        "machine limits (same run, 3 s each):",
        f"  Postgres single-row commits/s, 1 connection : {commit1}",
        f"  Postgres single-row commits/s, 8 connections: {commit8}",
        f"  RabbitMQ persistent confirmed publishes/s   : {publish}",
        "",
    ]
    idle = result.get("idle_background")
    if idle:
        out.append(
            f"idle background (included in the cost figures): {idle['pg_write_transactions_per_s']}"
            f" Postgres write transactions/s, CPU s over {idle['interval_s']} s: "
            + ", ".join(f"{k} {v:.2f}" for k, v in idle["cpu_seconds"].items())
        )
        out.append("")
    w = result["workloads"]
    rows = [("workload", "figure", "value", "of limit")]
    for key in ("W1", "W2"):
        if key in w:
            r = w[key]
            lat = r["latency_created_to_closed"]
            cost = r["cost"]["per_step"]
            rows += [
                (
                    key,
                    f"{r['executions']} executions x {r['steps_per_execution']} steps, wall",
                    f"{r['wall_s']:.2f} s",
                    "",
                ),
                ("", "executions/s", f"{r['executions_per_s']:.1f}", ""),
                ("", "steps/s", f"{r['steps_per_s']:.1f}", ""),
                (
                    "",
                    "latency created→closed p50 / p99",
                    f"{lat['p50_ms']:.0f} / {lat['p99_ms']:.0f} ms",
                    "",
                ),
                (
                    "",
                    "Postgres write transactions / step",
                    f"{cost['pg_write_transactions']}",
                    f"{_fraction(r['steps_per_s'] * (cost['pg_write_transactions'] or 0), commit1)}"
                    " of 1-conn commits/s",
                ),
                ("", "Postgres statements / step", f"{cost['pg_statements']}", ""),
                ("", "RabbitMQ messages / step", f"{cost['amqp_messages']}", ""),
                ("", "WAL bytes / step", f"{cost['wal_bytes']:.0f}", ""),
                ("", "CPU ms / step (all processes)", f"{cost['cpu_ms_total']}", ""),
            ]
    if "W3" in w:
        r = w["W3"]
        rows += [
            (
                "W3",
                f"{r['runs']} runs x {r['steps_per_execution']} steps, end to end p50 / p99",
                f"{r['end_to_end_ms']['p50']:.1f} / {r['end_to_end_ms']['p99']:.1f} ms",
                "",
            ),
            (
                "",
                "per step (e2e / 10) p50 / p99",
                f"{r['per_step_ms']['p50']:.2f} / {r['per_step_ms']['p99']:.2f} ms",
                "",
            ),
            (
                "",
                "step interval (history) p50 / p99",
                f"{r['step_interval_ms']['p50']:.2f} / {r['step_interval_ms']['p99']:.2f} ms",
                "",
            ),
            (
                "",
                "Postgres write transactions / statements / step",
                f"{r['cost']['per_step']['pg_write_transactions']}"
                f" / {r['cost']['per_step']['pg_statements']}",
                "",
            ),
            ("", "RabbitMQ messages / step", f"{r['cost']['per_step']['amqp_messages']}", ""),
        ]
    if "W4" in w:
        r = w["W4"]
        mem = r["memory_mib"]["all_waiting"]
        rows += [
            (
                "W4",
                f"{r['executions']} started, until all waiting",
                f"{r['start_phase']['wall_s']:.1f} s",
                f"{r['start_phase']['executions_per_s']:.0f} exec/s",
            ),
            (
                "",
                "services' RSS, all waiting (before)",
                f"{r['memory_mib']['services_total_waiting']} MiB"
                f" ({r['memory_mib']['services_total_before']})",
                "",
            ),
            ("", "  " + ", ".join(f"{k} {v['rss_mib']}" for k, v in mem.items()), "", ""),
            ("", "signal phase wall", f"{r['signal_phase']['wall_s']:.2f} s", ""),
            (
                "",
                "signal phase executions/s (= task steps/s)",
                f"{r['signal_phase']['executions_per_s']:.1f}",
                "",
            ),
            (
                "",
                "Postgres write transactions / statements / execution",
                f"{r['cost_signal_phase']['per_step']['pg_write_transactions']}"
                f" / {r['cost_signal_phase']['per_step']['pg_statements']}",
                "",
            ),
            (
                "",
                "RabbitMQ messages / execution",
                f"{r['cost_signal_phase']['per_step']['amqp_messages']}",
                "",
            ),
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for index, row in enumerate(rows if len(rows) > 1 else []):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    for key in ("W1", "W2", "W3", "W4"):
        if key in w:
            cost = w[key].get("cost") or w[key].get("cost_signal_phase")
            cpu = ", ".join(f"{k} {v:.1f}" for k, v in cost["cpu_seconds"].items())
            out.append(f"{key} CPU seconds over {cost['interval_s']} s: {cpu}")
    out += _client_path_lines(w)
    out += _huge_lines(w)
    out.append("")
    out.append(
        "Statements and messages are Orbit's own counters (orbit_postgres_statements_total,"
        " orbit_amqp_messages_published_total) summed over every process;"
    )
    out.append("write transactions and WAL are Postgres's, for the whole cluster.")
    return "\n".join(out)


def _client_path_lines(w: dict[str, Any]) -> list[str]:
    """W1H, W2H, S1, S2, L1 and L2 (bench/client_path.py), when they ran."""
    out: list[str] = []
    for key in ("W1H", "W2H"):
        if key in w:
            r = w[key]
            answer = r["client_start_to_answer"]
            out.append(
                f"{key} (HTTP, 16 callers of start(wait)): {r['executions']} x"
                f" {r['steps_per_execution']} steps, {r['steps_per_s']:.1f} steps/s, start→answer"
                f" p50 {answer['p50_ms']:.1f} ms, CPU {r['cost']['per_step']['cpu_ms_total']}"
                " ms/step (all processes, the client's included)"
            )
    if "S1" in w:
        r = w["S1"]
        lat = r["latency"]
        out.append(
            f"S1 (single HTTP starts, 32 connections): {r['starts_per_s']:.0f} starts/s, p50"
            f" {lat['p50_ms']:.1f} / p99 {lat['p99_ms']:.1f} ms, gateway CPU"
            f" {r['gateway_cpu_ms_per_start']} ms/start; through OrbitClient"
            f" {r['with_orbit_client']['starts_per_s']:.0f} starts/s"
        )
    if "S2" in w:
        r = w["S2"]
        out.append(f"S2 (batch starts of {r['batch']}): {r['starts_per_s']:.0f} starts/s")
    if "L1" in w:
        r = w["L1"]["answer_after_notify"]
        out.append(
            f"L1 (?wait answer after the ending's NOTIFY): p50 {r['p50_ms']:.2f} /"
            f" p99 {r['p99_ms']:.2f} ms"
        )
    if "L2" in w:
        r = w["L2"]
        rss = r["gateway_rss_mib"]
        out.append(
            f"L2 ({r['waiting_clients']} waiting clients, {r.get('gateways', 1)} gateway(s)):"
            f" gateway RSS {rss['before']} →"
            f" {rss['all_waiting']} MiB ({rss['per_waiting_client_kib']} KiB each), all"
            f" answered {r['signal_to_last_answer_s']} s after the signals"
        )
    return out


def _huge_lines(w: dict[str, Any]) -> list[str]:
    """W5 and W6 (bench/huge.py), when they ran."""
    out: list[str] = []
    if "W5" in w and "small" in w["W5"]:
        r = w["W5"]
        out.append("")
        out.append("W5, one for (concurrency 200):  elements  wall s  ms/el  decider CPU ms/el")
        for size in ("small", "large"):
            f = r[size]
            out.append(
                f"  {f['elements']:>31}  {f['wall_s']:>6.1f}  {f['ms_per_element']:>5.3f}"
                f"  {f['decider_cpu_ms_per_element']:>17.3f}"
            )
        out.append(
            f"  decider CPU per element, large / small: "
            f"{r['decider_cpu_per_element_large_over_small']} ({r['target']})"
        )
    if "W6" in w and "small" in w["W6"]:
        r = w["W6"]
        out.append("")
        out.append("W6, 500 signals:  events  decider ms/turn  CPU ms/signal  decider RSS MiB")
        for size in ("small", "large"):
            f = r[size]
            out.append(
                f"  {f['events_after']:>14}  {f['decider_ms_per_turn']:>14.3f}"
                f"  {f['decider_cpu_ms_per_signal']:>13.3f}  {f['decider_rss_mib']:>15}"
            )
        out.append(
            f"  large / small: turn {r['decider_ms_per_turn_large_over_small']},"
            f" CPU {r['decider_cpu_per_signal_large_over_small']},"
            f" RSS {r['decider_rss_large_over_small']} ({r['target']})"
        )
        for size in ("small", "large"):
            load = r[size]["cold_load"]
            out.append(
                f"  cold load of {load['events']} events: {load['from_snapshot_ms']} ms from the"
                f" snapshot at {load['snapshot_seq']}, {load['full_replay_ms']} ms replayed;"
                f" state {load['state_mib']} MiB ({load['state_bytes_per_event']} B/event)"
            )
    return out
