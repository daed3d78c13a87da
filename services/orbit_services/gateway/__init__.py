"""The gateway: Orbit's HTTP API and AMQP command intake, and the web console.

It has three faces, each a package: :mod:`.api` (what the gateway offers, over
HTTP and AMQP), :mod:`.edge` (what every request passes first: its ``Host``,
body, token or console session) and :mod:`.console` (the web pages). Here at
the root is only what wires them: ``create_app`` builds the FastAPI application
over :class:`~orbit_services.gateway.api.executions.Executions`, and
:class:`GatewayService` runs it with uvicorn and consumes ``NS.commands``
(``orbit service gateway``); :mod:`.errors` is the error envelope every face
answers with.
"""

from orbit_services.gateway.app import create_app
from orbit_services.gateway.service import GatewayService

__all__ = ["GatewayService", "create_app"]
