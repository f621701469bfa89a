"""The FIFO-rounds workload (issue 26) and its figures. Pure: no API, no processes.

The stream: `FIFO_GANGS` whole-node gangs (every pod takes all 8 GPUs of a node) of 1 to 32
pods, drawn with a fixed seed, no topology constraint, all submitted at once in a fixed
order, each pod running `run_seconds` once started (the node agent finishes it). Sizes are
2^k pods, k = 0..5, Zipf weights (k + 1)^-1.5 as in `workload.generate`; seed
`FIFO_SEED` is the first whose 53 gangs take 9 rounds of 32 nodes in strict order
(`strict_rounds`), the stream the issue describes.

The ideal is strict FIFO with instant scheduling: the gangs are packed first-fit in
submission order into rounds (a round takes consecutive gangs while they fit on the nodes
the earlier gangs of the round left; the first that does not starts the next round), every
round runs `run_seconds`, so the ideal makespan is rounds x run time. With one run time for
every gang no order does better without passing gangs ahead of it.

Figures (`compute_fifo`), from the recording (pods first seen bound and finished):

- **makespan**: first pod created to last pod finished;
- **occupancy**: ideal makespan / makespan (the issue's "0.89 of ideal" = 270 s / 303 s);
- **GPU busy**: GPU-seconds held by the gangs' pods / (makespan x cluster GPUs);
- **inversions**: gangs that started (last member bound) more than `tie` seconds before a
  gang submitted earlier; `tie` (1 s) absorbs the order in which the bindings of gangs
  placed in the same cycle land, which is not a queue decision;
- **largest gap** (and the sum of gaps): the longest time the FIFO head (the
  earliest-submitted gang not started) fitted in the free nodes without starting, i.e. the
  time between a round's nodes coming free and the next round starting, counted from the
  first gang's start on (the time to the first start is `first_start_s`). Under strict FIFO
  that is the whole idle time between rounds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from .metrics import Recording
from .workload import GPUS_PER_NODE, Gang, PodShape, Topology, Workload

FIFO_GANGS: Final = 53
FIFO_SEED: Final = 3
FIFO_SIZE_EXPONENTS: Final = tuple(range(6))  # 2^0 .. 2^5 = 1 .. 32 pods
FIFO_ZIPF_S: Final = 1.5
DEFAULT_RUN_SECONDS: Final = 30.0
INVERSION_TIE_SECONDS: Final = 1.0


def fifo_sizes(seed: int, *, gangs: int = FIFO_GANGS, max_pods: int = 32) -> tuple[int, ...]:
    """The gangs' pod counts in submission order. Deterministic."""
    rng = random.Random(seed)
    exponents = [k for k in FIFO_SIZE_EXPONENTS if 2**k <= max_pods]
    weights = [(k + 1) ** -FIFO_ZIPF_S for k in exponents]
    return tuple(2 ** rng.choices(exponents, weights=weights)[0] for _ in range(gangs))


def generate_fifo_rounds(topology: Topology, *, seed: int = FIFO_SEED, gangs: int = FIFO_GANGS) -> Workload:
    """The stream as a workload: whole-node pods (8 GPUs, 24 CPU, 192 GiB), no topology."""
    sizes = fifo_sizes(seed, gangs=gangs, max_pods=topology.nodes)
    out: list[Gang] = []
    for index, size in enumerate(sizes):
        pods = tuple(
            PodShape(str(i) if size == 1 else f"w{i}", GPUS_PER_NODE, 3 * GPUS_PER_NODE, 24 * GPUS_PER_NODE)
            for i in range(size)
        )
        out.append(Gang(index=index, pods=pods, required=None, preferred_rack=False))
    return Workload(topology=topology, gangs=tuple(out), seed=seed, oversubscription=1.0, kind="fifo-rounds")


def strict_rounds(sizes: Sequence[int], nodes: int) -> list[list[int]]:
    """Gang indices per round under strict FIFO first-fit packing of consecutive gangs."""
    rounds: list[list[int]] = []
    free = 0
    for index, size in enumerate(sizes):
        if size > nodes:
            raise ValueError(f"gang {index} needs {size} nodes, more than the cluster's {nodes}")
        if size > free or not rounds:
            rounds.append([])
            free = nodes
        rounds[-1].append(index)
        free -= size
    return rounds


def ideal_makespan(sizes: Sequence[int], nodes: int, run_seconds: float) -> float:
    return len(strict_rounds(sizes, nodes)) * run_seconds


def ideal_curve(sizes: Sequence[int], nodes: int, run_seconds: float) -> tuple[list[float], list[int]]:
    """Busy GPUs over time of the ideal schedule (step, where='post')."""
    xs: list[float] = []
    ys: list[int] = []
    for number, members in enumerate(strict_rounds(sizes, nodes)):
        xs.append(number * run_seconds)
        ys.append(GPUS_PER_NODE * sum(sizes[i] for i in members))
    xs.append(len(xs) * run_seconds)
    ys.append(0)
    return xs, ys


def inversions(starts: Sequence[float], *, tie: float = INVERSION_TIE_SECONDS) -> int:
    """Gangs (in submission order; never started: inf) that started more than `tie` seconds
    before some gang submitted earlier."""
    count = 0
    latest_ahead = -math.inf
    for start in starts:
        if latest_ahead > start + tie:
            count += 1
        latest_ahead = max(latest_ahead, start)
    return count


@dataclass(frozen=True, slots=True)
class HeadGaps:
    largest: float
    largest_at: float  # when the largest began
    total: float


