"""Figures from one contestant's recorded run. Pure: no API, no processes.

Inputs are what the harness records: when each pod's create call returned (client clock),
when the pod watch first showed each pod bound or deleted (the observer's clock; both are
CLOCK_MONOTONIC of this machine), and the scheduler's CPU samples.

Partial gangs, precisely. The API binds one pod per request, so every gang passes through
0 < bound < minCount while its bindings are in flight: its *binding burst*, the run of its
binding events in which consecutive ones are less than `gap` seconds apart. A gang is
**partial** when it sits below quorum with at least one member bound and no further binding
for `gap` seconds or more: at some instant t, 0 < bound(t) < minCount and no member of it is
bound in [t, t + gap). A gang still below quorum when the run ends counts too (if it was
below quorum for at least `gap`). Both schedulers issue a decided gang's bindings together,
so bursts take milliseconds to a second; `gap` (2 s by default) sits far above the longest
observed in-burst pause, which the report prints next to the count (`max_burst_pause_s`)
so the margin is visible. A partial gang holds GPUs without being able to run: it must be 0.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .workload import GPUS_PER_NODE, Gang, Workload

# finished: first seen Succeeded or Failed (the node agent ended it; the fifo-rounds workload)
EventKind = Literal["bound", "deleted", "finished"]


@dataclass(frozen=True, slots=True)
class PodEvent:
    """A pod first seen bound (with its node), finished, or deleted, by the watch at time `t`."""

    t: float
    pod: str
    kind: EventKind
    node: str = ""


@dataclass(frozen=True, slots=True)
class CpuSample:
    t: float
    cpu_seconds: float


@dataclass(slots=True)
class Recording:
    """Everything one run recorded; the harness fills it."""

    contestant: str
    # pod -> its create call returned; the jobs workload: pod -> first seen by the watch (the
    # Job controller created it)
    created: dict[str, float] = field(default_factory=dict)
    # pod -> first seen by the watch (every workload)
    seen: dict[str, float] = field(default_factory=dict)
    # gang -> its first object's create call returned: its PodGroup (or single pod: absent) or
    # its Job
    submitted: dict[str, float] = field(default_factory=dict)
    # the jobs workload: pod -> first seen with gangsched's pod-group label (its gang formed)
    labelled: dict[str, float] = field(default_factory=dict)
    events: list[PodEvent] = field(default_factory=list)
    cpu: list[CpuSample] = field(default_factory=list)
    apiserver_cpu: list[CpuSample] = field(default_factory=list)
    controllers_cpu: list[CpuSample] = field(default_factory=list)  # kube-controller-manager
    peak_rss_mib: float = 0.0
    requests: dict[str, float] = field(default_factory=dict)  # "VERB resource[/sub]" -> count
    end: float = 0.0  # when the harness stopped watching
    stranded: int | None = None  # pending gangs that fit the final free capacity (engine oracle)
    # dra workload only (None otherwise), from listing every ResourceClaim at the end:
    devices_twice: int | None = None  # (driver, pool, device) in two claims' allocations
    bound_without_device: int | None = None  # bound pods whose claim is not allocated on their node
    claims_allocated: int | None = None
    # preemption workload only: when every low pod was bound (or the wait for it ended) and
    # the high stream began, how many low pods were bound then, and victim pod -> the gang
    # that preempted it (from the victims' `Preempted` Events).
    saturated: float | None = None
    low_bound_at_saturation: int | None = None
    preemptors: dict[str, str] = field(default_factory=dict)


def recording_to_json(rec: Recording) -> dict[str, Any]:
    return {
        "contestant": rec.contestant,
        "created": rec.created,
        "seen": rec.seen,
        "submitted": rec.submitted,
        "labelled": rec.labelled,
        "events": [[e.t, e.pod, e.kind, e.node] for e in rec.events],
        "cpu": [[s.t, s.cpu_seconds] for s in rec.cpu],
        "apiserver_cpu": [[s.t, s.cpu_seconds] for s in rec.apiserver_cpu],
        "controllers_cpu": [[s.t, s.cpu_seconds] for s in rec.controllers_cpu],
        "peak_rss_mib": rec.peak_rss_mib,
        "requests": rec.requests,
        "end": rec.end,
        "stranded": rec.stranded,
        "devices_twice": rec.devices_twice,
        "bound_without_device": rec.bound_without_device,
        "claims_allocated": rec.claims_allocated,
        "saturated": rec.saturated,
        "low_bound_at_saturation": rec.low_bound_at_saturation,
        "preemptors": rec.preemptors,
    }


def recording_from_json(data: Mapping[str, Any]) -> Recording:
    kinds: dict[str, EventKind] = {"bound": "bound", "deleted": "deleted", "finished": "finished"}
    return Recording(
        contestant=str(data["contestant"]),
        created={str(k): float(v) for k, v in data["created"].items()},
        seen={str(k): float(v) for k, v in (data.get("seen") or {}).items()},
        submitted={str(k): float(v) for k, v in (data.get("submitted") or {}).items()},
        labelled={str(k): float(v) for k, v in (data.get("labelled") or {}).items()},
        events=[PodEvent(float(t), str(p), kinds[kind], str(node)) for t, p, kind, node in data["events"]],
        cpu=[CpuSample(float(t), float(c)) for t, c in data["cpu"]],
        apiserver_cpu=[CpuSample(float(t), float(c)) for t, c in data["apiserver_cpu"]],
        controllers_cpu=[CpuSample(float(t), float(c)) for t, c in data.get("controllers_cpu") or []],
        peak_rss_mib=float(data["peak_rss_mib"]),
        requests={str(k): float(v) for k, v in data["requests"].items()},
        end=float(data["end"]),
        stranded=None if data["stranded"] is None else int(data["stranded"]),
        devices_twice=_optional_int(data.get("devices_twice")),
        bound_without_device=_optional_int(data.get("bound_without_device")),
        claims_allocated=_optional_int(data.get("claims_allocated")),
        saturated=None if data.get("saturated") is None else float(data["saturated"]),
        low_bound_at_saturation=_optional_int(data.get("low_bound_at_saturation")),
        preemptors={str(k): str(v) for k, v in (data.get("preemptors") or {}).items()},
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class PartialEpisode:
    gang: str
    start: float
    end: float
    bound: int
    min_count: int


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def bound_timelines(
    events: Iterable[PodEvent], gang_of: Mapping[str, str]
) -> dict[str, list[tuple[float, int]]]:
    """gang -> [(t, +1 | -1)] in time order: a member bound (+1), or a bound member deleted (-1)."""
    bound: set[str] = set()
    out: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for event in sorted(events, key=lambda e: e.t):
        gang = gang_of.get(event.pod)
        if gang is None:
            continue
        if event.kind == "bound" and event.pod not in bound:
            bound.add(event.pod)
            out[gang].append((event.t, +1))
        elif event.kind == "deleted" and event.pod in bound:
            bound.discard(event.pod)
            out[gang].append((event.t, -1))
    return dict(out)


def final_pods(events: Iterable[PodEvent], gang_of: Mapping[str, str]) -> set[str]:
    """The workload's pods bound at the end of the run."""
    bound: set[str] = set()
    for event in sorted(events, key=lambda e: e.t):
        if event.pod not in gang_of:
            continue
        if event.kind == "bound":
            bound.add(event.pod)
        else:
            bound.discard(event.pod)
    return bound


