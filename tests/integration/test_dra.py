"""`gangsched run` with DRA on the real control plane: kube-apiserver, etcd and
kube-controller-manager (resourceclaim controller, garbage collector) v1.36.3, with the fake
driver's ResourceSlices. Every test ends with `check_claims`: no device allocated to two
claims, and every allocated claim reserved only for consumers that exist."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from kubernetes import client
from operator_support import (
    Operator,
    all_bound,
    bound_nodes,
    condition,
    create_pod_group,
    create_pods,
    events,
    get_pod_group,
    wait_until,
)

from conftest import FakeDra
from gangsched.quantity import parse_nano
from gangsched_testing import devcluster, dra, fakedra, fakenodes
from gangsched_testing.builders import pod_group_manifest, pod_manifest
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

BLOCK = "example.com/block"
RACK = "example.com/rack"
NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]
Json = dict[str, Any]
FINALIZER = "resource.kubernetes.io/delete-protection"
MODEL = f'device.attributes["{dra.GPU_DRIVER}"].model'


def prefix() -> str:
    return f"d{uuid.uuid4().hex[:5]}-"


def nodes(fake_nodes: NodeFactory, *, blocks: int = 1, racks: int = 2, hosts: int = 2) -> list[str]:
    shape = fakenodes.TopologyShape(zones=1, blocks=blocks, racks=racks, hosts=hosts)
    return fake_nodes(fakenodes.NodeSet(shape=shape, name_prefix=prefix()))


def claim_pod(name: str, group: str, claims: Mapping[str, str], **options: Any) -> Json:
    """A member pod whose container uses `claims` (entry -> "template:<name>" or a claim name)."""
    body = pod_manifest(name, group, **options)
    entries = []
    for entry, source in claims.items():
        if source.startswith("template:"):
            entries.append({"name": entry, "resourceClaimTemplateName": source.removeprefix("template:")})
        else:
            entries.append({"name": entry, "resourceClaimName": source})
    body["spec"]["resourceClaims"] = entries
    container = body["spec"]["containers"][0]
    container.setdefault("resources", {})["claims"] = [{"name": e} for e in claims]
    return body


def gang(group: str, size: int, claims: Mapping[str, str], **options: Any) -> list[Json]:
    return [claim_pod(f"{group}-{i}", group, claims, **options) for i in range(size)]


def create(api: client.ApiClient, namespace: str, body: Mapping[str, Any]) -> Json:
    kind = body["kind"]
    plural = {"ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims"}[kind]
    path = f"/apis/{dra.API_VERSION}/namespaces/{namespace}/{plural}"
    meta = {**body["metadata"], "namespace": namespace}
    result: Json = request_json(api, "POST", path, body={**body, "metadata": meta})
    return result


def list_claims(api: client.ApiClient, namespace: str | None = None) -> list[Json]:
    path = (
        f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims"
        if namespace
        else f"/apis/{dra.API_VERSION}/resourceclaims"
    )
    items: list[Json] = request_json(api, "GET", path)["items"]
    return items


def pod_claims(api: client.ApiClient, namespace: str, pod: str) -> list[Json]:
    """The claims of `pod` (through its resourceClaimStatuses or resourceClaimName)."""
    body = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
    statuses = (body.get("status") or {}).get("resourceClaimStatuses") or []
    names = {s["name"]: s.get("resourceClaimName") for s in statuses}
    out = []
    for entry in body["spec"].get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or names.get(entry["name"])
        if name:
            out.append(
                request_json(
                    api, "GET", f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims/{name}"
                )
            )
    return out


def get_claim(api: client.ApiClient, namespace: str, name: str) -> Json:
    result: Json = request_json(
        api, "GET", f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims/{name}"
    )
    return result


def devices_of(claim: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(request, driver, pool, device) of an allocated claim."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        (r["request"], r["driver"], r["pool"], r["device"])
        for r in (allocation.get("devices") or {}).get("results") or []
    ]


def check_claims(api: client.ApiClient) -> None:
    """No device allocated to two claims (a shared device's shares excepted: each with its own
    shareID, together within the device's capacity); every allocated claim reserved only for
    consumers that exist (pods and PodGroups, by uid)."""
    holders: dict[tuple[str, str, str], str] = {}
    shares: dict[tuple[str, str, str], dict[str, int]] = {}
    share_ids: set[str] = set()
    pods = request_json(api, "GET", "/api/v1/pods")["items"]
    uids = {p["metadata"]["uid"] for p in pods}
    groups = request_json(api, "GET", "/apis/scheduling.gangsched.io/v1alpha1/podgroups")["items"]
    group_uids = {g["metadata"]["uid"] for g in groups}
    for claim in list_claims(api):
        name = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        allocation = (claim.get("status") or {}).get("allocation")
        for r in ((allocation or {}).get("devices") or {}).get("results") or []:
            if r.get("adminAccess"):
                continue
            device = (r["driver"], r["pool"], r["device"])
            if r.get("shareID"):
                assert r["shareID"] not in share_ids, f"{name}: shareID {r['shareID']} used twice"
                share_ids.add(r["shareID"])
                used = shares.setdefault(device, {})
                for capacity, value in (r.get("consumedCapacity") or {}).items():
                    used[capacity] = used.get(capacity, 0) + parse_nano(value)
                continue
            assert device not in holders, f"{'/'.join(device)} allocated to {holders[device]} and {name}"
            holders[device] = name
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if ref.get("resource") == "pods":
                assert ref["uid"] in uids, f"{name} reserved for pod {ref['name']} that does not exist"
            else:
                assert ref.get("resource") == "podgroups", f"{name}: unexpected consumer {ref}"
                assert ref["uid"] in group_uids, (
                    f"{name} reserved for PodGroup {ref['name']} that does not exist"
                )
    if shares:
        capacities = {
            (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d.get("capacity") or {}
            for s in request_json(api, "GET", fakedra.SLICES_PATH)["items"]
            for d in s["spec"].get("devices") or ()
        }
        for device, used in shares.items():
            assert device not in holders, (
                f"{'/'.join(device)} shared and allocated whole to {holders[device]}"
            )
            for capacity, total in used.items():
                have = parse_nano(capacities[device][capacity]["value"])
                assert total <= have, f"{'/'.join(device)}: {capacity} shares {total} over {have} (nano)"


@pytest.fixture(autouse=True)
def _dra_cluster(controller_manager: devcluster.ControlPlane) -> None:
    """Every test here needs the resourceclaim controller."""


def test_gang_with_a_claim_template_lands_in_one_rack_with_distinct_gpus(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    names = nodes(fake_nodes, blocks=1, racks=2, hosts=2)
    fake_dra(fakedra.NodeDevices(gpus=4), names)
    operator_factory()
    create(admin_api, namespace, dra.claim_template(namespace, "one-gpu", dra.request("gpu")))
    create_pod_group(
        admin_api,
        namespace,
        pod_group_manifest("train", 8, topology=[(BLOCK, "Required"), (RACK, "Required")]),
    )
    create_pods(admin_api, namespace, gang("train", 8, {"gpu": "template:one-gpu"}))
    placed = wait_until(all_bound(admin_api, namespace, "train", 8), timeout=60, what="8 pods bound")
    racks = {n.rsplit("-", 1)[0] for n in placed.values()}
    assert len(racks) == 1, placed
    seen: set[tuple[str, str, str]] = set()
    for pod, node in placed.items():
        [claim] = pod_claims(admin_api, namespace, pod)
        status = claim["status"]
        [(request, _, pool, device)] = devices_of(claim)
        assert request == "gpu"
        assert pool == node, f"{pod} on {node} got a device of pool {pool}"
        seen.add((dra.GPU_DRIVER, pool, device))
        assert status["allocation"].get("allocationTimestamp")
        assert status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
            node
        ]
        assert [r["name"] for r in status["reservedFor"]] == [pod]
        assert FINALIZER in claim["metadata"]["finalizers"]
    assert len(seen) == 8
    pg = wait_until(
        lambda: (
            (g := get_pod_group(admin_api, namespace, "train")).get("status", {}).get("scheduled") == 8 and g
        ),
        what="the PodGroup status counting 8 scheduled",
    )
    assert condition(pg)["reason"] == "Scheduled"
    check_claims(admin_api)
    # Finished pods: the resourceclaim controller takes the reservation back and deallocates.
    for i in range(8):
        node_agent.finish_pod(namespace=namespace, name=f"train-{i}")
    wait_until(
        lambda: all(not (c.get("status") or {}).get("allocation") for c in list_claims(admin_api, namespace)),
        timeout=30,
        what="claims deallocated after the pods finished",
    )
    check_claims(admin_api)


def claimed(api: client.ApiClient, namespace: str, group: str, size: int) -> dict[str, list[tuple[str, ...]]]:
    """pod -> its claims' (request, driver, pool, device), once all `size` pods are bound."""
    placed = wait_until(
        all_bound(api, namespace, group, size), timeout=60, what=f"{group}: {size} pods bound"
    )
    return {pod: [d for c in pod_claims(api, namespace, pod) for d in devices_of(c)] for pod in placed}


def test_first_available_takes_a100_for_the_whole_gang_when_h100s_are_busy(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=4, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=4, gpu_model="H100"), names[:2])
    fake_dra(fakedra.NodeDevices(gpus=4, gpu_model="A100"), names[2:])
    operator_factory()
    h100 = dra.request("h100", selectors=[f'{MODEL} == "H100"'])
    a100 = dra.request("a100", selectors=[f'{MODEL} == "A100"'])
    create(admin_api, namespace, dra.claim_template(namespace, "h100", h100))
    create(
        admin_api,
        namespace,
        dra.claim_template(namespace, "h100-or-a100", dra.first_available("gpu", h100, a100)),
    )
    # Six of the eight H100s busy.
    create_pod_group(admin_api, namespace, pod_group_manifest("busy", 6))
    create_pods(admin_api, namespace, gang("busy", 6, {"gpu": "template:h100"}))
    busy = claimed(admin_api, namespace, "busy", 6)
    assert all(pool in names[:2] for devices in busy.values() for _, _, pool, _ in devices)
    create_pod_group(admin_api, namespace, pod_group_manifest("train", 4))
    create_pods(admin_api, namespace, gang("train", 4, {"gpu": "template:h100-or-a100"}))
    train = claimed(admin_api, namespace, "train", 4)
    for pod, devices in train.items():
        [(request, _, pool, _)] = devices
        assert request == "gpu/a100", f"{pod}: {devices}"
        assert pool in names[2:]
    message = condition(get_pod_group(admin_api, namespace, "train"))["message"]
    assert message.endswith("; devices: gpu/a100"), message
    check_claims(admin_api)


