"""The pure core does no I/O, reads no clock and draws no randomness."""

import ast
import subprocess
import sys
from pathlib import Path

import orbit_model

CORE = Path(orbit_model.__file__).parent

# Modules the core may import: the standard library's pure parts, and the
# libraries it is built on. Anything else needs a reason to be added here.
ALLOWED_IMPORTS = {
    "__future__",
    "base64",
    "binascii",
    "bisect",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "functools",
    "hashlib",
    "hmac",  # the MAC of a delivery token, under the execution's secret
    "importlib",
    "json",
    "math",
    "re",
    "sys",
    "types",
    "typing",
    "urllib",  # urllib.parse, to redact a URL's password (urllib.request is below)
    "zlib",  # crc32, the partition of an execution id
    "cel",
    "jsonschema",
    "jsonschema_rs",  # compiled 2020-12 checks; its retriever refuses every URI (contracts.py)
    "re2",  # schema patterns matched in linear time (schema_patterns.py)
    "pydantic",
    "yaml",
    "orbit_model",
}
CLOCK_AND_RANDOM_CALLS = {
    "now",
    "utcnow",
    "today",
    "time",
    "monotonic",
    "perf_counter",
    "random",
    "uuid4",
}
# Modules whose presence means the process can do network or event-loop I/O.
IO_MODULES = {
    "asyncio",
    "asyncpg",
    "aio_pika",
    "aiormq",
    "faststream",
    "aiohttp",
    "http",
    "urllib.request",
}


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_core_imports_only_pure_modules() -> None:
    for path in sorted(CORE.rglob("*.py")):
        unexpected = _imports(ast.parse(path.read_text())) - ALLOWED_IMPORTS
        assert not unexpected, f"{path.name} imports {sorted(unexpected)}"


def test_the_core_reads_no_clock_and_opens_no_file() -> None:
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                function = node.func
                name = (
                    function.attr
                    if isinstance(function, ast.Attribute)
                    else getattr(function, "id", "")
                )
                assert name not in CLOCK_AND_RANDOM_CALLS | {"open"}, (
                    f"{path.name}:{node.lineno} calls {name}"
                )


def test_importing_the_core_loads_no_io_module() -> None:
    # A fresh interpreter: this test process has pytest's own imports.
    script = (
        "import sys, orbit_model\n"
        "loaded = {m for m in sys.modules for io in sys.argv[1:]"
        " if m == io or m.startswith(io + '.')}\n"
        "print(','.join(sorted(loaded)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, *sorted(IO_MODULES)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == ""


def test_the_cel_package_still_works_for_others_after_the_core_loaded_it() -> None:
    script = "import orbit_model, cel, cel.stdlib; print(cel.compile('1 + 2').execute())"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "3"
