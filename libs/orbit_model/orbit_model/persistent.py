"""Persistent collections for the fold: a new version in O(log n), every old one intact.

An execution's state is immutable: ``evolve`` returns a new state and the
old one stays valid (a decider keeps the state a turn began from). Copying a
``dict`` of every unit on every event made a ``for`` over n elements cost
O(n²); these collections share all but a path of 32-wide nodes between
versions instead.

- :class:`PVector`: a sequence; ``set`` and ``append`` copy one node per
  level (a level holds 32 times more than the one below it).
- :class:`Units`: a mapping in insertion order; its keys live in a list and
  an index that versions *share*, and its values in a :class:`PVector`.

A key list is shared while versions only add keys along one line: a version
that adds a key to a list some other version already extended copies the
part it knows first (that happens only when two different futures are
tried from one state, and costs one copy of the keys).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
V = TypeVar("V")

_BITS = 5
_WIDTH = 1 << _BITS
_MASK = _WIDTH - 1

Node = tuple[Any, ...]


def _set_in(node: Node, shift: int, index: int, value: Any) -> Node:
    slot = (index >> shift) & _MASK
    if shift == 0:
        return (*node[:slot], value, *node[slot + 1 :])
    child = _set_in(node[slot], shift - _BITS, index, value)
    return (*node[:slot], child, *node[slot + 1 :])


def _path(shift: int, value: Any) -> Node:
    node: Node = (value,)
    for _ in range(0, shift, _BITS):
        node = (node,)
    return node


def _push(node: Node, shift: int, index: int, value: Any) -> Node:
    """``node`` with ``value`` at ``index``, the first free place of a node with room."""
    slot = (index >> shift) & _MASK
    if shift == 0:
        return (*node, value)
    if slot < len(node):
        return (*node[:slot], _push(node[slot], shift - _BITS, index, value))
    return (*node, _path(shift - _BITS, value))


class PVector(Sequence[T]):
    """An immutable sequence with O(log n) ``set`` and ``append`` that share structure."""

    __slots__ = ("_len", "_root", "_shift")

    def __init__(self, values: Iterable[T] = ()) -> None:
        self._root: Node = ()
        self._shift = 0
        self._len = 0
        for value in values:
            self._append_in_place(value)

    def _append_in_place(self, value: T) -> None:
        if self._len == _WIDTH << self._shift:  # full: one more level
            self._root = (self._root, _path(self._shift, value))
            self._shift += _BITS
        else:
            self._root = _push(self._root, self._shift, self._len, value)
        self._len += 1

    def _clone(self) -> PVector[T]:
        new: PVector[T] = PVector.__new__(PVector)
        new._root, new._shift, new._len = self._root, self._shift, self._len
        return new

    def append(self, value: T) -> PVector[T]:
        new = self._clone()
        new._append_in_place(value)
        return new

    def set(self, index: int, value: T) -> PVector[T]:
        if not 0 <= index < self._len:
            raise IndexError(index)
        new = self._clone()
        new._root = _set_in(self._root, self._shift, index, value)
        return new

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        node = self._root
        shift = self._shift
        while shift:
            node = node[(index >> shift) & _MASK]
            shift -= _BITS
        return node[index & _MASK]  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[T]:
        yield from _walk(self._root, self._shift)

    def iter_from(self, start: int) -> Iterator[T]:
        """The values from position ``start`` on, without copying the ones before."""
        return (self[index] for index in range(start, self._len))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, PVector):
            return self._len == other._len and _same(self._root, other._root, self._shift)
        if isinstance(other, (tuple, list)):
            return self._len == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"PVector({list(self)!r})"


def _same(a: Node, b: Node, shift: int) -> bool:
    """Whether two nodes hold equal values: shared nodes (most of two versions) at once."""
    if a is b:
        return True
    if len(a) != len(b):
        return False
    if shift == 0:
        return a == b
    return all(_same(x, y, shift - _BITS) for x, y in zip(a, b, strict=True))


def _walk(node: Node, shift: int) -> Iterator[Any]:
    if shift == 0:
        yield from node
        return
    for child in node:
        yield from _walk(child, shift - _BITS)


class _Keys:
    """The keys of a line of :class:`Units` versions, in insertion order, with their
    positions: shared by every version of the line (each knows how many are its own)."""

    __slots__ = ("index", "order")

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.index = {key: position for position, key in enumerate(order)}


class Units(Mapping[str, V], Generic[V]):
    """An immutable mapping in insertion order: ``set`` in O(log n), old versions intact."""

    __slots__ = ("_count", "_keys", "_values")

    def __init__(self, items: Mapping[str, V] | Iterable[tuple[str, V]] = ()) -> None:
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        merged: dict[str, V] = {}
        for key, value in pairs:
            merged[key] = value
        self._keys = _Keys(list(merged))
        self._count = len(merged)
        self._values: PVector[V] = PVector(merged.values())

    def position(self, key: str) -> int | None:
        """Where ``key`` was first inserted (0 for the first key); None if absent."""
        position = self._keys.index.get(key)
        return position if position is not None and position < self._count else None

    def set(self, key: str, value: V) -> Units[V]:
        """This mapping with ``key`` set to ``value`` (a new key goes last)."""
        new: Units[V] = Units.__new__(Units)
        position = self.position(key)
        if position is not None:
            new._keys, new._count = self._keys, self._count
            new._values = self._values.set(position, value)
            return new
        order = self._keys.order
        if len(order) == self._count:
            order.append(key)  # this version ends the line: extend it for everyone
            self._keys.index[key] = self._count
            new._keys = self._keys
        elif order[self._count] == key:
            new._keys = self._keys  # the same key as the line's next: share it
        else:
            new._keys = _Keys([*order[: self._count], key])
        new._count = self._count + 1
        new._values = self._values.append(value)
        return new

    def __getitem__(self, key: str) -> V:
        position = self.position(key)
        if position is None:
            raise KeyError(key)
        return self._values[position]

    def get(self, key: str, default: Any = None) -> Any:
        position = self._keys.index.get(key)
        if position is None or position >= self._count:
            return default
        return self._values[position]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.position(key) is not None

    def __iter__(self) -> Iterator[str]:
        order = self._keys.order
        return (order[position] for position in range(self._count))

    def __len__(self) -> int:
        return self._count

    def items(self) -> Iterator[tuple[str, V]]:  # type: ignore[override]
        return zip(iter(self), self._values, strict=True)

    def values(self) -> Iterator[V]:  # type: ignore[override]
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Units):
            if self._count != other._count:
                return False
            same_order = self._keys is other._keys or (
                self._keys.order[: self._count] == other._keys.order[: other._count]
            )
            if same_order:  # compared node by node: shared nodes at once
                return self._values == other._values
        if isinstance(other, Mapping):  # like a dict: the order does not count
            return len(self) == len(other) and dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Units({dict(self.items())!r})"
