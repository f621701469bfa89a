"""Start-up, memory and binding speed on a big cluster: each contestant started on a cluster that
already holds its backlog and N pods of another scheduler (issues 15 and 27).

One dev control plane (etcd + kube-apiserver v1.36.3, no kube-controller-manager) gets
`--nodes` fake 8-GPU nodes (the bench's topology: racks of 10, blocks of 10 racks). Then, for
each N of `--sweep` (or the one `--foreign-pods`), in ascending order on the same control plane:

1. the foreign pods are grown to N: only the difference is created (bench/e2e/foreign.py:
   bound pods of `default-scheduler`, ReplicaSet-like, 100m CPU and 128Mi each, round-robin
   over the nodes, in a namespace of their own);
2. every contestant in turn (`--contestants`, default gangsched then bare), each alone:
   a. its backlog is created in a fresh namespace of its own, before it starts: `--backlog
      250x8` (issue 27's: 250 gangs of 8 one-GPU pods, each gang Required in one rack, a
      PodGroup then its pods; the bare binder gets the same objects under its scheduler name)
      or `--backlog workload` (issue 15's: the bench's gang mix, `--oversubscription` x the
      GPUs);
   b. an observer process (bench/e2e/harness.Observer) lists the namespace and watches its
      pods, time-stamping each pod the moment the watch first shows it bound;
   c. the contestant's process is started (the clock's zero) and runs until every backlog
      pod is bound, or nothing was bound for `--quiet` s, or `--timeout`;
   d. once the Events it queued behind its Bindings are written (one per pod, gangsched also
      one per gang; or none came for 2 s, or `--drain` s), before it is stopped: the Events in
      its namespace, its peak RSS (VmHWM) and CPU seconds from /proc, and for gangsched
      `gangsched_lease_renewal_lag_max_seconds` from its /metrics ("n/a" when the operator
      does not export it);
   e. its namespace is deleted, backlog and Events with it: the next contestant finds
      exactly N foreign pods and its own backlog, as this one did. Left in place, a bound
      backlog would be 2,000 more pods for the next one to list and, for the bare binder,
      GPUs over-committed round-robin that gangsched would then have to place around.

The contestants:

- `gangsched`: `python -m gangsched.cli run --namespace NS --concurrency C`, leader election
  on (a Lease of its own per run, so no run waits for the last one's to expire), /metrics on.
- `bare`: hack/bare-binder with `-events -all-pods`: binds every pod round-robin, no
  scheduling, then posts one Scheduled Event per pod as gangsched does (after the Binding,
  never holding one up), and lists and watches every pod of the cluster as a scheduler must
  (without managedFields, as kube-scheduler keeps them). The apiserver's floor for a
  scheduler that does gangsched's writes and holds the cluster's pods.

Figures per run (clock: CLOCK_MONOTONIC, shared by this process and the observer):

  first bind          process start -> the watch first shows a backlog pod bound
  pods/s              backlog pods / (last bind - first bind): the issue's binding rate
  pods/s from start   backlog pods / (last bind - process start): start-up included
  listed              gangsched: start -> its "cache primed" log line (every watch listed);
                      bare: its informers' "ready in" (from client creation)
  decided             gangsched: caches listed -> its first decision (its own log line)
  CPU s, peak RSS     /proc/<pid>/stat utime+stime, /proc/<pid>/status VmHWM, at the end
  lease lag max       gangsched's gauge at the end, seconds

Writes <out>/results-N<nodes>.json, <out>/table-N<nodes>.md and <out>/startup-N<nodes>.png
(pods/s, first bind and peak RSS against N, both contestants). `--retable` redraws the last
two from the first. docs/benchmarks.md "Big clusters: pods of other schedulers (issue 27)".

Run: python bench/startup.py --nodes 5000 --sweep 0,10000,40000,100000
     python bench/startup.py --nodes 1000 --foreign-pods 40000 --contestants gangsched
     python bench/startup.py --nodes 1000 --backlog workload --contestants gangsched   (issue 15)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "testing"):  # bench.e2e, gangsched_testing
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.e2e import foreign, report  # noqa: E402
from bench.e2e.harness import (  # noqa: E402
    Endpoint,
    Observer,
    bare_binder_binary,
    child_pid,
    create_all,
    gangsched_args,
    proc_cpu_seconds,
    proc_peak_rss_mib,
)
from bench.e2e.workload import (  # noqa: E402
    GANGSCHED_API,
    POOL_LABEL,
    SCHEDULER_NAMES,
    Flavour,
    Topology,
    Workload,
    generate,
    generate_backlog,
    group_manifest,
    node_set,
    pod_manifest,
)

from gangsched_testing import devcluster, fakenodes  # noqa: E402

Contestant = Literal["gangsched", "bare"]
CONTESTANTS: Final[tuple[Contestant, ...]] = ("gangsched", "bare")
LEASE_LAG_METRIC: Final = "gangsched_lease_renewal_lag_max_seconds"
# The bare contestant's flags: the yardstick, "a bare binder that posts one Event per pod",
# holding every pod of the cluster as a scheduler does.
BARE_FLAGS: Final = ("-events", "-all-pods")
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
_BARE_READY = re.compile(r"bare-binder: ready in ([\d.]+)(ms|s|µs|us|m)")
_BACKLOG = re.compile(r"^(\d+)x(\d+)$")


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass(frozen=True, slots=True)
class Config:
    """What one invocation runs; `points` are the foreign-pod counts, ascending."""

    nodes: int
    points: tuple[int, ...] = (0,)
    backlog: str = "250x8"  # GANGSxPODS (Required rack, `backlog_gpus` each) or "workload"
    backlog_gpus: int = 1
    oversubscription: float = 1.0  # --backlog workload
    seed: int = 1
    contestants: tuple[Contestant, ...] = CONTESTANTS
    repeat: int = 1  # runs of each contestant at each point, the order alternating
    concurrency: int = 64  # gangsched --concurrency, the bare binder's -workers
    load_workers: int = 16
    quiet: float = 10.0
    timeout: float = 300.0
    drain: float = 10.0
    pool: str = "bench"
    rack_size: int = 10
    racks_per_block: int = 10
    cleanup: bool = False  # delete everything made at the end (tests share a control plane)
    plot: bool = True  # the PNG (imports matplotlib)
    # py-spy on each gangsched run (raw collapsed stacks, GIL holder only), into this directory:
    # where start-up's CPU goes (`python -m bench.e2e.profile <file>` sums it up).
    profile: Path | None = None
    log: Callable[[str], None] = _log

    @property
    def topology(self) -> Topology:
        return Topology(nodes=self.nodes, rack_size=self.rack_size, racks_per_block=self.racks_per_block)

    def workload(self) -> Workload:
        if self.backlog == "workload":
            return generate(self.topology, seed=self.seed, oversubscription=self.oversubscription)
        match = _BACKLOG.match(self.backlog)
        if not match:
            raise ValueError(f"--backlog: GANGSxPODS (e.g. 250x8) or 'workload', not {self.backlog!r}")
        gangs, size = int(match.group(1)), int(match.group(2))
        return generate_backlog(self.topology, gangs=gangs, size=size, gpus=self.backlog_gpus)


@dataclass(slots=True)
class Run:
    """One contestant at one point. Times in seconds from its process start unless said."""

    contestant: str
    foreign: int
    backlog: int
    repeat: int = 0  # which run of this contestant at this point
    bound: int = 0
    first_bind_s: float = math.nan
    last_bind_s: float = math.nan
    listed_s: float = math.nan
    decided_s: float = math.nan  # after listing (gangsched only)
    pods_per_s: float = math.nan  # backlog / (last - first bind)
    pods_per_s_from_start: float = math.nan  # backlog / (last bind - start)
    cpu_s: float = math.nan
    peak_rss_mib: float = math.nan
    lease_lag_max_s: float | None = None
    ended: str = ""  # all bound, quiet, timeout
    drain_s: float = math.nan  # after the run ended, until its Events were written (`_drain`)
    events: int = 0  # Events in its namespace when it was stopped (bare: one per pod)
    # wall time of each phase of this run
    backlog_create_s: float = math.nan
    run_s: float = math.nan
    cleanup_s: float = math.nan


@dataclass(slots=True)
class Point:
    """Everything at one foreign-pod count."""

    foreign: int
    created: int = 0  # foreign pods created to reach it
    create_s: float = 0.0
    apiserver_rss_mib: float = math.nan
    etcd_rss_mib: float = math.nan
    runs: list[Run] = field(default_factory=list)

    @property
    def create_rate(self) -> float:
        return self.created / self.create_s if self.create_s > 0 else math.nan


# --------------------------------------------------------------------------------------------
# One run


def _vm_rss_mib(pid: int | None) -> float:
    if pid is None:
        return math.nan
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return math.nan


def _log_seconds(line: str) -> float:
    """A gangsched log line's wall-clock time (its `[YYYY-MM-DD HH:MM:SS,mmm]` prefix)."""
    match = _STAMP.match(line)
    if not match:
        return math.nan
    stamp = time.strptime(match.group(1)[:19], "%Y-%m-%d %H:%M:%S")
    return time.mktime(stamp) + int(match.group(1)[20:]) / 1000


