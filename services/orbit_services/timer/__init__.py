"""The timer and liveness service: fires due timers, expires silent sessions, counts gauges."""

from orbit_services.timer.service import TimerService

__all__ = ["TimerService"]
