"""The console: the gateway's web pages at /ui (docs/console.md).

Server-rendered (Jinja2 templates, SVG drawn in Python), readable without
JavaScript; a vendored, pinned htmx refreshes the live parts and sends the
forms without a reload. It reads and acts through the same
:class:`~orbit_services.gateway.api.executions.Executions` as the API, under the
same tokens and scopes (:mod:`orbit_services.gateway.edge.console_session` for how a browser
carries one).
"""
