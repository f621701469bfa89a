"""Pools as each node sees them, in the engine: pools moving between nodes, multi-host pools
and per-device node selection.

Upstream's GatherPools decides per node which slices count (engine/dra/pools.py): a node uses
the newest generation among the slices relevant to it, complete when they are all there (or,
when some are elsewhere, when the whole generation is and no newer one exists). The device
table and its counts (`engine/dra/table.py`, `state.py`) must give the same per-node answer, or the
engine calls a gang "can never fit" where kube-scheduler would allocate. Each case here is
one where upstream's answer was checked with hack/dra-oracle (the generated cases of
tests/unit/test_dra_oracle.py and tests/unit/test_dra_table_bound.py cover them broadly).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gangsched.engine import CycleResult, GroupDecision, schedule_cycle
from gangsched_testing import dra
from gangsched_testing.builders import node, pod_group

Manifest = dict[str, Any]

ONE_GPU = dra.claim_template("ml", "one-gpu", dra.request("gpu"))
TWO_GPUS = dra.claim_template("ml", "two-gpus", dra.request("gpu", count=2))


def place(
    objects: Sequence[Manifest], pods: int, template: str = "one-gpu", **nodes: dict[str, str]
) -> GroupDecision:
    """One gang of `pods` pods, each with a claim from `template`, on nodes a and b (labels from
    `nodes`), with no GPUs of their own: every device comes from the slices."""
    cluster = [node(name, gpu=0, labels=nodes.get(name, {})) for name in ("a", "b")]
    members = dra.claim_pods("w", pods, "g", {"gpu": f"template:{template}"})
    result: CycleResult = schedule_cycle(
        nodes=cluster,
        pods=members,
        pod_groups=[pod_group("g", pods)],
        dra=dra.dra_objects([dra.gpu_class(), ONE_GPU, TWO_GPUS, *objects], members),
    )
    [decision] = [d for d in result.decisions if d.name == "g"]
    return decision


def hosts(decision: GroupDecision) -> list[str]:
    return sorted(decision.assignments.values())


def devices(decision: GroupDecision) -> list[tuple[str, str]]:
    return sorted((d.pool, d.device) for found in decision.devices.values() for d in found)


def per_device_slice(
    name: str, devices_: Sequence[Manifest], *, pool: str | None = None, **pool_fields: int
) -> Manifest:
    """A slice with perDeviceNodeSelection: each device says which nodes it serves."""
    return {
        "apiVersion": dra.API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": dra.GPU_DRIVER,
            "pool": {"name": pool or name, "generation": 1, "resourceSliceCount": 1, **pool_fields},
            "perDeviceNodeSelection": True,
            "devices": list(devices_),
        },
    }


def placed_on(device: Manifest, **where: Any) -> Manifest:
    return {**device, **where}


def name_selector(node_name: str) -> Manifest:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }


# --------------------------------------------------------------------------- pools moving between nodes


def test_a_pool_moving_to_another_node_serves_both_while_the_old_slice_is_there() -> None:
    # The driver republished pool p on b as generation 2; a still has generation 1. From a only
    # generation 1 is relevant and complete by itself, from b generation 2: upstream allocates
    # on both (the table used to keep generation 2 alone, so a had no devices).
    objects = [
        dra.node_slice("a", dra.gpus(2, prefix="a"), pool="p", name="p-a", generation=1),
        dra.node_slice("b", dra.gpus(2, prefix="b"), pool="p", name="p-b", generation=2),
    ]
    d = place(objects, 4)
    assert d.scheduled, d.message
    assert hosts(d) == ["a", "a", "b", "b"]
    assert devices(d) == [("p", "a-0"), ("p", "a-1"), ("p", "b-0"), ("p", "b-1")]


def test_an_incomplete_new_generation_leaves_the_old_one_in_use() -> None:
    # Generation 2 is to have two slices and only b's is published: b has nothing to allocate
    # from, a still allocates from its complete generation 1 (the table used to mark the whole
    # pool unusable).
    objects = [
        dra.node_slice("a", dra.gpus(2, prefix="a"), pool="p", name="p-a", generation=1),
        dra.node_slice("b", dra.gpus(2, prefix="b"), pool="p", name="p-b", generation=2, slice_count=2),
    ]
    d = place(objects, 2)
    assert d.scheduled, d.message
    assert hosts(d) == ["a", "a"]
    # Three pods is more than any node can ever get: b's generation is incomplete everywhere.
    d = place(objects, 3)
    assert not d.scheduled
    assert d.message.startswith("can never fit: needs 3 pods"), d.message


def test_a_newer_generation_elsewhere_makes_an_incomplete_pool_obsolete() -> None:
    # A two-slice pool whose generation 1 is only left on a, generation 2 only on b: neither
    # node's slices complete the pool, and a newer one exists, so upstream ignores it on a too.
    objects = [
        dra.node_slice("a", dra.gpus(2, prefix="a"), pool="p", name="p-a", generation=1, slice_count=2),
        dra.node_slice("b", dra.gpus(2, prefix="b"), pool="p", name="p-b", generation=2, slice_count=2),
    ]
    d = place(objects, 1)
    assert not d.scheduled
    assert d.message.startswith("can never fit"), d.message


def test_a_moving_pool_whose_devices_keep_their_names_is_one_device_each_to_the_allocated_state() -> None:
    # Same device names in both generations: upstream's allocated state is by (driver, pool,
    # device), so gpu-0 taken on a is taken on b as well. Two pods of 2 GPUs cannot both get one.
    objects = [
        dra.node_slice("a", dra.gpus(2), pool="p", name="p-a", generation=1),
        dra.node_slice("b", dra.gpus(2), pool="p", name="p-b", generation=2),
    ]
    d = place(objects, 1, "two-gpus")
    assert d.scheduled, d.message
    d = place(objects, 2, "two-gpus")
    assert not d.scheduled, d.message


# --------------------------------------------------------------------------- multi-host pools


def test_a_multi_host_pool_serves_each_host_from_its_own_slice() -> None:
    objects = [
        dra.node_slice("a", dra.gpus(2, prefix="a"), pool="p", name="p-a", slice_count=2),
        dra.node_slice("b", dra.gpus(2, prefix="b"), pool="p", name="p-b", slice_count=2),
    ]
    d = place(objects, 2, "two-gpus")
    assert d.scheduled, d.message
    assert hosts(d) == ["a", "b"]


def test_a_multi_host_pool_may_repeat_device_names_across_hosts() -> None:
    # Upstream checks device names among the slices a node uses, not pool-wide (the table used
    # to call the pool invalid). The names are still one device each to the allocated state.
    objects = [
        dra.node_slice("a", dra.gpus(2), pool="p", name="p-a", slice_count=2),
        dra.node_slice("b", dra.gpus(2), pool="p", name="p-b", slice_count=2),
    ]
    d = place(objects, 1, "two-gpus")
    assert d.scheduled, d.message
    held = dra.claim("ml", "held", allocated=[("gpu", dra.GPU_DRIVER, "p", "gpu-0")], node="a")
    d = place([*objects, held], 1, "two-gpus")
    assert not d.scheduled, "gpu-0 is in use on b too"


# --------------------------------------------------------------------------- per-device node selection


def test_per_device_node_selection_in_a_moving_pool() -> None:
    # Generation 1 published per device (each for node a), generation 2 as b's own slice.
    gen1 = per_device_slice("p-a", [placed_on(g, nodeName="a") for g in dra.gpus(2, prefix="a")], pool="p")
    gen2 = dra.node_slice("b", dra.gpus(2, prefix="b"), pool="p", name="p-b", generation=2)
    d = place([gen1, gen2], 4)
    assert d.scheduled, d.message
    assert hosts(d) == ["a", "a", "b", "b"]


def test_per_device_name_selector_and_all_nodes_devices_are_counted_where_they_reach() -> None:
    gpus = dra.gpus(5)
    slice_ = per_device_slice(
        "pd",
        [
            placed_on(gpus[0], nodeName="a"),
            placed_on(gpus[1], nodeName="b"),
            placed_on(gpus[2], nodeSelector=name_selector("b")),
            placed_on(
                gpus[3],
                nodeSelector={
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["yes"]}]}
                    ]
                },
            ),
            placed_on(gpus[4], allNodes=True),
        ],
    )
    # a: gpu-0, gpu-4 (and gpu-3 through its label); b: gpu-1, gpu-2, gpu-4.
    d = place([slice_], 5, a={"gpu": "yes"})
    assert d.scheduled, d.message
    assert len(set(devices(d))) == 5
    d = place([slice_], 6, a={"gpu": "yes"})
    assert not d.scheduled
    # Each node could hold 3, so not "never"; the exact allocation finds the 5 devices.
    assert "cluster fits 5/6" in d.message, d.message


def test_partitionable_devices_reached_through_node_selection_are_counted() -> None:
    # Devices of a multi-host partitionable pool (per-device allNodes) share the pool's counters
    # wherever they are used; they used to count on no node at all ("can never fit").
    parts = [
        placed_on(dra.device(f"part-{i}", {"model": "H100"}, consumes={"cs": {"mem": "40Gi"}}), allNodes=True)
        for i in range(3)
    ]
    counters = {
        "apiVersion": dra.API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": "pp-counters"},
        "spec": {
            "driver": dra.GPU_DRIVER,
            "pool": {"name": "pp", "generation": 1, "resourceSliceCount": 2},
            "allNodes": True,
            "sharedCounters": [{"name": "cs", "counters": {"mem": {"value": "80Gi"}}}],
        },
    }
    objects = [per_device_slice("pp", parts, resourceSliceCount=2), counters]
    d = place(objects, 2)
    assert d.scheduled, d.message
    # The counters hold two parts of 40Gi, wherever they go.
    d = place(objects, 3)
    assert not d.scheduled


def test_partitionable_devices_in_use_do_not_make_a_gang_never_fit() -> None:
    # "Never" is about the empty cluster: counters taken by claims that will end do not count.
    objects = [
        dra.node_slice(
            "a",
            [dra.device(f"part-{i}", consumes={"cs": {"mem": "40Gi"}}) for i in range(2)],
            pool="a",
            slice_count=2,
        ),
        dra.node_slice("a", pool="a", slice_count=2, counters={"cs": {"mem": "80Gi"}}),
        dra.claim(
            "ml",
            "held",
            allocated=[("gpu", dra.GPU_DRIVER, "a", "part-0"), ("gpu", dra.GPU_DRIVER, "a", "part-1")],
            node="a",
        ),
    ]
    d = place(objects, 2)
    assert not d.scheduled
    assert not d.message.startswith("can never fit"), d.message