def test_mig_partitions_never_hand_out_a_gpu_and_its_slices(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=1, partitions=fakedra.MIG_PROFILES), names)
    operator_factory()
    profile = f'device.attributes["{dra.GPU_DRIVER}"].profile'
    create(
        admin_api,
        namespace,
        dra.claim_template(namespace, "mig-1g", dra.request("mig", selectors=[f'{profile} == "1g"'])),
    )
    create(
        admin_api,
        namespace,
        dra.claim_template(namespace, "whole", dra.request("gpu", selectors=[f'{profile} == "full"'])),
    )
    create_pod_group(admin_api, namespace, pod_group_manifest("serve", 3))
    create_pods(admin_api, namespace, gang("serve", 3, {"mig": "template:mig-1g"}))
    serve = claimed(admin_api, namespace, "serve", 3)
    assert len({d for devices in serve.values() for d in devices}) == 3
    assert all(d[3].startswith("gpu-0-1g-") for devices in serve.values() for d in devices)
    # The whole GPU shares its counters with the slices: it cannot be handed out now.
    create_pod_group(admin_api, namespace, pod_group_manifest("full", 1))
    create_pods(admin_api, namespace, gang("full", 1, {"gpu": "template:whole"}))
    pg = wait_until(
        lambda: (
            (g := get_pod_group(admin_api, namespace, "full")).get("status", {}).get("phase")
            == "Unschedulable"
            and g
        ),
        timeout=30,
        what="the whole-GPU gang Unschedulable",
    )
    assert bound_nodes(admin_api, namespace, "full") == {}
    assert "device" in condition(pg)["message"], condition(pg)
    # Seven 1g slices use the GPU up: four more fit, an eighth does not.
    create_pod_group(admin_api, namespace, pod_group_manifest("more", 4))
    create_pods(admin_api, namespace, gang("more", 4, {"mig": "template:mig-1g"}))
    claimed(admin_api, namespace, "more", 4)
    check_claims(admin_api)


