"""The fake DRA driver's manifests (gangsched_testing.fakedra), without an apiserver.

That the real apiserver accepts them is tests/integration/test_harness.py's job; here: the
shape (pools, chunking to the API limits, counters, taints, binding conditions) and that
the engine reads them as a driver's slices.
"""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.engine import schedule_cycle
from gangsched_testing import dra, fakedra
from gangsched_testing.builders import node, pod_group

Manifest = dict[str, Any]


def _devices(slices: list[Manifest]) -> dict[str, Manifest]:
    return {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}


def _attr(device: Manifest, name: str) -> Any:
    [value] = device["attributes"][name].values()
    return value


def test_gpus_and_nics_are_one_pool_per_driver_named_after_the_node() -> None:
    slices = fakedra.node_slices(fakedra.NodeDevices(gpus=8, pcie_roots=2, nics=2), "n1")
    assert [(s["metadata"]["name"], s["spec"]["driver"]) for s in slices] == [
        ("n1-gpu.example.com", "gpu.example.com"),
        ("n1-nic.example.com", "nic.example.com"),
    ]
    for s in slices:
        assert s["apiVersion"] == "resource.k8s.io/v1"
        assert s["spec"]["nodeName"] == "n1"
        assert s["spec"]["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}
        assert s["metadata"]["labels"] == {fakedra.FAKE_DRA_LABEL: "true"}
        assert "ownerReferences" not in s["metadata"]
    devices = _devices(slices)
    assert [_attr(devices[f"gpu-{i}"], dra.PCIE_ROOT) for i in range(8)] == ["pci0"] * 4 + ["pci1"] * 4
    assert [_attr(devices[f"nic-{i}"], dra.PCIE_ROOT) for i in range(2)] == ["pci0", "pci1"]
    assert devices["gpu-3"]["capacity"] == {"memory": {"value": "80Gi"}}
    assert (_attr(devices["gpu-3"], "model"), _attr(devices["gpu-3"], "index")) == ("H100", 3)
    assert "consumesCounters" not in devices["gpu-3"]


def test_nics_shared_by_bandwidth_are_consumable_capacity_devices() -> None:
    policy = {"default": "10G", "validRange": {"min": "5G", "step": "5G"}}
    spec = fakedra.NodeDevices(gpus=0, nics=2, nic_bandwidth="200G", nic_bandwidth_policy=policy)
    devices = _devices(fakedra.node_slices(spec, "n1"))
    assert sorted(devices) == ["nic-0", "nic-1"]
    for nic in devices.values():
        assert nic["allowMultipleAllocations"] is True
        assert nic["capacity"] == {"bandwidth": {"value": "200G", "requestPolicy": policy}}
    plain = _devices(fakedra.node_slices(fakedra.NodeDevices(gpus=0, nics=1), "n1"))
    assert "allowMultipleAllocations" not in plain["nic-0"]
    assert "capacity" not in plain["nic-0"]


def test_node_owns_its_slices_when_its_uid_is_known() -> None:
    [s] = fakedra.node_slices(fakedra.NodeDevices(gpus=1), "n1", node_uid="u-1", generation=4)
    assert s["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1"}
    ]
    assert s["spec"]["pool"]["generation"] == 4


def test_partitions_are_a_counter_slice_and_devices_consuming_from_it() -> None:
    spec = fakedra.NodeDevices(gpus=2, gpu_memory="80Gi", partitions=fakedra.MIG_PROFILES)
    slices = fakedra.node_slices(spec, "n1")
    assert [s["metadata"]["name"] for s in slices] == ["n1-gpu.example.com", "n1-gpu.example.com-counters"]
    devices_slice, counter_slice = slices
    assert "sharedCounters" not in devices_slice["spec"]  # v1: counters and devices never share a slice
    assert "devices" not in counter_slice["spec"]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
    assert counter_slice["spec"]["sharedCounters"] == [
        {"name": f"gpu-{i}-counters", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}}
        for i in range(2)
    ]
    devices = _devices(slices)
    assert list(devices) == spec.device_names()
    assert len(devices) == 2 * (1 + 7 + 2)
    assert devices["gpu-1"]["consumesCounters"] == [
        {"counterSet": "gpu-1-counters", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}}
    ]
    mig = devices["gpu-1-3g-1"]
    assert mig["consumesCounters"] == [
        {"counterSet": "gpu-1-counters", "counters": {"memory": {"value": "40Gi"}, "slices": {"value": "3"}}}
    ]
    assert (_attr(mig, "profile"), _attr(mig, "index"), _attr(mig, dra.PCIE_ROOT)) == ("3g", 1, "pci1")
    assert mig["capacity"] == {"memory": {"value": "40Gi"}}
    assert _attr(devices["gpu-0"], "profile") == "full"


def test_large_pools_are_chunked_to_the_api_limits() -> None:
    spec = fakedra.NodeDevices(gpus=16, partitions=fakedra.MIG_PROFILES)  # 160 devices, 16 counter sets
    slices = fakedra.node_slices(spec, "n1")
    names = [s["metadata"]["name"] for s in slices]
    assert names == [f"n1-gpu.example.com-{k}" for k in range(3)] + [
        f"n1-gpu.example.com-counters-{k}" for k in range(2)
    ]
    assert [len(s["spec"].get("devices") or []) for s in slices] == [64, 64, 32, 0, 0]
    assert [len(s["spec"].get("sharedCounters") or []) for s in slices] == [0, 0, 0, 8, 8]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {5}
    # Without counters or taints a slice holds up to 128 devices.
    assert len(fakedra.node_slices(fakedra.NodeDevices(gpus=128), "n1")) == 1
    assert len(fakedra.node_slices(fakedra.NodeDevices(gpus=129), "n1")) == 2


