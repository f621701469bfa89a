"""Whole-gang preemption: which running units to evict so that a higher-priority group fits.

Pure, like the rest of the engine: `find_preemption` answers on the cycle's snapshot and
device state (forked, never changed) what the loop then carries out (`loop.preempt`).

Rules (kube-scheduler's KEP-5710 where it fits, better where it falls short):

- The preemptor is the whole group, with its effective priority (a PriorityClass it names,
  else its pods' admission-set priority; never `spec.priority`). A member with
  `preemptionPolicy: Never` makes the group ineligible.
- Victims are **units**: the bound members of a PodGroup with `disruptionMode: PodGroup`
  (the default for gangs) go together, with the group's priority; any other pod alone.
  Only units of strictly lower priority are candidates, never a system-critical one
  (priority >= 2,000,000,000) nor a pod already terminating.
- **Waiting beats preempting**: when the group would fit once pods already terminating are
  gone, nothing is preempted.
- Per candidate domain of the group's Required level (every node when it has none), up to
  `MAX_DOMAINS` of them: remove every candidate unit with a pod in the domain; if the group
  still does not fit there, the domain is out. Otherwise give units back most important
  first (priority, gang over single pod, bigger gang, earlier start), keeping each reprieve
  that still leaves room. Topology and devices are checked by the same `place_group` the
  placement uses; a victim's DRA claim is freed when every pod using it is a victim.
- The domain with the least damage wins: lowest highest-victim priority, then fewest victim
  pods, then fewest GPUs taken (extended resources named like GPUs, plus freed devices).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gangsched.engine.dra.allocator import AllocationResult
from gangsched.engine.dra.pools import DeviceId
from gangsched.engine.dra.state import DeviceState
from gangsched.engine.group import place_group
from gangsched.engine.snapshot import BoolArray, Snapshot
from gangsched.engine.types import GroupDecision, GroupRequest, Preemption, Unit, WaitForTerminating
from gangsched.model import Key, Pod, PodGroup
from gangsched.model.dra import AllocatedDevice
from gangsched.model.pdb import DisruptionBudget
from gangsched.model.pod import PREEMPT_NEVER
from gangsched.model.podgroup import DisruptionMode

# Priorities at or above this are system-critical (system-cluster-critical is 2,000,000,000).
SYSTEM_CRITICAL = 2_000_000_000
# Domains whose victims are searched, the most promising first (by the capacity candidates free).
MAX_DOMAINS = 16
# Units tried for a reprieve per domain, most important first; the rest stay victims.
MAX_REPRIEVES = 256


def _started(pods: Sequence[Pod]) -> str:
    stamps = [p.started or p.created for p in pods]
    return min((s for s in stamps if s), default="")


def _gang_disrupted_whole(group: PodGroup | None) -> bool:
    """disruptionMode PodGroup (the default for gangs): the group is one victim unit."""
    if group is None or group.spec is None:
        return False
    return group.spec.effective_disruption_mode == DisruptionMode.POD_GROUP


def victim_units(bound: Sequence[Pod], groups: Mapping[Key, PodGroup]) -> list[Unit]:
    """Every running unit (candidates or not): gangs disrupted whole, other pods alone."""
    members: dict[Key, list[Pod]] = {}
    units: list[Unit] = []
    for pod in bound:
        if not pod.holds_resources:
            continue
        group = groups.get((pod.namespace, pod.pod_group)) if pod.pod_group else None
        if group is not None and group.api != pod.pod_group_api:
            group = None  # it names the other API's PodGroup of that name: a pod alone
        if _gang_disrupted_whole(group):
            members.setdefault((pod.namespace, str(pod.pod_group)), []).append(pod)
        else:
            units.append(Unit(pod.key, (pod,), pod.priority, False, _started([pod])))
    for key, pods in members.items():
        group = groups[key]
        priority = group.priority if group.has_priority_class else max(p.priority for p in pods)
        units.append(Unit(key, tuple(pods), priority, True, _started(pods)))
    return units


def may_preempt(group: GroupRequest) -> bool:
    return group.priority > 0 and all(p.preemption_policy != PREEMPT_NEVER for p in group.pending)


class _World:
    """The snapshot and devices with some pods gone, for one fit check."""

    def __init__(
        self,
        snapshot: Snapshot,
        devices: DeviceState | None,
        allocated_now: Mapping[Key, AllocationResult],
        claim_users: Mapping[Key, frozenset[Key]],
        terminating: Sequence[Pod],
    ) -> None:
        self.snapshot = snapshot
        self.terminating = list(terminating)  # gone soon whatever we do
        self.devices = devices
        self.allocated_now = allocated_now
        self.claim_users = claim_users

    def freed_claims(self, gone: set[Key]) -> list[Key]:
        return [k for k, users in self.claim_users.items() if users and users <= gone]

    def fits(self, group: GroupRequest, pods: Sequence[Pod], outside: BoolArray | None) -> bool:
        return self.place(group, pods, outside).scheduled

    def place(self, group: GroupRequest, pods: Sequence[Pod], outside: BoolArray | None) -> GroupDecision:
        """`group` placed on forks of the snapshot and devices without `pods` (and the
        terminating ones)."""
        gone = [*self.terminating, *pods]
        snap = self.snapshot.fork(gone)
        state = None
        if self.devices is not None:
            state = self.devices.fork(self.freed_results({p.key for p in gone}))
        return place_group(snap, group, outside, state, dict(self.allocated_now)).decision

    def freed_results(self, gone: set[Key]) -> list[AllocatedDevice]:
        """The allocation results of the claims freed when `gone` are (adminAccess aside)."""
        if self.devices is None:
            return []
        claims = self.devices.objects.claims
        out: list[AllocatedDevice] = []
        for key in self.freed_claims(gone):
            claim = claims.get(key)
            if claim is not None and claim.allocation is not None:
                out.extend(d for d in claim.allocation.devices if not d.admin_access)
        return out

    def freed_devices(self, gone: set[Key]) -> list[DeviceId]:
        """The devices freed when `gone` are: held whole, or shares (counted once per device)."""
        return list(dict.fromkeys(d.device_id for d in self.freed_results(gone)))


def place_without(
    snapshot: Snapshot,
    group: GroupRequest,
    gone: Sequence[Pod],
    *,
    bound: Sequence[Pod],
    blocked: BoolArray | None,
    devices: DeviceState | None,
    allocated_now: Mapping[Key, AllocationResult],
) -> GroupDecision:
    """Where `group` would go if the bound pods `gone` were gone (their resources free, and
    the devices of claims only they use), on forks: nothing given is changed."""
    world = _World(snapshot, devices, allocated_now, claim_users(bound), ())
    return world.place(group, gone, blocked)


def claim_users(bound: Sequence[Pod]) -> dict[Key, frozenset[Key]]:
    """Which running pods use each claim (a claim is freed when all of them are victims)."""
    users: dict[Key, set[Key]] = {}
    for pod in bound:
        if not pod.holds_resources:
            continue
        for entry in pod.claims:
            name = entry.claim_name or pod.claim_statuses.get(entry.name)
            if name:
                users.setdefault((pod.namespace, name), set()).add(pod.key)
    return {k: frozenset(v) for k, v in users.items()}


def _gpus(pods: Sequence[Pod], freed: int) -> int:
    total = freed
    for pod in pods:
        total += sum(v // 1000 for k, v in pod.requests.items() if "gpu" in k.lower())
    return total


@dataclass(frozen=True, slots=True)
class BoundPods:
    """The pods holding resources, as preemption needs them: `read` gives them all (a walk
    over every bound pod of the cluster, done only once a group may preempt); the caller that
    keeps `lowest_priority` (of those not being deleted; SYSTEM_CRITICAL when none) and
    `terminating` up to date pod by pod (`cluster.snapshots.NodeInfos`) spares the walk when
    no pod can be a victim or be waited for."""

    read: Callable[[], Sequence[Pod]]
    lowest_priority: int = -SYSTEM_CRITICAL  # unknown: as low as can be, so the walk is done
    terminating: bool = True

    @classmethod
    def of(cls, pods: Sequence[Pod]) -> BoundPods:
        bound = [p for p in pods if p.holds_resources]
        alive = [p.priority for p in bound if not p.deleting]
        return cls(
            read=lambda: bound,
            lowest_priority=min(alive, default=SYSTEM_CRITICAL),
            terminating=any(p.deleting for p in bound),
        )

    def may_help(self, group: GroupRequest, groups: Mapping[Key, PodGroup]) -> bool:
        """Could any pod be a victim for `group`, or is any terminating? False spares `read`.
        A gang unit's priority may be its PodGroup's class rather than its pods': the lowest
        such class counts too."""
        if self.terminating:
            return True
        floor = min([self.lowest_priority, *(g.priority for g in groups.values() if g.has_priority_class)])
        return floor < min(group.priority, SYSTEM_CRITICAL)


@dataclass(frozen=True, slots=True)
class Running:
    """What a preemption search reads of the running pods: the same for every group of a
    cycle, so computed once per cycle (per group it was a walk over every bound pod, for
    each of hundreds of unschedulable gangs)."""

    terminating: list[Pod]
    units: list[Unit]  # of the pods not terminating
    claim_users: dict[Key, frozenset[Key]]
    lowest: int  # the lowest unit priority (SYSTEM_CRITICAL when there is none)

    @classmethod
    def of(cls, bound: Sequence[Pod], groups: Mapping[Key, PodGroup]) -> Running:
        units = victim_units([p for p in bound if not p.deleting], groups)
        return cls(
            terminating=[p for p in bound if p.holds_resources and p.deleting],
            units=units,
            claim_users=claim_users(bound),
            lowest=min((u.priority for u in units), default=SYSTEM_CRITICAL),
        )


def find_preemption(
    snapshot: Snapshot,
    group: GroupRequest,
    *,
    bound: Sequence[Pod],
    groups: Mapping[Key, PodGroup],
    blocked: BoolArray | None,
    devices: DeviceState | None,
    allocated_now: Mapping[Key, AllocationResult],
    required_keys: tuple[str, ...],
    budgets: Sequence[DisruptionBudget] = (),
    running: Running | None = None,
) -> Preemption | WaitForTerminating | None:
    """The least damaging preemption that makes `group` fit; `WaitForTerminating` when it
    should wait instead (terminating pods will make room); None when preemption cannot help.
    `running`: `Running.of(bound, groups)`, when the caller keeps it for a whole cycle."""
    if not may_preempt(group):
        return None
    if running is None:
        running = Running.of(bound, groups)
    terminating = running.terminating
    if not terminating and running.lowest >= min(group.priority, SYSTEM_CRITICAL):
        return None  # nothing terminates and nothing runs below it
    world = _World(snapshot, devices, allocated_now, running.claim_users, terminating)
    if terminating and world.fits(group, [], blocked):
        return WaitForTerminating(len(terminating))
    units = [u for u in running.units if u.priority < group.priority and u.priority < SYSTEM_CRITICAL]
    if not units or not world.fits(group, [p for u in units for p in u.pods], blocked):
        return None  # not even evicting every candidate makes room
    n = len(snapshot.nodes)
    if required_keys:
        ids, values = snapshot.domains(required_keys)
    else:
        ids, values = np.zeros(n, dtype=np.int64), [()]
    rows_of = {
        u.key: [snapshot.index[p.node_name] for p in u.pods if p.node_name in snapshot.index] for u in units
    }
    # Domains by the capacity their candidate victims hold, most first.
    weight = np.zeros(len(values), dtype=np.int64)
    for u in units:
        for row in rows_of[u.key]:
            if ids[row] >= 0:
                weight[ids[row]] += len(u.pods)
    best: Preemption | None = None
    for domain in [int(d) for d in np.argsort(-weight, kind="stable")[:MAX_DOMAINS] if weight[d] > 0]:
        inside = ids == domain
        outside = ~inside if blocked is None else (~inside | blocked)
        here = [u for u in units if any(inside[r] for r in rows_of[u.key])]
        chosen = _victims_in(world, group, here, outside, budgets)
        if chosen is None:
            continue
        victims = [p for u in chosen for p in u.pods]
        freed = world.freed_devices({p.key for p in victims})
        names = frozenset(
            snapshot.nodes[int(i)].name
            for i in np.flatnonzero(inside & ~(blocked if blocked is not None else np.zeros(n, dtype=bool)))
        )
        label = "/".join(f"{k}={v}" for k, v in zip(required_keys, values[domain], strict=True)) or None
        candidate = Preemption(
            preemptor=group.key,
            priority=group.priority,
            victims=victims,
            units=chosen,
            nodes=names,
            domain=label,
            gpus=_gpus(victims, len(freed)),
            freed_devices=freed,
        )
        if best is None or candidate.damage < best.damage:
            best = candidate
    return best


def violates(unit: Unit, budgets: Sequence[DisruptionBudget]) -> bool:
    """Would evicting `unit` take a PodDisruptionBudget below zero?"""
    for budget in budgets:
        hit = sum(1 for p in unit.pods if budget.selects(p.namespace, p.labels))
        if hit and hit > budget.disruptions_allowed:
            return True
    return False


def _victims_in(
    world: _World,
    group: GroupRequest,
    units: list[Unit],
    outside: BoolArray,
    budgets: Sequence[DisruptionBudget] = (),
) -> list[Unit] | None:
    """The units to evict in one domain (reprieving the most important that can stay; units
    whose eviction would break a PodDisruptionBudget are reprieved first, as upstream), or
    None when even evicting every candidate does not make room."""
    if not units:
        return None
    removed = [p for u in units for p in u.pods]
    if not world.fits(group, removed, outside):
        return None
    victims = list(units)
    order = sorted(units, key=lambda u: (not violates(u, budgets), u.importance()))
    for unit in order[:MAX_REPRIEVES]:
        trial = [u for u in victims if u is not unit]
        if world.fits(group, [p for u in trial for p in u.pods], outside):
            victims = trial
    return sorted(victims, key=Unit.importance)
