"""C2: what the SDK costs a process before it does anything (``make bench-cli``).

Each command below runs ``--repeat`` times as its own process, one after
another; the figures are wall time from the spawn to the exit (best and median)
and the CPU time the process used (user + system, median), with the modules it
loaded (``len(sys.modules)`` at exit, counted in one more run). The best wall
time is the one to set against the target: the machine's other load only ever
adds to it. ``python -c pass`` is the interpreter alone, for scale.

    python -m bench.cli [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TARGET_MS = 300.0
WORKFLOW = ROOT / "examples" / "order-fulfilment.yaml"

_ORBIT = "import sys\nsys.argv = ['orbit', *{args!r}]\nfrom orbit_sdk.cli import main\nmain()\n"
"""A command run as the ``orbit`` console script runs it."""

COMMANDS: dict[str, str] = {
    "python -c pass": "pass",
    "import orbit_sdk": "import orbit_sdk",
    "a worker's names": "from orbit_sdk import Worker, TaskContext, TaskError, task",
    "a client's names": "from orbit_sdk import OrbitClient, OrbitClientError",
    "orbit --help": _ORBIT.format(args=["--help"]),
    "orbit validate FILE": _ORBIT.format(args=["validate", str(WORKFLOW)]),
}
TARGETS = ("orbit --help", "orbit validate FILE")
"""The commands with a target: each under :data:`TARGET_MS`."""


def _run(script: str) -> tuple[float, float]:
    """Wall and CPU seconds of one process running ``script``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _modules(script: str) -> int:
    counted = script + "\nimport os, sys\nos.write(2, f'modules={len(sys.modules)}'.encode())\n"
    if "main()" in script:  # the command exits through SystemExit: count in a finally
        counted = "try:\n" + "".join(f"    {line}\n" for line in script.splitlines())
        counted += "finally:\n    import os, sys\n"
        counted += "    os.write(2, f'modules={len(sys.modules)}'.encode())\n"
    done = subprocess.run(
        [sys.executable, "-c", counted],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        check=False,
    )
    return int(done.stderr.rsplit("modules=", 1)[1])


def measure(repeat: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for name, script in COMMANDS.items():
        _run(script)  # unmeasured: the files' pages and bytecode in the cache
        runs = [_run(script) for _ in range(repeat)]
        walls = sorted(wall * 1000 for wall, _ in runs)
        figures[name] = {
            "best_ms": round(walls[0], 1),
            "p50_ms": round(statistics.median(walls), 1),
            "cpu_p50_ms": round(statistics.median(cpu * 1000 for _, cpu in runs), 1),
            "modules": _modules(script),
        }
        line = figures[name]
        print(
            f"  {name:22} best {line['best_ms']:6.1f} ms  p50 {line['p50_ms']:6.1f} ms"
            f"  cpu {line['cpu_p50_ms']:6.1f} ms  {line['modules']} modules",
            flush=True,
        )
    return figures


def main(args: argparse.Namespace) -> dict[str, Any]:
    print(f"C2: each command {args.repeat} times, {os.cpu_count()} cores", flush=True)
    figures = measure(args.repeat)
    verdicts = {
        name: "met" if figures[name]["best_ms"] < TARGET_MS else "MISSED" for name in TARGETS
    }
    for name, verdict in verdicts.items():
        print(
            f"C2 {name}: best {figures[name]['best_ms']} ms; target < {TARGET_MS:.0f} ms: {verdict}"
        )
    return {
        "repeat": args.repeat,
        "python": sys.version.split()[0],
        "load_average": os.getloadavg(),
        "commands": figures,
        "target_ms": TARGET_MS,
        "verdicts": verdicts,
    }


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--output", type=Path, default=RESULTS / "cli-latest.json")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = _args()
    result = main(arguments)
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {arguments.output}")
