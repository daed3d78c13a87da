"""Where the console's pages are: its mount point, each route's path, and every URL of it.

The routes are declared with these paths and the pages link with these builders,
so moving the console is one line (:data:`MOUNT`). The gateway's edge reads them
too, to tell a console page (signed in with its session cookie, forms accepted)
from the API. The builders put values in as given, as the pages always did:
execution ids, workflow names and versions hold no character a path must escape.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

MOUNT = "/ui"
"""The console's root: the executions list."""
LOGIN = MOUNT + "/login"
LOGOUT = MOUNT + "/logout"
STATIC = MOUNT + "/static/"
"""The console's own files (its stylesheet, htmx), served to anyone."""
WORKERS = MOUNT + "/workers"
DEFINITIONS = MOUNT + "/definitions"
DEFINITION = DEFINITIONS + "/{name}/{version}"
EXECUTION = MOUNT + "/executions/{execution_id}"
SIGNAL = EXECUTION + "/signals/{name}"
CANCEL = EXECUTION + "/cancel"
ANY_PAGE = MOUNT + "/{rest:path}"
"""Every path under the mount: the console's own "no such page"."""


def listing(query: Mapping[str, str]) -> str:
    """The executions list with ``query`` (its filters, status and cursor)."""
    return f"{MOUNT}?{urlencode(query)}"


def execution(execution_id: str) -> str:
    return EXECUTION.format(execution_id=execution_id)


def signal(execution_id: str, name: str) -> str:
    """Where the form that sends the signal ``name`` posts."""
    return SIGNAL.format(execution_id=execution_id, name=name)


def cancel(execution_id: str) -> str:
    """Where the form that cancels the execution posts."""
    return CANCEL.format(execution_id=execution_id)


def definition(name: str, version: str) -> str:
    return DEFINITION.format(name=name, version=version)
