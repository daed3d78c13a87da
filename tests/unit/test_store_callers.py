"""Every public method of the store's classes has a caller outside the tests.

The store is the one place that speaks SQL, so a method nobody calls is a query
nobody runs, kept correct by its tests alone (``EventStore.read_new_events``
was, long after its last caller went).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "services" / "orbit_services" / "store"
SOURCES = [
    path
    for folder in ("services", "libs", "bench", "tools")
    for path in (ROOT / folder).rglob("*.py")
    if ".venv" not in path.parts
]


def _public_methods() -> list[tuple[str, str]]:
    found = []
    for path in sorted(STORE.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            found += [
                (node.name, method.name)
                for method in node.body
                if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef)
                and not method.name.startswith("_")
            ]
    return found


def test_every_public_store_method_is_called_outside_the_tests() -> None:
    code = "\n".join(path.read_text() for path in SOURCES)
    methods = _public_methods()
    assert len(methods) > 50  # the walk found the store
    uncalled = [f"{cls}.{name}" for cls, name in methods if not re.search(rf"\.{name}\b", code)]
    assert uncalled == []