def test_a_tainted_device_is_skipped_unless_the_claim_tolerates_it(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=prefix()))
    taint = fakedra.DeviceTaint(key="example.com/ecc", effect="NoSchedule")
    fake_dra(fakedra.NodeDevices(gpus=2, taints={"gpu-0": [taint]}), names)
    operator_factory()
    create(admin_api, namespace, dra.claim_template(namespace, "plain", dra.request("gpu")))
    tolerant = dra.request(
        "gpu", tolerations=[{"key": "example.com/ecc", "operator": "Exists", "effect": "NoSchedule"}]
    )
    create(admin_api, namespace, dra.claim_template(namespace, "tolerant", tolerant))
    create_pod_group(admin_api, namespace, pod_group_manifest("a", 1))
    create_pods(admin_api, namespace, gang("a", 1, {"gpu": "template:plain"}))
    [[(_, _, _, device)]] = claimed(admin_api, namespace, "a", 1).values()
    assert device == "gpu-1"
    create_pod_group(admin_api, namespace, pod_group_manifest("b", 1))
    create_pods(admin_api, namespace, gang("b", 1, {"gpu": "template:plain"}))
    pg = wait_until(
        lambda: (
            (g := get_pod_group(admin_api, namespace, "b")).get("status", {}).get("phase") == "Unschedulable"
            and g
        ),
        timeout=30,
        what="an untolerating gang Unschedulable",
    )
    assert "tainted example.com/ecc" in condition(pg)["message"], condition(pg)
    create_pod_group(admin_api, namespace, pod_group_manifest("c", 1))
    create_pods(admin_api, namespace, gang("c", 1, {"gpu": "template:tolerant"}))
    [[(_, _, _, device)]] = claimed(admin_api, namespace, "c", 1).values()
    assert device == "gpu-0"
    check_claims(admin_api)


