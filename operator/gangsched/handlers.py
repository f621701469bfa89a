"""The informers' intake: what happens when the API tells us about an object. No scheduling
logic, and no network I/O: an event is applied the moment it is read.

Every kind is watched by an informer (`cluster.informer`); its events and LISTs go through
`Intake.event` and `Intake.listed` into the cache's one store, so an object that vanished from
a LIST has exactly the effects of a DELETED event. Two things follow from each:

- the loop is woken for a cycle only when the cache's change count moved (a change a decision
  can depend on: not a node heartbeat, not a pod's status conditions, not a Job's counters);
- the PodGroup an event concerns (a PodGroup's own, the one a pod names) gets its status
  looked at, by a debounced status pass that runs no cycle (`Scheduler.report`).

Pods alone need more: a member of our groups that leaves the watch of unfinished pods may
have finished, and only a live read can tell. It is kept as it was (running: it holds its
capacity a moment longer, never less) and read in the background (`LiveReader.pod_left`);
the stream goes on meanwhile. Startup, health, metrics and shutdown live in `runtime`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangsched.cluster import ClusterCache, Key, LiveReader
from gangsched.cluster.kinds import KINDS, POD, POD_GROUP_KINDS
from gangsched.cluster.store import key_of
from gangsched.loop import Faults, Scheduler
from gangsched.model import ModelError
from gangsched.model.pod import pod_group_of

# Items of a LIST page applied between two turns of the event loop.
_LIST_SLICE = 100

Body = Mapping[str, Any]


def _group_named(body: Body) -> str | None:
    """The PodGroup a pod's body names (label or spec.schedulingGroup), None if none or unreadable."""
    try:
        group, _ = pod_group_of(body.get("spec") or {}, (body.get("metadata") or {}).get("labels") or {})
    except ModelError:
        return None
    return group


class Intake:
    """Every watched kind's events and LISTs, into the cache, waking the loop for what matters."""

    def __init__(
        self, *, cache: ClusterCache, scheduler: Scheduler, live: LiveReader, faults: Faults
    ) -> None:
        self.cache = cache
        self.scheduler = scheduler
        self.live = live
        self.faults = faults
        self._delayed: set[asyncio.Task[None]] = set()
        self._group_kinds = {kind.name for kind in POD_GROUP_KINDS.values()}

    def sink(self, kind: str) -> KindSink:
        """What an informer of `kind` feeds."""
        return KindSink(self, kind)

    async def event(self, kind: str, event_type: str, body: Body) -> None:
        """One watch event of `kind`."""
        if kind == POD.name:
            self.pod(event_type, body)
            return
        changes = self.cache.changes
        self.cache.apply(kind, event_type, body)
        if kind in self._group_kinds:
            self.scheduler.report(key_of(body))
        self._woken(changes)

    def list_start(self, kind: str) -> None:
        """A LIST of `kind` begins (or starts over), read page by page."""
        self.cache.list_start(kind)

    async def list_page(self, kind: str, items: Sequence[Body]) -> None:
        """One page of the LIST in progress, applied a slice at a time: the event loop (other
        watches, probes, the metrics endpoint) never waits for a whole page of 500 pods."""
        for start in range(0, len(items), _LIST_SLICE):
            changes = self.cache.changes
            self.cache.list_page(kind, items[start : start + _LIST_SLICE])
            self._woken(changes)
            await asyncio.sleep(0)

    async def listed(self, kind: str, resource_version: str) -> None:
        """The LIST of `kind` at `resource_version` is all in: the kind is exactly what its
        pages held now, and current (what waited for it may be decided)."""
        leaving: list[Key] = []
        if kind == POD.name:
            # Members of ours the LIST of unfinished pods no longer holds may have finished:
            # kept as they are, each read in the background (`LiveReader.pod_left`).
            held = self.cache.listing(kind)
            leaving = [
                k for k, p in self.cache.pods.items() if k not in held and self.live.may_have_finished(p)
            ]
            self.cache.keep_listed(kind, leaving)
        listed = list(self.cache.listing(kind))
        vanished = self.cache.list_end(kind, resource_version)
        for key in leaving:
            self.live.pod_left(key)
        if kind in self._group_kinds:
            # Each group listed (or gone) gets its status looked at, as after its own event.
            for key in [*listed, *vanished]:
                self.scheduler.report(key)
        self.scheduler.wake()

    async def replace(self, kind: str, items: Sequence[Body], resource_version: str) -> None:
        """A LIST of `kind` held whole (one page): `list_start`, `list_page`, `listed`."""
        self.list_start(kind)
        await self.list_page(kind, items)
        await self.listed(kind, resource_version)

    def lost(self, kind: str, why: str) -> None:
        """`kind`'s watch ended: what the cache holds of it may be stale until it is current."""
        self.cache.lost(kind, why)

    def resumed(self, kind: str) -> None:
        """`kind`'s watch was resumed on time: current again; what waited for it may go on."""
        was_stale = not self.cache.store.synced(KINDS[kind])
        self.cache.resumed(kind)
        if was_stale:
            self.scheduler.wake()

    def _woken(self, changes: int) -> None:
        if self.cache.changes != changes:
            self.scheduler.wake()

    # ------------------------------------------------------------------ pods

    def pod(self, event_type: str, body: Body) -> None:
        if self.faults.watch_delay_seconds and (body.get("spec") or {}).get("nodeName"):
            # A lagging watch: this event arrives late, the stream behind it does not wait.
            delayed = self._late(self.faults.watch_delay_seconds, event_type, body)
            task = asyncio.get_running_loop().create_task(delayed, name="fault: late pod event")
            self._delayed.add(task)
            task.add_done_callback(self._delayed.discard)
            return
        self._pod(event_type, body)

    async def _late(self, delay: float, event_type: str, body: Body) -> None:
        await asyncio.sleep(delay)
        self._pod(event_type, body)

    def _pod(self, event_type: str, body: Body) -> None:
        key: Key = key_of(body)
        changes = self.cache.changes
        held = self.cache.pods.get(key)
        if event_type == "DELETED" and held is not None and self.live.may_have_finished(held):
            # Gone, or finished (it left the selector): told apart by a read in the background.
            self.live.pod_left(key)
        else:
            self.cache.apply(POD.name, event_type, body)
        group = _group_named(body)
        if group:
            self.scheduler.report((key[0], group))
        self._woken(changes)


@dataclass(frozen=True, slots=True)
class KindSink:
    """One kind's side of `Intake`, as an informer wants it (`cluster.informer.Sink`)."""

    intake: Intake
    kind: str

    async def apply(self, event_type: str, body: Body) -> None:
        await self.intake.event(self.kind, event_type, body)

    def list_start(self) -> None:
        self.intake.list_start(self.kind)

    async def list_page(self, items: Sequence[Body]) -> None:
        await self.intake.list_page(self.kind, items)

    async def listed(self, resource_version: str) -> None:
        await self.intake.listed(self.kind, resource_version)

    def lost(self, why: str) -> None:
        self.intake.lost(self.kind, why)

    def resumed(self) -> None:
        self.intake.resumed(self.kind)
