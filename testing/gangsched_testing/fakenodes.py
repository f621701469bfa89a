"""Fake nodes and a kubelet stand-in, for a control plane that has neither.

- :class:`NodeSet` describes many nodes compactly (a count, or a zones x blocks x racks x
  hosts shape); :func:`node_manifests` turns it into Node objects (pure), and
  :func:`create_nodes` writes them, status included.
- :class:`NodeAgent` plays the kubelet for pods bound to fake nodes: it moves them to
  Running and completes graceful deletions. Tests end pods with :func:`finish_pod`.
- :func:`open_stream` opens a raw watch through an ApiClient, for the agent.

Why not KWOK here: it is another Go binary to build and manage for behaviour that is a
hundred lines of Python here, and these objects are fully under the tests' control (a test
finishes, fails or strands a pod when it wants to). The benchmark offers KWOK as well
(`python -m bench.e2e --kubelet kwok`, bench/e2e/kwok.py), so that its figures can be set
beside published KWOK-based ones; its nodes carry KWOK's annotation and are not the agent's.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import heapq
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal, Self

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched_testing.rawapi import MERGE_PATCH, request_json

logger = logging.getLogger(__name__)

FAKE_NODE_LABEL: Final = "gangsched.io/fake-node"
"""Label (value ``"true"``) marking nodes that :class:`NodeAgent` runs pods for."""

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
Manifest = dict[str, Any]

_NODE_NETWORK: Final = ipaddress.IPv4Network("172.16.0.0/12")
_POD_NETWORK: Final = ipaddress.IPv4Network("10.128.0.0/9")


@dataclass(frozen=True, kw_only=True, slots=True)
class TopologyShape:
    """A regular tree: every zone has `blocks` blocks, every block `racks` racks, and so on."""

    zones: int = 1
    blocks: int = 1
    racks: int = 1
    hosts: int = 1

    def __post_init__(self) -> None:
        for level in ("zones", "blocks", "racks", "hosts"):
            if getattr(self, level) < 1:
                raise ValueError(f"TopologyShape.{level} must be >= 1, got {getattr(self, level)}")

    @property
    def size(self) -> int:
        """How many nodes the shape describes."""
        return self.zones * self.blocks * self.racks * self.hosts


@dataclass(frozen=True, kw_only=True, slots=True)
class TopologyKeys:
    """Label keys for each topology level; None leaves that level unlabelled."""

    zone: str | None = "topology.kubernetes.io/zone"
    block: str | None = "example.com/block"
    rack: str | None = "example.com/rack"
    host: str = "kubernetes.io/hostname"


@dataclass(frozen=True, kw_only=True, slots=True)
class Taint:
    """A node taint, as in ``spec.taints``."""

    key: str
    value: str = ""
    effect: TaintEffect = "NoSchedule"

    def manifest(self) -> dict[str, str]:
        """The taint as the API spells it."""
        taint = {"key": self.key, "effect": self.effect}
        if self.value:
            taint["value"] = self.value
        return taint


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeSet:
    """A group of identical fake nodes: `count` flat ones, or one per leaf of `shape`.

    Names encode the topology path (``z0-b1-r2-h3``; flat ones are ``node-0`` ...), both
    prefixed by `name_prefix`, which also prefixes topology label values so that two sets
    with different prefixes never share a zone, block or rack by accident.
    """

    count: int | None = None
    shape: TopologyShape | None = None
    name_prefix: str = ""
    keys: TopologyKeys = field(default_factory=TopologyKeys)
    cpu: str = "32"
    memory: str = "256Gi"
    pods: int = 110
    extended: Mapping[str, str] = field(default_factory=dict)
    """Extended resources, e.g. ``{"nvidia.com/gpu": "8"}``; capacity equals allocatable."""
    taints: Sequence[Taint] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """E.g. ``{"kwok.x-k8s.io/node": "fake"}``: the nodes KWOK manages (bench/e2e/kwok.py)."""
    ready: bool | None = True
    """Ready condition True or False; None leaves the condition out (a node never heard from)."""
    condition_taints: bool = True
    """Add the taint the node lifecycle controller would for a not-ready or unknown node."""

    def __post_init__(self) -> None:
        if self.count is not None and self.shape is not None:
            raise ValueError("NodeSet takes either count or shape, not both")
        if self.count is not None and self.count < 0:
            raise ValueError(f"NodeSet.count must be >= 0, got {self.count}")

    @property
    def size(self) -> int:
        """How many nodes the set describes."""
        if self.shape is not None:
            return self.shape.size
        return 1 if self.count is None else self.count


def _hashed_ip(network: ipaddress.IPv4Network, key: str) -> str:
    """A deterministic address in `network` for `key`: stable across runs, no bookkeeping."""
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    offset = 1 + digest % (network.num_addresses - 2)  # skip network and broadcast addresses
    return str(network.network_address + offset)


def node_ip(name: str) -> str:
    """The InternalIP a fake node named `name` gets."""
    return _hashed_ip(_NODE_NETWORK, name)


def pod_ip(namespace: str, name: str) -> str:
    """The IP the agent gives pod namespace/name (the same pod name gets the same IP again)."""
    return _hashed_ip(_POD_NETWORK, f"{namespace}/{name}")


def _condition_taints(ready: bool | None) -> list[Taint]:
    if ready is True:
        return []
    key = "node.kubernetes.io/not-ready" if ready is False else "node.kubernetes.io/unreachable"
    return [Taint(key=key, effect="NoSchedule")]


def node_manifests(*, spec: NodeSet) -> list[Manifest]:
    """Node objects for `spec`, each with ``metadata``, ``spec`` and ``status``. Pure.

    The status is part of the manifest for convenience only: the API ignores it on create,
    so :func:`create_nodes` writes it through the status subresource.
    """
    paths: list[tuple[str, dict[str, str]]] = []  # (name, topology labels)
    prefix, keys = spec.name_prefix, spec.keys
    if spec.shape is None:
        paths = [(f"{prefix}node-{i}", {}) for i in range(spec.size)]
    else:
        shape = spec.shape
        for z in range(shape.zones):
            for b in range(shape.blocks):
                for r in range(shape.racks):
                    for h in range(shape.hosts):
                        topology: dict[str, str] = {}
                        for key, value in (
                            (keys.zone, f"z{z}"),
                            (keys.block, f"z{z}-b{b}"),
                            (keys.rack, f"z{z}-b{b}-r{r}"),
                        ):
                            if key:
                                topology[key] = prefix + value
                        paths.append((f"{prefix}z{z}-b{b}-r{r}-h{h}", topology))

    resources = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.pods), **spec.extended}
    taints = list(spec.taints)
    if spec.condition_taints:
        taints += _condition_taints(spec.ready)
    conditions: list[dict[str, str]] = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}", "message": "fake node"}
        for kind, reason in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    if spec.ready is not None:
        conditions.append(
            {
                "type": "Ready",
                "status": "True" if spec.ready else "False",
                "reason": "KubeletReady" if spec.ready else "KubeletNotReady",
                "message": "fake node",
            }
        )

    manifests: list[Manifest] = []
    for name, topology in paths:
        labels = {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            **topology,
            keys.host: name,
            FAKE_NODE_LABEL: "true",
            **spec.labels,
        }
        node: Manifest = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                **({"annotations": dict(spec.annotations)} if spec.annotations else {}),
            },
            "spec": {"taints": [t.manifest() for t in taints]} if taints else {},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "conditions": [dict(c) for c in conditions],
                "addresses": [
                    {"type": "InternalIP", "address": node_ip(name)},
                    {"type": "Hostname", "address": name},
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "osImage": "gangsched fake node",
                    "kernelVersion": "",
                    "kubeletVersion": "v1.36.3-fake",
                    "kubeProxyVersion": "",
                    "containerRuntimeVersion": "fake://1",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
            },
        }
        manifests.append(node)
    return manifests


_SHAPE_KEYS: Final = ("zones", "blocks", "racks", "hosts")
_EFFECTS: Final[Mapping[str, TaintEffect]] = {
    "NoSchedule": "NoSchedule",
    "PreferNoSchedule": "PreferNoSchedule",
    "NoExecute": "NoExecute",
}


def parse_node_set(text: str) -> NodeSet:
    """Parse the compact CLI form, e.g. ``zones=2,blocks=2,racks=4,hosts=4,gpu=8``.

    Keys: zones, blocks, racks, hosts (a shape) or count; cpu, memory, pods; gpu (short for
    nvidia.com/gpu) or any key with a ``/`` (an extended resource); prefix; ready
    (true/false/none); label=k=v and taint=k[=v]:Effect, both repeatable.
    """
    shape: dict[str, int] = {}
    kwargs: dict[str, Any] = {}
    extended: dict[str, str] = {}
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"node spec item {item!r} is not key=value (in {text!r})")
        if key in _SHAPE_KEYS:
            shape[key] = int(value)
        elif key == "count":
            kwargs["count"] = int(value)
        elif key in ("cpu", "memory"):
            kwargs[key] = value
        elif key == "pods":
            kwargs["pods"] = int(value)
        elif key == "gpu":
            extended["nvidia.com/gpu"] = value
        elif "/" in key:
            extended[key] = value
        elif key == "prefix":
            kwargs["name_prefix"] = value
        elif key == "ready":
            states: dict[str, bool | None] = {"true": True, "false": False, "none": None}
            if value.lower() not in states:
                raise ValueError(f"ready must be true, false or none, got {value!r}")
            kwargs["ready"] = states[value.lower()]
        elif key == "label":
            label_key, _, label_value = value.partition("=")
            labels[label_key] = label_value
        elif key == "taint":
            kv, _, effect = value.rpartition(":")
            if not kv:
                raise ValueError(f"taint must be key[=value]:Effect, got {value!r}")
            taint_key, _, taint_value = kv.partition("=")
            if effect not in _EFFECTS:
                raise ValueError(f"unknown taint effect {effect!r}")
            taints.append(Taint(key=taint_key, value=taint_value, effect=_EFFECTS[effect]))
        else:
            raise ValueError(f"unknown node spec key {key!r} (in {text!r})")
    if shape:
        kwargs["shape"] = TopologyShape(**shape)
    return NodeSet(extended=extended, labels=labels, taints=tuple(taints), **kwargs)


# --------------------------------------------------------------------------------------------
# Writing to the API. `api` everywhere is a kubernetes.client.ApiClient.


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_nodes(*, api: client.ApiClient, spec: NodeSet, parallelism: int = 8) -> list[str]:
    """Create the nodes of `spec` with their status, and return their names.

    Status goes through the status subresource (a create ignores it). If an admission plugin
    added taints on create (TaintNodesByCondition does, on a stock apiserver), they are
    replaced by the intended ones, as the node lifecycle controller would do.
    """

    def create(manifest: Manifest) -> str:
        name: str = manifest["metadata"]["name"]
        body = {key: manifest[key] for key in ("apiVersion", "kind", "metadata", "spec")}
        created = request_json(api, "POST", "/api/v1/nodes", body=body)
        want = manifest["spec"].get("taints", [])
        if created.get("spec", {}).get("taints", []) != want:
            request_json(
                api,
                "PATCH",
                f"/api/v1/nodes/{name}",
                body={"spec": {"taints": want or None}},
                content_type=MERGE_PATCH,
            )
        status = json.loads(json.dumps(manifest["status"]))
        now = _now()
        for condition in status["conditions"]:
            condition["lastHeartbeatTime"] = condition["lastTransitionTime"] = now
        request_json(
            api, "PATCH", f"/api/v1/nodes/{name}/status", body={"status": status}, content_type=MERGE_PATCH
        )
        return name

    manifests = node_manifests(spec=spec)
    if len(manifests) <= 4 or parallelism <= 1:
        return [create(m) for m in manifests]
    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="fakenodes") as pool:
        return list(pool.map(create, manifests))


def delete_nodes(*, api: client.ApiClient, names: Iterable[str] | None = None) -> None:
    """Delete the named nodes, or every fake node when `names` is None. Missing ones are fine."""
    if names is None:
        request_json(api, "DELETE", "/api/v1/nodes", query={"labelSelector": f"{FAKE_NODE_LABEL}=true"})
        return
    for name in names:
        try:
            request_json(api, "DELETE", f"/api/v1/nodes/{name}")
        except ApiException as exc:
            if exc.status != 404:
                raise


def finish_pod(*, api: client.ApiClient, namespace: str, name: str, succeeded: bool = True) -> None:
    """End a pod as its containers exiting would: phase Succeeded or Failed, containers terminated.

    Retries on conflicts, since the agent may be writing the same pod's status right now.
    """
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    for _ in range(20):
        pod = request_json(api, "GET", path)
        try:
            request_json(
                api,
                "PATCH",
                f"{path}/status",
                body=_finished_status(pod, succeeded=succeeded),
                content_type=MERGE_PATCH,
            )
        except ApiException as exc:
            if exc.status == 409:
                continue
            raise
        return
    raise RuntimeError(f"could not finish pod {namespace}/{name}: it kept changing")


def _finished_status(pod: Manifest, *, succeeded: bool) -> Manifest:
    now = _now()
    status = pod.get("status", {})
    started = {
        s["name"]: s.get("state", {}).get("running", {}).get("startedAt", now)
        for s in status.get("containerStatuses") or []
    }
    exit_code, reason = (0, "Completed") if succeeded else (1, "Error")
    containers = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": f"fake://{c.get('image', '')}",
            "containerID": f"fake://{pod['metadata']['uid']}/{c['name']}",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": started.get(c["name"], now),
                    "finishedAt": now,
                }
            },
        }
        for c in pod["spec"]["containers"]
    ]
    not_ready = "PodCompleted" if succeeded else "PodFailed"
    conditions = _conditions(
        status,
        {"PodScheduled": "True", "Initialized": "True", "ContainersReady": "False", "Ready": "False"},
        reason=not_ready,
    )
    return {
        "metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]},
        "status": {
            "phase": "Succeeded" if succeeded else "Failed",
            "conditions": conditions,
            "containerStatuses": containers,
            "startTime": status.get("startTime", now),
        },
    }


def _conditions(status: Manifest, wanted: Mapping[str, str], *, reason: str | None = None) -> list[Manifest]:
    """Conditions set to `wanted`, keeping transition times of those that did not change."""
    now = _now()
    old = {c.get("type"): c for c in status.get("conditions") or []}
    result: list[Manifest] = []
    for kind, value in wanted.items():
        previous = old.get(kind)
        condition: Manifest = {"type": kind, "status": value, "lastProbeTime": None}
        if previous is not None and previous.get("status") == value:
            condition["lastTransitionTime"] = previous.get("lastTransitionTime", now)
        else:
            condition["lastTransitionTime"] = now
        if reason and value == "False":
            condition["reason"] = reason
        result.append(condition)
    return result


def wait_for_pod(
    *,
    api: client.ApiClient,
    namespace: str,
    name: str,
    condition: Callable[[Manifest], bool],
    timeout: float = 30.0,
    what: str = "the condition",
) -> Manifest:
    """Poll pod namespace/name until `condition(pod_dict)` holds; return the pod as a dict.

    Raises TimeoutError naming `what` and the pod's last phase, which says more than a
    bare assertion failure in a test log.
    """
    deadline = time.monotonic() + timeout
    pod: Manifest = {}
    while True:
        try:
            pod = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiException as exc:
            if exc.status != 404:
                raise
            pod = {}
        if pod and condition(pod):
            return pod
        if time.monotonic() > deadline:
            phase = pod.get("status", {}).get("phase", "absent") if pod else "absent"
            raise TimeoutError(f"pod {namespace}/{name}: no {what} after {timeout}s (phase {phase})")
        time.sleep(0.05)


def open_stream(
    api: client.ApiClient, path: str, *, query: Mapping[str, str | int | bool] | None = None
) -> urllib3.BaseHTTPResponse:
    """GET `path` and return the unread response, for watches: iterate it for lines.

    Another thread may call ``shutdown()`` on it to end a blocked read at once. Only the
    kubelet stand-in watches this way (gangsched itself watches through its informers and
    `gangsched.session`), so it lives here in the test tooling.
    """
    request = api.param_serialize(
        "GET",
        path,
        query_params=dict(query or {}),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    rest_response = api.call_api(*request)
    response: urllib3.BaseHTTPResponse = rest_response.response
    if not 200 <= response.status <= 299:
        rest_response.read()  # type: ignore[no-untyped-call]
        response.release_conn()
        raise ApiException.from_response(http_resp=rest_response, body=None, data=None)
    return response


# --------------------------------------------------------------------------------------------
# The kubelet stand-in


class NodeAgent:
    """A kubelet for every fake node at once, run in a daemon thread.

    Watches pods with ``spec.nodeName`` set; for those on nodes labelled
    ``gangsched.io/fake-node=true`` it
    - moves Pending pods to Running (conditions, pod IP, host IP, start time, container
      statuses), as a kubelet does once the containers have started;
    - force-deletes pods carrying a deletionTimestamp, as a kubelet does after stopping the
      containers; without it a gracefully deleted pod stays Terminating forever;
    - with `run_seconds`, finishes each pod it started (phase Succeeded, as `finish_pod`)
      that long after it moved it to Running, as a batch job's containers exiting would. The
      finishing is done by a timer thread and a few workers, not the watch thread, so that a
      round of pods ending together is not finished one watch event at a time.

    Use as a context manager, or start()/stop(). Errors the loop survived are kept in
    :attr:`errors` for tests to assert on.
    """

    def __init__(
        self,
        *,
        api_client: client.ApiClient,
        fake_node_label: str = FAKE_NODE_LABEL,
        run_seconds: float | None = None,
    ) -> None:
        self._api = api_client
        self._label = fake_node_label
        self._run_seconds = run_seconds
        # (when to finish, namespace, name) of the pods started, earliest first (`run_seconds`)
        self._due: list[tuple[float, str, str]] = []
        self._due_changed = threading.Condition()
        self._finisher: threading.Thread | None = None
        self._finishers: ThreadPoolExecutor | None = None
        self._nodes: dict[str, str] = {}  # fake node name -> its InternalIP
        self._deleted: set[str] = set()  # uids already force-deleted
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the watch thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the watch thread.

        Returns at once: pods bound before the watch opens are not missed, because a watch
        without a resourceVersion begins with every existing pod.
        """
        if self.running:
            return
        self._stopping.clear()
        if self._run_seconds is not None:
            self._finishers = ThreadPoolExecutor(max_workers=8, thread_name_prefix="node-agent-finish")
            self._finisher = threading.Thread(target=self._finish_due, name="node-agent-timer", daemon=True)
            self._finisher.start()
        self._thread = threading.Thread(target=self._run, name="gangsched-node-agent", daemon=True)
        self._thread.start()

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop the thread. Shutting the watch's socket makes this take milliseconds."""
        self._stopping.set()
        with self._lock:
            if self._response is not None:
                with contextlib.suppress(Exception):
                    self._response.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        with self._due_changed:
            self._due_changed.notify_all()
        if self._finisher is not None:
            self._finisher.join(timeout)
            self._finisher = None
        if self._finishers is not None:
            self._finishers.shutdown(wait=True, cancel_futures=True)
            self._finishers = None

    def finish_pod(self, *, namespace: str, name: str, succeeded: bool = True) -> None:
        """End a pod with success or failure; see :func:`finish_pod`."""
        finish_pod(api=self._api, namespace=namespace, name=name, succeeded=succeeded)

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        resource_version: str | None = None
        while not self._stopping.is_set():
            query: dict[str, str | int | bool] = {
                "watch": True,
                "fieldSelector": "spec.nodeName!=",
                "allowWatchBookmarks": True,
                "timeoutSeconds": 300,
            }
            if resource_version:
                query["resourceVersion"] = resource_version
            try:
                resource_version = self._watch_once(query, resource_version)
            except ApiException as exc:
                if exc.status == 410:  # our resourceVersion was compacted away: list afresh
                    resource_version = None
                    continue
                self._survive(exc)
            except Exception as exc:
                if self._stopping.is_set():
                    break  # stop() shut the socket under the read
                self._survive(exc)

    def _watch_once(self, query: Mapping[str, str | int | bool], resource_version: str | None) -> str | None:
        """Follow one watch request to its end; return the resourceVersion to resume from."""
        response = open_stream(self._api, "/api/v1/pods", query=query)
        with self._lock:
            self._response = response
        try:
            if self._stopping.is_set():  # stop() came before the response was visible to it
                return resource_version
            for line in response:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._reconcile(obj)
            return resource_version
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()

    def _finish_due(self) -> None:
        """The timer thread: hand each started pod to the workers once its run time is over."""
        while not self._stopping.is_set():
            with self._due_changed:
                now = time.monotonic()
                if not self._due or self._due[0][0] > now:
                    self._due_changed.wait(None if not self._due else self._due[0][0] - now)
                    continue
                _, namespace, name = heapq.heappop(self._due)
            if self._finishers is not None:
                self._finishers.submit(self._finish_one, namespace, name)

    def _finish_one(self, namespace: str, name: str) -> None:
        try:
            finish_pod(api=self._api, namespace=namespace, name=name)
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing left to finish
                self._survive(exc)
        except Exception as exc:
            self._survive(exc)

    def _survive(self, exc: BaseException) -> None:
        logger.warning("node agent: %r; retrying", exc)
        self.errors.append(exc)
        self._stopping.wait(0.5)

    def _node_ip(self, name: str) -> str | None:
        """The node's InternalIP if it is a fake node, else None. Only positives are cached."""
        if name in self._nodes:
            return self._nodes[name]
        try:
            node = request_json(self._api, "GET", f"/api/v1/nodes/{name}")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        if node.get("metadata", {}).get("labels", {}).get(self._label) != "true":
            return None
        addresses = node.get("status", {}).get("addresses") or []
        ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), node_ip(name))
        self._nodes[name] = ip
        return ip

    def _reconcile(self, pod: Manifest) -> None:
        meta, spec = pod.get("metadata", {}), pod.get("spec", {})
        host_ip = self._node_ip(spec.get("nodeName", ""))
        if host_ip is None:
            return
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            if meta.get("deletionTimestamp"):
                if uid not in self._deleted:
                    self._deleted.add(uid)
                    request_json(
                        self._api,
                        "DELETE",
                        path,
                        body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                    )
                return
            if pod.get("status", {}).get("phase", "Pending") != "Pending":
                return
            request_json(
                self._api,
                "PATCH",
                f"{path}/status",
                body=_running_status(pod, host_ip=host_ip),
                content_type=MERGE_PATCH,
            )
            if self._run_seconds is not None:
                with self._due_changed:
                    heapq.heappush(self._due, (time.monotonic() + self._run_seconds, namespace, name))
                    self._due_changed.notify()
        except ApiException as exc:
            # 404: gone meanwhile; 409: changed meanwhile, and its next event comes anyway.
            if exc.status not in (404, 409):
                raise


