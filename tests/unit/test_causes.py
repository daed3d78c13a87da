"""Reading an error's cause chain from a view's JSON."""

from __future__ import annotations

from orbit_model.causes import Cause, causes_of
from orbit_model.events import TaskFailure


def test_the_chain_of_a_dumped_failure_reads_back_outermost_first() -> None:
    task = TaskFailure(code="DECLINED", message="no", details={"foo": "bar"})
    child = TaskFailure(
        code="DECLINED",
        message="step 'charge' failed: no",
        cause=task.caused_by("charge", "o-1:pay"),
    )
    top = TaskFailure(code="CHILD_FAILED", message="…", cause=child.caused_by("pay", "o-1"))
    causes = causes_of(top.model_dump(mode="json"))
    assert [(c.code, c.step, c.execution_id) for c in causes] == [
        ("DECLINED", "pay", "o-1"),
        ("DECLINED", "charge", "o-1:pay"),
    ]
    assert causes[-1].details == {"foo": "bar"}
    assert causes[0].where("o-1") == "step pay"
    assert causes[1].where("o-1") == "step charge of o-1:pay"
    assert Cause("X", "", None, "o-2", None).where("o-1") == "in o-2"


def test_anything_else_has_no_causes() -> None:
    assert causes_of(None) == []
    assert causes_of({"code": "X", "message": "m"}) == []
    assert causes_of({"cause": "not an error"}) == []
    assert causes_of("text") == []
