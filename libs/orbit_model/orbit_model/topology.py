"""The names of every exchange, queue and routing key of one Orbit installation.

Pure naming, shared by the SDK (workers and clients) and the server: all
names start with the namespace (``orbit`` by default), so several
installations, or tests, share one broker. The decider's input is split over
``partitions`` queues; a message goes to the partition of its execution id,
so one execution is decided by one consumer at a time.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from orbit_model.messages import Route

DELIVERY_LIMIT = 20
"""Deliveries of one message before RabbitMQ dead-letters it. Generous, because
giving a message back on a graceful stop counts as a delivery too; a message
that fails on its own merits is parked by its consumer well before."""

COMMAND_KEY = "command"
"""The routing key of every command on the ``commands`` exchange."""
CONTROL_KEY = "control"
"""The routing key of every worker-control request on the ``control`` exchange."""
REPLY_TO = "amq.rabbitmq.reply-to"
"""RabbitMQ's direct reply-to pseudo-queue: requests name it, answers come straight back."""
REPLICAS_ARGUMENT = "x-quorum-initial-group-size"
"""The queue argument that says on how many nodes of a cluster a quorum queue is made."""
DEFAULT_REPLICAS = 3
"""Replicas of each queue: a cluster of three or more keeps every queue through the loss
of any one node (a quorum of two); a smaller cluster has a replica on every node."""


def task_key(task: str, version: str) -> str:
    """``task@version``: the routing key of a contract's queue on the ``tasks`` exchange."""
    return f"{task}@{version}"


@dataclass(frozen=True)
class Topology:
    """The names of every exchange and queue of one installation."""

    namespace: str
    partitions: int
    replicas: int = DEFAULT_REPLICAS
    """Nodes each new queue is replicated on (at most the cluster's: one on a single node)."""

    @property
    def commands(self) -> str:
        return f"{self.namespace}.commands"

    @property
    def decider(self) -> str:
        return f"{self.namespace}.decider"

    def decider_queue(self, partition: int) -> str:
        return f"{self.namespace}.decider.{partition}"

    def partition_of(self, execution_id: str) -> int:
        # crc32, not hash(): it must agree across processes and languages.
        return zlib.crc32(execution_id.encode()) % self.partitions

    def decider_route(self, execution_id: str) -> Route:
        """Where anything concerning ``execution_id`` is sent for the decider."""
        return Route(exchange=self.decider, routing_key=str(self.partition_of(execution_id)))

    @property
    def results(self) -> str:
        """The exchange workers publish results to: bound to the decider's partition
        queues like ``decider``, but the only one a worker may write to."""
        return f"{self.namespace}.results"

    def results_route(self, execution_id: str) -> Route:
        """Where a worker publishes the result of a task of ``execution_id``."""
        return Route(exchange=self.results, routing_key=str(self.partition_of(execution_id)))

    @property
    def control(self) -> str:
        return f"{self.namespace}.control"

    @property
    def tasks(self) -> str:
        """The exchange of task queues; the routing key is ``task@version``."""
        return f"{self.namespace}.tasks"

    def task_queue(self, task: str, version: str) -> str:
        return f"{self.namespace}.task.{task}@{version}"

    def task_route(self, task: str, version: str) -> Route:
        """Where a task of the contract ``task@version`` is published for its workers."""
        return Route(exchange=self.tasks, routing_key=task_key(task, version))

    @property
    def dead_letter(self) -> str:
        """The fanout exchange every queue parks to, and the queue operators read."""
        return f"{self.namespace}.dead-letter"

    @property
    def dead_letter_reports(self) -> str:
        """The second queue on the dead-letter exchange: the dispatcher tells each
        parked message's execution about it (:mod:`orbit_model.parked`)."""
        return f"{self.namespace}.dead-letter.reports"

    def fixed_queues(self) -> tuple[str, ...]:
        """Every queue but the task queues (those come and go with contracts)."""
        partitions = tuple(self.decider_queue(p) for p in range(self.partitions))
        return (
            self.commands,
            self.control,
            *partitions,
            self.dead_letter,
            self.dead_letter_reports,
        )

    def exchanges(self) -> tuple[str, ...]:
        return (
            self.commands,
            self.decider,
            self.results,
            self.control,
            self.tasks,
            self.dead_letter,
        )

    def queue_arguments(self, single_active_consumer: bool = False) -> dict[str, Any]:
        """The arguments every queue of Orbit is declared with: a quorum queue of
        :attr:`replicas` replicas with a delivery limit that dead-letters a message
        delivered too often."""
        arguments: dict[str, Any] = {
            **self.parked_arguments(),
            "x-delivery-limit": DELIVERY_LIMIT,
            "x-dead-letter-exchange": self.dead_letter,
        }
        if single_active_consumer:
            arguments["x-single-active-consumer"] = True
        return arguments

    def parked_arguments(self) -> dict[str, Any]:
        """The arguments of the two dead-letter queues: replicated quorum queues with no
        delivery limit and no dead-letter exchange (a parked message stays parked)."""
        return {"x-queue-type": "quorum", REPLICAS_ARGUMENT: self.replicas}
