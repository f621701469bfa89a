"""Saturation order: does a gang that does not fit hold up smaller ones, and does backfilling
starve the big ones? (issue 14, item 3; results go to docs/placement.md "Saturation order").

A seeded discrete-event simulation of the quality benchmark's cluster (bench/quality.py: 512
GPU nodes, zone > block > rack > host, about half the racks partly used by another
scheduler's pods that never finish) under an arrival stream offered more GPUs than it has:

  arrivals  Poisson, `--load` times the cluster's free GPUs per mean runtime; 90% trace-shaped
            gangs (1-16 pods of 1-8 GPUs, the quality benchmark's mix of Required block +
            Preferred rack, Preferred rack and unconstrained), 10% hero gangs of 8-GPU pods
            (two thirds one whole rack, one third two racks, Required block + Preferred rack);
  runtime   exponential, mean `--runtime` minutes (whatever the gang's size);
  cycles    every `--tick` seconds: finished gangs leave, then one `schedule_cycle` (the
            operator's engine, with the reservations it returned last time held, and each
            gang's waiting time since it arrived) over every pending gang in queue order.

Policies, on the same arrival stream:
  gangsched     the engine as the operator runs it: gangs that do not fit are skipped (smaller
                ones behind them are placed: backfilling), and a gang waiting longer than
                `--reservation` seconds reserves the domain it is closest to fitting;
  no-reserve    the same without reservations: backfilling only;
  strict-fifo   head-of-line blocking (what a FIFO queue without backfill does): nothing
                behind the first gang that does not fit is placed;
  gangsched-strict  the engine as `gangsched run --queueing-strategy StrictFIFO` runs it: a
                gang that does not fit (but could in the empty cluster) is a head that blocks
                every gang behind it at its priority or lower; a gang that can never fit
                blocks nothing (docs/placement.md "The queue").

Reported per policy: GPU utilisation (time average of the GPUs the queue's gangs hold over
the GPUs free of the other scheduler's pods), how many gangs arrived and started, wait time
(arrival to start) of trace and hero gangs (p50, p95, max; gangs still waiting at the end
count with their wait so far), and "held up": gangs left pending by a cycle that the engine
would have placed had each been alone in the queue at that point (after the cycle, with the
reservations in force), checked every `--check-every` cycles. 0 means no gang that fits ever
waits behind one that does not, except behind a reservation.

Run: python bench/saturation.py [--seed 1] [--hours 6] [--tick 30] [--load 1.3] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "testing"):  # bench.quality, gangsched_testing
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.quality import (  # noqa: E402
    GPUS_PER_NODE,
    HOSTS_PER_RACK,
    KINDS,
    NAMESPACE,
    START,
    GangSpec,
    build_cluster,
    engine_objects,
)

from gangsched.engine import CycleResult, Reservation, schedule_cycle  # noqa: E402
from gangsched.model import Node, Pod, PodGroup, QueueingStrategy  # noqa: E402

POLICIES = ("gangsched", "no-reserve", "strict-fifo", "gangsched-strict")
# Policies whose reservations the engine keeps across cycles (the operator's loop does so too).
RESERVING = frozenset({"gangsched", "gangsched-strict"})
# Policies that block behind a head by design: the held-up check does not apply.
BLOCKING = frozenset({"strict-fifo", "gangsched-strict"})
GPU = "nvidia.com/gpu"


@dataclass(slots=True)
class Job:
    spec: GangSpec
    arrival: float
    runtime: float
    started: float | None = None
    pods: list[Pod] = field(default_factory=list)  # pending, then bound
    group: PodGroup | None = None


def arrivals(seed: int, hours: float, free_gpus: int, load: float, runtime_min: float) -> list[Job]:
    """The arrival stream: `load` x the free GPUs' worth of work per mean runtime."""
    rng = random.Random(seed * 104729 + 7)
    mean_gpus = 0.9 * _mean_trace_gpus() + 0.1 * (HOSTS_PER_RACK * GPUS_PER_NODE * 4 / 3)
    rate = load * free_gpus / mean_gpus / (runtime_min * 60)  # gangs per second
    jobs: list[Job] = []
    now = 0.0
    i = 0
    while True:
        now += rng.expovariate(rate)
        if now >= hours * 3600:
            return jobs
        if rng.random() < 0.1:
            kind = "hero-2rack" if rng.random() < 1 / 3 else "hero-rack"
            pods, gpus = HOSTS_PER_RACK * (2 if kind == "hero-2rack" else 1), GPUS_PER_NODE
        else:
            pods, gpus, kind = _trace_gang(rng)
        created = (START + timedelta(seconds=now)).strftime("%Y-%m-%dT%H:%M:%SZ")
        spec = GangSpec(f"j{i:05d}-{kind}", kind, pods, gpus, created)
        jobs.append(Job(spec, now, rng.expovariate(1 / (runtime_min * 60))))
        i += 1


