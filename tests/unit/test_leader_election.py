"""Leader election rules with an in-memory Lease (the real one is in tests/integration)."""

from __future__ import annotations

import asyncio
import copy
import gc
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from gangsched.leader import LeaderElector, LeaseConfig
from gangsched.metrics import Metrics
from gangsched.session import ApiError
from gangsched_testing.fakelease import FakeLeaseServer


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
    # Requests go to `store`; the configuration is only for the elector's thread, never used.
    e = LeaderElector(configuration=client.Configuration(), config=config, clock=clock)
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
        await a.close()

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
        await a.close()

    asyncio.run(scenario())


# ------------------------------------------------------- the keeper, off the caller's event loop
# Against a Lease API over real HTTP (gangsched_testing.fakelease) on a thread of its own, so
# the test may block its own event loop, the operator's in the product, and the API still answers.

KEEPER_THREAD = "gangsched-lease"


def short_lease(identity: str = "a") -> LeaseConfig:
    return LeaseConfig(
        namespace="ns",
        name="gangsched",
        identity=identity,
        retry_period=0.2,
        renew_deadline=1.0,
        lease_duration=1.5,
    )


def block(kind: str, seconds: float) -> None:
    """Keep this thread, and with it its event loop, from doing anything else for `seconds`."""
    if kind == "sleep":
        time.sleep(seconds)
        return
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # busy: Python bytecode, holding the GIL as much as it may
        sum(range(1000))


@pytest.fixture
def lease_threads() -> Callable[[], list[threading.Thread]]:
    """The elector threads started during the test and still running."""
    before = set(threading.enumerate())

    def started() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == KEEPER_THREAD and t not in before]

    return started


@pytest.mark.parametrize(
    ("kind", "periods", "renewed", "lag_bound"),
    [
        # time.sleep: the loop stands still, the GIL is free. Each renewal is late by its
        # requests' few ms.
        ("sleep", 3, 2, 0.3),
        # Python computing all along (a LIST applied to the cache): the GIL changes hands every
        # 5 ms (sys.getswitchinterval()), and the keeper's thread and the fake API's wait that
        # long after each system call of theirs, tens per renewal (the convoy effect): a
        # renewal takes 0.05-0.3 s instead of a few ms, still nothing near the renew deadline.
        ("busy", 5, 2, 0.6),
    ],
)
def test_renewals_go_on_while_the_callers_event_loop_is_blocked(
    kind: str, periods: int, renewed: int, lag_bound: float
) -> None:
    """Issue 27: the keeper's sleep and requests need no turn of the operator's event loop.
    (When they did, no renewal happened during the block: the first gap was the whole block.)"""
    config = short_lease()
    with FakeLeaseServer() as api:
        elector = LeaderElector(configuration=api.configuration(), config=config)

        async def scenario() -> tuple[float, float]:
            await elector.acquire()
            keeper = asyncio.create_task(elector.keep(lambda: None))
            await asyncio.sleep(2 * config.retry_period)
            start = time.monotonic()
            block(kind, periods * config.retry_period)  # the whole event loop stands still
            end = time.monotonic()
            await asyncio.sleep(config.retry_period)
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            await elector.release()
            await elector.close()
            return start, end

        start, end = asyncio.run(scenario())
    renewed_at = api.renewals("a")
    during = [t for t in renewed_at if start <= t <= end]
    assert len(during) >= renewed, (during, start, end)
    spanning = [t for t in renewed_at if start - 2 * config.retry_period <= t <= end + config.retry_period]
    gaps = [b - a for a, b in itertools.pairwise(spanning)]
    # Renewed every retry period (and a little), not once the block was over.
    assert max(gaps) < config.retry_period + lag_bound < end - start, gaps
    assert elector.renewals.count >= periods + 1
    assert elector.renewals.lag_max < lag_bound
    assert elector.renewals.late == 0


def test_the_renewal_lag_measures_a_slow_apiserver() -> None:
    """Each renewal (a GET and a PUT) lands 2 x delay later than planned: the lag says so."""
    config = short_lease()
    delay = 0.15
    metrics = Metrics()
    with FakeLeaseServer() as api:
        api.delay = delay
        elector = LeaderElector(configuration=api.configuration(), config=config)
        elector.on_renewal_lag = metrics.lease_renewal_lag(lambda: elector.renewals.lag_max).observe

        async def scenario() -> None:
            await elector.acquire()
            keeper = asyncio.create_task(elector.keep(lambda: None))
            while elector.renewals.count < 3:
                await asyncio.sleep(0.05)
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            api.delay = 0
            await elector.release()
            await elector.close()

        asyncio.run(asyncio.wait_for(scenario(), timeout=10))
    stats = elector.renewals
    assert 2 * delay - 0.01 <= stats.lag_last <= stats.lag_max < 2 * delay + 0.5
    count = metrics.registry.get_sample_value("gangsched_lease_renewal_lag_seconds_count")
    total = metrics.registry.get_sample_value("gangsched_lease_renewal_lag_seconds_sum")
    assert count is not None
    assert total is not None
    assert count == stats.count >= 3
    assert total >= count * (2 * delay - 0.01)  # every renewal was late by the delay, not one
    assert metrics.registry.get_sample_value("gangsched_lease_renewal_lag_max_seconds") == stats.lag_max
    assert stats.late == 0  # 2 x 0.15 + 0.2 s apart: within the renew deadline (1 s)


