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

Its requests go through an `ApiSession` of its own on an event loop and thread of its own
(`session.SessionThread`): a renewal never waits behind the operator's writes (the
transport's slots and connections), nor for the operator's event loop to get to its socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gangsched.session import ApiError, SessionThread

log = logging.getLogger(__name__)


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


def default_identity() -> str:
    """The pod name when running in a pod (downward API), else host + a random suffix."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
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
        self._client: SessionThread | None = None
        self.config = config
        self.clock = clock
        self.leading = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.config.namespace}/leases"

    async def _request(self, method: str, path: str, *, body: Any = None) -> Any:
        """One request on the elector's own thread; ApiError unless 2xx."""
        if self._client is None:
            assert self.configuration is not None
            self._client = SessionThread(
                self.configuration, user_agent=self.user_agent, name="gangsched-lease"
            )
        # Bounded by the renew deadline: a renewal answered later is of no use.
        timeout = self.config.renew_deadline
        return await self._client.run_async(
            lambda session: session.call(method, path, body=body, timeout=timeout)
        )

    async def close(self) -> None:
        """Stop the elector's thread (after `release`)."""
        if self._client is not None:
            thread, self._client = self._client, None
            await asyncio.to_thread(thread.close)

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
        if not self.leading:
            log.info(
                "leader election: %s now holds %s/%s",
                self.config.identity,
                self.config.namespace,
                self.config.name,
            )
        self.leading = True
        self._last_renew = now

    async def acquire(self) -> None:
        """Return once this replica leads (standbys wait here, doing nothing else)."""
        log.info(
            "leader election: %s is a candidate for %s/%s",
            self.config.identity,
            self.config.namespace,
            self.config.name,
        )
        while True:
            try:
                if await self.try_acquire_or_renew():
                    return
            except Exception as exc:  # the apiserver is unreachable: keep trying, quietly
                log.warning("leader election: cannot reach the lease: %s", exc)
            await asyncio.sleep(self.config.retry_period)

    async def keep(self, on_lost: Callable[[], None]) -> None:
        """Renew until cancelled; call `on_lost` (and return) when renewals fail for `renew_deadline`."""
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
                on_lost()
                return

    async def release(self) -> None:
        """On a clean shutdown, hand the lease over at once instead of letting it expire."""
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
