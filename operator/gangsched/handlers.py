"""Thin kopf handlers: feed the cache, wake the loop. No scheduling logic here.

Pods and Nodes are watched only with `@kopf.on.event`, which never writes to the object
(no annotations, no finalizers); kopf's own Event posting is switched off at startup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any

import kopf
from aiohttp import web

from gangsched.cluster import ClusterCache
from gangsched.leader import LeaderElector
from gangsched.metrics import serve
from gangsched.model import GROUP, LIVE_PODS_SELECTOR, PLURAL, POD_GROUP_LABEL, VERSION
from gangsched.scheduler import Scheduler

log = logging.getLogger(__name__)

# The scheduling loop counts as dead when it has not turned for this long.
LOOP_STALL_SECONDS = 60.0


def build_registry(
    *,
    cache: ClusterCache,
    scheduler: Scheduler,
    prime: Any,
    elector: LeaderElector | None = None,
    bound_event_delay_seconds: float = 0.0,
    metrics_port: int | None = None,
) -> kopf.OperatorRegistry:
    """A registry whose handlers close over this operator's cache and scheduler.

    `prime` is an async callable that fills the cache from consistent LISTs before the loop
    starts (kopf gives on.event handlers no "initial listing done" signal). With an
    `elector`, the loop starts only once this replica holds the lease: a standby keeps its
    cache warm from the watches but never decides, binds or writes.
    `bound_event_delay_seconds` is fault injection for tests (GANGSCHED_FAULT_WATCH_DELAY_SECONDS):
    events of bound pods reach the cache late, as from a lagging watch.
    """
    registry = kopf.OperatorRegistry()
    tasks: list[asyncio.Task[None]] = []
    runners: list[web.AppRunner] = []

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # no kopf Events about Pods or Nodes
        # No CRD or namespace discovery: every resource is named in full, and the RBAC can
        # then leave out customresourcedefinitions.
        settings.scanning.disabled = True
        settings.watching.field_selectors["", "v1", "pods"] = LIVE_PODS_SELECTOR
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.request_timeout = 60

        async def main() -> None:
            if elector is not None:
                await elector.acquire()
                keeper = asyncio.get_running_loop().create_task(elector.keep(on_lost))
                tasks.append(keeper)
            await prime()
            scheduler.wake()
            await scheduler.run()

        def on_lost() -> None:
            # Fence first (no bind may start once another replica can lead), then exit
            # so the Deployment restarts this one as a standby.
            tasks[0].cancel()
            asyncio.get_running_loop().create_task(scheduler.stop())
            os.kill(os.getpid(), signal.SIGTERM)

        tasks.append(asyncio.get_running_loop().create_task(main()))
        if metrics_port:
            metrics = scheduler.metrics
            metrics.gauge("gangsched_leader", "1 on the replica that schedules.", lambda: float(is_leading()))
            metrics.gauge("gangsched_nodes", "Nodes in the cache.", lambda: float(len(cache.nodes)))
            metrics.gauge(
                "gangsched_pods",
                "Unfinished pods (and finished group members) in the cache.",
                lambda: float(len(cache.pods)),
            )
            metrics.gauge(
                "gangsched_pod_groups", "PodGroups in the cache.", lambda: float(len(cache.pod_groups))
            )
            metrics.gauge(
                "gangsched_assumed_pods",
                "Bound by us, not yet seen bound by the watch.",
                lambda: float(len(cache.assumed)),
            )
            runners.append(await serve(metrics, port=metrics_port))

    def is_leading() -> bool:
        return elector is None or elector.leading

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        # Never raise here: kopf would retry the cleanup in 60 s and the process would hang.
        try:
            await shutdown()
        except Exception:
            log.exception("error while stopping; exiting anyway")

    async def shutdown() -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await scheduler.stop()
        for runner in runners:
            await runner.cleanup()
        if elector is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(elector.release(), timeout=5)

    @kopf.on.probe(id="scheduler", registry=registry)
    async def probe(**_: Any) -> dict[str, Any]:
        age = scheduler.clock() - scheduler.heartbeat
        if tasks and tasks[0].done():
            raise kopf.PermanentError("the scheduling loop has stopped")
        leading = is_leading()
        return {
            "leading": leading,
            "cycles": scheduler.cycles,
            "loop_age_seconds": round(age, 1) if leading else None,
            "pods": len(cache.pods),
        }

    @kopf.on.event("", "v1", "pods", registry=registry)
    async def on_pod(event: kopf.RawEvent, **_: Any) -> None:
        body = event["object"]
        if bound_event_delay_seconds and (body.get("spec") or {}).get("nodeName"):
            await asyncio.sleep(bound_event_delay_seconds)
        if event["type"] == "DELETED":
            await scheduler.pod_gone(body)  # gone, or finished (it left the selector)
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

    return registry
