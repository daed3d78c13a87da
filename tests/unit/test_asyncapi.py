"""The committed AsyncAPI document is what the code generates, and it names every message."""

from __future__ import annotations

import ast
import inspect
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orbit_model import messages
from orbit_model.broker_roles import permissions, role_of
from orbit_model.topology import Topology
from tools import asyncapi

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "asyncapi.json"


def _message_models() -> list[type[BaseModel]]:
    """Every message body of ``messages.py``: its models with a ``type`` tag."""
    return [
        value
        for _, value in inspect.getmembers(messages, inspect.isclass)
        if issubclass(value, BaseModel)
        and value.__module__ == messages.__name__
        and "type" in value.model_fields
    ]


def _no_network(*_: object, **__: object) -> Any:
    raise AssertionError("the AsyncAPI document must be built without any network connection")


def test_the_committed_document_is_what_the_code_generates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, _no_network)
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setattr(socket, "getaddrinfo", _no_network)
    generated = asyncapi.asyncapi_json()
    assert COMMITTED.read_text(encoding="utf-8") == generated, (
        "docs/asyncapi.json is stale: run `make asyncapi` and commit it"
    )


def test_it_is_asyncapi_3_for_the_default_namespace() -> None:
    document = asyncapi.asyncapi_document()
    assert document["asyncapi"] == "3.0.0"
    assert asyncapi.asyncapi_document() == document  # the same every time


def test_every_message_type_appears() -> None:
    document = json.loads(COMMITTED.read_text(encoding="utf-8"))
    schemas = document["components"]["schemas"]
    models = _message_models()
    assert {"StartExecution", "TaskAssignment", "ControlError"} <= {m.__name__ for m in models}
    for model in models:
        assert model.__name__ in schemas, f"{model.__name__} is missing from docs/asyncapi.json"
        tag = model.model_fields["type"].default
        assert schemas[model.__name__]["properties"]["type"]["const"] == tag
    for nested in ("ErrorBody", "Route", "ContractAnnouncement", "InflightTask", "TaskFailure"):
        assert nested in schemas


def test_every_queue_and_exchange_is_named() -> None:
    text = COMMITTED.read_text(encoding="utf-8")
    topology = Topology(asyncapi.NAMESPACE, asyncapi.PARTITIONS)
    names = [
        topology.commands,
        topology.decider,
        topology.results,
        topology.control,
        topology.tasks,
        topology.dead_letter,
        topology.dead_letter_reports,
        topology.task_queue("{task}", "{version}"),
        *(topology.decider_queue(partition) for partition in range(topology.partitions)),
    ]
    for name in names:
        assert f'"name": "{name}"' in text, name


def test_no_service_or_library_imports_it() -> None:
    for top in ("libs", "services"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    imported = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                elif isinstance(node, ast.Import):
                    imported = [alias.name for alias in node.names]
                else:
                    continue
                assert "tools.asyncapi" not in imported, f"{path} imports it"


def _committed() -> dict[str, Any]:
    return dict(json.loads(COMMITTED.read_text(encoding="utf-8")))


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every key and value of a JSON document, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _resolve(document: dict[str, Any], ref: str) -> Any:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _exchange_of(document: dict[str, Any], operation: dict[str, Any]) -> str:
    channel = _resolve(document, operation["channel"]["$ref"])
    exchange = channel["bindings"]["amqp"]["exchange"]
    return "amq.default" if exchange["type"] == "default" else str(exchange["name"])


def test_every_send_names_the_user_it_is_sent_as_and_that_user_may_write_there() -> None:
    document = _committed()
    topology = Topology(asyncapi.NAMESPACE, asyncapi.PARTITIONS)
    sends = {t: o for t, o in document["operations"].items() if o["action"] == "send"}
    assert len(sends) == 7
    for title, operation in sends.items():
        user_ids = operation["bindings"]["amqp"]["userId"].split(" | ")
        exchange = _exchange_of(document, operation)
        for user_id in user_ids:
            role = role_of(topology.namespace, user_id.replace("{name}", "someone"))
            assert role is not None, (title, user_id)
            allowed = permissions(topology, role, tasks=["*"])
            assert re.fullmatch(allowed.write, exchange), (title, user_id, exchange)
    worker = f"{topology.namespace}.worker.{{name}}"
    assert sends[f"{topology.control}:send"]["bindings"]["amqp"]["userId"] == worker
    client = f"{topology.namespace}.client.{{name}}"
    assert sends[f"{topology.commands}:send"]["bindings"]["amqp"]["userId"] == client


def test_the_server_asks_for_a_login_per_role_and_user_id_on_every_message() -> None:
    document = _committed()
    scheme_ref = document["servers"]["development"]["security"][0]["$ref"]
    scheme = _resolve(document, scheme_ref)
    assert scheme["type"] == "userPassword"
    namespace = asyncapi.NAMESPACE
    for user in (f"{namespace}.worker.{{name}}", f"{namespace}.client.{{name}}"):
        assert user in scheme["description"]
    for text in (scheme["description"], document["info"]["description"]):
        assert "`user_id`" in text


def test_workers_send_results_to_the_results_exchange_only() -> None:
    document = _committed()
    topology = Topology(asyncapi.NAMESPACE, asyncapi.PARTITIONS)
    by_exchange = {
        _exchange_of(document, operation): operation
        for operation in document["operations"].values()
        if operation["action"] == "send"
    }
    results = by_exchange[topology.results]
    channel = _resolve(document, results["channel"]["$ref"])
    message = _resolve(document, channel["messages"]["Message"]["$ref"])
    assert message["payload"]["$ref"] == "#/components/schemas/TaskResult"
    decider = by_exchange[topology.decider]
    assert "worker" not in decider["bindings"]["amqp"]["userId"]
    decider_channel = _resolve(document, decider["channel"]["$ref"])
    assert "every worker's TaskResult" not in decider_channel["description"]


def test_no_reference_dangles_and_every_message_named_in_prose_exists() -> None:
    document = _committed()
    schemas = document["components"]["schemas"]
    for key, value in _walk(document):
        if key == "$ref":
            _resolve(document, value)  # raises KeyError if it dangles
    for key, value in _walk(document):
        if key == "description" and isinstance(value, str):
            for name in re.findall(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)+s?\b", value):
                assert name in schemas, f"{name!r} is named in a description but is no schema"
