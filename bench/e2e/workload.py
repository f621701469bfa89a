"""The benchmark's cluster shape and workload, and their manifests for both contestants. Pure.

Gang sizes. The trace facts used (shared/reference/placement-algorithms.md §4, §5.6):
- Philly (117,325 jobs) ran on 8-GPU servers: nodes here have 8 GPUs, and the common
  multi-node layout is one 8-GPU worker pod per server.
- Alibaba PAI 2020 jobs are tasks with roles (ps/worker/evaluator) of different shapes,
  "natively heterogeneous gangs": some gangs here are 1 CPU-only launcher + N GPU workers
  (the MPI/DeepSpeed launcher layout).
- Helios records `gpu_num` and `node_num` per job, i.e. single-node jobs of 1-8 GPUs next to
  multi-node gangs.
- §5.6 expects "mostly 1-8 GPU single-node jobs, a heavy tail of multi-node gangs" and, as the
  synthetic stand-in while the distributions are not computed from the traces, "sizes 2^k
  with Zipf weights". That is what this module draws: 2^k pods, k = 0..8 (1 to 256), weight
  (k + 1)^-1.5, so 85 % of gangs have at most 8 pods and about 2 % have 256.

A gang's GPU demand is capped at a third of the cluster (so a 256-pod gang of 8-GPU workers
needs the 1,000-node cluster; at 100 nodes the tail is cut to what fits).

Two kinds of workload (`WorkloadKind`):

- ``gpu``: GPUs are the extended resource ``nvidia.com/gpu`` on the nodes and in the pods.
- ``dra``: the nodes have no extended GPUs; a fake DRA driver (gangsched_testing.fakedra)
  publishes each node's 8 GPUs as devices in a ResourceSlice, and every GPU pod takes one
  GPU through a ResourceClaimTemplate (``TEMPLATE``: one request of one device of the
  driver's class), so each pod gets a claim of its own from the resourceclaim controller.
  Same draws as ``gpu`` (gang sizes, launchers, topology mix, in the same order), but every
  GPU pod asks for exactly one GPU: a claim per GPU is what a DRA cluster's per-device
  accounting costs, and one device per claim keeps the two contestants' allocators on the
  same problem. So the same oversubscription takes about 5x the pods of ``gpu``.
- ``jobs``: the gangs of ``gpu`` (same draws, same order), each submitted as batch/v1 Jobs
  that the real Job controller turns into pods, which gangsched makes automatic gangs of
  (issue 24; `job_submission`). The same gangs as PodGroups are the baseline it is compared
  with.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gangsched.model import MIN_COUNT_ANNOTATION, TOPOLOGY_ANNOTATION
from gangsched_testing import builders, fakedra
from gangsched_testing import dra as dra_builders
from gangsched_testing.builders import pod_group_manifest
from gangsched_testing.fakenodes import NodeSet, TopologyKeys, TopologyShape, node_manifests

# bare: hack/bare-binder, which binds each pod round-robin and schedules nothing; it is fed
# gangsched's objects (PodGroups it never reads), so the load is the same as gangsched's.
Flavour = Literal["gangsched", "native", "bare"]
# What the jobs workload feeds gangsched: the gangs as PodGroups and pods the benchmark creates
# (`podgroups`); as Jobs whose pods the Job controller creates, gangs formed automatically
# (`jobs`); as such Jobs whose pod template carries the pod-group label of a PodGroup the
# benchmark creates first (`labelled-jobs`: the Job controller's share of the cost, without
# automatic gangs).
Feed = Literal["podgroups", "jobs", "labelled-jobs"]
# fifo-rounds: issue 26's stream of whole-node gangs (bench/e2e/fifo.py)
WorkloadKind = Literal["gpu", "dra", "preemption", "jobs", "fifo-rounds"]
Level = Literal["rack", "block"]
Priority = Literal["low", "high"]
Manifest = dict[str, Any]

GPU: Final = "nvidia.com/gpu"
KEYS: Final = TopologyKeys()
BLOCK_KEY: Final = "example.com/block"
RACK_KEY: Final = "example.com/rack"
LEVEL_KEYS: Final[Mapping[Level, str]] = {"rack": RACK_KEY, "block": BLOCK_KEY}
GANG_LABEL: Final = "bench.gangsched.io/gang"
POOL_LABEL: Final = "bench.gangsched.io/pool"
SCHEDULER_NAMES: Final[Mapping[Flavour, str]] = {
    "gangsched": "gangsched",
    "native": "native-gang",
    "bare": "bare-binder",
}
NATIVE_API: Final = "scheduling.k8s.io/v1alpha2"
GANGSCHED_API: Final = "scheduling.gangsched.io/v1alpha1"

GPUS_PER_NODE: Final = 8
TEMPLATE: Final = "bench-one-gpu"  # the dra workload's ResourceClaimTemplate
CLAIM_ENTRY: Final = "gpu"  # its entry in pod.spec.resourceClaims
NODE_CPU: Final = 32
NODE_MEMORY_GI: Final = 256
LAUNCHER_CPU: Final = 2
LAUNCHER_MEMORY_GI: Final = 8

SIZE_EXPONENTS: Final = tuple(range(9))  # 2^0 .. 2^8 = 1 .. 256 pods
ZIPF_S: Final = 1.5
SINGLE_POD_GPUS: Final = ((1, 0.4), (2, 0.2), (4, 0.2), (8, 0.2))
WORKER_GPUS: Final = ((8, 0.5), (4, 0.25), (2, 0.125), (1, 0.125))
LAUNCHER_SHARE: Final = 0.3
# Constraint mix of multi-pod gangs (cumulative thresholds of one uniform draw).
REQUIRED_RACK_SHARE: Final = 0.25  # only when the gang needs at most half a rack
REQUIRED_BLOCK_SHARE: Final = 0.30  # Required block + Preferred rack; at most half a block
PREFERRED_RACK_SHARE: Final = 0.30  # Preferred rack only (native: unconstrained)
# The preemption workload (`generate_preemption`).
PRIORITY_VALUES: Final[Mapping[Priority, int]] = {"low": 1000, "high": 100000}
LOW_SIZE_EXPONENTS: Final = (1, 2, 3)  # 2 .. 8 pods
LOW_HALF_NODE_SHARE: Final = 0.3  # low gangs made of 4-GPU pods (two per node)
HIGH_SIZE_EXPONENTS: Final = (1, 2, 3)  # 2 .. 8 pods of 8 GPUs


@dataclass(frozen=True, slots=True)
class Topology:
    """`nodes` nodes: racks of `rack_size`, blocks of `racks_per_block` racks, zones of blocks."""

    nodes: int
    rack_size: int = 10
    racks_per_block: int = 10
    blocks_per_zone: int = 10

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.nodes % self.rack_size:
            raise ValueError(f"--nodes must be a positive multiple of the rack size {self.rack_size}")
        racks = self.nodes // self.rack_size
        if racks > self.racks_per_block and racks % self.racks_per_block:
            raise ValueError(
                f"{racks} racks do not make whole blocks of {self.racks_per_block} "
                f"(use a multiple of {self.rack_size * self.racks_per_block} nodes)"
            )
        blocks = max(1, racks // self.racks_per_block)
        if blocks > self.blocks_per_zone and blocks % self.blocks_per_zone:
            raise ValueError(f"{blocks} blocks do not make whole zones of {self.blocks_per_zone}")

    @property
    def shape(self) -> TopologyShape:
        racks = self.nodes // self.rack_size
        per_block = min(racks, self.racks_per_block)
        blocks = racks // per_block
        per_zone = min(blocks, self.blocks_per_zone)
        return TopologyShape(zones=blocks // per_zone, blocks=per_zone, racks=per_block, hosts=self.rack_size)

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE

    @property
    def rack_gpus(self) -> int:
        return self.shape.hosts * GPUS_PER_NODE

    @property
    def block_gpus(self) -> int:
        return self.shape.hosts * self.shape.racks * GPUS_PER_NODE

    def describe(self) -> str:
        s = self.shape
        return (
            f"{self.nodes} nodes x {GPUS_PER_NODE} GPUs: {s.zones} zone(s) x {s.blocks} blocks x "
            f"{s.racks} racks x {s.hosts} hosts"
        )


@dataclass(frozen=True, slots=True)
class PodShape:
    """One member pod: its name inside the gang and its requests."""

    name: str
    gpus: int
    cpu: int
    memory_gi: int


@dataclass(frozen=True, slots=True)
class Gang:
    """A job: `pods` placed all or nothing (minCount = every pod), with its topology wishes."""

    index: int
    pods: tuple[PodShape, ...]
    required: Level | None
    preferred_rack: bool
    priority: Priority | None = None  # the preemption workload only: its PriorityClass

    @property
    def name(self) -> str:
        return f"{'h' if self.priority == 'high' else 'g'}{self.index:05d}"

    @property
    def min_count(self) -> int:
        return len(self.pods)

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pods)

    @property
    def is_group(self) -> bool:
        """Single pods have no PodGroup with either contestant."""
        return len(self.pods) > 1

    @property
    def launcher(self) -> bool:
        return any(p.gpus == 0 for p in self.pods)

    def pod_name(self, pod: PodShape) -> str:
        return f"{self.name}-{pod.name}"


@dataclass(frozen=True, slots=True)
class Workload:
    topology: Topology
    gangs: tuple[Gang, ...]
    seed: int
    oversubscription: float
    kind: WorkloadKind = "gpu"

    @property
    def dra(self) -> bool:
        return self.kind == "dra"

    @property
    def low(self) -> tuple[Gang, ...]:
        """The preemption workload's saturating gangs (every gang of the other kinds)."""
        return tuple(g for g in self.gangs if g.priority != "high")

    @property
    def high(self) -> tuple[Gang, ...]:
        """The preemption workload's stream of high-priority gangs (none for the other kinds)."""
        return tuple(g for g in self.gangs if g.priority == "high")

    @property
    def pods(self) -> int:
        return sum(len(g.pods) for g in self.gangs)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.gangs)

    def summary(self) -> dict[str, Any]:
        gangs = self.gangs
        groups = [g for g in gangs if g.is_group]
        extra: dict[str, Any] = {}
        if self.kind == "preemption":
            extra = {
                "low_gangs": len(self.low),
                "low_pods": sum(len(g.pods) for g in self.low),
                "low_half_node_gangs": sum(1 for g in self.low if g.pods[0].gpus < GPUS_PER_NODE),
                "high_gangs": len(self.high),
                "high_pods": sum(len(g.pods) for g in self.high),
                "high_gpus": sum(g.gpus for g in self.high),
            }
        return {
            **extra,
            "kind": self.kind,
            "gangs": len(gangs),
            "pods": self.pods,
            "requested_gpus": self.gpus,
            "cluster_gpus": self.topology.gpus,
            "single_pod_jobs": len(gangs) - len(groups),
            "gangs_le_8_pods": sum(1 for g in gangs if len(g.pods) <= 8),
            "largest_gang": max((len(g.pods) for g in gangs), default=0),
            "with_launcher": sum(1 for g in groups if g.launcher),
            "required_rack": sum(1 for g in groups if g.required == "rack"),
            "required_block_preferred_rack": sum(1 for g in groups if g.required == "block"),
            "preferred_rack_only": sum(1 for g in groups if g.required is None and g.preferred_rack),
            "unconstrained_groups": sum(1 for g in groups if g.required is None and not g.preferred_rack),
        }


