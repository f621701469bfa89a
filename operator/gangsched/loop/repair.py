"""Partial gangs: repaired when possible, rolled back when not.

A gang is partial when some members hold nodes but fewer than `minCount` (counting
succeeded members and assumed bindings) are bound: a member could not be bound, was
deleted, or its node went away. The engine places its remaining pods inside the domain the
bound members pin, like any pending pods. If the gang stays partial for
`scheduleTimeoutSeconds` (default `default_schedule_timeout_seconds`), its bound members are
deleted with a `Timeout` Event, so their controller recreates the gang whole. A gang with a
failed member is not partial but finished (phase Failed): its pods are left to their
controller. (Later, the preemption executor lives beside this: both evict pods on purpose.)
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from gangsched.binder import group_ref
from gangsched.cluster import Key
from gangsched.loop.backoff import Backoff
from gangsched.loop.context import LoopContext
from gangsched.loop.report import Reporter
from gangsched.model import EventReason, Pod, PodGroup, Reason
from gangsched.status import Counts, Verdict

log = logging.getLogger(__name__)


class GangRepair:
    def __init__(
        self,
        ctx: LoopContext,
        reporter: Reporter,
        backoff: Backoff,
    ) -> None:
        self.cache = ctx.cache
        self.binder = ctx.binder
        self.backoff = backoff
        self.reporter = reporter
        self.metrics = ctx.metrics
        self.config = ctx.config
        self._wake_later = ctx.wake_later
        self._partial_since: dict[Key, float] = {}

    async def check(self, now: float) -> None:
        """Start, keep or stop the clock of every partial gang; roll back those out of time."""
        for key, group in list(self.cache.pod_groups.items()):
            if group.spec is None or not group.spec.is_gang or not self.config.in_scope(key[0]):
                continue
            members = [p for p in self.cache.members(key) if p.scheduler_name == self.config.scheduler_name]
            counts = Counts.of(members)
            assumed = sum(1 for p in members if self.cache.is_assumed(p.key))
            # Bindings in flight count (as assumed): a gang they would complete is not partial.
            partial = (
                counts.active + assumed > 0
                and counts.active + assumed + counts.succeeded < group.spec.min_count
                and counts.failed == 0
            )
            if not partial:
                if self._partial_since.pop(key, None) is not None or self._persisted(key):
                    self.reporter.partial_since(key, None)
                continue
            since = self._partial_since.get(key)
            if since is None:
                # A restarted operator goes on from when the gang went partial, not from now.
                since = self._partial_since[key] = now - self._persisted_age(key)
                self.reporter.partial_since(key, _rfc3339(datetime.now(UTC) - timedelta(seconds=now - since)))
                log.info(
                    "PodGroup %s/%s is partial: %d/%d members bound %.0fs ago",
                    *key,
                    counts.active + assumed,
                    group.spec.min_count,
                    now - since,
                )
                if since == now:
                    continue
            if self.backoff.binding(key):
                continue  # more members are being bound: judge once that is over, on the same clock
            timeout = group.spec.schedule_timeout_seconds or self.config.default_schedule_timeout_seconds
            if now - since < timeout:
                self._wake_later(timeout - (now - since))
                continue
            del self._partial_since[key]
            await self._roll_back(key, group, counts, members, timeout)

    async def _roll_back(
        self, key: Key, group: PodGroup, counts: Counts, members: list[Pod], timeout: float
    ) -> None:
        assert group.spec is not None
        uid, min_count = group.uid, group.spec.min_count
        # Only pods we bound, for this incarnation of the group: never pods another scheduler
        # (or a PodGroup of the same name before) placed.
        bound = [p for p in members if p.node_name and not p.terminal and p.bound_for == uid]
        if not bound:
            log.info(
                "PodGroup %s/%s is partial with no member gangsched bound for it; nothing to roll back", *key
            )
            return
        message = (
            f"only {counts.active}/{min_count} pods could be bound within {timeout:.0f}s; "
            f"deleting the {len(bound)} bound pods so the gang is not left partial"
        )
        log.warning("PodGroup %s/%s: %s", *key, message)
        self.metrics.rollbacks.inc()
        self.reporter.set_verdict(key, Verdict(reason=Reason.TIMEOUT, message=message))
        await self.binder.event(
            involved=group_ref(group),
            event_type="Warning",
            reason=EventReason.TIMEOUT,
            message=message,
        )
        for pod in bound:
            await self.binder.delete_pod(pod, reason="gang rollback")

    def forget(self, key: Key) -> None:
        self._partial_since.pop(key, None)

    def _persisted(self, key: Key) -> str | None:
        status = self.cache.last_status(key) or {}
        value = status.get("partialSince")
        return str(value) if value else None

    def _persisted_age(self, key: Key) -> float:
        """Seconds since the partialSince a previous operator wrote (0 when none)."""
        value = self._persisted(key)
        if value is None:
            return 0.0
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            return 0.0
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return max(0.0, (datetime.now(UTC) - stamp).total_seconds())


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
