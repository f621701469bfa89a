"""Binder retries: transient failures are retried (honouring Retry-After), conflicts never."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import gangsched.transport as transport_module
from gangsched.binder import Binder, BindOutcome, binding_body
from gangsched.model import parse_pod
from gangsched.session import Answer
from gangsched.transport import Transport


def a_pod() -> Any:
    return parse_pod({"metadata": {"name": "p", "namespace": "ml", "uid": "u-1"}, "spec": {"containers": []}})


def failing(statuses: list[int], calls: list[dict[str, Any]], retry_after: str | None = None) -> Any:
    """A `Send` answering with `statuses` in turn, then success; it records every request."""

    async def send(method: str, path: str, **kwargs: Any) -> Answer:
        calls.append({"method": method, "path": path, **kwargs, "body": json.loads(kwargs["body"])})
        if statuses:
            headers = {"Retry-After": retry_after} if retry_after else {}
            return Answer(statuses.pop(0), "x", headers, b'{"kind":"Status","message":"x"}')
        return Answer(201, "Created", {}, b'{"kind":"Status","status":"Success"}')

    return send


@pytest.mark.parametrize(
    ("statuses", "outcome", "attempts"),
    [
        ([], BindOutcome.BOUND, 1),
        ([429, 503], BindOutcome.BOUND, 3),
        ([409], BindOutcome.CONFLICT, 1),
        ([404], BindOutcome.GONE, 1),
        ([500] * 5, BindOutcome.FAILED, 5),
        ([403], BindOutcome.FAILED, 1),
    ],
)
def test_bind_outcomes(
    monkeypatch: pytest.MonkeyPatch, statuses: list[int], outcome: BindOutcome, attempts: int
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(transport_module, "_backoff", lambda state: 0.0)

    async def scenario() -> None:
        transport = Transport(send=failing(list(statuses), calls), concurrency=2)
        binder = Binder(transport=transport)
        monkeypatch.setattr(transport_module.asyncio, "sleep", _no_sleep)
        result = await binder.bind(a_pod(), "n1")
        await transport.close()
        assert result.outcome is outcome
        assert len(calls) == attempts
        assert calls[0]["path"] == "/api/v1/namespaces/ml/pods/p/binding"
        assert calls[0]["body"] == binding_body(a_pod(), "n1")
        assert calls[0]["body"]["metadata"]["uid"] == "u-1"  # precondition: never a recreated pod

    asyncio.run(scenario())


_real_sleep = asyncio.sleep
slept: list[float] = []


async def _no_sleep(delay: float, *args: Any) -> None:
    slept.append(delay)
    await _real_sleep(0)


def test_retry_after_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    slept.clear()

    async def scenario() -> None:
        transport = Transport(send=failing([429], calls, retry_after="7"))
        binder = Binder(transport=transport)
        monkeypatch.setattr(transport_module.asyncio, "sleep", _no_sleep)
        result = await binder.bind(a_pod(), "n1")
        await transport.close()
        assert result.outcome is BindOutcome.BOUND

    asyncio.run(scenario())
    assert 7.0 in slept
