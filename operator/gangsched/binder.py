"""Writes, and only writes: Bindings, PodGroup status, Events, rollback deletions, and an
automatic gang's PodGroup and pod labels.

Requests are built by pure functions (`binding_body`, `event_body`, ...) and sent through
the shared `Transport` (bounded, retried on transient failures). Conflicts are reported as
outcomes, never retried blindly. Reads live next to the cache (`cluster.live`); decisions in
the loop: the binder neither reads nor decides.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gangsched.cluster.devices import claim_path
from gangsched.model import (
    BOUND_FOR_ANNOTATION,
    GROUP,
    PLURAL,
    VERSION,
    OwnerRef,
    Pod,
    PodGroup,
    PodGroupApi,
)
from gangsched.model.text import printable
from gangsched.session import MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiError
from gangsched.transport import FencedError, Transport

log = logging.getLogger(__name__)

COMPONENT = "gangsched"


class BindOutcome(enum.Enum):
    BOUND = "Bound"
    CONFLICT = "Conflict"  # someone (maybe us, earlier) bound it, or it is being deleted
    GONE = "Gone"  # the pod or its UID no longer exists
    FAILED = "Failed"  # retries exhausted or a non-retryable error


@dataclass(slots=True)
class BindResult:
    pod: Pod
    node: str
    outcome: BindOutcome
    detail: str = ""


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- request bodies


def binding_body(pod: Pod, node: str, *, group_uid: str = "") -> dict[str, Any]:
    """A Binding with the pod's UID as precondition: a recreated pod of the same name is not bound.

    The apiserver copies a Binding's annotations onto the pod: `group_uid` marks the pod as
    bound by us for that incarnation of its PodGroup, the only pods a rollback may delete.
    """
    meta: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace}
    if pod.uid:
        meta["uid"] = pod.uid
    if group_uid:
        meta["annotations"] = {BOUND_FOR_ANNOTATION: group_uid}
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def event_body(
    *,
    involved: Mapping[str, str],
    event_type: str,
    reason: str,
    message: str,
    instance: str,
) -> dict[str, Any]:
    stamp = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{involved['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": involved["namespace"],
        },
        "involvedObject": dict(involved),
        "type": event_type,
        "reason": reason,
        "message": printable(message)[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def pod_ref(pod: Pod) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}


def pod_group_ref(
    namespace: str, name: str, uid: str, api: PodGroupApi = PodGroupApi.GANGSCHED
) -> dict[str, str]:
    return {
        "apiVersion": api.api_version,
        "kind": "PodGroup",
        "namespace": namespace,
        "name": name,
        "uid": uid,
    }


def group_ref(group: PodGroup) -> dict[str, str]:
    """An Event's involvedObject for `group`, in its own API."""
    return pod_group_ref(group.namespace, group.name, group.uid, group.api)


def owner_event_ref(owner: OwnerRef, namespace: str) -> dict[str, str]:
    """An Event's involvedObject for a workload owner (an automatic gang's)."""
    return {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "namespace": namespace,
        "name": owner.name,
        "uid": owner.uid,
    }


def pod_group_path(namespace: str, name: str = "") -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    return f"{path}/{name}" if name else path


def pod_label_patch(pod: Pod, labels: Mapping[str, str]) -> dict[str, Any]:
    """A merge patch adding `labels`, with the pod's UID as precondition (a pod recreated
    under the same name is not labelled)."""
    return {"metadata": {"uid": pod.uid, "labels": dict(labels)}}


def native_status_path(namespace: str, name: str) -> str:
    api = PodGroupApi.NATIVE
    return f"/apis/{api.api_version}/namespaces/{namespace}/{PLURAL}/{name}/status"


