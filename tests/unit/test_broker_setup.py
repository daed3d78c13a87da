"""orbit_services.commands.broker_setup's pure helpers (URLs, rabbitmqctl commands) and the identity
check of orbit_services.runtime.senders; none of it needs a broker."""

from __future__ import annotations

import json
import logging
import shlex
from urllib.parse import quote, unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.broker_roles import (
    SERVICE_ROLES,
    Role,
    permissions,
    policy_name,
    queue_policy,
    user_name,
)
from orbit_model.errors import OrbitError
from orbit_model.topology import Topology
from orbit_services.commands.broker_setup import (
    BrokerAdmin,
    management_url,
    new_password,
    rabbitmqctl_commands,
    vhost_of,
    with_login,
)
from orbit_services.runtime.senders import SHARED_WARNING, amqp_login, check_identity
from orbit_services.runtime.settings import Settings, load_settings

credentials = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


def settings(amqp_url: str, **overrides: object) -> Settings:
    overrides.setdefault("broker_admin_url", None)
    overrides.setdefault("broker_auth", "roles")
    overrides.setdefault("namespace", "orbit")
    return load_settings(amqp_url=amqp_url, **overrides)


def login_of(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return unquote(parts.username or ""), unquote(parts.password or "")


def commands(topology: Topology, vhost: str, passwords: dict[str, str]) -> list[list[str]]:
    return [shlex.split(line) for line in rabbitmqctl_commands(topology, vhost, passwords)]


# -- URLs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "vhost"),
    [
        ("amqp://h/", "/"),
        ("amqp://h", "/"),
        ("amqp://h/%2F", "/"),
        ("amqp://h/prod", "prod"),
        ("amqp://u:p@h:5672/prod?heartbeat=30", "prod"),
        ("amqps://h/team%2Fprod", "team/prod"),
        ("amqp://h/my%20vhost", "my vhost"),
    ],
)
def test_the_vhost_of_a_url_is_slash_when_it_names_none(url: str, vhost: str) -> None:
    assert vhost_of(url) == vhost


def test_a_login_replaces_the_user_and_password_and_keeps_the_rest() -> None:
    url = with_login("amqp://old:secret@rabbit:5673/prod?heartbeat=30", "orbit.decider", "new")
    parts = urlsplit(url)
    assert url == "amqp://orbit.decider:new@rabbit:5673/prod?heartbeat=30"
    assert (parts.hostname, parts.port, parts.path, parts.query) == (
        "rabbit",
        5673,
        "/prod",
        "heartbeat=30",
    )
    assert with_login("amqp://rabbit", "u", "p") == "amqp://u:p@rabbit"
    assert with_login("amqps://rabbit/%2F", "u", "p") == "amqps://u:p@rabbit/%2F"


def test_a_login_quotes_the_characters_a_url_gives_a_meaning() -> None:
    url = with_login("amqp://rabbit/", "u@x:y", "p@ss:w/rd?#% ")
    assert url == "amqp://u%40x%3Ay:p%40ss%3Aw%2Frd%3F%23%25%20@rabbit/"
    assert urlsplit(url).hostname == "rabbit"
    assert login_of(url) == ("u@x:y", "p@ss:w/rd?#% ")


def test_an_ipv6_host_keeps_its_brackets() -> None:
    url = with_login("amqp://guest:guest@[::1]:5672/v?x=1", "a", "b")
    assert url == "amqp://a:b@[::1]:5672/v?x=1"
    assert urlsplit(url).hostname == "::1"
    assert with_login("amqp://[fd00::2]/", "a", "b") == "amqp://a:b@[fd00::2]/"


@given(credentials, credentials)
def test_any_login_reads_back_as_it_was_given(user: str, password: str) -> None:
    url = with_login("amqps://old:old@broker.example:5671/prod?heartbeat=5", user, password)
    parts = urlsplit(url)
    assert login_of(url) == (user, password)
    assert amqp_login(url) == (user or "guest")
    assert (parts.scheme, parts.hostname, parts.port, parts.path, parts.query) == (
        "amqps",
        "broker.example",
        5671,
        "/prod",
        "heartbeat=5",
    )


def test_a_new_password_stands_in_a_url_as_it_is_and_is_never_the_same() -> None:
    passwords = {new_password() for _ in range(50)}
    assert len(passwords) == 50
    for password in passwords:
        assert quote(password, safe="") == password
        assert len(password) >= 24


@pytest.mark.parametrize(
    ("amqp_url", "expected"),
    [
        ("amqp://rabbit", "http://guest:guest@rabbit:15672"),
        ("amqp://rabbit:5673/prod", "http://guest:guest@rabbit:15672"),
        ("amqp://admin:s3cret@rabbit:5672/", "http://admin:s3cret@rabbit:15672"),
        ("amqp://a%40b:p%2Fw@rabbit/", "http://a%40b:p%2Fw@rabbit:15672"),
        ("amqps://admin:s3cret@rabbit:5671/", "https://admin:s3cret@rabbit:15671"),
        ("amqp://[::1]:5672/", "http://guest:guest@[::1]:15672"),
    ],
)
def test_the_management_api_is_on_the_brokers_host_with_its_login(
    amqp_url: str, expected: str
) -> None:
    assert management_url(settings(amqp_url)) == expected


