"""ORBIT_AMQP_URL as a list of nodes: both ways to write one, what is refused, and what
is derived from it (the user, the virtual host, another login, a redacted form)."""

from __future__ import annotations

import re

import aio_pika
import pytest
from yarl import URL

from orbit_model.errors import redact
from orbit_sdk import amqp
from orbit_sdk.amqp import NodesConnection
from orbit_sdk.amqp_nodes import login_of, split_nodes, vhost_of, with_login
from orbit_sdk.settings import SettingsError, load_client_settings


def test_one_url_is_one_node() -> None:
    assert split_nodes("amqp://guest:guest@127.0.0.1:5672/") == (
        "amqp://guest:guest@127.0.0.1:5672/",
    )


def test_full_urls_separated_by_commas() -> None:
    value = "amqp://u:p@h1:5672/orbit, amqp://u:p@h2:5673/orbit,amqps://u:p@h3/orbit"
    assert split_nodes(value) == (
        "amqp://u:p@h1:5672/orbit",
        "amqp://u:p@h2:5673/orbit",
        "amqps://u:p@h3/orbit",
    )


def test_hosts_listed_in_one_url_share_its_login_vhost_and_query() -> None:
    assert split_nodes("amqp://u:p@h1:5672,h2:5673,[::1]/orbit?heartbeat=10") == (
        "amqp://u:p@h1:5672/orbit?heartbeat=10",
        "amqp://u:p@h2:5673/orbit?heartbeat=10",
        "amqp://u:p@[::1]/orbit?heartbeat=10",
    )


def test_a_password_may_hold_an_encoded_comma_and_the_short_form_a_raw_one() -> None:
    assert split_nodes("amqp://u:a%2Cb@h1/,amqp://u:a%2Cb@h2/") == (
        "amqp://u:a%2Cb@h1/",
        "amqp://u:a%2Cb@h2/",
    )
    assert split_nodes("amqp://u:a,b@h1,h2/") == ("amqp://u:a,b@h1/", "amqp://u:a,b@h2/")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "is empty"),
        ("amqp://u:p@h1/,", "entry 2 ('') is not an amqp://"),
        ("amqp://u:p@h1/,h2:5672", "entry 2 ('h2:5672') is not an amqp://"),
        ("http://h1,amqp://h2/", "entry 1 ('http://h1') is not an amqp://"),
        ("amqp://u:p@h1,,h2/", "without a host"),
        ("amqp://u:p@h1:99999/", "bad port"),
        ("amqp://u:p@h1:x/", "bad port"),
        ("amqp://u:p@h1:5672,h1:5672/", "lists the node h1:5672 twice"),
        ("amqp://u:p@h1/,amqp://other:p@h2/", "the same user to the same virtual host"),
        ("amqp://u:p@h1/a,amqp://u:p@h2/b", "the same user to the same virtual host"),
    ],
)
def test_a_bad_list_is_refused_saying_why(value: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        split_nodes(value)


def test_the_settings_refuse_a_bad_list_naming_the_variable_and_no_password() -> None:
    with pytest.raises(SettingsError) as refused:
        load_client_settings(amqp_url="amqp://u:secret@h1:5672/,h2:5672")
    assert refused.value.code == "INVALID_SETTINGS"
    assert "ORBIT_AMQP_URL: entry 2 ('h2:5672') is not an amqp://" in refused.value.message
    assert "secret" not in refused.value.message
    good = "amqp://u:p@h1:5672,h2:5672/"
    assert load_client_settings(amqp_url=good).amqp_url == good


def test_what_is_derived_from_a_list_holds_for_every_node() -> None:
    value = "amqp://orbit.decider:s3cret@h1:5672,h2:5673/prod"
    assert login_of(value) == "orbit.decider"
    assert vhost_of(value) == "prod"
    assert with_login(value, "orbit.worker.x", "p/w") == (
        "amqp://orbit.worker.x:p%2Fw@h1:5672/prod,amqp://orbit.worker.x:p%2Fw@h2:5673/prod"
    )
    assert redact("amqp://u:s3cret@h1:5672/,amqp://u:s3cret@h2:5672/") == (
        "amqp://u:***@h1:5672/,amqp://u:***@h2:5672/"
    )
    assert "s3cret" not in redact(value)


def test_aio_pika_still_has_the_method_the_node_list_overrides() -> None:
    # NodesConnection moves on to the next node by overriding this private method.
    assert hasattr(aio_pika.RobustConnection, "_RobustConnection__connect_transport")
    assert "_RobustConnection__connect_transport" in vars(NodesConnection)


async def test_a_loss_is_counted_once_per_outage_however_many_attempts_fail() -> None:
    """aio-pika calls the close callbacks again when an attempt connects but fails to
    restore a channel: the outage that began with the first loss goes on."""
    lost: list[None] = []
    reconnected: list[None] = []
    amqp.COUNTERS.lost.append(lambda: lost.append(None))
    amqp.COUNTERS.reconnected.append(lambda: reconnected.append(None))
    connection = NodesConnection([URL("amqp://h1/"), URL("amqp://h2/")])
    try:
        connection.up = True
        amqp._on_closed(connection)  # the node went away
        amqp._on_closed(connection)  # an attempt failed restoring its channels
        assert (len(lost), len(reconnected)) == (1, 0)
        amqp._on_reconnected(connection)
        amqp._on_closed(connection)  # a second outage
        assert (len(lost), len(reconnected)) == (2, 1)
    finally:
        amqp.COUNTERS.lost.pop()
        amqp.COUNTERS.reconnected.pop()
