"""The binding pipeline: a decided gang on its way to the API.

    assume -> writes before the bind (each with its undo) -> Bindings -> outcomes -> Events

1. `start` assumes every placement in the cache at once, so the next cycle already sees the
   capacity taken and the pods no longer pending, while the writes are still in flight.
2. Writes that must succeed for the whole gang before any member is bound (ResourceClaim
   allocations, waiting for binding conditions) are `PreBindStep`s. If one fails, the steps
   done so far are undone in reverse order, the assumptions dropped, and the gang is placed
   again from scratch; nothing was bound.
3. Bindings are sent concurrently (the API has no multi-pod bind). A pod that cannot be bound
   drops its assumption and is pending again; after a 409 the pod is re-read (believe the
   server). The gang may then be transiently partial: `repair` places the rest inside the
   domain its bound members pin, or rolls it back.
4. Events: `Scheduled` on each bound pod (as kube-scheduler), `Scheduled` or `BindingFailed`
   on the PodGroup.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from gangsched.binder import BindOutcome, BindResult, group_ref, pod_ref
from gangsched.cluster import Key
from gangsched.engine import GroupDecision
from gangsched.loop.context import LoopContext
from gangsched.loop.report import Reporter
from gangsched.model import EventReason, Pod

log = logging.getLogger(__name__)


@dataclass(slots=True)
class GangPlan:
    """One decided group on its way to the API."""

    decision: GroupDecision
    assignments: list[tuple[Pod, str]]

    @property
    def key(self) -> Key:
        return self.decision.key


class PreBindStep(Protocol):
    """Writes for the whole gang before any member is bound, and how to take them back."""

    name: str

    async def run(self, plan: GangPlan) -> str | None:
        """Do the writes; None when done, else why the gang cannot be bound now."""

    async def undo(self, plan: GangPlan) -> None:
        """Take back what `run` wrote (best effort, never raises)."""

    async def finish(self, plan: GangPlan, unbound: Sequence[Pod]) -> None:
        """The Bindings were sent; take back what `run` wrote for the `unbound` members (best
        effort, never raises)."""


class BindingPipeline:
    def __init__(
        self,
        ctx: LoopContext,
        reporter: Reporter,
        steps: Sequence[PreBindStep] = (),
    ) -> None:
        self.cache = ctx.cache
        self.live = ctx.live
        self.binder = ctx.binder
        self.reporter = reporter
        self.metrics = ctx.metrics
        self.config = ctx.config
        self.steps = list(steps)

    def start(self, decision: GroupDecision) -> GangPlan:
        """Assume every placement of `decision`; `run` the returned plan next."""
        pods = {p.key: p for p in decision.pending}
        plan = GangPlan(decision, [(pods[k], node) for k, node in decision.assignments.items()])
        for pod, node in plan.assignments:
            self.cache.assume(group=plan.key, pod=pod, node=node)
        self.cache.assume_allocations(decision.allocations)
        return plan

    async def run(self, plan: GangPlan) -> None:
        """Send the plan's writes; on any unexpected error the assumptions are dropped."""
        try:
            if not await self._pre_bind(plan):
                return
            group = self.cache.pod_groups.get(plan.key) if plan.decision.is_pod_group else None
            results = await self.binder.bind_all(plan.assignments, group_uid=group.uid if group else "")
            results = [await self._settle_conflict(r) for r in results]
            unbound = [r.pod for r in results if r.outcome is not BindOutcome.BOUND]
            for step in self.steps:
                await step.finish(plan, unbound)
            await self._outcomes(plan, results)
        except Exception:
            log.exception("binding %s/%s failed", *plan.key)
            self._drop(plan)

    async def _pre_bind(self, plan: GangPlan) -> bool:
        done: list[PreBindStep] = []
        for step in self.steps:
            problem = await step.run(plan)
            if problem is None:
                done.append(step)
                continue
            log.warning("%s/%s: %s failed: %s; placing the gang again", *plan.key, step.name, problem)
            for finished in reversed(done):
                await finished.undo(plan)
            self._drop(plan)
            group = self.cache.pod_groups.get(plan.key)
            if plan.decision.is_pod_group and group is not None:
                message = f"{step.name}: {problem}; placing the gang again"
                self.reporter.post(group_ref(group), "Warning", EventReason.BINDING_FAILED, message)
            return False
        return True

    async def _settle_conflict(self, result: BindResult) -> BindResult:
        """A 409 for a pod that is bound to the node we chose is our own Binding (a retry after
        a lost answer): it counts as bound, and its claims must stay. Believe the server: the
        pod is read once, and `live` puts what it says into the cache."""
        if result.outcome is not BindOutcome.CONFLICT:
            return result
        try:
            body = await self.live.refresh_pod(result.pod.key)
        except Exception as exc:
            log.warning("could not read pod %s/%s after a conflict: %s", *result.pod.key, exc)
            return result
        if body is not None:
            meta, spec = body.get("metadata") or {}, body.get("spec") or {}
            if meta.get("uid") == result.pod.uid and spec.get("nodeName") == result.node:
                return BindResult(result.pod, result.node, BindOutcome.BOUND)
        return result

    def _drop(self, plan: GangPlan) -> None:
        for pod, _ in plan.assignments:
            self.cache.forget(pod.key)
        self.cache.forget_allocations(plan.decision.allocations)

    async def _outcomes(self, plan: GangPlan, results: list[BindResult]) -> None:
        failed = [r for r in results if r.outcome is not BindOutcome.BOUND]
        for r in results:
            self.metrics.binds.labels(outcome=r.outcome.value).inc()
            if r.outcome is BindOutcome.BOUND:
                if self.config.pod_events:
                    message = f"Successfully assigned {r.pod.namespace}/{r.pod.name} to {r.node}"
                    self.reporter.post(pod_ref(r.pod), "Normal", EventReason.SCHEDULED, message)
                continue
            # A conflict was read back from the server already (`_settle_conflict`).
            self.cache.forget(r.pod.key)
            log.warning(
                "binding %s/%s to %s: %s %s", r.pod.namespace, r.pod.name, r.node, r.outcome.value, r.detail
            )
        if not failed:
            self._observe_latency(plan)
        if not plan.decision.is_pod_group:
            return
        group = self.cache.pod_groups.get(plan.key)
        if group is None:
            return
        ref = group_ref(group)
        if failed:
            message = (
                f"bound {len(results) - len(failed)}/{len(results)} pods; {len(failed)} failed "
                f"({failed[0].pod.name}: {failed[0].outcome.value} {failed[0].detail}); "
                "placing the rest again"
            )
            self.reporter.post(ref, "Warning", EventReason.BINDING_FAILED, message)
        else:
            self.reporter.post(ref, "Normal", EventReason.SCHEDULED, plan.decision.message)

    def _observe_latency(self, plan: GangPlan) -> None:
        """Last pod created to last pod bound, once no member of the group is left pending."""
        if plan.decision.is_pod_group:
            members = [p for p in self.cache.members(plan.key, assumed=True) if not p.terminal]
            if any(not p.node_name for p in members):
                return
        else:
            members = [pod for pod, _ in plan.assignments]
        created = [_parse_time(p.created) for p in members]
        stamps = [t for t in created if t is not None]
        if stamps:
            self.metrics.gang_latency.observe(max(0.0, (datetime.now(UTC) - max(stamps)).total_seconds()))


def _parse_time(value: str) -> datetime | None:
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)