def test_gpu_and_nic_are_aligned_on_one_pcie_root(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=4, nics=2, pcie_roots=2), names)
    operator_factory()
    template = dra.claim_template(
        namespace,
        "gpu-nic",
        dra.request("gpu"),
        dra.request("nic", dra.NIC_DRIVER),
        constraints=[dra.match_attribute(dra.PCIE_ROOT)],
    )
    create(admin_api, namespace, template)
    create_pod_group(admin_api, namespace, pod_group_manifest("ddp", 4))
    create_pods(admin_api, namespace, gang("ddp", 4, {"dev": "template:gpu-nic"}))
    slices = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d["attributes"][dra.PCIE_ROOT]["string"]
        for s in fakedra.list_slices(admin_api)
        for d in s["spec"].get("devices") or []
        if dra.PCIE_ROOT in (d.get("attributes") or {})
    }
    nics = set()
    for pod, devices in claimed(admin_api, namespace, "ddp", 4).items():
        roots = {slices[(driver, pool, device)] for _, driver, pool, device in devices}
        assert len(devices) == 2, f"{pod}: {devices}"
        assert len(roots) == 1, f"{pod}: {devices}"
        nics.update((pool, device) for _, driver, pool, device in devices if driver == dra.NIC_DRIVER)
    assert len(nics) == 4
    check_claims(admin_api)


def test_binding_conditions_hold_the_bindings_until_true(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix()))
    binding = {"gpu-0": fakedra.BindingConditions()}
    fake_dra(fakedra.NodeDevices(gpus=1, binding=binding), names)
    operator_factory()
    create(admin_api, namespace, dra.claim_template(namespace, "one", dra.request("gpu")))
    create_pod_group(admin_api, namespace, pod_group_manifest("attach", 2))
    create_pods(admin_api, namespace, gang("attach", 2, {"gpu": "template:one"}))

    def reserved() -> list[Json]:
        claims = [c for c in list_claims(admin_api, namespace) if (c.get("status") or {}).get("reservedFor")]
        return claims if len(claims) == 2 else []

    claims = wait_until(reserved, timeout=30, what="both claims allocated and reserved")
    time.sleep(3)
    assert bound_nodes(admin_api, namespace, "attach") == {}, "bound before the binding conditions were true"
    pending = [
        e for e in events(admin_api, namespace, name="attach") if e["reason"] == "BindingConditionsPending"
    ]
    assert pending, "no BindingConditionsPending Event"
    for claim in claims:
        [(_, driver, pool, device)] = devices_of(claim)
        fakedra.set_device_condition(
            admin_api, namespace, claim["metadata"]["name"], driver, pool, device, fakedra.ATTACHED, True
        )
    wait_until(all_bound(admin_api, namespace, "attach", 2), timeout=30, what="bound after the conditions")
    check_claims(admin_api)


