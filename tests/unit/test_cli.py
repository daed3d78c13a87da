"""``orbit validate`` as a user runs it, and which gateway the client commands reach."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from orbit_model.views import ExecutionPage, ExecutionView
from orbit_sdk import client as client_module
from orbit_sdk.cli.app import build_app
from orbit_sdk.settings import GatewayAddress

app = build_app()

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_validate_prints_ok_lines(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["validate", str(EXAMPLES / "hello-world.yaml"), str(EXAMPLES / "fan-out.yaml")]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("ok hello-world@1.0.0 sha256:")
    assert lines[1].startswith("ok fan-out@1.0.0 sha256:")


def test_validate_prints_errors_with_file_and_line(runner: CliRunner, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "orbit: 1\nworkflow: w\nversion: 1.0.0\nsignals: {approval: {}}\n"
        "tasks: {t: {version: '1'}}\n"
        "steps:\n  - id: a\n    if: ${ signals.aproval.ok }\n    task: t\n    retyr: {}\n"
    )
    result = runner.invoke(app, ["validate", str(broken), str(EXAMPLES / "hello-world.yaml")])
    assert result.exit_code == 1
    assert (
        f"{broken}:10: steps[0].retyr: unknown key 'retyr' (did you mean 'retry'?)" in result.stderr
    )
    assert result.stdout.startswith("ok hello-world@1.0.0")
    assert "Traceback" not in result.output


def test_semantic_errors_have_lines_too(runner: CliRunner, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "orbit: 1\nworkflow: w\nversion: 1.0.0\nsignals: {approval: {}}\n"
        "tasks: {t: {version: '1'}}\n"
        "steps:\n  - id: a\n    if: ${ signals.aproval.ok }\n    task: t\n"
    )
    result = runner.invoke(app, ["validate", str(broken)])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"{broken}:8: steps[0].if: undeclared signal 'aproval' (did you mean 'approval'?)"
    )


def test_validate_ir_prints_the_compiled_json(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", "--ir", str(EXAMPLES / "hello-world.yaml")])
    assert result.exit_code == 0
    ir = json.loads(result.stdout)
    assert ir["name"] == "hello-world"
    assert ir["steps"][0]["call"]["input"] == {"name": "${ input.name }"}


def test_a_missing_file_is_an_error_not_a_traceback(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert "cannot read" in result.stderr
    assert "Traceback" not in result.output


def test_a_file_that_is_not_text_is_an_error(runner: CliRunner, tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    result = runner.invoke(app, ["validate", str(binary)])
    assert result.exit_code == 1
    assert "cannot read" in result.stderr


def test_no_files_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2


# -- the gateway a client command reaches ----------------------------------------

URL_SETTINGS = ("ORBIT_URL", "ORBIT_HTTP_HOST", "ORBIT_HTTP_PORT")


class _RecordingClient:
    """Stands for ``OrbitClient``: remembers the URL it was made for, answers no workers."""

    urls: ClassVar[list[str]] = []

    def __init__(self, url: str | Sequence[str], token: str | None = None) -> None:
        self.urls.append(url if isinstance(url, str) else ",".join(url))

    async def __aenter__(self) -> _RecordingClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    async def workers(self) -> list[dict[str, Any]]:
        return []


@pytest.fixture
def reached(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs the commands made a client for; the URL settings start unset."""
    for name in URL_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    urls: ClassVar[list[str]] = []
    monkeypatch.setattr(_RecordingClient, "urls", urls)
    monkeypatch.setattr(client_module, "OrbitClient", _RecordingClient)
    return urls


def test_url_takes_a_list_of_gateways(runner: CliRunner, reached: list[str]) -> None:
    urls = "http://gw-1:8080, http://gw-2:8080/"
    assert runner.invoke(app, ["workers", "--json", "--url", urls]).exit_code == 0
    assert reached == ["http://gw-1:8080,http://gw-2:8080"]
    bad = runner.invoke(app, ["workers", "--url", "http://gw-1:8080,gw-2:8080"])
    assert bad.exit_code == 2
    assert "'gw-2:8080' is not an http:// or https:// URL" in bad.output


def test_the_default_url_is_the_local_gateway(runner: CliRunner, reached: list[str]) -> None:
    result = runner.invoke(app, ["workers", "--json"])
    assert result.exit_code == 0, result.output
    assert reached == ["http://127.0.0.1:8080"]


