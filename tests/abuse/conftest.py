"""The abuse tests share the integration fixtures: a database and namespace per test."""

from tests.integration.conftest import orbit_env, template_database, urls

__all__ = ["orbit_env", "template_database", "urls"]
