"""What users see of a decision: the PodGroup status and the Events that go with a verdict.

The loop records a `Verdict` per group; this module turns verdicts into status writes (only
when the status would change, and recording the resourceVersion each write returns, so the
group waits for the watch to echo it) and into Events, once per distinct message. Status
writes go out in the background, at most one in flight per group (a change meanwhile is
written when it answers): awaited one by one inside the cycle, a few hundred unschedulable
gangs whose messages change as the cluster fills held every decision for seconds. A native
PodGroup gets kube-scheduler's condition (`status.build_native_status`) and its Events in its
own API; one hidden by gangsched's PodGroup of the same name gets a Warning Event, once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gangsched.binder import group_ref, now_rfc3339, pod_group_ref, pod_ref
from gangsched.cluster import Key
from gangsched.engine import GroupDecision
from gangsched.loop.context import LoopContext
from gangsched.model import EventReason, PodGroup, Reason
from gangsched.status import Verdict, build_native_status, build_status, same_status
from gangsched.transport import FencedError

log = logging.getLogger(__name__)


class Reporter:
    def __init__(self, ctx: LoopContext) -> None:
        self.cache = ctx.cache
        self.binder = ctx.binder
        self.config = ctx.config
        self.tasks = ctx.tasks
        self._verdicts: dict[Key, Verdict] = {}
        self._written: dict[Key, dict[str, Any]] = {}
        # When each partial gang went partial (RFC 3339), persisted in its status (see repair).
        self._partial_since: dict[Key, str] = {}
        self._last_event: dict[Key, str] = {}
        self._pod_events_sent: dict[Key, str] = {}
        # Pods we marked PodScheduled=False/Unschedulable and the watch has not echoed yet.
        self._marked: set[Key] = set()
        self._dirty: set[Key] = set()  # groups whose status may need a write
        self._writing: set[Key] = set()  # groups with a status write in flight
        self._priority_warned: set[str] = set()  # PodGroup UIDs told their spec.priority is ignored
        self._clash_warned: set[str] = set()  # native PodGroup UIDs told gangsched's took their name

    def verdict(self, key: Key) -> Verdict:
        return self._verdicts.get(key) or Verdict()

    def set_verdict(self, key: Key, verdict: Verdict) -> None:
        self._verdicts[key] = verdict
        self._dirty.add(key)

    def partial_since(self, key: Key, stamp: str | None) -> None:
        """Record (or clear, with None) when the gang went partial; written with its status."""
        if stamp is None:
            if self._partial_since.pop(key, None) is not None:
                self._dirty.add(key)
        elif self._partial_since.get(key) != stamp:
            self._partial_since[key] = stamp
            self._dirty.add(key)

    def mark(self, key: Key) -> None:
        """The group's status may have changed (a member did): check it at the end of the cycle."""
        self._dirty.add(key)

    def binding_done(self, key: Key) -> None:
        v = self.verdict(key)
        self.set_verdict(key, Verdict(reason=v.reason, message=v.message, binding=False, domain=v.domain))

    def waiting(self, decision: GroupDecision) -> None:
        """Record a group the engine did not place, and tell its PodGroup (or its pods) why it waits."""
        key = decision.key
        self._verdicts[key] = Verdict(reason=decision.reason, message=decision.message)
        if decision.reason is Reason.WAITING_FOR_GANG:
            return  # loop.gangs tells the pod and its owner, once a wait is more than a moment
        if decision.reason == Reason.UNSCHEDULABLE:
            self._mark_pods(decision)
        if decision.is_pod_group and decision.reason != Reason.POD_GROUP_NOT_FOUND:
            self._dirty.add(key)
            if self._last_event.get(key) == decision.message:
                return
            self._last_event[key] = decision.message
            group = self.cache.pod_groups.get(key)
            if group is not None:
                event_type = "Normal" if decision.reason.waits_for_objects else "Warning"
                self.post(group_ref(group), event_type, decision.reason, decision.message)
            return
        # A pod alone, or pods whose PodGroup is missing: tell each pod, once per message.
        for pod in decision.pending:
            if self._pod_events_sent.get(pod.key) != decision.message:
                self._pod_events_sent[pod.key] = decision.message
                self.post(pod_ref(pod), "Warning", EventReason.FAILED_SCHEDULING, decision.message)

    def _mark_pods(self, decision: GroupDecision) -> None:
        """PodScheduled=False/Unschedulable on each pending pod, once per change of reason
        (not per attempt: a gang of 1,000 pods retried every few seconds would be a flood)."""
        for pod in decision.pending:
            if pod.unscheduled_reason == Reason.UNSCHEDULABLE:
                self._marked.discard(pod.key)  # the watch shows it: nothing more to remember
                continue
            if pod.key in self._marked:
                continue
            self._marked.add(pod.key)
            self.tasks.spawn(
                self.binder.mark_unschedulable(pod, decision.message),
                name=f"mark {pod.namespace}/{pod.name} unschedulable",
            )

    def post(self, involved: dict[str, str], event_type: str, reason: str, message: str) -> None:
        """An Event, in the background (best effort: a lost Event never stops scheduling)."""
        self.tasks.spawn(
            self.binder.event(involved=involved, event_type=event_type, reason=reason, message=message),
            name=f"event {reason} {involved['namespace']}/{involved['name']}",
        )

    async def write_statuses(self) -> None:
        """Start the status writes the cycle's verdicts call for (they run in the background)."""
        self._warn_clashes()
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            group = self.cache.pod_groups.get(key)
            if group is None or not self.config.in_scope(key[0]):
                continue
            if key in self._writing:
                self._dirty.add(key)  # looked at again once the write in flight answers
                continue
            status = self._status(key, group)
            if status is None:
                continue
            self._writing.add(key)
            self.tasks.spawn(self._write(key, group, status), name=f"status {key[0]}/{key[1]}")

    def _status(self, key: Key, group: PodGroup) -> dict[str, Any] | None:
        """The status to write now, or None when the one written (or read) already says it."""
        previous = self._written.get(key) or self.cache.last_status(key)
        members = self.cache.members(key, assumed=True)
        if group.is_native:
            # kube-scheduler's PodGroupScheduled condition, only on a group whose pods name
            # this scheduler (one of kube-scheduler's is its to write).
            if not any(p.scheduler_name == self.config.scheduler_name for p in members):
                return None
            return build_native_status(
                group,
                members,
                self.verdict(key),
                previous=previous,
                now=now_rfc3339(),
                scheduler_name=self.config.scheduler_name,
            )
        if group.ignored_priority is not None and group.uid not in self._priority_warned:
            self._priority_warned.add(group.uid)
            self._warn_priority(
                key, group.uid, group.ignored_priority, group.has_priority_class, group.priority
            )
        status = build_status(
            group,
            members,
            self.verdict(key),
            previous=previous,
            now=now_rfc3339(),
            scheduler_name=self.config.scheduler_name,
            partial_since=self._partial_since.get(key),
        )
        return None if same_status(status, previous) else status

    async def _write(self, key: Key, group: PodGroup, status: dict[str, Any]) -> None:
        try:
            rv = await self.binder.patch_pod_group_status(key[0], key[1], status, group.api)
        except FencedError:
            self._dirty.add(key)  # written by whoever leads next; the binder says why, once
            return
        except Exception as exc:
            log.warning("could not write status of PodGroup %s/%s: %s", *key, exc)
            self._dirty.add(key)
            return
        finally:
            self._writing.discard(key)
        self._written[key] = status
        if rv is not None:
            self.cache.wrote_pod_group(key, rv)

    def _warn_clashes(self) -> None:
        """A native PodGroup that gangsched's PodGroup of the same namespace/name hides is not
        scheduled: say so on it, once per incarnation (its pods get FailedScheduling)."""
        for key, native in list(self.cache.shadowed.items()):
            if native.uid in self._clash_warned or not self.config.in_scope(key[0]):
                continue
            pods = self.cache.members(key, api=native.api)
            if not any(p.scheduler_name == self.config.scheduler_name for p in pods):
                continue  # not ours to schedule anyway (another scheduler's pods, or none yet)
            self._clash_warned.add(native.uid)
            message = (
                f"not scheduled: the {self.cache.pod_groups[key].api.api_version} PodGroup {key[0]}/{key[1]} "
                "has the same namespace/name and gangsched schedules that one; rename one of them"
            )
            log.warning("PodGroup %s/%s (%s): %s", *key, native.api.api_version, message)
            self.post(group_ref(native), "Warning", EventReason.POD_GROUP_NAME_CLASH, message)

    def _warn_priority(self, key: Key, uid: str, ignored: int, has_class: bool, value: int) -> None:
        source = f"its priorityClassName ({value})" if has_class else "its pods' PriorityClass"
        message = (
            f"spec.priority {ignored} is ignored: a PodGroup's priority comes only from {source}, "
            "which an administrator controls"
        )
        log.warning("PodGroup %s/%s: %s", *key, message)
        self.post(pod_group_ref(*key, uid), "Warning", EventReason.PRIORITY_IGNORED, message)

    def forget(self, key: Key) -> None:
        for table in (self._verdicts, self._written, self._last_event, self._partial_since):
            table.pop(key, None)

    def collect(self, exists: Callable[[Key], bool], pod_exists: Callable[[Key], bool]) -> None:
        """Drop what is remembered about groups and pods that no longer exist."""
        for key in [k for k in self._pod_events_sent if not pod_exists(k)]:
            del self._pod_events_sent[key]
        self._marked = {k for k in self._marked if pod_exists(k)}
        for table in (self._verdicts, self._written, self._last_event):
            for key in [k for k in table if not exists(k)]:
                del table[key]
