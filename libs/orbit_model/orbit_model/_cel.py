"""The CEL library, imported without its interactive command line.

``import cel`` runs the package's ``__init__``, which also imports
``cel.cli`` and with it typer, rich, prompt_toolkit and asyncio: most of a
second at every start of every Orbit process, and I/O modules the pure core
must not pull in. The evaluator lives in the native ``cel.cel`` module and
the extended functions in ``cel.stdlib``; this loads just those, into a
``cel`` package object that exposes the same names as the real one, so
other code that imports ``cel`` later still finds ``cel.compile`` and can
still import ``cel.cli`` itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


def _load() -> tuple[ModuleType, ModuleType]:
    if "cel" not in sys.modules:
        spec = importlib.util.find_spec("cel")
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError("the CEL library is missing: install common-expression-language")
        package = importlib.util.module_from_spec(spec)  # created, not executed
        sys.modules["cel"] = package
        native = importlib.import_module("cel.cel")
        for name in dir(native):
            if not name.startswith("_"):
                setattr(package, name, getattr(native, name))
    return importlib.import_module("cel.cel"), importlib.import_module("cel.stdlib")


native, stdlib = _load()
