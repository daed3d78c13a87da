"""Which services exist, and running one, several or all of them in one process.

``orbit service NAME`` runs one; ``orbit dev`` runs all of them together,
which is what a laptop needs. Every service is also importable on its own,
so a deployment can scale each separately.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from orbit_sdk.lifecycle import Service
from orbit_services.runtime.settings import Settings


def _gateway(settings: Settings) -> Service:
    from orbit_services.gateway.service import GatewayService  # noqa: PLC0415

    return GatewayService(settings)


def _decider(settings: Settings) -> Service:
    from orbit_services.decider import DeciderService  # noqa: PLC0415

    return DeciderService(settings)


def _dispatcher(settings: Settings) -> Service:
    from orbit_services.dispatcher import DispatcherService  # noqa: PLC0415

    return DispatcherService(settings)


def _timer(settings: Settings) -> Service:
    from orbit_services.timer import TimerService  # noqa: PLC0415

    return TimerService(settings)


def _http_adapter(settings: Settings) -> Service:
    from orbit_services.http_adapter import HttpAdapterService  # noqa: PLC0415

    return HttpAdapterService(settings)


# Imported on demand: a process running one service loads only what it needs.
SERVICES: dict[str, Callable[[Settings], Service]] = {
    "gateway": _gateway,
    "decider": _decider,
    "dispatcher": _dispatcher,
    "timer": _timer,
    "http-adapter": _http_adapter,
}

# The order `orbit dev` starts them in: consumers before the gateway lets clients in;
# the HTTP adapter registers with the dispatcher, so after it.
START_ORDER = ("decider", "dispatcher", "timer", "http-adapter", "gateway")


def build(
    names: Sequence[str], settings: Settings, amqp_urls: Mapping[str, str] | None = None
) -> list[Service]:
    """The services named, in start order.

    Args:
        amqp_urls: A service's own broker URL, by service name, where it differs from
            ``settings.amqp_url``: with a RabbitMQ user per role, each logs in as its own
            (:func:`~orbit_services.commands.broker_setup.provision_local_roles`).

    Raises:
        KeyError: A name that is not a service (the message lists the real ones).
    """
    unknown = [name for name in names if name not in SERVICES]
    if unknown:
        raise KeyError(f"no service {unknown[0]!r}; the services are: {', '.join(SERVICES)}")
    ordered = sorted(names, key=START_ORDER.index)
    urls = amqp_urls or {}
    return [
        SERVICES[name](
            settings.model_copy(update={"amqp_url": urls[name]}) if name in urls else settings
        )
        for name in ordered
    ]