def _pick(rng: random.Random, table: Sequence[tuple[int, float]]) -> int:
    values = [value for value, _ in table]
    weights = [weight for _, weight in table]
    return rng.choices(values, weights=weights)[0]


def generate(
    topology: Topology,
    *,
    seed: int,
    oversubscription: float,
    max_gang: int = 256,
    kind: WorkloadKind = "gpu",
) -> Workload:
    """Gangs drawn until their GPUs reach `oversubscription` x the cluster's GPUs. Deterministic.

    ``dra``: the same draws, but every GPU pod takes one GPU (the draw is made and then
    overridden, so the random stream, and with it the sequence of gang shapes, stays that of
    ``gpu``).
    """
    one = kind == "dra"
    rng = random.Random(seed)
    cap = max(GPUS_PER_NODE, topology.gpus // 3)
    exponents = [k for k in SIZE_EXPONENTS if 2**k <= max_gang]
    weights = [(k + 1) ** -ZIPF_S for k in exponents]
    gangs: list[Gang] = []
    requested = 0
    target = oversubscription * topology.gpus
    while requested < target:
        size = 2 ** rng.choices(exponents, weights=weights)[0]
        if size == 1:
            gpus = _pick(rng, SINGLE_POD_GPUS)
            gpus = 1 if one else gpus
            pods: tuple[PodShape, ...] = (PodShape("0", gpus, 3 * gpus, 24 * gpus),)
            gang = Gang(index=len(gangs), pods=pods, required=None, preferred_rack=False)
        else:
            gpus = _pick(rng, WORKER_GPUS)
            gpus = 1 if one else gpus
            while size * gpus > cap and size > 2:
                size //= 2
            while size * gpus > cap and gpus > 1:
                gpus //= 2
            workers = tuple(PodShape(f"w{i}", gpus, 3 * gpus, 24 * gpus) for i in range(size))
            launcher = rng.random() < LAUNCHER_SHARE
            if launcher:
                workers = (PodShape("launcher", 0, LAUNCHER_CPU, LAUNCHER_MEMORY_GI), *workers)
            demand = size * gpus
            u = rng.random()
            required: Level | None = None
            preferred = False
            if u < REQUIRED_RACK_SHARE:
                if 2 * demand <= topology.rack_gpus:
                    required = "rack"
                else:
                    preferred = True
            elif u < REQUIRED_RACK_SHARE + REQUIRED_BLOCK_SHARE:
                preferred = True
                if 2 * demand <= topology.block_gpus:
                    required = "block"
            elif u < REQUIRED_RACK_SHARE + REQUIRED_BLOCK_SHARE + PREFERRED_RACK_SHARE:
                preferred = True
            gang = Gang(index=len(gangs), pods=workers, required=required, preferred_rack=preferred)
        gangs.append(gang)
        requested += gang.gpus
    return Workload(
        topology=topology, gangs=tuple(gangs), seed=seed, oversubscription=oversubscription, kind=kind
    )


def generate_preemption(topology: Topology, *, seed: int, high_share: float = 0.5) -> Workload:
    """Low-priority gangs that fill every GPU, then high-priority gangs for `high_share` of them.

    Low gangs (PriorityClass low): 2^k pods, k = 1..3, Zipf weights as in `generate` (gangs,
    not single pods: both schedulers evict a single pod before any gang of the same priority,
    so singles would spare the gangs the test is about); 8-GPU pods (one per node), except
    that 30 % are made of 4-GPU pods (two per node, so a node can hold members of two low
    gangs and freeing it can take two victims). Drawn until the next one would overflow the
    cluster, then 2-pod gangs of 8-GPU pods fill the rest (one 8-GPU single pod if one node is
    left): their GPUs are exactly the cluster's, and since every pod is a whole node or half
    of one in pairs, any packing that places them all fills every GPU.

    High gangs (PriorityClass high): 2, 4 or 8 pods of 8 GPUs (whole nodes), Zipf weights,
    until their GPUs reach `high_share` of the cluster. With the cluster full of low pods none
    of them can run without preempting. No gang has a topology constraint (kube-scheduler's
    workload-aware preemption refuses preemptors with one, see docs/benchmarks.md).
    Deterministic; low gangs first (named g<index>), then the high ones (h<index>).
    """
    rng = random.Random(seed)
    weights = [(k + 1) ** -ZIPF_S for k in LOW_SIZE_EXPONENTS]
    gangs: list[Gang] = []
    free = topology.gpus
    while True:
        size = 2 ** rng.choices(LOW_SIZE_EXPONENTS, weights=weights)[0]
        gpus = GPUS_PER_NODE // 2 if size > 1 and rng.random() < LOW_HALF_NODE_SHARE else GPUS_PER_NODE
        if size * gpus > free:
            break
        gangs.append(_uniform_gang(len(gangs), size, gpus, "low"))
        free -= size * gpus
    while free > 0:  # the draws are multiples of 8 GPUs, so whole nodes are left
        size = 2 if free >= 2 * GPUS_PER_NODE else 1
        gangs.append(_uniform_gang(len(gangs), size, GPUS_PER_NODE, "low"))
        free -= size * GPUS_PER_NODE
    high_weights = [(k + 1) ** -ZIPF_S for k in HIGH_SIZE_EXPONENTS]
    target = high_share * topology.gpus
    requested = 0
    while requested + 2 * GPUS_PER_NODE <= target:
        size = 2 ** rng.choices(HIGH_SIZE_EXPONENTS, weights=high_weights)[0]
        while size > 2 and requested + size * GPUS_PER_NODE > target:
            size //= 2
        gangs.append(_uniform_gang(len(gangs), size, GPUS_PER_NODE, "high"))
        requested += size * GPUS_PER_NODE
    return Workload(
        topology=topology, gangs=tuple(gangs), seed=seed, oversubscription=1.0 + high_share, kind="preemption"
    )


def generate_backlog(
    topology: Topology, *, gangs: int, size: int, gpus: int = 1, required: Level | None = "rack"
) -> Workload:
    """`gangs` gangs of `size` pods of `gpus` GPUs each (3 CPU and 24 GiB per GPU, as every
    pod here), each with a Required `required` domain: the fixed backlog of issue 27 (250
    gangs of 8 one-GPU pods, Required rack), created before the scheduler starts
    (bench/startup.py `--backlog 250x8`). Refuses a backlog that could never fit: a gang
    larger than its domain, or more GPUs than the cluster has.
    """
    if gangs < 1 or size < 1 or gpus < 1:
        raise ValueError(f"a backlog needs gangs, pods and GPUs, not {gangs}x{size} of {gpus} GPU(s)")
    domain = {"rack": topology.rack_gpus, "block": topology.block_gpus, None: topology.gpus}[required]
    if size * gpus > domain:
        raise ValueError(f"a gang of {size} x {gpus} GPUs does not fit one {required or 'cluster'}")
    if gangs * size * gpus > topology.gpus:
        raise ValueError(f"{gangs * size * gpus} GPUs asked for, the cluster has {topology.gpus}")
    out = tuple(
        Gang(
            index=i,
            pods=tuple(PodShape(f"w{j}", gpus, 3 * gpus, 24 * gpus) for j in range(size)),
            required=required,
            preferred_rack=False,
        )
        for i in range(gangs)
    )
    return Workload(
        topology=topology, gangs=out, seed=0, oversubscription=gangs * size * gpus / topology.gpus
    )


def _uniform_gang(index: int, size: int, gpus: int, priority: Priority) -> Gang:
    pods = tuple(PodShape(str(i) if size == 1 else f"w{i}", gpus, 3 * gpus, 24 * gpus) for i in range(size))
    return Gang(index=index, pods=pods, required=None, preferred_rack=False, priority=priority)


def priority_class_name(priority: Priority, *, pool: str) -> str:
    """The benchmark's PriorityClasses are cluster-wide: named after the node pool."""
    return f"{pool}-{priority}"


def priority_class_manifests(pool: str) -> list[Manifest]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority_class_name(level, pool=pool)},
            "value": value,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        for level, value in PRIORITY_VALUES.items()
    ]


