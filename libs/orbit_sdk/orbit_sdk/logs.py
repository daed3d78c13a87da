"""Logging for services: ``text`` for a terminal, ``json`` for machines (``ORBIT_LOG_FORMAT``).

Records carry the service name and, where the code gives them through
``extra``, an ``action`` key and the execution id; the json format writes
them as fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

_FIELDS = ("action", "execution_id", "step", "count", "routing_key", "worker_id")


class _JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class _TextFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__("%(asctime)s %(levelname)-7s " + service + " %(message)s%(fields)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = [f"{name}={getattr(record, name)}" for name in _FIELDS if hasattr(record, name)]
        record.fields = (" " + " ".join(fields)) if fields else ""
        return super().format(record)


def configure_logging(service: str, level: str = "INFO", format: str = "text") -> None:
    """Send every record at ``level`` or above to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter(service) if format == "json" else _TextFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiormq and aio-pika log every reconnect attempt at INFO; keep them for warnings.
    for noisy in ("aiormq", "aio_pika", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The CEL library warns of every Python function that raised, an expression refused
    # past its budget included: the error is Orbit's to report (EXPRESSION_LIMIT), and
    # anyone who may run a query could otherwise write a log line per request.
    logging.getLogger("cel").setLevel(logging.ERROR)


MAX_CAUSES = 1000
"""Causes a :class:`LogThrottle` remembers before it forgets the quiet ones."""


class LogThrottle:
    """One line per cause per interval; the lines held back are counted in the next one.

    An outage makes the same failure happen many times a second (each request,
    each outbox row, each retry): the first is logged at once, the others of
    that cause only as a count, when the interval has passed and it happens
    again.

    Args:
        logger: Where the lines go.
        interval: Seconds between two lines of one cause.
        clock: The time in seconds (monotonic), for tests.
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def log(self, level: int, cause: str, message: str, *args: Any, **kwargs: Any) -> bool:
        """Log ``message`` (``logging`` style) unless ``cause`` was logged within the
        interval; whether it was logged."""
        now = self.clock()
        if len(self._last) >= MAX_CAUSES and cause not in self._last:
            self._forget(now)
        last = self._last.get(cause)
        if last is not None and now - last < self.interval:
            self._held[cause] = self._held.get(cause, 0) + 1
            return False
        held = self._held.pop(cause, 0)
        if held:
            message += f" (and {held} more like it in the last {now - (last or now):.0f} s)"
        self._last[cause] = now
        self.logger.log(level, message, *args, **kwargs)
        return True

    def _forget(self, now: float) -> None:
        """Drop the causes quiet for an interval (a cause may name an execution, so
        their number has no bound of its own); all of them if none is."""
        quiet = [cause for cause, last in self._last.items() if now - last >= self.interval]
        for cause in quiet or list(self._last):
            self._last.pop(cause, None)
            self._held.pop(cause, None)
