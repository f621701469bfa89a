"""The claims of extended resources backed by DRA (KEP-5004), as kube-scheduler makes them.

The engine (`engine.dra.extended`) placed such a pod with a provisional claim
`<pod>-extended-resources`. Before the claim writes, `prepare` creates the real claim
(generateName `<pod>-extended-resources-`, owned by the pod, annotated
`resource.kubernetes.io/extended-resource-claim: "true"`, one ExactCount request per container
and resource) and points the plan at it; after them, `record` writes
`pod.status.extendedResourceClaimStatus` (the claim and which request serves which
container's resource). When the gang is undone, `discard` deletes the claims it created
(their allocation and our finalizer are already gone by then).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Final

from gangsched.binder import Binder
from gangsched.cluster import ClusterCache, Key
from gangsched.cluster.devices import RESOURCE_CLAIMS
from gangsched.engine.dra.extended import EXTENDED_ENTRY, claim_requests, resource_classes
from gangsched.loop.pipeline import GangPlan
from gangsched.model import Pod
from gangsched.model.dra import DeviceClass
from gangsched.model.pod import ExtendedRequest, PodClaim
from gangsched.session import ApiError

log = logging.getLogger(__name__)

EXTENDED_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"


@dataclasses.dataclass(slots=True)
class _Made:
    pod: Pod
    claim: Key
    mappings: list[dict[str, str]]


def _delegated(pod: Pod, classes: dict[str, DeviceClass]) -> dict[str, DeviceClass]:
    """The pod's extended resources the engine served with devices (gone from its requests)."""
    return {
        r.resource: classes[r.resource]
        for r in pod.extended
        if r.resource in classes and r.resource not in pod.requests
    }


def claim_body(pod: Pod, requests: list[tuple[ExtendedRequest, str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{pod.name}-{EXTENDED_ENTRY}-",
            "namespace": pod.namespace,
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.name,
                    "uid": pod.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": name,
                        "exactly": {
                            "deviceClassName": class_name,
                            "allocationMode": "ExactCount",
                            "count": r.count,
                        },
                    }
                    for r, name, class_name in requests
                ]
            }
        },
    }


class ExtendedClaims:
    def __init__(self, *, cache: ClusterCache, binder: Binder) -> None:
        self.cache = cache
        self.binder = binder
        self._made: dict[Key, list[_Made]] = {}

    async def prepare(self, plan: GangPlan) -> str | None:
        """Create the claims of placed pods' provisional extended-resource claims; the plan's
        pods and allocations then name the real claims."""
        classes = resource_classes(self.cache.devices.classes)
        made = self._made.setdefault(plan.key, [])
        allocations = plan.decision.allocations
        for i, (pod, node) in enumerate(plan.assignments):
            entry = next((c for c in pod.claims if c.name == EXTENDED_ENTRY), None)
            if entry is None or entry.claim_name is None:
                continue
            provisional = (pod.namespace, entry.claim_name)
            if provisional in self.cache.devices.claims:
                continue  # the claim its status records
            requests = claim_requests(pod, _delegated(pod, classes))
            leftover = self._leftover(pod)
            if leftover is not None:
                real = leftover  # made by an earlier attempt (its answer lost, or a crash after it)
            else:
                try:
                    created = await self.binder.create_claim(claim_body(pod, requests))
                except ApiError as exc:
                    return f"pod {pod.name}: could not create its extended-resource claim: {exc.message}"
                self.cache.apply(RESOURCE_CLAIMS, "ADDED", created)
                real = (pod.namespace, str(created["metadata"]["name"]))
            if provisional in allocations:
                allocations[real] = allocations.pop(provisional)
                self.cache.forget_allocations([provisional])
                self.cache.assume_allocations({real: allocations[real]})
            claims = tuple(
                c if c.name != EXTENDED_ENTRY else PodClaim(EXTENDED_ENTRY, claim_name=real[1])
                for c in pod.claims
            )
            updated = dataclasses.replace(pod, claims=claims)
            plan.assignments[i] = (updated, node)
            mappings = [
                {"containerName": r.container, "resourceName": r.resource, "requestName": name}
                for r, name, _ in requests
            ]
            made.append(_Made(updated, real, mappings))
        return None

    def _leftover(self, pod: Pod) -> Key | None:
        """An unallocated extended-resource claim this pod already owns, to use rather than
        create another one."""
        prefix = f"{pod.name}-{EXTENDED_ENTRY}-"
        for key, claim in self.cache.devices.claims.items():
            if (
                key[0] == pod.namespace
                and key[1].startswith(prefix)
                and pod.uid in claim.owner_uids
                and claim.annotations.get(EXTENDED_CLAIM_ANNOTATION) == "true"
                and claim.allocation is None
                and not claim.deleting
            ):
                return key
        return None

    async def record(self, plan: GangPlan) -> str | None:
        """pod.status.extendedResourceClaimStatus for each claim made, before any Binding."""
        for item in self._made.get(plan.key, []):
            status = {"resourceClaimName": item.claim[1], "requestMappings": item.mappings}
            try:
                await self.binder.patch_pod_status(item.pod, {"extendedResourceClaimStatus": status})
            except ApiError as exc:
                return f"pod {item.pod.name}: could not record its extended-resource claim: {exc.message}"
        return None

    async def discard(self, plan: GangPlan) -> None:
        """Delete the claims `prepare` made for an undone gang (best effort)."""
        for item in self._made.pop(plan.key, []):
            try:
                await self.binder.delete_claim(*item.claim)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("could not delete ResourceClaim %s/%s: %s", *item.claim, exc.message)

    def done(self, plan: GangPlan) -> None:
        self._made.pop(plan.key, None)
