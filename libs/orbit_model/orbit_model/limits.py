"""How much one definition may hold, so that compiling, storing and running it stay bounded.

Each limit is far past any real workflow (the examples hold up to six steps;
a workflow's volume is in ``for`` units, not in steps), and short of what
makes registering or starting one cost the gateway a noticeable share of its
memory or time. ``docs/workflow-language.md`` lists them. They are checked
when a definition is compiled or submitted, not when a stored one is read back,
so a definition registered before a limit was lowered keeps running.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from orbit_model.yaml_source import Path

MAX_STEPS = 1000
"""Steps of one definition, ``finally`` steps included."""
MAX_AFTER = 10_000
"""Entries of ``after`` in one definition, a step's implied predecessor included:
ten for each step at the limit of steps, where a real step names a few."""
MAX_IR_BYTES = 4 * 1024 * 1024
"""UTF-8 bytes of the compiled definition's canonical JSON: the IR each start
and each decider holds (a 205 KB definition of aliases compiled to 227 MB)."""
MAX_PROBLEMS = 20
"""Problems listed for one definition that does not compile; past them, the
checks stop (a "did you mean" among a thousand step ids takes milliseconds)."""


def count_problems(groups: Sequence[tuple[str, Any]]) -> Iterator[tuple[Path, str]]:
    """What of ``groups`` (``("steps", […])``, ``("finally", […])``) is past the limits.

    Works on the YAML's plain values, before they are validated (so a huge list
    of steps is refused before anything is built of it), and on the IR's steps.
    A step of the YAML without ``after`` implies its predecessor; one of the IR
    lists it.
    """
    total = sum(len(steps) for _, steps in groups if isinstance(steps, list | tuple))
    steps_seen = after_seen = 0
    for key, steps in groups:
        if not isinstance(steps, list | tuple):
            continue  # the checks of structure report it
        for index, step in enumerate(steps):
            steps_seen += 1
            if steps_seen > MAX_STEPS:
                yield (
                    (key, index),
                    f"the definition has {total:,} steps (finally included);"
                    f" the limit is {MAX_STEPS:,}",
                )
                return
            after = _after(step, implied=index > 0)
            after_seen += after
            if after_seen > MAX_AFTER:
                yield (
                    (key, index, "after"),
                    f"the definition's after entries pass the limit of {MAX_AFTER:,}"
                    " (a step without after has one: the step before it)",
                )
                return


def _after(step: Any, implied: bool) -> int:
    """How many steps ``step``'s ``after`` names (one if it implies its predecessor)."""
    if isinstance(step, dict):  # the YAML's: no after (or null) names the step before
        after = step.get("after")
        if after is None:
            return 1 if implied else 0
    else:
        after = getattr(step, "after", ())
    return len(after) if isinstance(after, list | tuple) else 0
