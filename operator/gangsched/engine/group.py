"""Placing one group: capacity, the placer, and for pods with ResourceClaims, their devices.

A group without claims is placed in one pass (capacity -> placer -> commit). With claims
(docs/placement.md, "Devices"):

1. Claims are resolved (`dra.claims`); a missing one keeps the group waiting.
2. For each firstAvailable variant in order, the group is placed with devices as one more
   capacity column per pod class (`dra.state`): topology and devices in one pass.
3. A claim shared by several pending pods (or a PodGroup's own claim, shared by every
   member) keeps its users on nodes its devices can be allocated for. It is allocated once,
   together with its users' own claims (one allocator call, so its devices are counted once
   and never taken from under them), on the first node, in the placement's order, that
   can hold all its users; its nodeSelector then limits every user and the group is placed
   again. A node where the users do not fit after all is left for the next one.
4. Devices are assigned exactly, pod by pod, on the chosen nodes only. Where the column
   over-counted (devices two requests compete for, counters of partitionable devices), the
   node's count is corrected to what the allocator found and the group placed again.

There is no fixed number of rounds: every round lowers a node's count or rules a node out
for a shared claim, so the search ends, and it ends only when every candidate is tried or
the placer finds no room. Nothing is kept from a variant that fails: its device allocations
are released.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.dra.allocator import AllocationError, AllocationResult
from gangsched.engine.dra.claims import ClaimUse, ResolvedClaims, WaitingForClaims, resolve, selector_terms
from gangsched.engine.dra.explain import SelectorFailure
from gangsched.engine.dra.explain import node_reasons as device_reasons
from gangsched.engine.dra.state import Demand, DeviceState, Need
from gangsched.engine.explain import explain, explain_best
from gangsched.engine.fill import Attempt
from gangsched.engine.placer import Placer
from gangsched.engine.snapshot import BoolArray, IntArray, Snapshot
from gangsched.engine.sparing import SparesLevel
from gangsched.engine.types import GroupDecision, GroupRequest, PodDevice
from gangsched.model import Key, Pod, Reason

# Candidate devices one node's joint allocation (all its pods' claims in one search) may try
# before it gives way to pod-by-pod allocation: a joint search can backtrack exponentially
# (k pods x n near-identical devices behind a constraint that fails late), pod by pod cannot.
JOINT_ALLOCATION_STEPS = 4096


@dataclass(frozen=True, slots=True)
class DeviceKey:
    """What a pod asks of the devices; equal for pods of one template (see `DeviceView`)."""

    demand: Demand
    allocated: tuple[Key, ...]
    shared: tuple[Key, ...]


@dataclass(slots=True)
class Outcome:
    decision: GroupDecision
    # The group's capacity on the snapshot, for the reservation; None when it waits for objects.
    capacity: GroupCapacity | None


class GroupDevices:
    """The `capacity.DeviceView` of one group and variant (see `engine.group`)."""

    def __init__(
        self,
        snapshot: Snapshot,
        state: DeviceState,
        claims: ResolvedClaims,
        variant: Mapping[tuple[str, tuple[str, ...]], int],
    ) -> None:
        self.snap = snapshot
        self.state = state
        self.claims = claims
        self.variant = variant
        # shared claim -> (node, allocation) once allocated for this variant
        self.shared_done: dict[Key, tuple[int, AllocationResult]] = {}
        self.shared_tried: dict[Key, set[int]] = defaultdict(set)
        # device key -> node -> pods its devices really serve (found by exact allocation)
        self.exact: dict[DeviceKey, dict[int, int]] = defaultdict(dict)
        self._keys: dict[Key, DeviceKey] = {}
        self._masks: dict[Key, BoolArray | None] = {}

    # ------------------------------------------------------------------ DeviceView

    def key(self, pod: Pod) -> Hashable:
        cached = self._keys.get(pod.key)
        if cached is None:
            claims = self.claims
            used = {u.key for u in claims.uses.get(pod.key, ())} | set(claims.of_group)
            if not used:
                return ()
            cached = DeviceKey(
                demand=claims.demand(pod, self.variant),
                allocated=tuple(sorted(k for k in used if k in claims.allocated)),
                shared=tuple(sorted(k for k in used if k in claims.shared)),
            )
            self._keys[pod.key] = cached
        return cached

    def mask(self, key: Hashable) -> BoolArray | None:
        assert isinstance(key, DeviceKey)
        mask: BoolArray | None = None
        for claim in (*key.allocated, *key.shared):
            allowed = self._claim_mask(claim)
            if allowed is not None:
                mask = allowed if mask is None else mask & allowed
        return mask

    def _claim_mask(self, claim: Key) -> BoolArray | None:
        if claim in self.claims.allocated:
            if claim not in self._masks:
                terms = self.claims.allocated[claim]
                self._masks[claim] = None if terms is None else self.snap.terms_mask(terms)
            return self._masks[claim]
        done = self.shared_done.get(claim)
        if done is not None:
            terms = selector_terms(done[1].node_selector)
            return None if terms is None else self.snap.terms_mask(terms)
        # Not allocated yet: where its devices can be allocated from, but not on the nodes
        # that already failed to hold it.
        mask = self.claim_nodes(claim).copy()
        tried = self.shared_tried.get(claim)
        if tried:
            mask[list(tried)] = False
        return mask

    def claim_nodes(self, claim: Key) -> BoolArray:
        """Nodes an unallocated shared claim's devices can be allocated for, with the devices
        in use now (other shared claims of the group may have just taken some)."""
        mask: BoolArray = self.state.pod_slots(self.claims.claim_demand(claim, self.variant)) > 0
        return mask

    def slots(self, key: Hashable, *, empty: bool = False) -> IntArray:
        assert isinstance(key, DeviceKey)
        slots = self.state.pod_slots(key.demand, ignore_use=empty)
        if not empty:
            for node, count in self.exact.get(key, {}).items():
                slots[node] = min(int(slots[node]), count)
        return slots

    def label(self, key: Hashable) -> str:
        assert isinstance(key, DeviceKey)
        classes = list(dict.fromkeys(n.device_class for n in key.demand.needs))
        if not classes:
            return "devices of shared claims"
        return "devices of class " + ", ".join(classes)

    def reasons(self, key: Hashable, nodes: IntArray) -> Counter[str]:
        assert isinstance(key, DeviceKey)
        if not key.demand.needs:
            return Counter({"no node allowed by the claims' allocation": int(nodes.size)})
        return device_reasons(self.state, key.demand, nodes)

    def excluded(self, key: Hashable, nodes: IntArray) -> Counter[str]:
        assert isinstance(key, DeviceKey)
        out: Counter[str] = Counter()
        left = nodes
        for claim in (*key.allocated, *key.shared):
            allowed = self._claim_mask(claim)
            if allowed is None or left.size == 0:
                continue
            off = left[~allowed[left]]
            left = left[allowed[left]]
            if not off.size:
                continue
            name = f"ResourceClaim {claim[0]}/{claim[1]}"
            if claim in self.claims.allocated or claim in self.shared_done:
                out[f"not allowed by the allocation of {name}"] += int(off.size)
                continue
            reach = self.claim_nodes(claim)[off]
            if (~reach).any():
                out[f"no free device of {name} for the node"] += int((~reach).sum())
            if reach.any():
                out[f"cannot hold {name} with all its users"] += int(reach.sum())
        return out

    # ------------------------------------------------------------------ results

    def devices_of(
        self,
        pod: Pod,
        own: Mapping[Key, AllocationResult],
        allocated_now: Mapping[Key, AllocationResult],
    ) -> list[PodDevice]:
        out: list[PodDevice] = []
        for use in self.claims.uses.get(pod.key, ()):
            result = own.get(use.key) or allocated_now.get(use.key)
            if result is None and use.key in self.shared_done:
                result = self.shared_done[use.key][1]
            if result is not None:
                out.extend(
                    PodDevice(use.pod_claim, d.request, d.driver, d.pool, d.device) for d in result.devices
                )
                continue
            allocation = self.claims.claims[use.key].allocation
            if allocation is not None:
                out.extend(
                    PodDevice(use.pod_claim, d.request, d.driver, d.pool, d.device)
                    for d in allocation.devices
                )
        return out


def place_group(
    snapshot: Snapshot,
    group: GroupRequest,
    blocked: BoolArray | None,
    state: DeviceState | None,
    allocated_now: dict[Key, AllocationResult],
    spares: SparesLevel | None = None,
) -> Outcome:
    """Place `group` on `snapshot`; on success the snapshot (and `state`, `allocated_now`)
    count its pods and devices as used. `spares`: whether entirely free domains of a level are
    kept whole for other waiting gangs (`Placer`; None: at every level)."""
    if not group.uses_devices:
        cap = GroupCapacity(snapshot, group, blocked)
        placer = Placer(cap, spares)
        attempt = placer.place()
        if attempt is not None and attempt.placed >= max(cap.need, 1):
            return Outcome(placed(group, cap, placer, attempt), cap)
        return Outcome(unplaced(group, explain(cap, placer)), cap)
    variants = device_variants(snapshot, group, state, allocated_now)
    if isinstance(variants, WaitingForClaims):
        return Outcome(unplaced(group, variants.message, Reason.WAITING_FOR_RESOURCE_CLAIMS), None)
    first: Outcome | None = None
    others: list[str] = []
    for devices in variants:
        claims, variant = devices.claims, devices.variant
        outcome, short = _place_variant(snapshot, group, blocked, devices, allocated_now, spares)
        if outcome.decision.scheduled:
            if claims.choices:
                outcome.decision.message += "; devices: " + ", ".join(claims.used_alternatives(variant))
            return outcome
        if first is None:
            first = outcome
            if claims.choices:
                first.decision.message = (
                    f"with {', '.join(claims.used_alternatives(variant))}: {first.decision.message}"
                )
        else:
            others.append(f"with {', '.join(claims.used_alternatives(variant))}: {short}")
    assert first is not None
    if others:
        first.decision.message += "; " + "; ".join(others)
    return first


def device_variants(
    snapshot: Snapshot,
    group: GroupRequest,
    state: DeviceState | None,
    allocated_now: Mapping[Key, AllocationResult],
) -> Iterator[GroupDevices] | WaitingForClaims:
    """The claim setup of a group whose pods have claims: the claims resolved, then one
    device view per firstAvailable variant, in the order `place_group` tries them (each
    made when reached); or why the group waits for its claims. `explain` measures the
    group with the first one."""
    claims = resolve(group.pending, state.objects.claims if state else {}, allocated_now, group.group_claims)
    if isinstance(claims, WaitingForClaims):
        return claims
    assert state is not None  # the claims resolved, so there are DRA objects
    return (GroupDevices(snapshot, state, claims, variant) for variant in claims.variants())


def _place_variant(
    snapshot: Snapshot,
    group: GroupRequest,
    blocked: BoolArray | None,
    devices: GroupDevices,
    allocated_now: dict[Key, AllocationResult],
    spares: SparesLevel | None,
) -> tuple[Outcome, str]:
    """The group with one firstAvailable variant: the outcome, and a short reason if unplaced."""
    state = devices.state
    missing = _missing_class(devices, group)
    if missing is not None:
        text = (
            f"claim {missing.claim}, request {missing.request}: device class {missing.device_class} not found"
        )
        return Outcome(unplaced(group, text), None), text
    cap = GroupCapacity(snapshot, group, blocked, devices)
    while True:
        failure = _selector_failure(cap, devices)
        if failure is not None:
            _release_shared(devices)
            text = failure.text()
            return Outcome(unplaced(group, text), cap), text
        placer = Placer(cap, spares)
        attempt = placer.place()
        if attempt is None or attempt.placed < max(cap.need, 1):
            if devices.shared_done:
                # The users of the last shared claim do not fit where its devices are: elsewhere.
                key, (node, result) = devices.shared_done.popitem()
                state.release([result])
                devices.shared_tried[key].add(node)
                cap = GroupCapacity(snapshot, group, blocked, devices)
                continue
            return Outcome(unplaced(group, explain(cap, placer)), cap), explain_best(cap, placer)
        assignment = placer.assign(attempt)
        try:
            if _allocate_shared(devices, cap, assignment):
                cap = GroupCapacity(snapshot, group, blocked, devices)
                continue
            own = _allocate_own(devices, cap, assignment)
        except AllocationError as exc:
            _release_shared(devices)
            return Outcome(unplaced(group, str(exc)), cap), str(exc)
        if own is None:
            # Some node served fewer pods than counted: its count is now lower (never the same
            # twice), so the next round places differently or finds no room.
            cap = GroupCapacity(snapshot, group, blocked, devices)
            continue
        decision = placed(group, cap, placer, attempt)
        for results in own.values():
            decision.allocations.update(results)
        for key, (_, result) in devices.shared_done.items():
            decision.allocations[key] = result
        allocated_now.update(decision.allocations)
        for pod, _, _ in assignment:
            if pod.claims:
                decision.devices[pod.key] = devices.devices_of(pod, own.get(pod.key, {}), allocated_now)
        return Outcome(decision, cap), ""


def _missing_class(devices: GroupDevices, group: GroupRequest) -> Need | None:
    """The first request of the group's claims whose device class does not exist."""
    for pod in group.pending:
        key = devices.key(pod)
        if isinstance(key, DeviceKey):
            for need in key.demand.needs:
                if need.device_class not in devices.state.classes:
                    return need
    for claim in devices.claims.shared:
        for need in devices.claims.claim_demand(claim, devices.variant).needs:
            if need.device_class not in devices.state.classes:
                return need
    return None


