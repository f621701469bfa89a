"""Thin kopf watch handlers: feed the cache, wake the loop. No scheduling logic here.

Pods and Nodes are watched only with `@kopf.on.event`, which never writes to the object
(no annotations, no finalizers); kopf's own Event posting is switched off at startup
(`runtime`). Startup, health, metrics and shutdown live in `runtime`, not here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from gangsched.cluster import ClusterCache, LiveReader
from gangsched.loop import Faults, Scheduler
from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, VERSION


def register_watch_handlers(
    registry: kopf.OperatorRegistry,
    *,
    cache: ClusterCache,
    scheduler: Scheduler,
    live: LiveReader,
    faults: Faults,
) -> None:
    @kopf.on.event("", "v1", "pods", registry=registry)
    async def on_pod(event: kopf.RawEvent, **_: Any) -> None:
        body = event["object"]
        if faults.watch_delay_seconds and (body.get("spec") or {}).get("nodeName"):
            await asyncio.sleep(faults.watch_delay_seconds)
        if event["type"] == "DELETED":
            await live.pod_gone(body)  # gone, or finished (it left the selector)
        else:
            cache.apply_pod(event["type"], body)
        meta = body.get("metadata") or {}
        group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
        scheduler.wake((meta.get("namespace") or "default", group) if group else None)

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def on_node(event: kopf.RawEvent, **_: Any) -> None:
        cache.apply_node(event["type"], event["object"])
        scheduler.wake()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def on_pod_group(event: kopf.RawEvent, **_: Any) -> None:
        key = cache.apply_pod_group(event["type"], event["object"])
        if event["type"] == "DELETED":
            scheduler.forget_group(key)
        scheduler.wake(key)

    @kopf.on.event("scheduling.k8s.io", "v1", "priorityclasses", registry=registry)
    async def on_priority_class(event: kopf.RawEvent, **_: Any) -> None:
        cache.apply_priority_class(event["type"], event["object"])
        scheduler.wake()