# --------------------------------------------------------------------------------------------
# Manifests


def node_set(topology: Topology, *, pool: str, dra: bool = False) -> NodeSet:
    """The fake nodes: names and topology label values are prefixed with the pool.

    With `dra` they have no extended GPUs: their GPUs are the fake driver's devices
    (`node_devices`). The oracle always uses the extended form: on these nodes, with one
    device per claim and every device alike, "a free GPU device" and "a free unit of
    nvidia.com/gpu" are the same thing, so feasibility is the same question.
    """
    return NodeSet(
        shape=topology.shape,
        name_prefix=f"{pool}-",
        cpu=str(NODE_CPU),
        memory=f"{NODE_MEMORY_GI}Gi",
        extended={} if dra else {GPU: str(GPUS_PER_NODE)},
        labels={POOL_LABEL: pool},
    )


def node_devices() -> fakedra.NodeDevices:
    """What the fake driver publishes for each node of the dra workload: 8 GPUs, nothing else."""
    return fakedra.NodeDevices(gpus=GPUS_PER_NODE, gpu_model="H100")


def claim_template(namespace: str) -> Manifest:
    """The dra workload's ResourceClaimTemplate: one device of the fake driver's class."""
    return dra_builders.claim_template(namespace, TEMPLATE, dra_builders.request(CLAIM_ENTRY))


