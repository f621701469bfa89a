"""From a group's pods to what they ask of the devices.

Each pod's `spec.resourceClaims` entry names a ResourceClaim directly or through the claim
its template produced (`status.resourceClaimStatuses`, as kube-scheduler resolves it). Per
claim, what it means for placement:

- **allocated** (earlier, or by a group before this one in the cycle): no devices to find;
  its `nodeSelector` limits the pod to the nodes it allows;
- **own** (unallocated, used by this pod alone among the group's pending pods): allocated per
  pod, counted per node by `state.DeviceState.pod_slots`;
- **shared** (unallocated, used by several pending pods of the group): allocated once, then
  its `nodeSelector` binds every user (`engine.group`).

A PodGroup's own `spec.resourceClaims` are a requirement of the whole group: every pending
member is their user whether or not it lists them (allocated: they limit every member;
unallocated: shared by all of them, even by one).

A pod whose claim does not exist yet (or is being deleted) keeps its group waiting, with the
claim named. `firstAvailable` requests make *variants*: the group is placed with the first
alternative of every such request if it fits, else the next (KEP-4816, for the whole gang).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from gangsched.engine.dra.allocator import AllocationResult, ClaimToAllocate
from gangsched.engine.dra.state import Alignment, Demand, Need
from gangsched.model import Key, Pod, SelectorTerm
from gangsched.model.dra import ClaimSpec, DeviceRequest, ResourceClaim
from gangsched.model.pod import node_selector_terms

# At most this many combinations of firstAvailable alternatives are tried per group.
MAX_VARIANTS = 16

# (request name, its alternatives' names): one firstAvailable choice, shared by identical claims
Choice = tuple[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """One entry of a pod's spec.resourceClaims, resolved."""

    pod_claim: str  # the entry's name in the pod
    key: Key


@dataclass(slots=True)
class ResolvedClaims:
    """The claims of one group's pending pods, resolved (not `loop.groupclaims.GroupClaims`,
    the claims of a PodGroup's own spec.resourceClaims)."""

    uses: dict[Key, tuple[ClaimUse, ...]]  # pod key -> its claims
    claims: dict[Key, ResourceClaim]
    # Allocations that already exist (or were made earlier this cycle): only limit nodes.
    allocated: dict[Key, tuple[SelectorTerm, ...] | None]
    shared: dict[Key, list[Key]]  # unallocated claim -> its pending users
    # The PodGroup's own claims (`spec.resourceClaims`): used by every member.
    of_group: tuple[Key, ...] = ()
    choices: list[Choice] = field(default_factory=list)
    _specs: dict[
        tuple[int, tuple[tuple[Choice, int], ...]], tuple[ClaimSpec, list[Need], list[Alignment]]
    ] = field(default_factory=dict)

    def variants(self) -> Iterator[dict[Choice, int]]:
        """Alternative indexes per choice, first alternatives first (lexicographic)."""
        ranges = [range(len(alternatives)) for _, alternatives in self.choices]
        for combination in itertools.islice(itertools.product(*ranges), MAX_VARIANTS):
            yield dict(zip(self.choices, combination, strict=True))

    def own(self, pod: Pod) -> list[ClaimUse]:
        return [
            u for u in self.uses.get(pod.key, ()) if u.key not in self.allocated and u.key not in self.shared
        ]

    def to_allocate(self, key: Key, variant: Mapping[Choice, int]) -> ClaimToAllocate:
        claim = self.claims[key]
        return ClaimToAllocate(claim.namespace, claim.name, reduce(claim.spec, variant))

    def demand(self, pod: Pod, variant: Mapping[Choice, int]) -> Demand:
        """What the pod's own claims ask of the devices (shared and allocated ones apart)."""
        return self._demand([u.key for u in self.own(pod)], variant)

    def claim_demand(self, key: Key, variant: Mapping[Choice, int]) -> Demand:
        """What one claim asks of the devices, as if one pod had it alone."""
        return self._demand([key], variant)

    def _demand(self, keys: Sequence[Key], variant: Mapping[Choice, int]) -> Demand:
        needs: list[Need] = []
        alignments: list[Alignment] = []
        for claim_key in keys:
            claim = self.claims[claim_key]
            offset = len(needs)
            # Claims made from one template share its spec: work each spec out once.
            key = (id(claim.spec), tuple(sorted(variant.items())))
            cached = self._specs.get(key)
            if cached is None or cached[0] is not claim.spec:
                spec = reduce(claim.spec, variant)
                cached = (
                    claim.spec,
                    claim_needs(f"{claim.namespace}/{claim.name}", spec),
                    _alignments(spec, 0),
                )
                self._specs[key] = cached
            needs.extend(cached[1])
            alignments.extend(
                Alignment(a.attribute, tuple(offset + j for j in a.needs), a.match) for a in cached[2]
            )
        return Demand(needs=tuple(needs), alignments=tuple(alignments))

    def used_alternatives(self, variant: Mapping[Choice, int]) -> list[str]:
        """ "request/alternative" for each firstAvailable choice, as the message says it."""
        return [
            f"{name}/{alternatives[variant[(name, alternatives)]]}" for name, alternatives in self.choices
        ]


def reduce(spec: ClaimSpec, variant: Mapping[Choice, int]) -> ClaimSpec:
    """The spec with each firstAvailable request narrowed to the variant's alternative (result
    names stay "request/alternative", as upstream writes them)."""
    if not any(r.first_available for r in spec.requests):
        return spec
    requests = []
    for request in spec.requests:
        if request.first_available:
            choice = (request.name, tuple(s.name for s in request.first_available))
            picked = request.first_available[variant.get(choice, 0)]
            request = DeviceRequest(name=request.name, first_available=(picked,))
        requests.append(request)
    return ClaimSpec(requests=tuple(requests), constraints=spec.constraints, config=spec.config)


