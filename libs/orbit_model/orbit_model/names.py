"""What names, versions and references may look like."""

from __future__ import annotations

import re

WORKFLOW_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?"
)
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
CONTRACT_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,49}")
#: Step ids, signal names and query names.
IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,99}")
#: Names CEL can read after a dot (``steps.charge``); others need ``steps["a-b"]``.
CEL_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Execution ids, chosen by clients or made by Orbit.
EXECUTION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
EXECUTION_ID_RULE = "execution ids are 1 to 200 letters, digits and - _ . :"
#: A signal's request id (the same alphabet as execution ids, so a UUID fits).
REQUEST_ID = EXECUTION_ID
REQUEST_ID_RULE = "request ids are 1 to 200 letters, digits and - _ . :"
RESERVED_TASK_PREFIX = "orbit."
#: The ``runtime`` Orbit's own workers (the HTTP adapter) register with; only they
#: may serve built-in tasks.
BUILTIN_RUNTIME = "orbit"
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

WORKFLOW_NAME_RULE = (
    "lowercase letters, digits, - _ . (at most 100, starting with a letter or digit)"
)
IDENTIFIER_RULE = "a letter, then letters, digits, - or _ (at most 100)"
TASK_NAME_RULE = "letters, digits, - _ . (at most 100, starting with a letter or digit)"


def semver_key(version: str) -> tuple[tuple[int, ...], bool, str, str]:
    """Sort key of a version: numeric parts first; a release above its pre-releases."""
    core, _, pre = version.partition("+")[0].partition("-")
    numbers = tuple(int(part) if part.isdigit() else 0 for part in core.split("."))
    return numbers, pre == "", pre, version
