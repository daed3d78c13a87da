"""The execution page's relations and actions without a browser: where a child's "Parent"
leads, what a sent signal became in words, and which actions a running, stopping or
ended execution still offers (also when a refresh or an answer replaces them)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from starlette.datastructures import QueryParams

from orbit_services.gateway.console.execution_page import ParentLink, parent_link
from orbit_services.gateway.console.notices import (
    controls_of,
    notice_of,
    signal_notice,
    signal_query,
)
from orbit_services.gateway.console.render import TEMPLATES


def created(parent_execution_id: str | None) -> list[dict[str, Any]]:
    data = {"parent": None, "parent_execution_id": parent_execution_id}
    return [{"seq": 1, "type": "WorkflowCreated", "data": data}]


@pytest.mark.parametrize(
    ("parent", "parent_id", "link"),
    [
        ("order-7:invoice", "order-7", ParentLink("order-7", "invoice")),
        # Ids and unit keys may both hold a ":": the first event says where the id ends.
        ("a:b:invoice", "a:b", ParentLink("a:b", "invoice")),
        ("o:ship[3]", "o", ParentLink("o", "ship", ", element 3")),
        ("o:finally:tidy", "o", ParentLink("o", "tidy", " (finally)")),
        (None, None, None),
        ("o:invoice", None, None),  # a history that no longer decodes: no link
        ("o:invoice", "elsewhere", None),
    ],
)
def test_the_parent_link_leads_to_the_parent_execution_and_names_its_step(
    parent: str | None, parent_id: str | None, link: ParentLink | None
) -> None:
    assert parent_link(parent, created(parent_id)) == link
    assert parent_link(parent, []) is None


def test_a_signal_says_which_step_takes_it_or_that_none_will() -> None:
    assert signal_notice("decision", "now", ["decision"]) == (
        "Signal decision sent: step decision waits for it and takes it."
    )
    assert signal_notice("go", "later", ["first", "second", "third"]) == (
        "Signal go sent. No step waits for it now: it is kept until steps first, second"
        " and third, not reached yet, takes it."
    )
    assert signal_notice("note", "never", []) == (
        "Signal note recorded, but no step will take it: no await step for note is left"
        " to run. Only expressions that read signals.note see it."
    )
    assert signal_notice("go", "already", ["first"]) == (
        "Signal go was sent before with this request id: step first took it."
    )


def test_without_javascript_the_page_redirected_to_says_the_same() -> None:
    answer = {"seq": 4, "taken": "later", "steps": ["a", "b"]}
    query = QueryParams(urlencode(signal_query("go", answer), doseq=True))
    assert notice_of(query) == signal_notice("go", "later", ["a", "b"])
    assert notice_of(QueryParams({"done": "cancel"})) == "Cancellation requested."
    assert notice_of(QueryParams({"done": "signal", "taken": "whatever"})) == "Signal sent."
    assert notice_of(QueryParams({"done": "other"})) is None
    assert notice_of(QueryParams({})) is None


def test_the_actions_go_once_it_stops_or_ends() -> None:
    started = [{"type": "WorkflowCreated"}, {"type": "StepScheduled"}]
    assert controls_of("running", started) == "open"
    assert controls_of("running", [*started, {"type": "CancelRequested"}]) == "stopping"
    assert controls_of("running", [*started, {"type": "CompensationStarted"}]) == "stopping"
    for status in ("completed", "failed", "cancelled", "timed_out"):
        assert controls_of(status, started) == "closed"


@pytest.mark.parametrize("controls", ["stopping", "closed"])
def test_an_answer_replaces_the_forms_once_none_is_left_to_send(controls: str) -> None:
    html = TEMPLATES.get_template("_action_result.html").render(
        message="Cancellation requested.", ok=True, controls=controls
    )
    assert '<div id="controls" hx-swap-oob="true">' in html
    assert "<form" not in html


def test_an_answer_leaves_the_forms_of_a_running_execution_alone() -> None:
    html = TEMPLATES.get_template("_action_result.html").render(
        message="Signal go sent.", ok=True, controls="open"
    )
    assert 'id="controls"' not in html
