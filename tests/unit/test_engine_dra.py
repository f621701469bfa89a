"""Devices (DRA) in the engine: one test per rule. Cluster objects come from gangsched_testing.dra."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gangsched.engine import CycleResult, GroupDecision, group, schedule_cycle
from gangsched.engine.dra.claims import WaitingForClaims, resolve
from gangsched.engine.types import PodDevice
from gangsched.model import Node, Pod, PodGroup, Reason, parse_node, parse_pod
from gangsched_testing import dra
from gangsched_testing.builders import (
    RACK,
    native_pod,
    native_pod_group,
    node,
    node_manifest,
    pod,
    pod_group,
    pod_manifest,
    topology_nodes,
)

H100 = 'device.attributes["gpu.example.com"].model == "H100"'
A100 = 'device.attributes["gpu.example.com"].model == "A100"'
ECC = {"key": "gpu.example.com/ecc", "effect": "NoSchedule"}


def run(
    nodes: Sequence[Node], pods: Sequence[Pod], groups: Sequence[PodGroup], objects: Sequence[dict[str, Any]]
) -> CycleResult:
    return schedule_cycle(nodes=nodes, pods=pods, pod_groups=groups, dra=dra.dra_objects(objects, pods))


def decision(result: CycleResult, name: str) -> GroupDecision:
    return next(d for d in result.decisions if d.name == name)


def devices(result: CycleResult, pod_name: str) -> list[PodDevice]:
    for d in result.decisions:
        for key, found in d.devices.items():
            if key[1] == pod_name:
                return found
    return []


def device_ids(result: CycleResult) -> list[tuple[str, str, str]]:
    return [
        (d.driver, d.pool, d.device) for dec in result.decisions for ds in dec.devices.values() for d in ds
    ]


def bare(name: str, **options: Any) -> Node:
    """A node with cpu and memory but no extended GPUs: its devices come from slices."""
    return node(name, gpu=0, **options)


ONE_GPU = dra.claim_template("ml", "one-gpu", dra.request("gpu"))


# --------------------------------------------------------------------------- basics


def test_one_gpu_claim_per_pod_from_a_template() -> None:
    nodes = [bare("a"), bare("b")]
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(2)), dra.node_slice("b", dra.gpus(2)), ONE_GPU]
    members = dra.claim_pods("w", 4, "g", {"gpu": "template:one-gpu"})
    result = run(nodes, members, [pod_group("g", 4)], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert sorted(d.assignments.values()) == ["a", "a", "b", "b"]
    ids = device_ids(result)
    assert len(ids) == len(set(ids)) == 4
    for member in members:
        [dev] = devices(result, member.name)
        assert (dev.claim, dev.request, dev.pool) == ("gpu", "gpu", d.assignments[member.key])
    # One allocation per generated claim, bound to the node it is on.
    assert sorted(d.allocations) == [("ml", f"w-{i}-gpu") for i in range(4)]
    for (_, claim_name), allocation in d.allocations.items():
        node_name = d.assignments[("ml", claim_name.removesuffix("-gpu"))]
        assert allocation.node_selector == {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        }


def test_devices_are_not_handed_out_twice_in_one_cycle() -> None:
    nodes = [bare("a")]
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(3)), ONE_GPU]
    first = dra.claim_pods("f", 2, "first", {"gpu": "template:one-gpu"})
    second = dra.claim_pods("s", 2, "second", {"gpu": "template:one-gpu"})
    groups = [pod_group("first", 2, created="2025-01-01T00:00:00Z"), pod_group("second", 2)]
    result = run(nodes, first + second, groups, objects)
    assert decision(result, "first").scheduled
    late = decision(result, "second")
    assert not late.scheduled
    assert (
        late.message
        == "1/1 nodes eligible for 2 pods; cluster fits 1/2 (limited by devices of class gpu.example.com)"
    )
    assert late.assignments == {}
    assert late.allocations == {}


def test_allocated_claims_hold_their_devices() -> None:
    nodes = [bare("a")]
    held = dra.claim("other", "held", allocated=[("gpu", dra.GPU_DRIVER, "a", "gpu-0")], node="a")
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(2)), ONE_GPU, held]
    result = run(
        nodes, dra.claim_pods("w", 1, "g", {"gpu": "template:one-gpu"}), [pod_group("g", 1)], objects
    )
    assert [d.device for d in devices(result, "w-0")] == ["gpu-1"]


SHARED_NIC = dra.device("nic-0", {"model": "cx7"}, capacity={"bandwidth": "100G"}, shared=True)
NIC_SHARE = dra.claim_template("ml", "nic-share", dra.request("nic", "nic", capacity={"bandwidth": "40G"}))


def test_gangs_share_a_device_within_its_capacity_and_a_third_waits() -> None:
    # One NIC of 100G shared by claims of 40G each: two gangs get a share of it, the third would
    # need 120G and waits.
    nodes = [bare("a")]
    objects = [
        dra.device_class("nic", f'device.driver == "{dra.NIC_DRIVER}"'),
        dra.node_slice("a", [SHARED_NIC], driver=dra.NIC_DRIVER),
        NIC_SHARE,
    ]
    gangs = [f"g{i}" for i in range(3)]
    members = [p for g in gangs for p in dra.claim_pods(f"{g}-w", 1, g, {"nic": "template:nic-share"})]
    groups = [pod_group(g, 1, created=f"2025-01-01T00:00:0{i}Z") for i, g in enumerate(gangs)]
    result = run(nodes, members, groups, objects)
    shares = []
    for g in gangs[:2]:
        d = decision(result, g)
        assert d.scheduled, d.message
        [allocation] = d.allocations.values()
        [written] = allocation.to_json()["devices"]["results"]
        assert (written["device"], written["consumedCapacity"]) == ("nic-0", {"bandwidth": "40G"})
        shares.append(written["shareID"])
    assert len(set(shares)) == 2
    assert all(shares)
    late = decision(result, "g2")
    assert not late.scheduled
    assert late.allocations == {}
    assert late.message == (
        "0/1 nodes eligible for 1 pod: 1 capacity of shared devices used up for request nic "
        "(class nic); needs 1 pod placed together"
    )


def test_one_gang_takes_several_shares_of_a_device() -> None:
    # Two members of one gang on one shared device: counting must weigh the device by its
    # shares (2 of 40G in 100G), or the gang would never fit a node with one device.
    nodes = [bare("a")]
    objects = [
        dra.device_class("nic", f'device.driver == "{dra.NIC_DRIVER}"'),
        dra.node_slice("a", [SHARED_NIC], driver=dra.NIC_DRIVER),
        NIC_SHARE,
    ]
    result = run(
        nodes, dra.claim_pods("w", 2, "g", {"nic": "template:nic-share"}), [pod_group("g", 2)], objects
    )
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert sorted(r.device for a in d.allocations.values() for r in a.devices) == ["nic-0", "nic-0"]
    too_many = run(
        nodes, dra.claim_pods("w", 3, "g", {"nic": "template:nic-share"}), [pod_group("g", 3)], objects
    )
    assert not decision(too_many, "g").scheduled


def test_an_allocated_share_leaves_the_rest_of_the_capacity() -> None:
    nodes = [bare("a")]
    held = dra.claim("other", "held", dra.request("nic", "nic", capacity={"bandwidth": "70G"}))
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "nic",
                        "driver": dra.NIC_DRIVER,
                        "pool": "a",
                        "device": "nic-0",
                        "shareID": "00000000-0000-0000-0000-000000000001",
                        "consumedCapacity": {"bandwidth": "70G"},
                    }
                ]
            }
        }
    }
    objects = [
        dra.device_class("nic", f'device.driver == "{dra.NIC_DRIVER}"'),
        dra.node_slice("a", [SHARED_NIC], driver=dra.NIC_DRIVER),
        NIC_SHARE,
        held,
    ]
    result = run(
        nodes, dra.claim_pods("w", 1, "g", {"nic": "template:nic-share"}), [pod_group("g", 1)], objects
    )
    assert not decision(result, "g").scheduled  # 70G + 40G > 100G
    small = dra.claim_template("ml", "nic-share", dra.request("nic", "nic", capacity={"bandwidth": "30G"}))
    result = run(
        nodes,
        dra.claim_pods("w", 1, "g", {"nic": "template:nic-share"}),
        [pod_group("g", 1)],
        [*objects[:2], small, held],
    )
    assert decision(result, "g").scheduled, decision(result, "g").message


def test_pods_without_claims_are_placed_as_before() -> None:
    nodes = [node("a", gpu=8)]
    plain = [pod("p", "g", gpu=4)]
    with_dra = run(nodes, plain, [pod_group("g", 1)], [dra.gpu_class(), dra.node_slice("a", dra.gpus(2))])
    without = schedule_cycle(nodes=nodes, pods=plain, pod_groups=[pod_group("g", 1)])
    assert decision(with_dra, "g").assignments == decision(without, "g").assignments == {("ml", "p"): "a"}
    assert decision(with_dra, "g").message == decision(without, "g").message


# --------------------------------------------------------------------------- topology and devices together


def test_a_rack_whose_devices_cannot_serve_the_gang_is_not_chosen() -> None:
    # Rack r0 has plenty of cpu but 2 free GPUs; rack r1 holds the 4 the gang needs.
    nodes = topology_nodes(1, 1, 2, 2, gpu=0)
    r0 = [n.name for n in nodes if n.labels[RACK].endswith("r0")]
    r1 = [n.name for n in nodes if n.labels[RACK].endswith("r1")]
    objects = [dra.gpu_class(), ONE_GPU]
    objects += [dra.node_slice(name, dra.gpus(1)) for name in r0]
    objects += [dra.node_slice(name, dra.gpus(2)) for name in r1]
    group = pod_group("g", 4, topology=[RACK])
    result = run(nodes, dra.claim_pods("w", 4, "g", {"gpu": "template:one-gpu"}), [group], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert set(d.assignments.values()) == set(r1)


def test_explanation_names_device_reasons_and_the_best_domain() -> None:
    nodes = [*topology_nodes(1, 1, 2, 2, gpu=0), bare("fat", cpu="1")]
    names = [n.name for n in nodes[:4]]
    objects = [dra.gpu_class(), ONE_GPU, dra.node_slice("fat", dra.gpus(8))]
    objects += [dra.node_slice(names[0], dra.gpus(2)), dra.node_slice(names[1], dra.gpus(2))]
    objects += [dra.node_slice(names[2], [dra.device("gpu-0", taints=[ECC])])]
    objects += [dra.node_slice(names[3], [])]
    group = pod_group("g", 8, topology=[RACK])
    result = run(nodes, dra.claim_pods("w", 8, "g", {"gpu": "template:one-gpu"}, cpu="2"), [group], objects)
    message = decision(result, "g").message
    # Racks hold 4 device slots at most (the fat node has no rack label): it never fits.
    never = (
        "can never fit: needs 8 pods placed together, but the largest rack, z0-b0-r0, holds at most 4 "
        "of them even when empty (limited by devices of class gpu.example.com); "
    )
    assert message.startswith(never), message
    message = message.removeprefix(never)
    assert message.startswith("2/5 nodes eligible for 8 pods: "), message
    assert "1 no free device for request gpu (class gpu.example.com)" in message
    assert "1 devices tainted gpu.example.com/ecc=NoSchedule" in message
    assert "1 missing label" in message or "Insufficient cpu" in message
    assert "fits 4/8 (limited by devices of class gpu.example.com)" in message


# --------------------------------------------------------------------------- firstAvailable


def fallback_objects(h100_free: int) -> list[dict[str, Any]]:
    h100 = [dra.device(f"h-{i}", {"model": "H100"}) for i in range(4)]
    a100 = [dra.device(f"a-{i}", {"model": "A100"}) for i in range(4)]
    held = [("gpu", dra.GPU_DRIVER, "a", f"h-{i}") for i in range(4 - h100_free)]
    template = dra.claim_template(
        "ml",
        "h100-or-a100",
        dra.first_available(
            "gpu", dra.request("h100", selectors=[H100]), dra.request("a100", selectors=[A100])
        ),
    )
    out = [dra.gpu_class(), dra.node_slice("a", h100), dra.node_slice("b", a100), template]
    if held:
        out.append(dra.claim("other", "held", allocated=held, node="a"))
    return out


def test_first_available_prefers_the_first_alternative_for_the_whole_gang() -> None:
    members = dra.claim_pods("w", 3, "g", {"gpu": "template:h100-or-a100"})
    result = run([bare("a"), bare("b")], members, [pod_group("g", 3)], fallback_objects(h100_free=4))
    d = decision(result, "g")
    assert d.scheduled
    assert set(d.assignments.values()) == {"a"}
    assert {x.request for m in members for x in devices(result, m.name)} == {"gpu/h100"}
    assert d.message.endswith("; devices: gpu/h100")


def test_first_available_falls_back_as_a_whole_gang() -> None:
    # 2 H100 free, 3 pods: never 2 on H100 and 1 on A100.
    members = dra.claim_pods("w", 3, "g", {"gpu": "template:h100-or-a100"})
    result = run([bare("a"), bare("b")], members, [pod_group("g", 3)], fallback_objects(h100_free=2))
    d = decision(result, "g")
    assert d.scheduled
    assert set(d.assignments.values()) == {"b"}
    assert {x.request for m in members for x in devices(result, m.name)} == {"gpu/a100"}
    assert d.message.endswith("; devices: gpu/a100")


def test_no_alternative_fits_says_so_for_each() -> None:
    members = dra.claim_pods("w", 6, "g", {"gpu": "template:h100-or-a100"})
    result = run([bare("a"), bare("b")], members, [pod_group("g", 6)], fallback_objects(h100_free=2))
    d = decision(result, "g")
    assert not d.scheduled
    assert d.message.startswith("with gpu/h100: ")
    assert "; with gpu/a100: " in d.message


# --------------------------------------------------------------------------- constraints, counters, taints


def test_match_attribute_aligns_gpu_and_nic_on_one_pcie_root() -> None:
    # Node a: free GPUs on pci0, the free NIC on pci1; node b: everything free.
    objects = [
        dra.gpu_class(),
        dra.gpu_class(dra.NIC_DRIVER, dra.NIC_DRIVER),
        dra.node_slice("a", dra.gpus(4, roots=2)),
        dra.node_slice("a", dra.nics(2), driver=dra.NIC_DRIVER),
        dra.node_slice("b", dra.gpus(4, roots=2)),
        dra.node_slice("b", dra.nics(2), driver=dra.NIC_DRIVER),
        dra.claim(
            "other",
            "held",
            allocated=[
                ("gpu", dra.GPU_DRIVER, "a", "gpu-2"),
                ("gpu", dra.GPU_DRIVER, "a", "gpu-3"),
                ("nic", dra.NIC_DRIVER, "a", "nic-0"),
            ],
            node="a",
        ),
        dra.claim_template(
            "ml",
            "gpu-nic",
            dra.request("gpu"),
            dra.request("nic", dra.NIC_DRIVER),
            constraints=[dra.match_attribute()],
        ),
    ]
    members = dra.claim_pods("w", 2, "g", {"dev": "template:gpu-nic"})
    result = run([bare("a"), bare("b")], members, [pod_group("g", 2)], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert set(d.assignments.values()) == {"b"}
    for member in members:
        got = {x.driver: x.device for x in devices(result, member.name)}
        gpu_root = int(got[dra.GPU_DRIVER].split("-")[1]) // 2
        assert got[dra.NIC_DRIVER] == f"nic-{gpu_root}"


def test_partitionable_devices_never_hand_out_a_gpu_and_its_slices() -> None:
    counters = {"gpu-0": {"slices": "4"}}
    whole = dra.device("gpu-0", {"kind": "whole"}, consumes={"gpu-0": {"slices": "4"}})
    parts = [dra.device(f"mig-{i}", {"kind": "mig"}, consumes={"gpu-0": {"slices": "1"}}) for i in range(4)]
    objects = [
        dra.gpu_class(),
        dra.node_slice("a", counters=counters, slice_count=2),
        dra.node_slice("a", [whole, *parts], slice_count=2),
        dra.claim_template(
            "ml", "mig", dra.request("mig", selectors=['device.attributes["gpu.example.com"].kind == "mig"'])
        ),
        dra.claim_template(
            "ml",
            "whole",
            dra.request("gpu", selectors=['device.attributes["gpu.example.com"].kind == "whole"']),
        ),
    ]
    migs = dra.claim_pods("m", 1, "slices", {"gpu": "template:mig"})
    full = dra.claim_pods("f", 1, "full", {"gpu": "template:whole"})
    groups = [pod_group("slices", 1, created="2025-01-01T00:00:00Z"), pod_group("full", 1)]
    result = run([bare("a")], migs + full, groups, objects)
    assert decision(result, "slices").scheduled
    assert not decision(result, "full").scheduled
    # With only the whole GPU asked for, it is free.
    alone = run([bare("a")], dra.claim_pods("f", 1, "full", {"gpu": "template:whole"}), [groups[1]], objects)
    assert decision(alone, "full").scheduled
    # Four slices fit, a fifth does not (the counter set holds 4).
    five = dra.claim_pods("m", 5, "slices", {"gpu": "template:mig"})
    result = run([bare("a")], five, [pod_group("slices", 4)], objects)
    d = decision(result, "slices")
    assert d.scheduled
    assert len(d.assignments) == 4


def test_tainted_devices_need_a_toleration() -> None:
    objects = [
        dra.gpu_class(),
        dra.node_slice("a", [dra.device("gpu-0", taints=[ECC])]),
        ONE_GPU,
        dra.claim_template(
            "ml",
            "tolerant",
            dra.request("gpu", tolerations=[{"key": "gpu.example.com/ecc", "operator": "Exists"}]),
        ),
    ]
    plain = run(
        [bare("a")], dra.claim_pods("p", 1, "g", {"gpu": "template:one-gpu"}), [pod_group("g", 1)], objects
    )
    assert not decision(plain, "g").scheduled
    assert "1 devices tainted gpu.example.com/ecc=NoSchedule" in decision(plain, "g").message
    tolerant = dra.claim_pods("t", 1, "g", {"gpu": "template:tolerant"})
    assert decision(run([bare("a")], tolerant, [pod_group("g", 1)], objects), "g").scheduled


def test_admin_access_does_not_need_or_take_a_free_device() -> None:
    held = dra.claim("other", "held", allocated=[("gpu", dra.GPU_DRIVER, "a", "gpu-0")], node="a")
    admin = dra.claim_template("ml", "monitor", dra.request("gpu", admin=True))
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(1)), held, admin]
    members = dra.claim_pods("mon", 2, "g", {"gpu": "template:monitor"})
    result = run([bare("a")], members, [pod_group("g", 2)], objects)
    assert decision(result, "g").scheduled
    assert [x.device for m in members for x in devices(result, m.name)] == ["gpu-0", "gpu-0"]


def test_all_mode_takes_every_device_or_none() -> None:
    every = dra.claim_template("ml", "all", dra.request("gpu", all_devices=True))
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(3)), dra.node_slice("b", dra.gpus(2)), every]
    held = dra.claim("other", "held", allocated=[("gpu", dra.GPU_DRIVER, "a", "gpu-1")], node="a")
    result = run(
        [bare("a"), bare("b")],
        dra.claim_pods("w", 1, "g", {"gpu": "template:all"}),
        [pod_group("g", 1)],
        [*objects, held],
    )
    d = decision(result, "g")
    assert d.assignments == {("ml", "w-0"): "b"}
    assert sorted(x.device for x in devices(result, "w-0")) == ["gpu-0", "gpu-1"]


def test_count_beyond_the_32_device_limit_is_reported() -> None:
    big = dra.claim_template("ml", "big", dra.request("gpu", count=33))
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(40)), big]
    result = run(
        [bare("a")], dra.claim_pods("w", 1, "g", {"gpu": "template:big"}), [pod_group("g", 1)], objects
    )
    message = decision(result, "g").message
    assert not decision(result, "g").scheduled
    assert "exceeds the claim limit of 32" in message


def test_a_loose_count_is_corrected_by_the_exact_allocation() -> None:
    # One claim, two requests: any GPU, and an H100. Node a has one H100 only: counted per
    # request it serves a pod, really none. Node b has an A100 and an H100.
    spec = dra.claim_template("ml", "two", dra.request("any"), dra.request("h100", selectors=[H100]))
    objects = [
        dra.gpu_class(),
        dra.node_slice("a", [dra.device("g-0", {"model": "H100"})]),
        dra.node_slice("b", [dra.device("g-0", {"model": "H100"}), dra.device("g-1", {"model": "A100"})]),
        spec,
    ]
    result = run(
        [bare("a"), bare("b")],
        dra.claim_pods("w", 1, "g", {"gpu": "template:two"}),
        [pod_group("g", 1)],
        objects,
    )
    d = decision(result, "g")
    assert d.assignments == {("ml", "w-0"): "b"}, d.message
    got = {x.request: x.device for x in devices(result, "w-0")}
    assert got == {"any": "g-1", "h100": "g-0"}  # the allocator backtracks: "any" leaves the H100


# --------------------------------------------------------------------------- claims shared and allocated


def test_a_shared_claim_is_allocated_once_and_binds_every_user() -> None:
    shared = dra.claim("ml", "pair-gpu", dra.request("gpu"))
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(1)), dra.node_slice("b", dra.gpus(1)), shared]
    members = dra.claim_pods("w", 2, "g", {"gpu": "pair-gpu"})
    result = run([bare("a"), bare("b")], members, [pod_group("g", 2)], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert len(set(d.assignments.values())) == 1
    assert list(d.allocations) == [("ml", "pair-gpu")]
    assert devices(result, "w-0") == devices(result, "w-1")


def test_shared_claim_users_that_do_not_fit_one_node_try_another() -> None:
    # Node a has the first GPU but room for one pod only; b has a GPU and room for both.
    shared = dra.claim("ml", "pair-gpu", dra.request("gpu"))
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(1)), dra.node_slice("b", dra.gpus(1)), shared]
    members = dra.claim_pods("w", 2, "g", {"gpu": "pair-gpu"}, cpu="3")
    nodes = [bare("a", cpu="4"), bare("b", cpu="8")]
    d = decision(run(nodes, members, [pod_group("g", 2)], objects), "g")
    assert d.scheduled, d.message
    assert set(d.assignments.values()) == {"b"}


def test_an_allocated_claim_keeps_its_users_on_its_nodes() -> None:
    done = dra.claim("ml", "mine", allocated=[("gpu", dra.GPU_DRIVER, "b", "gpu-0")], node="b")
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(1)), dra.node_slice("b", dra.gpus(1)), done]
    result = run(
        [bare("a"), bare("b")], dra.claim_pods("w", 1, "g", {"gpu": "mine"}), [pod_group("g", 1)], objects
    )
    d = decision(result, "g")
    assert d.assignments == {("ml", "w-0"): "b"}
    assert d.allocations == {}  # nothing new to write
    assert [x.device for x in devices(result, "w-0")] == ["gpu-0"]


def own_and_shared(nodes: Sequence[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """Each pod's own claim asks 2 GPUs and 1 NIC; one more claim for 1 GPU is shared by all.
    `nodes`: (name, GPUs, NICs)."""
    own = dra.claim_template("ml", "own", dra.request("gpu", count=2), dra.request("nic", dra.NIC_DRIVER))
    objects = [dra.gpu_class(), dra.gpu_class(dra.NIC_DRIVER, dra.NIC_DRIVER), own]
    objects.append(dra.claim("ml", "shared-gpu", dra.request("gpu")))
    for name, gpu_count, nic_count in nodes:
        objects.append(dra.node_slice(name, dra.gpus(gpu_count)))
        objects.append(dra.node_slice(name, dra.nics(nic_count), driver=dra.NIC_DRIVER))
    return objects


def test_a_shared_claim_is_decided_with_its_users_own_claims() -> None:
    # a-d each fit one pod's own claim (3 GPUs, 1 NIC); only e holds both pods and the shared GPU
    # (5 GPUs, 2 NICs). The shared claim must not be allocated alone on a node its users
    # spread over, nor take a GPU their own claims need there.
    layout = [(n, 3, 1) for n in "abcd"] + [("e", 5, 2)]
    members = dra.claim_pods("w", 2, "g", {"own": "template:own", "s": "shared-gpu"})
    result = run([bare(n) for n, _, _ in layout], members, [pod_group("g", 2)], own_and_shared(layout))
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert set(d.assignments.values()) == {"e"}
    ids = device_ids(result)
    # Both pods see the shared GPU; no device is given to two claims.
    assert len({i for i in ids if i[2].startswith("gpu")}) == 5
    shared = d.allocations[("ml", "shared-gpu")]
    assert len(shared.devices) == 1
    assert shared.devices[0].pool == "e"


def test_a_shared_claim_tries_every_node_that_could_hold_its_users() -> None:
    # Nine nodes fit one pod each before the one that fits both: no round budget gives up early.
    layout = [(f"n{i}", 3, 1) for i in range(9)] + [("z", 5, 2)]
    members = dra.claim_pods("w", 2, "g", {"own": "template:own", "s": "shared-gpu"})
    d = decision(
        run([bare(n) for n, _, _ in layout], members, [pod_group("g", 2)], own_and_shared(layout)), "g"
    )
    assert d.scheduled, d.message
    assert set(d.assignments.values()) == {"z"}


def test_a_shared_claim_whose_users_fit_no_node_says_so() -> None:
    layout = [(n, 3, 1) for n in "abc"]
    members = dra.claim_pods("w", 2, "g", {"own": "template:own", "s": "shared-gpu"})
    d = decision(
        run([bare(n) for n, _, _ in layout], members, [pod_group("g", 2)], own_and_shared(layout)), "g"
    )
    assert not d.scheduled
    assert "fell short" not in d.message
    assert d.allocations == {}


def test_cpu_bound_nodes_keep_a_shared_claim_off_nodes_that_fit_one_user() -> None:
    # Every node has the shared GPU; a-c have room for one pod only (cpu), d for both.
    shared = dra.claim("ml", "pair-gpu", dra.request("gpu"))
    objects = [dra.gpu_class(), shared] + [dra.node_slice(n, dra.gpus(1)) for n in "abcd"]
    members = dra.claim_pods("w", 2, "g", {"gpu": "pair-gpu"}, cpu="3")
    nodes = [bare(n, cpu="4") for n in "abc"] + [bare("d", cpu="8")]
    d = decision(run(nodes, members, [pod_group("g", 2)], objects), "g")
    assert d.scheduled, d.message
    assert set(d.assignments.values()) == {"d"}


# --------------------------------------------------------------------------- PodGroup claims


FABRIC_DRIVER = "fabric.example.com"


def rack_fabric_slice(rack: str, channels: int) -> dict[str, Any]:
    """Interconnect channels reachable from every node of one rack (a network-attached pool)."""
    devices = [dra.device(f"channel-{i}") for i in range(channels)]
    return dra.selector_slice(f"fabric-{rack}", FABRIC_DRIVER, devices, RACK, [rack])


def fabric_group(name: str, size: int, **options: Any) -> PodGroup:
    """A gang of `size` with a PodGroup claim `fabric` from template `fabric` (claim <name>-fabric)."""
    spec = {
        "schedulingPolicy": {"gang": {"minCount": size}},
        "resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "fabric"}],
        **options,
    }
    return pod_group(name, size, spec=spec)


def fabric_claim(name: str = "g-fabric", **options: Any) -> dict[str, Any]:
    return dra.claim("ml", name, dra.request("link", FABRIC_DRIVER), **options)


def two_racks() -> list[Node]:
    return topology_nodes(blocks=1, racks=2, hosts=2)


def test_a_podgroup_claim_its_members_do_not_list_is_allocated_and_binds_them_where_it_reaches() -> None:
    # Only rack r1 has an interconnect channel; the members list no claim at all.
    objects = [dra.gpu_class(FABRIC_DRIVER, FABRIC_DRIVER), rack_fabric_slice("z0-b0-r1", 1), fabric_claim()]
    members = [pod(f"w-{i}", "g") for i in range(3)]
    d = decision(run(two_racks(), members, [fabric_group("g", 3)], objects), "g")
    assert d.scheduled, d.message
    assert {n.rsplit("-", 1)[0] for n in d.assignments.values()} == {"z0-b0-r1"}
    allocation = d.allocations[("ml", "g-fabric")]
    assert [x.device for x in allocation.devices] == ["channel-0"]
    assert d.devices == {}  # no member lists it: none gets it in its containers


def test_a_podgroup_claim_is_allocated_for_a_single_pending_member() -> None:
    objects = [dra.gpu_class(FABRIC_DRIVER, FABRIC_DRIVER), rack_fabric_slice("z0-b0-r1", 1), fabric_claim()]
    d = decision(run(two_racks(), [pod("w-0", "g")], [fabric_group("g", 1)], objects), "g")
    assert d.scheduled, d.message
    assert list(d.allocations) == [("ml", "g-fabric")]
    assert d.assignments[("ml", "w-0")].startswith("z0-b0-r1")


def test_members_that_list_the_podgroup_claim_get_its_devices() -> None:
    objects = [dra.gpu_class(FABRIC_DRIVER, FABRIC_DRIVER), rack_fabric_slice("z0-b0-r0", 1), fabric_claim()]
    listing = dra.claim_pod("w-0", "g", {"fabric": "g-fabric"})
    members = [listing, pod("w-1", "g")]
    result = run(two_racks(), members, [fabric_group("g", 2)], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert {n.rsplit("-", 1)[0] for n in d.assignments.values()} == {"z0-b0-r0"}
    assert [(x.claim, x.device) for x in devices(result, "w-0")] == [("fabric", "channel-0")]
    assert devices(result, "w-1") == []


def test_an_allocated_podgroup_claim_keeps_every_member_on_its_nodes() -> None:
    done = fabric_claim(allocated=[("link", FABRIC_DRIVER, "fabric-z0-b0-r1", "channel-0")])
    done["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": RACK, "operator": "In", "values": ["z0-b0-r1"]}]}]
    }
    objects = [dra.gpu_class(FABRIC_DRIVER, FABRIC_DRIVER), rack_fabric_slice("z0-b0-r1", 1), done]
    d = decision(
        run(two_racks(), [pod(f"w-{i}", "g") for i in range(2)], [fabric_group("g", 2)], objects), "g"
    )
    assert d.scheduled, d.message
    assert {n.rsplit("-", 1)[0] for n in d.assignments.values()} == {"z0-b0-r1"}
    assert d.allocations == {}


def test_a_podgroup_claim_no_node_can_reach_binds_nothing() -> None:
    objects = [dra.gpu_class(FABRIC_DRIVER, FABRIC_DRIVER), rack_fabric_slice("z9-b0-r0", 1), fabric_claim()]
    d = decision(
        run(two_racks(), [pod(f"w-{i}", "g") for i in range(2)], [fabric_group("g", 2)], objects), "g"
    )
    assert not d.scheduled
    assert d.assignments == {}
    assert d.allocations == {}
    assert d.reason == Reason.UNSCHEDULABLE


def test_a_podgroup_claim_not_created_yet_keeps_the_group_waiting() -> None:
    objects = [dra.gpu_class(FABRIC_DRIVER, FABRIC_DRIVER), rack_fabric_slice("z0-b0-r1", 1)]
    d = decision(
        run(two_racks(), [pod(f"w-{i}", "g") for i in range(2)], [fabric_group("g", 2)], objects), "g"
    )
    assert not d.scheduled
    assert d.reason == Reason.WAITING_FOR_RESOURCE_CLAIMS
    assert d.message == "PodGroup claim fabric: waiting for ResourceClaim ml/g-fabric"


def test_a_podgroup_claim_without_any_dra_objects_waits() -> None:
    members = [pod(f"w-{i}", "g") for i in range(2)]
    result = schedule_cycle(nodes=two_racks(), pods=members, pod_groups=[fabric_group("g", 2)])
    d = decision(result, "g")
    assert not d.scheduled
    assert d.reason == Reason.WAITING_FOR_RESOURCE_CLAIMS


def test_a_native_podgroup_claim_binds_members_that_do_not_list_it() -> None:
    entry = {"name": "net", "resourceClaimTemplateName": "channel"}
    status = {"resourceClaimStatuses": [{"name": "net", "resourceClaimName": "g-net-abcde"}]}
    group = native_pod_group("g", 2, resource_claims=[entry], status=status)
    channel = dra.node_slice("b", [dra.device("channel-0")], driver=FABRIC_DRIVER)
    objects = [dra.gpu_class(FABRIC_DRIVER, FABRIC_DRIVER), channel, fabric_claim("g-net-abcde")]
    members = [native_pod(f"g-{i}", "g") for i in range(2)]
    d = decision(run([bare("a"), bare("b")], members, [group], objects), "g")
    assert d.scheduled, d.message
    assert set(d.assignments.values()) == {"b"}
    assert list(d.allocations) == [("ml", "g-net-abcde")]
    # Until the resourceclaim controller names the claim, the group waits for it.
    waiting = native_pod_group("g", 2, resource_claims=[entry])
    d = decision(run([bare("a"), bare("b")], members, [waiting], objects), "g")
    assert d.reason == Reason.WAITING_FOR_RESOURCE_CLAIMS
    assert d.message == "PodGroup claim net: waiting for its ResourceClaim to be created"


# --------------------------------------------------------------------------- waiting and errors


def test_a_missing_claim_keeps_the_group_waiting() -> None:
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(1))]
    named = run([bare("a")], dra.claim_pods("w", 1, "g", {"gpu": "nope"}), [pod_group("g", 1)], objects)
    assert "waiting for ResourceClaim ml/nope (claim gpu)" in decision(named, "g").message
    assert decision(named, "g").reason == Reason.WAITING_FOR_RESOURCE_CLAIMS
    templated = run(
        [bare("a")], dra.claim_pods("w", 1, "g", {"gpu": "template:nope"}), [pod_group("g", 1)], objects
    )
    assert "waiting for the ResourceClaim of template nope (claim gpu)" in decision(templated, "g").message


def test_a_missing_device_class_is_named() -> None:
    objects = [
        dra.node_slice("a", dra.gpus(1)),
        dra.claim_template("ml", "t", dra.request("gpu", "no-such-class")),
    ]
    result = run(
        [bare("a")], dra.claim_pods("w", 1, "g", {"gpu": "template:t"}), [pod_group("g", 1)], objects
    )
    assert (
        decision(result, "g").message == "claim ml/w-0-gpu, request gpu: device class no-such-class not found"
    )


def test_a_claim_being_deleted_keeps_the_group_waiting() -> None:
    deleting = dra.claim("ml", "c")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    members = dra.claim_pods("w", 1, "g", {"gpu": "c"})
    objects = dra.dra_objects([dra.gpu_class(), dra.node_slice("a", dra.gpus(1)), deleting], members)
    waiting = resolve(members, objects.claims, {})
    assert waiting == WaitingForClaims("pod w-0: ResourceClaim ml/c is being deleted")
    result = schedule_cycle(nodes=[bare("a")], pods=members, pod_groups=[pod_group("g", 1)], dra=objects)
    assert decision(result, "g").reason == Reason.WAITING_FOR_RESOURCE_CLAIMS
    assert decision(result, "g").message == waiting.message
    assert isinstance(resolve(members, {}, {}), WaitingForClaims)


def test_claims_without_any_dra_objects_wait() -> None:
    members = dra.claim_pods("w", 1, "g", {"gpu": "template:t"})
    result = schedule_cycle(nodes=[bare("a")], pods=members, pod_groups=[pod_group("g", 1)])
    d = decision(result, "g")
    assert d.reason == Reason.WAITING_FOR_RESOURCE_CLAIMS
    assert "waiting for the ResourceClaim of template t (claim gpu) to be created" in d.message


def test_selector_errors_are_reasons_never_matches() -> None:
    broken = dra.device_class("broken", 'device.attributes["gpu.example.com"].model ==')
    missing = dra.device_class("missing", 'device.attributes["gpu.example.com"].numa == 0')
    objects = [broken, missing, dra.node_slice("a", dra.gpus(1))]
    objects += [dra.claim_template("ml", "b", dra.request("gpu", "broken"))]
    objects += [dra.claim_template("ml", "m", dra.request("gpu", "missing"))]
    compile_error = run(
        [bare("a")], dra.claim_pods("w", 1, "g", {"gpu": "template:b"}), [pod_group("g", 1)], objects
    )
    message = decision(compile_error, "g").message
    assert not decision(compile_error, "g").scheduled
    assert message.startswith("class broken: selector #0 ")
    assert "CEL compile error" in message
    runtime = run(
        [bare("a")], dra.claim_pods("w", 1, "g", {"gpu": "template:m"}), [pod_group("g", 1)], objects
    )
    message = decision(runtime, "g").message
    assert not decision(runtime, "g").scheduled
    assert "class missing: selector #0" in message
    assert "CEL runtime error" in message
    assert "numa" in message


def test_an_over_counted_node_is_corrected_without_an_exponential_search() -> None:
    # Each pod needs two GPUs (any, and an H100); counted per request a node of 10 H100s serves
    # 10 pods, really 5. One search over 10 pods' claims on one node would backtrack through
    # millions of device orders before giving up; its step budget hands over to pod by pod.
    spec = dra.claim_template("ml", "two", dra.request("any"), dra.request("h100", selectors=[H100]))
    objects = [
        dra.gpu_class(),
        dra.node_slice("a", dra.gpus(10)),
        dra.node_slice("b", dra.gpus(10)),
        spec,
    ]
    members = dra.claim_pods("w", 10, "g", {"gpu": "template:two"})
    result = run([bare("a"), bare("b")], members, [pod_group("g", 10)], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert sorted(d.assignments.values()) == ["a"] * 5 + ["b"] * 5
    ids = device_ids(result)
    assert len(ids) == len(set(ids)) == 20


def test_pod_by_pod_allocation_finishes_a_node_the_joint_search_gave_up(monkeypatch: Any) -> None:
    monkeypatch.setattr(group, "JOINT_ALLOCATION_STEPS", 0)
    objects = [dra.gpu_class(), dra.node_slice("a", dra.gpus(2)), dra.node_slice("b", dra.gpus(2)), ONE_GPU]
    members = dra.claim_pods("w", 4, "g", {"gpu": "template:one-gpu"})
    result = run([bare("a"), bare("b")], members, [pod_group("g", 4)], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert sorted(d.assignments.values()) == ["a", "a", "b", "b"]
    ids = device_ids(result)
    assert len(ids) == len(set(ids)) == 4


# --------------------------------------------------------------------------- KEP-5004


def extended_class(name: str = "er.example.com", resource: str | None = "example.com/gpu") -> dict[str, Any]:
    body = dra.device_class(name, f'device.driver == "{dra.GPU_DRIVER}"')
    if resource:
        body["spec"]["extendedResourceName"] = resource
    return body


def extended_pods(resource: str, count: int, size: int) -> list[Pod]:
    return [parse_pod(pod_manifest(f"w-{i}", "g", limits={resource: str(count)})) for i in range(size)]


def test_an_extended_resource_no_node_offers_is_served_by_its_device_class() -> None:
    members = extended_pods("example.com/gpu", 2, 2)
    objects = [extended_class(), dra.node_slice("a", dra.gpus(2)), dra.node_slice("b", dra.gpus(2))]
    result = run([bare("a"), bare("b")], members, [pod_group("g", 2)], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    assert sorted(d.assignments.values()) == ["a", "b"]
    assert sorted(d.allocations) == [("ml", "w-0-extended-resources"), ("ml", "w-1-extended-resources")]
    for (_, claim), allocation in d.allocations.items():
        node_name = d.assignments[("ml", claim.removesuffix("-extended-resources"))]
        assert [(x.request, x.pool) for x in allocation.devices] == [("container-0-request-0", node_name)] * 2


def test_an_extended_resource_a_node_offers_stays_a_plain_one() -> None:
    members = extended_pods("example.com/gpu", 2, 1)
    manifest = node_manifest("c", gpu=0)
    manifest["status"]["allocatable"]["example.com/gpu"] = "4"
    offering = parse_node(manifest)
    objects = [extended_class(), dra.node_slice("a", dra.gpus(2))]
    result = run([bare("a"), offering], members, [pod_group("g", 1)], objects)
    d = decision(result, "g")
    assert d.assignments == {("ml", "w-0"): "c"}, d.message
    assert d.allocations == {}


def test_the_implicit_extended_resource_name_of_a_class() -> None:
    members = extended_pods("deviceclass.resource.kubernetes.io/plain.example.com", 1, 1)
    objects = [extended_class("plain.example.com", None), dra.node_slice("a", dra.gpus(1))]
    result = run([bare("a")], members, [pod_group("g", 1)], objects)
    d = decision(result, "g")
    assert d.scheduled, d.message
    [allocation] = d.allocations.values()
    assert len(allocation.devices) == 1
