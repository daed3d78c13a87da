"""``python -m orbit_sdk`` is the ``orbit`` command."""

from orbit_sdk.cli import main

main()
