"""Watch intake: what each way of feeding Pods and Nodes into the cache costs per event
(issue 15 item 2; results in docs/benchmarks.md "Watch intake").

One dev control plane (testing/gangsched_testing/devcluster.py) is filled with `--nodes` fake
GPU nodes (kubelet-like status: capacity, conditions, addresses, nodeInfo, 50 images) and
`--pods` pods made by a pool of threads: 1-2 containers with requests and limits, env, volumes,
labels, an owner reference, a GPU limit on most, a third gangsched's (PodGroup label), half
bound to a fake node and given the status a kubelet writes (phase, conditions, IPs, container
statuses). Then, for each option, a fresh Python process (its CPU and RSS are the option's
alone):

  1. builds the same consumer behind every option: `handlers.Intake` over a `ClusterCache`
     (scheduler and live reader stubbed: wake does nothing, no deletion happens), so the work
     after decoding (model parse -> cache update) is identical;
  2. LISTs pods (unfinished only, as the operator does) and nodes into it, and watches from
     there;
  3. sees `--pod-events` pod status patches (a kubelet's container status update: restart
     counts and conditions of a bound pod), then `--node-rounds` status patches of every node
     (a node status update: heartbeat times), sent by this process with a pool of threads.

The options (`--options`, all by default):

  kopf             kopf 1.45 @kopf.on.event handlers on pods and nodes (standalone, clusterwide,
                   posting off, no scanning, LIST chunks of 500, the same field selector)
  before           our aiohttp list+watch informer (cluster/informer.py) and intake as they were
                   before this benchmark: json.loads, and every quantity string parsed anew
                   (the cache of parsed quantities in gangsched/quantity.py turned off)
  json             the informer decoding with json.loads, today's intake (as every option below)
  orjson           the same informer, orjson.loads
  msgspec          the same informer, msgspec.json.decode into builtins (every field)
  msgspec-proj     the same informer, msgspec decoding into the projection the model reads
                   (cluster/wire.py: the informer's default now)
  k8s-asyncio      kubernetes_asyncio: paginated typed LIST (V1Pod models, turned back into
                   dicts with sanitize_for_serialization) and watch.Watch (typed; its
                   raw_object goes to the intake)
  k8s-asyncio-raw  kubernetes_asyncio without models: LIST with _preload_content=False and
                   json, Watch(return_type="object")
  lightkube        lightkube 1.0 AsyncClient: paginated LIST and watch into its msgspec
                   models, to_dict() for the intake

Reported per option: wall and CPU time to LIST both kinds into the cache (from the client's
start: kopf's own startup counts), CPU per pod and per node event over the watch phase (the
whole process: HTTP, decoding, the option's machinery, the intake), total CPU, peak RSS above
the process's RSS before the first request. For the informer options the pod events the
process saw are replayed afterwards, decode alone and decode + intake, for the split. Every
option must end with the same cache (a digest of every Pod and Node it holds, resourceVersions
aside); a row whose digest differs is flagged.

Needs the candidates installed (orjson, msgspec, kubernetes_asyncio, lightkube): options whose
package is missing are skipped. CPU is process CPU time (the machine may be busy; wall times
are only indicative). Run: python bench/intake.py --pods 10000 [--pod-events 2000]
[--nodes 200] [--node-rounds 2] [--options kopf,json,...] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import datetime
import hashlib
import importlib.util
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO / "operator", REPO / "testing"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

OPTIONS = (
    "kopf",
    "before",
    "json",
    "orjson",
    "msgspec",
    "msgspec-proj",
    "k8s-asyncio",
    "k8s-asyncio-raw",
    "lightkube",
)
NEEDS = {
    "kopf": "kopf",
    "orjson": "orjson",
    "msgspec": "msgspec",
    "msgspec-proj": "msgspec",
    "k8s-asyncio": "kubernetes_asyncio",
    "k8s-asyncio-raw": "kubernetes_asyncio",
    "lightkube": "lightkube",
}
INFORMER_OPTIONS = ("before", "json", "orjson", "msgspec", "msgspec-proj")
NAMESPACES = 10
GPU = "nvidia.com/gpu"
PREFIX = "intake-"
SCHEDULER = "gangsched"
GROUP_LABEL = "scheduling.gangsched.io/pod-group"
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
# INTAKE_PROFILE=FILE: cProfile's stats of one option's watch phase (listed -> last event) to FILE.
PROFILE = os.environ.get("INTAKE_PROFILE", "")
PROFILER = cProfile.Profile()


# ---------------------------------------------------------------------------- the cluster


def _stamp(seconds: int) -> str:
    return (EPOCH + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_manifest(i: int, nodes: Sequence[str], rng: random.Random) -> tuple[dict[str, Any], bool]:
    """Pod number i (seeded): a realistic body, and whether it is bound."""
    job = f"job-{i // 8:05d}"
    ours = (i // 8) % 3 == 0
    bound = rng.random() < 0.5
    gpus = rng.choice((0, 1, 2, 4, 8)) if rng.random() < 0.8 else 0
    cpu = rng.choice(("500m", "1", "2", "4", "8"))
    memory = rng.choice(("512Mi", "2Gi", "8Gi", "16Gi", "64Gi"))
    limits: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits[GPU] = str(gpus)
    main = {
        "name": "main",
        "image": f"registry.example.com/team-{i % 7}/trainer:v1.{i % 13}.0",
        "command": ["python", "-m", "trainer"],
        "args": ["--config", "/etc/job/config.yaml", "--epochs", str(10 + i % 5)],
        "env": [{"name": f"VAR_{k}", "value": f"value-{i}-{k}"} for k in range(6)],
        "ports": [{"containerPort": 8080, "name": "metrics", "protocol": "TCP"}],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": "/etc/job", "readOnly": True},
        ],
    }
    containers = [main]
    if rng.random() < 0.5:
        containers.append(
            {
                "name": "log-shipper",
                "image": "registry.example.com/infra/log-shipper:v3.2.1",
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"cpu": "200m", "memory": "128Mi"},
                },
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
            }
        )
    labels = {
        "app.kubernetes.io/name": "trainer",
        "app.kubernetes.io/part-of": f"team-{i % 7}",
        "batch.kubernetes.io/job-name": job,
        "batch.kubernetes.io/controller-uid": hashlib.sha1(job.encode()).hexdigest()[:32],
    }
    if ours:
        labels[GROUP_LABEL] = job
    spec: dict[str, Any] = {
        "containers": containers,
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "config", "configMap": {"name": f"{job}-cfg"}},
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
    }
    if ours:
        spec["schedulerName"] = SCHEDULER
    if bound:
        spec["nodeName"] = nodes[i % len(nodes)]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-worker-{i % 8}-{i:06d}",
            "namespace": f"{PREFIX}{i % NAMESPACES}",
            "labels": labels,
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job,
                    "uid": labels["batch.kubernetes.io/controller-uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
    return pod, bound


def running_status(pod: Mapping[str, Any], node_ip: str, restarts: int, when: int) -> dict[str, Any]:
    """What a kubelet writes for a started pod (`restarts` and `when` make each one new)."""
    now = _stamp(when)
    meta = pod["metadata"]
    ip = f"10.{(hash(meta['name']) >> 8) % 250}.{hash(meta['name']) % 250}.{restarts % 250 + 2}"
    statuses = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": f"{c['image']}@sha256:{hashlib.sha256(c['image'].encode()).hexdigest()}",
            "containerID": f"containerd://{hashlib.sha256((meta['name'] + c['name']).encode()).hexdigest()}",
            "ready": True,
            "started": True,
            "restartCount": restarts,
            "state": {"running": {"startedAt": now}},
            "lastState": {}
            if not restarts
            else {
                "terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": now, "finishedAt": now}
            },
        }
        for c in pod["spec"]["containers"]
    ]
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": node_ip,
            "hostIPs": [{"ip": node_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": _stamp(0),
            "containerStatuses": statuses,
        }
    }


def node_status(when: int) -> dict[str, Any]:
    """A node status update: every condition's heartbeat at `when`."""
    conditions = [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": "kubelet is posting ready status" if kind == "Ready" else f"kubelet has {reason}",
            "lastHeartbeatTime": _stamp(when),
            "lastTransitionTime": _stamp(0),
        }
        for kind, status, reason in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        )
    ]
    return {"status": {"conditions": conditions}}