def node_domains(topology: Topology, *, pool: str) -> dict[str, tuple[str, str]]:
    """node name -> (block, rack) label values."""
    out: dict[str, tuple[str, str]] = {}
    for node in node_manifests(spec=node_set(topology, pool=pool)):
        labels = node["metadata"]["labels"]
        out[node["metadata"]["name"]] = (labels[BLOCK_KEY], labels[RACK_KEY])
    return out


def group_manifest(gang: Gang, flavour: Flavour, *, pool: str = "bench") -> Manifest | None:
    """The PodGroup of a multi-pod gang, or None for a single pod.

    gangsched: Required level (if any), then a Preferred rack (bare gets the same, and ignores
    it). Native: only the Required level becomes `schedulingConstraints.topology` (one level,
    and native has no Preferred mode).
    A gang of the preemption workload names its PriorityClass and `disruptionMode: PodGroup`
    with both (gangsched's default for gangs; kube-scheduler's default is Pod, which would
    let it evict single members of a gang).
    """
    if not gang.is_group:
        return None
    priority_class = None if gang.priority is None else priority_class_name(gang.priority, pool=pool)
    if flavour != "native":
        return pod_group_manifest(
            gang.name,
            gang.min_count,
            namespace=None,
            topology=gangsched_topology(gang),
            priority_class=priority_class,
            disruption_mode=None if priority_class is None else "PodGroup",
        )
    spec: Manifest = {"schedulingPolicy": {"gang": {"minCount": gang.min_count}}}
    if gang.required is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": LEVEL_KEYS[gang.required]}]}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
        spec["disruptionMode"] = "PodGroup"
    return {"apiVersion": NATIVE_API, "kind": "PodGroup", "metadata": {"name": gang.name}, "spec": spec}