def lease_lag(text: str) -> float | None:
    """The largest sample of `LEASE_LAG_METRIC` in a Prometheus exposition, None without one."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(LEASE_LAG_METRIC) and not line.startswith(f"{LEASE_LAG_METRIC}_")
    ]
    return max(values) if values else None


def _scrape_lease_lag(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return lease_lag(resp.read().decode())
    except OSError:
        return None


def _backlog_items(
    workload: Workload, contestant: Contestant, namespace: str, pool: str
) -> list[tuple[str, bytes, bool]]:
    """(path, body, is_pod): each gang's PodGroup, then its pods (bench/e2e's order)."""
    flavour: Flavour = contestant  # the bench's flavours: gangsched, bare
    pods = f"/api/v1/namespaces/{namespace}/pods"
    groups = f"/apis/{GANGSCHED_API}/namespaces/{namespace}/podgroups"
    items: list[tuple[str, bytes, bool]] = []
    for gang in workload.gangs:
        group = group_manifest(gang, flavour, pool=pool)
        if group is not None:
            items.append((groups, json.dumps(group).encode(), False))
        for pod in gang.pods:
            items.append((pods, json.dumps(pod_manifest(gang, pod, flavour, pool=pool)).encode(), True))
    return items


def bare_binder_problem() -> str | None:
    """Why the bare contestant cannot run: no binary, or one built before `BARE_FLAGS` existed."""
    binary = bare_binder_binary()
    if binary is None:
        return "no bare-binder binary: run `make bare-binder`"
    usage = subprocess.run([str(binary), "-h"], capture_output=True, text=True, timeout=30, check=False)
    missing = [f for f in BARE_FLAGS if f"  {f}" not in usage.stderr + usage.stdout]
    if missing:
        return f"{binary} has no {' '.join(missing)}: rebuild it with `make bare-binder`"
    return None


def _command(
    contestant: Contestant, cp: devcluster.ControlPlane, cfg: Config, namespace: str, lease: str
) -> tuple[list[str], int]:
    """The contestant's command line, and gangsched's metrics port (0 for bare)."""
    if contestant == "bare":
        binary = bare_binder_binary()
        if binary is None:
            raise RuntimeError("no bare-binder binary: run `make bare-binder`")
        return [
            str(binary),
            f"-kubeconfig={cp.kubeconfig_path}",
            f"-scheduler-name={SCHEDULER_NAMES['bare']}",
            f"-namespace={namespace}",
            f"-node-selector={POOL_LABEL}={cfg.pool}",
            f"-workers={cfg.concurrency}",
            *BARE_FLAGS,
        ], 0
    metrics = devcluster.free_port()
    extra = [
        "--metrics-port",
        str(metrics),
        "--leader-elect",
        "--lease-namespace",
        "default",
        "--lease-name",
        lease,
    ]
    return gangsched_args(
        namespace, concurrency=cfg.concurrency, liveness_port=devcluster.free_port(), extra=extra
    ), metrics


def _profile(pid: int, directory: Path | None, tag: str) -> subprocess.Popen[bytes] | None:
    """py-spy attached to the gangsched process `pid` from its start (as bench/e2e's profile)."""
    if directory is None:
        return None
    # Installed with this Python (a venv's bin need not be on PATH).
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        _log("py-spy not found: no profile (pip install -e '.[bench]')")
        return None
    directory.mkdir(parents=True, exist_ok=True)
    args = [py_spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--gil"]
    args += ["--output", str(directory / f"{tag}.pyspy.txt"), "--threads", "--nonblocking"]
    return devcluster.spawn(args, log=directory / f"{tag}.py-spy.log")


def _listed(contestant: Contestant, log_text: str, begin_wall: float) -> tuple[float, float]:
    """(listed, decided) from the contestant's log; NaN where it says nothing."""
    lines = log_text.splitlines()
    if contestant == "bare":
        match = next((m for m in map(_BARE_READY.search, lines) if m), None)
        if match is None:
            return math.nan, math.nan
        scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "m": 60.0}[match.group(2)]
        return float(match.group(1)) * scale, math.nan
    primed = next((_log_seconds(x) for x in lines if "cache primed" in x), math.nan)
    decided = next((re.search(r"first decision ([\d.]+) s", x) for x in lines if "first decision" in x), None)
    return primed - begin_wall, float(decided.group(1)) if decided else math.nan


def run_one(
    cp: devcluster.ControlPlane,
    cfg: Config,
    contestant: Contestant,
    workload: Workload,
    foreign_pods: int,
    out: Path,
    *,
    repeat: int = 0,
) -> Run:
    """One contestant on the cluster as it is: backlog, start, watch, measure, stop, clean up."""
    log, endpoint, api = cfg.log, Endpoint.of(cp), cp.api_client()
    tag = f"{contestant}-n{foreign_pods}" + (f"-r{repeat}" if cfg.repeat > 1 else "")
    namespace = f"{cfg.pool}-{tag}"
    run = Run(contestant=contestant, foreign=foreign_pods, backlog=workload.pods, repeat=repeat)
    try:
        started = time.monotonic()
        foreign.ensure_namespace(endpoint, namespace)
        items = _backlog_items(workload, contestant, namespace, cfg.pool)
        create_all(endpoint, items, workers=cfg.load_workers, done={})
        run.backlog_create_s = time.monotonic() - started
        log(f"{tag}: backlog of {workload.pods} pods created in {run.backlog_create_s:.1f}s")
        observer = Observer(endpoint, namespace)
        command, metrics_port = _command(
            contestant, cp, cfg, namespace, lease=f"{cfg.pool}-{tag}-{os.getpid()}"
        )
        log_path = out / f"{tag}.log"
        begin_wall, begin = time.time(), time.monotonic()
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig_path)}
        proc = devcluster.spawn(command, log=log_path, env=env)
        profiler = _profile(proc.pid, cfg.profile, tag) if contestant == "gangsched" else None
        try:
            run.ended = _wait(proc, observer, cfg, total=workload.pods, begin=begin, log_path=log_path)
            groups = sum(g.is_group for g in workload.gangs)
            expected = workload.pods + (groups if contestant == "gangsched" else 0)
            run.drain_s, run.events = _drain(endpoint, namespace, expected=expected, limit=cfg.drain)
            run.peak_rss_mib = proc_peak_rss_mib(proc.pid)
            run.cpu_s = proc_cpu_seconds(proc.pid)
            if metrics_port:
                run.lease_lag_max_s = _scrape_lease_lag(metrics_port)
        finally:
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    profiler.wait(30)
            devcluster.terminate(proc)
            events, _ = observer.stop()
        run.run_s = time.monotonic() - begin
        binds = sorted(e.t for e in events if e.kind == "bound")
        run.bound = len(binds)
        if binds:
            run.first_bind_s, run.last_bind_s = binds[0] - begin, binds[-1] - begin
            span = binds[-1] - binds[0]
            run.pods_per_s = len(binds) / span if span > 0 else math.nan
            run.pods_per_s_from_start = len(binds) / (binds[-1] - begin)
        run.listed_s, run.decided_s = _listed(contestant, log_path.read_text(errors="replace"), begin_wall)
        started = time.monotonic()
        devcluster.delete_namespace(api, name=namespace)
        run.cleanup_s = time.monotonic() - started
        log(
            f"{tag}: {run.bound}/{run.backlog} bound ({run.ended}), listed {run.listed_s:.2f}s, first bind "
            f"{run.first_bind_s:.2f}s, last {run.last_bind_s:.2f}s, {run.pods_per_s:.0f} pods/s "
            f"({run.pods_per_s_from_start:.0f} from start), CPU {run.cpu_s:.1f}s, peak RSS "
            f"{run.peak_rss_mib:.0f} MiB, lease lag max {_lag(run.lease_lag_max_s)}, {run.events} Events "
            f"(drained {run.drain_s:.1f}s); namespace deleted in {run.cleanup_s:.1f}s"
        )
        return run
    finally:
        api.close()  # type: ignore[no-untyped-call]


