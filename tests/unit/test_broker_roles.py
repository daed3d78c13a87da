"""orbit_model.broker_roles: role users, their RabbitMQ permissions, the queue policy and
who may send what."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Any, get_args

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from orbit_model.broker_roles import (
    NAMED_ROLES,
    SENDERS,
    SERVICE_ROLES,
    TASK_PATTERN,
    USER_LABEL,
    Permissions,
    Role,
    may_serve,
    permissions,
    policy_name,
    queue_policy,
    role_of,
    sender_refusal,
    task_pattern_regex,
    user_name,
)
from orbit_model.messages import Command, ControlRequest, DeciderInput
from orbit_model.names import CONTRACT_VERSION, TASK_NAME
from orbit_model.topology import DELIVERY_LIMIT, Topology

NAMESPACE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
namespaces = st.from_regex(NAMESPACE, fullmatch=True)
labels = st.from_regex(USER_LABEL, fullmatch=True)
topologies = st.builds(Topology, namespaces, st.integers(1, 8))
task_names = st.from_regex(TASK_NAME, fullmatch=True) | st.text(
    alphabet="ab.-_", min_size=1, max_size=10
).map(lambda tail: "a" + tail)
task_patterns = st.from_regex(TASK_PATTERN, fullmatch=True) | st.text(
    alphabet="ab.-_*", min_size=1, max_size=8
)
versions = st.from_regex(CONTRACT_VERSION, fullmatch=True)

INFRASTRUCTURE = (Role.GATEWAY, Role.DECIDER, Role.DISPATCHER, Role.TIMER)
"""The service roles that declare the fixed topology (the HTTP adapter is a worker)."""
ACCESSES = ("configure", "write", "read")


def allows(regex: str, name: str) -> bool:
    """Whether a RabbitMQ permission ``regex`` covers ``name`` (RabbitMQ searches, unanchored)."""
    return re.search(regex, name) is not None


def covered(allowed: Permissions, access: str, names: list[str]) -> set[str]:
    return {name for name in names if allows(getattr(allowed, access), name)}


def fixed_names(topology: Topology) -> list[str]:
    return [*topology.fixed_queues(), *topology.exchanges()]


def every_name(topology: Topology) -> list[str]:
    """Every exchange and queue of ``topology``, a few task queues and the default exchange."""
    return [
        *fixed_names(topology),
        topology.task_queue("payments.charge", "1"),
        topology.task_queue("shipping.x", "2.0.1+b"),
        topology.task_queue("orbit.http.request", "1"),
        "amq.default",
    ]


def unrelated(first: str, second: str) -> bool:
    """Two namespaces of which neither is the other plus a dot and more: see the
    ``test_nested_namespaces_*`` tests below for those."""
    return (
        first != second
        and not first.startswith(f"{second}.")
        and not second.startswith(f"{first}.")
    )


def tags(union: Any) -> set[str]:
    """The ``type`` tags of a discriminated union of messages."""
    members = get_args(get_args(union)[0])
    return {member.model_fields["type"].default for member in members}


# -- user names ---------------------------------------------------------------


@given(namespaces, st.sampled_from(SERVICE_ROLES))
def test_a_service_user_is_namespace_dot_role_and_reads_back_as_its_role(
    namespace: str, role: Role
) -> None:
    user = user_name(namespace, role)
    assert user == f"{namespace}.{role}"
    assert role_of(namespace, user) is role


@given(namespaces, st.sampled_from(NAMED_ROLES), labels)
def test_a_worker_or_client_user_carries_its_label_and_reads_back_as_its_role(
    namespace: str, role: Role, label: str
) -> None:
    user = user_name(namespace, role, label)
    assert user == f"{namespace}.{role}.{label}"
    assert role_of(namespace, user) is role


@given(namespaces, namespaces, st.sampled_from(list(Role)), labels)
def test_no_user_of_another_namespace_has_a_role_in_this_one(
    namespace: str, other: str, role: Role, label: str
) -> None:
    assume(unrelated(namespace, other))
    user = user_name(other, role, None if role in SERVICE_ROLES else label)
    assert role_of(namespace, user) is None


def test_a_namespace_that_begins_another_is_not_confused_with_it() -> None:
    assert role_of("a", "ab.decider") is None
    assert role_of("ab", "a.decider") is None
    assert role_of("a", "a.decider") is Role.DECIDER
    assert role_of("orbit", "orbitdecider") is None
    assert role_of("orbit", "orbit-decider") is None


def test_namespaces_with_dots_have_users_of_every_role() -> None:
    for role in SERVICE_ROLES:
        assert role_of("eu.prod", f"eu.prod.{role}") is role
        assert role_of("eu", f"eu.prod.{role}") is None
    assert role_of("eu.prod", "eu.prod.worker.w-1") is Role.WORKER
    assert role_of("eu.prod", "eu.prod.client.c_1") is Role.CLIENT


@pytest.mark.parametrize(
    "user",
    [
        None,
        "",
        "orbit",
        "orbit.",
        "orbit..decider",
        "orbit.admin",
        "orbit.Decider",
        "orbit.decider.",
        "orbit.decider.extra",
        "orbit.http-adapter.one",
        "orbit.worker",
        "orbit.worker.",
        "orbit.client",
        "orbit.worker.has.dot",
        "orbit.worker.-dash-first",
        "orbit.client.has space",
        "orbit.worker." + "x" * 65,
        "other.decider",
        "other.worker.w1",
        "guest",
    ],
)
def test_role_of_refuses_anything_but_a_user_name_of_the_namespace(user: str | None) -> None:
    assert role_of("orbit", user) is None


@pytest.mark.parametrize("role", SERVICE_ROLES)
def test_a_service_role_has_one_user_and_takes_no_label(role: Role) -> None:
    with pytest.raises(ValueError, match="takes no name"):
        user_name("orbit", role, "one")
    with pytest.raises(ValueError, match="takes no name"):
        user_name("orbit", role, "")


@pytest.mark.parametrize("role", NAMED_ROLES)
@pytest.mark.parametrize("label", [None, "", "has.dot", "a b", "-first", "_first", "x" * 65, "é"])
def test_a_worker_or_client_user_needs_a_label_of_the_rule(role: Role, label: str | None) -> None:
    with pytest.raises(ValueError, match="1 to 64 letters"):
        user_name("orbit", role, label)


def test_the_longest_label_is_sixty_four_characters() -> None:
    assert user_name("orbit", Role.WORKER, "x" * 64) == "orbit.worker." + "x" * 64


# -- task patterns ------------------------------------------------------------


@given(task_patterns, task_names)
def test_a_task_pattern_matches_as_a_glob_of_star_alone_would(pattern: str, name: str) -> None:
    # fnmatch also treats [ and ? specially, but a task pattern can't hold them.
    assert TASK_PATTERN.fullmatch(pattern)
    assert TASK_NAME.fullmatch(name)
    regex = task_pattern_regex(pattern)
    assert (re.fullmatch(regex, name) is not None) == fnmatchcase(name, pattern)


@given(task_patterns, st.data())
def test_a_name_made_from_a_pattern_by_filling_its_stars_matches_it(
    pattern: str, data: st.DataObject
) -> None:
    fillings = st.text(alphabet="ab.-_9", max_size=4)
    parts = pattern.split("*")
    name = parts[0] + "".join(data.draw(fillings) + part for part in parts[1:])
    assert re.fullmatch(task_pattern_regex(pattern), name)
    assert fnmatchcase(name, pattern)


def test_a_star_spans_dots_and_the_rest_is_literal() -> None:
    regex = task_pattern_regex("payments.*")
    assert re.fullmatch(regex, "payments.charge.eu")
    assert re.fullmatch(regex, "payments.")
    assert not re.fullmatch(regex, "paymentsXcharge")  # the dot is no wildcard
    assert not re.fullmatch(regex, "payments")
    assert re.fullmatch(task_pattern_regex("*"), "anything.at-all_1")


@pytest.mark.parametrize(
    "pattern", ["", "a b", "pay/ments", "pay?", "[ab]", "a+b", "x@1", "x" * 101, "é"]
)
def test_a_bad_task_pattern_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="a task pattern is"):
        task_pattern_regex(pattern)


# -- permissions: workers, the HTTP adapter, clients ----------------------------


@given(topologies)
def test_a_worker_reads_the_queues_of_its_tasks_only(topology: Topology) -> None:
    allowed = permissions(topology, Role.WORKER, ["payments.*"])
    names = every_name(topology)
    assert covered(allowed, "read", names) == {topology.task_queue("payments.charge", "1")}
    assert not allows(allowed.read, topology.task_queue("shipping.x", "1"))
    assert not allows(allowed.read, topology.dead_letter)
    assert not allows(allowed.read, topology.decider_queue(0))


@given(topologies)
def test_a_worker_of_every_task_still_never_reads_a_built_in_task(topology: Topology) -> None:
    allowed = permissions(topology, Role.WORKER, ["*"])
    assert allows(allowed.read, topology.task_queue("shipping.x", "1"))
    assert allows(allowed.read, topology.task_queue("orbital", "1"))
    assert not allows(allowed.read, topology.task_queue("orbit.http.request", "1"))
    for pattern in (["orbit.*"], ["orbit.http.request"], ["orbit*"], ["*", "orbit.*"]):
        refused = permissions(topology, Role.WORKER, pattern)
        assert not allows(refused.read, topology.task_queue("orbit.http.request", "1")), pattern
    assert covered(allowed, "read", fixed_names(topology)) == set()


@given(topologies, st.lists(task_patterns, min_size=1, max_size=3), task_names, versions)
def test_a_worker_reads_a_task_queue_exactly_when_a_pattern_matches_a_task_not_built_in(
    topology: Topology, patterns: list[str], task: str, version: str
) -> None:
    allowed = permissions(topology, Role.WORKER, patterns)
    served = any(fnmatchcase(task, pattern) for pattern in patterns)
    expected = served and not task.startswith("orbit.")
    assert allows(allowed.read, topology.task_queue(task, version)) == expected


@given(topologies)
def test_a_worker_writes_results_and_control_requests_and_configures_nothing(
    topology: Topology,
) -> None:
    allowed = permissions(topology, Role.WORKER, ["*"])
    names = every_name(topology)
    assert covered(allowed, "write", names) == {topology.results, topology.control}
    assert covered(allowed, "configure", names) == set()


@given(topologies)
def test_a_client_only_writes_commands(topology: Topology) -> None:
    allowed = permissions(topology, Role.CLIENT)
    names = every_name(topology)
    assert covered(allowed, "write", names) == {topology.commands}
    assert covered(allowed, "read", names) == set()
    assert covered(allowed, "configure", names) == set()


@given(topologies)
def test_the_http_adapter_reads_the_built_in_task_queues_only(topology: Topology) -> None:
    allowed = permissions(topology, Role.HTTP_ADAPTER)
    names = every_name(topology)
    assert covered(allowed, "read", names) == {topology.task_queue("orbit.http.request", "1")}
    assert covered(allowed, "write", names) == {topology.results, topology.control}
    assert covered(allowed, "configure", names) == set()


def test_a_worker_serves_at_least_one_good_pattern() -> None:
    topology = Topology("orbit", 4)
    with pytest.raises(ValueError, match="at least one task pattern"):
        permissions(topology, Role.WORKER)
    with pytest.raises(ValueError, match="a task pattern is"):
        permissions(topology, Role.WORKER, ["payments.*", "bad pattern"])


# -- permissions: the services ----------------------------------------------------


@given(topologies, st.sampled_from(INFRASTRUCTURE))
def test_every_service_may_declare_and_bind_the_whole_fixed_topology(
    topology: Topology, role: Role
) -> None:
    allowed = permissions(topology, role)
    fixed = set(fixed_names(topology))
    for access in ACCESSES:
        assert covered(allowed, access, list(fixed)) == fixed, access


@given(topologies, st.sampled_from(INFRASTRUCTURE), task_names, versions)
def test_the_decider_and_the_dispatcher_alone_may_declare_task_queues(
    topology: Topology, role: Role, task: str, version: str
) -> None:
    allowed = permissions(topology, role)
    queue = topology.task_queue(task, version)
    declares = role in (Role.DECIDER, Role.DISPATCHER)
    for access in ACCESSES:
        assert allows(getattr(allowed, access), queue) == declares, access


@pytest.mark.parametrize("role", INFRASTRUCTURE)
def test_the_gateway_and_the_dispatcher_alone_answer_through_the_default_exchange(
    role: Role,
) -> None:
    allowed = permissions(Topology("orbit", 4), role)
    assert allows(allowed.write, "amq.default") == (role in (Role.GATEWAY, Role.DISPATCHER))
    assert not allows(allowed.read, "amq.default")
    assert not allows(allowed.configure, "amq.default")


@given(topologies, namespaces, st.sampled_from(list(Role)))
def test_no_permission_reaches_a_name_of_another_namespace(
    topology: Topology, other: str, role: Role
) -> None:
    assume(unrelated(topology.namespace, other))
    allowed = permissions(topology, role, ["*"] if role is Role.WORKER else ())
    names = every_name(Topology(other, topology.partitions))
    names.remove("amq.default")
    for access in ACCESSES:
        assert covered(allowed, access, names) == set(), access


@pytest.mark.parametrize("role", list(Role))
def test_a_namespace_is_no_prefix_and_its_dots_are_no_wildcards(role: Role) -> None:
    tasks = ["*"] if role is Role.WORKER else ()
    for namespace, impostor in (("ns", "nsx"), ("a.b", "aXb"), ("a-b", "a-bc"), ("a_b", "a")):
        allowed = permissions(Topology(namespace, 2), role, tasks)
        names = every_name(Topology(impostor, 2))
        names.remove("amq.default")
        for access in ACCESSES:
            assert covered(allowed, access, names) == set(), (namespace, impostor, access)
    gateway = permissions(Topology("a.b", 2), Role.GATEWAY)
    assert allows(gateway.write, "a.b.commands")
    assert not allows(gateway.write, "aXb.commands")
    assert not allows(gateway.write, "other.commands")


# -- the queue policy ------------------------------------------------------------


@given(topologies)
def test_the_queue_policy_limits_deliveries_on_every_queue_but_the_parked_ones(
    topology: Topology,
) -> None:
    policy = queue_policy(topology)
    limited = {
        topology.commands,
        topology.control,
        *(topology.decider_queue(p) for p in range(topology.partitions)),
        topology.decider_queue(3),
        topology.task_queue("x", "1"),
        *(name for name in every_name(topology) if name.startswith(f"{topology.namespace}.task.")),
    }
    names = [*every_name(topology), *limited]
    # The parked messages must stay, however often they are read.
    assert {name for name in names if allows(policy["pattern"], name)} == limited
    assert not allows(policy["pattern"], topology.dead_letter)
    assert not allows(policy["pattern"], topology.dead_letter_reports)


@given(topologies)
def test_the_queue_policy_sets_the_delivery_limit_and_the_dead_letter_exchange(
    topology: Topology,
) -> None:
    policy = queue_policy(topology)
    assert policy["apply-to"] == "queues"
    assert policy["definition"] == {
        "delivery-limit": DELIVERY_LIMIT,
        "dead-letter-exchange": topology.dead_letter,
    }
    assert policy["definition"]["delivery-limit"] == topology.queue_arguments()["x-delivery-limit"]
    assert policy_name(topology) == f"{topology.namespace}.queues"


@given(topologies, namespaces)
def test_the_queue_policy_leaves_other_namespaces_alone(topology: Topology, other: str) -> None:
    assume(unrelated(topology.namespace, other))
    pattern = queue_policy(topology)["pattern"]
    names = every_name(Topology(other, topology.partitions))
    assert [name for name in names if allows(pattern, name)] == []


# -- who may send what ---------------------------------------------------------

TASK_RUNNERS = {Role.WORKER, Role.HTTP_ADAPTER}
RELAYS = {Role.GATEWAY, Role.DECIDER}
EXPECTED_SENDERS: dict[str, dict[str, set[Role]]] = {
    "decider": {
        "TaskResult": {Role.WORKER, Role.HTTP_ADAPTER, Role.GATEWAY, Role.DECIDER},
        "TimerDue": {Role.TIMER},
        "DeliveryLost": {Role.TIMER, Role.DISPATCHER},
        "Wake": RELAYS,
        "StartChild": RELAYS,
        "CancelChild": RELAYS,
        "MessageParked": {Role.DISPATCHER},
    },
    "gateway": {
        kind: {Role.CLIENT, *SERVICE_ROLES}
        for kind in ("StartExecution", "SignalExecution", "CancelExecution")
    },
    "dispatcher": dict.fromkeys(("RegisterWorker", "Heartbeat", "UnregisterWorker"), TASK_RUNNERS),
}
CASES = [
    (consumer, kind, role)
    for consumer, kinds in EXPECTED_SENDERS.items()
    for kind in kinds
    for role in Role
]


@pytest.mark.parametrize(("consumer", "kind", "role"), CASES)
def test_a_consumer_takes_each_kind_from_its_senders_only(
    consumer: str, kind: str, role: Role
) -> None:
    expected = None if role in EXPECTED_SENDERS[consumer][kind] else "wrong_role"
    assert sender_refusal(consumer, kind, role) == expected


def test_the_rules_are_exactly_the_table() -> None:
    rules = {
        consumer: {kind: set(roles) for kind, roles in kinds.items()}
        for consumer, kinds in SENDERS.items()
    }
    assert rules == EXPECTED_SENDERS


def test_a_worker_never_sends_a_command_and_a_client_never_a_result() -> None:
    for kind in EXPECTED_SENDERS["gateway"]:
        assert sender_refusal("gateway", kind, Role.WORKER) == "wrong_role"
    assert sender_refusal("decider", "TaskResult", Role.CLIENT) == "wrong_role"
    assert sender_refusal("decider", "TimerDue", Role.WORKER) == "wrong_role"


@pytest.mark.parametrize(("consumer", "kind"), sorted({(c, k) for c, k, _ in CASES}))
def test_a_message_of_no_orbit_user_is_an_unknown_sender(consumer: str, kind: str) -> None:
    assert sender_refusal(consumer, kind, None) == "unknown_sender"


@pytest.mark.parametrize("role", list(Role))
def test_an_unknown_kind_or_consumer_is_refused_to_everyone(role: Role) -> None:
    assert sender_refusal("decider", "StartExecution", role) == "wrong_role"
    assert sender_refusal("decider", "Unknown", role) == "wrong_role"
    assert sender_refusal("gateway", "TaskResult", role) == "wrong_role"
    assert sender_refusal("timer", "TimerDue", role) == "wrong_role"
    assert sender_refusal("nobody", "TaskResult", role) == "wrong_role"


def test_every_message_kind_a_consumer_decodes_has_its_senders() -> None:
    """A new kind in a union can't be forgotten here, nor a kind left that no union has."""
    assert set(SENDERS["decider"]) == tags(DeciderInput)
    assert set(SENDERS["gateway"]) == tags(Command)
    assert set(SENDERS["dispatcher"]) == tags(ControlRequest)
    assert len(tags(DeciderInput)) == 7
    assert len(tags(Command)) == 3


# -- built-in tasks -----------------------------------------------------------------


@given(task_names, st.sampled_from([*Role, None]))
def test_any_role_may_serve_a_task_that_is_not_built_in(task: str, role: Role | None) -> None:
    assume(not task.startswith("orbit."))
    assert may_serve(role, task)


@given(task_names, st.sampled_from([*Role, None]))
def test_only_the_http_adapter_may_serve_a_built_in_task(task: str, role: Role | None) -> None:
    builtin = f"orbit.{task}"
    assert may_serve(role, builtin) == (role is Role.HTTP_ADAPTER)


def test_a_task_merely_named_like_orbit_is_not_built_in() -> None:
    for task in ("orbit", "orbital.x", "orbit-x", "my.orbit.x"):
        assert may_serve(Role.WORKER, task), task
    assert not may_serve(Role.WORKER, "orbit.http.request")
    assert may_serve(Role.HTTP_ADAPTER, "orbit.http.request")