def gangsched_topology(gang: Gang) -> list[tuple[str, str]]:
    """(key, mode) levels of a gang for gangsched, outermost first: the Required level (if
    any), then a Preferred rack."""
    topology: list[tuple[str, str]] = []
    if gang.required is not None:
        topology.append((LEVEL_KEYS[gang.required], "Required"))
    if gang.preferred_rack and gang.required != "rack":
        topology.append((RACK_KEY, "Preferred"))
    return topology


def pod_manifest(gang: Gang, pod: PodShape, flavour: Flavour, *, pool: str, dra: bool = False) -> Manifest:
    """One member pod; with `dra` a GPU pod takes its GPU through the claim template instead."""
    native = flavour == "native" and gang.is_group
    if dra and pod.gpus not in (0, 1):
        raise ValueError(f"{gang.pod_name(pod)}: the dra workload has one GPU per pod, not {pod.gpus}")
    body = builders.pod_manifest(
        gang.pod_name(pod),
        gang.name if flavour != "native" and gang.is_group else None,
        namespace=None,
        cpu=str(pod.cpu),
        memory=f"{pod.memory_gi}Gi",
        gpu=0 if dra else pod.gpus,
        scheduler=SCHEDULER_NAMES[flavour],
        node_selector={POOL_LABEL: pool},
        priority_class=None if gang.priority is None else priority_class_name(gang.priority, pool=pool),
        labels={GANG_LABEL: gang.name},
        spec={
            "terminationGracePeriodSeconds": 0,
            **({"schedulingGroup": {"podGroupName": gang.name}} if native else {}),
        },
    )
    if dra and pod.gpus:
        body = dra_builders.pod_claims(body, {CLAIM_ENTRY: f"template:{TEMPLATE}"})
    return body