def node_images(rng: random.Random) -> list[dict[str, Any]]:
    """A kubelet reports up to 50 images per node (--node-status-max-images)."""
    out = []
    for k in range(50):
        repo = f"registry.example.com/team-{k % 7}/image-{k}"
        digest = hashlib.sha256(repo.encode()).hexdigest()
        out.append(
            {
                "names": [f"{repo}@sha256:{digest}", f"{repo}:v1.{k}.0"],
                "sizeBytes": rng.randint(10**7, 10**10),
            }
        )
    return out


def _pool_map(threads: int, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="intake-bench") as pool:
        return list(pool.map(fn, items))


class Cluster:
    """The control plane, its nodes and pods; patches on demand."""

    def __init__(self, args: argparse.Namespace) -> None:
        from gangsched_testing import devcluster

        self.args = args
        self.plane = devcluster.ControlPlane(with_controller_manager=False)
        self.node_names: list[str] = []
        self.bound: list[dict[str, Any]] = []
        self.node_ips: dict[str, str] = {}

    def __enter__(self) -> Cluster:
        self.plane.start()
        self.api = self.plane.api_client()
        self.api.configuration.connection_pool_maxsize = self.args.threads * 2
        return self

    def __exit__(self, *exc: object) -> None:
        self.api.close()
        self.plane.stop()

    def request(self, method: str, path: str, body: Any, content_type: str | None = None) -> Any:
        from gangsched_testing.rawapi import request_json

        if content_type is None:
            return request_json(self.api, method, path, body=body)
        return request_json(self.api, method, path, body=body, content_type=content_type)

    def populate(self) -> None:
        from gangsched_testing import fakenodes
        from gangsched_testing.rawapi import MERGE_PATCH

        args = self.args
        rng = random.Random(args.seed)
        started = time.monotonic()
        for n in range(NAMESPACES):
            self.request("POST", "/api/v1/namespaces", {"metadata": {"name": f"{PREFIX}{n}"}})
        spec = fakenodes.NodeSet(count=args.nodes, name_prefix=PREFIX, extended={GPU: "8"})
        self.node_names = fakenodes.create_nodes(api=self.api, spec=spec, parallelism=args.threads)
        self.node_ips = {name: fakenodes.node_ip(name) for name in self.node_names}
        images = node_images(rng)

        def kubelet_node(name: str) -> None:
            status = node_status(0)["status"]
            status["images"] = images
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
            self.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, MERGE_PATCH)

        _pool_map(args.threads, kubelet_node, self.node_names)
        manifests = [pod_manifest(i, self.node_names, rng) for i in range(args.pods)]

        def create(item: tuple[dict[str, Any], bool]) -> None:
            pod, bound = item
            meta = pod["metadata"]
            self.request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods", pod)
            if bound:
                status = running_status(pod, self.node_ips[pod["spec"]["nodeName"]], 0, 1)
                self.request(
                    "PATCH",
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                    status,
                    MERGE_PATCH,
                )

        _pool_map(args.threads, create, manifests)
        self.bound = [pod for pod, bound in manifests if bound]
        print(
            f"# {args.pods} pods ({len(self.bound)} bound) and {args.nodes} nodes made in "
            f"{time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )

    def patch_pods(self, run: int) -> None:
        """`--pod-events` status patches, each a new state of a bound pod."""
        from gangsched_testing.rawapi import MERGE_PATCH

        count = self.args.pod_events
        per_round = len(self.bound)

        def patch(j: int) -> None:
            pod = self.bound[j % per_round]
            meta = pod["metadata"]
            restarts = run * 1000 + 1 + j // per_round
            status = running_status(pod, self.node_ips[pod["spec"]["nodeName"]], restarts, 10 + restarts)
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
            self.request("PATCH", path, status, MERGE_PATCH)

        # One round at a time: two patches of one pod in flight together could arrive in either order.
        for start in range(0, count, per_round):
            _pool_map(self.args.threads, patch, range(start, min(start + per_round, count)))

    def patch_nodes(self, run: int) -> None:
        from gangsched_testing.rawapi import MERGE_PATCH

        for r in range(self.args.node_rounds):
            when = 100 + run * 100 + r

            def patch(name: str, when: int = when) -> None:
                self.request("PATCH", f"/api/v1/nodes/{name}/status", node_status(when), MERGE_PATCH)

            _pool_map(self.args.threads, patch, self.node_names)


# ---------------------------------------------------------------------------- one option (child)


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class _Scheduler:
    """What Intake calls on the scheduler: nothing to do here."""

    def wake(self) -> None:
        pass

    def report(self, group: Any) -> None:
        pass

    def forget_group(self, key: Any) -> None:
        pass


class _Live:
    """No member of ours finishes here: a pod that leaves the watch is gone."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def may_have_finished(self, pod: Any) -> bool:
        return False

    def pod_left(self, key: tuple[str, str]) -> None:
        self.cache.remove("pods", key)


def cache_digest(cache: Any) -> str:
    """Every Pod and Node the cache holds, resourceVersions aside."""
    digest = hashlib.sha256()
    for key in sorted(cache.pods):
        digest.update(repr(dataclasses.replace(cache.pods[key], resource_version="")).encode())
    for name in sorted(cache.nodes):
        digest.update(repr(cache.nodes[name]).encode())
    return digest.hexdigest()[:16]


class Probe:
    """Counts what reaches the intake and reports CPU at the phase boundaries."""

    def __init__(self, args: argparse.Namespace, intake: Any, cache: Any) -> None:
        self.args, self.intake, self.cache = args, intake, cache
        self.pods_listed = self.nodes_listed = False
        self.pod_events = self.node_events = 0
        self.listed_at: float | None = None
        self.start_cpu = time.process_time()
        self.start_wall = time.monotonic()
        self.rss0 = _rss_kib()
        self.cpu_listed = self.cpu_pods = self.cpu_nodes = self.pod_event_us = 0.0
        self.done = asyncio.Event() if args.option != "kopf" else None
        self.finished = threading.Event()

    def reset_clock(self) -> None:
        """The client is set up: from here on it is the option's work."""
        self.start_cpu, self.start_wall, self.rss0 = time.process_time(), time.monotonic(), _rss_kib()

    # Every option calls these four.
    async def pod(self, event_type: str, body: Mapping[str, Any]) -> None:
        self.intake.pod(event_type, body)
        self.pod_events += 1
        if self.pod_events == self.args.pod_events:
            self.cpu_pods = time.process_time()
            self.pod_event_us = (self.cpu_pods - self.cpu_listed) / self.args.pod_events * 1e6
            _say(phase="pods", digest=cache_digest(self.cache))
            self.cpu_nodes = time.process_time()  # the digest is the benchmark's work, not the option's

    async def node(self, event_type: str, body: Mapping[str, Any]) -> None:
        await self.intake.event("nodes", event_type, body)
        self.node_events += 1
        if self.node_events == self.args.nodes * self.args.node_rounds:
            self.finish()

    async def pods_list(self, items: Sequence[Mapping[str, Any]], resource_version: str) -> None:
        await self.intake.replace("pods", items, resource_version)
        self.pods_listed = True
        self._maybe_listed()

    async def nodes_list(self, items: Sequence[Mapping[str, Any]], resource_version: str) -> None:
        await self.intake.replace("nodes", items, resource_version)
        self.nodes_listed = True
        self._maybe_listed()

    # kopf reports listed objects one by one (type None)
    async def pod_listed_one(self, body: Mapping[str, Any]) -> None:
        self.intake.pod("LISTED", body)
        if len(self.cache.pods) == self.args.pods and not self.pods_listed:
            self.pods_listed = True
            self._maybe_listed()

    async def node_listed_one(self, body: Mapping[str, Any]) -> None:
        await self.intake.event("nodes", "LISTED", body)
        if len(self.cache.nodes) == self.args.nodes and not self.nodes_listed:
            self.nodes_listed = True
            self._maybe_listed()

    def _maybe_listed(self) -> None:
        if self.pods_listed and self.nodes_listed and self.listed_at is None:
            self.listed_at = time.monotonic()
            self.cpu_listed = time.process_time()
            if PROFILE:
                PROFILER.enable()
            _say(
                phase="listed",
                pods=len(self.cache.pods),
                nodes=len(self.cache.nodes),
                list_wall_ms=(self.listed_at - self.start_wall) * 1000,
                list_cpu_ms=(self.cpu_listed - self.start_cpu) * 1000,
            )

    def finish(self) -> None:
        end = time.process_time()
        if PROFILE:
            PROFILER.disable()
            PROFILER.dump_stats(PROFILE)
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        _say(
            phase="nodes",
            digest=cache_digest(self.cache),
            pod_event_us=self.pod_event_us,
            node_event_us=(end - self.cpu_nodes) / max(1, self.args.nodes * self.args.node_rounds) * 1e6,
            total_cpu_s=end - self.start_cpu - (self.cpu_nodes - self.cpu_pods),
            peak_rss_delta_mib=(peak_kib - self.rss0) / 1024,
        )
        if self.done is not None:
            self.done.set()
        self.finished.set()


def _intake() -> tuple[Any, Any]:
    from gangsched.cluster import ClusterCache
    from gangsched.handlers import Intake
    from gangsched.loop import Faults

    cache = ClusterCache()
    intake = Intake(cache=cache, scheduler=_Scheduler(), live=_Live(cache), faults=Faults())  # type: ignore[arg-type]
    return intake, cache


def _codec(option: str) -> Any:
    from gangsched.cluster import wire

    if option in ("json", "before"):
        return wire.Codec(event=json.loads, page=json.loads)
    if option == "orjson":
        import orjson

        return wire.Codec(event=orjson.loads, page=orjson.loads)
    if option == "msgspec":
        decoder = __import__("msgspec").json.Decoder()
        return wire.Codec(event=decoder.decode, page=decoder.decode)
    return None  # msgspec-proj: the informer's own choice per path


async def run_informer(args: argparse.Namespace, probe: Probe) -> list[bytes]:
    """Our informer with the option's decoding; returns the pod event lines it decoded."""
    from kubernetes import client, config

    from gangsched.cluster import wire
    from gangsched.cluster.informer import Informer, Resource, WatchHealth
    from gangsched.handlers import KindSink
    from gangsched.model import LIVE_PODS_SELECTOR
    from gangsched.session import ApiSession

    configuration = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    session = ApiSession(configuration)
    codec = _codec(args.option)
    pod_codec = codec or wire.codec_for("/api/v1/pods")
    lines: list[bytes] = []

    def capture(line: bytes) -> Any:
        lines.append(line)
        return pod_codec.event(line)

    capturing = wire.Codec(event=capture, page=pod_codec.page)
    health = WatchHealth()
    pods = Informer(
        session=session,
        resource=Resource("pods", "/api/v1/pods", {"fieldSelector": LIVE_PODS_SELECTOR}, codec=capturing),
        sink=KindSink(probe.pod, probe.pods_list),
        health=health,
    )
    nodes = Informer(
        session=session,
        resource=Resource("nodes", "/api/v1/nodes", codec=codec),
        sink=KindSink(probe.node, probe.nodes_list),
        health=health,
    )
    probe.reset_clock()
    tasks = [asyncio.create_task(i.run()) for i in (pods, nodes)]
    assert probe.done is not None
    await probe.done.wait()
    for task in tasks:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks)
    await session.close()
    return lines