def partial_episodes(
    timeline: Sequence[tuple[float, int]], *, gang: str, min_count: int, end: float, gap: float
) -> tuple[list[PartialEpisode], float]:
    """Below-quorum stretches of one gang lasting >= gap, and the longest shorter one (a burst pause)."""
    episodes: list[PartialEpisode] = []
    longest_pause = 0.0
    count = 0
    for i, (t, delta) in enumerate(timeline):
        count += delta
        if not 0 < count < min_count:
            continue
        until = timeline[i + 1][0] if i + 1 < len(timeline) else end
        if until - t >= gap:
            episodes.append(PartialEpisode(gang=gang, start=t, end=until, bound=count, min_count=min_count))
        else:
            longest_pause = max(longest_pause, until - t)
    return episodes, longest_pause


@dataclass(frozen=True, slots=True)
class Figures:
    contestant: str
    pods_created: int
    pods_bound: int
    gangs: int
    gangs_placed: int
    pods_per_second: float
    submit_pods_per_second: float
    span_seconds: float  # first create to last bind
    gang_latency_p50: float
    gang_latency_p99: float
    gang_latency_max: float
    preferred_in_one_rack: float  # share of placed Preferred-rack gangs that fit one rack
    preferred_eligible: int
    mean_extra_racks: float  # racks used above the minimum, placed Preferred-rack gangs
    required_violations: int
    gpu_utilisation: float
    partial_gangs: int
    max_burst_pause_s: float
    stranded_gangs: int | None
    cpu_seconds: float  # scheduler CPU from first create to last bind
    cpu_seconds_total: float  # ... to the end of the run (includes the idle wait)
    peak_rss_mib: float
    apiserver_cpu_seconds: float
    api_requests: dict[str, float]
    first_bind_s: float  # first create to first bind
    unplaced: tuple[str, ...]  # gangs not fully bound at the end, described
    partial: tuple[PartialEpisode, ...]
    # Scheduler CPU use (cores) between the last bind and the end of the run: work spent on
    # gangs that cannot be placed any more (NaN in results written before this field existed).
    after_last_bind_cores: float = float("nan")
    # dra workload only (None otherwise): see Recording.
    devices_allocated_twice: int | None = None
    bound_without_device: int | None = None
    claims_allocated: int | None = None
    # (NaN in results written before these fields existed)
    gang_latency_p90: float = float("nan")
    # Gang latency from the watch's first sight of the gang's last pod (not its create call's
    # return): the same clock for pods the benchmark creates and pods the Job controller does.
    seen_latency_p50: float = float("nan")
    seen_latency_p90: float = float("nan")
    seen_latency_p99: float = float("nan")
    # From the gang's first object created (its PodGroup or Job; a single pod: the pod) to
    # its last pod bound: what a submitter waits, pod creation included.
    submit_latency_p50: float = float("nan")
    submit_latency_p90: float = float("nan")
    submit_latency_p99: float = float("nan")
    # The jobs workload, gangs (not single pods): last pod created to last pod seen labelled
    # (gangsched created the PodGroup and labelled the pods), and from then to last pod bound.
    formation_p50: float = float("nan")
    formation_p90: float = float("nan")
    labelled_to_bound_p50: float = float("nan")
    labelled_to_bound_p90: float = float("nan")
    created_span_s: float = float("nan")  # first pod created to last pod created
    controllers_cpu_seconds: float = float("nan")  # kube-controller-manager, first create to last bind

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "partial"}
        out["partial"] = [vars_of(p) for p in self.partial]
        return out


