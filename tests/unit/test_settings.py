"""Settings: the SPEC §5 names and defaults, and a readable error for a bad value."""

from __future__ import annotations

import pytest

from orbit_services.runtime.settings import SettingsError, load_settings


def test_defaults_are_the_local_services(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "AMQP_URL", "NAMESPACE", "HTTP_PORT"):
        monkeypatch.delenv(f"ORBIT_{name}", raising=False)
    settings = load_settings()
    assert settings.database_url == "postgresql://postgres@127.0.0.1:5432/orbit"
    assert settings.amqp_url == "amqp://guest:guest@127.0.0.1:5672/"
    assert (settings.namespace, settings.http_port) == ("orbit", 8080)
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms) == (30_000, 5_000)
    assert settings.http_adapter_enabled is False
    assert settings.max_payload_bytes == 2 * 1024 * 1024
    assert settings.max_payload_depth == 64
    assert settings.max_definition_bytes == 1024 * 1024
    assert settings.max_wait_seconds == 60.0
    assert (settings.limits.max_history_events, settings.limits.max_fan_out) == (100_000, 10_000)
    assert settings.log_format == "text"


def test_the_environment_sets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBIT_NAMESPACE", "staging")
    monkeypatch.setenv("ORBIT_MAX_FAN_OUT", "50")
    monkeypatch.setenv("ORBIT_HTTP_ADAPTER_ENABLED", "true")
    settings = load_settings()
    assert settings.namespace == "staging"
    assert settings.limits.max_fan_out == 50
    assert settings.http_adapter_enabled is True


def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBIT_AMQP_URL", "http://rabbit")
    monkeypatch.setenv("ORBIT_HTTP_PORT", "0")
    with pytest.raises(SettingsError) as error:
        load_settings()
    message = str(error.value)
    assert "ORBIT_AMQP_URL: must be an amqp:// or amqps:// URL" in message
    assert "ORBIT_HTTP_PORT: Input should be greater than or equal to 1" in message


def test_a_namespace_must_be_a_safe_prefix() -> None:
    with pytest.raises(SettingsError, match="ORBIT_NAMESPACE"):
        load_settings(namespace="has space")


def test_heartbeats_must_come_at_least_twice_per_session_timeout() -> None:
    # 3 s sessions with the default 5 s heartbeats: healthy workers would expire.
    with pytest.raises(SettingsError) as refused:
        load_settings(session_timeout_ms=3_000)
    assert refused.value.code == "INVALID_SETTINGS"
    assert (
        "ORBIT_SESSION_TIMEOUT_MS (3000) must be at least twice"
        " ORBIT_HEARTBEAT_INTERVAL_MS (5000)" in refused.value.message
    )
    assert load_settings(session_timeout_ms=10_000).session_timeout_ms == 10_000


def test_a_worker_checks_them_too() -> None:
    from orbit_sdk.settings import load_client_settings  # noqa: PLC0415

    with pytest.raises(SettingsError, match="at least twice"):
        load_client_settings(session_timeout_ms=1_000, heartbeat_interval_ms=600)
