"""Reading an execution through ``OrbitClient`` as the JSON the gateway sent.

``OrbitClient`` answers with the models of :mod:`orbit_model.views`; a test that
checks what the API sends reads them back as that JSON (``view_json``, the
fields a view does not apply to left out, as on the wire).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from pydantic import BaseModel

from orbit_model.views import view_json


async def as_sent(view: Awaitable[BaseModel]) -> dict[str, Any]:
    """The view ``view`` answers with, as the JSON the gateway sent."""
    return view_json(await view)
