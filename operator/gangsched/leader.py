"""Lease-based leader election: of several replicas exactly one schedules.

Why not kopf peering: it is a keep-alive, not a lease, and replicas of equal priority all
freeze. Why not `kubernetes.leaderelection`: it is thread-based, parses times in local time
and exits the process from inside the library. This follows client-go's rules instead:

- a lease is expired when its record has not changed for `lease_duration` *as observed by
  this replica's own monotonic clock* (no trust in other hosts' clocks);
- acquiring and renewing are optimistic updates (resourceVersion), so two candidates never
  both win;
- a leader that cannot renew within `renew_deadline` stops leading (the caller fences
  itself), before any standby can consider the lease expired (`renew_deadline < lease_duration`).

The elector runs on an event loop and thread of its own (`session.SessionThread`, with an
`ApiSession` of its own), never on the operator's: the acquire attempts and, from the moment
the Lease is won, the keeper's whole renew loop (its sleep, the GET and PUT, the deadline
check) run there. The operator's loop may stand still for seconds (a LIST of 100,000 pods
applied to the cache, a long stretch between two awaits) and no renewal waits for it, nor
behind the operator's writes (the transport's slots and connections). What crosses threads:

- `write_allowed()` (the transport's fence) reads `leading` and the last renewal's time, by
  the elector's monotonic clock, from any thread;
- a loss sets `leading` to False at once (the fence refuses from then on) and delivers
  `on_lost` to the loop that called `keep` with `call_soon_threadsafe`: the operator's own
  fencing (cancel the loop, exit) runs on its loop, when that loop gets to it;
- `keep`, `acquire`, `release` are awaited from the operator's loop; cancelling `keep` (a
  shutdown) cancels the keeper there; `close` stops the thread, cancelling what still runs.

How late renewals are: each renewal's lag is how much later than planned it completed, i.e.
its completion minus (the previous successful acquire or renewal's completion + the retry
period), floored at 0, by the elector's clock (`RenewalStats`; runtime exports it as
gangsched_lease_renewal_lag_seconds and _max_seconds). Two renewals further apart than the
renew deadline are logged as a late renewal: the fence refused writes for part of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from kubernetes import client

from gangsched.session import ApiError, SessionThread

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True, frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 8.0
    renew_deadline: float = 6.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")


@dataclass(slots=True)
class RenewalStats:
    """How late the Lease was renewed (module doc), since start; written on the elector's thread."""

    count: int = 0
    # Intervals between two successful renewals longer than the renew deadline.
    late: int = 0
    lag_last: float = 0.0
    lag_max: float = 0.0

    def record(self, lag: float, *, late: bool) -> None:
        self.count += 1
        if late:
            self.late += 1
        self.lag_last = lag
        self.lag_max = max(self.lag_max, lag)