def _running_status(pod: Manifest, *, host_ip: str) -> Manifest:
    """The status patch a kubelet would write once all containers have started."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    now = _now()
    ip = pod_ip(meta["namespace"], meta["name"])

    def container(c: Manifest, state: Manifest, *, ready: bool) -> Manifest:
        return {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": f"fake://{c.get('image', '')}",
            "containerID": f"fake://{meta['uid']}/{c['name']}",
            "ready": ready,
            "started": ready,
            "restartCount": 0,
            "state": state,
        }

    running = {"running": {"startedAt": now}}
    completed = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
    init = [
        # restartPolicy Always marks a sidecar, which keeps running
        container(c, running, ready=True)
        if c.get("restartPolicy") == "Always"
        else container(c, completed, ready=False)
        for c in spec.get("initContainers") or []
    ]
    conditions = _conditions(
        status,
        {
            "PodReadyToStartContainers": "True",
            "PodScheduled": "True",
            "Initialized": "True",
            "ContainersReady": "True",
            "Ready": "True",
        },
    )
    patch: Manifest = {
        # resourceVersion makes the patch conditional: if finish_pod or a deletion got there
        # first, it fails with 409 instead of resurrecting the pod.
        "metadata": {"resourceVersion": meta["resourceVersion"]},
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": status.get("startTime", now),
            "containerStatuses": [container(c, running, ready=True) for c in spec.get("containers") or []],
        },
    }
    if init:
        patch["status"]["initContainerStatuses"] = init
    return patch


__all__ = [
    "FAKE_NODE_LABEL",
    "NodeAgent",
    "NodeSet",
    "Taint",
    "TopologyKeys",
    "TopologyShape",
    "create_nodes",
    "delete_nodes",
    "finish_pod",
    "node_ip",
    "node_manifests",
    "open_stream",
    "parse_node_set",
    "pod_ip",
    "wait_for_pod",
]
