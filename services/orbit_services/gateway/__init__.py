"""The gateway: Orbit's HTTP API and AMQP command intake (wiring only; the logic is in the libs).

``create_app`` builds the FastAPI application over an
:class:`~orbit_runtime.executions.Executions`; :class:`GatewayService` runs it
with uvicorn and consumes ``NS.commands``; ``orbit service gateway`` runs it.
"""

from .app import create_app
from .service import GatewayService

__all__ = ["GatewayService", "create_app"]
