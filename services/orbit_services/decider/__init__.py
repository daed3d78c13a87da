"""The decider: moves executions forward, the single writer of their decisions.

:class:`~orbit_services.decider.service.DeciderService` consumes its
partitions of the decider queue; :mod:`~orbit_services.decider.deciding`
brings states up to date, asks the pure core what follows and commits it.
"""

from orbit_services.decider.service import DeciderService

__all__ = ["DeciderService"]
