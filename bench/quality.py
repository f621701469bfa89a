"""Placement quality at saturation: gangsched's engine vs kube-scheduler TAS vs Kueue TAS BestFit.

Offline, seeded, a few seconds per seed (issue 14, item 1; results go to docs/placement.md).

Input, per seed:
  cluster  `--nodes` GPU nodes (8 GPUs, 128 cpu, 1 TiB each) in zone > block > rack > host,
           16 hosts per rack, 4 racks per block, 2 zones (512 nodes: 8 blocks, 32 racks);
           about half the racks are partly used by bound pods of another scheduler
           (per node of such a rack: 30% full, 25% empty, else 1-7 GPUs used);
  queue    trace-shaped gangs until they ask for TRACE_SHARE of the free GPUs: 1-16 pods of
           1-8 GPUs (cpu and memory in proportion, so GPUs bind), 40% Required block +
           Preferred rack, 30% Preferred rack, 30% unconstrained; then the "hero" gangs, all
           8-GPU pods with Required block + Preferred rack: whole-rack ones (16 pods) and
           two-rack ones (32 pods). Every gang has priority 0; creation times follow the list,
           so the queue order (priority, then creation) is the list order.

Placers, each fed the same queue in the same order, all-or-nothing per gang:
  gangsched  `schedule_cycle` once, on the whole queue. One cycle places the groups in queue
             order and assumes each placement before the next, which is exactly what the
             references do, so the comparison isolates the domain choice (one cycle per
             arrival batch would only add cycle boundaries: no pod finishes in between);
  k8s-tas    bench/quality_refs.place_k8s (kube-scheduler v1.36 TopologyPlacement);
  kueue-bf   bench/quality_refs.place_kueue (Kueue TAS BestFit, LeastFreeCapacity when
             unconstrained).

Every placement is replayed against the cluster in queue order (`evaluate`): a gang over
capacity, partly placed, or outside one value of its Required key fails the run.

Run: python bench/quality.py [--seeds 1 2 3] [--nodes 512] [--diagnose]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "testing"):  # bench.quality_refs, gangsched_testing
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.quality_refs import (  # noqa: E402
    LEVEL_KEYS,
    Cluster,
    Gang,
    Placement,
    Placer,
    place_k8s,
    place_kueue,
    run_sequential,
)

from gangsched.engine import schedule_cycle  # noqa: E402
from gangsched.model import Node, Pod, PodGroup  # noqa: E402
from gangsched_testing.builders import BLOCK, RACK, pod, pod_group, topology_nodes  # noqa: E402

GPUS_PER_NODE = 8
HOSTS_PER_RACK = 16
RACKS_PER_BLOCK = 4
TRACE_SHARE = 0.6
"""The trace gangs ask for this share of the GPUs free at the start; the heroes come on top."""
HEROES_PER_512 = (6, 3)
"""Whole-rack and two-rack hero gangs per 512 nodes (together about half the free GPUs)."""
NAMESPACE = "ml"
START = datetime(2026, 1, 1, tzinfo=UTC)

KINDS = ("block+rack", "rack", "none", "hero-rack", "hero-2rack")
PLACERS = ("gangsched", "k8s-tas", "kueue-bf")


@dataclass(frozen=True, slots=True)
class GangSpec:
    """One gang of the queue: `pods` pods of `gpus` GPUs each; `kind` (KINDS) sets its constraints."""

    name: str
    kind: str
    pods: int
    gpus: int
    created: str

    @property
    def hero(self) -> bool:
        return self.kind.startswith("hero")

    @property
    def required(self) -> str | None:
        return BLOCK if self.kind in ("block+rack", "hero-rack", "hero-2rack") else None

    @property
    def preferred(self) -> str | None:
        return None if self.kind == "none" else RACK

    @property
    def cpu(self) -> str:
        return str(8 * self.gpus)

    @property
    def memory(self) -> str:
        return f"{64 * self.gpus}Gi"


# --------------------------------------------------------------------------- input


def shape(nodes: int) -> tuple[int, int, int, int]:
    """(zones, blocks per zone, racks per block, hosts per rack) for `nodes` nodes."""
    block = RACKS_PER_BLOCK * HOSTS_PER_RACK
    if nodes < block or nodes % block:
        raise ValueError(f"--nodes must be a multiple of {block} (one block)")
    blocks = nodes // block
    zones = 2 if blocks % 2 == 0 else 1
    return zones, blocks // zones, RACKS_PER_BLOCK, HOSTS_PER_RACK


def build_cluster(seed: int, nodes: int) -> tuple[list[Node], list[Pod]]:
    """The nodes and the bound pods of another scheduler that partly use about half the racks."""
    rng = random.Random(seed)
    node_list = topology_nodes(*shape(nodes), cpu="128", memory="1024Gi", gpu=GPUS_PER_NODE, ready=None)
    bound: list[Pod] = []
    for start in range(0, len(node_list), HOSTS_PER_RACK):
        if rng.random() >= 0.5:
            continue
        used = []
        for _ in range(HOSTS_PER_RACK):
            u = rng.random()
            used.append(GPUS_PER_NODE if u < 0.3 else 0 if u < 0.55 else rng.randint(1, GPUS_PER_NODE - 1))
        if sum(used) in (0, GPUS_PER_NODE * HOSTS_PER_RACK):  # partly used, never empty or full
            used[0] = GPUS_PER_NODE // 2
        for node, gpus in zip(node_list[start : start + HOSTS_PER_RACK], used, strict=True):
            if gpus:
                bound.append(
                    pod(
                        f"bg-{node.name}",
                        namespace="load",
                        cpu=str(8 * gpus),
                        memory=f"{64 * gpus}Gi",
                        gpu=gpus,
                        scheduler="default-scheduler",
                        node_name=node.name,
                    )
                )
    return node_list, bound


def build_queue(seed: int, nodes: int, free_gpus: int) -> list[GangSpec]:
    """Trace-shaped gangs asking for TRACE_SHARE of `free_gpus`, then the hero gangs."""
    rng = random.Random(seed * 7919 + 1)
    specs: list[tuple[str, int, int]] = []
    asked = 0
    while asked < TRACE_SHARE * free_gpus:
        pods = rng.choices((1, 2, 3, 4, 6, 8, 12, 16), weights=(30, 15, 5, 15, 5, 15, 5, 10))[0]
        gpus = rng.choices((1, 2, 4, 8), weights=(20, 15, 25, 40))[0]
        kind = rng.choices(KINDS[:3], weights=(40, 30, 30))[0]
        specs.append((kind, pods, gpus))
        asked += pods * gpus
    scale = nodes / 512
    rack_heroes, two_rack_heroes = (max(1, round(n * scale)) for n in HEROES_PER_512)
    heroes: list[str] = []  # interleaved: two whole-rack heroes, then a two-rack one, ...
    while rack_heroes or two_rack_heroes:
        for _ in range(min(2, rack_heroes)):
            heroes.append("hero-rack")
            rack_heroes -= 1
        if two_rack_heroes:
            heroes.append("hero-2rack")
            two_rack_heroes -= 1
    specs += [(kind, HOSTS_PER_RACK * (2 if kind == "hero-2rack" else 1), GPUS_PER_NODE) for kind in heroes]
    width = len(str(len(specs)))
    return [
        GangSpec(
            f"g{i:0{width}d}-{kind}",
            kind,
            pods,
            gpus,
            (START + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        for i, (kind, pods, gpus) in enumerate(specs)
    ]


def reference_gangs(queue: Sequence[GangSpec]) -> list[Gang]:
    """The queue as the reference placers see it (requests parsed like the engine's)."""
    gangs = []
    for spec in queue:
        member = pod("x", "x", cpu=spec.cpu, memory=spec.memory, gpu=spec.gpus)
        gangs.append(Gang(spec.name, spec.pods, dict(member.requests), spec.required, spec.preferred))
    return gangs


def engine_objects(queue: Sequence[GangSpec]) -> tuple[list[Pod], list[PodGroup]]:
    """The queue as gangsched sees it: pending pods and their PodGroups."""
    pods: list[Pod] = []
    groups: list[PodGroup] = []
    for spec in queue:
        topology = [
            (key, mode) for key, mode in ((spec.required, "Required"), (spec.preferred, "Preferred")) if key
        ]
        groups.append(
            pod_group(spec.name, spec.pods, namespace=NAMESPACE, topology=topology, created=spec.created)
        )
        pods += [
            pod(
                f"{spec.name}-{i}",
                spec.name,
                namespace=NAMESPACE,
                cpu=spec.cpu,
                memory=spec.memory,
                gpu=spec.gpus,
                created=spec.created,
            )
            for i in range(spec.pods)
        ]
    return pods, groups


# --------------------------------------------------------------------------- placers


def run_gangsched(
    nodes: Sequence[Node], bound: Sequence[Pod], queue: Sequence[GangSpec]
) -> tuple[dict[str, Placement], dict[str, str]]:
    """One `schedule_cycle` over the whole queue: placements, and each unplaced gang's message."""
    pending, groups = engine_objects(queue)
    result = schedule_cycle(nodes=nodes, pods=[*bound, *pending], pod_groups=groups)
    index = {n.name: i for i, n in enumerate(nodes)}
    placed: dict[str, Placement] = {}
    messages: dict[str, str] = {}
    for decision in result.decisions:
        if not decision.scheduled:
            messages[decision.name] = decision.message
            continue
        placement: Placement = {}
        for node in decision.assignments.values():
            placement[index[node]] = placement.get(index[node], 0) + 1
        placed[decision.name] = placement
    return placed, messages


def run_reference(placer: Placer, cluster: Cluster, queue: Sequence[GangSpec]) -> dict[str, Placement]:
    return run_sequential(placer, cluster, reference_gangs(queue))


# --------------------------------------------------------------------------- evaluation


@dataclass(slots=True)
class Quality:
    """One placer's result on one seed."""

    placer: str
    gangs: int = 0
    heroes: int = 0
    gpus: int = 0
    pref_rack: int = 0  # placed trace gangs with a Preferred rack
    pref_rack_one: int = 0  # ... of which inside one rack
    multi_pod: int = 0  # placed trace gangs of more than one pod
    multi_pod_racks: int = 0  # ... and the racks they span, summed
    racks_broken: int = 0  # trace gangs that took pods into a rack that was entirely free
    # ... per kind: such gangs, and under "<kind> GPUs" the GPUs they took in those racks
    broken_by_kind: Counter[str] = field(default_factory=Counter)
    free_racks_after_trace: int = 0
    seconds: float = 0.0
    placed: dict[str, Placement] = field(default_factory=dict)

    @property
    def one_rack_share(self) -> float:
        return self.pref_rack_one / self.pref_rack if self.pref_rack else 1.0

    @property
    def racks_per_gang(self) -> float:
        return self.multi_pod_racks / self.multi_pod if self.multi_pod else 1.0


def evaluate(
    name: str, cluster: Cluster, queue: Sequence[GangSpec], placed: Mapping[str, Placement]
) -> Quality:
    """Replay `placed` in queue order on `cluster`, checking the invariants, and measure it.

    Raises AssertionError when a gang is partly placed, spans more than one value of its
    Required key, or a node goes over capacity.
    """
    state = cluster.copy()
    gangs = {g.name: g for g in reference_gangs(queue)}
    known = {spec.name for spec in queue}
    assert set(placed) <= known, f"{name}: unknown gangs {set(placed) - known}"
    rack_level, full = LEVEL_KEYS.index(RACK), state.alloc
    rack_nodes: dict[str, list[int]] = {}
    for i, path in enumerate(state.paths):
        rack_nodes.setdefault(path[rack_level], []).append(i)
    out = Quality(name)
    for spec in queue:
        if spec.hero and not out.free_racks_after_trace:
            out.free_racks_after_trace = _free_racks(state, full, rack_nodes)
        placement = placed.get(spec.name)
        if placement is None:
            continue
        gang = gangs[spec.name]
        assert sum(placement.values()) == spec.pods, f"{name}: {spec.name} partly placed: {placement}"
        assert all(n > 0 for n in placement.values())
        if gang.required is not None:
            level = LEVEL_KEYS.index(gang.required)
            values = {state.paths[i][level] for i in placement}
            assert len(values) == 1, f"{name}: {spec.name} spans {sorted(values)} of {gang.required}"
        racks = {state.paths[i][rack_level] for i in placement}
        if not spec.hero:
            whole = {r for r in racks if (state.free[rack_nodes[r]] == full[rack_nodes[r]]).all()}
            if whole:
                out.racks_broken += 1
                out.broken_by_kind[spec.kind] += 1
                taken = sum(n for i, n in placement.items() if state.paths[i][rack_level] in whole)
                out.broken_by_kind[f"{spec.kind} GPUs"] += taken * spec.gpus
        try:
            state.apply(placement, gang.request)
        except ValueError as err:
            raise AssertionError(f"{name}: {spec.name}: {err}") from None
        out.gangs += 1
        out.heroes += spec.hero
        out.gpus += spec.pods * spec.gpus
        if not spec.hero:
            if spec.preferred == RACK:
                out.pref_rack += 1
                out.pref_rack_one += len(racks) == 1
            if spec.pods > 1:
                out.multi_pod += 1
                out.multi_pod_racks += len(racks)
    out.placed = dict(placed)
    return out


def _free_racks(state: Cluster, full: np.ndarray, rack_nodes: Mapping[str, list[int]]) -> int:
    """Racks with every node entirely free."""
    return sum(bool((state.free[nodes] == full[nodes]).all()) for nodes in rack_nodes.values())


@dataclass(slots=True)
class SeedResult:
    seed: int
    nodes: int
    free_gpus: int
    trace_gangs: int
    trace_gpus: int
    heroes: int
    hero_gpus: int
    free_racks: int  # racks entirely free before the queue
    results: list[Quality]
    messages: dict[str, str]  # gangsched's message for each gang it left unplaced
    queue: list[GangSpec]


def run_seed(seed: int, nodes: int) -> SeedResult:
    """Build the input of `seed`, run the three placers on it and evaluate each."""
    node_list, bound = build_cluster(seed, nodes)
    cluster = Cluster.build(node_list, bound)
    gpu = 3  # column of nvidia.com/gpu in quality_refs.RESOURCES
    free_gpus = int(cluster.free[:, gpu].sum()) // 1000
    queue = build_queue(seed, nodes, free_gpus)
    results = []
    t0 = time.perf_counter()
    placed, messages = run_gangsched(node_list, bound, queue)
    results.append(evaluate("gangsched", cluster, queue, placed))
    results[-1].seconds = time.perf_counter() - t0
    for name, placer in (("k8s-tas", place_k8s), ("kueue-bf", place_kueue)):
        t0 = time.perf_counter()
        results.append(evaluate(name, cluster, queue, run_reference(placer, cluster, queue)))
        results[-1].seconds = time.perf_counter() - t0
    trace = [s for s in queue if not s.hero]
    heroes = [s for s in queue if s.hero]
    rack_level = LEVEL_KEYS.index(RACK)
    racks: dict[str, bool] = {}
    for i, path in enumerate(cluster.paths):
        racks[path[rack_level]] = racks.get(path[rack_level], True) and bool(
            (cluster.free[i] == cluster.alloc[i]).all()
        )
    return SeedResult(
        seed=seed,
        nodes=nodes,
        free_gpus=free_gpus,
        trace_gangs=len(trace),
        trace_gpus=sum(s.pods * s.gpus for s in trace),
        heroes=len(heroes),
        hero_gpus=sum(s.pods * s.gpus for s in heroes),
        free_racks=sum(racks.values()),
        results=results,
        messages=messages,
        queue=queue,
    )


# --------------------------------------------------------------------------- report


def table(runs: Sequence[SeedResult]) -> str:
    """The markdown table: one row per seed and placer."""
    lines = [
        "| seed | placer | gangs placed | hero gangs | GPUs placed | Preferred-rack gangs in one rack "
        "| racks per gang | trace gangs breaking a free rack | free racks before heroes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for q in run.results:
            lines.append(
                f"| {run.seed} | {q.placer} | {q.gangs}/{run.trace_gangs + run.heroes} "
                f"| {q.heroes}/{run.heroes} | {q.gpus:,} "
                f"| {q.one_rack_share:.2f} ({q.pref_rack_one}/{q.pref_rack}) "
                f"| {q.racks_per_gang:.2f} | {q.racks_broken} | {q.free_racks_after_trace} |"
            )
    return "\n".join(lines)


def inputs(runs: Sequence[SeedResult]) -> str:
    return "\n".join(
        f"seed {r.seed}: {r.nodes} nodes, {r.free_gpus:,} GPUs free, {r.free_racks} racks free; "
        f"{r.trace_gangs} trace gangs ({r.trace_gpus:,} GPUs), {r.heroes} heroes ({r.hero_gpus:,} GPUs); "
        + ", ".join(f"{q.placer} {q.seconds:.1f}s" for q in r.results)
        for r in runs
    )


def diagnose(run: SeedResult) -> str:
    """Where the placers differ on one seed.

    Per placer, the trace gangs that broke an entirely free rack, by kind (gangs, GPUs);
    then the gangs one of gangsched / Kueue BestFit placed and the other did not, with
    gangsched's message.
    """
    ours, kueue = run.results[0].placed, run.results[2].placed
    lines = [f"seed {run.seed}:"]
    for q in run.results:
        broken = ", ".join(
            f"{kind} {q.broken_by_kind[kind]} ({q.broken_by_kind[kind + ' GPUs']} GPUs)"
            for kind in KINDS[:3]
            if q.broken_by_kind[kind]
        )
        lines.append(f"  {q.placer:9} trace gangs breaking a free rack (GPUs taken there): {broken or '-'}")
    for spec in run.queue:
        if (spec.name in kueue) == (spec.name in ours):
            continue
        who = "kueue-bf only" if spec.name in kueue else "gangsched only"
        line = f"  {who:15} {spec.name} {spec.pods}x{spec.gpus} GPU"
        if spec.name in kueue:
            line += f": {run.messages.get(spec.name, '')}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds (default 1 2 3)")
    parser.add_argument("--nodes", type=int, default=512, help="nodes, a multiple of 64 (default 512)")
    parser.add_argument(
        "--diagnose", action="store_true", help="list gangs placed by only one of gangsched/Kueue"
    )
    args = parser.parse_args(argv)
    try:
        shape(args.nodes)
    except ValueError as err:
        parser.error(str(err))
    runs = [run_seed(seed, args.nodes) for seed in args.seeds]
    print(inputs(runs))
    print()
    print(table(runs))
    if args.diagnose:
        for run in runs:
            print(diagnose(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
