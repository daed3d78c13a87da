"""The committed AsyncAPI document is what the code generates, and it names every message."""

from __future__ import annotations

import ast
import inspect
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orbit_model import messages
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