def _trace_gang(rng: random.Random) -> tuple[int, int, str]:
    pods = rng.choices((1, 2, 3, 4, 6, 8, 12, 16), weights=(30, 15, 5, 15, 5, 15, 5, 10))[0]
    gpus = rng.choices((1, 2, 4, 8), weights=(20, 15, 25, 40))[0]
    return pods, gpus, rng.choices(KINDS[:3], weights=(40, 30, 30))[0]


def _mean_trace_gpus() -> float:
    pods = sum(p * w for p, w in zip((1, 2, 3, 4, 6, 8, 12, 16), (30, 15, 5, 15, 5, 15, 5, 10), strict=True))
    gpus = sum(g * w for g, w in zip((1, 2, 4, 8), (20, 15, 25, 40), strict=True))
    return (pods / 100) * (gpus / 100)


@dataclass(slots=True)
class Outcome:
    policy: str
    arrived: int = 0
    started: int = 0
    heroes_arrived: int = 0
    heroes_started: int = 0
    utilisation: float = 0.0
    trace_wait: dict[str, float] = field(default_factory=dict)
    hero_wait: dict[str, float] = field(default_factory=dict)
    held_up: int = 0
    checked: int = 0
    cycles: int = 0
    seconds: float = 0.0


def simulate(
    policy: str,
    nodes: Sequence[Node],
    load_pods: Sequence[Pod],
    stream: Sequence[Job],
    *,
    hours: float,
    tick: float,
    reservation_after: float,
    check_every: int,
) -> Outcome:
    """Run one policy over the arrival stream; see the module docstring."""
    jobs = [Job(j.spec, j.arrival, j.runtime) for j in stream]
    for job in jobs:
        pods, groups = engine_objects([job.spec])
        job.pods, job.group = pods, groups[0]
    capacity = len(nodes) * GPUS_PER_NODE - sum(p.requests.get(GPU, 0) for p in load_pods) // 1000
    out = Outcome(policy)
    reservations: list[Reservation] = []
    running: list[Job] = []
    waiting: list[Job] = []
    busy_gpu_seconds = 0.0
    next_arrival = 0
    t0 = time.perf_counter()
    now = 0.0
    while now < hours * 3600:
        running = [j for j in running if j.started is not None and j.started + j.runtime > now]
        while next_arrival < len(jobs) and jobs[next_arrival].arrival <= now:
            waiting.append(jobs[next_arrival])
            next_arrival += 1
        if waiting:
            check = out.cycles % check_every == 0
            placed = _cycle(
                policy, nodes, load_pods, running, waiting, now, reservations, reservation_after, check
            )
            reservations = placed.reservations
            out.held_up += placed.held_up
            out.checked += check
            for job in placed.started:
                job.started = now
                running.append(job)
            waiting = [j for j in waiting if j.started is None]
            out.cycles += 1
        busy_gpu_seconds += tick * sum(j.spec.pods * j.spec.gpus for j in running)
        now += tick
    out.seconds = time.perf_counter() - t0
    arrived = jobs[:next_arrival]
    out.arrived = len(arrived)
    out.started = sum(j.started is not None for j in arrived)
    out.heroes_arrived = sum(j.spec.hero for j in arrived)
    out.heroes_started = sum(j.spec.hero and j.started is not None for j in arrived)
    out.utilisation = busy_gpu_seconds / (capacity * hours * 3600)
    end = hours * 3600
    out.trace_wait = _waits([j for j in arrived if not j.spec.hero], end)
    out.hero_wait = _waits([j for j in arrived if j.spec.hero], end)
    return out


@dataclass(slots=True)
class _Placed:
    started: list[Job]
    reservations: list[Reservation]
    held_up: int


