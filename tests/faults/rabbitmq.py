"""A RabbitMQ node of a test's own, on ports of its own, so a test can stop and kill it.

The shared broker (127.0.0.1:5672) is never touched: a fault test that
restarts RabbitMQ starts this private node (its own node name, data
directory, AMQP and distribution ports, no plugins), restarts or kills that,
and stops it at the end. It runs the broker's own scripts as the current
user, with the Erlang cookie of that user's home.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

BIN = Path("/usr/lib/rabbitmq/bin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRabbit:
    """One private node; :meth:`start` it, then restart, kill or :meth:`stop` it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.name = f"orbit-test-{uuid.uuid4().hex[:8]}@localhost"
        self.port = _free_port()
        self.dist_port = _free_port()
        (directory / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n",
            encoding="utf-8",
        )
        (directory / "enabled_plugins").write_text("[].\n", encoding="utf-8")
        (directory / "rabbitmq-env.conf").write_text("", encoding="utf-8")

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def _environment(self) -> dict[str, str]:
        base = self.directory
        return {
            **os.environ,
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }

    def _ctl(self, *arguments: str, timeout: float = 60) -> None:
        subprocess.run(
            [str(BIN / "rabbitmqctl"), "-n", self.name, *arguments],
            env=self._environment(),
            check=True,
            capture_output=True,
            timeout=timeout,
        )

    def queues(self) -> str:
        """Each queue's ready and unacked messages and its consumers, for a failure's message."""
        result = subprocess.run(
            [
                str(BIN / "rabbitmqctl"),
                "-n",
                self.name,
                "list_queues",
                "name",
                "messages_ready",
                "messages_unacknowledged",
                "consumers",
            ],
            check=False,
            env=self._environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return result.stdout

    def start(self) -> None:
        """Start the node (its data kept from before) and wait until it takes connections."""
        subprocess.run(
            [str(BIN / "rabbitmq-server"), "-detached"],
            env=self._environment(),
            check=True,
            capture_output=True,
            timeout=60,
        )
        self._wait_for_port()
        self._wait_for_pid()

    def _wait_for_pid(self, timeout: float = 30) -> int:
        """The node's OS pid, once it has written it."""
        pid_file = self.directory / "rabbitmq.pid"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                return int(pid_file.read_text(encoding="utf-8").strip())
            time.sleep(0.05)
        raise TimeoutError("the private RabbitMQ wrote no pid file")

    def _wait_for_port(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"the private RabbitMQ on {self.port} did not come up")

    def restart_app(self) -> None:
        """``stop_app`` then ``start_app``: every connection dropped, the node kept."""
        self._ctl("stop_app")
        self._ctl("start_app")
        self._wait_for_port()

    def raise_memory_alarm(self) -> None:
        """A memory alarm, as a node past its high watermark raises: every publishing
        connection is blocked until :meth:`clear_memory_alarm`."""
        self._ctl("set_vm_memory_high_watermark", "0.000001")
        self._wait_for_alarm("memory")

    def clear_memory_alarm(self) -> None:
        self._ctl("set_vm_memory_high_watermark", "0.4")

    def raise_disk_alarm(self) -> None:
        """A disk alarm, as a node short of free disk raises: every publishing connection
        is blocked until :meth:`clear_disk_alarm`."""
        self._ctl("set_disk_free_limit", "100000GB")
        self._wait_for_alarm("disk")

    def clear_disk_alarm(self) -> None:
        self._ctl("set_disk_free_limit", "50MB")

    def _wait_for_alarm(self, kind: str, timeout: float = 30) -> None:
        """Return once the node reports an alarm whose description names ``kind``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alarms = subprocess.run(
                [str(BIN / "rabbitmq-diagnostics"), "-n", self.name, "-q", "alarms"],
                env=self._environment(),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            ).stdout
            if kind in alarms.lower():
                return
            time.sleep(0.2)
        raise TimeoutError(f"the private RabbitMQ raised no {kind} alarm")

    def freeze(self) -> None:
        """SIGSTOP the node's VM: its connections stay open and nothing answers."""
        os.kill(self._wait_for_pid(), signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self._wait_for_pid(), signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the node's VM, as a crash would, and leave it down."""
        pid = self._wait_for_pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the node for good (killed: its data is thrown away with the test's directory,
        and ``rabbitmqctl stop`` takes half a minute)."""
        with contextlib.suppress(OSError, ValueError, TimeoutError):
            self.thaw()  # a frozen VM would not take the SIGKILL's effect until resumed
            self.kill()
