"""What goes into the engine and what comes out: one request and one decision per group."""

from __future__ import annotations

from dataclasses import dataclass, field

from gangsched.engine.dra.allocator import AllocationResult
from gangsched.model import Pod, Reason, TopologyConstraint


@dataclass(slots=True)
class GroupRequest:
    """What the engine is asked to place for one group in one cycle."""

    namespace: str
    name: str
    min_count: int
    is_gang: bool
    topology: tuple[TopologyConstraint, ...]
    pending: list[Pod]
    bound: list[Pod] = field(default_factory=list)
    priority: int = 0
    created: str = ""
    # Seconds this group has waited unschedulable: drives the anti-starvation reservation.
    waiting_seconds: float = 0.0
    # False for a gangsched pod without a PodGroup label: a group of one named after the pod.
    is_pod_group: bool = True

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held back for a group that waited too long (`engine.reservation`): only groups
    ahead of `owner` in queue order may use them. The loop keeps it across cycles."""

    owner: tuple[str, str]
    priority: int
    # The owner's place in the queue (see `queue.order_key`).
    order: tuple[int, str, str, str]
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class PodDevice:
    """One device a placed pod gets, through one of its claims."""

    claim: str  # the pod's spec.resourceClaims[].name
    request: str  # "gpu", or "gpu/a100" for a firstAvailable alternative
    driver: str
    pool: str
    device: str


@dataclass(slots=True)
class GroupDecision:
    namespace: str
    name: str
    scheduled: bool
    reason: Reason
    message: str
    # pod key -> node name, for the pods placed in this cycle
    assignments: dict[tuple[str, str], str] = field(default_factory=dict)
    # The domain the group landed in, as "key=value/key=value"; None when unplaced or unconstrained.
    domain: str | None = None
    # False for a gangsched pod without a PodGroup label (a group of one).
    is_pod_group: bool = True
    # Pending pods of this group this cycle (placed or not).
    pending: list[Pod] = field(default_factory=list)
    # Claims this decision allocates (namespace, name) -> allocation; written before binding.
    allocations: dict[tuple[str, str], AllocationResult] = field(default_factory=dict)
    # Per placed pod with claims: its devices, from new and earlier allocations alike.
    devices: dict[tuple[str, str], list[PodDevice]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(slots=True)
class CycleResult:
    decisions: list[GroupDecision]
    # Pods with their node (None when left pending), one entry per pending pod.
    pods: list[tuple[Pod, str | None, GroupDecision]]
    # Anti-starvation reservations after this cycle, at most one per priority level.
    reservations: list[Reservation] = field(default_factory=list)