def test_a_binding_failure_undoes_the_gang_and_it_lands_elsewhere(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    first, second = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=1, binding={"gpu-0": fakedra.BindingConditions()}), [first])
    operator_factory()
    create(admin_api, namespace, dra.claim_template(namespace, "one", dra.request("gpu")))
    create_pod_group(admin_api, namespace, pod_group_manifest("attach", 1))
    create_pods(admin_api, namespace, gang("attach", 1, {"gpu": "template:one"}))

    def allocated() -> Json | None:
        claims = [c for c in list_claims(admin_api, namespace) if (c.get("status") or {}).get("reservedFor")]
        return claims[0] if claims else None

    claim = wait_until(allocated, timeout=30, what="the claim allocated on the first node")
    [(_, driver, pool, device)] = devices_of(claim)
    assert pool == first
    fake_dra(fakedra.NodeDevices(gpus=1), [second])
    fakedra.set_device_condition(
        admin_api, namespace, claim["metadata"]["name"], driver, pool, device, fakedra.ATTACH_FAILED, True
    )
    [[(_, _, pool, _)]] = claimed(admin_api, namespace, "attach", 1).values()
    assert pool == second
    failed = [e for e in events(admin_api, namespace, name="attach") if e["reason"] == "BindingFailed"]
    assert failed
    assert "attach-failed" in failed[0]["message"], failed
    check_claims(admin_api)


def test_a_claim_deleted_mid_gang_aborts_and_nothing_stays_reserved(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=2, binding={"gpu-0": fakedra.BindingConditions()}), names)
    operator_factory()
    # Named claims, created by the test: one of them goes away while the gang waits.
    for i in range(2):
        create(admin_api, namespace, dra.claim(namespace, f"c-{i}", dra.request("gpu", count=2)))
    create_pod_group(admin_api, namespace, pod_group_manifest("g", 2))
    create_pods(admin_api, namespace, [claim_pod(f"g-{i}", "g", {"gpu": f"c-{i}"}) for i in range(2)])
    wait_until(
        lambda: all(
            (get_claim(admin_api, namespace, f"c-{i}").get("status") or {}).get("reservedFor")
            for i in range(2)
        ),
        timeout=30,
        what="both claims reserved (the gang waits for a binding condition)",
    )
    request_json(admin_api, "DELETE", f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims/c-1")

    def undone() -> bool:
        survivor = get_claim(admin_api, namespace, "c-0")
        status = survivor.get("status") or {}
        return not status.get("reservedFor") and not status.get("allocation")

    wait_until(undone, timeout=30, what="the other claim released and deallocated")
    assert bound_nodes(admin_api, namespace, "g") == {}
    # The deleted claim lost its allocation and our finalizer, so it is really gone.
    wait_until(
        lambda: all(c["metadata"]["name"] != "c-1" for c in list_claims(admin_api, namespace)),
        timeout=30,
        what="the deleted claim gone",
    )
    pg = wait_until(
        lambda: (
            (g := get_pod_group(admin_api, namespace, "g"))
            and condition(g).get("reason") == "WaitingForResourceClaims"
            and g
        ),
        timeout=30,
        what="WaitingForResourceClaims",
    )
    assert "c-1" in condition(pg)["message"]
    check_claims(admin_api)


def test_operator_killed_between_claim_writes_and_bindings(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=4), names)
    first = operator_factory(env={"GANGSCHED_FAULT_BIND_DELAY_SECONDS": "30"})
    create(admin_api, namespace, dra.claim_template(namespace, "one", dra.request("gpu")))
    create_pod_group(admin_api, namespace, pod_group_manifest("g", 4, timeout=5))
    create_pods(admin_api, namespace, gang("g", 4, {"gpu": "template:one"}))

    def all_reserved() -> bool:
        claims = list_claims(admin_api, namespace)
        return len(claims) == 4 and all((c.get("status") or {}).get("reservedFor") for c in claims)

    wait_until(all_reserved, timeout=30, what="the gang's claims written")
    first.kill()
    assert bound_nodes(admin_api, namespace, "g") == {}
    before = {c["metadata"]["name"]: devices_of(c) for c in list_claims(admin_api, namespace)}
    # Another gang wants the free GPUs meanwhile: it must not get the reserved ones.
    operator_factory()
    create_pod_group(admin_api, namespace, pod_group_manifest("other", 4))
    create_pods(admin_api, namespace, gang("other", 4, {"gpu": "template:one"}))
    claimed(admin_api, namespace, "g", 4)
    claimed(admin_api, namespace, "other", 4)
    after = {c["metadata"]["name"]: devices_of(c) for c in list_claims(admin_api, namespace)}
    assert all(after[name] == devices for name, devices in before.items())  # kept, never moved
    check_claims(admin_api)


