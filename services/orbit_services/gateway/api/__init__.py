"""The gateway's API: what it offers and the two ways to ask for it.

:class:`~orbit_services.gateway.api.executions.Executions` holds the operations
(register, start, signal, cancel, read), over the definitions registry, the
batched starts and the waits woken by endings. :mod:`.routes` and
:mod:`.token_routes` serve them over HTTP under ``/v1`` with the bodies of
:mod:`.schemas`; :mod:`.commands` takes the same operations from ``NS.commands``.
The API knows nothing of the console, and takes each request's grant from the
edge (:mod:`orbit_services.gateway.edge.auth`).
"""