def _wait(
    proc: subprocess.Popen[bytes],
    observer: Observer,
    cfg: Config,
    *,
    total: int,
    begin: float,
    log_path: Path,
) -> Literal["all bound", "quiet", "timeout"]:
    """Until every backlog pod is bound, nothing was bound for `quiet` s once binding began,
    or `timeout` s after the start."""
    last_report = begin
    while True:
        time.sleep(0.1)
        now = time.monotonic()
        bound = int(observer.bound.value)
        if bound >= total:
            return "all bound"
        if proc.poll() is not None:
            raise RuntimeError(f"the contestant exited with {proc.returncode}: see {log_path}")
        if bound and now - float(observer.last_bind.value) >= cfg.quiet:
            return "quiet"
        if now - begin >= cfg.timeout:
            return "timeout"
        if now - last_report >= 10:
            last_report = now
            cfg.log(f"{log_path.stem}: {bound}/{total} bound after {now - begin:.0f}s")


def _drain(endpoint: Endpoint, namespace: str, *, expected: int, limit: float) -> tuple[float, int]:
    """After the last bind a contestant still posts the Events it queued behind its Bindings
    (both post them in the background, a quarter of their writes in flight at most): wait until
    `expected` Events are in the namespace (one per pod; gangsched also one per gang), or none
    came for 2 s, or `limit` s, so that its CPU seconds and peak RSS include that work and the
    next run does not share the apiserver with it. Returns (seconds waited, Events seen)."""
    began = changed = time.monotonic()
    events = foreign.count_pods(endpoint, namespace, resource="events")
    while events < expected and time.monotonic() - began < limit and time.monotonic() - changed < 2.0:
        time.sleep(0.25)
        now = foreign.count_pods(endpoint, namespace, resource="events")
        if now != events:
            events, changed = now, time.monotonic()
    return time.monotonic() - began, events


