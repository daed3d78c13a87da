"""JWTs of an identity provider, beside API tokens: a JWKS served on this machine, keys
made here, and every way a JWT can be wrong refused with the same 401."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import hmac, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.hashes import SHA256

from orbit_model.access import TokenScope
from orbit_services.runtime.settings import SettingsError, load_settings

from .conftest import OrbitEnv
from .test_gateway import Gateway, error_of, running

AUDIENCE = "orbit-api"
ISSUER = "https://idp.example"


@dataclass
class IdentityProvider:
    """A JWKS endpoint (counting its fetches) and the key that signs for it."""

    url: str
    key: RSAPrivateKey
    fetches: list[float]

    def token(self, key: Any = None, kid: str = "k1", alg: str = "RS256", **claims: Any) -> str:
        """A JWT of this provider; ``orbit_workflows`` is ``["*"]`` unless given (None:
        without the claim)."""
        body = {
            "sub": "ada",
            "aud": AUDIENCE,
            "iss": ISSUER,
            "exp": time.time() + 60,
            "orbit_workflows": ["*"],
            **claims,
        }
        body = {name: value for name, value in body.items() if value is not None}
        return jwt.encode(body, key or self.key, algorithm=alg, headers={"kid": kid})


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    document = json.dumps({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})
    fetches: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetches.append(time.monotonic())
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(document.encode())

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield IdentityProvider(f"http://127.0.0.1:{server.server_port}/jwks", key, fetches)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def gateway(orbit_env: OrbitEnv, idp: IdentityProvider) -> AsyncIterator[Gateway]:
    settings = orbit_env.settings_with(
        auth="tokens",
        auth_jwks_url=idp.url,
        auth_jwt_audience=AUDIENCE,
        auth_jwt_issuer=ISSUER,
        auth_jwt_workflows_claim="orbit_workflows",
    )
    async with running(orbit_env, settings) as gateway:
        yield gateway


async def _status(gateway: Gateway, token: str, path: str = "/v1/executions") -> tuple[int, str]:
    answer = await gateway.client.get(path, headers={"authorization": f"Bearer {token}"})
    return (200, "") if answer.status_code == 200 else error_of(answer)[:2]


async def test_a_jwt_of_the_identity_provider_grants_its_scopes(
    gateway: Gateway, idp: IdentityProvider
) -> None:
    reader = idp.token(scope="executions:read unknown:scope")
    assert await _status(gateway, reader) == (200, "")
    assert await _status(gateway, reader, "/v1/workers") == (403, "PERMISSION_DENIED")
    as_list = idp.token(scope=["workers:read"])
    assert await _status(gateway, as_list, "/v1/workers") == (200, "")
    # Orbit's own tokens keep working beside them.
    _, secret = await gateway.store.tokens.create("ops", frozenset({TokenScope.WORKERS_READ}))
    assert await _status(gateway, secret, "/v1/workers") == (200, "")


async def test_every_wrong_jwt_is_the_same_401(gateway: Gateway, idp: IdentityProvider) -> None:
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = idp.key.public_key().public_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    claims = {"sub": "x", "aud": AUDIENCE, "iss": ISSUER, "exp": time.time() + 60, "scope": "admin"}
    unsigned = jwt.encode(claims, key=None, algorithm="none", headers={"kid": "k1"})
    wrong = {
        "expired": idp.token(scope="admin", exp=time.time() - 10),
        "for another audience": idp.token(scope="admin", aud="another-service"),
        "from another issuer": idp.token(scope="admin", iss="https://evil.example"),
        "without an expiry": idp.token(scope="admin", exp=None),
        "signed by another key": idp.token(key=other_key, scope="admin"),
        "of a key id the JWKS lacks": idp.token(key=other_key, kid="k2", scope="admin"),
        "unsigned (alg none)": unsigned,
        "HS256 with the public key as secret": _hs256(claims, public_pem),
        "not a JWT at all": "a.b.c",
        "an admin narrowed to workflows": idp.token(scope="admin", orbit_workflows=["pay*"]),
        "without the workflows claim": idp.token(scope="executions:read", orbit_workflows=None),
        "ES256 under the RSA key's id": idp.token(
            key=ec.generate_private_key(ec.SECP256R1()), alg="ES256", scope="admin"
        ),
        "scopes that are not names": idp.token(scope=[{"a": 1}, ["admin"]]),
    }
    answers = {case: await _status(gateway, token) for case, token in wrong.items()}
    expected = dict.fromkeys(wrong, (401, "UNAUTHENTICATED"))
    # Known, and nothing granted: an authenticated caller that may do nothing.
    expected["scopes that are not names"] = (403, "PERMISSION_DENIED")
    assert answers == expected
    admin_without_claim = idp.token(scope="admin", orbit_workflows=None)
    assert await _status(gateway, admin_without_claim) == (200, "")


def _hs256(claims: dict[str, Any], secret: bytes) -> str:
    """A JWT "signed" with HS256 under ``secret``, made by hand: PyJWT itself refuses to
    use a public key as an HMAC secret, which is the forgery this stands for."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = part(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = part(json.dumps(claims).encode())
    mac = hmac.HMAC(secret, SHA256())
    mac.update(f"{header}.{body}".encode())
    return f"{header}.{body}.{part(mac.finalize())}"


