"""Package attributes loaded on first use (PEP 562), for Orbit's light ``__init__`` modules.

``orbit_model`` and ``orbit_sdk`` name their public objects at the top, but
importing the package must not import every module: a worker that decodes
messages has no use for the compiler, a module that defines tasks none for
the AMQP client.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, where: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``where`` maps each public
    name to the submodule that defines it; a name, once loaded, is kept in
    ``namespace`` (the package's globals)."""

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *where})

    return getattr_, dir_