# --------------------------------------------------------------------------------------------
# The sweep


def sweep(cp: devcluster.ControlPlane, cfg: Config, out: Path) -> dict[str, Any]:
    """Every point of `cfg`, every contestant at each; returns the results (as written to JSON)."""
    log = cfg.log
    out.mkdir(parents=True, exist_ok=True)
    if list(cfg.points) != sorted(set(cfg.points)) or cfg.points[0] < 0:
        raise ValueError(f"foreign-pod counts must grow: {cfg.points}")
    problem = bare_binder_problem() if "bare" in cfg.contestants else None
    if problem:
        raise RuntimeError(problem)
    workload = cfg.workload()
    warning = foreign.room_warning(cfg.points[-1], cfg.nodes)
    if warning:
        log(f"warning: {warning}")
    endpoint = Endpoint.of(cp)
    api = cp.api_client()
    phases: dict[str, float] = {}
    points: list[Point] = []
    began = time.monotonic()
    names: list[str] = []
    try:
        started = time.monotonic()
        names = fakenodes.create_nodes(api=api, spec=node_set(cfg.topology, pool=cfg.pool), parallelism=16)
        devcluster.apply_crd(api)
        phases["nodes_s"] = time.monotonic() - started
        log(
            f"{len(names)} nodes created in {phases['nodes_s']:.1f}s; backlog: {_backlog_line(cfg, workload)}"
        )
        have = 0
        for count in cfg.points:
            point = Point(foreign=count, created=count - have)
            created = foreign.create_foreign_pods(
                endpoint,
                names,
                start=have,
                stop=count,
                namespace=_foreign_namespace(cfg),
                workers=cfg.load_workers,
                log=log,
            )
            point.create_s = created.seconds
            have = count
            point.apiserver_rss_mib = _vm_rss_mib(child_pid("kube-apiserver"))
            point.etcd_rss_mib = _vm_rss_mib(child_pid("etcd"))
            if created.count:
                log(
                    f"N={count}: {created.count} foreign pods created in {created.seconds:.1f}s "
                    f"({created.rate:.0f}/s)"
                )
            for i in range(cfg.repeat):
                for contestant in cfg.contestants if i % 2 == 0 else cfg.contestants[::-1]:
                    point.runs.append(run_one(cp, cfg, contestant, workload, count, out, repeat=i))
            points.append(point)
        phases["total_s"] = time.monotonic() - began
        control_plane = {
            "apiserver_peak_rss_mib": _peak_rss(child_pid("kube-apiserver")),
            "etcd_peak_rss_mib": _peak_rss(child_pid("etcd")),
        }
    finally:
        if cfg.cleanup:
            started = time.monotonic()
            foreign.delete_foreign_pods(endpoint, _foreign_namespace(cfg))
            devcluster.delete_namespace(api, name=_foreign_namespace(cfg))
            fakenodes.delete_nodes(api=api, names=names)
            log(f"cleaned up in {time.monotonic() - started:.1f}s")
        api.close()  # type: ignore[no-untyped-call]
    results: dict[str, Any] = {
        "nodes": cfg.nodes,
        "topology": cfg.topology.describe(),
        "backlog": _backlog_line(cfg, workload),
        "backlog_pods": workload.pods,
        "contestants": list(cfg.contestants),
        "repeat": cfg.repeat,
        "bare_flags": list(BARE_FLAGS),
        "concurrency": cfg.concurrency,
        "machine": report.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "phases": phases,
        "control_plane": _no_nan(control_plane),
        "points": [_point_json(p) for p in points],
    }
    write_outputs(results, out, with_plot=cfg.plot)
    return results