def _selector_failure(cap: GroupCapacity, devices: GroupDevices) -> SelectorFailure | None:
    """A selector that fails on a device the allocator could reach makes the group fail, as
    upstream (never a match, never silently skipped)."""
    for cls in cap.classes:
        if isinstance(cls.device_key, DeviceKey):
            failures = devices.state.failures(cls.device_key.demand, cls.mask)
            if failures:
                return failures[0]
    return None


def _allocate_shared(
    devices: GroupDevices, cap: GroupCapacity, assignment: list[tuple[Pod, int, int]]
) -> bool:
    """Allocate the first shared claim not yet allocated; True when it was (the group must be
    placed again). Raises AllocationError when no node is left that could hold it."""
    claims = devices.claims
    for key, users in claims.shared.items():
        if key in devices.shared_done:
            continue
        members = set(users)
        hold = _users_capacity(cap, members)
        tried = devices.shared_tried[key]
        for node in _shared_candidates(devices, key, members, hold, assignment):
            result = _allocate_with_users(devices, cap, node, key, members, hold)
            if result is not None:
                devices.state.commit([result])
                devices.shared_done[key] = (node, result)
                return True
            tried.add(node)
        users_text = f"{len(members)} pod{'s' if len(members) != 1 else ''}"
        whose = "the PodGroup's claim, used by" if key in claims.of_group else "shared by"
        raise AllocationError(
            f"claim {key[0]}/{key[1]} ({whose} {users_text}): no node can hold its devices together "
            f"with its users ({len(tried)} node{'s' if len(tried) != 1 else ''} tried)"
        )
    return False


