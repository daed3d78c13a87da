"""How to name the ``orbit`` command in a hint, so that the hint works when pasted.

``make demo`` runs ``.venv/bin/orbit``, which is not on the user's ``PATH``: a
hint saying ``orbit get ID`` would answer "command not found". A hint names
the program that is running instead, unless ``orbit`` on the ``PATH`` is that
program.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def orbit_command() -> str:
    """``orbit`` when that name on the ``PATH`` runs this program; else the path this
    program was started by (relative to the current directory when it lies under it,
    ``.venv/bin/orbit``). ``orbit`` as well when this process is not the ``orbit``
    command (a test, ``python -m``): there is nothing better to name."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if program is None or program.name != "orbit" or not program.is_file():
        return "orbit"
    found = shutil.which("orbit")
    if found is not None and os.path.samefile(found, program):
        return "orbit"
    absolute = program.absolute()
    try:
        relative = absolute.relative_to(Path.cwd())
    except ValueError:
        return str(absolute)
    # A bare name would be looked up on the PATH: ./orbit runs the one here.
    return str(relative) if len(relative.parts) > 1 else f"./{relative}"