def _peak_rss(pid: int | None) -> float:
    return math.nan if pid is None else proc_peak_rss_mib(pid)


def _foreign_namespace(cfg: Config) -> str:
    return f"{cfg.pool}-foreign"


def _backlog_line(cfg: Config, workload: Workload) -> str:
    if cfg.backlog == "workload":
        return (
            f"the bench workload, {len(workload.gangs)} gangs, {workload.pods} pods "
            f"({cfg.oversubscription}x GPUs)"
        )
    gangs, size = cfg.backlog.split("x")
    return f"{gangs} gangs of {size} pods of {cfg.backlog_gpus} GPU, Required rack ({workload.pods} pods)"


def _point_json(point: Point) -> dict[str, Any]:
    data = asdict(point)
    data["create_rate"] = point.create_rate
    clean: dict[str, Any] = _no_nan(data)
    return clean


def _no_nan(value: Any) -> Any:
    """NaN (a figure that does not apply or was not measured) as null: strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Table and plot (from the results JSON only, so that --retable can redo them)


def _lag(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _num(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b == 0:
        return "n/a"
    return f"{a / b:.2f}"


SUMMARISED: Final = ("pods_per_s", "pods_per_s_from_start", "first_bind_s", "peak_rss_mib")


def _runs(results: dict[str, Any], contestant: str) -> dict[int, dict[str, Any]]:
    """foreign pods -> the contestant's figures there: the median of its runs (the largest lease
    lag: "never late" is about every run)."""
    out: dict[int, dict[str, Any]] = {}
    for point in results["points"]:
        runs = [r for r in point["runs"] if r["contestant"] == contestant]
        if not runs:
            continue
        summary: dict[str, Any] = {"runs": len(runs)}
        for key in SUMMARISED:
            values = [r[key] for r in runs if r[key] is not None and not math.isnan(r[key])]
            summary[key] = statistics.median(values) if values else None
        lags = [r["lease_lag_max_s"] for r in runs if r["lease_lag_max_s"] is not None]
        summary["lease_lag_max_s"] = max(lags) if lags else None
        out[point["foreign"]] = summary
    return out


def table(results: dict[str, Any]) -> str:
    """The issue's table (rows N) and, below it, every run's figures and phase times."""
    gs, bare = _runs(results, "gangsched"), _runs(results, "bare")
    base = gs.get(0, {}).get("pods_per_s")
    repeat = int(results.get("repeat") or 1)
    lines = [
        f"{results['topology']}; backlog: {results['backlog']}; bare binder "
        f"`{' '.join(results['bare_flags'])}`; concurrency {results['concurrency']}"
        + (
            f"; medians of {repeat} runs each, the order alternating (lease lag: the largest)."
            if repeat > 1
            else "."
        ),
        "",
        f"Machine: {results['machine']}, {results['date']}.",
        "",
        "| foreign pods | gangsched pods/s | gangsched first bind | gangsched peak RSS "
        "| lease renewal lag max | bare pods/s | bare first bind | bare peak RSS | gangsched / bare "
        "| gangsched / gangsched at N=0 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for point in results["points"]:
        n = point["foreign"]
        g, b = gs.get(n, {}), bare.get(n, {})
        lines.append(
            f"| {n:,} | {_num(g.get('pods_per_s'))} | {_num(g.get('first_bind_s'), 's', 2)} "
            f"| {_num(g.get('peak_rss_mib'), 'MiB')} | {_lag(g.get('lease_lag_max_s')) if g else 'n/a'} "
            f"| {_num(b.get('pods_per_s'))} | {_num(b.get('first_bind_s'), 's', 2)} "
            f"| {_num(b.get('peak_rss_mib'), 'MiB')} | {_ratio(g.get('pods_per_s'), b.get('pods_per_s'))} "
            f"| {_ratio(g.get('pods_per_s'), base)} |"
        )
    lines += [
        "",
        "| foreign pods | contestant | # | bound / backlog | ended | listed | decided after listing "
        "| first bind | last bind | pods/s | pods/s from start | CPU | peak RSS | Events | drained "
        "| backlog created in | run wall time | cleanup |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for point in results["points"]:
        for r in point["runs"]:
            lines.append(
                f"| {point['foreign']:,} | {r['contestant']} | {r.get('repeat', 0) + 1} "
                f"| {r['bound']} / {r['backlog']} | {r['ended']} "
                f"| {_num(r['listed_s'], 's', 2)} | {_num(r['decided_s'], 's', 2)} "
                f"| {_num(r['first_bind_s'], 's', 2)} | {_num(r['last_bind_s'], 's', 2)} "
                f"| {_num(r['pods_per_s'])} | {_num(r['pods_per_s_from_start'])} "
                f"| {_num(r['cpu_s'], 's', 1)} "
                f"| {_num(r['peak_rss_mib'], 'MiB')} | {r['events']} | {_num(r['drain_s'], 's', 1)} "
                f"| {_num(r['backlog_create_s'], 's', 1)} "
                f"| {_num(r['run_s'], 's', 1)} | {_num(r['cleanup_s'], 's', 1)} |"
            )
    lines += [
        "",
        "| foreign pods | created to reach it | in | rate | kube-apiserver RSS | etcd RSS |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for point in results["points"]:
        lines.append(
            f"| {point['foreign']:,} | {point['created']:,} | {_num(point['create_s'], 's', 1)} "
            f"| {_num(point['create_rate'], '/s')} | {_num(point['apiserver_rss_mib'], 'MiB')} "
            f"| {_num(point['etcd_rss_mib'], 'MiB')} |"
        )
    phases = results.get("phases") or {}
    lines += ["", "Phases: " + ", ".join(f"{k.removesuffix('_s')} {v:.0f} s" for k, v in phases.items())]
    peaks = results.get("control_plane") or {}
    if peaks:
        lines[-1] += (
            f"; peak RSS kube-apiserver {_num(peaks.get('apiserver_peak_rss_mib'), 'MiB')}, "
            f"etcd {_num(peaks.get('etcd_peak_rss_mib'), 'MiB')}."
        )
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    """pods/s, first bind and peak RSS against the foreign pods, one line per contestant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("pods_per_s", "pods bound per second\n(backlog / (last - first bind))"),
        ("first_bind_s", "first bind after start (s)"),
        ("peak_rss_mib", "peak RSS (MiB)"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), dpi=110)
    for contestant in results["contestants"]:
        runs = _runs(results, contestant)
        xs = sorted(runs)
        label = report.LABELS.get(contestant, contestant) + (
            f" ({' '.join(results['bare_flags'])})" if contestant == "bare" else ""
        )
        for ax, (key, _) in zip(axes, panels, strict=True):
            ys = [math.nan if runs[x][key] is None else runs[x][key] for x in xs]
            ax.plot(
                [x / 1000 for x in xs],
                ys,
                marker="o",
                color=report.COLOURS.get(contestant, "tab:gray"),
                label=label,
            )
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set_xlabel("bound pods of another scheduler (thousands)")
        ax.set_ylabel(title)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"{results['topology']}; backlog {results['backlog']}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def write_outputs(results: dict[str, Any], out: Path, *, with_plot: bool = True) -> None:
    stem = f"N{results['nodes']}"
    (out / f"results-{stem}.json").write_text(json.dumps(results, indent=2))
    text = table(results)
    (out / f"table-{stem}.md").write_text(text)
    print(text, flush=True)
    if with_plot and importlib.util.find_spec("matplotlib") is not None:
        plot(results, out / f"startup-{stem}.png")


