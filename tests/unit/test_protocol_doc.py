"""docs/protocol.md against the code: its examples hold for the defaults it says it uses."""

from __future__ import annotations

import inspect
import json
import re
import typing
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orbit_model import messages
from orbit_model.broker_roles import Role, permissions
from orbit_model.topology import Topology
from orbit_sdk.settings import ClientSettings

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "protocol.md"
DEFAULTS = ClientSettings.model_fields
NAMESPACE: str = DEFAULTS["namespace"].default
PARTITIONS: int = DEFAULTS["decider_partitions"].default


def _text() -> str:
    return PROTOCOL.read_text(encoding="utf-8")


def _json_examples() -> list[dict[str, Any]]:
    """Every JSON object of the page's ```json blocks."""
    blocks = re.findall(r"```json\n(.*?)```", _text(), flags=re.DOTALL)
    return [json.loads(block) for block in blocks]


def test_the_examples_route_results_to_the_partition_of_the_default_partition_count() -> None:
    topology = Topology(NAMESPACE, PARTITIONS)
    routes = [
        (example["execution_id"], example["result_route"])
        for example in _json_examples()
        if "result_route" in example
    ]
    assert len(routes) >= 2  # 6.3 and 6.4
    for execution_id, route in routes:
        expected = topology.results_route(execution_id)
        assert route == {"exchange": expected.exchange, "routing_key": expected.routing_key}


def test_the_worked_partition_example_is_computed_as_the_code_computes_it() -> None:
    text = " ".join(_text().split())
    found = re.search(
        r'`crc32\("([^"]+)"\)` is `(\d+)`, and `\2 mod (\d+) = (\d+)`, so everything about'
        r' `\1` is published with routing key `"(\d+)"` and lands in `orbit\.decider\.(\d+)`',
        text,
    )
    assert found, "section 4's example is not where this test looks for it"
    execution_id, crc, partitions, partition, key, queue = found.groups()
    assert int(crc) == zlib.crc32(execution_id.encode())
    assert int(partitions) == PARTITIONS
    assert int(partition) == int(key) == int(queue)
    assert int(partition) == Topology(NAMESPACE, PARTITIONS).partition_of(execution_id)
    assert f"default {PARTITIONS}" in text


def test_a_result_route_names_only_an_exchange_a_worker_s_user_may_publish_to() -> None:
    rows = [line for line in _text().splitlines() if line.startswith("| `result_route` |")]
    assert len(rows) == 1
    named = re.findall(r"`NS\.([A-Za-z.-]+)`", rows[0])
    assert named
    topology = Topology(NAMESPACE, PARTITIONS)
    worker = permissions(topology, Role.WORKER, tasks=["*"])
    for name in named:
        exchange = f"{NAMESPACE}.{name}"
        assert re.fullmatch(worker.write, exchange), f"a worker's user may not write to {exchange}"


def _kinds() -> dict[str, type[BaseModel]]:
    """Every message kind of the code, by its ``type``."""
    return {
        model.model_fields["type"].default: model
        for _, model in inspect.getmembers(messages, inspect.isclass)
        if issubclass(model, BaseModel) and "type" in model.model_fields
    }


def _versions(model: type[BaseModel]) -> tuple[int, set[int]]:
    """The version a kind is sent as, and those it is read at."""
    field = model.model_fields["v"]
    return field.default, set(typing.get_args(field.annotation))


def test_every_example_carries_the_version_its_kind_is_sent_as() -> None:
    kinds = _kinds()
    examples = [example for example in _json_examples() if "type" in example]
    assert len(examples) >= 20
    for example in examples:
        sent, _ = _versions(kinds[example["type"]])
        assert example["v"] == sent, example["type"]


def test_the_versions_table_says_what_the_code_sends_and_reads() -> None:
    section = _text().split("## 11. Versions and compatibility", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented: dict[str, tuple[int, set[int]]] = {}
    for row in rows:
        names, sent, read, _ = (cell.strip() for cell in row.strip("|").split("|"))
        for name in re.findall(r"`(\w+)`", names):
            assert name not in documented, f"{name} is in two rows"
            documented[name] = (int(sent), {int(v) for v in read.split(",")})
    kinds = _kinds()
    assert documented == {name: _versions(model) for name, model in kinds.items()}
    assert max(sent for sent, _ in documented.values()) == messages.PROTOCOL_VERSION