class Binder:
    """Sends writes through `transport`; every method is safe to call from the event loop."""

    def __init__(
        self, *, transport: Transport, bind_delay_seconds: float = 0.0, instance: str | None = None
    ) -> None:
        self.transport = transport
        # Fault injection for tests (`Faults.bind_delay_seconds`): slow binds down so a test
        # can act while a gang is half bound.
        self.bind_delay_seconds = bind_delay_seconds
        # Who wrote an Event (its reportingInstance): the pod name in a Deployment.
        self.instance = instance or f"{COMPONENT}-{uuid.uuid4().hex[:8]}"
        self._fenced_logged = -1e9  # monotonic time of the last "refused by the fence" line

    # ------------------------------------------------------------------ bindings

    async def bind(self, pod: Pod, node: str, *, group_uid: str = "") -> BindResult:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        body = binding_body(pod, node, group_uid=group_uid)
        try:
            await self.transport.call("POST", path, body=body, delay=self.bind_delay_seconds, answer=False)
        except ApiError as exc:
            if exc.status == 409:
                log.warning("binding %s/%s: conflict: %s", pod.namespace, pod.name, exc.message)
                return BindResult(pod, node, BindOutcome.CONFLICT, exc.message)
            if exc.status == 404:
                return BindResult(pod, node, BindOutcome.GONE, exc.message)
            return BindResult(pod, node, BindOutcome.FAILED, exc.message)
        except Exception as exc:  # transport errors after the retries
            return BindResult(pod, node, BindOutcome.FAILED, f"{type(exc).__name__}: {exc}")
        return BindResult(pod, node, BindOutcome.BOUND)

    async def bind_all(
        self, assignments: Sequence[tuple[Pod, str]], *, group_uid: str = ""
    ) -> list[BindResult]:
        binds = (self.bind(pod, node, group_uid=group_uid) for pod, node in assignments)
        return list(await asyncio.gather(*binds))

    async def delete_pod(self, pod: Pod, *, reason: str) -> bool:
        """Delete a pod (its controller recreates it), only if it is still the same pod."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": pod.uid}}
        try:
            await self.transport.call(
                "DELETE", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", body=body
            )
        except ApiError as exc:
            if exc.status in (404, 409):
                return False
            log.warning("could not delete pod %s/%s (%s): %s", pod.namespace, pod.name, reason, exc.message)
            return False
        return True

    async def _patch_condition(
        self, pod: Pod, kind: str, status: str, reason: str, message: str, *, background: bool = False
    ) -> None:
        """One pod condition, by strategic merge patch on pods/status (conditions merge by
        type). The UID in the patch makes it apply to this pod only, not a recreated one."""
        condition = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": printable(message)[:4096],
            "lastTransitionTime": now_rfc3339(),
        }
        body = {"metadata": {"uid": pod.uid}, "status": {"conditions": [condition]}}
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        await self.transport.call(
            "PATCH", path, body=body, content_type=STRATEGIC_MERGE_PATCH, background=background
        )

    async def mark_unschedulable(self, pod: Pod, message: str) -> None:
        """PodScheduled=False/Unschedulable on a pending pod, as kube-scheduler sets it, so that
        cluster-autoscaler and Karpenter see the pods of a gang that does not fit. Best effort."""
        try:
            await self._patch_condition(
                pod, "PodScheduled", "False", "Unschedulable", message, background=True
            )
        except Exception as exc:
            self._best_effort_failed(f"could not mark pod {pod.namespace}/{pod.name} unschedulable", exc)

    async def mark_disruption_target(self, pod: Pod, message: str) -> bool:
        """DisruptionTarget=True, reason PreemptionByScheduler, on a victim before its
        deletion (as kube-scheduler), so its controller and the job know why it ends."""
        try:
            await self._patch_condition(pod, "DisruptionTarget", "True", "PreemptionByScheduler", message)
        except ApiError as exc:
            if exc.status in (404, 409):
                return False
            log.warning("could not mark pod %s/%s: %s", pod.namespace, pod.name, exc.message)
        return True

    # ------------------------------------------------------------------ status and events

    async def patch_pod_group_status(
        self, namespace: str, name: str, status: Mapping[str, Any], api: PodGroupApi = PodGroupApi.GANGSCHED
    ) -> str | None:
        """Patch the status subresource; returns the new resourceVersion (None if the group is gone).

        Ours: a merge patch of our whole status. Native: a strategic merge patch of the
        conditions given, as kube-scheduler sends it (`PatchPodGroupStatus`): conditions merge
        by type, so the others (and resourceClaimStatuses, the resourceclaim controller's)
        are left alone."""
        if api is PodGroupApi.NATIVE:
            path, content_type = native_status_path(namespace, name), STRATEGIC_MERGE_PATCH
        else:
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"
            content_type = MERGE_PATCH
        try:
            result = await self.transport.call(
                "PATCH", path, body={"status": dict(status)}, content_type=content_type, background=True
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return str(((result or {}).get("metadata") or {}).get("resourceVersion") or "")

    async def event(self, *, involved: Mapping[str, str], event_type: str, reason: str, message: str) -> None:
        """Post an Event; best effort (an Event lost must never stop scheduling)."""
        body = event_body(
            involved=involved, event_type=event_type, reason=reason, message=message, instance=self.instance
        )
        try:
            await self.transport.call(
                "POST",
                f"/api/v1/namespaces/{involved['namespace']}/events",
                body=body,
                background=True,
                answer=False,
            )
        except Exception as exc:
            self._best_effort_failed(
                f"could not post event {reason} on {involved['namespace']}/{involved['name']}", exc
            )

    def _best_effort_failed(self, what: str, exc: BaseException) -> None:
        """One line per failed best-effort write (an API error's Status message); writes
        refused by the fence, which come in thousands when the Lease goes stale with a
        backlog queued, one line per 10 s."""
        if isinstance(exc, FencedError):
            now = time.monotonic()
            if now - self._fenced_logged >= 10.0:
                self._fenced_logged = now
                log.warning("%s (and any other best-effort write for 10 s): %s", what, exc)
            return
        detail = exc.message if isinstance(exc, ApiError) else f"{type(exc).__name__}: {exc}"
        log.warning("%s: %s", what, detail)

    # ------------------------------------------------------------------ ResourceClaims

    async def patch_claim(
        self,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        status: bool = False,
        strategic: bool = False,
    ) -> dict[str, Any]:
        """One write to a claim (its /status when `status`): a merge patch, with the
        resourceVersion in `patch` as precondition (an Update, as kube-scheduler sends, with
        a 409 when the claim changed), or a strategic merge patch. Returns the claim;
        raises ApiError (409, 404, 422 ...) for the caller to handle."""
        path = claim_path(namespace, name, "status" if status else "")
        content_type = STRATEGIC_MERGE_PATCH if strategic else MERGE_PATCH
        result: dict[str, Any] = await self.transport.call(
            "PATCH", path, body=dict(patch), content_type=content_type
        )
        return result

    async def create_claim(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ResourceClaim (a PodGroup's from its template, a pod's for extended
        resources); returns it; raises ApiError."""
        namespace = body["metadata"]["namespace"]
        created: dict[str, Any] = await self.transport.call(
            "POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", body=dict(body)
        )
        return created

    async def patch_pod_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        """Merge-patch a pod's status (its UID as precondition); raises ApiError."""
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        body = {"metadata": {"uid": pod.uid}, "status": dict(status)}
        await self.transport.call("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def delete_claim(self, namespace: str, name: str) -> None:
        """Delete a ResourceClaim; raises ApiError (404 included)."""
        await self.transport.call("DELETE", claim_path(namespace, name))

    # ------------------------------------------------------------------ automatic gangs

    async def create_pod_group(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a PodGroup (an automatic gang's, `model.owners.pod_group_manifest`);
        returns it; raises ApiError (409 when one of that name exists)."""
        created: dict[str, Any] = await self.transport.call(
            "POST", pod_group_path(body["metadata"]["namespace"]), body=dict(body)
        )
        return created

    async def delete_pod_group(self, namespace: str, name: str, uid: str) -> None:
        """Delete that incarnation of a PodGroup (its UID as precondition); raises ApiError."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
        await self.transport.call("DELETE", pod_group_path(namespace, name), body=body)

    async def label_pod(
        self, pod: Pod, labels: Mapping[str, str], *, background: bool = False
    ) -> dict[str, Any]:
        """Add `labels` to a pod (merge patch, its UID as precondition); returns the pod;
        raises ApiError (404 gone, 409 another pod of that name). `background`: in the
        transport's lane that never holds up a Binding."""
        labelled: dict[str, Any] = await self.transport.call(
            "PATCH",
            f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
            body=pod_label_patch(pod, labels),
            content_type=MERGE_PATCH,
            background=background,
        )
        return labelled


def claim_finalizer_patch(rv: str, finalizers: Sequence[str]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv, "finalizers": list(finalizers)}}


def claim_status_patch(
    rv: str, *, allocation: Mapping[str, Any] | None, reserved_for: Sequence[Mapping[str, str]]
) -> dict[str, Any]:
    """status.allocation (when allocating) and the whole reservedFor list, in one write."""
    status: dict[str, Any] = {"reservedFor": [dict(r) for r in reserved_for]}
    if allocation is not None:
        status["allocation"] = dict(allocation)
    return {"metadata": {"resourceVersion": rv}, "status": status}


def claim_unreserve_patch(claim_uid: str, consumer_uids: Sequence[str]) -> dict[str, Any]:
    """Upstream's Unreserve: a strategic merge patch deleting reservedFor entries by uid (its
    patchMergeKey); the claim's UID makes it apply to this claim only."""
    return {
        "metadata": {"uid": claim_uid},
        "status": {"reservedFor": [{"$patch": "delete", "uid": uid} for uid in consumer_uids]},
    }


def claim_deallocate_patch(rv: str) -> dict[str, Any]:
    """Clear allocation and reservedFor (the apiserver drops status.devices with them)."""
    return {"metadata": {"resourceVersion": rv}, "status": {"allocation": None, "reservedFor": None}}
