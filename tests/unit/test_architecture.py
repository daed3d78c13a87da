"""The house rules, checked: sizes, one error root, and what each distribution loads.

- No module of the three distributions holds over 500 lines of code unless its
  first comment says why it is one concern (``# One concern, long on purpose: …``);
  comments and docstrings are not counted, so none is ever cut short to fit. No
  function is over 60 lines unless a comment right above it says why
  (``# Long on purpose: …``), and no service package over 1,500 lines.
  (docs/contributing.md)
- Every exception class Orbit defines derives from ``OrbitError``, and every
  ``OrbitError`` Orbit raises names an ``ErrorCode`` member.
- ``import orbit_sdk`` stays light: it, and a worker's or a client's names, load
  under 250 modules; a worker loads none of the server, the compiler's libraries or
  the HTTP client.
- ``orbit --help`` loads under 250 modules, neither the compiler nor the HTTP client;
  ``orbit validate`` the compiler and nothing of the clients or the server.
(The import boundaries themselves are import-linter's: ``make lint``.)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = {
    "orbit_model": ROOT / "libs/orbit_model/orbit_model",
    "orbit_sdk": ROOT / "libs/orbit_sdk/orbit_sdk",
    "orbit_services": ROOT / "services/orbit_services",
}
SERVICES = ("gateway", "decider", "dispatcher", "timer", "http_adapter")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_SERVICE_LINES = 1500
SERVICE_LINES = {"gateway": 3200, "decider": 1600}
"""Services allowed more: the gateway is the HTTP API's edge and its trust boundary (its
routes, schemas, errors, the guards every request passes, API tokens' and JWTs' checks,
the console's session cookie and CSRF check, and the token routes), beside the
executions' operations, their batch starts and the waits woken by the store's
notifications. The decider fences its leases (a beat bounded in time, none while
RabbitMQ is unreachable) beside its batches, spans and step clock."""
MAX_CONSOLE_LINES = 2700
"""The console (``gateway/console``) is counted on its own: its pages, forms and the two
drawings it makes on the server (with their bounds) are a web application of their own
inside the gateway, with the headers its pages send (its sign-in cookie and CSRF check
are the gateway's edge's)."""


def _modules() -> list[Path]:
    return sorted(path for root in PACKAGES.values() for path in root.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


LONG_MODULE = "# One concern, long on purpose:"
"""How a module's first comment says why it holds over :data:`MAX_MODULE_LINES`."""


def _explanation_lines(text: str) -> set[int]:
    """The numbers of the lines that only explain: comments and docstrings."""
    lines = {
        number
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip().startswith("#")
    }
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return lines


def _first_comment(text: str) -> str:
    return next((line for line in text.splitlines() if line.startswith("#")), "")


