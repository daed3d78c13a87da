"""The dispatcher: worker control (registrations, heartbeats, unregistrations), off the hot path."""

from orbit_services.dispatcher.service import DispatcherService

__all__ = ["DispatcherService"]
