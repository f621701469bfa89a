"""The scheduling loop: cache -> engine -> binder, one asyncio task.

Each cycle: pick the groups that may be decided now (not binding, cache caught up with
our writes, backoff over and something changed), run the engine on a snapshot of the
cache in a worker thread, assume every decided placement in the cache, and bind each
decided gang concurrently. Unschedulable groups back off exponentially; any cluster
change wakes the loop. Partial gangs (a member could not be bound) are re-placed, and
rolled back when that fails for `scheduleTimeoutSeconds`. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gangsched.binder import Binder, BindOutcome, BindResult, now_rfc3339, pod_group_ref, pod_ref
from gangsched.cluster import ClusterCache, Key
from gangsched.engine import (
    DEFAULT_RESERVATION_AFTER_SECONDS,
    POD_GROUP_NOT_FOUND,
    SCHEDULED,
    WAITING_FOR_PODS,
    CycleResult,
    GroupDecision,
    schedule_cycle,
)
from gangsched.metrics import Metrics
from gangsched.model import DEFAULT_SCHEDULER_NAME, POD_GROUP_LABEL, TERMINAL_PHASES, Pod
from gangsched.status import Counts, Verdict, build_status, same_status

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SchedulerConfig:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    # None: every namespace. Capacity always counts pods of every namespace.
    namespaces: frozenset[str] | None = None
    backoff_initial_seconds: float = 0.5
    # As kube-scheduler's podMaxBackoffSeconds: a cluster change is noticed within this.
    backoff_max_seconds: float = 10.0
    # An unschedulable group is retried at least this often even if nothing changed.
    resync_seconds: float = 60.0
    # Rollback of a partial gang when the PodGroup sets no scheduleTimeoutSeconds.
    default_schedule_timeout_seconds: float = 300.0
    # After this long behind our own writes, stop waiting for the watch and read live.
    consistency_timeout_seconds: float = 5.0
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS
    # Finished members of our groups are re-listed this often (the watch skips finished pods).
    finished_resync_seconds: float = 120.0
    # Post a "Scheduled" Event on every bound pod, as kube-scheduler does.
    pod_events: bool = True


@dataclass(slots=True)
class GroupState:
    backoff: float = 0.0
    next_attempt: float = 0.0
    failed_generation: int = -1
    last_attempt: float = 0.0
    unschedulable_since: float | None = None
    verdict: Verdict = field(default_factory=Verdict)
    written_status: dict[str, Any] | None = None
    last_event: str | None = None
    binding: bool = False
    partial_since: float | None = None
    behind_since: float | None = None


class Scheduler:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        binder: Binder,
        config: SchedulerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        self.cache = cache
        self.metrics = metrics or Metrics()
        self.binder = binder
        self.config = config or SchedulerConfig()
        self.clock = clock
        self.groups: dict[Key, GroupState] = {}
        self.dirty: set[Key] = set()  # groups whose status may need a write
        self.tasks: set[asyncio.Task[None]] = set()
        self.heartbeat = clock()
        self.cycles = 0
        self._wake = asyncio.Event()
        self._pod_events_sent: dict[Key, str] = {}
        self._finished_synced = clock()

    # ------------------------------------------------------------------ wiring

    def wake(self, group: Key | None = None) -> None:
        if group is not None:
            self.dirty.add(group)
        self._wake.set()

    def in_scope(self, namespace: str) -> bool:
        return self.config.namespaces is None or namespace in self.config.namespaces

    async def run(self) -> None:
        """Decide until cancelled; an error in one cycle is logged and the loop goes on."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)
            self._wake.clear()
            self.heartbeat = self.clock()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed; retrying")
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def state(self, key: Key) -> GroupState:
        state = self.groups.get(key)
        if state is None:
            state = self.groups[key] = GroupState()
        return state

    # ------------------------------------------------------------------ one cycle

    async def cycle(self) -> None:
        self.cycles += 1
        self.metrics.cycles = self.cycles
        now = self.clock()
        cache = self.cache
        if self.cycles % 200 == 0:
            self._collect_garbage()
        if now - self._finished_synced > self.config.finished_resync_seconds:
            self._finished_synced = now
            await self._resync_finished()
        pending_by_group: dict[tuple[Key, bool], list[Pod]] = {}
        for pod in cache.pods.values():
            if pod.scheduler_name != self.config.scheduler_name or pod.node_name or pod.terminal:
                continue
            if pod.key in cache.assumed:
                continue
            key, is_group = ((pod.namespace, pod.pod_group), True) if pod.pod_group else (pod.key, False)
            pending_by_group.setdefault((key, is_group), []).append(pod)

        exclude: set[Key] = set()
        ready = False
        for (key, is_group), members in pending_by_group.items():
            if not self.in_scope(key[0]) or not await self._may_decide(key, is_group, now):
                exclude.update(p.key for p in members)
            else:
                ready = True
        await self._check_partial_gangs(now)
        if ready:
            # What the snapshot saw: events applied while the engine runs count as changes after it.
            seen_generation = cache.generation
            started = time.perf_counter()
            result = await asyncio.to_thread(
                schedule_cycle,
                nodes=list(cache.nodes.values()),
                pods=cache.pods_for_engine(),
                pod_groups=[g for k, g in cache.pod_groups.items() if self.in_scope(k[0])],
                scheduler_name=self.config.scheduler_name,
                waiting_seconds=self._waiting(now),
                reservation_after_seconds=self.config.reservation_after_seconds,
                exclude_pods=frozenset(exclude),
            )
            self.metrics.engine_seconds_sum += time.perf_counter() - started
            self.metrics.engine_seconds_count += 1
            self._apply(result, now, seen_generation)
        await self._write_statuses()

    async def _may_decide(self, key: Key, is_group: bool, now: float) -> bool:
        state = self.state(key)
        if state.binding:
            return False
        if is_group:
            caught = self.cache.caught_up(key)
            if caught is not True:
                if state.behind_since is None:
                    state.behind_since = now
                if caught is None or now - state.behind_since > self.config.consistency_timeout_seconds:
                    await self._read_live(key)
                    caught = self.cache.caught_up(key)
                if caught is not True:
                    self._wake_later(0.2)
                    return False
            state.behind_since = None
        if now < state.next_attempt:
            self._wake_later(state.next_attempt - now)
            return False
        # Not again while nothing changed since it last failed (but now and then anyway).
        unchanged = state.failed_generation == self.cache.generation
        return not (unchanged and now - state.last_attempt < self.config.resync_seconds)

    async def _read_live(self, key: Key) -> None:
        """The watch is late or versions are not comparable: read our bound pods directly."""
        writes = self.cache.writes.get(key)
        if writes is None:
            return
        for pod_key in list(writes.pending_binds):
            body = await self.binder.read_pod(*pod_key)
            if body is None:
                self.cache.apply_pod("DELETED", {"metadata": {"namespace": pod_key[0], "name": pod_key[1]}})
            elif (body.get("spec") or {}).get("nodeName"):
                self.cache.apply_pod("MODIFIED", body)
        writes.pod_group_rv = None  # the status we wrote is ours; the rest comes from the watch

    def _wake_later(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(max(delay, 0.05), self._wake.set)

    def _waiting(self, now: float) -> dict[Key, float]:
        return {
            key: now - state.unschedulable_since
            for key, state in self.groups.items()
            if state.unschedulable_since is not None
        }

    # ------------------------------------------------------------------ decisions

    def _apply(self, result: CycleResult, now: float, seen_generation: int) -> None:
        for decision in result.decisions:
            self.metrics.decisions[decision.reason] += 1
            key = decision.key
            state = self.state(key)
            if decision.scheduled:
                state.backoff = 0.0
                state.next_attempt = 0.0
                state.unschedulable_since = None
                state.failed_generation = -1
                state.binding = True
                state.verdict = Verdict(
                    reason=SCHEDULED, message=decision.message, binding=True, domain=decision.domain
                )
                pods = {p.key: p for p in decision.pending}
                assignments = [(pods[k], node) for k, node in decision.assignments.items()]
                for pod, node in assignments:
                    self.cache.assume(group=key, pod=pod, node=node)
                self.dirty.add(key)
                self._spawn(self._bind_group(decision, assignments))
                continue
            changed = state.failed_generation not in (-1, seen_generation)
            state.failed_generation = seen_generation
            state.last_attempt = now
            if decision.reason in (WAITING_FOR_PODS, POD_GROUP_NOT_FOUND):
                # Nothing to back off from: the next pod or PodGroup event settles it.
                state.backoff = state.next_attempt = 0.0
            elif changed:
                # It failed on a changed cluster: retry soon after the next change.
                state.backoff = self.config.backoff_initial_seconds
                state.next_attempt = now + state.backoff
            else:
                doubled = max(state.backoff * 2, self.config.backoff_initial_seconds)
                state.backoff = min(doubled, self.config.backoff_max_seconds)
                state.next_attempt = now + state.backoff
                self._wake_later(state.backoff)
            if state.unschedulable_since is None and decision.reason not in (
                WAITING_FOR_PODS,
                POD_GROUP_NOT_FOUND,
            ):
                state.unschedulable_since = now
            state.verdict = Verdict(reason=decision.reason, message=decision.message)
            if decision.is_pod_group and decision.reason != POD_GROUP_NOT_FOUND:
                self.dirty.add(key)
                if state.last_event != decision.message:
                    state.last_event = decision.message
                    group = self.cache.pod_groups.get(key)
                    if group is not None:
                        self._spawn(
                            self.binder.event(
                                involved=pod_group_ref(key[0], key[1], group.uid),
                                event_type="Warning" if decision.reason != WAITING_FOR_PODS else "Normal",
                                reason=decision.reason,
                                message=decision.message,
                            )
                        )
            else:
                # A pod alone, or pods whose PodGroup is missing: tell each pod, once per message.
                for pod in decision.pending:
                    if self._pod_events_sent.get(pod.key) != decision.message:
                        self._pod_events_sent[pod.key] = decision.message
                        self._spawn(
                            self.binder.event(
                                involved=pod_ref(pod),
                                event_type="Warning",
                                reason="FailedScheduling",
                                message=decision.message,
                            )
                        )
        log.debug("cycle %d: %d decisions", self.cycles, len(result.decisions))

    async def _bind_group(self, decision: GroupDecision, assignments: list[tuple[Pod, str]]) -> None:
        key = decision.key
        state = self.state(key)
        try:
            results = await self.binder.bind_all(assignments)
            await self._after_binds(decision, results)
        except Exception:
            log.exception("binding %s/%s failed", *key)
            for pod, _ in assignments:
                self.cache.forget(pod.key)
        finally:
            state.binding = False
            state.verdict = Verdict(
                reason=state.verdict.reason,
                message=state.verdict.message,
                binding=False,
                domain=state.verdict.domain,
            )
            self.dirty.add(key)
            self.wake()

    async def _after_binds(self, decision: GroupDecision, results: list[BindResult]) -> None:
        failed = [r for r in results if r.outcome is not BindOutcome.BOUND]
        for r in results:
            self.metrics.binds[r.outcome.value] += 1
            if r.outcome is BindOutcome.BOUND:
                if self.config.pod_events:
                    self._spawn(
                        self.binder.event(
                            involved=pod_ref(r.pod),
                            event_type="Normal",
                            reason="Scheduled",
                            message=f"Successfully assigned {r.pod.namespace}/{r.pod.name} to {r.node}",
                        )
                    )
                continue
            self.cache.forget(r.pod.key)
            if r.outcome is BindOutcome.CONFLICT:
                # Someone else bound it (or it is going away): believe the server, not the cache.
                body = await self.binder.read_pod(r.pod.namespace, r.pod.name)
                if body is None:
                    self.cache.apply_pod(
                        "DELETED", {"metadata": {"namespace": r.pod.namespace, "name": r.pod.name}}
                    )
                else:
                    self.cache.apply_pod("MODIFIED", body)
            log.warning(
                "binding %s/%s to %s: %s %s", r.pod.namespace, r.pod.name, r.node, r.outcome.value, r.detail
            )
        if not decision.is_pod_group:
            return
        group = self.cache.pod_groups.get(decision.key)
        if group is None:
            return
        bound = len(results) - len(failed)
        if failed:
            message = (
                f"bound {bound}/{len(results)} pods; {len(failed)} failed "
                f"({failed[0].pod.name}: {failed[0].outcome.value} {failed[0].detail}); "
                "placing the rest again"
            )
            self._spawn(
                self.binder.event(
                    involved=pod_group_ref(*decision.key, group.uid),
                    event_type="Warning",
                    reason="BindingFailed",
                    message=message,
                )
            )
        else:
            self._spawn(
                self.binder.event(
                    involved=pod_group_ref(*decision.key, group.uid),
                    event_type="Normal",
                    reason="Scheduled",
                    message=decision.message,
                )
            )

    # ------------------------------------------------------------------ partial gangs

    async def _check_partial_gangs(self, now: float) -> None:
        """A gang with some members bound but below minCount must complete or be rolled back."""
        for key, group in list(self.cache.pod_groups.items()):
            if group.spec is None or not group.spec.is_gang or not self.in_scope(key[0]):
                continue
            state = self.state(key)
            members = [p for p in self.cache.members(key) if p.scheduler_name == self.config.scheduler_name]
            counts = Counts.of(members)
            assumed = sum(1 for p in members if p.key in self.cache.assumed)
            # Below quorum with members holding nodes. A failed member ends the gang's run
            # instead (phase Failed): its pods are then left for their controller.
            partial = (
                counts.active + assumed > 0
                and counts.active + assumed + counts.succeeded < group.spec.min_count
                and counts.failed == 0
                and not state.binding
            )
            if not partial:
                state.partial_since = None
                continue
            if state.partial_since is None:
                state.partial_since = now
                continue
            timeout = group.spec.schedule_timeout_seconds or self.config.default_schedule_timeout_seconds
            if now - state.partial_since < timeout:
                self._wake_later(timeout - (now - state.partial_since))
                continue
            state.partial_since = None
            bound = [p for p in members if p.node_name and not p.terminal]
            message = (
                f"only {counts.active}/{group.spec.min_count} pods could be bound within {timeout:.0f}s; "
                f"deleting the {len(bound)} bound pods so the gang is not left partial"
            )
            log.warning("PodGroup %s/%s: %s", *key, message)
            self.metrics.rollbacks += 1
            state.verdict = Verdict(reason="Timeout", message=message)
            self.dirty.add(key)
            await self.binder.event(
                involved=pod_group_ref(*key, group.uid),
                event_type="Warning",
                reason="Timeout",
                message=message,
            )
            for pod in bound:
                await self.binder.delete_pod(pod, reason="gang rollback")

    # ------------------------------------------------------------------ status

    async def _write_statuses(self) -> None:
        dirty, self.dirty = self.dirty, set()
        for key in dirty:
            group = self.cache.pod_groups.get(key)
            if group is None or not self.in_scope(key[0]):
                continue
            state = self.state(key)
            members = self.cache.members(key, assumed=True)
            previous = state.written_status
            if previous is None:
                raw = self.cache.raw_pod_groups.get(key) or {}
                previous = raw.get("status") or None
            status = build_status(group, members, state.verdict, previous=previous, now=now_rfc3339())
            if same_status(status, previous):
                continue
            try:
                rv = await self.binder.patch_pod_group_status(key[0], key[1], status)
            except Exception as exc:
                log.warning("could not write status of PodGroup %s/%s: %s", *key, exc)
                self.dirty.add(key)
                continue
            state.written_status = status
            if rv is not None:
                self.cache.wrote_pod_group(key, rv)

    async def pod_gone(self, body: Mapping[str, Any]) -> None:
        """A DELETED event from the watch of unfinished pods: the pod is gone, or it finished.

        For members of our groups the difference matters (Succeeded/Failed counts, phase), so
        they are read live; everything else simply leaves the cache (it holds no capacity).
        """
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        if spec.get("schedulerName") == self.config.scheduler_name and POD_GROUP_LABEL in (
            meta.get("labels") or {}
        ):
            try:
                live = await self.binder.read_pod(
                    str(meta.get("namespace") or "default"), str(meta.get("name"))
                )
            except Exception as exc:
                log.warning("could not read pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
                live = None
            if (
                live is not None
                and (live.get("metadata") or {}).get("uid") == meta.get("uid")
                and (live.get("status") or {}).get("phase") in TERMINAL_PHASES
            ):
                self.cache.apply_pod("MODIFIED", live)
                return
        self.cache.apply_pod("DELETED", body)

    async def _resync_finished(self) -> None:
        """Finished members leave the watch; re-list them now and then to see deletions."""
        try:
            items = await self.binder.finished_members(self.config.scheduler_name)
        except Exception as exc:
            log.warning("could not list finished pods: %s", exc)
            return
        seen = set()
        for item in items:
            meta = item.get("metadata") or {}
            seen.add((str(meta.get("namespace")), str(meta.get("name"))))
            self.cache.apply_pod("LISTED", item)
        for key, pod in list(self.cache.pods.items()):
            if pod.terminal and pod.scheduler_name == self.config.scheduler_name and key not in seen:
                self.cache.apply_pod("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})

    def forget_group(self, key: Key) -> None:
        self.groups.pop(key, None)

    def _collect_garbage(self) -> None:
        """Drop what we remember about pods and groups that no longer exist."""
        cache = self.cache
        for key in [k for k in self._pod_events_sent if k not in cache.pods]:
            del self._pod_events_sent[key]
        for key in list(self.groups):
            state = self.groups[key]
            if key not in cache.pod_groups and key not in cache.pods and not state.binding:
                del self.groups[key]
