"""``orbit validate`` as a user runs it."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orbit_sdk.cli.app import build_app

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