def _users_capacity(cap: GroupCapacity, members: set[Key]) -> IntArray:
    """Per node, how many of a shared claim's users it holds (each class of users alone: an
    upper bound when users of several classes compete for one node)."""
    hold = np.zeros(len(cap.snap.nodes), dtype=np.int64)
    for cls, fits in zip(cap.classes, cap.caps, strict=True):
        users = sum(1 for p in cls.pods if p.key in members)
        if users:
            hold += np.minimum(fits, users)
    return hold


def _shared_candidates(
    devices: GroupDevices,
    key: Key,
    members: set[Key],
    hold: IntArray,
    assignment: list[tuple[Pod, int, int]],
) -> Iterator[int]:
    """Nodes to allocate a shared claim on, best first, each once: those holding most of its
    users in this placement, the placement's other nodes, then every node that can hold all
    its users, then any node its devices can be allocated for (devices reaching several
    nodes let users spread). Nodes already tried, or where its devices cannot be, are left out."""
    able = devices.claim_nodes(key)
    tried = devices.shared_tried[key]
    on = Counter(node for pod, node, _ in assignment if pod.key in members)
    placement = [n for n, _ in on.most_common()] + [node for _, node, _ in assignment]
    everyone = np.flatnonzero(able & (hold >= len(members)))
    rest = np.flatnonzero(able)
    seen: set[int] = set()
    for node in (*placement, *everyone.tolist(), *rest.tolist()):
        if node in seen or node in tried or not able[node]:
            continue
        seen.add(node)
        yield node


