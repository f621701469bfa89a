"""What goes into the engine and what comes out: one request and one decision per group."""

from __future__ import annotations

from dataclasses import dataclass, field

from gangsched.engine.dra.allocator import AllocationResult
from gangsched.model import Key, Pod, Reason, TopologyConstraint


@dataclass(frozen=True, slots=True)
class QueueHead:
    """A group ahead in the queue that does not fit yet (StrictFIFO blocks those behind it);
    the loop passes those not decided this cycle."""

    key: Key
    order: tuple[int, str, str, str]  # its place in the queue (`queue.order_key`)


@dataclass(slots=True)
class GroupRequest:
    """What the engine is asked to place for one group in one cycle."""

    namespace: str
    name: str
    min_count: int
    is_gang: bool
    topology: tuple[TopologyConstraint, ...]
    pending: list[Pod]
    # Members already bound to a node: they count towards min_count and pin the domain.
    bound: list[Pod] = field(default_factory=list)
    priority: int = 0
    created: str = ""
    # Seconds this group has waited unschedulable: drives the anti-starvation reservation.
    waiting_seconds: float = 0.0
    # False for a gangsched pod without a PodGroup label: a group of one named after the pod.
    is_pod_group: bool = True
    # The PodGroup's own spec.resourceClaims: a requirement of the whole group, whether or not
    # its members list them. (entry name, claim name); the name is None while the claim of a
    # native group's template entry is not created yet.
    group_claims: tuple[tuple[str, str | None], ...] = ()

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def uses_devices(self) -> bool:
        """Claims of the PodGroup, or of a pending pod, are part of placing it."""
        return bool(self.group_claims) or any(p.claims for p in self.pending)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held back for a group that waited too long (`engine.reservation`): only groups
    ahead of `owner` in queue order may use them. The loop keeps it across cycles."""

    owner: Key
    priority: int
    # The owner's place in the queue (see `queue.order_key`).
    order: tuple[int, str, str, str]
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class Nomination(Reservation):
    """kube-scheduler's nominated node, for a gang: the domain held for a preemptor while its
    victims go (`engine.preemption`). Held like a reservation: only groups ahead of `owner`
    in queue order may use its nodes. The loop keeps it across cycles (`loop.preempt`)."""


@dataclass(frozen=True, slots=True)
class PodDevice:
    """One device a placed pod gets, through one of its claims."""

    claim: str  # the pod's spec.resourceClaims[].name
    request: str  # "gpu", or "gpu/a100" for a firstAvailable alternative
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class Unit:
    """Pods evicted together (a gang with disruptionMode PodGroup) or one pod."""

    key: Key  # the PodGroup's key, or the pod's
    pods: tuple[Pod, ...]
    priority: int
    is_gang: bool
    started: str

    def importance(self) -> tuple[int, int, int, str]:
        """Sort key, most important first."""
        return (-self.priority, 0 if self.is_gang else 1, -len(self.pods), self.started or "~")


@dataclass(slots=True)
class Preemption:
    """The victims that make `preemptor` fit, and where it will go."""

    preemptor: Key
    priority: int
    victims: list[Pod]
    units: list[Unit]
    nodes: frozenset[str]  # the domain nominated for the preemptor
    domain: str | None  # "key=value/key=value", None when unconstrained
    gpus: int = 0
    freed_devices: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def damage(self) -> tuple[int, int, int]:
        return (max((u.priority for u in self.units), default=0), len(self.victims), self.gpus)

    def describe(self) -> str:
        gangs = [u for u in self.units if u.is_gang]
        where = f" in {self.domain}" if self.domain else ""
        parts = [f"{len(self.victims)} pod{'s' if len(self.victims) != 1 else ''}"]
        if gangs:
            parts.append(f"of {len(gangs)} gang{'s' if len(gangs) != 1 else ''}")
        top = max(u.priority for u in self.units)
        return f"preempting {' '.join(parts)} (priority <= {top}){where}"


@dataclass(frozen=True, slots=True)
class WaitForTerminating:
    """Instead of a preemption: pods already terminating will make room (waiting beats
    preempting, `engine.preemption`)."""

    pods: int  # terminating pods

    def describe(self) -> str:
        return f"waiting for {self.pods} terminating pod(s) to make room"


@dataclass(slots=True)
class GroupDecision:
    namespace: str
    name: str
    scheduled: bool
    reason: Reason
    message: str
    # pod key -> node name, for the pods placed in this cycle
    assignments: dict[Key, str] = field(default_factory=dict)
    # The domain the group landed in, as "key=value/key=value"; None when unplaced or unconstrained.
    domain: str | None = None
    # False for a gangsched pod without a PodGroup label (a group of one).
    is_pod_group: bool = True
    # Pending pods of this group this cycle (placed or not).
    pending: list[Pod] = field(default_factory=list)
    # Claims this decision allocates (namespace, name) -> allocation; written before binding.
    allocations: dict[Key, AllocationResult] = field(default_factory=dict)
    # Per placed pod with claims: its devices, from new and earlier allocations alike.
    devices: dict[Key, list[PodDevice]] = field(default_factory=dict)
    # Unplaced, but running lower-priority units can make room: the loop evicts them.
    preemption: Preemption | None = None
    # With `preemption`: the domain held for this group while its victims go, at its place
    # in this cycle's queue (the loop keeps it across cycles).
    nomination: Nomination | None = None
    # StrictFIFO: unplaced but able to fit the cluster, so the groups behind it wait for it.
    blocks_queue: bool = False

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


@dataclass(slots=True)
class CycleResult:
    decisions: list[GroupDecision]
    # Pods with their node (None when left pending), one entry per pending pod.
    pods: list[tuple[Pod, str | None, GroupDecision]]
    # Anti-starvation reservations after this cycle, at most one per priority level.
    reservations: list[Reservation] = field(default_factory=list)
