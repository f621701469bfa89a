"""Writes: Bindings, PodGroup status, Events, rollback deletions.

Requests are built by pure functions (`binding_body`, `event_body`, ...) and sent by
`Binder` through the blocking `kubernetes` client on a bounded thread pool, so the event
loop never blocks. Transient failures (429, 5xx, timeouts) are retried with tenacity,
honouring Retry-After; conflicts are reported, never retried blindly.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from gangsched._rawapi import MERGE_PATCH, list_items, request_json
from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, TERMINAL_PHASES, VERSION, Pod

log = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
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


def binding_body(pod: Pod, node: str) -> dict[str, Any]:
    """A Binding with the pod's UID as precondition: a recreated pod of the same name is not bound."""
    meta: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace}
    if pod.uid:
        meta["uid"] = pod.uid
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
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def pod_ref(pod: Pod) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}


def pod_group_ref(namespace: str, name: str, uid: str) -> dict[str, str]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "namespace": namespace,
        "name": name,
        "uid": uid,
    }


# --------------------------------------------------------------------------- retries


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, urllib3.exceptions.HTTPError | TimeoutError | ConnectionError)


_backoff = wait_exponential_jitter(multiplier=0.2, max=5.0)


def _retry_after(exc: BaseException | None) -> float:
    """The server's Retry-After (capped at 30 s), or 0."""
    if isinstance(exc, ApiException) and exc.headers:
        retry_after = exc.headers.get("Retry-After")
        if retry_after and retry_after.isdigit():
            return min(float(retry_after), 30.0)
    return 0.0


def _wait(state: RetryCallState) -> float:
    """Exponential backoff, or the server's Retry-After when it asks for longer."""
    outcome = state.outcome
    return max(float(_backoff(state)), _retry_after(outcome.exception() if outcome is not None else None))


class Binder:
    """Sends writes with bounded concurrency; every method is safe to call from the event loop."""

    def __init__(
        self,
        *,
        api: client.ApiClient,
        concurrency: int = 32,
        attempts: int = 5,
        bind_delay_seconds: float = 0.0,
        instance: str | None = None,
    ) -> None:
        self.api = api
        # Fault injection for tests (GANGSCHED_FAULT_BIND_DELAY_SECONDS): slow binds down so a
        # test can act while a gang is half bound.
        self.bind_delay_seconds = bind_delay_seconds
        self.concurrency = concurrency
        self.attempts = attempts
        # Who wrote an Event (its reportingInstance): the pod name in a Deployment.
        self.instance = instance or f"{COMPONENT}-{uuid.uuid4().hex[:8]}"
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="gangsched-api")
        self._slots = asyncio.Semaphore(concurrency)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _call(self, method: str, path: str, *, delay: float = 0.0, **kwargs: Any) -> Any:
        """One request with retries on transient failures; raises ApiException otherwise."""
        loop = asyncio.get_running_loop()
        async with self._slots:
            if delay:
                await asyncio.sleep(delay)
            send = partial(request_json, self.api, method, path, **kwargs)
            try:  # the common case, without building a retry machine per request
                return await loop.run_in_executor(self._executor, send)
            except Exception as exc:
                if not _transient(exc) or self.attempts <= 1:
                    raise
                first = exc
            log.debug("%s %s: %s; retrying", method, path, first)
            await asyncio.sleep(max(0.2, _retry_after(first)))
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(_transient),
                stop=stop_after_attempt(self.attempts - 1),
                wait=_wait,
                reraise=True,
            ):
                with attempt:
                    return await loop.run_in_executor(self._executor, send)
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ bindings

    async def bind(self, pod: Pod, node: str) -> BindResult:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        try:
            await self._call("POST", path, body=binding_body(pod, node), delay=self.bind_delay_seconds)
        except ApiException as exc:
            if exc.status == 409:
                log.warning("binding %s/%s: conflict: %s", pod.namespace, pod.name, _reason(exc))
                return BindResult(pod, node, BindOutcome.CONFLICT, _reason(exc))
            if exc.status == 404:
                return BindResult(pod, node, BindOutcome.GONE, _reason(exc))
            return BindResult(pod, node, BindOutcome.FAILED, _reason(exc))
        except Exception as exc:  # transport errors after the retries
            return BindResult(pod, node, BindOutcome.FAILED, f"{type(exc).__name__}: {exc}")
        return BindResult(pod, node, BindOutcome.BOUND)

    async def bind_all(self, assignments: Sequence[tuple[Pod, str]]) -> list[BindResult]:
        return list(await asyncio.gather(*(self.bind(pod, node) for pod, node in assignments)))

    async def read_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A live (quorum) read, for when the cache cannot be trusted."""
        try:
            result: Mapping[str, Any] = await self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return result

    async def finished_members(self, scheduler_name: str) -> list[Mapping[str, Any]]:
        """Finished pods of our PodGroups (the pod watch does not carry finished pods)."""
        loop = asyncio.get_running_loop()
        out: list[Mapping[str, Any]] = []
        for phase in sorted(TERMINAL_PHASES):
            query: dict[str, str | int | bool] = {
                "fieldSelector": f"spec.schedulerName={scheduler_name},status.phase={phase}",
                "labelSelector": POD_GROUP_LABEL,
            }
            async with self._slots:
                out += await loop.run_in_executor(
                    self._executor, partial(list_items, self.api, "/api/v1/pods", query=query)
                )
        return out

    async def delete_pod(self, pod: Pod, *, reason: str) -> bool:
        """Delete a pod (its controller recreates it), only if it is still the same pod."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": pod.uid}}
        try:
            await self._call("DELETE", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", body=body)
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            log.warning("could not delete pod %s/%s (%s): %s", pod.namespace, pod.name, reason, _reason(exc))
            return False
        return True

    # ------------------------------------------------------------------ status and events

    async def patch_pod_group_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> str | None:
        """Merge-patch the status subresource; returns the new resourceVersion (None if the group is gone)."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"
        try:
            result = await self._call("PATCH", path, body={"status": dict(status)}, content_type=MERGE_PATCH)
        except ApiException as exc:
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
            await self._call("POST", f"/api/v1/namespaces/{involved['namespace']}/events", body=body)
        except Exception as exc:
            log.warning(
                "could not post event %s on %s/%s: %s", reason, involved["namespace"], involved["name"], exc
            )


def _reason(exc: ApiException) -> str:
    body = exc.body
    if isinstance(body, bytes | str):
        import json

        try:
            return str(json.loads(body).get("message") or exc.reason)
        except (ValueError, AttributeError):
            pass
    return f"{exc.status} {exc.reason}"