def claim_needs(claim: str, spec: ClaimSpec) -> list[Need]:
    needs = []
    for request in spec.requests:
        sub = request.alternatives[0]
        needs.append(
            Need(
                claim=claim,
                request=f"{request.name}/{sub.name}" if request.first_available else request.name,
                device_class=sub.device_class,
                selectors=sub.selectors,
                count=sub.count,
                all_devices=sub.allocation_mode == "All",
                admin=bool(sub.admin_access),
                tolerations=sub.tolerations,
                capacity_requests=sub.capacity_requests,
            )
        )
    return needs


def _alignments(spec: ClaimSpec, offset: int) -> list[Alignment]:
    out = []
    for constraint in spec.constraints:
        attribute = constraint.match_attribute or constraint.distinct_attribute
        if not attribute:
            continue
        named = set(constraint.requests)
        members = tuple(
            offset + j
            for j, request in enumerate(spec.requests)
            if not named
            or request.name in named
            or (request.first_available and f"{request.name}/{request.first_available[0].name}" in named)
        )
        out.append(
            Alignment(attribute=attribute, needs=members, match=constraint.match_attribute is not None)
        )
    return out


@dataclass(frozen=True, slots=True)
class WaitingForClaims:
    """Why a group cannot be placed yet: a pod's claim does not exist or is being deleted."""

    message: str  # as the PodGroup's status says it


def resolve(
    pods: Sequence[Pod],
    claims: Mapping[Key, ResourceClaim],
    allocated_now: Mapping[Key, AllocationResult],
    group_claims: Sequence[tuple[str, str | None]] = (),
) -> ResolvedClaims | WaitingForClaims:
    """The group's claims, or why it must wait (a claim missing or being deleted).
    `group_claims` are the PodGroup's own (entry name, claim name), in the pods' namespace."""
    uses: dict[Key, tuple[ClaimUse, ...]] = {}
    found: dict[Key, ResourceClaim] = {}
    users: dict[Key, list[Key]] = {}
    for pod in pods:
        resolved = []
        for entry in pod.claims:
            name = entry.claim_name or pod.claim_statuses.get(entry.name)
            if not name:
                return WaitingForClaims(
                    f"pod {pod.name}: waiting for the ResourceClaim of template {entry.template_name} "
                    f"(claim {entry.name}) to be created"
                )
            key = (pod.namespace, name)
            claim = _usable(claims, key, f"pod {pod.name}", f" (claim {entry.name})")
            if isinstance(claim, WaitingForClaims):
                return claim
            found[key] = claim
            resolved.append(ClaimUse(entry.name, key))
            users.setdefault(key, []).append(pod.key)
        uses[pod.key] = tuple(resolved)
    of_group: list[Key] = []
    namespace = pods[0].namespace if pods else ""
    for entry_name, name in group_claims:
        # A native group's template claim: its members' entries equal the group's (KEP-5729),
        # so a member's status may name the claim before the PodGroup's does.
        name = name or next((n for p in pods if (n := p.claim_statuses.get(entry_name))), None)
        if not name:
            return WaitingForClaims(
                f"PodGroup claim {entry_name}: waiting for its ResourceClaim to be created"
            )
        key = (namespace, name)
        claim = _usable(claims, key, f"PodGroup claim {entry_name}")
        if isinstance(claim, WaitingForClaims):
            return claim
        found[key] = claim
        of_group.append(key)
        # Every pending member is a user, listed or not.
        listed = users.setdefault(key, [])
        listed.extend(p.key for p in pods if p.key not in listed)
    allocated: dict[Key, tuple[SelectorTerm, ...] | None] = {}
    for key, claim in found.items():
        if key in allocated_now:
            allocated[key] = selector_terms(allocated_now[key].node_selector)
        elif claim.allocation is not None:
            allocated[key] = claim.allocation.node_selector
    shared = {k: v for k, v in users.items() if k not in allocated and (len(set(v)) > 1 or k in of_group)}
    choices: list[Choice] = []
    for key, claim in found.items():
        if key in allocated:
            continue
        for request in claim.spec.requests:
            if len(request.first_available) > 1:
                choice = (request.name, tuple(s.name for s in request.first_available))
                if choice not in choices:
                    choices.append(choice)
    return ResolvedClaims(
        uses=uses,
        claims=found,
        allocated=allocated,
        shared=shared,
        of_group=tuple(of_group),
        choices=choices,
    )


def _usable(
    claims: Mapping[Key, ResourceClaim], key: Key, who: str, entry: str = ""
) -> ResourceClaim | WaitingForClaims:
    """The claim `key`, or why `who` waits for it (missing, or being deleted)."""
    claim = claims.get(key)
    if claim is None:
        return WaitingForClaims(f"{who}: waiting for ResourceClaim {key[0]}/{key[1]}{entry}")
    if claim.deleting:
        return WaitingForClaims(f"{who}: ResourceClaim {key[0]}/{key[1]} is being deleted")
    return claim


def selector_terms(selector: Mapping[str, object] | None) -> tuple[SelectorTerm, ...] | None:
    """An allocation's nodeSelector (JSON, as `AllocationResult` makes it) as terms."""
    if selector is None:
        return None
    return node_selector_terms(selector, "nodeSelector")
