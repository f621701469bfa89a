"""Live reads: when the watch cannot be trusted or cannot tell, ask the apiserver directly.

- priming: finished members of our groups, which no watch carries, before the first decision;
- a group whose writes the watch has not echoed in time is read live (KEP-5647 fallback);
- a pod that leaves the watch of unfinished pods is read to tell "finished" from "deleted";
- finished members of our groups, which the watch does not carry, are re-listed now and then;
- after a Binding conflict the pod is re-read: believe the server, not the cache.

Everything read is applied to the cache here, so other modules never feed it by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from gangsched.cluster.cache import ClusterCache, Key
from gangsched.cluster.devices import RESOURCE_CLAIMS, claim_path
from gangsched.cluster.kinds import POD
from gangsched.model import POD_GROUP_LABEL, TERMINAL_PHASES, ModelError
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

    async def pod_gone(self, key: Key) -> None:
        """The watch of unfinished pods no longer shows the pod: it is gone, or it finished.

        For members of our groups the difference matters (Succeeded/Failed counts, phase), so
        they are read live and kept when finished; everything else simply leaves the cache
        (it holds no capacity)."""
        live = await self._finished_member(key)
        if live is not None:
            self.cache.apply(POD.name, "MODIFIED", live)
        else:
            self.cache.remove(POD.name, key)

    async def finished_of(self, keys: Iterable[Key]) -> list[Mapping[str, Any]]:
        """Of the pods held under `keys` that a LIST of unfinished pods no longer showed, the
        members of our groups that finished (read live), to be kept."""
        found = [await self._finished_member(key) for key in keys]
        return [body for body in found if body is not None]

    async def _finished_member(self, key: Key) -> Mapping[str, Any] | None:
        pod = self.cache.pods.get(key)
        if pod is None or pod.scheduler_name != self.scheduler_name or pod.pod_group is None:
            return None
        try:
            live = await self.read_pod(*key)
        except Exception as exc:
            log.warning("could not read pod %s/%s: %s", key[0], key[1], exc)
            return None
        if (
            live is not None
            and (live.get("metadata") or {}).get("uid") == pod.uid
            and (live.get("status") or {}).get("phase") in TERMINAL_PHASES
        ):
            return live
        return None

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