def replay(args: argparse.Namespace, lines: list[bytes], intake: Any) -> dict[str, float]:
    """The pod events seen, again: decode alone, then decode + intake (the same cache)."""
    from gangsched.cluster import wire

    decode = (_codec(args.option) or wire.codec_for("/api/v1/pods")).event
    lines = [line for line in lines if json.loads(line).get("type") in ("ADDED", "MODIFIED")]
    repeats = 3
    began = time.process_time()
    for _ in range(repeats):
        for line in lines:
            decode(line)
    decode_s = time.process_time() - began

    async def apply() -> None:
        for line in lines:
            event = decode(line)
            intake.pod(event["type"], event["object"])

    loop = asyncio.new_event_loop()
    began = time.process_time()
    for _ in range(repeats):
        loop.run_until_complete(apply())
    both_s = time.process_time() - began
    loop.close()
    count = max(1, len(lines) * repeats)
    return {"decode_us": decode_s / count * 1e6, "intake_us": (both_s - decode_s) / count * 1e6}


async def run_k8s_asyncio(args: argparse.Namespace, probe: Probe, *, raw: bool) -> None:
    from kubernetes_asyncio import client, config, watch

    from gangsched.model import LIVE_PODS_SELECTOR

    await config.load_kube_config(config_file=args.kubeconfig)
    api = client.ApiClient()
    v1 = client.CoreV1Api(api)

    async def list_all(fn: Callable[..., Awaitable[Any]], **query: Any) -> tuple[list[Any], str]:
        items: list[Any] = []
        token, rv = None, ""
        while True:
            if raw:
                response = await fn(limit=500, _continue=token, _preload_content=False, **query)
                page = json.loads(await response.read())
                items += page.get("items") or []
                meta = page.get("metadata") or {}
                rv, token = rv or meta.get("resourceVersion"), meta.get("continue")
            else:
                page = await fn(limit=500, _continue=token, **query)
                items += [api.sanitize_for_serialization(item) for item in page.items]
                rv, token = rv or page.metadata.resource_version, page.metadata._continue
            if not token:
                return items, rv

    async def one(fn: Callable[..., Awaitable[Any]], on_list: Any, on_event: Any, **query: Any) -> None:
        items, rv = await list_all(fn, **query)
        await on_list(items, rv)
        stream = watch.Watch(return_type="object") if raw else watch.Watch()
        async with stream:
            async for event in stream.stream(
                fn, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=300, **query
            ):
                if event["type"] != "BOOKMARK":
                    await on_event(event["type"], event["raw_object"])

    probe.reset_clock()
    tasks = [
        asyncio.create_task(
            one(v1.list_pod_for_all_namespaces, probe.pods_list, probe.pod, field_selector=LIVE_PODS_SELECTOR)
        ),
        asyncio.create_task(one(v1.list_node, probe.nodes_list, probe.node)),
    ]
    assert probe.done is not None
    await probe.done.wait()
    for task in tasks:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.gather(*tasks)
    await api.close()


