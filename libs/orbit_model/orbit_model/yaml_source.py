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

import re
from collections.abc import Mapping
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
    lines: Mapping[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int:
        """The line of the value at ``path``, or of its nearest written parent."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return 1


def load_yaml(text: str, name: str = "<string>") -> SourceDocument:
    """Parse one YAML document into plain values with their lines.

    Raises:
        YamlSourceError: The text is not YAML, holds more or less than one
            document, or uses something JSON cannot hold (custom tags,
            non-string keys, duplicate keys, NaN, recursive aliases).
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
    data = builder.value(nodes[0], (), frozenset())
    builder.lines.setdefault((), 1)
    return SourceDocument(name=name, data=data, lines=builder.lines)


#: Most values a document may expand to. Aliases let a few lines stand for
#: billions of values ("billion laughs"); no workflow comes near this.
MAX_VALUES = 100_000


class _Builder:
    """Walks a composed node tree, producing plain values and recording lines."""

    def __init__(self) -> None:
        self.lines: dict[Path, int] = {}

    def value(self, node: yaml.Node, path: Path, active: frozenset[int]) -> Any:
        if len(self.lines) >= MAX_VALUES:
            raise YamlSourceError(
                node.start_mark.line + 1,
                path,
                f"the document expands to more than {MAX_VALUES} values (through aliases?)",
            )
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if id(node) in active:
            raise YamlSourceError(node.start_mark.line + 1, path, "an alias refers to itself")
        active = active | {id(node)}
        if isinstance(node, yaml.SequenceNode):
            self._check_tag(node, path, "seq")
            return [
                self.value(item, (*path, index), active) for index, item in enumerate(node.value)
            ]
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, active)
        raise YamlSourceError(node.start_mark.line + 1, path, "unsupported YAML node")

    def _mapping(
        self, node: yaml.MappingNode, path: Path, active: frozenset[int]
    ) -> dict[str, Any]:
        self._check_tag(node, path, "map")
        explicit = sum(1 for key_node, _ in node.value if key_node.tag != _TAG + "merge")
        _CoreSchemaLoader.flatten_mapping(_CONSTRUCTOR, node)  # resolves `<<` merge keys
        # flatten_mapping puts merged entries first; later ones, and the
        # mapping's own keys, override them as YAML's merge key says.
        merged = len(node.value) - explicit
        result: dict[str, Any] = {}
        merged_keys: set[str] = set()
        for position, (key_node, value_node) in enumerate(node.value):
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _TAG + "str":
                raise YamlSourceError(
                    key_line, path, "mapping keys must be strings (quote the key to make it one)"
                )
            key = key_node.value
            if position < merged:
                merged_keys.add(key)
            elif key in merged_keys:
                merged_keys.discard(key)
            elif key in result:
                raise YamlSourceError(key_line, (*path, key), f"duplicate key {key!r}")
            self.lines[(*path, key)] = key_line
            result[key] = self.value(value_node, (*path, key), active)
        return result

    @staticmethod
    def _check_tag(node: yaml.Node, path: Path, kind: str) -> None:
        if node.tag != _TAG + kind:
            raise YamlSourceError(
                node.start_mark.line + 1, path, f"unsupported YAML tag {node.tag!r}"
            )

    @staticmethod
    def _scalar(node: yaml.ScalarNode, path: Path) -> Any:
        text: str = node.value
        line = node.start_mark.line + 1
        tag = node.tag.removeprefix(_TAG)
        if tag == "str":
            return text
        if tag == "null":
            return None
        if tag == "bool":
            return text.lower() == "true"
        if tag == "int":
            return _parse_int(text)
        if tag == "float":
            if text.lower().lstrip("+-") in (".inf", ".nan"):
                raise YamlSourceError(line, path, f"{text} is not a JSON number")
            return float(text)
        raise YamlSourceError(line, path, f"unsupported YAML tag {node.tag!r}")


def _parse_int(text: str) -> int:
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text)


# flatten_mapping is a constructor method but uses nothing of the constructor's
# state beyond the class, so one instance serves every load.
_CONSTRUCTOR = _CoreSchemaLoader("")
