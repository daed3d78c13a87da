"""Every evaluation of an expression has a budget; past it, ``EXPRESSION_LIMIT``.

A definition's expression is evaluated on what starters, signals and tasks
send, by the decider and by the gateway (queries): without a bound, one
``lists.range(15000).map(x, x)`` held a gateway for 8 s, and eight chained
``replace`` calls built a 100 MB string from a 200-character query.

The cost is counted in units of roughly one element touched, deterministically,
so every decider and gateway decides alike:

- each iteration of a comprehension macro costs one more than the tokens of its
  body (:mod:`orbit_model.cel_rewrite` has every macro call count itself);
- each element a ``map`` or ``filter`` keeps, and each value an extended
  function (``replace``, ``split``, ``lists.range``, …) takes or makes, costs
  its elements plus an eighth of its characters; ``distinct`` and the ``sets``
  functions cost the comparisons they make.

An evaluation may spend :data:`COST_LIMIT` units, and no value a function or a
macro makes may be larger than :data:`VALUE_LIMIT` bytes (approximately: its
characters and 8 per other element); what would be is refused before it is
made where its size is known first (``replace``, ``lists.range``).

The native operators need no count: none of them loops, and a value grows
only by ``+``, once per ``+`` written in the expression.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orbit_model._cel import stdlib
from orbit_model.cel_rewrite import BEGIN, COLLECT, PUSH, TICK
from orbit_model.errors import ErrorCode, OrbitError

COST_LIMIT = 500_000
"""The units one evaluation may spend: a few tenths of a second of CPU at most (a
``map`` over 100,000 elements is 500,000 units; over 10,000 with a body of ten
tokens, 160,000)."""
VALUE_LIMIT = 8 * 1024 * 1024
"""The largest value, in approximate bytes, that a function or a macro may make."""


class ExpressionLimit(OrbitError):
    """Raised inside the CEL library, which wraps it; the budget keeps the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(ErrorCode.EXPRESSION_LIMIT, reason)


@dataclass
class Budget:
    """What one evaluation has spent, and the lists its ``map`` and ``filter`` fill."""

    limit: int = COST_LIMIT
    spent: int = 0
    exceeded: str | None = None
    """Why it stopped; once set, every charge raises again (CEL may swallow an error)."""
    lists: dict[int, list[tuple[list[Any], int]]] = field(default_factory=dict)

    def charge(self, units: int) -> None:
        """Spend ``units``.

        Raises:
            ExpressionLimit: Past the limit (now or before).
        """
        self.spent += units
        if self.exceeded is None and self.spent > self.limit:
            self.exceeded = f"it costs more than {self.limit:,} units (its budget)"
        if self.exceeded is not None:
            raise ExpressionLimit(self.exceeded)

    def refuse(self, what: str) -> None:
        """Stop the evaluation: ``what`` is too large.

        Raises:
            ExpressionLimit: Always.
        """
        self.exceeded = self.exceeded or what
        raise ExpressionLimit(self.exceeded)

    def begin(self, call: int) -> int:
        """Open the list of a ``map`` or ``filter`` call."""
        self.lists.setdefault(call, []).append(([], 0))
        return call

    def push(self, call: int, weight: int, value: Any) -> bool:
        """Count an iteration of ``weight`` and keep ``value`` in the call's list."""
        elements, characters = measure(value)
        self.charge(weight + _units(elements, characters))
        items, size = self.lists[call][-1]
        size += _bytes(elements, characters)
        self.check_size(size, "map or filter")
        items.append(value)
        self.lists[call][-1] = (items, size)
        return True

    def collect(self, call: int, _done: bool) -> list[Any]:
        """Close the call's list and return it."""
        items, _ = self.lists[call].pop()
        return items

    def tick(self, weight: int) -> bool:
        """Count an iteration of ``weight``."""
        self.charge(weight)
        return True

    def check_size(self, size: int, what: str) -> None:
        """Refuse a value of ``size`` approximate bytes over :data:`VALUE_LIMIT`."""
        if size > VALUE_LIMIT:
            self.refuse(
                f"{what} makes a value of about {size:,} bytes (the limit is {VALUE_LIMIT:,})"
            )


def measure(value: Any) -> tuple[int, int]:
    """``value``'s elements (itself included) and characters (of strings, keys and bytes).

    Iterative: a value may nest deeply.
    """
    elements = characters = 0
    pending = [value]
    while pending:
        item = pending.pop()
        elements += 1
        if isinstance(item, str | bytes):
            characters += len(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return elements, characters


def _units(elements: int, characters: int) -> int:
    return elements + characters // 8


def _bytes(elements: int, characters: int) -> int:
    return characters + 8 * elements


Make = Callable[[Budget], Callable[..., Any]]
"""What makes a function CEL calls, charging the budget of one evaluation."""

MACRO_FUNCTIONS: tuple[tuple[str, Make], ...] = (
    (BEGIN, lambda budget: budget.begin),
    (PUSH, lambda budget: budget.push),
    (COLLECT, lambda budget: budget.collect),
    (TICK, lambda budget: budget.tick),
)
"""What a rewritten macro calls (:mod:`orbit_model.cel_rewrite`)."""


# -- the extended standard library, metered ------------------------------------


def _replace_size(s: str, old: str, new: str, limit: int = -1) -> int:
    count = s.count(old) if old else len(s) + 1
    if limit >= 0:
        count = min(count, limit)
    return len(s) + count * (len(new) - len(old))


def _range_size(n: int) -> int:
    return _bytes(max(n, 0), 0)


def _comparisons(*lists: Any) -> int:
    sizes = [len(item) if isinstance(item, list | tuple) else 1 for item in lists]
    return functools.reduce(lambda a, b: a * b, sizes, 1) // 4


_MADE_SIZE: dict[str, Callable[..., int]] = {
    "replace": _replace_size,
    "lists.range": _range_size,
}
"""Functions whose result's size is known before it is made: refused before, if too large."""
_EXTRA_COST: dict[str, Callable[..., int]] = {
    "distinct": lambda items: _comparisons(items, items),
    "sets.contains": _comparisons,
    "sets.equivalent": lambda a, b: 2 * _comparisons(a, b),
    "sets.intersects": _comparisons,
}
"""Functions that compare every pair of elements: they cost those comparisons."""


def _metered(name: str, function: Callable[..., Any]) -> Make:
    made_size = _MADE_SIZE.get(name)
    extra_cost = _EXTRA_COST.get(name)

    def make(budget: Budget) -> Callable[..., Any]:
        def metered(*args: Any) -> Any:
            elements, characters = measure(args)
            budget.charge(_units(elements, characters))
            try:
                extra = extra_cost(*args) if extra_cost is not None else 0
                size = made_size(*args) if made_size is not None else None
            except (TypeError, AttributeError):  # wrong arguments: the function says which
                extra, size = 0, None
            budget.charge(extra)
            if size is not None:
                budget.check_size(size, name)
                budget.charge(size // 8)
            result = function(*args)
            elements, characters = measure(result)
            budget.charge(_units(elements, characters))
            budget.check_size(_bytes(elements, characters), name)
            return result

        return metered

    return make


EXTENDED_FUNCTIONS: tuple[tuple[str, Make], ...] = tuple(
    (name, _metered(name, function))
    for library in stdlib.EXTENSIONS.values()
    for name, function in library.items()
)
"""The extended standard library (``cel.stdlib``), each function charging the budget."""
