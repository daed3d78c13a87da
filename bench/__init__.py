"""Orbit's benchmark: ``python -m bench.run`` (or ``make bench``); see bench/README.md."""
