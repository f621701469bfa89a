"""Running `gangsched run` against the test control plane, and small API helpers.

The operator runs as a real subprocess (so a test can kill it mid-binding), with the
admin kubeconfig unless a test passes another one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client

from gangsched import devcluster
from gangsched._rawapi import request_json
from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, VERSION

T = TypeVar("T")
CRD = Path(__file__).resolve().parents[2] / "crds" / "podgroup.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Operator:
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    extra_env: dict[str, str] = field(default_factory=dict)

    def health(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as resp:
                body: dict[str, Any] = json.loads(resp.read())
                return body
        except OSError:
            return None

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Ready when the cache is primed (the loop starts right after) and /healthz answers.

        The log line, not /healthz, says when: kopf caches probe results for 10 s.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gangsched run exited with {self.proc.returncode}:\n{self.tail()}")
            if "cache primed" in self.log_text() and self.health() is not None:
                return
            time.sleep(0.05)
        raise TimeoutError(f"gangsched run not ready after {timeout}s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a node dies under the operator."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_operator(
    cp: devcluster.ControlPlane,
    log_dir: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    kubeconfig: Path | None = None,
    wait: bool = True,
) -> Operator:
    port = free_port()
    log = log_dir / f"operator-{port}.log"
    full_env = {**os.environ, "KUBECONFIG": str(kubeconfig or cp.kubeconfig_path), **(env or {})}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gangsched.cli", "run", "--liveness-port", str(port), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    op = Operator(proc=proc, log=log, port=port, extra_env=dict(env or {}))
    if wait:
        op.wait_ready()
    return op


def ensure_crd(api: client.ApiClient) -> None:
    import yaml

    body = yaml.safe_load(CRD.read_text())
    try:
        request_json(api, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=body)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    wait_until(
        lambda: _served(api),
        timeout=30,
        what="the PodGroup CRD to be served",
    )


def _served(api: client.ApiClient) -> bool:
    try:
        request_json(api, "GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}")
        return True
    except client.exceptions.ApiException:
        return False


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
