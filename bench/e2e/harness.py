"""Processes and I/O of the benchmark: the contestants, the load, the observer, /proc sampling.

One contestant at a time on the same nodes (see docs/benchmarks.md for why):

1. a fresh namespace; the contestant's scheduler started and warmed up (one pod bound and
   deleted, so caches are synced before the clock starts);
2. the observer (a separate process, so the load generator's threads cannot delay its
   timestamps) lists the namespace and watches its pods, recording when each is first seen
   bound or deleted;
3. the PodGroups, then every pod in workload order, created by `load_workers` threads over
   keep-alive connections with pre-serialised bodies, as fast as the apiserver takes them;
4. the run ends when every pod is bound, or the scheduler has settled (nothing bound for
   `quiet` seconds while it used under a quarter of a core; or nothing bound for 4 x `quiet`),
   or at `timeout`; the scheduler's CPU (from /proc/<pid>/stat, sampled every 0.2 s) and peak
   RSS (VmHWM) are read before it is stopped; gangs left pending are offered to gangsched's
   engine on the final state (`oracle`) to count the ones that would have fit;
5. the namespace is deleted (pods with grace 0), leaving the nodes empty for the next one.

The `bare` contestant (`BareBinder`, hack/bare-binder) schedules nothing: it binds each pod,
as soon as its informer shows it, to the next node of the pool round-robin, with
`concurrency` bindings in flight and no client-side rate limit. It gets gangsched's objects
(PodGroups it never reads) and is measured the same way; its nodes may end over-committed,
so the stranded-gang oracle does not run for it (`Recording.stranded` stays None) and the
report shows its placement and correctness rows as n/a. It has no preemption run.

The dra workload (`Workload.kind`): the nodes get the fake driver's ResourceSlices (8 GPU
devices each, published in parallel before the first run, removed after the last) and the
driver's DeviceClass; kube-controller-manager's resourceclaim controller, which the control
plane runs, creates each pod's claim from the namespace's ResourceClaimTemplate (created
first in every run) for both contestants. After a run, before its namespace goes, every
ResourceClaim and pod is listed for the DRA oracle (`oracle.claim_check`: no device in two
claims, every bound pod's claim allocated on its node and reserved for it).

The jobs workload (`Workload.kind == "jobs"`, gangsched only; needs kube-controller-manager):
step 3 becomes, per the run's feed (`workload.Feed`): the PodGroups and pods as above
(`podgroups`), or each gang's Jobs (`submit_jobs`: `workload.job_submission`; a launcher Job
after its workers' Job, whose UID it names; with `labelled-jobs` the gang's PodGroup first).
The Job controller creates the pods; the observer renames them `<Job>-<index>-<random>` ->
the workload's names (`workload.job_pod_names`) and records when each was first seen (its
creation, for the figures) and first seen with the pod-group label (gang formation). A run
ends when the scheduler settles counting pods still being created as activity; the Jobs
are deleted before the pods.

The preemption workload (`Workload.kind == "preemption"`): PriorityClasses `<pool>-low` and
`<pool>-high` are created with the nodes (deleted with them); kube-scheduler also gets the
`WorkloadAwarePreemption` gate. Step 3 becomes: the low gangs are created, the run waits until
they are all bound (the cluster is full: `Recording.saturated`), then one high gang is created
every `interval` seconds, and step 4 waits for the high gangs' pods only (the observer counts
them apart by their name prefix). The oracle does not run (evicted low gangs are not
recreated); instead the victims' `Preempted` Events are listed to attribute each victim to
its preemptor (`Recording.preemptors`).

The kubelet (`Options.agent`, `Options.kwok`; `--kubelet` of the command line): none (bound
pods stay Pending), the node agent (`fakenodes.NodeAgent`, a thread of this process), or KWOK
(bench/e2e/kwok.py), a process of its own started once the nodes exist, managing them (they are
created with its annotation and no Ready condition, and the bench waits until it has made
every one Ready) and their pods by its stages. Its CPU is sampled as the contestants' is, for
the results (`Bench.kubelet_usage`).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched.model import POD_GROUP_LABEL
from gangsched_testing import devcluster, dra, fakedra, fakenodes
from gangsched_testing.rawapi import request_json

from . import kwok, oracle
from .metrics import CpuSample, PodEvent, Recording, recording_to_json
from .workload import (
    GANGSCHED_API,
    JOBS_API,
    NATIVE_API,
    OWNER_UID,
    POOL_LABEL,
    SCHEDULER_NAMES,
    Feed,
    Flavour,
    Gang,
    JobSubmission,
    Workload,
    claim_template,
    group_manifest,
    job_pod_names,
    job_submission,
    node_devices,
    node_set,
    pod_manifest,
    priority_class_manifests,
    workload_pod_name,
)

NATIVE_GATES: Final = ("GenericWorkload", "GangScheduling", "TopologyAwareWorkloadScheduling")
# The preemption workload adds KEP-5710's gate (alpha in v1.36, needs GangScheduling).
PREEMPTION_GATE: Final = "WorkloadAwarePreemption"
HIGH_PREFIX: Final = "h"  # the preemption workload's high gangs (workload.Gang.name)
CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
_SAMPLE_SECONDS: Final = 0.2
_SETTLED_CORES: Final = 0.25


@dataclass(frozen=True, slots=True)
class Options:
    pool: str = "bench"
    concurrency: int = 64  # gangsched --concurrency (in-flight writes), and the bare binder's workers
    qps: int = 1000  # kube-scheduler clientConnection
    burst: int = 2000
    load_workers: int = 16
    foreign_pods: int = 0  # bound pods of another scheduler on the nodes, made first (`_foreign_pods`)
    quiet: float = 12.0
    timeout: float = 600.0
    gap: float = 2.0
    profile_dir: Path | None = None  # py-spy (gangsched) / go tool pprof (kube-scheduler) output
    profile_seconds: float = 20.0  # length of the kube-scheduler CPU profile
    agent: bool = False  # run fakenodes.NodeAgent (moves bound pods to Running)
    kwok: bool = False  # run KWOK instead (bench/e2e/kwok.py): it manages the nodes and their pods
    oracle: bool = True
    interval: float = 2.0  # preemption workload: seconds between two high gangs' creation
    # fifo-rounds workload: the node agent finishes each pod this long after starting it
    run_seconds: float | None = None
    log: Callable[[str], None] = print


# --------------------------------------------------------------------------------------------
# /proc


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child_pid(name: str) -> int | None:
    """A child process of this one whose command name is `name` (the control plane's)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text.rpartition(")")[2].split()[1])
        if comm == name[:15] and ppid == me:
            return int(entry)
    return None


class Sampler:
    """Samples CPU seconds of some processes every 0.2 s in a daemon thread."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self.samples: dict[str, list[CpuSample]] = {name: [] for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> Self:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        now = time.monotonic()
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                self.samples[name].append(CpuSample(now, proc_cpu_seconds(pid)))

    def _run(self) -> None:
        while not self._stop.wait(_SAMPLE_SECONDS):
            self._sample()

    def cores(self, name: str, *, over: float) -> float:
        """Average CPU use of `name` (in cores) over the last `over` seconds; 1.0 until known."""
        samples = list(self.samples[name])
        if len(samples) < 2 or samples[-1].t - samples[0].t < over:
            return 1.0
        last = samples[-1]
        first = next(s for s in reversed(samples) if last.t - s.t >= over)
        return (last.cpu_seconds - first.cpu_seconds) / (last.t - first.t)


# --------------------------------------------------------------------------------------------
# HTTP


free_port = devcluster.free_port


@dataclass(frozen=True, slots=True)
class Endpoint:
    """How to reach the apiserver as admin; picklable, for the observer process."""

    host: str
    port: int
    ca: str
    cert: str
    key: str

    @classmethod
    def of(cls, cp: devcluster.ControlPlane) -> Endpoint:
        host, _, port = cp.server.removeprefix("https://").rpartition(":")
        pki = cp.directory / "pki"
        return cls(host, int(port), str(cp.ca_file), str(pki / "admin.crt"), str(pki / "admin.key"))

    def pool(self, size: int) -> urllib3.HTTPSConnectionPool:
        return urllib3.HTTPSConnectionPool(
            self.host,
            self.port,
            maxsize=size,
            block=True,
            ca_certs=self.ca,
            cert_file=self.cert,
            key_file=self.key,
            retries=False,
        )


_JSON: Final = {"Content-Type": "application/json", "Accept": "application/json"}


def apiserver_requests(endpoint: Endpoint) -> dict[str, float]:
    """apiserver_request_total summed by "VERB resource[/subresource]"."""
    pool = endpoint.pool(1)
    text = pool.request("GET", "/metrics").data.decode()
    pool.close()
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{labels.get('verb', '')} {resource}"
        totals[key] = totals.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    out = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: v for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v > 0}


# --------------------------------------------------------------------------------------------
# The observer (its own process)


@dataclass(frozen=True, slots=True)
class _ObserverArgs:
    endpoint: Endpoint
    namespace: str
    prefix: str = HIGH_PREFIX
    # The jobs workload: `<Job>-<index>` -> the workload's pod name (`workload.job_pod_names`),
    # so that events name the pods as the workload does.
    names: Mapping[str, str] | None = None


def _observe(
    args: _ObserverArgs,
    conn: Connection,
    bound: Synchronized,  # type: ignore[type-arg]
    marked: Synchronized,  # type: ignore[type-arg]
    last_bind: Synchronized,  # type: ignore[type-arg]
    last_seen: Synchronized,  # type: ignore[type-arg]
    finished: Synchronized,  # type: ignore[type-arg]
    last_finish: Synchronized,  # type: ignore[type-arg]
    ready: EventType,
    stop: EventType,
) -> None:
    """Watch the namespace's pods; send ([(t, pod, kind, node)], {pod: first seen}, failures)
    through `conn` when told to stop."""
    pool = args.endpoint.pool(2)
    path = f"/api/v1/namespaces/{args.namespace}/pods"
    listing = json.loads(pool.request("GET", path, headers=_JSON).data)
    rv = listing["metadata"]["resourceVersion"]
    records: list[tuple[float, str, str, str]] = []
    seen: set[str] = set()
    ended: set[str] = set()
    first_seen: dict[str, float] = {}
    labelled: dict[str, float] = {}
    failure: list[str] = []
    names = args.names

    def rename(name: str) -> str:
        return name if names is None else workload_pod_name(name, names)

    def watch() -> None:
        nonlocal rv
        while not stop.is_set():
            query = f"?watch=true&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion={rv}"
            response = pool.urlopen(
                "GET",
                path + query,
                headers=_JSON,
                preload_content=False,
                timeout=urllib3.Timeout(connect=10, read=None),
            )
            if response.status != 200:
                failure.append(f"watch: HTTP {response.status}")
                ready.set()
                return
            ready.set()
            for line in response:
                now = time.monotonic()
                # Unbound pods are most events and carry nothing we need but their creation:
                # skip parsing the others.
                if (
                    b'"nodeName"' not in line
                    and not line.startswith(_WATCH_KEPT)
                    and (names is None or _LABEL not in line)
                ):
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                rv = meta.get("resourceVersion", rv)
                name = rename(meta.get("name", ""))
                kind = event.get("type")
                if kind == "ERROR":
                    failure.append(f"watch: {obj.get('message')}")
                    return
                if name not in first_seen:
                    first_seen[name] = now
                    last_seen.value = now
                if name not in labelled and POD_GROUP_LABEL in (meta.get("labels") or {}):
                    labelled[name] = now
                if kind == "DELETED":
                    records.append((now, name, "deleted", ""))
                    continue
                node = (obj.get("spec") or {}).get("nodeName")
                if node and name not in seen:
                    seen.add(name)
                    records.append((now, name, "bound", node))
                    with bound.get_lock():
                        bound.value += 1
                    if name.startswith(args.prefix):
                        with marked.get_lock():
                            marked.value += 1
                    last_bind.value = now
                phase = (obj.get("status") or {}).get("phase")
                if node and phase in _TERMINAL and name not in ended:
                    ended.add(name)
                    records.append((now, name, "finished", node))
                    with finished.get_lock():
                        finished.value += 1
                    last_finish.value = now

    def guarded_watch() -> None:
        # An exception must not end the count silently (it would under-report bound pods).
        try:
            watch()
        except Exception as exc:
            failure.append(f"watch: {type(exc).__name__}: {exc}")
            ready.set()

    thread = threading.Thread(target=guarded_watch, daemon=True)
    thread.start()
    stop.wait()
    conn.send((records, first_seen, labelled, failure))
    conn.close()


# The watch lines the observer parses besides those of bound pods: a pod's first (ADDED, when
# it is first seen: its creation) and its deletion.
_WATCH_KEPT: Final = (b'{"type":"ADDED"', b'{"type":"DELETED"')
# ... and, with Job pods, those with gangsched's pod-group label: when each was labelled.
_LABEL: Final = f'"{POD_GROUP_LABEL}"'.encode()
_TERMINAL: Final = ("Succeeded", "Failed")


class Observer:
    """The pod watch in a child process; `stop()` returns what it saw.

    `bound` counts pods first seen bound; `marked` those of them named with `HIGH_PREFIX`
    (the preemption workload's high gangs, whose bindings end its run); `last_bind` and
    `last_seen` are when a pod was last first seen bound, and first seen at all; `finished`
    counts pods first seen Succeeded or Failed, the last of them at `last_finish`. `names`
    renames Job pods (`_ObserverArgs.names`).
    """

    def __init__(self, endpoint: Endpoint, namespace: str, *, names: Mapping[str, str] | None = None) -> None:
        ctx = mp.get_context("spawn")
        self._recv, send = ctx.Pipe(duplex=False)
        self.bound = ctx.Value("q", 0)
        self.marked = ctx.Value("q", 0)
        self.last_bind = ctx.Value("d", 0.0)
        self.last_seen = ctx.Value("d", 0.0)
        self.finished = ctx.Value("q", 0)
        self.last_finish = ctx.Value("d", 0.0)
        self.labelled: dict[str, float] = {}
        self._ready = ctx.Event()
        self._stop = ctx.Event()
        self._proc = ctx.Process(
            target=_observe,
            args=(
                _ObserverArgs(endpoint, namespace, names=names),
                send,
                self.bound,
                self.marked,
                self.last_bind,
                self.last_seen,
                self.finished,
                self.last_finish,
                self._ready,
                self._stop,
            ),
            name="bench-observer",
            daemon=True,
        )
        self._proc.start()
        if not self._ready.wait(30):
            self._proc.kill()
            raise RuntimeError("the observer did not start watching within 30 s")

    def stop(self) -> tuple[list[PodEvent], dict[str, float]]:
        """The events seen, and when each pod was first seen; `labelled` then holds when each
        pod was first seen with the pod-group label (pods renamed by `names` only)."""
        self._stop.set()
        records, first_seen, self.labelled, failure = self._recv.recv()
        self._proc.join(10)
        if failure:
            raise RuntimeError(f"observer: {failure[0]}")
        return [PodEvent(t=t, pod=pod, kind=kind, node=node) for t, pod, kind, node in records], first_seen


# --------------------------------------------------------------------------------------------
# Contestants


class Contestant(devcluster.Child):
    """A scheduler subprocess: started, warmed up, measured, stopped."""

    flavour: Flavour
    stop_grace = 15.0

    def wait_ready(self, timeout: float) -> None:
        """Overridden where the process has a readiness signal of its own."""


def gangsched_args(
    namespace: str, *, concurrency: int, liveness_port: int, extra: Sequence[str] = ()
) -> list[str]:
    """The command line of a gangsched contestant (bench.e2e, bench/startup.py)."""
    return [
        sys.executable,
        "-m",
        "gangsched.cli",
        "run",
        "--namespace",
        namespace,
        "--scheduler-name",
        SCHEDULER_NAMES["gangsched"],
        "--concurrency",
        str(concurrency),
        "--liveness-port",
        str(liveness_port),
        *extra,
    ]


class Gangsched(Contestant):
    flavour: Flavour = "gangsched"

    def __init__(
        self,
        cp: devcluster.ControlPlane,
        *,
        namespace: str,
        concurrency: int,
        out: Path,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self.log_path = out / "gangsched.log"
        args = gangsched_args(namespace, concurrency=concurrency, liveness_port=self.port, extra=extra_args)
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig_path)}
        self.proc = devcluster.spawn(args, log=self.log_path, env=env)

    def wait_ready(self, timeout: float) -> None:
        """The liveness endpoint answers once kopf runs (the warm-up pod then proves the loop).

        Its `cycles` count is not waited for: kopf caches probe results for 10 s or more.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"gangsched exited with {self.proc.returncode}:\n{self.tail()}")
            with contextlib.suppress(OSError, ValueError):
                url = f"http://127.0.0.1:{self.port}/healthz"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    json.loads(resp.read())
                    return
            time.sleep(0.1)
        raise TimeoutError(f"gangsched not ready after {timeout}s:\n{self.tail()}")


def bare_binder_binary(*, environ: Mapping[str, str] | None = None) -> Path | None:
    """Where hack/bare-binder/build.sh puts the bare binder: $GANGSCHED_K8S_BIN, else the cache
    directory of the control-plane build; None when it is not there."""
    return devcluster.tool_binary("bare-binder", environ=environ)


class BareBinder(Contestant):
    """hack/bare-binder: every pod of its scheduler name in `namespace` bound to the next node
    of the pool (round-robin over the node names), `workers` bindings in flight. No scheduling."""

    flavour: Flavour = "bare"

    def __init__(
        self, cp: devcluster.ControlPlane, *, namespace: str, workers: int, pool: str, out: Path
    ) -> None:
        binary = bare_binder_binary()
        if binary is None:
            raise RuntimeError("no bare-binder binary: run `make bare-binder` (or `make control-plane`)")
        self.log_path = out / "bare-binder.log"
        args = [
            str(binary),
            f"-kubeconfig={cp.kubeconfig_path}",
            f"-scheduler-name={SCHEDULER_NAMES['bare']}",
            f"-namespace={namespace}",
            f"-node-selector={POOL_LABEL}={pool}",
            f"-workers={workers}",
        ]
        self.proc = devcluster.spawn(args, log=self.log_path)


def native_config(*, kubeconfig: Path, qps: int, burst: int, dra: bool = False) -> dict[str, Any]:
    """kube-scheduler's KubeSchedulerConfiguration: one profile, `native-gang`.

    Bin-packing (MostAllocated, GPUs weighted 5) is the documented setting for GPU clusters
    and what TopologyPlacement's placement scorer reuses; the stock LeastAllocated on
    cpu/memory would spread 1-GPU pods over every node and leave no whole node for 8-GPU pods.
    With `dra` the pods request no extended GPUs: MostAllocated on cpu and memory (3 CPU and
    24 GiB per GPU pod) packs the same way. DynamicResources is in the default plugin set
    (DRA is GA and on by default in v1.36), so nothing else changes.
    """
    gpu = [] if dra else [{"name": "nvidia.com/gpu", "weight": 5}]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
        "profiles": [
            {
                "schedulerName": SCHEDULER_NAMES["native"],
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [
                                    *gpu,
                                    {"name": "cpu", "weight": 1},
                                    {"name": "memory", "weight": 1},
                                ],
                            }
                        },
                    }
                ],
            }
        ],
    }


