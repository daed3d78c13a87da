"""The workers page and the definitions pages (every version, its YAML, IR, graph, and a
diff between two versions of one workflow)."""

from __future__ import annotations

import difflib
import json
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from orbit_model.access import Scope
from orbit_model.compiler import Definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.names import semver_key
from orbit_services.gateway.auth import ExecutionsRead, WorkersRead
from orbit_services.gateway.console.graph import graph_svg
from orbit_services.gateway.console.render import render
from orbit_services.gateway.executions import Executions


def _diff(old: str, new: str, old_name: str, new_name: str) -> list[tuple[str, str]]:
    """A unified diff as (kind, line) pairs: kind is add, remove, hunk or same."""
    lines = []
    for line in difflib.unified_diff(
        old.splitlines(), new.splitlines(), old_name, new_name, lineterm=""
    ):
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
) -> list[tuple[str, str]]:
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
    return _diff(old, new, f"{name}@{version}", definition.ref)


def catalog_router(executions: Executions) -> APIRouter:
    router = APIRouter()

    @router.get("/ui/workers", include_in_schema=False)
    async def workers_page(request: Request, _grant: WorkersRead) -> Response:
        return render(request, "workers.html", workers=await executions.workers())

    @router.get("/ui/definitions", include_in_schema=False)
    async def definitions_page(request: Request, grant: ExecutionsRead) -> Response:
        by_name: dict[str, list[dict[str, Any]]] = {}
        for item in await executions.definitions():
            if grant.covers(item["name"]):
                by_name.setdefault(item["name"], []).append(item)
        for versions in by_name.values():
            versions.sort(key=lambda item: semver_key(item["version"]), reverse=True)
        return render(request, "definitions.html", by_name=dict(sorted(by_name.items())))

    @router.get("/ui/definitions/{name}/{version}", include_in_schema=False)
    async def definition_page(
        name: str,
        version: str,
        request: Request,
        grant: ExecutionsRead,
        diff: str | None = None,
    ) -> Response:
        grant.require(Scope.EXECUTIONS_READ, name)
        definition = await executions.registry.get(name, version)
        if definition is None:
            raise OrbitError(
                ErrorCode.WORKFLOW_NOT_FOUND, f"workflow {name}@{version} is not registered"
            )
        source = await executions.store.console.definition_source(name, version)
        ir_json = definition.ir.to_json_data()
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
            source=source,
            ir_json=ir_json,
            graph=graph_svg(definition.ir, {}),
            versions=versions,
            diff_version=diff,
            diff_lines=diff_lines,
        )

    return router