@pytest.mark.parametrize("path", _modules(), ids=_relative)
def test_no_module_holds_over_500_lines_of_code_without_saying_why(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    code = len(text.splitlines()) - len(_explanation_lines(text))
    said_why = _first_comment(text).startswith(LONG_MODULE)
    assert code <= MAX_MODULE_LINES or said_why, f"{_relative(path)} has {code} lines of code"


def test_comments_and_docstrings_are_not_counted() -> None:
    text = '''"""A module.

Its docstring.
"""
# a comment
x = 1  # counted: code


def f() -> None:
    """One line."""
    # another
'''
    assert _explanation_lines(text) == {1, 2, 3, 4, 5, 10, 11}
    assert _first_comment(text) == "# a comment"


def _said_why(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    above = first - 1
    while above >= 0 and lines[above].strip().startswith("#"):
        if "long on purpose" in lines[above].lower():
            return True
        above -= 1
    return False


def test_no_function_is_over_60_lines_without_saying_why() -> None:
    long = []
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES and not _said_why(lines, node):
                    long.append(f"{_relative(path)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, long


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_package_is_small(service: str) -> None:
    package = PACKAGES["orbit_services"] / service
    console = package / "console"
    lines = sum(
        len(p.read_text(encoding="utf-8").splitlines())
        for p in package.rglob("*.py")
        if console not in p.parents
    )
    assert lines < SERVICE_LINES.get(service, MAX_SERVICE_LINES), f"{service}: {lines} lines"


def test_the_console_is_small() -> None:
    console = PACKAGES["orbit_services"] / "gateway" / "console"
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in console.rglob("*.py"))
    assert lines < MAX_CONSOLE_LINES, f"console: {lines} lines"


# -- one error root --------------------------------------------------------------


def _classes() -> dict[str, tuple[str, list[str]]]:
    """Every class Orbit defines: name -> (where, base names)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base).split(".")[-1] for base in node.bases]
                found[node.name] = (_relative(path), bases)
    return found


def test_every_exception_orbit_defines_derives_from_orbit_error() -> None:
    classes = _classes()

    def is_orbit_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "OrbitError":
            return True
        if name not in classes or name in seen:
            return False
        return any(is_orbit_error(base, seen | {name}) for base in classes[name][1])

    def is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in ("Exception", "BaseException") or name.endswith(("Error", "Exception")):
            return (
                name not in classes
                or is_orbit_error(name)
                or any(is_exception(base, seen | {name}) for base in classes[name][1])
            )
        if name not in classes or name in seen:
            return False
        return any(is_exception(base, seen | {name}) for base in classes[name][1])

    outside = [
        f"{where}: {name}"
        for name, (where, bases) in classes.items()
        if name != "OrbitError"
        and any(is_exception(base) for base in bases)
        and not is_orbit_error(name)
    ]
    assert not outside, outside


def test_every_orbit_error_raised_names_an_error_code_member() -> None:
    """``OrbitError(code, …)`` takes an ``ErrorCode.X``; a bare string code is a typo
    waiting to happen. (Subclasses that carry a code from outside, a task's own or the
    gateway's answer, pass theirs through ``super().__init__``.)"""
    loose = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "OrbitError"
                and node.args
            ):
                code = node.args[0]
                named = isinstance(code, ast.Attribute) and ast.unparse(code).startswith(
                    "ErrorCode."
                )
                passed_on = isinstance(code, ast.Name)  # a code chosen above, from ErrorCode
                if not (named or passed_on):
                    loose.append(f"{_relative(path)}:{node.lineno} {ast.unparse(code)}")
    assert not loose, loose


def test_no_failure_code_is_a_string_literal() -> None:
    """The engine's own failure codes (``TaskFailure(code=…)``) are OutcomeCode members."""
    literals = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("TaskFailure"):
                for keyword in node.keywords:
                    if keyword.arg == "code" and isinstance(keyword.value, ast.Constant):
                        literals.append(f"{_relative(path)}:{node.lineno}")
    assert not literals, literals


# -- what each entry point loads -------------------------------------------------

SERVER_SIDE = ("asyncpg", "fastapi", "uvicorn", "aiohttp", "prometheus_client", "orbit_services")
COMPILER_SIDE = ("cel", "jsonschema", "yaml")


def _loaded(script: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after ``script``."""
    result = subprocess.run(
        [sys.executable, "-c", script + "\nimport sys\nprint(','.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(result.stdout.strip().splitlines()[-1].split(","))


MAX_SDK_MODULES = 250
"""What importing the SDK's names may load at most, counted as ``len(sys.modules)`` in a
fresh interpreter (the interpreter alone holds about 33 here; ``asyncio`` and one
pydantic model together, what any worker needs to run, about 260). What a worker loads
to serve (aio-pika, the messages' models, pydantic-settings) comes when it is made and
started; the HTTP client's httpx when a client is made."""


@pytest.mark.parametrize(
    "script",
    [
        "import orbit_sdk",
        "from orbit_sdk import Worker, TaskContext, TaskError, task",
        "from orbit_sdk import OrbitClient, OrbitClientError",
        "from orbit_sdk import Worker, TaskContext, TaskError, task, OrbitClient",
    ],
)
def test_importing_the_sdk_loads_under_250_modules(script: str) -> None:
    loaded = _loaded(script)
    assert len(loaded) < MAX_SDK_MODULES, len(loaded)


def test_a_worker_loads_nothing_of_the_server_the_compiler_or_the_http_client() -> None:
    loaded = _loaded("from orbit_sdk import Worker, TaskContext, TaskError, task")
    tops = {name.split(".")[0] for name in loaded}
    assert not tops & {*SERVER_SIDE, *COMPILER_SIDE, "httpx", "opentelemetry", "typer"}
    assert "jsonschema._format" not in loaded


def test_the_clients_load_nothing_of_the_server_or_the_compiler() -> None:
    loaded = _loaded("from orbit_sdk import OrbitClient, AmqpClient, publish_start")
    tops = {name.split(".")[0] for name in loaded}
    assert not tops & {*SERVER_SIDE, *COMPILER_SIDE}
    assert "jsonschema._format" not in loaded


def _orbit(*arguments: str) -> str:
    """A script that runs ``orbit ARGUMENTS`` as the console script does."""
    return (
        "import contextlib, io, sys\n"
        f"sys.argv = ['orbit', *{list(arguments)!r}]\n"
        "from orbit_sdk.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()\n"
    )


def test_orbit_help_loads_under_250_modules() -> None:
    """``orbit --help`` takes about 0.2 s here (bench/cli.py); what it loads is its cost."""
    loaded = _loaded(_orbit("--help"))
    assert len(loaded) < MAX_SDK_MODULES, len(loaded)


def test_orbit_validate_loads_the_compiler_alone() -> None:
    """``orbit validate`` needs the compiler and its libraries (pydantic, PyYAML, CEL,
    jsonschema-rs): about 330 modules (bench/cli.py times it); nothing of the clients or
    the server, and not the reference JSON Schema library while every schema is valid
    (it is loaded for the words of a problem), and no more than today."""
    workflow = ROOT / "examples" / "order-fulfilment.yaml"
    loaded = _loaded(_orbit("validate", str(workflow)))
    tops = {name.split(".")[0] for name in loaded}
    assert {"orbit_model", "yaml", "jsonschema_rs", "cel"} <= tops
    assert not tops & {
        "httpx",
        "aio_pika",
        "aiormq",
        "pydantic_settings",
        "jsonschema",
        *SERVER_SIDE[:-1],
    }
    assert len(loaded) < 350, len(loaded)


def test_orbit_help_loads_neither_the_compiler_nor_the_http_client() -> None:
    script = (
        "import contextlib, io\n"
        "from orbit_sdk.cli.app import build_app\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    build_app()(['--help'])\n"
    )
    loaded = _loaded(script)
    tops = {name.split(".")[0] for name in loaded}
    assert not tops & {"httpx", "pydantic", "aio_pika", *COMPILER_SIDE, *SERVER_SIDE[:-1]}
    # The server's commands are there, but only the modules that declare them.
    assert {name for name in loaded if name.startswith("orbit_services")} <= {
        "orbit_services",
        "orbit_services.commands",
        "orbit_services.commands.plugin",
        "orbit_services.commands.settings",
        "orbit_services.commands.server",
        "orbit_services.commands.tokens",
        "orbit_services.commands.broker",
    }
