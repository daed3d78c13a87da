"""The ``/v1`` endpoints: each hands its request to :class:`Executions` and shapes the answer."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError

from orbit_model.access import Grant, TokenScope
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import StartExecution
from orbit_model.views import ExecutionPage, ExecutionView, Status
from orbit_services.gateway.api.deciders import deciders_view
from orbit_services.gateway.api.executions import MAX_PAGE, Executions, not_found
from orbit_services.gateway.api.schemas import (
    BatchStarted,
    BatchStartRequest,
    CancelRequest,
    DecidersView,
    DefinitionSummary,
    ErrorResponse,
    HistoryEntry,
    QueryValue,
    Registered,
    SignalAccepted,
    Started,
    StartRequest,
    WorkerView,
)
from orbit_services.gateway.edge.auth import (
    DefinitionsWrite,
    ExecutionsCancel,
    ExecutionsRead,
    ExecutionsSignal,
    ExecutionsStart,
    WorkersRead,
)
from orbit_services.gateway.errors import describe_validation

_DEFINITION_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/yaml": {"schema": {"type": "string", "description": "workflow YAML"}},
            "application/json": {"schema": {"type": "object", "description": "compiled IR"}},
        },
    }
}
SIGNAL_REQUEST_ID = "The signal's id: sent again with the same id, it is recorded once."
_PAYLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": {"description": "the signal payload"}}},
    }
}


async def _json_payload(request: Request) -> Any:
    """The body as JSON; no body is null."""
    body = await request.body()  # of a JSON type: gateway.edge.guard saw to it
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError as error:
        raise OrbitError(
            ErrorCode.INVALID_REQUEST, f"the body is not valid JSON: {error}"
        ) from None
    except RecursionError:
        raise OrbitError(ErrorCode.INVALID_REQUEST, "the body is nested too deep") from None


async def _visible(executions: Executions, grant: Grant, execution_id: str) -> None:
    """Refuse an execution of a workflow the token is not narrowed to, as if it did not
    exist: a narrowed token learns nothing of other workflows' executions."""
    if grant.everything:
        return
    workflow = await executions.workflow_of(execution_id)
    # One that does not exist yet is refused too: it might be created by the time the
    # request is carried out, and be another workflow's.
    if workflow is None or not grant.covers(workflow):
        raise not_found(execution_id)


def api_router(executions: Executions) -> APIRouter:
    """The routes of the API over ``executions``."""
    router = APIRouter(
        prefix="/v1", responses={"default": {"model": ErrorResponse, "description": "an error"}}
    )
    _definition_routes(router, executions)
    _start_routes(router, executions)
    _execution_routes(router, executions)
    _message_routes(router, executions)
    return router


def _definition_routes(router: APIRouter, executions: Executions) -> None:
    @router.post(
        "/definitions",
        status_code=201,
        response_model=Registered,
        responses={200: {"model": Registered, "description": "Registered before, the same"}},
        openapi_extra=_DEFINITION_BODY,
        summary="Register a workflow definition (YAML, or compiled IR as JSON)",
    )
    async def register_definition(
        request: Request, response: Response, grant: DefinitionsWrite
    ) -> dict[str, Any]:
        registered = await executions.register(
            await request.body(), request.headers.get("content-type"), grant
        )
        if not registered["created"]:
            response.status_code = 200
        return registered

    @router.get("/definitions", response_model=list[DefinitionSummary])
    async def list_definitions(grant: ExecutionsRead) -> list[dict[str, Any]]:
        return [item for item in await executions.definitions() if grant.covers(item["name"])]

    @router.get("/definitions/{name}/{version}", summary="The stored IR of one definition")
    async def get_definition(name: str, version: str, grant: ExecutionsRead) -> dict[str, Any]:
        grant.require(TokenScope.EXECUTIONS_READ, name)
        return await executions.definition_ir(name, version)


def _refused_item(item: Any, error: OrbitError) -> dict[str, Any]:
    """The batch result of an item that is not a start request."""
    given = item.get("execution_id") if isinstance(item, dict) else None
    return {
        "execution_id": given if isinstance(given, str) else None,
        "created": False,
        "error": {"code": str(error.code), "message": error.message},
    }


def _batch_commands(items: list[Any]) -> list[StartExecution | OrbitError]:
    """Each item of a batch as a start, or the error that refuses it."""
    commands: list[StartExecution | OrbitError] = []
    for index, item in enumerate(items):
        try:
            commands.append(StartExecution(**StartRequest.model_validate(item).model_dump()))
        except ValidationError as error:
            problem = describe_validation(error.errors())
            commands.append(
                OrbitError(ErrorCode.INVALID_REQUEST, f"executions[{index}]: {problem}")
            )
    return commands