def head_gaps(
    sizes: Sequence[int],
    nodes: int,
    ready: Sequence[float],
    changes: Sequence[tuple[float, int, int]],
) -> HeadGaps:
    """How long the FIFO head fitted in the free nodes without starting.

    `ready[i]`: when gang i was all created; `changes`: (t, gang, +1 a member bound / -1 a
    member finished), one pod per node. The head is the earliest gang not fully bound; it
    fits when the free nodes cover its members not yet bound.
    """
    bound = [0] * len(sizes)
    running = 0
    head = 0
    fits_since: float | None = None
    largest, largest_at, total = 0.0, 0.0, 0.0

    def close(t: float) -> None:
        nonlocal fits_since, largest, largest_at, total
        if fits_since is not None:
            gap = max(0.0, t - fits_since)
            total += gap
            if gap > largest:
                largest, largest_at = gap, fits_since
            fits_since = None

    events = sorted(changes)
    for i, (t, gang, delta) in enumerate(events):
        bound[gang] += delta if delta > 0 else 0
        running += delta
        if i + 1 < len(events) and events[i + 1][0] == t:
            continue  # simultaneous changes: judge the state after all of them
        while head < len(sizes) and bound[head] >= sizes[head]:
            close(t)
            head += 1
        if head >= len(sizes):
            close(t)
            break
        fits = nodes - running >= sizes[head] - bound[head]
        if fits and fits_since is None:
            fits_since = max(t, ready[head])
        elif not fits:
            close(t)
    return HeadGaps(largest, largest_at, total)


@dataclass(frozen=True, slots=True)
class FifoFigures:
    contestant: str
    gangs: int
    gangs_started: int
    pods_finished: int
    pods: int
    rounds: int
    ideal_makespan_s: float
    makespan_s: float
    occupancy: float  # ideal makespan / makespan
    gpu_busy: float  # GPU-seconds held / (makespan x cluster GPUs)
    inversions: int
    largest_gap_s: float
    largest_gap_at_s: float  # since the first pod was created
    total_gap_s: float
    submit_span_s: float  # first to last pod created
    first_start_s: float  # first pod created to the first gang started (not a gap between rounds)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def gang_times(
    recording: Recording, workload: Workload
) -> tuple[dict[str, float], dict[str, float], list[tuple[float, int, int]]]:
    """(gang -> when its last member was first seen bound, pod -> when first seen finished,
    the (t, gang index, +1/-1) changes of busy nodes). A pod deleted before it finished
    frees its node then."""
    index = {g.pod_name(p): n for n, g in enumerate(workload.gangs) for p in g.pods}
    bound_at: dict[str, float] = {}
    ended: dict[str, float] = {}
    for event in sorted(recording.events, key=lambda e: e.t):
        if event.pod not in index:
            continue
        if event.kind == "bound":
            bound_at.setdefault(event.pod, event.t)
        elif event.pod in bound_at and event.pod not in ended:  # finished, or deleted first
            ended[event.pod] = event.t
    changes = [(t, index[pod], 1) for pod, t in bound_at.items()]
    changes += [(t, index[pod], -1) for pod, t in ended.items()]
    starts: dict[str, float] = {}
    for gang in workload.gangs:
        members = [bound_at.get(gang.pod_name(p)) for p in gang.pods]
        if all(t is not None for t in members):
            starts[gang.name] = max(t for t in members if t is not None)
    return starts, ended, changes


def compute_fifo(
    recording: Recording, workload: Workload, *, run_seconds: float, tie: float = INVERSION_TIE_SECONDS
) -> FifoFigures:
    topology = workload.topology
    sizes = [len(g.pods) for g in workload.gangs]
    starts, ended, changes = gang_times(recording, workload)
    t0 = min(recording.created.values())
    end = max(ended.values(), default=recording.end)
    makespan = end - t0
    ideal = ideal_makespan(sizes, topology.nodes, run_seconds)
    # Each pod holds its node's GPUs from bound to finished (or to the end of the recording).
    held = sum(t for t, _, delta in changes if delta < 0) - sum(t for t, _, delta in changes if delta > 0)
    unfinished = sum(1 for *_, delta in changes if delta > 0) - sum(1 for *_, delta in changes if delta < 0)
    busy = GPUS_PER_NODE * (held + unfinished * recording.end)
    ready = [max(recording.created.get(g.pod_name(p), t0) for p in g.pods) for g in workload.gangs]
    gaps = head_gaps(sizes, topology.nodes, ready, changes)
    order = [starts.get(g.name, math.inf) for g in workload.gangs]
    return FifoFigures(
        contestant=recording.contestant,
        gangs=len(workload.gangs),
        gangs_started=len(starts),
        pods_finished=len(ended),
        pods=workload.pods,
        rounds=len(strict_rounds(sizes, topology.nodes)),
        ideal_makespan_s=ideal,
        makespan_s=makespan,
        occupancy=ideal / makespan if makespan > 0 else 0.0,
        gpu_busy=busy / (makespan * topology.gpus) if makespan > 0 else 0.0,
        inversions=inversions(order, tie=tie),
        largest_gap_s=gaps.largest,
        largest_gap_at_s=gaps.largest_at - t0 if gaps.largest else 0.0,
        total_gap_s=gaps.total,
        submit_span_s=max(recording.created.values()) - t0,
        first_start_s=min(starts.values(), default=math.inf) - t0,
    )


def busy_curve(recording: Recording, workload: Workload) -> tuple[list[float], list[int]]:
    """Busy GPUs over time since the first pod was created (step, where='post')."""
    _, _, changes = gang_times(recording, workload)
    t0 = min(recording.created.values())
    xs, ys = [0.0], [0]
    busy = 0
    for t, _, delta in sorted(changes):
        busy += GPUS_PER_NODE * delta
        xs.append(t - t0)
        ys.append(busy)
    return xs, ys


def fifo_figures_from_json(data: Mapping[str, Any]) -> FifoFigures:
    return FifoFigures(**data)
