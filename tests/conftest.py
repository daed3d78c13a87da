"""What every test shares: no test reads or writes the user's own Orbit credentials, and
Hypothesis judges the properties, not the speed of a loaded machine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The suite runs on as many workers as there are cores, beside Postgres and RabbitMQ:
# how fast examples are drawn there says nothing of the code (a first draw once took
# 1.7 s in CI), so neither the too-slow check nor a per-example deadline applies.
settings.register_profile("orbit", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("orbit")


@pytest.fixture(scope="session", autouse=True)
def private_credentials(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point ``ORBIT_CREDENTIALS`` (``orbit login``'s file) at a file of this test run,
    and keep an ``ORBIT_TOKEN`` of the environment out of the tests."""
    path = tmp_path_factory.mktemp("credentials") / "credentials.json"
    saved = {name: os.environ.pop(name, None) for name in ("ORBIT_CREDENTIALS", "ORBIT_TOKEN")}
    os.environ["ORBIT_CREDENTIALS"] = str(path)
    try:
        yield path
    finally:
        os.environ.pop("ORBIT_CREDENTIALS", None)
        for name, value in saved.items():
            if value is not None:
                os.environ[name] = value
