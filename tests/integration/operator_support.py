"""Running `gangsched run` against the test control plane, and small API helpers.

The operator runs as a real subprocess (so a test can kill it mid-binding), with the
admin kubeconfig unless a test passes another one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client

from gangsched import devcluster
from gangsched._rawapi import request_json
from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, VERSION

T = TypeVar("T")
CRD = Path(__file__).resolve().parents[2] / "crds" / "podgroup.yaml"


free_port = devcluster.free_port
Operator = devcluster.OperatorProcess


def start_operator(
    cp: devcluster.ControlPlane,
    log_dir: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    kubeconfig: Path | None = None,
    wait: bool = True,
) -> Operator:
    op = Operator(
        kubeconfig=kubeconfig or cp.kubeconfig_path, log=log_dir / "operator.log", args=args, env=env
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


def pod_group_body(
    name: str,
    min_count: int | None,
    *,
    topology: list[tuple[str, str]] | None = None,
    timeout: int | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": k, "mode": m} for k, m in topology]}
    if timeout:
        spec["scheduleTimeoutSeconds"] = timeout
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def create_pod_group(api: client.ApiClient, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = request_json(
        api, "POST", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}", body=dict(body)
    )
    return result


def get_pod_group(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = request_json(
        api, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    )
    return result


def pod_body(
    name: str,
    group: str | None,
    *,
    gpu: int = 0,
    cpu: str = "1",
    scheduler: str = "gangsched",
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpu:
        resources["requests"]["nvidia.com/gpu"] = str(gpu)
        resources["limits"] = {"nvidia.com/gpu": str(gpu)}
    meta: dict[str, Any] = {"name": name}
    if group:
        meta["labels"] = {POD_GROUP_LABEL: group}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "registry.example/train:1", "resources": resources}],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def create_pods(api: client.ApiClient, namespace: str, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        request_json(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=body)


def gang(name: str, size: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [pod_body(f"{name}-{i}", name, **kwargs) for i in range(size)]


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


@pytest.fixture
def operator_factory(
    control_plane: devcluster.ControlPlane, admin_api: client.ApiClient, tmp_path: Path
) -> Iterator[Callable[..., Operator]]:
    """Start operators with `operator_factory(*args, env=...)`; all are stopped after the test."""
    ensure_crd(admin_api)
    started: list[Operator] = []

    def start(*args: str, **kwargs: Any) -> Operator:
        op = start_operator(control_plane, tmp_path, *args, **kwargs)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
    for op in started:
        text = op.log_text()
        assert "Traceback" not in text, f"the operator logged a traceback:\n{op.tail(80)}"