def _allocate_with_users(
    devices: GroupDevices, cap: GroupCapacity, node: int, key: Key, members: set[Key], hold: IntArray
) -> AllocationResult | None:
    """The shared claim's allocation from `node`, or None when its users cannot all have their
    devices with it. Where the node can hold every user, the claim and their own claims are
    allocated in one search, so the shared devices never take what their own claims need;
    only the shared claim's result is kept (theirs are allocated when they are placed). A
    claim whose devices bind it to the node must pass that joint test; one whose devices
    reach further is kept when the nodes it allows can hold all its users."""
    claims, state, variant = devices.claims, devices.state, devices.variant
    shared = claims.to_allocate(key, variant)
    if hold[node] >= len(members):
        pods = [p for cls in cap.classes for p in cls.pods if p.key in members]
        own = [claims.to_allocate(u.key, variant) for pod in pods for u in claims.own(pod)]
        joint = state.allocate(node, [shared, *own], budget=JOINT_ALLOCATION_STEPS)
        if joint is not None:
            return joint[0]
    alone = state.allocate(node, [shared])
    if alone is None:
        return None
    terms = selector_terms(alone[0].node_selector)
    allowed = np.ones(len(cap.snap.nodes), dtype=bool) if terms is None else cap.snap.terms_mask(terms)
    if int(allowed.sum()) <= 1 or int(hold[allowed].sum()) < len(members):
        return None
    return alone[0]


