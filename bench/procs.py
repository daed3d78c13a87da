"""Facts about processes from /proc: memory, CPU time, and the CPU of Postgres and RabbitMQ."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, field: str) -> int | None:
    """A ``/proc/PID/status`` figure in KiB (``VmRSS``, ``VmHWM``); None if the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds the process has used so far."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_by_command(names: tuple[str, ...]) -> dict[str, float]:
    """CPU seconds used so far by every live process whose command is one of ``names``.

    Processes that ended in between are not counted: Postgres backends live as
    long as their connection, and the services' connections outlive a workload.
    """
    totals = dict.fromkeys(names, 0.0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        for name in names:
            if comm.startswith(name):
                seconds = cpu_seconds(int(entry.name))
                if seconds is not None:
                    totals[name] += seconds
    return totals


def machine() -> dict[str, object]:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(total_kib / 1024 / 1024, 1),
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
    }


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent not idle since boot (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / _TICK
