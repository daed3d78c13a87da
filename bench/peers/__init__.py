"""Orbit beside its peers: ``make bench-peers``; see bench/README.md.

``run`` (in Orbit's venv) runs W1, W2 and W3 on Orbit and then on each peer,
in one run on one machine, and prints one table with the ratios. Each peer runs
in its own venv (``bench/peers/.venv``, from ``requirements.lock``) as a
program of its own (``dbos_peer``, ``celery_peer``) that imports nothing of Orbit.
"""