async def run_lightkube(args: argparse.Namespace, probe: Probe) -> None:
    from lightkube import ALL_NS, AsyncClient, KubeConfig
    from lightkube import operators as op
    from lightkube.resources.core_v1 import Node, Pod

    client = AsyncClient(config=KubeConfig.from_file(args.kubeconfig))
    live = {"status.phase": op.not_in(["Succeeded", "Failed"])}

    async def one(kind: Any, on_list: Any, on_event: Any, **where: Any) -> None:
        listing = client.list(kind, chunk_size=500, **where)
        items = [item.to_dict() async for item in listing]
        await on_list(items, listing.resourceVersion)
        async for event_type, obj in client.watch(kind, resource_version=listing.resourceVersion, **where):
            await on_event(event_type, obj.to_dict())

    probe.reset_clock()
    tasks = [
        asyncio.create_task(one(Pod, probe.pods_list, probe.pod, namespace=ALL_NS, fields=live)),
        asyncio.create_task(one(Node, probe.nodes_list, probe.node)),
    ]
    assert probe.done is not None
    await probe.done.wait()
    for task in tasks:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.gather(*tasks)
    await client.close()


def run_kopf(args: argparse.Namespace, probe: Probe) -> None:
    import logging

    import kopf

    from gangsched.model import LIVE_PODS_SELECTOR

    os.environ["KUBECONFIG"] = args.kubeconfig

    @kopf.on.login()
    def login(**kwargs: Any) -> Any:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False
        settings.scanning.disabled = True
        settings.watching.chunk_size = 500
        settings.watching.field_selectors["v1", "pods"] = LIVE_PODS_SELECTOR
        logging.getLogger("kopf").setLevel(logging.WARNING)

    @kopf.on.event("v1", "pods")
    async def on_pod(event: kopf.RawEvent, **_: Any) -> None:
        if event["type"] is None:
            await probe.pod_listed_one(event["object"])
        else:
            await probe.pod(event["type"], event["object"])

    @kopf.on.event("v1", "nodes")
    async def on_node(event: kopf.RawEvent, **_: Any) -> None:
        if event["type"] is None:
            await probe.node_listed_one(event["object"])
        else:
            await probe.node(event["type"], event["object"])

    def stop_when_done() -> None:
        probe.finished.wait()
        sys.stdout.flush()
        os._exit(0)

    logging.basicConfig(level=logging.WARNING)
    threading.Thread(target=stop_when_done, daemon=True).start()
    probe.reset_clock()
    kopf.run(standalone=True, clusterwide=True)


