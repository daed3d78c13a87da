"""orbit_sdk.credentials: one token per gateway, in a file of the user's only."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from orbit_sdk.credentials import (
    forget_token,
    gateway_key,
    save_token,
    saved_token,
    token_for,
)


def test_the_loopback_names_are_one_gateway_and_paths_are_others() -> None:
    assert gateway_key("http://127.0.0.1:8080") == gateway_key("http://localhost:8080/")
    assert gateway_key("http://[::1]:8080") == gateway_key("http://LOCALHOST:8080")
    assert gateway_key("https://orbit.example") == "https://orbit.example:443"
    assert gateway_key("https://h/a") != gateway_key("https://h/b")
    assert gateway_key("http://h:8080") != gateway_key("http://h:8081")
    assert gateway_key("http://h:not-a-port") == "http://h:0"


def test_a_token_is_kept_per_gateway_readable_by_its_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "orbit" / "credentials.json"
    monkeypatch.setenv("ORBIT_CREDENTIALS", str(path))
    monkeypatch.delenv("ORBIT_TOKEN", raising=False)
    save_token("http://127.0.0.1:8080", "orbit_a", "dev")
    save_token("https://prod.example", "orbit_b")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert saved_token("http://localhost:8080") == "orbit_a"
    assert token_for("https://prod.example/") == "orbit_b"
    assert saved_token("https://other.example") is None
    monkeypatch.setenv("ORBIT_TOKEN", "orbit_env")
    assert token_for("https://prod.example") == "orbit_env"
    assert forget_token("https://prod.example")
    assert not forget_token("https://prod.example")
    assert saved_token("http://127.0.0.1:8080") == "orbit_a"


def test_an_unreadable_file_holds_no_token(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text("not json")
    assert saved_token("http://127.0.0.1:8080", path) is None
    save_token("http://127.0.0.1:8080", "orbit_a", path=path)
    assert saved_token("http://127.0.0.1:8080", path) == "orbit_a"
