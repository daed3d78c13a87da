"""A Postgres cluster of a test's own, on a port of its own, so a test can stop it hard.

The shared server (127.0.0.1:5432) is never touched: a fault test that takes
Postgres away initdbs this private cluster (trust auth, TCP on 127.0.0.1 only,
its unix socket inside its own directory, sized for a test), stops it with
``pg_ctl stop -m immediate`` (every backend killed at once, as a crash would:
crash recovery on the next start) and stops it for good at the end.

Postgres refuses to run as root: when the tests run as root, ``initdb`` and
``pg_ctl`` run as the ``postgres`` OS user, which must own the directory (a
fresh one under ``/tmp``, see :func:`private_directory`, not pytest's
``tmp_path``, whose parents only root may enter).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg

from orbit_services.store.migrate import migrate

DATABASE = "orbit"
OS_USER = "postgres"

SETTINGS = """
# A private cluster for one fault test.
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket}'
max_connections = 60
shared_buffers = 16MB
# An immediate stop kills Postgres, not the machine: what it wrote is in the page
# cache all the same, and the next start replays the WAL. No flushes: a test's
# disk is shared.
fsync = off
full_page_writes = off
logging_collector = off
"""


def _bin() -> Path:
    """The newest installed Postgres's binaries."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name)
    )
    if not found:
        raise RuntimeError("no Postgres installed under /usr/lib/postgresql/*/bin")
    return found[-1].parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_root() -> bool:
    return os.geteuid() == 0


def _give_to_postgres(path: Path) -> None:
    if _as_root():
        user = pwd.getpwnam(OS_USER)
        os.chown(path, user.pw_uid, user.pw_gid)


@contextlib.contextmanager
def small_disk(mount_point: Path, megabytes: int) -> Iterator[Path]:
    """A tmpfs of ``megabytes`` mounted at ``mount_point`` (root only), unmounted after."""
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(mount_point)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, timeout=30)


@contextlib.contextmanager
def private_directory() -> Iterator[Path]:
    """A fresh directory Postgres may own (the ``postgres`` user's, when we are root),
    removed with everything in it at the end."""
    directory = Path(tempfile.mkdtemp(prefix="orbit-pg-"))
    try:
        _give_to_postgres(directory)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class PrivatePostgres:
    """One private cluster in ``directory``; :meth:`start` it, then stop it hard or for good.

    ``directory`` must be writable by the user Postgres runs as (see
    :func:`private_directory`).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.socket = directory / "socket"
        self.log = directory / "postgres.log"
        self.port = _free_port()
        self._bin = _bin()
        self.socket.mkdir()
        _give_to_postgres(self.socket)
        self._run(
            str(self._bin / "initdb"),
            "--pgdata",
            str(self.data),
            "--username",
            "postgres",
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--no-sync",
        )
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(SETTINGS.format(port=self.port, socket=self.socket))

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def _run(
        self, *command: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``command``, as the user Postgres runs as, in the cluster's directory."""
        prefix = ["runuser", "-u", OS_USER, "--"] if _as_root() else []
        result = subprocess.run(
            [*prefix, *command],
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}{result.stderr}"
                f"\nthe server's log:\n{self.log_text()}"
            )
        return result

    def _pg_ctl(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(
            str(self._bin / "pg_ctl"), "--pgdata", str(self.data), *arguments, check=check
        )

    def log_text(self) -> str:
        """The server's log so far (for a failure's message)."""
        with contextlib.suppress(OSError):
            return self.log.read_text(encoding="utf-8", errors="replace")
        return ""

    def running(self) -> bool:
        return self._pg_ctl("status", check=False).returncode == 0

    def start(self, timeout: float = 60) -> None:
        """Start the cluster (recovering from a crash if it was stopped hard) and wait until
        it accepts connections over TCP."""
        self._pg_ctl("start", "--wait", "--timeout", str(int(timeout)), "--log", str(self.log))
        deadline = time.monotonic() + timeout
        while not self._accepts():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the private Postgres on {self.port} does not answer")
            time.sleep(0.05)

    def _accepts(self) -> bool:
        result = subprocess.run(
            [str(self._bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
            check=False,
            timeout=10,
        )
        return result.returncode == 0

    def stop_immediate(self) -> None:
        """``pg_ctl stop -m immediate``: every backend gone at once, nothing shut down cleanly."""
        self._pg_ctl("stop", "--wait", "--mode", "immediate")

    def freeze(self) -> None:
        """SIGSTOP the postmaster and every backend: the server keeps its connections open
        and answers nothing, as a frozen or silently cut-off one would."""
        self._signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what :meth:`freeze` stopped."""
        self._signal_all(signal.SIGCONT)

    def _signal_all(self, sent: signal.Signals) -> None:
        pid = self._postmaster_pid()
        if pid is None:
            raise RuntimeError(f"the private Postgres on {self.port} is not running")
        children = subprocess.run(
            ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        for process in (pid, *map(int, children)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, sent)

    def stop(self) -> None:
        """Stop the cluster for good (a fast shutdown); never raises, whatever its state.

        A postmaster that outlives the shutdown is killed, so nothing is left running.
        """
        with contextlib.suppress(Exception):
            self.thaw()  # a frozen cluster would not stop
        with contextlib.suppress(Exception):
            if self.running():
                self._pg_ctl("stop", "--wait", "--mode", "fast", check=False)
        pid = self._postmaster_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text(encoding="utf-8").split()[0])
            os.kill(pid, 0)
            return pid
        return None

    async def create_orbit_database_on_a_small_disk(self, disk: Path) -> str:
        """Create the ``orbit`` database in a tablespace on ``disk`` (a small mount of
        the test's own, see :func:`small_disk`) and apply every migration; its URL. When
        ``disk`` fills, a table that must grow fails with ``53100 disk full`` and the
        server stays up (its WAL is elsewhere: a full WAL disk would stop it)."""
        _give_to_postgres(disk)
        connection = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres")
        try:
            await connection.execute(f"CREATE TABLESPACE small LOCATION '{disk}'")
            await connection.execute(f"CREATE DATABASE {DATABASE} TABLESPACE small")
        finally:
            await connection.close()
        return await self.create_orbit_database()

    async def create_orbit_database(self) -> str:
        """Create the ``orbit`` database and apply every migration; its URL."""
        await migrate(self.url)
        return self.url
