"""The HTTP adapter: Orbit's own worker for ``http:`` steps, behind an SSRF guard."""

from orbit_services.http_adapter.service import HttpAdapterService

__all__ = ["HttpAdapterService"]