def _cycle(
    policy: str,
    nodes: Sequence[Node],
    load_pods: Sequence[Pod],
    running: Sequence[Job],
    waiting: Sequence[Job],
    now: float,
    reservations: Sequence[Reservation],
    reservation_after: float,
    check: bool,
) -> _Placed:
    bound = [*load_pods, *(p for j in running for p in j.pods)]
    pending = [p for j in waiting for p in j.pods]
    groups = [j.group for j in waiting if j.group is not None]
    waits = {(NAMESPACE, j.spec.name): now - j.arrival for j in waiting}
    after = reservation_after if policy in RESERVING else math.inf
    result = schedule_cycle(
        nodes=nodes,
        pods=[*bound, *pending],
        pod_groups=groups,
        waiting_seconds=waits,
        reservation_after_seconds=after,
        reservations=reservations if policy in RESERVING else (),
        queueing=QueueingStrategy.STRICT_FIFO
        if policy == "gangsched-strict"
        else QueueingStrategy.BEST_EFFORT_FIFO,
    )
    by_name = {j.spec.name: j for j in waiting}
    started: list[Job] = []
    # Decisions come in queue order; strict FIFO takes them only up to the first that failed.
    for decision in result.decisions:
        job = by_name[decision.name]
        if not decision.scheduled:
            if policy == "strict-fifo":
                break
            continue
        job.pods = [replace(p, node_name=decision.assignments[p.key], phase="Running") for p in job.pods]
        started.append(job)
    held_up = 0
    if check and policy not in BLOCKING:
        held_up = _held_up(nodes, [*bound, *(p for j in started for p in j.pods)], waiting, started, result)
    return _Placed(started, result.reservations if policy in RESERVING else [], held_up)


def _held_up(
    nodes: Sequence[Node],
    bound: Sequence[Pod],
    waiting: Sequence[Job],
    started: Sequence[Job],
    result: CycleResult,
) -> int:
    """Gangs left pending that the engine would place were each alone in the queue now."""
    reservations = result.reservations
    count = 0
    done = {j.spec.name for j in started}
    for job in waiting:
        if job.spec.name in done or job.group is None:
            continue
        alone = schedule_cycle(
            nodes=nodes,
            pods=[*bound, *job.pods],
            pod_groups=[job.group],
            reservations=[r for r in reservations if r.owner != (NAMESPACE, job.spec.name)],
        )
        # Reservations of gangs ahead of it still bind it (`reservations` carry their order).
        if alone.decisions and alone.decisions[0].scheduled:
            count += 1
    return count


def _waits(jobs: Sequence[Job], end: float) -> dict[str, float]:
    if not jobs:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0}
    waits = sorted(((j.started if j.started is not None else end) - j.arrival) / 60 for j in jobs)
    return {
        "p50": round(waits[len(waits) // 2], 1),
        "p95": round(waits[min(len(waits) - 1, math.ceil(0.95 * len(waits)) - 1)], 1),
        "max": round(waits[-1], 1),
    }


def table(results: Sequence[Outcome]) -> str:
    head = (
        "| policy | GPU util | gangs started / arrived | heroes started / arrived | "
        "trace wait p50 / p95 / max (min) | hero wait p50 / p95 / max (min) | held up |"
    )
    lines = [head, "|" + "---|" * 7]
    for r in results:
        tw, hw = r.trace_wait, r.hero_wait
        lines.append(
            f"| {r.policy} | {r.utilisation:.1%} | {r.started} / {r.arrived} | "
            f"{r.heroes_started} / {r.heroes_arrived} | {tw['p50']} / {tw['p95']} / {tw['max']} | "
            f"{hw['p50']} / {hw['p95']} / {hw['max']} | {_held(r)} |"
        )
    return "\n".join(lines)


def _held(r: Outcome) -> str:
    return "n/a" if r.policy in BLOCKING else f"{r.held_up} in {r.checked} cycles checked"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--tick", type=float, default=30.0, help="seconds between cycles")
    parser.add_argument("--load", type=float, default=1.3, help="offered GPUs / free GPUs")
    parser.add_argument("--runtime", type=float, default=30.0, help="mean gang runtime, minutes")
    parser.add_argument("--reservation", type=float, default=300.0, help="reservation after, seconds")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--check-every", type=int, default=5, help="the held-up check every N cycles")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    nodes, load_pods = build_cluster(args.seed, args.nodes)
    free = args.nodes * GPUS_PER_NODE - sum(p.requests.get(GPU, 0) for p in load_pods) // 1000
    stream = arrivals(args.seed, args.hours, free, args.load, args.runtime)
    results = [
        simulate(
            policy,
            nodes,
            load_pods,
            stream,
            hours=args.hours,
            tick=args.tick,
            reservation_after=args.reservation,
            check_every=args.check_every,
        )
        for policy in args.policies
    ]
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(
            f"seed {args.seed}: {args.nodes} nodes, {free} GPUs free of other pods, {len(stream)} gangs over "
            f"{args.hours:g} h (load {args.load:g}, mean runtime {args.runtime:g} min, a cycle every "
            f"{args.tick:g} s, reservation after {args.reservation:g} s)"
        )
        print(table(results))
        print("simulation seconds: " + ", ".join(f"{r.policy} {r.seconds:.1f}" for r in results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
