"""YAML read into plain JSON values, with the line of every value kept.

Definitions are parsed in two passes: this module turns the text into plain
JSON-compatible values (dicts, lists, strings, numbers, booleans, null) and a
map from each value's path to its line; the compiler then checks the values
and uses the map to point every error at a line.

Scalars follow the YAML 1.2 core schema rather than PyYAML's YAML 1.1 rules,
so ``no`` and ``on`` stay strings, ``1:30`` is not a number and dates are not
turned into objects JSON cannot hold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

from orbit_model.errors import DefinitionProblem

Path = tuple[str | int, ...]

_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CoreSchemaLoader(_Base):  # type: ignore[misc,valid-type]
    """A safe loader whose plain scalars resolve as in the YAML 1.2 core schema."""

    yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, re.Pattern[str]]]]] = {}


for _tag, _pattern, _first in (
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("merge", r"^<<$", ["<"]),
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+.0123456789"),
    ),
):
    _CoreSchemaLoader.add_implicit_resolver(
        f"tag:yaml.org,2002:{_tag}", re.compile(_pattern), _first
    )

_TAG = "tag:yaml.org,2002:"


class YamlSourceError(DefinitionProblem):
    """The text is not YAML Orbit can read.

    Attributes:
        line: 1-based line of the problem.
        path: Where in the document it is (empty for the whole document).
        reason: What is wrong.
    """

    def __init__(self, line: int, path: Path, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.path = path
        self.reason = reason


class LineMap(Mapping[Path, int]):
    """The line of each value, by its path, kept as a tree of path parts.

    A path shares its parent's entry, so a value costs one entry however deep
    it is: a map of whole paths grows with the values times their depth.
    """

    def __init__(self) -> None:
        self._parent: list[int] = [-1]
        self._part: list[str | int] = [""]
        self._line: list[int] = [0]  # 0: no line recorded (yet)
        self._child: dict[tuple[int, str | int], int] = {}

    def child(self, node: int, part: str | int) -> int:
        """The entry of ``part`` under ``node``, made (with no line yet) if new."""
        found = self._child.get((node, part))
        if found is None:
            found = self._child[node, part] = len(self._line)
            self._parent.append(node)
            self._part.append(part)
            self._line.append(0)
        return found

    def set_line(self, node: int, line: int, keep: bool = False) -> None:
        """Record ``line`` for ``node``; with ``keep``, only if it has none yet."""
        if not (keep and self._line[node]):
            self._line[node] = line

    def path(self, node: int) -> Path:
        parts: list[str | int] = []
        while node > 0:
            parts.append(self._part[node])
            node = self._parent[node]
        return tuple(reversed(parts))

    def line_of(self, path: Path) -> int:
        """The line of the value at ``path``, or of its nearest written parent."""
        node, line = 0, self._line[0] or 1
        for part in path:
            found = self._child.get((node, part))
            if found is None or not self._line[found]:
                break
            node, line = found, self._line[found]
        return line

    def _node(self, path: Path) -> int | None:
        node = 0
        for part in path:
            found = self._child.get((node, part))
            if found is None:
                return None
            node = found
        return node

    def __getitem__(self, path: Path) -> int:
        node = self._node(path)
        if node is None or not self._line[node]:
            raise KeyError(path)
        return self._line[node]

    def __iter__(self) -> Iterator[Path]:
        return (self.path(node) for node, line in enumerate(self._line) if line)

    def __len__(self) -> int:
        return sum(1 for line in self._line if line)


@dataclass(frozen=True)
class SourceDocument:
    """A parsed YAML document: its values and where each one was written.

    Attributes:
        name: The file name used in error messages.
        data: The document as plain JSON values.
        lines: The 1-based line of each value, by its path; for a mapping entry
            it is the line of its key.
    """

    name: str
    data: Any
    lines: LineMap = field(default_factory=LineMap)

    def line_of(self, path: Path) -> int:
        """The line of the value at ``path``, or of its nearest written parent."""
        return self.lines.line_of(path)


def load_yaml(text: str, name: str = "<string>") -> SourceDocument:
    """Parse one YAML document into plain values with their lines.

    Raises:
        YamlSourceError: The text is not YAML, holds more or less than one
            document, uses something JSON cannot hold (custom tags, non-string
            keys, duplicate keys, NaN, recursive aliases), or expands past
            :data:`MAX_VALUES`, :data:`MAX_CHARACTERS` or :data:`MAX_DEPTH`.
    """
    try:
        nodes = list(yaml.compose_all(text, Loader=_CoreSchemaLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        # At the end of the text the parser reports the line after the last.
        last_line = max(1, len(text.splitlines()))
        line = min(mark.line + 1, last_line) if mark is not None else 1
        reason = f"not valid YAML: {error.problem or error}"
        context = error.context_mark
        context_line = min(context.line + 1, last_line) if context is not None else line
        if error.context and context_line != line:
            reason += f" ({error.context} that starts on line {context_line})"
        raise YamlSourceError(line, (), reason) from None
    except yaml.YAMLError as error:
        raise YamlSourceError(1, (), f"not valid YAML: {error}") from None
    if not nodes or nodes[0] is None:
        raise YamlSourceError(1, (), "the file holds no YAML document")
    if len(nodes) > 1:
        raise YamlSourceError(
            nodes[1].start_mark.line + 1, (), "only one YAML document per file is allowed"
        )
    builder = _Builder()
    data = builder.value(nodes[0], 0, 0)
    return SourceDocument(name=name, data=data, lines=builder.lines)


#: Most values a document may expand to. Aliases let a few lines stand for
#: billions of values ("billion laughs"); no workflow comes near this.
MAX_VALUES = 100_000
#: Most characters of keys and scalars a document may expand to, an alias's
#: counted at each use: a 200 KB string aliased 1,000 times is a few values,
#: but 200 MB. Without aliases a document never expands past its own length.
MAX_CHARACTERS = 4 * 1024 * 1024
#: How deeply a document may nest mappings and lists: far past a schema for
#: the deepest payload Orbit takes (64), short of what the validators manage.
MAX_DEPTH = 200


class _Builder:
    """Walks a composed node tree, producing plain values and recording lines."""

    def __init__(self) -> None:
        self.lines = LineMap()
        self.values = 0
        self.characters = 0
        self._active: set[int] = set()
        """The collections being built: an alias to one of them refers to itself."""
        self._merged: dict[int, int] = {}
        """Merged entries of each mapping flattened so far (an alias visits it again)."""

    def error(self, node: yaml.Node, at: int, reason: str) -> YamlSourceError:
        return YamlSourceError(node.start_mark.line + 1, self.lines.path(at), reason)

    def count(self, node: yaml.Node, at: int, characters: int) -> None:
        self.values += 1
        self.characters += characters
        if self.values > MAX_VALUES:
            reason = f"the document expands to more than {MAX_VALUES:,} values (through aliases?)"
            raise self.error(node, at, reason)
        if self.characters > MAX_CHARACTERS:
            raise self.error(
                node,
                at,
                f"the document expands to more than {MAX_CHARACTERS:,} characters of keys and"
                " values, the limit of a definition (an alias counts each time it is used)",
            )

    def value(self, node: yaml.Node, at: int, depth: int) -> Any:
        self.lines.set_line(at, node.start_mark.line + 1, keep=True)
        if isinstance(node, yaml.ScalarNode):
            self.count(node, at, len(node.value))
            return self._scalar(node, at)
        self.count(node, at, 0)
        if depth >= MAX_DEPTH:
            raise self.error(node, at, f"the document nests deeper than {MAX_DEPTH} levels")
        if id(node) in self._active:
            raise self.error(node, at, "an alias refers to itself")
        self._active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                self._check_tag(node, at, "seq")
                return [
                    self.value(item, self.lines.child(at, index), depth + 1)
                    for index, item in enumerate(node.value)
                ]
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, at, depth)
            raise self.error(node, at, "unsupported YAML node")
        finally:
            self._active.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, at: int, depth: int) -> dict[str, Any]:
        self._check_tag(node, at, "map")
        merged = self._merged.get(id(node))
        if merged is None:
            explicit = sum(1 for key_node, _ in node.value if key_node.tag != _TAG + "merge")
            _CoreSchemaLoader.flatten_mapping(_CONSTRUCTOR, node)  # resolves `<<` merge keys
            # flatten_mapping puts merged entries first; later ones, and the
            # mapping's own keys, override them as YAML's merge key says.
            merged = self._merged[id(node)] = len(node.value) - explicit
        result: dict[str, Any] = {}
        merged_keys: set[str] = set()
        for position, (key_node, value_node) in enumerate(node.value):
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _TAG + "str":
                raise self.error(
                    key_node, at, "mapping keys must be strings (quote the key to make it one)"
                )
            key = key_node.value
            entry = self.lines.child(at, key)
            if position < merged:
                merged_keys.add(key)
            elif key in merged_keys:
                merged_keys.discard(key)
            elif key in result:
                raise self.error(key_node, entry, f"duplicate key {key!r}")
            self.lines.set_line(entry, key_node.start_mark.line + 1)
            self.characters += len(key)
            result[key] = self.value(value_node, entry, depth + 1)
        return result

    def _check_tag(self, node: yaml.Node, at: int, kind: str) -> None:
        if node.tag != _TAG + kind:
            raise self.error(node, at, f"unsupported YAML tag {node.tag!r}")

    def _scalar(self, node: yaml.ScalarNode, at: int) -> Any:
        text: str = node.value
        tag = node.tag.removeprefix(_TAG)
        if tag == "str":
            return text
        if tag == "null":
            return None
        if tag == "bool":
            return text.lower() == "true"
        if tag == "int":
            try:
                return _parse_int(text)
            except ValueError:  # past Python's limit on digits converted
                raise self.error(node, at, "the integer has too many digits") from None
        if tag == "float":
            # float() takes no ".inf" or ".nan", and reads 1e999 as infinity.
            special = text.lower().lstrip("+-") in (".inf", ".nan")
            number = math.inf if special else float(text)
            if not math.isfinite(number):
                raise self.error(node, at, f"{text} is not a JSON number")
            return number
        raise self.error(node, at, f"unsupported YAML tag {node.tag!r}")


def _parse_int(text: str) -> int:
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text)


# flatten_mapping is a constructor method but uses nothing of the constructor's
# state beyond the class, so one instance serves every load.
_CONSTRUCTOR = _CoreSchemaLoader("")
