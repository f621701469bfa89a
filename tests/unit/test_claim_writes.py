"""The operator's DRA bookkeeping without a cluster: which claim writes a gang needs, binding
conditions read from status.devices, the DRA cache (stale events, vanished objects, assumed
allocations) and the KEP-5647 rule for our claim writes."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

import pytest

from gangsched.cluster import ClusterCache, LiveReader
from gangsched.cluster.devices import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gangsched.cluster.kinds import RESOURCE_SLICE
from gangsched.cluster.store import Store
from gangsched.engine import schedule_cycle
from gangsched.loop.claims import FINALIZER, ClaimError, ClaimStep, binding_state, plan_claims
from gangsched.loop.config import SchedulerConfig
from gangsched.loop.context import LoopContext
from gangsched.loop.pipeline import GangPlan
from gangsched.model.dra import ConsumerRef, parse_resource_claim
from gangsched.session import ApiError
from gangsched_testing import dra
from gangsched_testing.builders import node, pod_group, pod_manifest

GPU = dra.GPU_DRIVER


def claim_body(name: str, rv: str, **options: Any) -> dict[str, Any]:
    body = dra.claim("ml", name, **options)
    body["metadata"].update(resourceVersion=rv, uid=f"uid-{name}")
    return body


def members(claims: list[str]) -> list[Any]:
    """Pods w-0, w-1, ... of group g, each with one claim entry "gpu" naming claims[i]."""
    return [dra.claim_pod(f"w-{i}", "g", {"gpu": name}, uid=f"pod-{i}") for i, name in enumerate(claims)]


def with_rv(body: dict[str, Any], rv: str) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "resourceVersion": rv}}


# --------------------------------------------------------------------------- plan_claims


def test_plan_claims_allocates_new_claims_and_reserves_each_user_once() -> None:
    pods = members(["w-0-gpu", "w-1-gpu"])
    bodies = [claim_body(f"w-{i}-gpu", "5") for i in range(2)]
    claims = {("ml", f"w-{i}-gpu"): parse_resource_claim(bodies[i]) for i in range(2)}
    objects = dra.dra_objects([dra.gpu_class(), dra.node_slice("a", dra.gpus(2)), *bodies], pods)
    result = schedule_cycle(nodes=[node("a", gpu=0)], pods=pods, pod_groups=[pod_group("g", 2)], dra=objects)
    decision = result.decisions[0]
    assert decision.scheduled, decision.message
    work = plan_claims([(p, "a") for p in pods], decision.allocations, claims)
    assert sorted(w.key for w in work) == sorted(claims)
    for w in work:
        assert w.allocation is not None
        assert [p.name for p in w.consumers] == [w.key[1].removesuffix("-gpu")]


def test_plan_claims_only_reserves_an_allocated_claim_and_skips_reserved_pods() -> None:
    pods = members(["shared", "shared"])
    allocated = parse_resource_claim(
        claim_body("shared", "5", allocated=[("gpu", GPU, "a", "gpu-0")], node="a")
    )
    allocated.reserved_for = (ConsumerRef("", "pods", "w-0", pods[0].uid),)
    [work] = plan_claims([(p, "a") for p in pods], {}, {("ml", "shared"): allocated})
    assert work.allocation is None
    assert [p.name for p in work.consumers] == ["w-1"]
    allocated.reserved_for += (ConsumerRef("", "pods", "w-1", pods[1].uid),)
    assert plan_claims([(p, "a") for p in pods], {}, {("ml", "shared"): allocated}) == []


def test_plan_claims_reserves_a_podgroup_claim_its_members_do_not_list_for_the_group() -> None:
    spec = {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "fabric"}],
    }
    group = pod_group("g", 2, uid="pg-uid", spec=spec)
    plain = [dra.claim_pod(f"w-{i}", "g", {}, uid=f"pod-{i}") for i in range(2)]
    fabric = claim_body("g-fabric", "5")
    objects = dra.dra_objects([dra.gpu_class(), dra.node_slice("a", dra.gpus(1)), fabric], plain)
    result = schedule_cycle(nodes=[node("a", gpu=0)], pods=plain, pod_groups=[group], dra=objects)
    decision = result.decisions[0]
    assert decision.scheduled, decision.message
    claims = {("ml", "g-fabric"): parse_resource_claim(fabric)}
    [work] = plan_claims([(p, "a") for p in plain], decision.allocations, claims, group)
    assert work.key == ("ml", "g-fabric")
    assert work.allocation is not None
    assert [(c.name, c.uid) for c in work.consumers] == [("g", "pg-uid")]
    # A gang with nothing placed writes nothing; a missing group claim is refused.
    assert plan_claims([], decision.allocations, claims, group) == []
    with pytest.raises(ClaimError, match="ResourceClaim ml/g-fabric does not exist"):
        plan_claims([(p, "a") for p in plain], {}, {}, group)


def test_plan_claims_refuses_missing_or_unallocated_claims() -> None:
    [pod] = members(["c"])
    with pytest.raises(ClaimError, match="ResourceClaim ml/c does not exist"):
        plan_claims([(pod, "a")], {}, {})
    unallocated = parse_resource_claim(claim_body("c", "3"))
    with pytest.raises(ClaimError, match="has no allocation"):
        plan_claims([(pod, "a")], {}, {("ml", "c"): unallocated})


# --------------------------------------------------------------------------- binding conditions


def test_binding_state_waits_for_every_condition_and_stops_at_a_failure() -> None:
    device = ((GPU, "a", "gpu-0"), ["attached", "ready"], ["failed"])

    def status(**conditions: str) -> dict[str, Any]:
        entries = [{"type": k, "status": v} for k, v in conditions.items()]
        return {"devices": [{"driver": GPU, "pool": "a", "device": "gpu-0", "conditions": entries}]}

    assert binding_state({}, [device]) == (False, None)
    assert binding_state(status(attached="True"), [device]) == (False, None)
    assert binding_state(status(attached="True", ready="True"), [device]) == (True, None)
    ready, failure = binding_state(status(attached="True", ready="True", failed="True"), [device])
    assert not ready
    assert failure == f"device {GPU}/a/gpu-0: binding failure condition failed is True"


# --------------------------------------------------------------------------- the DRA cache


def test_the_store_ignores_stale_events_and_keeps_unchanged_slices() -> None:
    store = Store()
    slice_ = dra.node_slice("a", dra.gpus(2))
    slice_["metadata"]["resourceVersion"] = "10"
    change = store.apply(RESOURCE_SLICE, "ADDED", slice_)
    assert change is not None
    assert change.significant
    key = ("", slice_["metadata"]["name"])
    held = store.get(RESOURCE_SLICE, key)
    same = store.apply(RESOURCE_SLICE, "MODIFIED", with_rv(slice_, "11"))  # same content
    assert same is not None
    assert not same.significant
    assert store.get(RESOURCE_SLICE, key) is held  # device tables are cached by it
    older = dra.node_slice("a", dra.gpus(1))
    older["metadata"]["resourceVersion"] = "9"
    assert store.apply(RESOURCE_SLICE, "MODIFIED", older) is None
    held_now = store.get(RESOURCE_SLICE, key)
    assert held_now is not None
    assert len(held_now.devices) == 2


def test_a_list_removes_what_vanished_and_invalid_objects_are_reported() -> None:
    cache = ClusterCache()
    gpu_class = {**dra.gpu_class(), "metadata": {"name": GPU, "resourceVersion": "4"}}
    cache.apply(DEVICE_CLASSES, "ADDED", gpu_class)
    later = {**dra.gpu_class("late"), "metadata": {"name": "late", "resourceVersion": "20"}}
    cache.apply(DEVICE_CLASSES, "ADDED", later)
    # A LIST at 10 shows neither: the first vanished, the second is newer than the LIST.
    assert cache.replace(DEVICE_CLASSES, [], "10") == [("", GPU)]
    assert set(cache.devices.classes) == {"late"}
    broken = claim_body("broken", "7")
    broken["spec"] = {"devices": {"requests": [{"name": "x", "exactly": {"count": "many"}}]}}
    cache.apply(RESOURCE_CLAIMS, "ADDED", broken)
    assert ("resourceclaims", "ml", "broken") in cache.invalid
    assert ("ml", "broken") not in cache.devices.claims
    # An invalid object vanishes from a LIST like any other.
    assert cache.replace(RESOURCE_CLAIMS, [], "10") == [("ml", "broken")]
    assert not cache.invalid


def test_assumed_allocations_take_devices_until_forgotten() -> None:
    cache = ClusterCache()
    for body in (dra.gpu_class(), dra.node_slice("a", dra.gpus(1))):
        kind = DEVICE_CLASSES if body["kind"] == "DeviceClass" else RESOURCE_SLICES
        cache.apply(kind, "ADDED", body)
    pods = members(["w-0-gpu", "w-1-gpu"])
    for i in range(2):
        cache.apply(RESOURCE_CLAIMS, "ADDED", claim_body(f"w-{i}-gpu", str(10 + i)))
    first = schedule_cycle(
        nodes=[node("a", gpu=0)], pods=pods[:1], pod_groups=[pod_group("g", 1)], dra=cache.devices.objects(0)
    )
    allocations = first.decisions[0].allocations
    assert allocations
    changes = cache.changes
    cache.assume_allocations(allocations)
    assert cache.changes > changes
    # The next cycle sees the only GPU taken by the assumed allocation.
    second = schedule_cycle(
        nodes=[node("a", gpu=0)],
        pods=pods[1:],
        pod_groups=[pod_group("g", 1)],
        dra=cache.devices.objects(0),
    )
    assert not second.decisions[0].scheduled
    cache.forget_allocations(allocations)
    third = schedule_cycle(
        nodes=[node("a", gpu=0)],
        pods=pods[1:],
        pod_groups=[pod_group("g", 1)],
        dra=cache.devices.objects(0),
    )
    assert third.decisions[0].scheduled


def test_the_finalizer_answer_keeps_the_assumed_allocation() -> None:
    """The finalizer is written before the allocation; its answer (no allocation yet) must not
    drop the assumption, or a cycle in between hands the same device out again (seen in the
    DRA benchmark: two pods alone on one GPU)."""
    cache = ClusterCache()
    for body in (dra.gpu_class(), dra.node_slice("a", dra.gpus(1))):
        kind = DEVICE_CLASSES if body["kind"] == "DeviceClass" else RESOURCE_SLICES
        cache.apply(kind, "ADDED", body)
    pods = members(["w-0-gpu", "w-1-gpu"])
    for i in range(2):
        cache.apply(RESOURCE_CLAIMS, "ADDED", claim_body(f"w-{i}-gpu", str(10 + i)))
    first = schedule_cycle(
        nodes=[node("a", gpu=0)], pods=pods[:1], pod_groups=[pod_group("g", 1)], dra=cache.devices.objects(0)
    )
    allocations = first.decisions[0].allocations
    cache.assume_allocations(allocations)
    finalized = claim_body("w-0-gpu", "20")  # the finalizer patch's answer: no allocation yet
    finalized["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    cache.wrote_claim(("ml", "g"), finalized)
    between = schedule_cycle(
        nodes=[node("a", gpu=0)], pods=pods[1:], pod_groups=[pod_group("g", 1)], dra=cache.devices.objects(0)
    )
    assert not between.decisions[0].scheduled  # the only GPU is still taken
    cache.wrote_claim(
        ("ml", "g"), claim_body("w-0-gpu", "21", allocated=[("gpu", GPU, "a", "gpu-0")], node="a")
    )
    assert cache.devices.counts()["assumed_allocations"] == 0  # the written allocation holds it now


def test_a_group_waits_until_the_watch_shows_our_claim_write() -> None:
    cache = ClusterCache()
    cache.apply(RESOURCE_CLAIMS, "ADDED", claim_body("c", "10"))
    written = claim_body("c", "15", allocated=[("gpu", GPU, "a", "gpu-0")], node="a")
    cache.wrote_claim(("ml", "g"), written)
    assert cache.devices.claims[("ml", "c")].allocation is not None  # held at once
    assert cache.caught_up(("ml", "g")) is False
    cache.apply(RESOURCE_CLAIMS, "MODIFIED", claim_body("c", "12"))  # an older event
    assert cache.devices.claims[("ml", "c")].allocation is not None  # not rolled back
    assert cache.caught_up(("ml", "g")) is False
    cache.apply(RESOURCE_CLAIMS, "MODIFIED", written)
    assert cache.caught_up(("ml", "g")) is True
    assert cache.pending_claims(("ml", "g")) == []


def test_held_back_devices_are_not_handed_out_until_their_time() -> None:
    cluster = ClusterCache()
    cluster.apply(DEVICE_CLASSES, "ADDED", dra.gpu_class())
    cluster.apply(RESOURCE_SLICES, "ADDED", dra.node_slice("a", dra.gpus(1)))
    cache = cluster.devices
    cache.hold_back([(GPU, "a", "gpu-0")], until=100.0)
    objects = cache.objects(50.0)
    assert objects is not None
    assert objects.unavailable == frozenset({(GPU, "a", "gpu-0")})
    later = cache.objects(100.0)
    assert later is not None
    assert later.unavailable == frozenset()


# --------------------------------------------------------------------------- stale reservations


class ClaimBinder:
    """Answers claim patches as the apiserver would, from the claim it holds."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.patches: list[tuple[dict[str, Any], bool, bool]] = []

    async def patch_claim(
        self,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        status: bool = False,
        strategic: bool = False,
    ) -> dict[str, Any]:
        self.patches.append((patch, status, strategic))
        body = copy.deepcopy(self.body)
        meta = body["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        if "finalizers" in patch.get("metadata", {}):
            meta["finalizers"] = patch["metadata"]["finalizers"]
        for key, value in (patch.get("status") or {}).items():
            if strategic and key == "reservedFor":
                gone = {r["uid"] for r in value}
                body["status"]["reservedFor"] = [
                    r for r in body["status"]["reservedFor"] if r["uid"] not in gone
                ]
            elif value is None:
                body.setdefault("status", {}).pop(key, None)
            else:
                body.setdefault("status", {})[key] = value
        self.body = body
        return body


def test_a_claim_reserved_for_a_pending_pod_past_the_timeout_is_released() -> None:
    cache = ClusterCache()
    [_pod] = members(["c"])
    pod_body = dra.pod_claims(pod_manifest("w-0", "g", uid="pod-0"), {"gpu": "c"})
    pod_body["metadata"]["resourceVersion"] = "3"
    cache.apply("pods", "ADDED", pod_body)
    body = claim_body("c", "10", allocated=[("gpu", GPU, "a", "gpu-0")], node="a")
    body["metadata"]["finalizers"] = [FINALIZER]
    body["status"]["reservedFor"] = [{"resource": "pods", "name": "w-0", "uid": "pod-0"}]
    cache.apply(RESOURCE_CLAIMS, "ADDED", body)
    binder = ClaimBinder(body)
    now = [0.0]
    step = ClaimStep(
        LoopContext(
            cache=cache,
            binder=binder,  # type: ignore[arg-type]
            live=None,  # type: ignore[arg-type]  # not read on this path
            config=SchedulerConfig(),
            clock=lambda: now[0],
        ),
        reporter=None,  # type: ignore[arg-type]
    )

    def sweep(binding: bool = False) -> None:
        asyncio.run(step.sweep(lambda _: binding, lambda _: 5.0))

    sweep()
    now[0] = 4.0
    sweep()
    assert binder.patches == []  # not yet past the group's timeout
    now[0] = 6.0
    sweep(binding=True)
    assert binder.patches == []  # a plan of ours is binding it: not stale, and the clock restarts
    sweep()
    assert binder.patches == []
    now[0] = 11.5
    sweep()
    # Deallocated (nobody else holds it), then our finalizer removed.
    [(deallocate, on_status, _), (finalizer, _, _)] = binder.patches
    assert on_status
    assert deallocate["status"] == {"allocation": None, "reservedFor": None}
    assert finalizer["metadata"]["finalizers"] == []
    claim = cache.devices.claims[("ml", "c")]
    assert claim.allocation is None
    assert claim.reserved_for == ()


class LostAnswer(ClaimBinder):
    """The first status write is applied, but its answer is lost: the retry gets a 409."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.lost = False

    async def patch_claim(
        self,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        status: bool = False,
        strategic: bool = False,
    ) -> dict[str, Any]:
        answer = await super().patch_claim(namespace, name, patch, status=status, strategic=strategic)
        if status and not self.lost:
            self.lost = True
            raise ApiError(409, reason="Conflict")
        return answer


class Reader(LiveReader):
    """The live reads through the real `LiveReader`, the claim read answered by the binder."""

    def __init__(self, cache: ClusterCache, binder: ClaimBinder) -> None:
        super().__init__(cache=cache, transport=cast(Any, None), scheduler_name="gangsched")
        self.binder = binder

    async def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.binder.body)


def test_our_own_allocation_seen_after_a_lost_answer_is_not_someone_elses() -> None:
    cache = ClusterCache()
    cache.apply(DEVICE_CLASSES, "ADDED", dra.gpu_class())
    cache.apply(RESOURCE_SLICES, "ADDED", dra.node_slice("a", dra.gpus(1)))
    body = claim_body("w-0-gpu", "10")
    cache.apply(RESOURCE_CLAIMS, "ADDED", body)
    [pod] = members(["w-0-gpu"])
    result = schedule_cycle(
        nodes=[node("a", gpu=0)], pods=[pod], pod_groups=[pod_group("g", 1)], dra=cache.devices.objects(0)
    )
    [decision] = result.decisions
    binder = LostAnswer(body)
    step = ClaimStep(
        LoopContext(cache=cache, binder=binder, live=Reader(cache, binder)),  # type: ignore[arg-type]
        reporter=None,  # type: ignore[arg-type]
    )
    plan = GangPlan(decision, [(pod, "a")])
    assert asyncio.run(step.run(plan)) is None
    claim = cache.devices.claims[("ml", "w-0-gpu")]
    assert claim.allocation is not None
    assert [r.uid for r in claim.reserved_for] == ["pod-0"]


class CreateBinder:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    async def create_claim(self, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(body)
        made = copy.deepcopy(body)
        made["metadata"]["name"] = made["metadata"].pop("generateName") + "new01"
        made["metadata"]["resourceVersion"] = "50"
        return made


def test_an_extended_resource_claim_left_by_an_earlier_attempt_is_used_not_duplicated() -> None:
    from gangsched.loop.extended import EXTENDED_CLAIM_ANNOTATION, ExtendedClaims

    cache = ClusterCache()
    er_class = dra.gpu_class("er.example.com")
    er_class["spec"]["extendedResourceName"] = "example.com/gpu"
    cache.apply(DEVICE_CLASSES, "ADDED", er_class)
    cache.apply(RESOURCE_SLICES, "ADDED", dra.node_slice("a", dra.gpus(2)))
    body = pod_manifest("w-0", "g", uid="pod-0", limits={"example.com/gpu": "1"})
    from gangsched.model import parse_pod

    pending = parse_pod(body)
    result = schedule_cycle(
        nodes=[node("a", gpu=0)], pods=[pending], pod_groups=[pod_group("g", 1)], dra=cache.devices.objects(0)
    )
    [decision] = result.decisions
    assert decision.scheduled, decision.message
    [placed] = decision.pending
    binder = CreateBinder()
    step = ExtendedClaims(cache=cache, binder=binder)  # type: ignore[arg-type]
    plan = GangPlan(decision, [(placed, "a")])
    assert asyncio.run(step.prepare(plan)) is None
    assert len(binder.created) == 1  # none left over: one is created
    # An earlier attempt's claim, owned by the pod: used instead of a second one.
    leftover = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "w-0-extended-resources-old01",
            "namespace": "ml",
            "uid": "claim-old",
            "resourceVersion": "40",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "w-0", "uid": "pod-0"}],
        },
        "spec": binder.created[0]["spec"],
    }
    cache.apply(RESOURCE_CLAIMS, "ADDED", leftover)
    cache.apply(
        RESOURCE_CLAIMS, "DELETED", {"metadata": {"namespace": "ml", "name": "w-0-extended-resources-new01"}}
    )
    again = schedule_cycle(
        nodes=[node("a", gpu=0)], pods=[pending], pod_groups=[pod_group("g", 1)], dra=cache.devices.objects(0)
    )
    [decision] = again.decisions
    [placed] = decision.pending
    plan = GangPlan(decision, [(placed, "a")])
    assert asyncio.run(ExtendedClaims(cache=cache, binder=binder).prepare(plan)) is None  # type: ignore[arg-type]
    assert len(binder.created) == 1
    [(pod, _)] = plan.assignments
    assert any(c.claim_name == "w-0-extended-resources-old01" for c in pod.claims)
    assert ("ml", "w-0-extended-resources-old01") in decision.allocations