FABRIC = "fabric.example.com"


def fabric(api: client.ApiClient, channels: int) -> str:
    """A network-attached driver: one slice of `channels` devices reachable from every node."""
    name = f"fabric-{uuid.uuid4().hex[:5]}"
    devices = [dra.device(f"channel-{i}", {"kind": "channel"}) for i in range(channels)]
    body = {
        "apiVersion": dra.API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": FABRIC,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "allNodes": True,
            "devices": devices,
        },
    }
    request_json(api, "POST", f"/apis/{dra.API_VERSION}/resourceslices", body=body)
    if not any(
        c["metadata"]["name"] == FABRIC for c in request_json(api, "GET", fakedra.CLASSES_PATH)["items"]
    ):
        request_json(api, "POST", fakedra.CLASSES_PATH, body=dra.gpu_class(FABRIC, FABRIC))
    return name


def test_a_gang_shared_claim_is_allocated_once_reserved_for_the_group_and_cleaned_up(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=4), names)
    slice_name = fabric(admin_api, 2)
    try:
        operator_factory()
        create(admin_api, namespace, dra.claim_template(namespace, "one", dra.request("gpu")))
        create(admin_api, namespace, dra.claim_template(namespace, "channel", dra.request("ch", FABRIC)))
        body = pod_group_manifest("ring", 6)
        body["spec"]["resourceClaims"] = [{"name": "net", "resourceClaimTemplateName": "channel"}]
        create_pod_group(admin_api, namespace, body)
        create_pods(admin_api, namespace, gang("ring", 6, {"gpu": "template:one", "net": "ring-net"}))
        wait_until(all_bound(admin_api, namespace, "ring", 6), timeout=60, what="the gang bound")
        group = get_pod_group(admin_api, namespace, "ring")
        net = get_claim(admin_api, namespace, "ring-net")
        assert net["metadata"]["ownerReferences"][0]["uid"] == group["metadata"]["uid"]
        # Reserved for the PodGroup (gangsched's write, before any Binding); the resourceclaim
        # controller adds bound members as kubelet needs them (it knows no PodGroup CRD).
        reserved = net["status"]["reservedFor"]
        assert reserved[0] == {
            "apiGroup": "scheduling.gangsched.io",
            "resource": "podgroups",
            "name": "ring",
            "uid": group["metadata"]["uid"],
        }
        assert {r["name"] for r in reserved[1:]} <= {f"ring-{i}" for i in range(6)}
        [(_, driver, _, _)] = devices_of(net)
        assert driver == FABRIC
        check_claims(admin_api)
        # The claims may not change, nor be more than four.
        changed = {"spec": {"resourceClaims": [{"name": "other", "resourceClaimName": "x"}]}}
        with pytest.raises(client.exceptions.ApiException) as refused:
            request_json(
                admin_api,
                "PATCH",
                f"/apis/scheduling.gangsched.io/v1alpha1/namespaces/{namespace}/podgroups/ring",
                body=changed,
                content_type="application/merge-patch+json",
            )
        assert refused.value.status == 422
        assert "resourceClaims is immutable" in str(refused.value.body)
        # The group finishes: the claim is released, deallocated and deleted.
        for i in range(6):
            node_agent.finish_pod(namespace=namespace, name=f"ring-{i}")
        wait_until(
            lambda: all(c["metadata"]["name"] != "ring-net" for c in list_claims(admin_api, namespace)),
            timeout=30,
            what="the group's claim deleted after the group finished",
        )
        check_claims(admin_api)
    finally:
        request_json(admin_api, "DELETE", f"/apis/{dra.API_VERSION}/resourceslices/{slice_name}")