# --------------------------------------------------------------------------------------------
# The jobs workload: the same gangs as batch/v1 Jobs

JOBS_API: Final = "batch/v1"
LAUNCHER_JOB: Final = "launcher"  # a gang's launcher Job is named <gang>-launcher
# Where a launcher Job's ownerReference takes its gang's worker Job's UID, known only once
# that Job is created.
OWNER_UID: Final = "$OWNER_UID"


@dataclass(frozen=True, slots=True)
class JobSubmission:
    """A gang as Jobs: `job`, an Indexed Job of the gang's workers (parallelism = completions
    = their count); for a gang with a launcher, `launcher`, a one-pod Indexed Job of the
    launcher's shape controlled by `job` (ownerReference uid `OWNER_UID`, filled in once `job`
    is created), and `job` annotated min-count = every pod of the gang.

    gangsched's rules (model/owners.py) then make of it exactly the gang of the PodGroup
    workload: a worker pod's chain is pod -> Job, the launcher's pod -> launcher Job -> Job
    (the topmost Job is the gang's owner, as an MPIJob is for its launcher Job), so every pod
    lands in PodGroup `job-<gang>` of minCount `len(gang.pods)`, with the PodGroup's topology as
    the annotation `scheduling.gangsched.io/topology`. A gang of one pod is a one-pod Job: not
    a gang (KEP-5547: parallelism >= 2), a plain pod as in the PodGroup workload.
    """

    gang: Gang
    job: Manifest
    launcher: Manifest | None
    pod_group: Manifest | None = None  # `labelled`: created first