def _start_routes(router: APIRouter, executions: Executions) -> None:
    """Starting executions, one (and waiting for it) or a batch."""

    @router.post(
        "/executions",
        status_code=201,
        response_model=Started,
        response_model_exclude_unset=True,
        responses={200: {"model": Started, "description": "Started before, with this id"}},
    )
    async def start_execution(
        body: StartRequest,
        response: Response,
        grant: ExecutionsStart,
        wait: Annotated[
            float | None,
            Query(
                ge=0,
                description="Answer once the execution ends (its view in `execution`), or"
                " after this many seconds (at most ORBIT_MAX_WAIT_SECONDS, 60 by default)",
            ),
        ] = None,
    ) -> dict[str, Any]:
        grant.require(TokenScope.EXECUTIONS_START, body.workflow)
        if wait is not None:  # refused before anything starts
            grant.require(TokenScope.EXECUTIONS_READ, body.workflow)
        started = await executions.start(StartExecution(**body.model_dump()))
        if not started["created"]:
            response.status_code = 200
        if wait is not None:  # durable before the wait: a client that gives up started it
            started["execution"] = await executions.wait(started["execution_id"], wait)
        return started

    @router.post(
        "/executions/batch", response_model=BatchStarted, response_model_exclude_unset=True
    )
    async def start_executions(body: BatchStartRequest, grant: ExecutionsStart) -> dict[str, Any]:
        commands = _batch_commands(body.executions)
        valid = [command for command in commands if isinstance(command, StartExecution)]
        answers = iter(await executions.start_batch(valid, grant))
        results = [
            _refused_item(body.executions[index], command)
            if isinstance(command, OrbitError)
            else next(answers)
            for index, command in enumerate(commands)
        ]
        return {"results": results}


def _execution_routes(router: APIRouter, executions: Executions) -> None:
    """Reading executions: the list, one, and its history."""

    @router.get("/executions", response_model=ExecutionPage)
    async def list_executions(
        grant: ExecutionsRead,
        status: Status | None = None,
        workflow: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        cursor: str | None = None,
    ) -> ExecutionPage:
        return await executions.list(status, workflow, limit, cursor, grant)

    @router.get(
        "/executions/{execution_id}",
        response_model=ExecutionView,
        response_model_exclude_unset=True,
    )
    async def get_execution(
        execution_id: str,
        grant: ExecutionsRead,
        wait: Annotated[
            float | None,
            Query(
                ge=0,
                description="Answer once the execution ends, or after this many seconds"
                " (at most ORBIT_MAX_WAIT_SECONDS, 60 by default)",
            ),
        ] = None,
    ) -> ExecutionView:
        await _visible(executions, grant, execution_id)
        if wait is None:
            return await executions.view(execution_id)
        return await executions.wait(execution_id, wait)

    @router.get("/executions/{execution_id}/history", response_model=list[HistoryEntry])
    async def get_history(execution_id: str, grant: ExecutionsRead) -> list[dict[str, Any]]:
        await _visible(executions, grant, execution_id)
        return await executions.history(execution_id)


def _message_routes(router: APIRouter, executions: Executions) -> None:
    """What is sent to a running execution or asked of it: cancels, signals and queries."""

    @router.post(
        "/executions/{execution_id}/cancel",
        response_model=ExecutionView,
        response_model_exclude_unset=True,
    )
    async def cancel_execution(
        execution_id: str, grant: ExecutionsCancel, body: CancelRequest | None = None
    ) -> ExecutionView:
        await _visible(executions, grant, execution_id)
        return await executions.cancel(execution_id, body.reason if body else "")

    @router.post(
        "/executions/{execution_id}/signals/{name}",
        status_code=202,
        response_model=SignalAccepted,
        openapi_extra=_PAYLOAD_BODY,
    )
    async def send_signal(
        execution_id: str,
        name: str,
        request: Request,
        grant: ExecutionsSignal,
        request_id: Annotated[str | None, Query(description=SIGNAL_REQUEST_ID)] = None,
    ) -> dict[str, Any]:
        await _visible(executions, grant, execution_id)
        payload = await _json_payload(request)
        return await executions.signal(execution_id, name, payload, request_id)

    @router.get("/executions/{execution_id}/queries/{name}", response_model=QueryValue)
    async def run_query(execution_id: str, name: str, grant: ExecutionsRead) -> dict[str, Any]:
        await _visible(executions, grant, execution_id)
        return await executions.query(execution_id, name)

    @router.get("/workers", response_model=list[WorkerView])
    async def list_workers(_grant: WorkersRead) -> list[dict[str, Any]]:
        return await executions.workers()

    @router.get("/deciders", response_model=DecidersView)
    async def list_deciders(_grant: WorkersRead) -> dict[str, Any]:
        settings = executions.settings
        return await deciders_view(
            executions.store, settings.decider_partitions, settings.decider_lease_ms
        )
