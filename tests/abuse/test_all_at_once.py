"""Every attack of this package at once (issue 31: items 1-6, 10, 11 and 13), by clients
with no token or a narrow one, against one gateway: its memory must stay within the
budget (:data:`.harness.MEMORY_BUDGET`, 1 GiB above idle) and a client with a token must
be answered throughout. A new attack joins the list here as well as having a test of its
own. (Item 12, a fan-out multiplied by child workflows, is the decider's work, not the
gateway's: ``tests/unit/decider/test_fan_out_tree.py``.)"""

from __future__ import annotations

import pytest

from tests.integration.conftest import OrbitEnv

from .harness import gateway_process, under_attack
from .test_gateway_http import half_open, huge_heads, sign_in_bodies
from .test_gateway_work import prepare, work_attacks

pytestmark = pytest.mark.abuse


async def test_every_attack_at_once(orbit_env: OrbitEnv) -> None:
    environment = {"ORBIT_HTTP_MAX_CONNECTIONS": "128"}
    async with gateway_process(orbit_env, open_files=512, **environment) as gateway:
        targets = await prepare(orbit_env, gateway)
        attacks = [huge_heads(gateway), sign_in_bodies(gateway), half_open(gateway)]
        attacks += work_attacks(gateway, targets)
        measured = await under_attack(gateway, *attacks)
    measured.check()
