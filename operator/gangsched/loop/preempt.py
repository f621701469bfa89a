"""Carrying out a preemption the engine chose (`engine.preemption`), and the nominations.

For each victim, concurrently: `DisruptionTarget=True` (reason `PreemptionByScheduler`, naming
the preemptor) on its status, then a DELETE with its own grace period and its UID as
precondition (kube-scheduler's executor does the same; no Eviction API), and a `Preempted`
Event on it; one `Preempting` Event on the preemptor.

**Nomination**: the domain the engine chose stays held for the preemptor while the
victims terminate (the engine's `Nomination`, kept in a `Preempting` and passed to the
engine every cycle): groups
behind it in the queue may not use those nodes, lower-priority groups may still use capacity
elsewhere, and the preemptor does not preempt again meanwhile. It is released when the
preemptor is placed (anywhere) or deleted, when its victims are gone and it still has not
been placed after `NOMINATION_GRACE_SECONDS` (the engine decides afresh, preempting again if
it must), or after `NOMINATION_MAX_SECONDS` whatever happens.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from gangsched.binder import group_ref, pod_ref
from gangsched.cluster import Key
from gangsched.engine import GroupDecision
from gangsched.engine.types import Nomination
from gangsched.loop.context import LoopContext
from gangsched.loop.report import Reporter
from gangsched.model import EventReason, Pod

log = logging.getLogger(__name__)

NOMINATION_GRACE_SECONDS = 30.0
NOMINATION_MAX_SECONDS = 600.0


@dataclass(slots=True)
class Preempting:
    """A preemption under way: the domain held for the preemptor, its victims, since when."""

    nomination: Nomination
    victims: list[tuple[Key, str]]  # (pod key, uid)
    since: float
    victims_gone_since: float | None = None


class Preemptions:
    def __init__(
        self,
        ctx: LoopContext,
        reporter: Reporter,
    ) -> None:
        self.cache = ctx.cache
        self.binder = ctx.binder
        self.reporter = reporter
        self.metrics = ctx.metrics
        self.config = ctx.config
        self.clock = ctx.clock
        self.nominations: dict[Key, Preempting] = {}
        ctx.metrics.gauge(
            "gangsched_nomination_age_seconds",
            "Age of the oldest nomination (a domain held for a preemptor while its victims terminate).",
            self.oldest_age,
        )

    def oldest_age(self) -> float:
        now = self.clock()
        return max((now - n.since for n in self.nominations.values()), default=0.0)

    def active(self) -> list[Nomination]:
        return [n.nomination for n in self.nominations.values()]

    # ------------------------------------------------------------------ per cycle

    def review(self, decisions: Iterable[GroupDecision]) -> None:
        """Release nominations whose preemptor was placed, is gone, or waited long enough."""
        now = self.clock()
        placed = {d.key for d in decisions if d.scheduled}
        for key, nomination in list(self.nominations.items()):
            alive = key in self.cache.pod_groups or key in self.cache.pods
            if key in placed or not alive or now - nomination.since > NOMINATION_MAX_SECONDS:
                self._release(key, "placed" if key in placed else "gone" if not alive else "expired")
                continue
            if all(self._gone(k, uid) for k, uid in nomination.victims):
                if nomination.victims_gone_since is None:
                    nomination.victims_gone_since = now
                elif now - nomination.victims_gone_since > NOMINATION_GRACE_SECONDS:
                    self._release(key, "victims gone, still not placed")

    def _gone(self, key: Key, uid: str) -> bool:
        pod = self.cache.pods.get(key)
        return pod is None or pod.uid != uid or pod.terminal

    def _release(self, key: Key, why: str) -> None:
        self.nominations.pop(key, None)
        log.info("nomination of %s/%s released: %s", *key, why)

    def forget(self, key: Key) -> None:
        self.nominations.pop(key, None)

    # ------------------------------------------------------------------ carrying out

    def nominate(self, decision: GroupDecision) -> None:
        """Hold the chosen domain for the preemptor from now on (before any eviction is sent,
        so the next cycle neither gives it away nor preempts again)."""
        preemption, nomination = decision.preemption, decision.nomination
        if preemption is None or nomination is None:
            return
        self.nominations[decision.key] = Preempting(
            nomination=nomination,
            victims=[(p.key, p.uid) for p in preemption.victims],
            since=self.clock(),
        )

    async def evict(self, decision: GroupDecision) -> None:
        """Evict the victims of `decision.preemption` (nominated already)."""
        preemption = decision.preemption
        if preemption is None:
            return
        key = decision.key
        kind = "PodGroup" if decision.is_pod_group else "pod"
        who = f"{kind} {key[0]}/{key[1]}"
        self._preemptor_event(decision, f"{preemption.describe()}: {_names(preemption.victims)}")
        outcomes = await asyncio.gather(*(self._evict(p, who) for p in preemption.victims))
        failed = outcomes.count("Failed")
        self.metrics.preemptions.labels(outcome="Partial" if failed else "Started").inc()
        log.info("%s preempts %d pod(s) (%d failed): %s", who, len(outcomes), failed, preemption.describe())

    async def _evict(self, pod: Pod, who: str) -> str:
        message = f"{self.config.scheduler_name}: preempting to accommodate a higher priority {who}"
        if not await self.binder.mark_disruption_target(pod, message):
            self.metrics.preemption_victims.labels(outcome="Gone").inc()
            return "Gone"
        if not await self.binder.delete_pod(pod, reason="preemption"):
            self.metrics.preemption_victims.labels(outcome="Failed").inc()
            return "Failed"
        self.reporter.post(
            pod_ref(pod), "Normal", EventReason.PREEMPTED, f"Preempted by {who} on node {pod.node_name}"
        )
        self.metrics.preemption_victims.labels(outcome="Deleted").inc()
        return "Deleted"

    def _preemptor_event(self, decision: GroupDecision, message: str) -> None:
        if decision.is_pod_group:
            group = self.cache.pod_groups.get(decision.key)
            if group is not None:
                self.reporter.post(group_ref(group), "Normal", EventReason.PREEMPTING, message)
            return
        for pod in decision.pending:
            self.reporter.post(pod_ref(pod), "Normal", EventReason.PREEMPTING, message)


def _names(pods: list[Pod], limit: int = 8) -> str:
    names = [f"{p.namespace}/{p.name}" for p in pods[:limit]]
    more = f" and {len(pods) - limit} more" if len(pods) > limit else ""
    return ", ".join(names) + more
