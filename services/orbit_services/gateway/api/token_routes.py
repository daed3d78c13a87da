"""``/v1/tokens``: API tokens managed over HTTP, by a token with the ``admin`` scope.

The same as ``orbit token create|list|revoke`` (which work on the database
directly, so that the first admin token exists before any gateway runs).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from orbit_model.access import expiry, parse_patterns, parse_scopes
from orbit_services.gateway.api.schemas import ErrorResponse
from orbit_services.gateway.edge.auth import Admin
from orbit_services.store.tokens import TokenStore


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    scopes: list[str] = Field(min_length=1)
    workflows: list[str] = Field(default_factory=list)
    """Patterns (``payments.*``) of the workflows the token may touch; empty: all."""
    expires_in: str | None = None
    """A duration (``30d``, ``12h``); null: never."""


class TokenView(BaseModel):
    name: str
    scopes: list[str]
    workflows: list[str]
    created_at: str
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None


class TokenCreated(TokenView):
    token: str
    """The secret: shown this once, never stored."""


def token_router(tokens: TokenStore) -> APIRouter:
    router = APIRouter(
        prefix="/v1/tokens",
        tags=["tokens"],
        responses={"default": {"model": ErrorResponse, "description": "an error"}},
    )

    @router.get("", response_model=list[TokenView], summary="Every API token (no secrets)")
    async def list_tokens(_grant: Admin) -> list[dict[str, Any]]:
        return [row.to_json() for row in await tokens.list()]

    @router.post(
        "",
        status_code=201,
        response_model=TokenCreated,
        summary="Make an API token; its secret is in this answer only",
    )
    async def create_token(body: TokenRequest, _grant: Admin) -> dict[str, Any]:
        row, secret = await tokens.create(
            body.name,
            parse_scopes(body.scopes),
            parse_patterns(body.workflows),
            expiry(body.expires_in, datetime.now(UTC)),
        )
        return {**row.to_json(), "token": secret}

    @router.post(
        "/{name}/revoke",
        response_model=TokenView,
        summary="Revoke an API token: every gateway refuses it from now on",
    )
    async def revoke_token(name: str, _grant: Admin) -> dict[str, Any]:
        return (await tokens.revoke(name)).to_json()

    return router