def test_the_admin_url_setting_wins_over_the_amqp_url() -> None:
    admin = "https://root:pw@admin.example:8443/rabbit"
    assert management_url(settings("amqps://u:p@rabbit/", broker_admin_url=admin)) == admin


async def test_the_admin_client_talks_to_the_api_without_the_login_in_its_address() -> None:
    async with BrokerAdmin.from_settings(settings("amqp://a%40b:pw@rabbit/prod")) as admin:
        assert admin.base == "http://rabbit:15672/api"
        assert admin.vhost == "prod"


# -- rabbitmqctl -----------------------------------------------------------------


def test_rabbitmqctl_sets_every_service_users_permissions_and_the_policy() -> None:
    topology = Topology("eu.prod", 3)
    vhost = "my vhost"
    decider, timer = user_name("eu.prod", Role.DECIDER), user_name("eu.prod", Role.TIMER)
    passwords = {decider: "it's $secret", timer: "plain", "someone.else": "ignored"}
    lines = commands(topology, vhost, passwords)

    added = [line for line in lines if line[1] == "add_user"]
    assert added == [
        ["rabbitmqctl", "add_user", decider, "it's $secret"],
        ["rabbitmqctl", "add_user", timer, "plain"],
    ]
    granted = [line for line in lines if line[1] == "set_permissions"]
    expected = []
    for role in SERVICE_ROLES:
        allowed = permissions(topology, role)
        name = user_name("eu.prod", role)
        expected.append(
            [
                "rabbitmqctl",
                "set_permissions",
                "-p",
                vhost,
                name,
                allowed.configure,
                allowed.write,
                allowed.read,
            ]
        )
    assert granted == expected
    # A user is made before its permissions are set.
    assert lines.index(added[0]) < lines.index(granted[1])
    assert len(lines) == len(added) + len(granted) + 1


def test_rabbitmqctl_sets_the_queue_policy_with_a_compact_json_definition() -> None:
    topology = Topology("a.b", 2)
    policy = queue_policy(topology)
    *_, last = commands(topology, "/", {})
    *arguments, definition = last
    assert arguments == [
        "rabbitmqctl",
        "set_policy",
        "-p",
        "/",
        "--apply-to",
        "queues",
        "--priority",
        "0",
        policy_name(topology),
        policy["pattern"],
    ]
    assert json.loads(definition) == policy["definition"]
    assert definition == json.dumps(policy["definition"], separators=(",", ":"))
    assert " " not in definition


def test_rabbitmqctl_adds_no_user_without_a_password() -> None:
    lines = commands(Topology("orbit", 4), "/", {})
    assert [line[1] for line in lines] == ["set_permissions"] * len(SERVICE_ROLES) + ["set_policy"]


# -- the identity check -------------------------------------------------------------


def test_the_login_of_a_url_is_unquoted_and_guest_when_none() -> None:
    assert amqp_login("amqp://u%40x:p@h/") == "u@x"
    assert amqp_login("amqp://orbit.decider:pw@h:5672/prod") == "orbit.decider"
    assert amqp_login("amqp://h/") == "guest"
    assert amqp_login("amqps://h") == "guest"


def test_a_service_with_another_roles_user_refuses_to_start() -> None:
    wrong = settings("amqp://NS.gateway:pw@rabbit/", namespace="NS")
    with pytest.raises(OrbitError, match=r"'NS\.decider'") as refused:
        check_identity(wrong, Role.DECIDER)
    assert refused.value.code == "INVALID_SETTINGS"
    assert "'NS.gateway'" in refused.value.message
    with pytest.raises(OrbitError, match="'guest'"):
        check_identity(settings("amqp://rabbit/", namespace="NS"), Role.DECIDER)


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_a_service_with_its_own_roles_user_starts(role: Role) -> None:
    url = with_login("amqp://rabbit:5672/prod", user_name("eu.prod", role), "p@ss/word")
    own = settings(url, namespace="eu.prod")
    check_identity(own, role)  # raises if refused
    others = [other for other in SERVICE_ROLES if other is not role]
    for other in others:
        with pytest.raises(OrbitError, match=f"'eu.prod.{other}'"):
            check_identity(own, other)


def test_a_shared_user_passes_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    shared = settings("amqp://guest:guest@rabbit/", broker_auth="shared", namespace="NS")
    with caplog.at_level(logging.WARNING, logger="orbit.senders"):
        for role in SERVICE_ROLES:
            check_identity(shared, role)  # raises if refused
    assert [record.getMessage() for record in caplog.records] == [SHARED_WARNING] * len(
        SERVICE_ROLES
    )
