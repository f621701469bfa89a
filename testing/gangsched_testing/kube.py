"""Small API helpers for tests against a real apiserver: create, list, wait, start an operator.

Shared by the integration tests and the chaos suite; plain JSON through `rawapi`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client

from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, VERSION
from gangsched_testing import devcluster
from gangsched_testing.rawapi import request_json

T = TypeVar("T")

free_port = devcluster.free_port
Operator = devcluster.OperatorProcess


def start_operator(
    cp: devcluster.ControlPlane,
    log_dir: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    kubeconfig: Path | None = None,
    wait: bool = True,
    metrics: bool = False,
) -> Operator:
    op = Operator(
        kubeconfig=kubeconfig or cp.kubeconfig_path,
        log=log_dir / "operator.log",
        args=args,
        env=env,
        metrics=metrics,
    )
    op.log = log_dir / f"operator-{op.port}.log"
    op.start()
    if wait:
        op.wait_ready()
    return op


def ensure_crd(api: client.ApiClient) -> None:
    devcluster.apply_crd(api)


def wait_until(
    check: Callable[[], T], *, timeout: float = 30.0, what: str = "the condition", every: float = 0.1
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


# --------------------------------------------------------------------------- objects


def in_namespace(body: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """`body` placed in `namespace` (the builders default to another), as `kubectl -n` would."""
    return {**body, "metadata": {**body["metadata"], "namespace": namespace}}


def create_pod_group(api: client.ApiClient, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Create the PodGroup `body` in `namespace`."""
    result: dict[str, Any] = request_json(
        api,
        "POST",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
        body=in_namespace(body, namespace),
    )
    return result


def get_pod_group(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = request_json(
        api, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    )
    return result


def create_pods(api: client.ApiClient, namespace: str, bodies: list[dict[str, Any]]) -> None:
    """Create the pods `bodies` in `namespace`."""
    for body in bodies:
        request_json(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=in_namespace(body, namespace))


def list_pods(api: client.ApiClient, namespace: str, group: str | None = None) -> list[dict[str, Any]]:
    query: dict[str, str | int | bool] = {}
    if group:
        query["labelSelector"] = f"{POD_GROUP_LABEL}={group}"
    items: list[dict[str, Any]] = request_json(
        api, "GET", f"/api/v1/namespaces/{namespace}/pods", query=query
    )["items"]
    return items


def bound_nodes(api: client.ApiClient, namespace: str, group: str) -> dict[str, str]:
    """pod name -> node, for the bound pods of `group`."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in list_pods(api, namespace, group)
        if p["spec"].get("nodeName")
    }


def all_bound(api: client.ApiClient, namespace: str, group: str, size: int) -> Callable[[], dict[str, str]]:
    """For wait_until: pod -> node once all `size` pods of `group` are bound, else {}."""

    def check() -> dict[str, str]:
        nodes = bound_nodes(api, namespace, group)
        return nodes if len(nodes) == size else {}

    return check


def events(api: client.ApiClient, namespace: str, *, name: str | None = None) -> list[dict[str, Any]]:
    query: dict[str, str | int | bool] = {}
    if name:
        query["fieldSelector"] = f"involvedObject.name={name}"
    items: list[dict[str, Any]] = request_json(
        api, "GET", f"/api/v1/namespaces/{namespace}/events", query=query
    )["items"]
    return items


def condition(pg: Mapping[str, Any]) -> dict[str, Any]:
    for cond in (pg.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodGroupScheduled":
            return dict(cond)
    return {}