def test_the_default_url_follows_the_gateways_settings(
    runner: CliRunner, reached: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The gateway of this environment listens on ORBIT_HTTP_HOST:ORBIT_HTTP_PORT; the
    # engine of whoever else runs on this machine's 8080 is not this one.
    monkeypatch.setenv("ORBIT_HTTP_PORT", "9123")
    assert runner.invoke(app, ["workers", "--json"]).exit_code == 0
    monkeypatch.setenv("ORBIT_HTTP_HOST", "gateway.internal")
    assert runner.invoke(app, ["workers", "--json"]).exit_code == 0
    assert reached == ["http://127.0.0.1:9123", "http://gateway.internal:9123"]


def test_url_and_orbit_url_win_over_the_gateways_settings(
    runner: CliRunner, reached: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORBIT_HTTP_PORT", "9123")
    monkeypatch.setenv("ORBIT_URL", "http://from-env:7000")
    assert runner.invoke(app, ["workers", "--json"]).exit_code == 0
    given = ["workers", "--json", "--url", "http://from-option:7001"]
    assert runner.invoke(app, given).exit_code == 0
    assert reached == ["http://from-env:7000", "http://from-option:7001"]


def test_a_bad_gateway_setting_is_a_usage_error_not_a_guess(
    runner: CliRunner, reached: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORBIT_HTTP_PORT", "eighty")
    result = runner.invoke(app, ["workers"])
    assert result.exit_code == 2
    assert "ORBIT_HTTP_PORT" in result.stderr
    assert "Traceback" not in result.output
    assert reached == []
    # With a URL given, the gateway's settings are not needed at all.
    monkeypatch.setenv("ORBIT_URL", "http://from-env:7000")
    assert runner.invoke(app, ["workers", "--json"]).exit_code == 0
    assert reached == ["http://from-env:7000"]


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("127.0.0.1", 8080, "http://127.0.0.1:8080"),
        ("0.0.0.0", 9000, "http://127.0.0.1:9000"),
        ("", 9000, "http://127.0.0.1:9000"),
        ("::", 9000, "http://[::1]:9000"),
        ("::1", 9000, "http://[::1]:9000"),
        ("10.1.2.3", 80, "http://10.1.2.3:80"),
        ("orbit.example.com", 443, "http://orbit.example.com:443"),
    ],
)
def test_the_gateway_url_reaches_where_the_gateway_listens(host: str, port: int, url: str) -> None:
    assert GatewayAddress(http_host=host, http_port=port).gateway_url == url


def test_history_shows_an_event_that_no_longer_decodes_raw_with_its_code() -> None:
    from rich.console import Console  # noqa: PLC0415

    from orbit_sdk.cli.render import history_table  # noqa: PLC0415

    events = [
        {"seq": 1, "recorded_at": "t1", "type": "WorkflowCreated", "data": {"input": 1}},
        {
            "seq": 2,
            "recorded_at": "t2",
            "type": "SignalReceived",
            "data": {},
            "raw": '{"type": "SignalReceived", "payload": [[[[',
            "error": {"code": "HISTORY_UNREADABLE", "message": "too deep"},
        },
    ]
    console = Console(width=200, record=True)
    console.print(history_table(events))
    text = console.export_text()
    assert 'HISTORY_UNREADABLE: {"type": "SignalReceived", "payload": [[[[' in text
    assert '{"input":1}' in text.replace(" ", "")


def test_get_shows_the_cause_chain_and_every_attempts_child() -> None:
    from rich.console import Console  # noqa: PLC0415

    from orbit_sdk.cli.render import show_execution  # noqa: PLC0415

    task = {"code": "DECLINED", "message": "no", "details": {"foo": "bar"}}
    child_error = {
        "code": "CHILD_FAILED",
        "message": "child workflow o-1:pay:attempt-2 failed",
        "details": {"child_execution_id": "o-1:pay:attempt-2", "status": "failed"},
        "cause": {**task, "step": "charge", "execution_id": "o-1:pay:attempt-2"},
    }
    execution = {
        "execution_id": "o-1",
        "workflow": "order",
        "version": "1.0.0",
        "status": "failed",
        "parent": None,
        "created_at": "2026-05-01T12:00:00+00:00",
        "closed_at": "2026-05-01T12:00:01+00:00",
        "input": None,
        "output": None,
        "waiting_for": [],
        "lost_messages": [],
        "error": {
            "code": "CHILD_FAILED",
            "message": "step 'pay' failed",
            "cause": {**child_error, "step": "pay", "execution_id": "o-1"},
        },
        "steps": {
            "pay": {
                "status": "failed",
                "attempt": 2,
                "output": None,
                "kind": "workflow",
                "waiting_for": None,
                "error": child_error,
                "children": ["o-1:pay", "o-1:pay:attempt-2"],
            }
        },
    }
    console = Console(width=200, record=True)
    show_execution(console, ExecutionView.model_validate(execution))
    text = console.export_text()
    assert "↳ caused by CHILD_FAILED in step pay: child workflow o-1:pay:attempt-2 failed" in text
    assert '↳ caused by DECLINED in step charge of o-1:pay:attempt-2: no {"foo": "bar"}' in text
    assert "↳ children" in text
    assert "o-1:pay, o-1:pay:attempt-2" in text


# -- orbit --version, orbit definitions, orbit list's layout, the hints ----------------


def test_version_names_the_installed_distributions(runner: CliRunner) -> None:
    from importlib.metadata import version  # noqa: PLC0415

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"orbit {version('orbit-sdk')} (orbit-sdk ")
    assert f"orbit-server {version('orbit-server')}" in result.stdout


