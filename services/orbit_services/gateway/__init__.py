"""The gateway: Orbit's HTTP API and AMQP command intake.

:class:`~orbit_services.gateway.executions.Executions` holds what the gateway
offers (register, start, signal, cancel, read); ``create_app`` builds the
FastAPI application over it; :class:`GatewayService` runs it with uvicorn and
consumes ``NS.commands``; ``orbit service gateway`` runs it.
"""

from orbit_services.gateway.app import create_app
from orbit_services.gateway.service import GatewayService

__all__ = ["GatewayService", "create_app"]
