"""Watch handlers: what happens when the API tells us about an object. No scheduling logic here.

Whoever tells (an informer's event, its LIST after a 410, a kopf handler, a reconciling
LIST), the same `Intake` method feeds the cache and wakes the loop, so an object that
vanished from a LIST has exactly the effects of a DELETED event. kopf handlers are
`@kopf.on.event` only: they never write to the object (no annotations, no finalizers).
Startup, health, metrics and shutdown live in `runtime`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from gangsched.cluster import ClusterCache, Key, LiveReader
from gangsched.cluster.devices import object_key
from gangsched.loop import Faults, Scheduler
from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, VERSION, ModelError, Pod, PodGroupApi
from gangsched.model.pod import pod_group_of

Body = Mapping[str, Any]


def _key(body: Body) -> Key:
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def _name(body: Body) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


def _pod_stub(pod: Pod) -> dict[str, Any]:
    """Enough of a pod's body for `pod_gone` (its identity, group and scheduler)."""
    native = pod.pod_group_api is PodGroupApi.NATIVE
    labels = {POD_GROUP_LABEL: pod.pod_group} if pod.pod_group and not native else {}
    spec: dict[str, Any] = {"schedulerName": pod.scheduler_name}
    if pod.pod_group and native:
        spec["schedulingGroup"] = {"podGroupName": pod.pod_group}
    return {
        "metadata": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid, "labels": labels},
        "spec": spec,
    }


def _group_named(body: Body) -> str | None:
    """The PodGroup a pod's body names (label or spec.schedulingGroup), None if none or unreadable."""
    try:
        group, _ = pod_group_of(body.get("spec") or {}, (body.get("metadata") or {}).get("labels") or {})
    except ModelError:
        return None
    return group