class Native(Contestant):
    flavour: Flavour = "native"

    def __init__(
        self,
        cp: devcluster.ControlPlane,
        *,
        qps: int,
        burst: int,
        out: Path,
        dra: bool = False,
        preemption: bool = False,
    ) -> None:
        binary = cp.binaries.kube_scheduler
        if binary is None:
            raise RuntimeError("no kube-scheduler binary next to kube-apiserver: run `make control-plane`")
        config = out / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                native_config(kubeconfig=cp.kubeconfig_path, qps=qps, burst=burst, dra=dra), sort_keys=False
            )
        )
        self.log_path = out / "kube-scheduler.log"
        self.binary = binary
        self.port = free_port()
        args = [
            str(binary),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            "--feature-gates="
            + ",".join(
                f"{gate}=true" for gate in (*NATIVE_GATES, *([PREEMPTION_GATE] if preemption else []))
            ),
            # Loopback only: lets `go tool pprof` fetch a CPU profile without credentials.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/debug/pprof/*",
        ]
        self.proc = devcluster.spawn(args, log=self.log_path)


# --------------------------------------------------------------------------------------------
# Loading


def create_all(
    endpoint: Endpoint,
    items: Sequence[tuple[str, bytes, bool]],
    *,
    workers: int,
    done: dict[str, float],
    groups: dict[str, float] | None = None,
) -> None:
    """POST every (path, body, is_pod) in order from `workers` threads; `done[pod]` = when it
    returned, and `groups[name]` for the other objects (PodGroups)."""
    pool = endpoint.pool(workers)
    lock = threading.Lock()
    position = 0
    errors: list[str] = []

    def worker() -> None:
        nonlocal position
        while not errors:
            with lock:
                if position >= len(items):
                    return
                index = position
                position += 1
            path, body, is_pod = items[index]
            response = pool.urlopen("POST", path, body=body, headers=_JSON)
            if response.status != 201:
                errors.append(f"POST {path}: HTTP {response.status}: {response.data[:300]!r}")
                return
            if is_pod:
                done[_name_of(body)] = time.monotonic()
            elif groups is not None:
                groups[_name_of(body)] = time.monotonic()

    threads = [threading.Thread(target=worker, name=f"bench-load-{i}") for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pool.close()
    if errors:
        raise RuntimeError(errors[0])


def submit_jobs(
    endpoint: Endpoint,
    submissions: Sequence[JobSubmission],
    namespace: str,
    *,
    workers: int,
    done: dict[str, float],
) -> None:
    """Create each gang's objects in order from `workers` threads, one thread per gang: its
    PodGroup if any, its Job, then its launcher Job (which may need that Job's UID); `done[gang]`
    = when its first object's create returned."""
    path = f"/apis/{JOBS_API}/namespaces/{namespace}/jobs"
    group_path = _group_path("gangsched", namespace)
    items = [
        (
            s.gang.name,
            None if s.pod_group is None else json.dumps(s.pod_group).encode(),
            json.dumps(s.job).encode(),
            None if s.launcher is None else json.dumps(s.launcher),
        )
        for s in submissions
    ]
    pool = endpoint.pool(workers)
    lock = threading.Lock()
    position = 0
    errors: list[str] = []

    def post(body: bytes, to: str = path) -> dict[str, Any]:
        response = pool.urlopen("POST", to, body=body, headers=_JSON)
        if response.status != 201:
            errors.append(f"POST {to}: HTTP {response.status}: {response.data[:300]!r}")
            return {}
        created: dict[str, Any] = json.loads(response.data)
        return created

    def worker() -> None:
        nonlocal position
        while not errors:
            with lock:
                if position >= len(items):
                    return
                index = position
                position += 1
            gang, group, job, launcher = items[index]
            if group is not None:
                if not post(group, group_path):
                    return
                done[gang] = time.monotonic()
            created = post(job)
            if not created:
                return
            done.setdefault(gang, time.monotonic())
            if launcher is not None:
                post(launcher.replace(OWNER_UID, created["metadata"]["uid"]).encode())

    threads = [threading.Thread(target=worker, name=f"bench-jobs-{i}") for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pool.close()
    if errors:
        raise RuntimeError(errors[0])


_NAME = re.compile(rb'"name":\s*"([^"]+)"')
_PREEMPTED_BY = re.compile(r"Preempted by \S+ (\S+) on node")
PRIORITY_CLASSES: Final = "/apis/scheduling.k8s.io/v1/priorityclasses"


def _name_of(body: bytes) -> str:
    match = _NAME.search(body)
    return match.group(1).decode() if match else ""


def _group_path(flavour: Flavour, namespace: str) -> str:
    api = NATIVE_API if flavour == "native" else GANGSCHED_API  # bare: gangsched's, never read
    return f"/apis/{api}/namespaces/{namespace}/podgroups"


# --------------------------------------------------------------------------------------------
# One run


@dataclass(slots=True)
class Bench:
    """A control plane with the benchmark's nodes; runs contestants on it one after the other."""

    cp: devcluster.ControlPlane
    workload: Workload
    options: Options
    out: Path
    api: client.ApiClient = field(init=False)
    endpoint: Endpoint = field(init=False)
    _agent: fakenodes.NodeAgent | None = field(init=False, default=None)
    _kwok: kwok.Kwok | None = field(init=False, default=None)
    _kwok_sampler: Sampler | None = field(init=False, default=None)
    _kwok_usage: dict[str, float] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.api = self.cp.api_client()
        self.endpoint = Endpoint.of(self.cp)

    @property
    def preemption(self) -> bool:
        return self.workload.kind == "preemption"

    @property
    def jobs(self) -> bool:
        return self.workload.kind == "jobs"

    @property
    def fifo(self) -> bool:
        return self.workload.kind == "fifo-rounds"

    def contestant_name(
        self, flavour: Flavour, *, feed: Feed | None = None, variant: str | None = None
    ) -> str:
        """A run's name in recordings and tables: `variant` when given (gangsched with other
        arguments, e.g. `gangsched-strict`), else the flavour; with the jobs workload, the feed
        (`workload.Feed`, default `jobs`)."""
        if variant is not None:
            return variant
        if not self.jobs:
            return flavour
        return feed or "jobs"

    @property
    def _node_set(self) -> fakenodes.NodeSet:
        spec = node_set(self.workload.topology, pool=self.options.pool, dra=self.workload.dra)
        return kwok.kwok_nodes(spec) if self.options.kwok else spec

    def _node_names(self) -> list[str]:
        return [m["metadata"]["name"] for m in fakenodes.node_manifests(spec=self._node_set)]

    def __enter__(self) -> Self:
        log = self.options.log
        if self.workload.dra or self.jobs:
            if not self.cp.controller_manager:
                raise RuntimeError(
                    f"the {self.workload.kind} workload needs kube-controller-manager (`make control-plane`)"
                )
            self.cp.wait_controller_manager()
        started = time.monotonic()
        names = fakenodes.create_nodes(api=self.api, spec=self._node_set, parallelism=16)
        log(f"created {len(names)} nodes in {time.monotonic() - started:.1f}s")
        devcluster.apply_crd(self.api)
        if self.preemption:
            for body in priority_class_manifests(self.options.pool):
                request_json(self.api, "POST", PRIORITY_CLASSES, body=body)
        if self.workload.dra:
            started = time.monotonic()
            fakedra.ensure_device_classes(self.api, node_devices())
            self._per_node_chunk(lambda chunk: fakedra.publish(self.api, node_devices(), chunk), names)
            log(f"published {len(names)} nodes' ResourceSlices in {time.monotonic() - started:.1f}s")
        if self.options.kwok:
            self._start_kwok(names)
        self._create_foreign_pods(names)
        if self.options.agent:
            self._agent = fakenodes.NodeAgent(
                api_client=self.cp.api_client(), run_seconds=self.options.run_seconds
            )
            self._agent.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._agent is not None:
            self._agent.stop()
        names = self._node_names()
        if self._kwok is not None:
            self._stop_kwok(names)
        if self.preemption:
            for body in priority_class_manifests(self.options.pool):
                with contextlib.suppress(ApiException):
                    request_json(self.api, "DELETE", f"{PRIORITY_CLASSES}/{body['metadata']['name']}")
        if self.workload.dra:
            self._per_node_chunk(lambda chunk: fakedra.unpublish(self.api, chunk), names)
        self._delete_foreign_pods()
        fakenodes.delete_nodes(api=self.api, names=names)
        self.api.close()  # type: ignore[no-untyped-call]

    def _start_kwok(self, names: Sequence[str]) -> None:
        """KWOK, started once the nodes have their status (its node-initialize would otherwise
        race create_nodes' status patch), then waited for until it made every node Ready."""
        if self.options.agent:
            raise ValueError("the node agent and KWOK would both run the pods: one kubelet at a time")
        self._kwok = kwok.Kwok(self.cp, out=self.out, run_seconds=self.options.run_seconds)
        self._kwok_sampler = Sampler({"kwok": self._kwok.pid}).__enter__()
        try:
            took = self._kwok.wait_ready(self.api, names)
        except BaseException:
            self._stop_kwok(names)  # __exit__ does not run when __enter__ fails
            raise
        self._kwok_usage["nodes_ready_s"] = round(took, 2)
        self.options.log(f"kwok (pid {self._kwok.pid}): {len(names)} nodes Ready in {took:.1f}s")

    def _stop_kwok(self, names: Sequence[str]) -> None:
        assert self._kwok is not None
        if self._kwok_sampler is not None:
            self._kwok_sampler.__exit__(None, None, None)
        with contextlib.suppress(OSError):
            self._kwok_usage["peak_rss_mib"] = round(proc_peak_rss_mib(self._kwok.pid), 1)
        self._kwok.stop()
        kwok.delete_leases(self.api, names)

    def kubelet_usage(self, recordings: Sequence[Recording]) -> dict[str, Any]:
        """What the kubelet cost, for the results: KWOK's CPU seconds in each run's window
        (first pod created to the end of the watch, the quiet wait included: hence also per
        pod it saw bound), its peak RSS and how long it took to make the nodes Ready; empty
        without KWOK (the agent is a thread of this process)."""
        if self._kwok_sampler is None:
            return {}
        samples = self._kwok_sampler.samples["kwok"]
        runs: dict[str, list[dict[str, float]]] = {}
        for rec in recordings:
            start = min(rec.created.values(), default=rec.end)
            cpu = kwok.cpu_between(samples, start, rec.end)
            bound = sum(1 for e in rec.events if e.kind == "bound")
            runs.setdefault(rec.contestant, []).append(
                {
                    "cpu_seconds": round(cpu, 2),
                    "cores": round(cpu / max(rec.end - start, 1e-9), 3),
                    "cpu_ms_per_bound_pod": round(1000 * cpu / bound, 2) if bound else 0.0,
                }
            )
        return {"version": kwok.KWOK_VERSION, **self._kwok_usage, "runs": runs}

    @staticmethod
    def _per_node_chunk(action: Callable[[list[str]], object], names: Sequence[str]) -> None:
        """`action` over 16 chunks of `names` in parallel (the driver's calls are one node at a
        time, three requests each: 1,000 nodes in sequence would take half a minute)."""
        chunks = [list(names[i::16]) for i in range(16) if names[i::16]]
        with ThreadPoolExecutor(max_workers=16, thread_name_prefix="bench-dra") as pool:
            for _ in pool.map(action, chunks):
                pass

    def run(
        self,
        flavour: Flavour,
        *,
        tag: str = "",
        feed: Feed | None = None,
        variant: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> Recording:
        """One run of `flavour`. With the jobs workload, `feed` (`workload.Feed`, default
        `jobs`) says how the gangs are submitted; only gangsched takes the jobs workload.
        `variant` names a run of gangsched started with `extra_args` (`contestant_name`)."""
        opts, log = self.options, self.options.log
        if extra_args and flavour != "gangsched":
            raise ValueError(f"extra arguments are gangsched's, not {flavour}'s: {list(extra_args)}")
        if flavour == "bare" and self.preemption:
            raise ValueError("the bare binder never preempts: it has no run of the preemption workload")
        name = self.contestant_name(flavour, feed=feed, variant=variant)
        as_jobs = name in ("jobs", "labelled-jobs")
        if self.jobs and flavour != "gangsched":
            raise ValueError(
                "only gangsched makes gangs of Jobs: kube-scheduler needs WorkloadWithJob (another "
                "control plane), and the bare binder schedules nothing"
            )
        namespace = f"bench-{name}{'-' + tag if tag else ''}-{os.getpid() % 10000}"
        out = self.out / f"{name}{'-' + tag if tag else ''}"
        out.mkdir(parents=True, exist_ok=True)
        request_json(self.api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        contestant: Contestant
        if flavour == "gangsched":
            contestant = Gangsched(
                self.cp, namespace=namespace, concurrency=opts.concurrency, out=out, extra_args=extra_args
            )
        elif flavour == "bare":
            contestant = BareBinder(
                self.cp, namespace=namespace, workers=opts.concurrency, pool=opts.pool, out=out
            )
        else:
            contestant = Native(
                self.cp,
                qps=opts.qps,
                burst=opts.burst,
                out=out,
                dra=self.workload.dra,
                preemption=self.preemption,
            )
        profiler: subprocess.Popen[bytes] | None = None
        try:
            contestant.wait_ready(60)
            self._warm_up(contestant, namespace)
            log(f"{name}: ready (pid {contestant.pid})")
            recording = Recording(contestant=name)
            # Job by job, as controllers submit them: a gang's PodGroup, then its pods.
            dra_on = self.workload.dra
            if dra_on:  # before the clock starts, as a cluster has its templates before its jobs
                template_path = f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaimtemplates"
                request_json(self.api, "POST", template_path, body=claim_template(namespace))
            items = [] if as_jobs else self._items(self.workload.low, flavour, namespace)
            submissions = (
                [
                    job_submission(g, pool=opts.pool, labelled=name == "labelled-jobs")
                    for g in self.workload.gangs
                ]
                if as_jobs
                else []
            )
            pods = self.workload.pods
            apiserver = child_pid("kube-apiserver")
            controllers = child_pid("kube-controller-manager")
            pids = {
                "scheduler": contestant.pid,
                **({"apiserver": apiserver} if apiserver else {}),
                **({"controllers": controllers} if controllers else {}),
            }
            names = job_pod_names(self.workload) if as_jobs else None
            observer = Observer(self.endpoint, namespace, names=names)
            before = apiserver_requests(self.endpoint)
            profiler = self._profile(contestant, out)
            with Sampler(pids) as sampler:
                if as_jobs:
                    submit_jobs(
                        self.endpoint,
                        submissions,
                        namespace,
                        workers=opts.load_workers,
                        done=recording.submitted,
                    )
                    log(f"{name}: {len(submissions)} gangs submitted as Jobs")
                    last_create = max(recording.submitted.values())
                elif self.fifo:
                    # Gang after gang, each whole before the next begins: creation order is
                    # queue order (timestamps are to the second; names break ties in order).
                    for gang in self.workload.gangs:
                        gang_items = self._items([gang], flavour, namespace)
                        create_all(
                            self.endpoint,
                            gang_items,
                            workers=min(opts.load_workers, len(gang_items)),
                            done=recording.created,
                            groups=recording.submitted,
                        )
                    log(f"{name}: {len(recording.created)} pods created, gang after gang")
                    last_create = max(recording.created.values())
                else:
                    create_all(
                        self.endpoint,
                        items,
                        workers=opts.load_workers,
                        done=recording.created,
                        groups=recording.submitted,
                    )
                    log(f"{name}: {len(recording.created)} pods created")
                    last_create = max(recording.created.values())
                if self.preemption:
                    self._preemption_load(contestant, observer, sampler, recording, namespace, last_create)
                elif self.fifo:
                    # Until every pod has finished; a round runs `run_seconds` without a binding,
                    # so the scheduler is settled only after that much longer.
                    self._wait(
                        contestant,
                        observer,
                        sampler,
                        total=pods,
                        last_create=last_create,
                        counter=observer.finished,
                        quiet=opts.quiet + (opts.run_seconds or 0.0),
                    )
                else:
                    self._wait(contestant, observer, sampler, total=pods, last_create=last_create)
                recording.end = time.monotonic()
                recording.peak_rss_mib = proc_peak_rss_mib(contestant.pid)
            recording.events, recording.seen = observer.stop()
            recording.labelled = observer.labelled
            if as_jobs:  # the Job controller created them: when the watch first showed each
                mine = set(names.values()) if names else set()
                recording.created = {pod: t for pod, t in recording.seen.items() if pod in mine}
                log(f"{name}: {len(recording.created)} pods created by the Job controller")
            recording.requests = delta(apiserver_requests(self.endpoint), before)
            recording.cpu = sampler.samples["scheduler"]
            recording.apiserver_cpu = sampler.samples.get("apiserver", [])
            recording.controllers_cpu = sampler.samples.get("controllers", [])
            pods_listed = self._list(f"/api/v1/namespaces/{namespace}/pods")
            if names is not None:
                for pod in pods_listed:
                    pod["metadata"]["name"] = workload_pod_name(pod["metadata"]["name"], names)
            if dra_on:
                claims = self._list(f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims")
                check = oracle.claim_check(claims, pods_listed)
                recording.devices_twice = check.devices_twice
                recording.bound_without_device = check.bound_without_device
                recording.claims_allocated = check.claims_allocated
                log(
                    f"{name}: {len(claims)} claims, {check.claims_allocated} allocated, "
                    f"{check.devices_twice} devices in two claims, "
                    f"{check.bound_without_device} bound pods without their device"
                    + (f"; e.g. {'; '.join(check.examples)}" if check.examples else "")
                )
            if self.preemption:
                recording.preemptors = self._preemptors(flavour, namespace)
            # Evicted low gangs are not recreated: nothing to strand. The bare binder's nodes may be
            # over-committed: no free capacity to offer a gang.
            # fifo-rounds: every pod has finished (or the run timed out): nothing is left to offer.
            elif opts.oracle and flavour != "bare" and not self.fifo:
                started = time.monotonic()
                bound = self._bound(pods_listed)
                recording.stranded = len(oracle.stranded_gangs(self.workload, pool=opts.pool, bound=bound))
                log(f"{name}: stranded-gang check took {time.monotonic() - started:.1f}s")
            if not contestant.alive():
                raise RuntimeError(f"{flavour} died during the run:\n{contestant.tail()}")
            # Saved before the cleanup, which can fail on its own (it is not part of the run).
            (out / "recording.json").write_text(json.dumps(recording_to_json(recording)))
            return recording
        finally:
            if profiler is not None:
                self._stop_profile(profiler, contestant)
            contestant.stop()
            started = time.monotonic()
            self._empty(namespace)
            devcluster.delete_namespace(self.api, name=namespace)
            self._wait_gone(namespace)
            log(f"{name}: namespace deleted in {time.monotonic() - started:.1f}s")

    def _items(
        self, gangs: Sequence[Gang], flavour: Flavour, namespace: str
    ) -> list[tuple[str, bytes, bool]]:
        """(path, body, is_pod) to create, job by job: a gang's PodGroup, then its pods."""
        opts = self.options
        items: list[tuple[str, bytes, bool]] = []
        pod_path = f"/api/v1/namespaces/{namespace}/pods"
        for gang in gangs:
            group = group_manifest(gang, flavour, pool=opts.pool)
            if group is not None:
                items.append((_group_path(flavour, namespace), json.dumps(group).encode(), False))
            for pod in gang.pods:
                manifest = pod_manifest(gang, pod, flavour, pool=opts.pool, dra=self.workload.dra)
                items.append((pod_path, json.dumps(manifest).encode(), True))
        return items

    def _preemption_load(
        self,
        contestant: Contestant,
        observer: Observer,
        sampler: Sampler,
        recording: Recording,
        namespace: str,
        last_create: float,
    ) -> None:
        """The preemption workload after its low gangs were created: wait until they are all
        bound (the cluster is full), then create one high gang every `interval` seconds and
        wait until every high pod is bound or the scheduler settles."""
        opts, log, flavour = self.options, self.options.log, contestant.flavour
        low = sum(len(g.pods) for g in self.workload.low)
        self._wait(contestant, observer, sampler, total=low, last_create=last_create)
        recording.saturated = time.monotonic()
        recording.low_bound_at_saturation = int(observer.bound.value)
        log(f"{flavour}: saturated, {recording.low_bound_at_saturation}/{low} low pods bound")
        high = self.workload.high
        started = time.monotonic()
        for i, gang in enumerate(high):
            delay = started + i * opts.interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            items = self._items([gang], flavour, namespace)
            create_all(
                self.endpoint, items, workers=min(opts.load_workers, len(items)), done=recording.created
            )
        log(f"{flavour}: {len(high)} high gangs created")
        last_high = max(recording.created[g.pod_name(p)] for g in high for p in g.pods)
        total = sum(len(g.pods) for g in high)
        self._wait(contestant, observer, sampler, total=total, last_create=last_high, counter=observer.marked)

    def _preemptors(self, flavour: Flavour, namespace: str) -> dict[str, str]:
        """victim pod -> preemptor PodGroup, from the victims' `Preempted` Events.

        kube-scheduler (events.k8s.io) names the preemptor in `related` and by UID in the
        note ("Preempted by PodGroup <uid> on node cluster"); gangsched by name in the message
        ("Preempted by PodGroup <ns>/<name> on node <node>").
        """
        events = self._list(f"/api/v1/namespaces/{namespace}/events")
        groups = self._list(_group_path(flavour, namespace))
        by_uid = {g["metadata"]["uid"]: g["metadata"]["name"] for g in groups}
        out: dict[str, str] = {}
        for event in events:
            if event.get("reason") != "Preempted":
                continue
            victim = (event.get("involvedObject") or {}).get("name") or ""
            related = event.get("related") or {}
            message = event.get("message") or ""
            who = related.get("name") or ""
            if not who:
                match = _PREEMPTED_BY.search(message)
                if match:
                    who = by_uid.get(match.group(1), match.group(1).rpartition("/")[2])
            if victim and who:
                out[victim] = who
        return out

    def _profile(self, contestant: Contestant, out: Path) -> subprocess.Popen[bytes] | None:
        """py-spy on gangsched (stopped with SIGINT), or Go's pprof on kube-scheduler (fixed length)."""
        directory = self.options.profile_dir
        if directory is None:
            return None
        if isinstance(contestant, BareBinder):
            self.options.log("bare: not profiled")
            return None
        directory.mkdir(parents=True, exist_ok=True)
        if isinstance(contestant, Native):
            go = shutil.which("go")
            if go is None:
                self.options.log("go not found: no kube-scheduler profile")
                return None
            url = f"https+insecure://127.0.0.1:{contestant.port}/debug/pprof/profile"
            target = directory / "kube-scheduler.pprof.pb.gz"
            seconds = str(round(self.options.profile_seconds))
            args = [go, "tool", "pprof", "-proto", "-seconds", seconds, "-output", str(target), url]
            # PPROF_TMPDIR: pprof also keeps a copy of every profile there (default ~/pprof).
            return devcluster.spawn(args, log=out / "pprof.log", env={**os.environ, "PPROF_TMPDIR": str(out)})
        py_spy = shutil.which("py-spy")
        if py_spy is None:
            self.options.log("py-spy not found: no profile (pip install py-spy)")
            return None
        target = directory / "gangsched.pyspy.txt"
        # --gil: only the thread holding the GIL is sampled, i.e. where Python CPU goes.
        args = [py_spy, "record", "--pid", str(contestant.pid), "--rate", "250", "--format", "raw"]
        args += ["--output", str(target), "--threads", "--gil", "--nonblocking"]
        return devcluster.spawn(args, log=out / "py-spy.log")

    def _stop_profile(self, profiler: subprocess.Popen[bytes], contestant: Contestant) -> None:
        if isinstance(contestant, Gangsched):
            profiler.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            profiler.wait(self.options.profile_seconds + 30)

    def _warm_up(self, contestant: Contestant, namespace: str) -> None:
        """One pod through the scheduler (bound, then deleted): caches are synced once it is bound."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "warm-up"},
            "spec": {
                "schedulerName": SCHEDULER_NAMES[contestant.flavour],
                "nodeSelector": {POOL_LABEL: self.options.pool},
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "10m"}}}],
            },
        }
        path = f"/api/v1/namespaces/{namespace}/pods"
        request_json(self.api, "POST", path, body=pod)
        deadline = time.monotonic() + 60
        while not request_json(self.api, "GET", f"{path}/warm-up")["spec"].get("nodeName"):
            if not contestant.alive():
                raise RuntimeError(f"{contestant.flavour} exited:\n{contestant.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{contestant.flavour} did not bind the warm-up pod:\n{contestant.tail()}")
            time.sleep(0.05)
        request_json(self.api, "DELETE", f"{path}/warm-up", body={"gracePeriodSeconds": 0})
        while True:
            try:
                request_json(self.api, "GET", f"{path}/warm-up")
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(0.05)

    def _wait(
        self,
        contestant: Contestant,
        observer: Observer,
        sampler: Sampler,
        *,
        total: int,
        last_create: float,
        counter: Synchronized | None = None,  # type: ignore[type-arg]
        quiet: float | None = None,
    ) -> None:
        """Until every pod is bound, or the scheduler has settled: no binding for `quiet` seconds
        while it used under a quarter of a core (it is not still catching up), or no binding for
        4 x `quiet` whatever it does (a scheduler retrying unschedulable gangs forever).
        `counter` counts the bound pods (default: every pod the observer saw bound); `quiet`
        overrides the option's. A pod finishing counts as activity, as a binding does."""
        opts = self.options
        quiet = opts.quiet if quiet is None else quiet
        count = observer.bound if counter is None else counter
        started = time.monotonic()
        last_report = started
        while True:
            time.sleep(0.2)
            now = time.monotonic()
            bound = int(count.value)
            if bound >= total:
                return
            if not contestant.alive():
                raise RuntimeError(f"{contestant.flavour} exited:\n{contestant.tail()}")
            # The Job controller creates pods after the last Job is submitted: a pod just seen
            # is work the scheduler has not had its chance at.
            last = max(
                float(observer.last_bind.value),
                float(observer.last_seen.value),
                float(observer.last_finish.value),
                last_create,
            )
            idle = now - last
            if idle >= 4 * quiet or (
                idle >= quiet and sampler.cores("scheduler", over=quiet / 2) < _SETTLED_CORES
            ):
                return
            if now - started > opts.timeout:
                opts.log(f"{contestant.flavour}: timeout after {opts.timeout:.0f}s")
                return
            if now - last_report >= 5:
                last_report = now
                opts.log(
                    f"{contestant.flavour}: {bound}/{total} pods "
                    + ("finished" if counter is observer.finished else "bound")
                )

    @staticmethod
    def _bound(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        return {
            item["metadata"]["name"]: item["spec"]["nodeName"]
            for item in pods
            if item["spec"].get("nodeName") and not item["metadata"].get("deletionTimestamp")
        }

    def _list(self, path: str) -> list[dict[str, Any]]:
        """Every item of a collection, in pages of 2,000."""
        out: list[dict[str, Any]] = []
        token = ""
        while True:
            query: dict[str, str | int | bool] = {"limit": 2000}
            if token:
                query["continue"] = token
            page = request_json(self.api, "GET", path, query=query)
            out += page["items"]
            token = page["metadata"].get("continue") or ""
            if not token:
                return out

    def _empty(self, namespace: str) -> None:
        """Delete the pods (and claims) first, without delete_namespace's 30 s client timeout:
        10,000 pods and their claims take the apiserver longer than that in one request."""
        options = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
        # Jobs first, so that the Job controller does not create their pods again.
        collections = [f"/apis/{JOBS_API}/namespaces/{namespace}/jobs"] if self.jobs else []
        collections.append(f"/api/v1/namespaces/{namespace}/pods")
        if self.workload.dra:
            collections.append(f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims")
        for path in collections:
            with contextlib.suppress(ApiException):
                request_json(self.api, "DELETE", path, body=options, timeout=600)

    def _wait_gone(self, namespace: str) -> None:
        # 10,000 claims of the dra workload lose their finalizers one request at a time.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                request_json(self.api, "GET", f"/api/v1/namespaces/{namespace}")
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(0.2)
        raise TimeoutError(f"namespace {namespace} still there after 300 s")

    # ----------------------------------------------------------------------------------------
    # Foreign pods (issue 27, bench/e2e/foreign.py): `options.foreign_pods` bound pods of another
    # scheduler in namespace <pool>-foreign, spread over the nodes before any contestant starts.
    # The observer watches only a run's namespace, so they are never counted as the workload's.

    @property
    def foreign_namespace(self) -> str:
        return f"{self.options.pool}-foreign"

    def _create_foreign_pods(self, nodes: Sequence[str]) -> None:
        from . import foreign  # it imports this module

        count, log = self.options.foreign_pods, self.options.log
        if count <= 0:
            return
        warning = foreign.room_warning(count, len(nodes))
        if warning:
            log(f"warning: {warning}; the stranded-gang oracle does not count foreign pods")
        created = foreign.create_foreign_pods(
            self.endpoint,
            nodes,
            stop=count,
            namespace=self.foreign_namespace,
            workers=self.options.load_workers,
            log=log,
        )
        log(f"created {count} foreign pods in {created.seconds:.1f}s ({created.rate:.0f}/s)")

    def _delete_foreign_pods(self) -> None:
        """The pods first, without delete_namespace's 30 s client timeout (100,000 pods take
        the apiserver longer than that), then the namespace."""
        from . import foreign

        if self.options.foreign_pods > 0:
            foreign.delete_foreign_pods(self.endpoint, self.foreign_namespace)
            devcluster.delete_namespace(self.api, name=self.foreign_namespace)


@contextlib.contextmanager
def control_plane() -> Iterator[devcluster.ControlPlane]:
    """A control plane for the command line (the test uses the session's)."""
    with devcluster.ControlPlane() as cp:
        yield cp