def job_submission(gang: Gang, *, pool: str, labelled: bool = False) -> JobSubmission:
    """`labelled` (the `labelled-jobs` feed): no annotations and no owner chain, but the
    gang's PodGroup (as the PodGroup workload's) and its label in both Jobs' pod templates:
    gangsched schedules the pods as members of that PodGroup, no automatic gang."""
    launcher = next((p for p in gang.pods if p.name == LAUNCHER_JOB), None)
    workers = [p for p in gang.pods if p is not launcher]
    if len({(p.gpus, p.cpu, p.memory_gi) for p in workers}) != 1:
        raise ValueError(f"{gang.name}: a Job's pods are alike, not {workers}")
    if labelled:
        group = group_manifest(gang, "gangsched", pool=pool)
        label = None if group is None else gang.name
        job = _job(gang.name, gang, workers[0], len(workers), pool=pool, pod_group=label)
        extra = None
        if launcher is not None:
            extra = _job(f"{gang.name}-{LAUNCHER_JOB}", gang, launcher, 1, pool=pool, pod_group=label)
        return JobSubmission(gang, job, extra, group)
    annotations: dict[str, str] = {}
    topology = gangsched_topology(gang) if gang.is_group else []
    if topology:
        annotations[TOPOLOGY_ANNOTATION] = ",".join(f"{key}={mode}" for key, mode in topology)
    if launcher is not None:
        annotations[MIN_COUNT_ANNOTATION] = str(gang.min_count)
    job = _job(gang.name, gang, workers[0], len(workers), pool=pool, annotations=annotations)
    if launcher is None:
        return JobSubmission(gang, job, None)
    owner = {"apiVersion": JOBS_API, "kind": "Job", "name": gang.name, "uid": OWNER_UID, "controller": True}
    name = f"{gang.name}-{LAUNCHER_JOB}"
    return JobSubmission(gang, job, _job(name, gang, launcher, 1, pool=pool, owner=owner))


def _job(
    name: str,
    gang: Gang,
    pod: PodShape,
    count: int,
    *,
    pool: str,
    annotations: Mapping[str, str] | None = None,
    owner: Manifest | None = None,
    pod_group: str | None = None,
) -> Manifest:
    body = builders.pod_manifest(
        name,
        pod_group,
        namespace=None,
        cpu=str(pod.cpu),
        memory=f"{pod.memory_gi}Gi",
        gpu=pod.gpus,
        scheduler=SCHEDULER_NAMES["gangsched"],
        node_selector={POOL_LABEL: pool},
        labels={GANG_LABEL: gang.name},
        spec={"terminationGracePeriodSeconds": 0, "restartPolicy": "Never"},
    )
    metadata: Manifest = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": JOBS_API,
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "parallelism": count,
            "completions": count,
            "completionMode": "Indexed",
            "template": {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]},
        },
    }


def job_pod_names(workload: Workload) -> dict[str, str]:
    """`<Job>-<completion index>` -> the workload's name of that pod. The Job controller names
    an Indexed Job's pods `<Job>-<index>-<5 random characters>` (generateName)."""
    out: dict[str, str] = {}
    for gang in workload.gangs:
        workers = [p for p in gang.pods if p.name != LAUNCHER_JOB]
        for index, pod in enumerate(workers):
            out[f"{gang.name}-{index}"] = gang.pod_name(pod)
        if len(workers) < len(gang.pods):
            out[f"{gang.name}-{LAUNCHER_JOB}-0"] = f"{gang.name}-{LAUNCHER_JOB}"
    return out


def workload_pod_name(name: str, names: Mapping[str, str]) -> str:
    """A Job pod's workload name (`job_pod_names`), or `name` itself for any other pod."""
    return names.get(name.rpartition("-")[0], name)