def default_identity() -> str:
    """The pod name when running in a pod (downward API), else host + a random suffix."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One candidate for one Lease; its protocol runs on a thread of its own (module doc)."""

    def __init__(
        self,
        *,
        configuration: client.Configuration | None,
        config: LeaseConfig,
        clock: Callable[[], float] = time.monotonic,
        user_agent: str = "gangsched",
    ) -> None:
        self.configuration = configuration
        self.user_agent = user_agent
        self._thread: SessionThread | None = None
        self.config = config
        self.clock = clock
        self.leading = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        # When the last successful attempt started (what the fence counts from: the renewTime
        # it wrote is no older) and when it completed (what the next renewal's lag counts from).
        self._last_renew = 0.0
        self._renewed_at = 0.0
        self.renewals = RenewalStats()
        # Each renewal's lag, as it is measured (on the elector's thread: it must be thread-safe).
        self.on_renewal_lag: Callable[[float], None] | None = None
        # The rest is the elector's loop's only: the renew loop, and whom to tell of a loss.
        self._keeper: asyncio.Task[None] | None = None
        self._on_lost: tuple[asyncio.AbstractEventLoop, Callable[[], None]] | None = None
        self._loss_unreported = False

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.config.namespace}/leases"

    def _own(self) -> SessionThread:
        """The elector's thread and loop (and session), started on first use."""
        if self._thread is None:
            assert self.configuration is not None
            self._thread = SessionThread(
                self.configuration, user_agent=self.user_agent, name="gangsched-lease"
            )
        return self._thread

    async def _on_own_loop(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `work()` on the elector's loop and await it from the caller's; cancelling the
        await cancels it there."""
        thread = self._own()
        if thread.on_thread():
            return await work()
        return await asyncio.wrap_future(thread.spawn(work()))

    async def _request(self, method: str, path: str, *, body: Any = None) -> Any:
        """One request through the elector's own session (from another loop: a hop to its
        thread); ApiError unless 2xx."""
        # Bounded by the renew deadline: a renewal answered later is of no use.
        timeout = self.config.renew_deadline
        return await self._own().run_async(
            lambda session: session.call(method, path, body=body, timeout=timeout)
        )

    async def close(self) -> None:
        """Stop the elector's thread (after `release`; a keeper still running is cancelled:
        this replica then no longer leads)."""
        if self._thread is not None:
            thread, self._thread = self._thread, None
            await asyncio.to_thread(thread.close)
        self.leading = False

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the lease afterwards."""
        cfg = self.config
        now = self.clock()
        spec = {
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": max(1, round(cfg.lease_duration)),
            "renewTime": _micro_time(),
        }
        try:
            lease = await self._request("GET", f"{self.path}/{cfg.name}")
        except ApiError as exc:
            if exc.status != 404:
                log.warning(
                    "leader election: cannot read lease %s/%s: %s", cfg.namespace, cfg.name, exc.reason
                )
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": {**spec, "acquireTime": spec["renewTime"], "leaseTransitions": 0},
            }
            try:
                await self._request("POST", self.path, body=body)
            except ApiError as create_exc:
                log.info("leader election: lost the race to create the lease (%s)", create_exc.reason)
                return False
            self._acquired(now)
            return True

        current = lease.get("spec") or {}
        holder = current.get("holderIdentity") or ""
        record = (holder, current.get("renewTime"), current.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(current.get("leaseDurationSeconds") or cfg.lease_duration)
        mine = holder == cfg.identity
        if holder and not mine and now - self._observed_at < duration:
            return False  # held by someone else whose renewals we keep seeing
        new_spec = dict(current)
        new_spec.update(spec)
        if not mine:
            new_spec["acquireTime"] = spec["renewTime"]
            new_spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            await self._request("PUT", f"{self.path}/{cfg.name}", body=lease)  # resourceVersion: optimistic
        except ApiError as exc:
            log.info("leader election: update lost (%s)", exc.reason)
            return False
        self._acquired(now)
        return True

    def write_allowed(self) -> str | None:
        """None when this replica may write now (it leads and renewed less than the renew
        deadline ago, by its own monotonic clock), else why not. Called from any thread."""
        if not self.leading:
            return "this replica does not hold the Lease"
        age = self.clock() - self._last_renew
        if age >= self.config.renew_deadline:
            return (
                f"the Lease was last renewed {age:.1f}s ago (renew deadline {self.config.renew_deadline:g}s)"
            )
        return None

    @property
    def write_timeout(self) -> float:
        """How long a write may wait for its answer: less than the time between the renew
        deadline (after which we stop sending) and the Lease's expiry (after which another
        replica may lead), so a write we sent is answered before anyone else can write."""
        return max(0.5, self.config.lease_duration - self.config.renew_deadline - 0.5)

    def _acquired(self, now: float) -> None:
        """A successful attempt that started at `now`: an acquisition, or a renewal (its lag)."""
        done = self.clock()
        if self.leading:
            self._renewed(done)
        else:
            log.info(
                "leader election: %s now holds %s/%s",
                self.config.identity,
                self.config.namespace,
                self.config.name,
            )
        # The times first: `write_allowed` (another thread) may read them once `leading` is set.
        self._last_renew = now
        self._renewed_at = done
        self.leading = True

    def _renewed(self, done: float) -> None:
        """Measure how late a renewal completed at `done` is (module doc)."""
        interval = done - self._renewed_at
        lag = max(0.0, interval - self.config.retry_period)
        late = interval > self.config.renew_deadline
        self.renewals.record(lag, late=late)
        if self.on_renewal_lag is not None:
            self.on_renewal_lag(lag)
        if late:
            log.warning(
                "leader election: the Lease was renewed %.2fs after its previous renewal, past the "
                "renew deadline (%gs): writes were refused for part of that time",
                interval,
                self.config.renew_deadline,
            )

    def debug(self) -> dict[str, Any]:
        """For the operator's /debug/cache: who, whether leading, how late renewals were."""
        stats = self.renewals
        return {
            "identity": self.config.identity,
            "leading": self.leading,
            "renewals": stats.count,
            "late_renewals": stats.late,
            "renewal_lag_last_seconds": round(stats.lag_last, 4),
            "renewal_lag_max_seconds": round(stats.lag_max, 4),
            "retry_period_seconds": self.config.retry_period,
            "renew_deadline_seconds": self.config.renew_deadline,
        }

    async def acquire(self) -> None:
        """Return once this replica leads (standbys wait here, doing nothing else).

        The attempts run on the elector's loop, and the keeper starts there the moment the
        Lease is won: the first renewal does not wait for the caller's loop to resume."""
        await self._on_own_loop(self._acquire)

    async def _acquire(self) -> None:
        log.info(
            "leader election: %s is a candidate for %s/%s",
            self.config.identity,
            self.config.namespace,
            self.config.name,
        )
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self._start_keeper()
                    return
            except Exception as exc:  # the apiserver is unreachable: keep trying, quietly
                log.warning("leader election: cannot reach the lease: %s", exc)
            await asyncio.sleep(self.config.retry_period)

    async def keep(self, on_lost: Callable[[], None]) -> None:
        """Wait while the keeper renews the Lease on the elector's loop (started by `acquire`,
        else here). When renewals fail for `renew_deadline` it stops leading at once, `on_lost`
        is called on the caller's event loop and this returns. Cancelling this stops the keeper."""
        loop = asyncio.get_running_loop()
        await self._on_own_loop(lambda: self._keep(loop, on_lost))

    async def _keep(self, loop: asyncio.AbstractEventLoop, on_lost: Callable[[], None]) -> None:
        self._on_lost = (loop, on_lost)
        if self._loss_unreported:  # lost before anyone asked
            self._report_lost()
            return
        keeper = self._keeper
        if keeper is None or keeper.done():
            keeper = self._start_keeper()
        await keeper  # cancelled with it: a shutdown stops the renewals

    def _start_keeper(self) -> asyncio.Task[None]:
        self._keeper = asyncio.get_running_loop().create_task(self._renew(), name="gangsched lease keeper")
        return self._keeper

    async def _stop_keeper(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not keeper.done():
            keeper.cancel()
            await asyncio.wait([keeper])  # (not `await keeper`: its CancelledError is not ours)

    async def _renew(self) -> None:
        """The keeper: renew every `retry_period` until cancelled, or until renewals failed for
        `renew_deadline` (then stop leading and report the loss)."""
        while True:
            await asyncio.sleep(self.config.retry_period)
            try:
                ok = await asyncio.wait_for(self.try_acquire_or_renew(), timeout=self.config.renew_deadline)
            except Exception as exc:  # any failure to renew counts: an unrenewed leader must fence itself
                log.warning("leader election: renewal failed: %s", exc)
                ok = False
            if ok:
                continue
            if self.clock() - self._last_renew >= self.config.renew_deadline:
                self.leading = False
                log.error("leader election: lost the lease %s/%s", self.config.namespace, self.config.name)
                self._loss_unreported = True
                self._report_lost()
                return

    def _report_lost(self) -> None:
        """`on_lost` on the loop that asked for it, without waiting for that loop."""
        if self._on_lost is None:
            return  # `keep` reports it when it is called
        loop, on_lost = self._on_lost
        self._loss_unreported = False
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody left to tell
            loop.call_soon_threadsafe(on_lost)

    async def release(self) -> None:
        """On a clean shutdown, stop the keeper and hand the lease over at once instead of
        letting it expire."""
        if self._thread is None and not self.leading:
            return
        await self._on_own_loop(self._release)

    async def _release(self) -> None:
        await self._stop_keeper()  # no renewal may follow the hand-over
        if not self.leading:
            return
        self.leading = False
        try:
            lease = await self._request("GET", f"{self.path}/{self.config.name}")
            if (lease.get("spec") or {}).get("holderIdentity") != self.config.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            await self._request("PUT", f"{self.path}/{self.config.name}", body=lease)
            log.info("leader election: released %s/%s", self.config.namespace, self.config.name)
        except Exception as exc:  # best effort: the lease then simply expires
            log.warning("leader election: could not release the lease: %s", exc)
