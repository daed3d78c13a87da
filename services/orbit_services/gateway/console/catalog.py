"""The workers page and the definitions pages (every version, its YAML, IR, graph, and a
diff between two versions of one workflow)."""

from __future__ import annotations

import difflib
import json
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from orbit_model.access import TokenScope
from orbit_model.compiler import Definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.names import semver_key
from orbit_services.gateway.api.executions import Executions
from orbit_services.gateway.console import paths
from orbit_services.gateway.console.graph import step_graph
from orbit_services.gateway.console.offload import off_loop
from orbit_services.gateway.console.render import pretty_json, pretty_yaml, render
from orbit_services.gateway.edge.auth import ExecutionsRead, WorkersRead

MAX_DIFF_LINES = 2_000
"""The longest text (in lines, each side) the page compares: the diff's work grows with
the product of the two lengths (two 40,000-line definitions: 86 s)."""


def _diff(old: str, new: str, old_name: str, new_name: str) -> list[tuple[str, str]] | str:
    """A unified diff as (kind, line) pairs (kind is add, remove, hunk or same), or why
    there is none: a side past :data:`MAX_DIFF_LINES`."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    longest = max(len(old_lines), len(new_lines))
    if longest > MAX_DIFF_LINES:
        return (
            f"Not compared here: {old_name} or {new_name} has {longest:,} lines, more than"
            f" the {MAX_DIFF_LINES:,} the console compares. Compare them with a tool of your own."
        )
    lines = []
    for line in difflib.unified_diff(old_lines, new_lines, old_name, new_name, lineterm=""):
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "remove"
        else:
            kind = "same"
        lines.append((kind, line))
    return lines


async def _diff_with(
    executions: Executions, definition: Definition, source: str | None, version: str
) -> list[tuple[str, str]] | str:
    """The diff from ``version`` to ``definition``: of their YAML, or of their IRs when
    either came as IR."""
    name = definition.ir.name
    other = await executions.registry.get(name, version)
    if other is None:
        raise OrbitError(
            ErrorCode.WORKFLOW_NOT_FOUND, f"workflow {name}@{version} is not registered"
        )
    other_source = await executions.store.console.definition_source(name, version)
    if source is not None and other_source is not None:
        old, new = other_source, source
    else:
        old = json.dumps(other.ir.to_json_data(), indent=2)
        new = json.dumps(definition.ir.to_json_data(), indent=2)
    return await off_loop(_diff, old, new, f"{name}@{version}", definition.ref)


def _shown(definition: Definition, source: str | None) -> dict[str, Any]:
    """The page's drawings and highlighted texts: CPU work (a second or two for a
    definition of 1 MB), run off the loop."""
    return {
        "graph": step_graph(definition.hash, definition.ir, {}),
        "source": None if source is None else pretty_yaml(source),
        "ir_json": pretty_json(definition.ir.to_json_data()),
    }


def catalog_router(executions: Executions) -> APIRouter:
    router = APIRouter()

    @router.get(paths.WORKERS, include_in_schema=False)
    async def workers_page(request: Request, _grant: WorkersRead) -> Response:
        return render(request, "workers.html", workers=await executions.workers())

    @router.get(paths.DEFINITIONS, include_in_schema=False)
    async def definitions_page(request: Request, grant: ExecutionsRead) -> Response:
        by_name: dict[str, list[dict[str, Any]]] = {}
        for item in await executions.definitions():
            if grant.covers(item["name"]):
                by_name.setdefault(item["name"], []).append(item)
        for versions in by_name.values():
            versions.sort(key=lambda item: semver_key(item["version"]), reverse=True)
        return render(request, "definitions.html", by_name=dict(sorted(by_name.items())))

    @router.get(paths.DEFINITION, include_in_schema=False)
    async def definition_page(
        name: str,
        version: str,
        request: Request,
        grant: ExecutionsRead,
        diff: str | None = None,
    ) -> Response:
        grant.require(TokenScope.EXECUTIONS_READ, name)
        definition = await executions.registry.get(name, version)
        if definition is None:
            raise OrbitError(
                ErrorCode.WORKFLOW_NOT_FOUND, f"workflow {name}@{version} is not registered"
            )
        source = await executions.store.console.definition_source(name, version)
        versions = sorted(
            (item["version"] for item in await executions.definitions() if item["name"] == name),
            key=semver_key,
            reverse=True,
        )
        diff_lines = None if not diff else await _diff_with(executions, definition, source, diff)
        return render(
            request,
            "definition.html",
            definition=definition,
            versions=versions,
            diff_version=diff,
            diff_lines=diff_lines,
            **await off_loop(_shown, definition, source),
        )

    return router