async def test_a_jwt_narrowed_by_its_workflows_claim(
    gateway: Gateway, idp: IdentityProvider
) -> None:
    token = idp.token(scope="executions:start executions:read", orbit_workflows=["mine-*"])
    headers = {"authorization": f"Bearer {token}"}
    start = await gateway.client.post(
        "/v1/executions", json={"workflow": "theirs"}, headers=headers
    )
    assert error_of(start)[:2] == (403, "PERMISSION_DENIED")


async def test_made_up_key_ids_do_not_flood_the_identity_provider(
    gateway: Gateway, idp: IdentityProvider
) -> None:
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert await _status(gateway, idp.token(scope="executions:read")) == (200, "")
    before = len(idp.fetches)
    for n in range(20):
        forged = idp.token(key=other_key, kid=f"made-up-{n}", scope="admin")
        assert await _status(gateway, forged) == (401, "UNAUTHENTICATED")
    assert len(idp.fetches) - before <= 1


def test_a_jwks_needs_an_audience_and_https_off_this_machine() -> None:
    with pytest.raises(SettingsError, match="ORBIT_AUTH_JWT_AUDIENCE"):
        load_settings(auth_jwks_url="https://idp.example/jwks")
    with pytest.raises(SettingsError, match="https"):
        load_settings(auth_jwks_url="http://idp.example/jwks", auth_jwt_audience="a")
    load_settings(auth_jwks_url="http://127.0.0.1:9/jwks", auth_jwt_audience="a")


async def test_an_unreadable_jwks_is_a_503_and_is_not_fetched_for_every_request(
    orbit_env: OrbitEnv,
) -> None:
    fetches: list[float] = []

    class Broken(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetches.append(time.monotonic())
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>not a JWKS</html>")

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/jwks"
    settings = orbit_env.settings_with(auth="tokens", auth_jwks_url=url, auth_jwt_audience=AUDIENCE)
    try:
        async with running(orbit_env, settings) as gateway:
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            token = jwt.encode({"sub": "x"}, key, algorithm="RS256", headers={"kid": "k"})
            headers = {"authorization": f"Bearer {token}"}
            answers = await asyncio.gather(
                *(gateway.client.get("/v1/workers", headers=headers) for _ in range(8))
            )
    finally:
        server.shutdown()
        server.server_close()
    refusals = [error_of(answer) for answer in answers]
    assert {(status, code) for status, code, _ in refusals} == {(503, "UNAVAILABLE")}
    assert len(fetches) == 1
    assert not any(str(server.server_port) in message for _, _, message in refusals)


async def test_a_jwt_signs_in_to_the_console_until_its_exp(
    gateway: Gateway, idp: IdentityProvider
) -> None:
    exp = int(time.time()) + 120
    token = idp.token(scope="workers:read", exp=exp)
    login = await gateway.client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert csrf is not None
    form = {"csrf": csrf[1], "token": token, "next": "/ui/workers"}
    answer = await gateway.client.post("/ui/login", data=form)
    assert answer.status_code == 303, answer.text
    assert token not in answer.headers["set-cookie"]  # a session's id, not the JWT
    assert (await gateway.client.get("/ui/workers")).status_code == 200
    row = await gateway.database.fetchrow(
        "SELECT token_name, name, expires_at FROM console_sessions"
    )
    assert row is not None
    assert (row["token_name"], row["name"]) == (None, "jwt:ada")
    assert row["expires_at"] == datetime.fromtimestamp(exp, UTC)