def child(args: argparse.Namespace) -> None:
    if args.option == "before":
        from gangsched import quantity
        from gangsched.model import common, dra

        common.parse_milli = dra.parse_milli = quantity._parse_milli  # type: ignore[attr-defined]
    intake, cache = _intake()
    if args.option == "kopf":
        # kopf's own loop; the probe's Event is not used.
        probe = Probe(args, intake, cache)
        run_kopf(args, probe)
        return
    probe = Probe(args, intake, cache)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    probe.done = asyncio.Event()
    if args.option in INFORMER_OPTIONS:
        lines = loop.run_until_complete(run_informer(args, probe))
        _say(phase="split", **replay(args, lines, intake))
    elif args.option == "lightkube":
        loop.run_until_complete(run_lightkube(args, probe))
    else:
        loop.run_until_complete(run_k8s_asyncio(args, probe, raw=args.option == "k8s-asyncio-raw"))
    loop.close()


# ---------------------------------------------------------------------------- the table


def _read_until(process: subprocess.Popen[str], phase: str, timeout: float) -> dict[str, Any]:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    result: dict[str, Any] = {}
    done = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("{"):
                fields = json.loads(line)
                if fields.get("phase") == phase:
                    result.update(fields)
                    break
        done.set()

    threading.Thread(target=read, daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())) or not result:
        raise TimeoutError(f"no '{phase}' from the {process.args[4]} process within {timeout:.0f} s")
    return result


