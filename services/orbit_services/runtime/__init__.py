"""What the services share: the store, the outbox relay, the broker, settings and metrics.

Nothing here belongs to one service; a service's own logic lives in its
package (``orbit_services.gateway``, ``.decider``, ``.dispatcher``, ``.timer``,
``.http_adapter``), and no service imports another.
"""
