"""Where :meth:`OrbitClient.deploy <orbit_sdk.client.OrbitClient.deploy>` reads its
definitions, and the order it registers them in: children before their parents."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from orbit_model.errors import DefinitionProblem

if TYPE_CHECKING:
    from orbit_model.compiler import Definition

_YAML_SUFFIXES = (".yaml", ".yml")


def read_sources(sources: Iterable[str | Path]) -> list[tuple[str, str]]:
    """``(name for messages, YAML text)`` of every source, directories expanded."""
    found: list[tuple[str, str]] = []
    for number, source in enumerate(sources, start=1):
        if isinstance(source, str) and "\n" in source:
            found.append((f"<text {number}>", source))
            continue
        path = Path(source)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in _YAML_SUFFIXES)
            found.extend((str(file), file.read_text(encoding="utf-8")) for file in files)
        else:
            found.append((str(path), path.read_text(encoding="utf-8")))
    return found


def _children(definition: Definition) -> set[str]:
    from orbit_model.ir import CallStep  # noqa: PLC0415

    ir = definition.ir
    return {
        f"{step.child.name}@{step.child.version}"
        for step in (*ir.steps, *ir.finally_steps)
        if isinstance(step, CallStep) and step.child is not None
    }


def children_first(compiled: list[tuple[str, Definition]]) -> list[tuple[str, Definition]]:
    """The definitions ordered so each comes after the children it starts (given order kept)."""
    by_ref = {definition.ref: (text, definition) for text, definition in compiled}
    ordered: list[tuple[str, Definition]] = []
    done: set[str] = set()
    visiting: list[str] = []

    def visit(ref: str) -> None:
        if ref in done:
            return
        if ref in visiting:
            cycle = " -> ".join([*visiting[visiting.index(ref) :], ref])
            raise DefinitionProblem(f"workflows start each other in a cycle: {cycle}")
        visiting.append(ref)
        text, definition = by_ref[ref]
        for child in sorted(_children(definition)):
            if child in by_ref:  # others must be registered already
                visit(child)
        visiting.pop()
        done.add(ref)
        ordered.append((text, definition))

    for _, definition in compiled:
        visit(definition.ref)
    return ordered