def measure(cluster: Cluster, option: str, run: int) -> dict[str, Any]:
    args = cluster.args
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        option,
        "--kubeconfig",
        str(cluster.plane.kubeconfig_path),
        "--pods",
        str(args.pods),
        "--nodes",
        str(args.nodes),
        "--pod-events",
        str(args.pod_events),
        "--node-rounds",
        str(args.node_rounds),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO / "testing")])}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    row: dict[str, Any] = {"option": option}
    try:
        row.update(_read_until(process, "listed", args.timeout))
        cluster.patch_pods(run)
        row["digest_pods"] = _read_until(process, "pods", args.timeout)["digest"]
        cluster.patch_nodes(run)
        row.update(_read_until(process, "nodes", args.timeout))
        if option in INFORMER_OPTIONS:
            row.update(_read_until(process, "split", args.timeout))
        process.wait(timeout=60)
    except (TimeoutError, subprocess.TimeoutExpired) as exc:
        row["error"] = str(exc)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return row


def medians(runs: Sequence[Mapping[str, Any]], options: Sequence[str]) -> list[dict[str, Any]]:
    """One row per option: the median of each number over its runs that did not fail."""
    rows: list[dict[str, Any]] = []
    for option in options:
        good = [r for r in runs if r["option"] == option and "error" not in r]
        if not good:
            rows.append(next(r for r in runs if r["option"] == option))
            continue
        row: dict[str, Any] = {"option": option, "runs": len(good)}
        for key, value in good[0].items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                row[key] = statistics.median(r[key] for r in good)
        digests = {r.get("digest") for r in good}
        row["digest"] = digests.pop() if len(digests) == 1 else "differs between runs"
        rows.append(row)
    return rows


