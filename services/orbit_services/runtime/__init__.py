"""What the services share besides the store: how they start and stop, broker declarations,
settings, metrics, the clock.

Nothing here belongs to one service; a service's own logic lives in its
package (``orbit_services.gateway``, ``.decider``, ``.dispatcher``, ``.timer``,
``.http_adapter``), and no service imports another. Postgres is the store's
(``orbit_services.store``); this package does not import it.
"""