class Intake:
    def __init__(
        self, *, cache: ClusterCache, scheduler: Scheduler, live: LiveReader, faults: Faults
    ) -> None:
        self.cache = cache
        self.scheduler = scheduler
        self.live = live
        self.faults = faults
        self._delayed: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ pods

    async def pod(self, event_type: str, body: Body) -> None:
        if self.faults.watch_delay_seconds and (body.get("spec") or {}).get("nodeName"):
            # A lagging watch: this event arrives late, the stream behind it does not wait.
            delayed = self._late(self.faults.watch_delay_seconds, event_type, body)
            task = asyncio.get_running_loop().create_task(delayed, name="fault: late pod event")
            self._delayed.add(task)
            task.add_done_callback(self._delayed.discard)
            return
        await self._pod(event_type, body)

    async def _late(self, delay: float, event_type: str, body: Body) -> None:
        await asyncio.sleep(delay)
        await self._pod(event_type, body)

    async def _pod(self, event_type: str, body: Body) -> None:
        if event_type == "DELETED":
            await self.live.pod_gone(body)  # gone, or finished (it left the selector)
        else:
            self.cache.apply_pod(event_type, body)
        meta = body.get("metadata") or {}
        group = _group_named(body)
        self.scheduler.wake((meta.get("namespace") or "default", group) if group else None)

    async def pods_listed(self, items: Sequence[Body], resource_version: str) -> None:
        listed = set()
        for item in items:
            self.cache.apply_pod("LISTED", item)
            listed.add(_key(item))
        for pod in self.cache.vanished_pods(listed, resource_version):
            await self.pod("DELETED", _pod_stub(pod))
        self.scheduler.wake()

    # ------------------------------------------------------------------ nodes

    async def node(self, event_type: str, body: Body) -> None:
        self.cache.apply_node(event_type, body)
        self.scheduler.wake()

    async def nodes_listed(self, items: Sequence[Body], resource_version: str) -> None:
        for item in items:
            self.cache.apply_node("LISTED", item)
        for name in self.cache.vanished_nodes({_name(i) for i in items}, resource_version):
            self.cache.apply_node("DELETED", {"metadata": {"name": name}})
        self.scheduler.wake()

    # ------------------------------------------------------------------ PodGroups

    async def pod_group(self, event_type: str, body: Body, api: PodGroupApi | None = None) -> None:
        """A PodGroup of `api` (None: as its apiVersion says, see `ClusterCache.apply_pod_group`)."""
        key = _key(body)
        before = self.cache.pod_groups.get(key)
        self.cache.apply_pod_group(event_type, body, api)
        after = self.cache.pod_groups.get(key)
        if before is not None and (after is None or (before.api, before.uid) != (after.api, after.uid)):
            self.scheduler.forget_group(key)  # deleted, or another group now: start afresh
        self.scheduler.wake(key)

    async def pod_groups_listed(
        self, items: Sequence[Body], resource_version: str, api: PodGroupApi = PodGroupApi.GANGSCHED
    ) -> None:
        for item in items:
            await self.pod_group("LISTED", item, api)
        for key in self.cache.vanished_pod_groups({_key(i) for i in items}, resource_version, api):
            await self.pod_group("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}}, api)

    def native_pod_group_sink(self) -> KindSink:
        """scheduling.k8s.io/v1alpha2 PodGroups (an informer's), into the same cache and loop."""

        async def on_event(event_type: str, body: Body) -> None:
            await self.pod_group(event_type, body, PodGroupApi.NATIVE)

        async def on_list(items: Sequence[Body], resource_version: str) -> None:
            await self.pod_groups_listed(items, resource_version, PodGroupApi.NATIVE)

        return KindSink(on_event, on_list)

    # ------------------------------------------------------------------ PriorityClasses

    async def priority_class(self, event_type: str, body: Body) -> None:
        self.cache.apply_priority_class(event_type, body)
        self.scheduler.wake()

    async def priority_classes_listed(self, items: Sequence[Body], resource_version: str) -> None:
        for item in items:
            self.cache.apply_priority_class("LISTED", item)
        for name in self.cache.vanished_priority_classes({_name(i) for i in items}, resource_version):
            self.cache.apply_priority_class("DELETED", {"metadata": {"name": name}})
        self.scheduler.wake()

    # ------------------------------------------------------------------ PodDisruptionBudgets

    async def budget(self, event_type: str, body: Body) -> None:
        self.cache.apply_budget(event_type, body)

    async def budgets_listed(self, items: Sequence[Body], resource_version: str) -> None:
        for item in items:
            self.cache.apply_budget("LISTED", item)
        for key in self.cache.vanished_budgets({_key(i) for i in items}, resource_version):
            self.cache.apply_budget("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})

    # ------------------------------------------------------------------ DRA kinds

    def dra_sink(self, kind: str) -> KindSink:
        """DeviceClasses, ResourceSlices or ResourceClaims (`cluster.devices` kinds)."""

        async def on_event(event_type: str, body: Body) -> None:
            self.cache.apply_dra(kind, event_type, body)
            self.scheduler.wake()

        async def on_list(items: Sequence[Body], resource_version: str) -> None:
            for item in items:
                self.cache.apply_dra(kind, "LISTED", item)
            listed = [object_key(i) for i in items]
            for key in self.cache.devices.vanished(kind, listed, resource_version):
                self.cache.apply_dra(kind, "DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})
            self.scheduler.wake()

        return KindSink(on_event, on_list)


@dataclass(frozen=True, slots=True)
class KindSink:
    """One kind's pair of Intake methods, as an informer or reconciler wants them."""

    on_event: Callable[[str, Body], Awaitable[None]]
    on_list: Callable[[Sequence[Body], str], Awaitable[None]]

    async def apply(self, event_type: str, body: Body) -> None:
        await self.on_event(event_type, body)

    async def replace(self, items: Sequence[Body], resource_version: str) -> None:
        await self.on_list(items, resource_version)


def register_kopf_handlers(
    registry: kopf.OperatorRegistry, *, intake: Intake, relisted: Callable[[], None]
) -> None:
    """PodGroups through kopf. kopf marks the events of its (re-)listing with type None;
    `relisted` then asks for a reconciling LIST, since kopf never reports what vanished."""

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def on_pod_group(event: kopf.RawEvent, **_: Any) -> None:
        event_type = event["type"]
        if event_type is None:
            relisted()
        await intake.pod_group(event_type or "LISTED", event["object"])
