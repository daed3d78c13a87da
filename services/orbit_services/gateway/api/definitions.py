"""The definitions registry: parse, pin children, store, and resolve what a start runs.

Definitions never change once registered, and the store keeps every one it
read (by ``(name, version)`` and by hash). Which version of a workflow is the
newest (what a start without a version runs) is read from Postgres at most
once per :data:`LATEST_VERSION_TTL` per workflow: a registration through this
gateway is seen at once, one through another gateway within that time.
"""

from __future__ import annotations

import asyncio
import time

from orbit_model.children import children_of, pin_children
from orbit_model.compiler import Definition, definition_from_body
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.names import semver_key
from orbit_services.store import Store

LATEST_VERSION_TTL = 1.0
"""Seconds a workflow's newest version is remembered (one query per start, otherwise)."""

_JSON_TYPES = ("application/json",)


def is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` names JSON (``application/json`` or ``…+json``)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media in _JSON_TYPES or media.endswith("+json")


class DefinitionRegistry:
    """Registered definitions, and the newest version of each workflow."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._latest: dict[str, tuple[float, str]] = {}
        """Workflow name → (when it was read, its newest version)."""
        self._registered: dict[str, int] = {}
        """Workflow name → registrations through this registry (a read that overlaps
        one is not remembered: it may predate it)."""
        self._compiling = asyncio.Semaphore(1)
        """Definitions sent together are compiled one at a time: one compile's memory."""

    async def compile(self, body: bytes, is_ir: bool) -> Definition:
        """:func:`~orbit_model.compiler.definition_from_body` off the event loop, which
        the largest definition would hold for a second (``orbit_model.limits``)."""
        async with self._compiling:
            return await asyncio.to_thread(definition_from_body, body, is_ir)

    async def register(
        self, definition: Definition, source: str | None = None
    ) -> tuple[Definition, bool]:
        """Pin the children and store the definition; it as stored, and whether it is new.

        ``source``: the YAML it was compiled from (None for IR), kept to be shown.

        Raises:
            OrbitError: ``CHILD_NOT_REGISTERED`` for a ``workflow:`` step whose child
                is not registered (at the hash it pins, if it pins one), or
                ``DEFINITION_CONFLICT`` when its name and version hold another one.
        """
        pinned = await self._pin_children(definition)
        created = await self.store.register_definition(pinned, source)
        name = pinned.ir.name
        self._registered[name] = self._registered.get(name, 0) + 1
        self._latest.pop(name, None)
        return pinned, created

    async def get(self, name: str, version: str) -> Definition | None:
        return await self.store.definition(name, version)

    async def by_hash(self, definition_hash: str) -> Definition:
        """The definition an execution runs.

        Raises:
            OrbitError: ``NOT_FOUND``; executions reference registered hashes, so
                this means the database was changed behind Orbit's back.
        """
        definition = await self.store.definition_by_hash(definition_hash)
        if definition is None:
            raise OrbitError(
                ErrorCode.NOT_FOUND, f"no workflow definition has hash {definition_hash}"
            )
        return definition

    async def resolve(self, name: str, version: str | None) -> Definition:
        """The definition to start: ``version``, or the highest registered one if None.

        Raises:
            OrbitError: ``WORKFLOW_NOT_FOUND``.
        """
        if version is None:
            version = await self._newest(name)
        definition = await self.get(name, version)
        if definition is None:
            raise OrbitError(
                ErrorCode.WORKFLOW_NOT_FOUND, f"workflow {name}@{version} is not registered"
            )
        return definition

    async def _newest(self, name: str) -> str:
        now = time.monotonic()
        known = self._latest.get(name)
        if known is not None and now - known[0] < LATEST_VERSION_TTL:
            return known[1]
        registrations = self._registered.get(name, 0)
        versions = await self.store.definition_versions(name)
        if not versions:  # not remembered: a registration must be seen at once
            raise OrbitError(ErrorCode.WORKFLOW_NOT_FOUND, f"workflow {name} is not registered")
        newest = max(versions, key=semver_key)
        if self._registered.get(name, 0) == registrations:
            self._latest[name] = (now, newest)
        return newest

    async def _pin_children(self, definition: Definition) -> Definition:
        registered = {}
        for name, version in children_of(definition):
            found = await self.get(name, version)
            if found is not None:
                registered[name, version] = found
        return pin_children(definition, registered)