def test_two_gangs_share_a_nic_within_its_bandwidth_and_a_third_waits(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    # One NIC of 100G shared by bandwidth (allowMultipleAllocations, DRAConsumableCapacity on
    # by default in v1.36); each member's claim takes 25G: two gangs of two fill it.
    names = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=0, nics=1, nic_bandwidth="100G"), names)
    operator_factory()
    share = dra.request("nic", dra.NIC_DRIVER, capacity={"bandwidth": "25G"})
    create(admin_api, namespace, dra.claim_template(namespace, "nic-share", share))
    for group in ("a", "b", "c"):
        create_pod_group(admin_api, namespace, pod_group_manifest(group, 2))
        create_pods(admin_api, namespace, gang(group, 2, {"nic": "template:nic-share"}))
        if group != "c":
            wait_until(all_bound(admin_api, namespace, group, 2), timeout=60, what=f"gang {group} bound")
    waiting = wait_until(
        lambda: (
            (g := get_pod_group(admin_api, namespace, "c")).get("status", {}).get("phase") == "Unschedulable"
            and g
        ),
        timeout=30,
        what="the third gang Unschedulable",
    )
    assert bound_nodes(admin_api, namespace, "c") == {}, condition(waiting)
    seen: set[str] = set()
    for group in ("a", "b"):
        for i in range(2):
            [claim] = pod_claims(admin_api, namespace, f"{group}-{i}")
            [result] = claim["status"]["allocation"]["devices"]["results"]
            assert (result["driver"], result["device"]) == (dra.NIC_DRIVER, "nic-0")
            assert parse_nano(result["consumedCapacity"]["bandwidth"]) == parse_nano("25G")
            seen.add(result["shareID"])
    assert len(seen) == 4
    check_claims(admin_api)
    # Gang a finishes: its shares are released and the third gang takes them.
    for i in range(2):
        node_agent.finish_pod(namespace=namespace, name=f"a-{i}")
    wait_until(all_bound(admin_api, namespace, "c", 2), timeout=60, what="the third gang bound")
    check_claims(admin_api)


def test_a_podgroup_claim_its_members_do_not_list_is_allocated_first_and_binds_them_to_its_rack(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    operator_factory: OperatorFactory,
) -> None:
    # The interconnect channel reaches one rack only; the members list no claim, so only the
    # PodGroup's spec.resourceClaims says the gang needs it.
    names = nodes(fake_nodes, blocks=1, racks=2, hosts=2)
    rack = client.CoreV1Api(admin_api).read_node(names[-1]).metadata.labels[RACK]
    name = f"fabric-{uuid.uuid4().hex[:5]}"
    body = dra.selector_slice(name, FABRIC, [dra.device("channel-0", {"kind": "channel"})], RACK, [rack])
    request_json(admin_api, "POST", f"/apis/{dra.API_VERSION}/resourceslices", body=body)
    if not any(
        c["metadata"]["name"] == FABRIC for c in request_json(admin_api, "GET", fakedra.CLASSES_PATH)["items"]
    ):
        request_json(admin_api, "POST", fakedra.CLASSES_PATH, body=dra.gpu_class(FABRIC, FABRIC))
    try:
        operator_factory()
        create(admin_api, namespace, dra.claim_template(namespace, "fabric", dra.request("link", FABRIC)))
        group_body = pod_group_manifest("ring", 2)
        group_body["spec"]["resourceClaims"] = [{"name": "fabric", "resourceClaimTemplateName": "fabric"}]
        create_pod_group(admin_api, namespace, group_body)
        create_pods(admin_api, namespace, [pod_manifest(f"ring-{i}", "ring") for i in range(2)])
        placed = wait_until(all_bound(admin_api, namespace, "ring", 2), timeout=60, what="the gang bound")
        labels = {n: client.CoreV1Api(admin_api).read_node(n).metadata.labels[RACK] for n in placed.values()}
        assert set(labels.values()) == {rack}, labels
        group = get_pod_group(admin_api, namespace, "ring")
        claim = get_claim(admin_api, namespace, "ring-fabric")
        assert devices_of(claim) == [("link", FABRIC, name, "channel-0")]
        assert claim["status"]["reservedFor"][0] == {
            "apiGroup": "scheduling.gangsched.io",
            "resource": "podgroups",
            "name": "ring",
            "uid": group["metadata"]["uid"],
        }
        assert FINALIZER in claim["metadata"]["finalizers"]
        check_claims(admin_api)
    finally:
        request_json(admin_api, "DELETE", f"/apis/{dra.API_VERSION}/resourceslices/{name}")