# --------------------------------------------------------------------------------------------
# Command line


def _points(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v.replace("_", "")) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated counts, not {text!r}") from None
    if not values or list(values) != sorted(set(values)) or values[0] < 0:
        raise argparse.ArgumentTypeError(f"counts must be distinct, ascending and >= 0: {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python bench/startup.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=1000, help="fake 8-GPU nodes (a multiple of 100 above 100)")
    p.add_argument(
        "--foreign-pods",
        type=int,
        default=0,
        help="bound pods of another scheduler spread over the nodes before the contestants start",
    )
    p.add_argument("--extra-pods", dest="foreign_pods", type=int, help=argparse.SUPPRESS)  # the old name
    p.add_argument(
        "--sweep",
        type=_points,
        default=None,
        help="foreign-pod counts, e.g. 0,10000,40000,100000: grown on one control plane, every "
        "contestant run at each (instead of --foreign-pods)",
    )
    p.add_argument(
        "--backlog",
        default="250x8",
        help="GANGSxPODS: gangs of one-GPU pods (--backlog-gpus), each Required in one rack (issue 27: "
        "250x8); or 'workload': the bench's gang mix at --oversubscription (issue 15)",
    )
    p.add_argument("--backlog-gpus", type=int, default=1, help="GPUs per backlog pod (GANGSxPODS)")
    p.add_argument(
        "--oversubscription", type=float, default=1.0, help="--backlog workload: GPUs asked / GPUs"
    )
    p.add_argument("--seed", type=int, default=1, help="--backlog workload's seed")
    p.add_argument(
        "--contestants",
        default="gangsched,bare",
        help="comma-separated, run in this order at each point: gangsched, bare (hack/bare-binder "
        f"{' '.join(BARE_FLAGS)})",
    )
    p.add_argument(
        "--repeat", type=int, default=1, help="runs of each contestant at each point (the table: medians)"
    )
    p.add_argument("--concurrency", type=int, default=64, help="gangsched --concurrency, bare -workers")
    p.add_argument(
        "--load-workers", type=int, default=16, help="threads creating pods (16: the apiserver's pace)"
    )
    p.add_argument("--quiet", type=float, default=10.0, help="end a run after this long without a binding")
    p.add_argument(
        "--timeout", type=float, default=300.0, help="end a run this long after its start regardless"
    )
    p.add_argument(
        "--drain",
        type=float,
        default=10.0,
        help="after the last bind, wait up to this long for the contestant's Events (one per pod) "
        "before reading CPU and RSS and stopping it",
    )
    p.add_argument("--out", type=Path, default=REPO / "build" / "startup")
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="py-spy each gangsched run into this directory (<tag>.pyspy.txt; summarise with "
        "python -m bench.e2e.profile); its CPU and RSS figures then include the sampling",
    )
    p.add_argument(
        "--retable", action="store_true", help="only redo the table and plot from <out>/results-N<nodes>.json"
    )
    args = p.parse_args(argv)
    if args.sweep is not None and args.foreign_pods:
        p.error("--sweep or --foreign-pods, not both")
    contestants = tuple(c.strip() for c in args.contestants.split(",") if c.strip())
    unknown = [c for c in contestants if c not in CONTESTANTS]
    if unknown or not contestants:
        p.error(f"--contestants: gangsched and/or bare, not {unknown or args.contestants!r}")
    args.contestants = contestants
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.retable:
        results = json.loads((args.out / f"results-N{args.nodes}.json").read_text())
        write_outputs(results, args.out)
        return 0
    if importlib.util.find_spec("matplotlib") is None:
        print("matplotlib is missing (no plot): pip install -e '.[bench]'", file=sys.stderr)
    cfg = Config(
        nodes=args.nodes,
        points=args.sweep if args.sweep is not None else (args.foreign_pods,),
        backlog=args.backlog,
        backlog_gpus=args.backlog_gpus,
        oversubscription=args.oversubscription,
        seed=args.seed,
        contestants=args.contestants,
        repeat=args.repeat,
        concurrency=args.concurrency,
        load_workers=args.load_workers,
        quiet=args.quiet,
        timeout=args.timeout,
        drain=args.drain,
        profile=args.profile,
    )
    cfg.workload()  # a bad --backlog fails before the control plane starts
    started = time.monotonic()
    with devcluster.ControlPlane(with_controller_manager=False) as cp:
        _log(f"control plane up in {time.monotonic() - started:.1f}s")
        sweep(cp, cfg, args.out)
    _log(f"done in {time.monotonic() - started:.0f}s; {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