def figures_from_json(data: Mapping[str, Any]) -> Figures:
    """The inverse of `Figures.as_dict` (for re-rendering tables from a results file)."""
    fields = dict(data)
    fields["partial"] = tuple(PartialEpisode(**p) for p in fields.get("partial", ()))
    fields["unplaced"] = tuple(fields.get("unplaced", ()))
    return Figures(**fields)


def vars_of(episode: PartialEpisode) -> dict[str, Any]:
    return {k: getattr(episode, k) for k in episode.__dataclass_fields__}


def describe(gang: Gang) -> str:
    rules = [f"Required {gang.required}"] if gang.required else []
    if gang.preferred_rack and gang.required != "rack":
        rules.append("Preferred rack")
    launcher = " incl. launcher" if gang.launcher else ""
    where = ", ".join(rules) or "no topology"
    return f"{gang.name}: {len(gang.pods)} pods{launcher}, {gang.gpus} GPUs, {where}"


def cpu_at(samples: Sequence[CpuSample], t: float) -> float:
    """CPU seconds at time t, linearly interpolated between samples."""
    if not samples:
        return 0.0
    if t <= samples[0].t:
        return samples[0].cpu_seconds
    for a, b in itertools.pairwise(samples):
        if a.t <= t <= b.t:
            if b.t == a.t:
                return b.cpu_seconds
            return a.cpu_seconds + (b.cpu_seconds - a.cpu_seconds) * (t - a.t) / (b.t - a.t)
    return samples[-1].cpu_seconds


def rack_of(node: str, domains: Mapping[str, tuple[str, str]]) -> str:
    return domains[node][1]


def block_of(node: str, domains: Mapping[str, tuple[str, str]]) -> str:
    return domains[node][0]