def test_a_lost_lease_fences_at_once_and_calls_on_lost_on_the_callers_loop(
    lease_threads: Callable[[], list[threading.Thread]],
) -> None:
    config = short_lease()
    called: list[tuple[int, asyncio.AbstractEventLoop]] = []
    with FakeLeaseServer() as api:
        elector = LeaderElector(configuration=api.configuration(), config=config)

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            await elector.acquire()
            keeper = asyncio.create_task(
                elector.keep(lambda: called.append((threading.get_ident(), asyncio.get_running_loop())))
            )
            await asyncio.sleep(config.retry_period)
            api.fail = 503
            # Blocked past the renew deadline: the keeper gives the Lease up meanwhile...
            block("sleep", config.renew_deadline + 3 * config.retry_period)
            assert not elector.leading
            assert elector.write_allowed() == "this replica does not hold the Lease"
            assert called == []  # ...and on_lost waits for this loop, where it runs
            await asyncio.wait_for(keeper, timeout=2)
            assert called == [(threading.get_ident(), loop)]
            api.fail = None
            await elector.release()  # not leading: nothing to hand over
            await elector.close()

        asyncio.run(scenario())
        assert api.holder("gangsched") == "a"
    assert not lease_threads()


def test_a_lease_taken_over_is_lost_too() -> None:
    config = short_lease()
    with FakeLeaseServer() as api:
        elector = LeaderElector(configuration=api.configuration(), config=config)

        async def scenario() -> None:
            lost = asyncio.Event()
            await elector.acquire()
            keeper = asyncio.create_task(elector.keep(lost.set))
            await asyncio.sleep(config.retry_period)
            api.take_over("gangsched", "b")
            await asyncio.wait_for(lost.wait(), timeout=config.renew_deadline + 2)
            await keeper
            await elector.close()

        asyncio.run(scenario())
    assert api.holder("gangsched") == "b"
    assert not elector.leading


def pending_task_reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()  # a pending task is reported when it is collected
    return [r.getMessage() for r in caplog.records if "destroyed but it is pending" in r.getMessage()]


def test_shutdown_stops_the_keeper_and_its_thread(
    caplog: pytest.LogCaptureFixture, lease_threads: Callable[[], list[threading.Thread]]
) -> None:
    """As `runtime._shutdown` does it: cancel the keeper's task, release, close."""
    config = short_lease()
    with FakeLeaseServer() as api:
        elector = LeaderElector(configuration=api.configuration(), config=config)

        async def scenario() -> None:
            await elector.acquire()
            keeper = asyncio.create_task(elector.keep(lambda: None))
            await asyncio.sleep(2 * config.retry_period)
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            await elector.release()
            released = len(api.writes)
            await asyncio.sleep(2 * config.retry_period)
            assert len(api.writes) == released  # no renewal after the hand-over
            await elector.close()

        asyncio.run(scenario())
        assert api.holder("gangsched") == ""
    assert not lease_threads()
    assert not pending_task_reports(caplog)


def test_a_standby_shuts_down_while_waiting_for_the_lease(
    caplog: pytest.LogCaptureFixture, lease_threads: Callable[[], list[threading.Thread]]
) -> None:
    with FakeLeaseServer() as api:
        leader = LeaderElector(configuration=api.configuration(), config=short_lease("a"))
        standby = LeaderElector(configuration=api.configuration(), config=short_lease("b"))

        async def scenario() -> None:
            await leader.acquire()
            waiting = asyncio.create_task(standby.acquire())
            await asyncio.sleep(0.5)
            assert not waiting.done()
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            await standby.release()
            await standby.close()
            # Closed without a release: the keeper stops with the thread, and so does leading.
            await leader.close()
            assert leader.write_allowed() is not None

        asyncio.run(scenario())
        assert api.holder("gangsched") == "a"
    assert not lease_threads()
    assert not pending_task_reports(caplog)


def test_the_renewal_lag_is_measured_from_the_previous_renewal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """lag = done - (previous renewal done + retry period), floored at 0; an interval past the
    renew deadline is a late renewal, and says so."""
    store, clock = FakeLeases(), Clock()
    a = elector(store, clock, "a", monkeypatch)
    observed: list[float] = []
    a.on_renewal_lag = observed.append
    retry, deadline = a.config.retry_period, a.config.renew_deadline

    async def scenario() -> None:
        assert await a.try_acquire_or_renew()  # acquired at 0: no lag, no renewal yet
        clock.now += retry + 0.004
        assert await a.try_acquire_or_renew()
        clock.now += retry / 2  # early (a retry after a failure, say): no negative lag
        assert await a.try_acquire_or_renew()
        clock.now += deadline + 0.02
        assert await a.try_acquire_or_renew()

    with caplog.at_level(logging.WARNING, logger="gangsched.leader"):
        asyncio.run(scenario())
    assert observed == pytest.approx([0.004, 0.0, deadline + 0.02 - retry])
    stats = a.renewals
    assert (stats.count, stats.late) == (3, 1)
    assert stats.lag_max == pytest.approx(deadline + 0.02 - retry)
    assert stats.lag_last == stats.lag_max
    late = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(late) == 1, late
    assert "past the renew deadline" in late[0]
    assert a.debug()["renewal_lag_max_seconds"] == pytest.approx(stats.lag_max)
