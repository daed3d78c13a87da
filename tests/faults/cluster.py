"""A three-node RabbitMQ cluster of a test's own, driven through ``ops/rabbitmq/cluster.sh``.

The test runs the script an operator runs, with a directory under the
test's ``tmp_path``, node names of its own and ports found free, so that it
touches neither the shared broker (127.0.0.1:5672) nor another cluster. The
nodes share an Erlang cookie of their own (the script points HOME into the
cluster's directory), so they cannot join, or be joined by, any other node.
:func:`running_cluster` destroys the cluster when the test ends, however it
ends.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "ops" / "rabbitmq" / "cluster.sh"

NODES = 3

_PORTS_FROM, _PORTS_TO = 20000, 32000
"""Where the cluster's ports are looked for: below Linux's ephemeral range (32768 on),
whose ports any outgoing connection may take for a while."""


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int, taken: set[int] | None = None) -> int:
    """The first of ``count`` consecutive ports free now (the script gives node N port+N-1)."""
    avoid = taken or set()
    for _ in range(200):
        first = random.randrange(_PORTS_FROM, _PORTS_TO - count)
        ports = set(range(first, first + count))
        if not ports & avoid and all(_free(port) for port in ports):
            return first
    raise RuntimeError(f"no {count} consecutive free ports between {_PORTS_FROM} and {_PORTS_TO}")


class Cluster:
    """The script's commands, for one cluster (its directory, name and ports)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.name = f"orbit-test-{uuid.uuid4().hex[:8]}"
        self.port = free_ports(NODES)
        self.dist_port = free_ports(NODES, taken=set(range(self.port, self.port + NODES)))

    def _environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "ORBIT_CLUSTER_DIR": str(self.directory),
            "ORBIT_CLUSTER_NAME": self.name,
            "ORBIT_CLUSTER_NODES": str(NODES),
            "ORBIT_CLUSTER_PORT": str(self.port),
            "ORBIT_CLUSTER_DIST_PORT": str(self.dist_port),
        }

    def run(self, *arguments: str, timeout: float = 150) -> str:
        """``cluster.sh ARGUMENTS…``: its output; an AssertionError with its errors if it fails."""
        done = subprocess.run(
            ["bash", str(SCRIPT), *arguments],
            env=self._environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"cluster.sh {' '.join(arguments)} exited {done.returncode}:\n{done.stderr}"
            )
        return done.stdout

    def ctl(self, node: int, *arguments: str) -> str:
        """``rabbitmqctl ARGUMENTS…`` against node ``node``, quietly."""
        return self.run("ctl", str(node), *arguments, "-q", timeout=60)

    def rows(self, node: int, *arguments: str) -> list[list[str]]:
        """The rows a ``rabbitmqctl list_…`` command prints, each split in its columns."""
        listed = self.ctl(node, *arguments, "--no-table-headers")
        return [line.split("\t") for line in listed.splitlines() if line.strip()]

    @property
    def url(self) -> str:
        """The ``ORBIT_AMQP_URL`` that lists every node."""
        return self.run("url").strip()

    def node(self, number: int) -> str:
        return f"{self.name}-{number}@localhost"

    def number(self, node: str) -> int:
        return int(node.removeprefix(f"{self.name}-").split("@", 1)[0])

    def leaders(self, via: int, queues: set[str]) -> Counter[int]:
        """How many of ``queues`` each node leads (quorum queues), as node ``via`` sees it."""
        rows = self.rows(via, "list_queues", "name", "leader")
        return Counter(self.number(row[1]) for row in rows if row[0] in queues)

    def consumers(self, via: int, queue: str) -> int:
        """Consumers of ``queue``, as node ``via`` lists them now."""
        return sum(1 for row in self.rows(via, "list_consumers", "queue_name") if row[0] == queue)

    def connections(self, node: int) -> int:
        """Client connections on node ``node``: every node lists those of the cluster, each
        with the port it came in on, and node N's is port+N-1."""
        port = str(self.port + node - 1)
        return sum(1 for row in self.rows(node, "list_connections", "port") if row[0] == port)


@contextlib.contextmanager
def running_cluster(directory: Path) -> Iterator[Cluster]:
    """A started cluster, destroyed at the end (the nodes killed, the directory deleted)."""
    cluster = Cluster(directory)
    try:
        cluster.run("start")
        yield cluster
    finally:
        if (directory / ".orbit-cluster").exists():  # else the script never made it
            cluster.run("destroy", timeout=60)