def min_racks(gang: Gang, rack_gpus: int, rack_nodes: int) -> int:
    """A lower bound on racks a gang needs: by GPUs, and by nodes for whole-node pods."""
    by_gpus = -(-gang.gpus // rack_gpus)
    whole = sum(1 for p in gang.pods if p.gpus == GPUS_PER_NODE)
    return max(1, by_gpus, -(-whole // rack_nodes))


def compute(
    recording: Recording,
    workload: Workload,
    domains: Mapping[str, tuple[str, str]],
    *,
    gap: float = 2.0,
) -> Figures:
    gangs = {g.name: g for g in workload.gangs}
    gang_of = {g.pod_name(p): g.name for g in workload.gangs for p in g.pods}
    gpus_of = {g.pod_name(p): p.gpus for g in workload.gangs for p in g.pods}
    node_of: dict[str, str] = {}
    for event in sorted(recording.events, key=lambda e: e.t):
        if event.kind == "bound" and event.pod in gang_of:
            node_of.setdefault(event.pod, event.node)
    timelines = bound_timelines(recording.events, gang_of)
    end = recording.end

    episodes: list[PartialEpisode] = []
    longest_pause = 0.0
    for name, timeline in timelines.items():
        found, pause = partial_episodes(
            timeline, gang=name, min_count=gangs[name].min_count, end=end, gap=gap
        )
        episodes += found
        longest_pause = max(longest_pause, pause)

    # Bound at the end (deleted members do not count).
    final_bound: dict[str, int] = {name: sum(d for _, d in tl) for name, tl in timelines.items()}
    bind_times = [e.t for e in recording.events if e.kind == "bound" and e.pod in gang_of]
    first_create = min(recording.created.values(), default=0.0)
    last_create = max(recording.created.values(), default=0.0)
    last_bind = max(bind_times, default=first_create)
    span = max(last_bind - first_create, 1e-9)
    pods_bound = sum(final_bound.values())

    latencies: list[float] = []
    seen_latencies: list[float] = []
    submit_latencies: list[float] = []
    formation: list[float] = []
    after_formation: list[float] = []
    placed: list[Gang] = []
    for name, gang in gangs.items():
        if final_bound.get(name, 0) < gang.min_count:
            continue
        placed.append(gang)
        names = [gang.pod_name(p) for p in gang.pods]
        created = max(recording.created[n] for n in names)
        quorum = timelines[name][-1][0]
        latencies.append(quorum - created)
        if all(n in recording.seen for n in names):
            seen_latencies.append(quorum - max(recording.seen[n] for n in names))
        submitted = recording.submitted.get(name, min(recording.created[n] for n in names))
        submit_latencies.append(quorum - submitted)
        if gang.is_group and all(n in recording.labelled for n in names):
            labelled = max(recording.labelled[n] for n in names)
            formation.append(labelled - created)
            after_formation.append(quorum - labelled)

    topo = workload.topology
    rack_gpus, rack_nodes = topo.rack_gpus, topo.shape.hosts
    eligible = in_one = 0
    extra: list[int] = []
    violations = 0
    for gang in placed:
        nodes = [node_of[gang.pod_name(p)] for p in gang.pods]
        racks = {rack_of(n, domains) for n in nodes}
        blocks = {block_of(n, domains) for n in nodes}
        if (gang.required == "rack" and len(racks) > 1) or (gang.required == "block" and len(blocks) > 1):
            violations += 1
        if gang.preferred_rack and gang.required != "rack":
            need = min_racks(gang, rack_gpus, rack_nodes)
            extra.append(len(racks) - need)
            if need == 1:
                eligible += 1
                in_one += len(racks) == 1

    bound_gpus = sum(gpus_of[p] for p in final_pods(recording.events, gang_of))

    created_span = max(last_create - first_create, 1e-9)
    return Figures(
        contestant=recording.contestant,
        pods_created=len(recording.created),
        pods_bound=pods_bound,
        gangs=len(gangs),
        gangs_placed=len(placed),
        pods_per_second=pods_bound / span,
        submit_pods_per_second=len(recording.created) / created_span,
        span_seconds=span,
        gang_latency_p50=percentile(latencies, 50),
        gang_latency_p99=percentile(latencies, 99),
        gang_latency_max=max(latencies, default=float("nan")),
        preferred_in_one_rack=in_one / eligible if eligible else float("nan"),
        preferred_eligible=eligible,
        mean_extra_racks=statistics.fmean(extra) if extra else float("nan"),
        required_violations=violations,
        gpu_utilisation=bound_gpus / topo.gpus,
        partial_gangs=len({e.gang for e in episodes}),
        max_burst_pause_s=longest_pause,
        stranded_gangs=recording.stranded,
        cpu_seconds=cpu_at(recording.cpu, last_bind) - cpu_at(recording.cpu, first_create),
        cpu_seconds_total=cpu_at(recording.cpu, end) - cpu_at(recording.cpu, first_create),
        peak_rss_mib=recording.peak_rss_mib,
        apiserver_cpu_seconds=cpu_at(recording.apiserver_cpu, last_bind)
        - cpu_at(recording.apiserver_cpu, first_create),
        api_requests=dict(recording.requests),
        first_bind_s=min(bind_times, default=float("nan")) - first_create,
        unplaced=tuple(describe(g) for g in workload.gangs if g not in placed),
        partial=tuple(episodes),
        after_last_bind_cores=(cpu_at(recording.cpu, end) - cpu_at(recording.cpu, last_bind))
        / max(end - last_bind, 1e-9),
        devices_allocated_twice=recording.devices_twice,
        bound_without_device=recording.bound_without_device,
        claims_allocated=recording.claims_allocated,
        gang_latency_p90=percentile(latencies, 90),
        seen_latency_p50=percentile(seen_latencies, 50),
        seen_latency_p90=percentile(seen_latencies, 90),
        seen_latency_p99=percentile(seen_latencies, 99),
        submit_latency_p50=percentile(submit_latencies, 50),
        submit_latency_p90=percentile(submit_latencies, 90),
        submit_latency_p99=percentile(submit_latencies, 99),
        formation_p50=percentile(formation, 50),
        formation_p90=percentile(formation, 90),
        labelled_to_bound_p50=percentile(after_formation, 50),
        labelled_to_bound_p90=percentile(after_formation, 90),
        created_span_s=last_create - first_create,
        controllers_cpu_seconds=cpu_at(recording.controllers_cpu, last_bind)
        - cpu_at(recording.controllers_cpu, first_create)
        if recording.controllers_cpu
        else float("nan"),
    )


def bound_curve(recording: Recording, workload: Workload) -> tuple[list[float], list[int], list[float]]:
    """(seconds since first create, pods bound then) steps, and the create times, for the plot."""
    gang_of = {g.pod_name(p): g.name for g in workload.gangs for p in g.pods}
    t0 = min(recording.created.values(), default=0.0)
    xs: list[float] = [0.0]
    ys: list[int] = [0]
    count = 0
    seen: set[str] = set()
    for event in sorted(recording.events, key=lambda e: e.t):
        if event.pod not in gang_of:
            continue
        if event.kind == "bound" and event.pod not in seen:
            seen.add(event.pod)
            count += 1
        elif event.kind == "deleted" and event.pod in seen:
            seen.discard(event.pod)
            count -= 1
        else:
            continue
        xs.append(event.t - t0)
        ys.append(count)
    creates = sorted(t - t0 for t in recording.created.values())
    return xs, ys, creates


# --------------------------------------------------------------------------------------------
# The preemption workload


@dataclass(frozen=True, slots=True)
class PreemptionFigures:
    """One run of the preemption workload (`workload.generate_preemption`).

    Victims are the low pods the watch saw deleted during the run: the benchmark deletes
    nothing until the run is over, so every such deletion is the scheduler's. A victim is
    attributed to the gang that preempted it by its `Preempted` Event (both schedulers post
    one per victim, naming the preemptor); `preemptions` counts the high gangs with at least
    one victim attributed, and victims that no Event explains are counted apart.
    """

    contestant: str
    low_pods: int
    low_bound_at_saturation: int
    saturation_s: float  # first low pod created -> every low pod bound
    high_gangs: int
    high_placed: int
    high_latency_p50: float  # last pod of the high gang created -> all its pods bound
    high_latency_p99: float
    high_latency_max: float
    victims: int  # low pods deleted by the scheduler
    victim_gpus: int
    preemptions: int  # high gangs with victims attributed to them
    victims_per_preemption: float
    victims_per_preemption_max: int
    unattributed_victims: int
    evicted_per_needed_gpu: float  # victim GPUs / GPUs of the high gangs that preempted
    victim_gangs_whole: int  # low gangs with every member deleted
    partial_victim_gangs: int  # low gangs with some, not all, members deleted: must be 0
    partial_victim_examples: tuple[str, ...]
    partial_gangs: int  # any gang below quorum for >= gap (high gangs while binding included)
    high_unplaced: tuple[str, ...]
    cpu_seconds: float  # scheduler CPU from the first high pod created to the end of the run

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def preemption_figures_from_json(data: Mapping[str, Any]) -> PreemptionFigures:
    fields = dict(data)
    fields["partial_victim_examples"] = tuple(fields.get("partial_victim_examples", ()))
    fields["high_unplaced"] = tuple(fields.get("high_unplaced", ()))
    return PreemptionFigures(**fields)


def compute_preemption(recording: Recording, workload: Workload, *, gap: float = 2.0) -> PreemptionFigures:
    gangs = {g.name: g for g in workload.gangs}
    gang_of = {g.pod_name(p): g.name for g in workload.gangs for p in g.pods}
    gpus_of = {g.pod_name(p): p.gpus for g in workload.gangs for p in g.pods}
    low = {g.name for g in workload.low}
    timelines = bound_timelines(recording.events, gang_of)
    deleted: set[str] = {e.pod for e in recording.events if e.kind == "deleted" and gang_of.get(e.pod) in low}

    low_created = [recording.created[g.pod_name(p)] for g in workload.low for p in g.pods]
    first_low = min(low_created, default=0.0)
    saturated = recording.saturated if recording.saturated is not None else first_low
    high_created = [
        recording.created[g.pod_name(p)]
        for g in workload.high
        for p in g.pods
        if g.pod_name(p) in recording.created
    ]
    first_high = min(high_created, default=recording.end)

    latencies: list[float] = []
    unplaced: list[str] = []
    for gang in workload.high:
        names = [gang.pod_name(p) for p in gang.pods]
        timeline = timelines.get(gang.name, [])
        if sum(d for _, d in timeline) < gang.min_count or not all(n in recording.created for n in names):
            unplaced.append(describe(gang))
            continue
        latencies.append(timeline[-1][0] - max(recording.created[n] for n in names))

    by_preemptor: dict[str, list[str]] = defaultdict(list)
    unattributed = 0
    for pod in deleted:
        who = recording.preemptors.get(pod)
        if who is None:
            unattributed += 1
        else:
            by_preemptor[who].append(pod)
    needed = sum(gangs[name].gpus for name in by_preemptor if name in gangs)
    victim_gpus = sum(gpus_of[p] for p in deleted)

    whole = 0
    partial: list[str] = []
    for name in low:
        gang = gangs[name]
        gone = sum(1 for p in gang.pods if gang.pod_name(p) in deleted)
        if gone == len(gang.pods):
            whole += gang.is_group
        elif gone:
            partial.append(f"{name}: {gone} of {len(gang.pods)} pods deleted")

    episodes = 0
    for name, timeline in timelines.items():
        found, _ = partial_episodes(
            timeline, gang=name, min_count=gangs[name].min_count, end=recording.end, gap=gap
        )
        # A low gang losing its members to preemption passes through 0 < bound < minCount
        # while the deletions land; that is the victim count's business, not a partial placement.
        found = [
            e for e in found if not (name in low and e.start >= saturated and _shrinking(timeline, e.start))
        ]
        episodes += bool(found)

    counts = [len(v) for v in by_preemptor.values()]
    return PreemptionFigures(
        contestant=recording.contestant,
        low_pods=len(low_created),
        low_bound_at_saturation=recording.low_bound_at_saturation or 0,
        saturation_s=saturated - first_low,
        high_gangs=len(workload.high),
        high_placed=len(latencies),
        high_latency_p50=percentile(latencies, 50),
        high_latency_p99=percentile(latencies, 99),
        high_latency_max=max(latencies, default=float("nan")),
        victims=len(deleted),
        victim_gpus=victim_gpus,
        preemptions=len(by_preemptor),
        victims_per_preemption=statistics.fmean(counts) if counts else float("nan"),
        victims_per_preemption_max=max(counts, default=0),
        unattributed_victims=unattributed,
        evicted_per_needed_gpu=victim_gpus / needed if needed else float("nan"),
        victim_gangs_whole=whole,
        partial_victim_gangs=len(partial),
        partial_victim_examples=tuple(sorted(partial)[:10]),
        partial_gangs=episodes,
        high_unplaced=tuple(unplaced),
        cpu_seconds=cpu_at(recording.cpu, recording.end) - cpu_at(recording.cpu, first_high),
    )


def _shrinking(timeline: Sequence[tuple[float, int]], t: float) -> bool:
    """Whether the gang's count at `t` was reached by a deletion (it is losing members)."""
    deltas = [d for when, d in timeline if when <= t]
    return bool(deltas) and deltas[-1] < 0
