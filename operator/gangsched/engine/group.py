"""Placing one group: capacity, the placer, and for pods with ResourceClaims, their devices.

A group without claims is placed in one pass (capacity -> placer -> commit). With claims
(docs/placement.md, "Devices"):

1. Claims are resolved (`dra.claims`); a missing one keeps the group waiting.
2. For each firstAvailable variant in order, the group is placed with devices as one more
   capacity column per pod class (`dra.inventory`): topology and devices in one pass.
3. A claim shared by several pending pods is allocated once, on the node holding most of its
   users in that placement; its nodeSelector then limits every user and the group is placed
   again.
4. Devices are assigned exactly, pod by pod, on the chosen nodes only. Where the column
   over-counted (devices two requests compete for, counters of partitionable devices), the
   node's count is corrected to what the allocator found and the group placed again.

Nothing is kept from a variant that fails: its device allocations are released.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.dra.allocator import AllocationError, AllocationResult
from gangsched.engine.dra.claims import ClaimUse, ResolvedClaims, WaitingForClaims, resolve, selector_terms
from gangsched.engine.dra.inventory import Demand, DeviceState, Need, SelectorFailure
from gangsched.engine.explain import explain, explain_best
from gangsched.engine.fill import Attempt
from gangsched.engine.placer import Placer
from gangsched.engine.snapshot import BoolArray, IntArray, Snapshot
from gangsched.engine.types import GroupDecision, GroupRequest, PodDevice
from gangsched.model import Key, Pod, Reason

# Placements tried per variant before the group is declared unschedulable: each round fixes
# the count of every node where the exact allocation found fewer devices than counted.
MAX_ROUNDS = 6
# Nodes tried for one shared claim.
SHARED_CANDIDATES = 4
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
            uses = self.claims.uses.get(pod.key, ())
            if not uses:
                return ()
            cached = DeviceKey(
                demand=self.claims.demand(pod, self.variant),
                allocated=tuple(sorted(u.key for u in uses if u.key in self.claims.allocated)),
                shared=tuple(sorted(u.key for u in uses if u.key in self.claims.shared)),
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
        # Not allocated yet: anywhere but the nodes that already failed to hold it.
        tried = self.shared_tried.get(claim)
        if not tried:
            return None
        mask = np.ones(len(self.snap.nodes), dtype=bool)
        mask[list(tried)] = False
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
        return self.state.node_reasons(key.demand, nodes)

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
) -> Outcome:
    """Place `group` on `snapshot`; on success the snapshot (and `state`, `allocated_now`)
    count its pods and devices as used."""
    if not any(p.claims for p in group.pending):
        cap = GroupCapacity(snapshot, group, blocked)
        placer = Placer(cap)
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
        outcome, short = _place_variant(snapshot, group, blocked, devices, allocated_now)
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
    claims = resolve(group.pending, state.objects.claims if state else {}, allocated_now)
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
    for _ in range(MAX_ROUNDS):
        failure = _selector_failure(cap, devices)
        if failure is not None:
            _release_shared(devices)
            text = failure.text()
            return Outcome(unplaced(group, text), cap), text
        placer = Placer(cap)
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
            if _allocate_shared(devices, assignment):
                cap = GroupCapacity(snapshot, group, blocked, devices)
                continue
            own = _allocate_own(devices, cap, assignment)
        except AllocationError as exc:
            _release_shared(devices)
            return Outcome(unplaced(group, str(exc)), cap), str(exc)
        if own is None:
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
    _release_shared(devices)
    message = explain(cap, Placer(cap)) + (
        f"; the devices the chosen nodes offer fell short of the count {MAX_ROUNDS} times"
    )
    return Outcome(unplaced(group, message), cap), message


def _missing_class(devices: GroupDevices, group: GroupRequest) -> Need | None:
    """The first request of the group's claims whose device class does not exist."""
    for pod in group.pending:
        key = devices.key(pod)
        if isinstance(key, DeviceKey):
            for need in key.demand.needs:
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


def _allocate_shared(devices: GroupDevices, assignment: list[tuple[Pod, int, int]]) -> bool:
    """Allocate the first shared claim not yet allocated, on the node holding most of its users
    in this placement. True when one was tried (the group must be placed again)."""
    claims = devices.claims
    for key, users in claims.shared.items():
        if key in devices.shared_done:
            continue
        members = set(users)
        on = Counter(node for pod, node, _ in assignment if pod.key in members)
        others = [node for _, node, _ in assignment if node not in on]
        candidates = [n for n, _ in on.most_common()] + list(dict.fromkeys(others))
        tried = devices.shared_tried[key]
        for node in [n for n in candidates if n not in tried][:SHARED_CANDIDATES]:
            result = devices.state.allocate(node, [claims.to_allocate(key, devices.variant)])
            if result is not None:
                devices.state.commit(result)
                devices.shared_done[key] = (node, result[0])
                return True
            tried.add(node)
        if not candidates or all(n in tried for n in candidates):
            raise AllocationError(
                f"claim {key[0]}/{key[1]} (shared by {len(members)} pods): no node of the placement can "
                "hold its devices"
            )
        return True
    return False


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
        pending=list(group.pending),
    )


def unplaced(group: GroupRequest, message: str, reason: Reason = Reason.UNSCHEDULABLE) -> GroupDecision:
    return GroupDecision(
        namespace=group.namespace,
        name=group.name,
        scheduled=False,
        reason=reason,
        message=message,
        pending=list(group.pending),
    )
