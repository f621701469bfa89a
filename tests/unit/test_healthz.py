"""`/healthz` (issue 33.12): a clean 503 with the reasons as JSON when the replica cannot do
its job, 200 with what it does otherwise; asked afresh each time, never a 500."""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest

from gangsched.cluster.informer import WatchHealth
from gangsched.runtime import _serve_health
from gangsched_testing.devcluster import free_port


class _Liveness:
    def __init__(self) -> None:
        self.reason: str | None = None

    def stalled(self) -> str | None:
        return self.reason


def _operator(health: WatchHealth, liveness: _Liveness, main: asyncio.Task[None]) -> Any:
    scheduler = SimpleNamespace(liveness=liveness, clock=lambda: 10.0, heartbeat=9.0, cycles=3)
    cache = SimpleNamespace(pods={}, served={"pods": "v1"})
    options = SimpleNamespace(watch_budget_seconds=60.0)
    return SimpleNamespace(
        tasks=[main],
        scheduler=scheduler,
        health=health,
        options=options,
        cache=cache,
        elector=None,
        leading=True,
    )


def test_a_failing_replica_answers_503_with_why_and_says_it_once(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        clock = [0.0]
        health = WatchHealth(clock=lambda: clock[0])
        liveness = _Liveness()
        main = asyncio.get_running_loop().create_task(asyncio.sleep(60))
        op = _operator(health, liveness, main)
        port = free_port()
        runner = await _serve_health(cast(Any, op), host="127.0.0.1", port=port)
        url = f"http://127.0.0.1:{port}/healthz"
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(url) as resp:
                    assert resp.status == 200
                    body = await resp.json()
                    assert body["healthy"] is True
                    assert body["scheduler"]["cycles"] == 3
                health.down("podgroups", "404: 404 page not found")
                clock[0] = 100.0
                liveness.reason = (
                    "decisions held for 75s by kinds not shown current: nodes: its watch is down"
                )
                for _ in range(2):
                    async with session.get(url) as resp:
                        assert resp.status == 503
                        body = json.loads(await resp.text())
                assert body["healthy"] is False
                assert body["problems"] == [
                    "the scheduling loop is stalled: decisions held for 75s by kinds not shown current: "
                    "nodes: its watch is down",
                    "podgroups watch down for 100s (404: 404 page not found)",
                ]
                health.up("podgroups")
                liveness.reason = None
                async with session.get(url) as resp:
                    assert resp.status == 200
        finally:
            main.cancel()
            await runner.cleanup()

    with caplog.at_level(logging.ERROR, logger="gangsched.runtime"):
        asyncio.run(scenario())
    said = [r for r in caplog.records if "/healthz fails" in r.getMessage()]
    assert len(said) == 1  # asked twice, said once
    assert not any(r.exc_info for r in caplog.records)  # no traceback