def table(rows: Sequence[Mapping[str, Any]], args: argparse.Namespace) -> Iterator[str]:
    ok = [r for r in rows if "error" not in r]
    by_option = {r["option"]: r for r in ok}
    base = by_option.get("before") or by_option.get("json")
    yield (
        f"{args.pods} pods ({args.pod_events} pod events), {args.nodes} nodes "
        f"({args.nodes * args.node_rounds} node events); CPU is process CPU time"
    )
    yield ""
    base_name = base["option"] if base else "-"
    yield (
        "| option | LIST both kinds: wall ms | LIST: CPU ms | CPU per pod event µs | (decode µs / intake µs) "
        f"| CPU per node event µs | total CPU s | peak RSS delta MiB | pod event vs {base_name} |"
    )
    yield "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    reference = (base or next((r for r in rows if "digest" in r), {})).get("digest")
    for r in rows:
        if "error" in r:
            yield f"| {r['option']} | failed: {r['error']} |||||||"
            continue
        split = f"{r['decode_us']:.1f} / {r['intake_us']:.1f}" if "decode_us" in r else "-"
        ratio = f"{r['pod_event_us'] / base['pod_event_us']:.2f}x" if base else ""
        flag = " (cache differs)" if r.get("digest") != reference else ""
        yield (
            f"| {r['option']}{flag} | {r['list_wall_ms']:,.0f} | {r['list_cpu_ms']:,.0f} | "
            f"{r['pod_event_us']:.0f} | {split} | {r['node_event_us']:.0f} | {r['total_cpu_s']:.2f} | "
            f"{r['peak_rss_delta_mib']:.0f} | {ratio} |"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pod-events", type=int, default=2_000)
    parser.add_argument("--node-rounds", type=int, default=2)
    parser.add_argument("--options", default=",".join(OPTIONS), help="comma-separated, in this order")
    parser.add_argument("--threads", type=int, default=12, help="threads creating and patching")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per phase of one option")
    parser.add_argument("--repeat", type=int, default=1, help="runs per option (the table shows medians)")
    parser.add_argument("--json", action="store_true", help="print every run's numbers as JSON too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.option = args.child
        child(args)
        return 0
    options = [o for o in args.options.split(",") if o]
    unknown = set(options) - set(OPTIONS)
    if unknown:
        parser.error(f"unknown options: {', '.join(sorted(unknown))}")
    runnable = [o for o in options if o not in NEEDS or importlib.util.find_spec(NEEDS[o]) is not None]
    for skipped in set(options) - set(runnable):
        print(f"# {skipped}: {NEEDS[skipped]} is not installed, skipped", file=sys.stderr)
    runs = []
    with Cluster(args) as cluster:
        cluster.populate()
        # Round after round of every option, so that drift in the machine's load is shared.
        for repeat in range(args.repeat):
            for index, option in enumerate(runnable):
                row = measure(cluster, option, repeat * len(runnable) + index)
                print(f"# {option}: {row}", file=sys.stderr, flush=True)
                runs.append(row)
    rows = medians(runs, runnable)
    print(
        f"# {datetime.date.today()}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"kube-apiserver v1.36.3 (dev control plane); median of {args.repeat} run(s) per option"
    )
    for line in table(rows, args):
        print(line)
    if args.json:
        print(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