def test_taints_and_binding_conditions_go_on_the_named_devices() -> None:
    spec = fakedra.NodeDevices(
        gpus=2,
        nics=1,
        taints={
            "gpu-0": [fakedra.DeviceTaint(key="example.com/unhealthy", value="true", effect="NoExecute")]
        },
        binding={
            "nic-0": fakedra.BindingConditions(),
            "gpu-1": fakedra.BindingConditions(binds_to_node=False),
        },
    )
    devices = _devices(fakedra.node_slices(spec, "n1"))
    assert devices["gpu-0"]["taints"] == [
        {"key": "example.com/unhealthy", "value": "true", "effect": "NoExecute"}
    ]
    assert devices["nic-0"]["bindingConditions"] == [fakedra.ATTACHED]
    assert devices["nic-0"]["bindingFailureConditions"] == [fakedra.ATTACH_FAILED]
    assert devices["nic-0"]["bindsToNode"] is True
    assert "bindsToNode" not in devices["gpu-1"]
    assert "taints" not in devices["gpu-1"]


def test_spec_hash_ignores_the_generation_only() -> None:
    spec = fakedra.NodeDevices(gpus=2)
    [a] = fakedra.node_slices(spec, "n1", generation=1)
    [b] = fakedra.node_slices(spec, "n1", generation=7)
    [c] = fakedra.node_slices(fakedra.NodeDevices(gpus=3), "n1")
    a_hash, b_hash, c_hash = (s["metadata"]["annotations"][fakedra.SPEC_HASH_ANNOTATION] for s in (a, b, c))
    assert a_hash == b_hash != c_hash


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gpus": -1}, "must be >= 0"),
        ({"pcie_roots": 0}, "pcie_roots"),
        ({"gpus": 0, "partitions": fakedra.MIG_PROFILES}, "partitions need gpus"),
        ({"partitions": (fakedra.Partition(profile="4g", slices=4, memory="40Gi", count=2),)}, "more than 7"),
        ({"taints": {"gpu-9": [fakedra.DeviceTaint(key="k")]}}, "unknown devices"),
        ({"binding": {"nic-0": fakedra.BindingConditions()}}, "unknown devices"),
    ],
)
def test_bad_descriptions_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fakedra.NodeDevices(**options)


def test_binding_conditions_need_both_lists() -> None:
    with pytest.raises(ValueError, match="both"):
        fakedra.BindingConditions(failure_conditions=())


def test_device_classes_select_their_driver() -> None:
    assert fakedra.device_classes() == [dra.gpu_class(), dra.gpu_class(dra.NIC_DRIVER, dra.NIC_DRIVER)]
    [only_gpu] = fakedra.device_classes(fakedra.NodeDevices(gpus=1))
    assert only_gpu["spec"]["selectors"] == [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]


# --------------------------------------------------------------------------- read by the engine


def _schedule(spec: fakedra.NodeDevices, template: Manifest, pods: int) -> tuple[bool, list[str]]:
    """Schedule a gang of `pods`, each with a claim from `template`, on one node n1 with `spec`."""
    objects = [*fakedra.device_classes(), *fakedra.node_slices(spec, "n1"), template]
    members = dra.claim_pods("w", pods, "g", {"dev": "template:t"})
    result = schedule_cycle(
        nodes=[node("n1", gpu=0)],
        pods=members,
        pod_groups=[pod_group("g", pods)],
        dra=dra.dra_objects(objects, members),
    )
    [decision] = result.decisions
    used = sorted(d.device for found in decision.devices.values() for d in found)
    return decision.scheduled, used


def test_engine_shares_a_partitioned_gpu_by_its_counters() -> None:
    spec = fakedra.NodeDevices(gpus=1, partitions=fakedra.MIG_PROFILES)
    one_g = dra.claim_template(
        "ml", "t", dra.request("dev", selectors=['device.attributes["gpu.example.com"].profile == "1g"'])
    )
    assert _schedule(spec, one_g, 7) == (True, [f"gpu-0-1g-{k}" for k in range(7)])
    assert _schedule(spec, one_g, 8)[0] is False
    three_g = dra.claim_template(
        "ml", "t", dra.request("dev", selectors=['device.attributes["gpu.example.com"].profile == "3g"'])
    )
    assert _schedule(spec, three_g, 2)[0] is True
    any_gpu = dra.claim_template("ml", "t", dra.request("dev"))
    # Two pods, one GPU: the whole GPU and a partition cannot both be given out, two partitions can.
    scheduled, used = _schedule(spec, any_gpu, 2)
    assert scheduled
    assert "gpu-0" not in used


def test_engine_avoids_tainted_devices_and_pairs_gpu_and_nic_by_pcie_root() -> None:
    spec = fakedra.NodeDevices(
        gpus=2,
        nics=2,
        taints={"gpu-0": [fakedra.DeviceTaint(key="example.com/unhealthy", effect="NoSchedule")]},
    )
    template = dra.claim_template(
        "ml",
        "t",
        dra.request("gpu"),
        dra.request("nic", dra.NIC_DRIVER),
        constraints=[dra.match_attribute(dra.PCIE_ROOT)],
    )
    objects = [*fakedra.device_classes(), *fakedra.node_slices(spec, "n1"), template]
    members = dra.claim_pods("w", 1, "g", {"dev": "template:t"})
    result = schedule_cycle(
        nodes=[node("n1", gpu=0)],
        pods=members,
        pod_groups=[pod_group("g", 1)],
        dra=dra.dra_objects(objects, members),
    )
    [decision] = result.decisions
    assert decision.scheduled, decision.message
    assert sorted(d.device for found in decision.devices.values() for d in found) == ["gpu-1", "nic-1"]