def _allocate_own(
    devices: GroupDevices, cap: GroupCapacity, assignment: list[tuple[Pod, int, int]]
) -> dict[Key, dict[Key, AllocationResult]] | None:
    """Exact devices for every placed pod's own claims, node by node; None (and the counts
    corrected) when some node serves fewer pods than counted.

    A node's pods are allocated in one allocator call, so its search backtracks across them
    (pod 1 takes the A100 so that pod 2 can have the only H100). When that fails, pods are
    allocated one by one to learn how many of each kind the node really serves."""
    claims, state = devices.claims, devices.state
    done: dict[Key, dict[Key, AllocationResult]] = {}
    taken: list[AllocationResult] = []
    by_node: dict[int, list[tuple[Pod, DeviceKey, list[ClaimUse]]]] = defaultdict(list)
    for pod, node, k in sorted(assignment, key=lambda row: (row[1], row[2], row[0].name)):
        key = cap.classes[k].device_key
        own = claims.own(pod)
        if own and isinstance(key, DeviceKey):
            by_node[node].append((pod, key, own))
    short = False
    for node, members in by_node.items():
        requests = [claims.to_allocate(u.key, devices.variant) for _, _, own in members for u in own]
        result = state.allocate(node, requests, budget=JOINT_ALLOCATION_STEPS)
        if result is not None:
            state.commit(result)
            taken.extend(result)
            results = iter(result)
            for pod, _, own in members:
                done[pod.key] = {u.key: next(results) for u in own}
            continue
        # Pod by pod: what the node really serves. When every pod gets its devices (the joint
        # search ran out of steps, or a pod-by-pod order happened to work), that is the answer.
        served: Counter[DeviceKey] = Counter()
        failed: set[DeviceKey] = set()
        singles: dict[Key, dict[Key, AllocationResult]] = {}
        for pod, key, own in members:
            if key in failed:
                continue
            one = state.allocate(node, [claims.to_allocate(u.key, devices.variant) for u in own])
            if one is None:
                failed.add(key)
                continue
            state.commit(one)
            taken.extend(one)
            served[key] += 1
            singles[pod.key] = dict(zip((u.key for u in own), one, strict=True))
        if not failed:
            done.update(singles)
            continue
        short = True
        for key in failed:
            devices.exact[key][node] = served[key]
    if short:
        state.release(taken)
        return None
    return done


def _release_shared(devices: GroupDevices) -> None:
    devices.state.release(result for _, result in devices.shared_done.values())
    devices.shared_done.clear()


def placed(group: GroupRequest, cap: GroupCapacity, placer: Placer, attempt: Attempt) -> GroupDecision:
    assignments = placer.commit(attempt)
    count = len(assignments)
    message = f"placed {count}/{cap.total} pending pod{'s' if cap.total != 1 else ''}"
    domain = placer.domain_label(attempt)
    if domain:
        message += f" in {domain}"
    return GroupDecision(
        namespace=group.namespace,
        name=group.name,
        scheduled=True,
        reason=Reason.SCHEDULED,
        message=message,
        assignments=assignments,
        domain=domain,
        is_pod_group=group.is_pod_group,
        pending=list(group.pending),
    )


def unplaced(group: GroupRequest, message: str, reason: Reason = Reason.UNSCHEDULABLE) -> GroupDecision:
    return GroupDecision(
        namespace=group.namespace,
        name=group.name,
        scheduled=False,
        reason=reason,
        message=message,
        is_pod_group=group.is_pod_group,
        pending=list(group.pending),
    )
