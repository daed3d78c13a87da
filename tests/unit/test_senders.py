"""What a consumer tells the sender of a message it refuses, and logs about it; who sent a
result, as the decider checks it."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from orbit_model.broker_roles import Role, Sender
from orbit_model.messages import TaskResult, Wake
from orbit_services.runtime.senders import PATTERNS_SECONDS, SenderBook, Senders
from orbit_services.runtime.settings import load_settings

HOW = "workers log in as worker users"


def _senders() -> Senders:
    settings = load_settings(
        amqp_url="amqp://orbit.dispatcher:x@rabbit/", broker_auth="roles", namespace="orbit"
    )
    return Senders(settings, "dispatcher")


def _message(user_id: str | None) -> Any:
    return SimpleNamespace(user_id=user_id)


def test_a_message_without_user_id_is_told_so_in_the_protocol_s_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    senders = _senders()
    message = _message(None)
    with caplog.at_level(logging.WARNING, logger="orbit.senders"):
        assert senders.refused(message, "RegisterWorker")
    told = senders.refusal(message, "RegisterWorker", HOW)
    assert told.startswith("a message with no user_id may not send RegisterWorker")
    assert HOW in told
    logged = caplog.records[-1].getMessage()
    assert "a message with no user_id" in logged
    for text in (told, logged):
        assert "None" not in text


def test_a_stranger_and_a_wrong_role_are_named() -> None:
    senders = _senders()
    stranger = senders.refusal(_message("guest"), "Heartbeat", HOW)
    assert "'guest' is no Orbit user of namespace 'orbit'" in stranger
    client = senders.refusal(_message("orbit.client.app"), "Heartbeat", HOW)
    assert "'orbit.client.app', a client, may not send Heartbeat" in client


async def test_the_decider_reads_a_worker_user_s_patterns_once_per_period() -> None:
    loads: list[str] = []
    now = [0.0]

    async def load(user: str) -> tuple[str, ...] | None:
        loads.append(user)
        return ("pay*",) if user == "orbit.worker.payer" else None

    book = SenderBook("orbit", load, clock=lambda: now[0])
    payer = await book.sender("orbit.worker.payer")
    assert payer == Sender("orbit.worker.payer", Role.WORKER, ("pay*",))
    assert await book.sender("orbit.worker.dev") == Sender("orbit.worker.dev", Role.WORKER)
    assert await book.sender("orbit.decider") == Sender("orbit.decider", Role.DECIDER)
    assert await book.sender("someone") == Sender("someone", None)
    assert await book.sender(None) is None
    now[0] = PATTERNS_SECONDS  # still kept
    await book.sender("orbit.worker.payer")
    assert loads == ["orbit.worker.payer", "orbit.worker.dev"]
    now[0] = PATTERNS_SECONDS + 0.1  # a change made since is read now
    await book.sender("orbit.worker.payer")
    assert loads == ["orbit.worker.payer", "orbit.worker.dev", "orbit.worker.payer"]
    result = TaskResult(execution_id="e", token="e:a:1")
    assert await book.speakers([result, Wake(execution_id="e")], ["orbit.worker.dev"] * 2) == [
        Sender("orbit.worker.dev", Role.WORKER),
        None,
    ]
    assert await book.speakers([result], []) == [None]