LISTED = [
    {
        "execution_id": "6947469c-1234-4b3a-9c3e-0123456789ab",
        "workflow": "order-fulfilment",
        "version": "1.0.0",
        "status": "completed",
        "parent": None,
        "created_at": "2026-05-01T12:00:00.123456+00:00",
        "closed_at": "2026-05-01T12:00:03.654321+00:00",
    },
    {
        "execution_id": "9947469c-1234-4b3a-9c3e-0123456789ab",
        "workflow": "a-workflow-with-a-rather-long-name",
        "version": "10.20.30",
        "status": "timed_out",
        "parent": None,
        "created_at": "2026-05-01T13:00:00.5+02:00",
        "closed_at": None,
    },
]
DEFINITIONS = [
    {
        "name": "order-fulfilment",
        "version": version,
        "hash": "sha256:" + digit * 64,
        "registered_at": "2026-05-01T12:00:00.123456+00:00",
    }
    for version, digit in (("1.0.0", "1"), ("1.10.0", "2"), ("1.9.0", "3"))
]


class _AnsweringClient(_RecordingClient):
    """Stands for ``OrbitClient`` with fixed answers to the reads."""

    asked: ClassVar[list[tuple[str, ...]]] = []

    async def list(self, *_args: Any) -> ExecutionPage:
        return ExecutionPage.model_validate({"items": LISTED, "next_cursor": None})

    async def definitions(self) -> list[dict[str, Any]]:
        return DEFINITIONS

    async def definition(self, name: str, version: str) -> dict[str, Any]:
        self.asked.append((name, version))
        text = (EXAMPLES / "order-fulfilment.yaml").read_text()
        from orbit_model.compiler import compile_definition  # noqa: PLC0415

        return compile_definition(text).ir.to_json_data()


@pytest.fixture
def answering(reached: list[str], monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(_AnsweringClient, "asked", asked)
    monkeypatch.setattr(client_module, "OrbitClient", _AnsweringClient)
    return asked


@pytest.mark.parametrize("columns", [80, 100, 200])
def test_list_keeps_ids_and_statuses_whole_and_times_to_the_second(
    runner: CliRunner,
    answering: list[tuple[str, ...]],
    columns: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orbit_sdk.cli import render  # noqa: PLC0415

    monkeypatch.setattr(render, "_WIDE", columns)  # the width of the terminal it writes to
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns, result.stdout
    for item in LISTED:
        assert any(item["execution_id"] in line for line in lines), result.stdout
        assert any(f" {item['status']} " in line for line in lines), result.stdout
    assert "…" not in result.stdout
    assert ".123456" not in result.stdout
    assert "2026-05-01" in result.stdout
    assert "12:00:00Z" in result.stdout
    assert "11:00:00Z" in result.stdout  # 13:00 at +02:00, in UTC
    assert ("12:00:03Z" in result.stdout) is (columns == 200)  # closed: when it fits


def test_definitions_list_and_show(runner: CliRunner, answering: list[tuple[str, ...]]) -> None:
    listed = runner.invoke(app, ["definitions", "list"])
    assert listed.exit_code == 0, listed.output
    assert "order-fulfilment" in listed.stdout
    assert "sha256:111111111111…" in listed.stdout
    assert "2026-05-01 12:00:00Z" in listed.stdout
    shown = runner.invoke(app, ["definitions", "show", "order-fulfilment"])
    assert shown.exit_code == 0, shown.output
    assert answering == [("order-fulfilment", "1.10.0")]  # the highest version
    text = shown.stdout
    assert f"hash       sha256:{'2' * 64}" in text
    assert "tasks      reserve-stock@1, charge-card@2" in text
    assert "signals    approval" in text
    assert "waits for signal approval" in text
    assert "runs workflow send-invoice@1.0.0" in text
    assert "sleeps 1s" in text
    as_json = runner.invoke(app, ["definitions", "show", "order-fulfilment", "1.0.0", "--json"])
    assert json.loads(as_json.stdout)["name"] == "order-fulfilment"
    assert answering[-1] == ("order-fulfilment", "1.0.0")
    missing = runner.invoke(app, ["definitions", "show", "order-fulfilment", "9.9.9"])
    assert missing.exit_code == 1
    assert missing.stderr.startswith("WORKFLOW_NOT_FOUND: workflow order-fulfilment@9.9.9")


def _program(directory: Path) -> Path:
    program = directory / "orbit"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return program


def test_hints_name_the_orbit_that_runs_when_orbit_is_not_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbit_sdk.cli.hints import orbit_command  # noqa: PLC0415

    program = _program(_bin(tmp_path))
    monkeypatch.setattr("sys.argv", [str(program), "dev"])
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.chdir(tmp_path)
    assert orbit_command() == ".venv/bin/orbit"  # as `make demo` runs it, from here
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert orbit_command() == str(program)
    monkeypatch.setenv("PATH", str(program.parent))
    assert orbit_command() == "orbit"  # on the PATH, the name is enough
    monkeypatch.setattr("sys.argv", ["pytest"])
    assert orbit_command() == "orbit"


def _bin(root: Path) -> Path:
    directory = root / ".venv" / "bin"
    directory.mkdir(parents=True)
    return directory
