"""Live reads: when the watch cannot be trusted or cannot tell, ask the apiserver directly.

- priming: finished members of our groups, which no watch carries, before the first decision;
- a group whose writes the watch has not echoed in time is read live (KEP-5647 fallback);
- a member of ours that leaves the watch of unfinished pods is read, in the background, to tell
  "finished" from "deleted" (`pod_left`: the watch handler never waits for it);
- finished members of our groups, which the watch does not carry, are re-listed now and then;
- after a Binding conflict the pod is re-read: believe the server, not the cache.

Everything read is applied to the cache here, so other modules never feed it by hand.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gangsched.cluster.cache import ClusterCache, Key
from gangsched.cluster.devices import RESOURCE_CLAIMS, claim_path
from gangsched.cluster.kinds import POD
from gangsched.model import POD_GROUP_LABEL, TERMINAL_PHASES, ModelError, Pod
from gangsched.model.pod import pod_group_of
from gangsched.session import ApiError
from gangsched.transport import Transport

log = logging.getLogger(__name__)


def _is_member(body: Mapping[str, Any]) -> bool:
    """Does the pod name a PodGroup (gangsched's label or spec.schedulingGroup)?"""
    try:
        group, _ = pod_group_of(body.get("spec") or {}, (body.get("metadata") or {}).get("labels") or {})
    except ModelError:
        return False
    return group is not None


class LiveReader:
    """Reads through `transport` and applies what it reads to `cache`."""

    def __init__(self, *, cache: ClusterCache, transport: Transport, scheduler_name: str) -> None:
        self.cache = cache
        self.transport = transport
        self.scheduler_name = scheduler_name
        # Members that left the watch of unfinished pods, each read in a task of its own, and
        # the group each is a member of (decided again only once the read has answered).
        self._leaving: dict[Key, asyncio.Task[None]] = {}
        self._leaving_from: dict[Key, Key] = {}
        # Called when such a read has answered (the loop decides their groups again).
        self.on_settled: Callable[[], None] | None = None

    async def prime_finished(self) -> None:
        """Finished members of our groups, which no watch carries, before the first decision."""
        for item in await self.finished_members():
            self.cache.apply(POD.name, "LISTED", item)
        cache = self.cache
        log.info(
            "cache primed: %d nodes, %d pods, %d PodGroups",
            len(cache.nodes),
            len(cache.pods),
            len(cache.pod_groups),
        )

    async def read_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A live (quorum) read, for when the cache cannot be trusted."""
        try:
            result: Mapping[str, Any] = await self.transport.call(
                "GET", f"/api/v1/namespaces/{namespace}/pods/{name}"
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return result

    async def read_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A ResourceClaim read live (None when it does not exist)."""
        try:
            result: Mapping[str, Any] = await self.transport.call("GET", claim_path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return result

    async def read_claim_template(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A ResourceClaimTemplate (None when it does not exist); templates are not watched."""
        path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates/{name}"
        try:
            result: Mapping[str, Any] = await self.transport.call("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return result

    async def finished_members(self) -> list[Mapping[str, Any]]:
        """Finished pods of our PodGroups (the pod watch does not carry finished pods).

        Members of native PodGroups name theirs in spec.schedulingGroup, which no selector
        reaches: where that API is served, our finished pods are listed without the label
        selector and the members kept."""
        out: list[Mapping[str, Any]] = []
        for phase in sorted(TERMINAL_PHASES):
            query: dict[str, str] = {
                "fieldSelector": f"spec.schedulerName={self.scheduler_name},status.phase={phase}"
            }
            if not self.cache.native_pod_groups:
                query["labelSelector"] = POD_GROUP_LABEL
            listed = await self.transport.list("/api/v1/pods", query=query)
            out += [item for item in listed.items if _is_member(item)]
        return out

    async def refresh_pod(self, key: Key) -> Mapping[str, Any] | None:
        """Replace what the cache holds for one pod with what the server says now (returned;
        None: the pod does not exist)."""
        body = await self.read_pod(*key)
        if body is None:
            self.cache.remove(POD.name, key)
        else:
            self.cache.apply(POD.name, "MODIFIED", body)
        return body

    async def refresh_claim(self, key: Key) -> None:
        """Replace what the cache holds for one ResourceClaim with what the server says now."""
        body = await self.read_claim(*key)
        if body is None:
            self.cache.remove(RESOURCE_CLAIMS, key)
        else:
            self.cache.apply(RESOURCE_CLAIMS, "MODIFIED", body)

    async def catch_up(self, group: Key) -> None:
        """The watch is late or versions are not comparable: read the pods we bound directly."""
        for pod_key in self.cache.pending_binds(group):
            body = await self.read_pod(*pod_key)
            if body is None:
                self.cache.remove(POD.name, pod_key)
            elif (body.get("spec") or {}).get("nodeName"):
                self.cache.apply(POD.name, "MODIFIED", body)
        for claim_key in self.cache.pending_claims(group):
            claim = await self.read_claim(*claim_key)
            if claim is None:
                self.cache.remove(RESOURCE_CLAIMS, claim_key)
            else:
                self.cache.apply(RESOURCE_CLAIMS, "MODIFIED", claim)
        self.cache.status_write_observed(group)  # the status we wrote is ours; the rest comes from the watch

    def may_have_finished(self, pod: Pod) -> bool:
        """Is `pod` a member of our groups whose end matters (Succeeded/Failed counts, phase)
        when it leaves the watch of unfinished pods? Only a bound pod runs, so only a bound one
        finishes; anything else simply leaves the cache."""
        return (
            pod.scheduler_name == self.scheduler_name
            and pod.pod_group is not None
            and bool(pod.node_name)
            and not pod.terminal
        )

    def pod_left(self, key: Key) -> None:
        """The watch of unfinished pods no longer shows member `key`: it finished, or it is gone.
        The cache keeps it as it was until a live read, in the background, says which (then
        the finished pod is kept, or the pod removed): no watch handler waits on the network."""
        pod = self.cache.pods.get(key)
        if pod is None or key in self._leaving:
            return
        task = asyncio.get_running_loop().create_task(
            self._settle_left(key, pod.uid), name=f"read pod {key[0]}/{key[1]} that left the watch"
        )
        self._leaving[key] = task
        if pod.pod_group is not None:
            self._leaving_from[key] = (pod.namespace, pod.pod_group)
        task.add_done_callback(lambda _: self._settled(key))

    def _settled(self, key: Key) -> None:
        self._leaving.pop(key, None)
        self._leaving_from.pop(key, None)
        if self.on_settled is not None:
            self.on_settled()

    def leaving_groups(self) -> set[Key]:
        """The groups with a member whose end a live read has not told yet: not decided until
        it has (kept as it was, it may be gone)."""
        return set(self._leaving_from.values())

    async def _settle_left(self, key: Key, uid: str) -> None:
        try:
            live: Mapping[str, Any] | None = await self.transport.call(
                "GET", f"/api/v1/namespaces/{key[0]}/pods/{key[1]}", background=True
            )
        except ApiError as exc:
            if exc.status != 404:
                log.warning("could not read pod %s/%s that left the watch: %s", *key, exc)
                return  # kept as it was; the next LIST or finished-pods resync tells
            live = None
        except Exception as exc:
            log.warning("could not read pod %s/%s that left the watch: %s", *key, exc)
            return
        held = self.cache.pods.get(key)
        if held is None or held.uid != uid:
            return  # gone meanwhile, or another pod of that name now: the watch has told
        if (
            live is not None
            and (live.get("metadata") or {}).get("uid") == uid
            and (live.get("status") or {}).get("phase") in TERMINAL_PHASES
        ):
            self.cache.apply(POD.name, "MODIFIED", live)
        else:
            self.cache.remove(POD.name, key)

    @property
    def leaving(self) -> int:
        """Members that left the watch whose live read has not answered yet."""
        return len(self._leaving)

    async def close(self) -> None:
        tasks = list(self._leaving.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def resync_finished(self) -> None:
        """Finished members leave the watch; re-list them now and then to see deletions."""
        try:
            items = await self.finished_members()
        except Exception as exc:
            log.warning("could not list finished pods: %s", exc)
            return
        seen = set()
        for item in items:
            meta = item.get("metadata") or {}
            seen.add((str(meta.get("namespace")), str(meta.get("name"))))
            self.cache.apply(POD.name, "LISTED", item)
        for key, pod in list(self.cache.pods.items()):
            if pod.terminal and pod.scheduler_name == self.scheduler_name and key not in seen:
                self.cache.remove(POD.name, key)
