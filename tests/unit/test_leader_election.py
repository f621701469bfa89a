"""Leader election rules with an in-memory Lease (the real one is in tests/integration)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from gangsched.leader import LeaderElector, LeaseConfig
from gangsched.session import ApiError


class FakeLeases:
    """One Lease with resourceVersion checks, as the apiserver does them."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.down = False

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.down:
            raise ConnectionRefusedError(path)
        if method == "GET":
            if self.lease is None:
                raise ApiError(404, reason="Not Found")
            return copy.deepcopy(self.lease)
        body = copy.deepcopy(kwargs["body"])
        if method == "POST":
            if self.lease is not None:
                raise ApiError(409, reason="AlreadyExists")
        elif body["metadata"].get("resourceVersion") != str(self.rv):
            raise ApiError(409, reason="Conflict")
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = body
        return copy.deepcopy(body)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def elector(store: FakeLeases, clock: Clock, identity: str, monkeypatch: pytest.MonkeyPatch) -> LeaderElector:
    config = LeaseConfig(
        namespace="ns",
        name="gangsched",
        identity=identity,
        retry_period=0.01,
        renew_deadline=0.05,
        lease_duration=0.1,
    )
    e = LeaderElector(configuration=None, config=config, clock=clock)
    monkeypatch.setattr(e, "_request", store.request)
    return e


def test_only_one_candidate_leads_until_the_lease_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        store, clock = FakeLeases(), Clock()
        a = elector(store, clock, "a", monkeypatch)
        b = elector(store, clock, "b", monkeypatch)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        clock.now += 0.05
        assert await a.try_acquire_or_renew()  # renewed: b sees the record change
        assert not await b.try_acquire_or_renew()
        clock.now += 1.5  # a stopped renewing (the Lease says 1 s); b judges by its own clock
        assert await b.try_acquire_or_renew()
        assert store.lease is not None
        assert store.lease["spec"]["holderIdentity"] == "b"
        assert store.lease["spec"]["leaseTransitions"] == 1

    asyncio.run(scenario())


def test_a_leader_that_cannot_renew_fences_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        store = FakeLeases()
        a = elector(store, Clock(), "a", monkeypatch)
        a.clock = __import__("time").monotonic  # real time for the renew loop
        assert await a.try_acquire_or_renew()
        a._last_renew = a.clock()
        lost = asyncio.Event()
        store.down = True  # connection refused, not an ApiError
        await asyncio.wait_for(a.keep(lost.set), timeout=2)
        assert lost.is_set()
        assert not a.leading

    asyncio.run(scenario())


def test_release_hands_over_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        store, clock = FakeLeases(), Clock()
        a = elector(store, clock, "a", monkeypatch)
        b = elector(store, clock, "b", monkeypatch)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        await a.release()
        assert await b.try_acquire_or_renew()

    asyncio.run(scenario())