def test_an_extended_resource_backed_by_a_device_class_gets_a_claim(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    operator_factory: OperatorFactory,
) -> None:
    """KEP-5004: no node offers example.com/gpu as allocatable, a DeviceClass maps it."""
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=2), names)
    resource = f"example.com/gpu-{uuid.uuid4().hex[:4]}"
    mapped = dra.device_class(
        f"er-{uuid.uuid4().hex[:5]}.example.com", f'device.driver == "{dra.GPU_DRIVER}"'
    )
    mapped["spec"]["extendedResourceName"] = resource
    request_json(admin_api, "POST", fakedra.CLASSES_PATH, body=mapped)
    try:
        operator_factory()
        create_pod_group(admin_api, namespace, pod_group_manifest("er", 2))
        create_pods(
            admin_api,
            namespace,
            [pod_manifest(f"er-{i}", "er", namespace=namespace, limits={resource: "2"}) for i in range(2)],
        )
        placed = wait_until(all_bound(admin_api, namespace, "er", 2), timeout=60, what="both pods bound")
        assert set(placed.values()) == set(names)  # two GPUs per node: one pod each
        for pod_name, node in placed.items():
            pod = request_json(admin_api, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
            status = pod["status"]["extendedResourceClaimStatus"]
            assert status["requestMappings"] == [
                {"containerName": "main", "resourceName": resource, "requestName": "container-0-request-0"}
            ]
            claim = get_claim(admin_api, namespace, status["resourceClaimName"])
            assert claim["metadata"]["name"].startswith(f"{pod_name}-extended-resources-")
            assert (
                claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
            )
            assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
            devices = devices_of(claim)
            assert [d[0] for d in devices] == ["container-0-request-0"] * 2
            assert {d[2] for d in devices} == {node}
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        check_claims(admin_api)
    finally:
        request_json(admin_api, "DELETE", f"{fakedra.CLASSES_PATH}/{mapped['metadata']['name']}")


EMPTY_STARTS = 6


def primed_without_nodes(op: Operator) -> Callable[[], bool]:
    return lambda: "cache primed: 0 nodes," in op.log_text()


def test_started_on_an_empty_cluster_it_binds_what_arrives_after(
    admin_api: client.ApiClient,
    core_v1: client.CoreV1Api,
    operator_factory: OperatorFactory,
) -> None:
    """Issue 23.6: started before any node, slice, pod or PodGroup exists (the DRA kinds
    served), then a gang arrives, then nodes and their slices, then more gangs: every gang
    binds, start after start. The arrivals are spread over the operator's first seconds
    (its first LISTs empty, its watches just opened), at times drawn per start."""
    rng = random.Random(236)
    for start in range(EMPTY_STARTS):
        fakenodes.delete_nodes(api=admin_api)  # empty: no node and no slice of earlier tests
        fakedra.unpublish(admin_api)
        namespace = f"empty-{start}-{uuid.uuid4().hex[:5]}"
        core_v1.create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        op = operator_factory(wait=False)
        try:
            wait_until(primed_without_nodes(op), timeout=60, what="the operator primed, with no node")
            create(admin_api, namespace, dra.claim_template(namespace, "one-gpu", dra.request("gpu")))
            time.sleep(rng.uniform(0.0, 1.5))
            groups = ["g0"]  # the first one before any node
            create_pod_group(admin_api, namespace, pod_group_manifest("g0", 2))
            create_pods(admin_api, namespace, gang("g0", 2, {"gpu": "template:one-gpu"}))
            time.sleep(rng.uniform(0.0, 1.5))
            names = fakenodes.create_nodes(
                api=admin_api, spec=fakenodes.NodeSet(count=3, name_prefix=f"{namespace}-")
            )
            time.sleep(rng.uniform(0.0, 1.0))
            fakedra.ensure_device_classes(admin_api)
            fakedra.publish(admin_api, fakedra.NodeDevices(gpus=4), names)
            for group in ("g1", "g2", "g3"):
                time.sleep(rng.uniform(0.0, 1.0))
                create_pod_group(admin_api, namespace, pod_group_manifest(group, 2))
                create_pods(admin_api, namespace, gang(group, 2, {"gpu": "template:one-gpu"}))
                groups.append(group)
            for group in groups:
                wait_until(
                    all_bound(admin_api, namespace, group, 2),
                    timeout=30,
                    what=f"start {start}: {group} bound\n{op.tail(20)}",
                )
            check_claims(admin_api)
            assert op.alive()
        finally:
            op.stop()
            devcluster.delete_namespace(admin_api, name=namespace)
    fakenodes.delete_nodes(api=admin_api)
    fakedra.unpublish(admin_api)
