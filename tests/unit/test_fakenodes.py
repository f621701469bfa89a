"""node_manifests and parse_node_set: the pure half of gangsched_testing.fakenodes."""

from __future__ import annotations

import ipaddress

import pytest

from gangsched_testing.fakenodes import (
    FAKE_NODE_LABEL,
    NodeSet,
    Taint,
    TopologyKeys,
    TopologyShape,
    node_ip,
    node_manifests,
    parse_node_set,
    pod_ip,
)


def _conditions(node: dict[str, object]) -> dict[str, str]:
    status = node["status"]
    assert isinstance(status, dict)
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_shape_names_encode_the_path_in_order() -> None:
    nodes = node_manifests(spec=NodeSet(shape=TopologyShape(zones=2, blocks=2, racks=4, hosts=4)))
    names = [n["metadata"]["name"] for n in nodes]
    assert len(names) == len(set(names)) == 64
    assert names[:3] == ["z0-b0-r0-h0", "z0-b0-r0-h1", "z0-b0-r0-h2"]
    assert names[-1] == "z1-b1-r3-h3"


def test_topology_labels_are_unique_per_subtree() -> None:
    [node] = [
        n
        for n in node_manifests(spec=NodeSet(shape=TopologyShape(zones=2, blocks=2, racks=4, hosts=4)))
        if n["metadata"]["name"] == "z1-b0-r2-h3"
    ]
    labels = node["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "z1"
    assert labels["example.com/block"] == "z1-b0"  # block 0 of zone 1 is not block 0 of zone 0
    assert labels["example.com/rack"] == "z1-b0-r2"
    assert labels["kubernetes.io/hostname"] == "z1-b0-r2-h3"
    assert labels[FAKE_NODE_LABEL] == "true"


def test_count_gives_flat_nodes_without_topology_labels() -> None:
    nodes = node_manifests(spec=NodeSet(count=3, name_prefix="cpu-"))
    assert [n["metadata"]["name"] for n in nodes] == ["cpu-node-0", "cpu-node-1", "cpu-node-2"]
    assert "topology.kubernetes.io/zone" not in nodes[0]["metadata"]["labels"]
    assert nodes[0]["metadata"]["labels"]["kubernetes.io/hostname"] == "cpu-node-0"


def test_default_is_one_node() -> None:
    assert [n["metadata"]["name"] for n in node_manifests(spec=NodeSet())] == ["node-0"]
    assert node_manifests(spec=NodeSet(count=0)) == []


def test_prefix_applies_to_names_and_label_values() -> None:
    [node] = node_manifests(spec=NodeSet(shape=TopologyShape(), name_prefix="a-"))
    assert node["metadata"]["name"] == "a-z0-b0-r0-h0"
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "a-z0"


def test_custom_keys_and_omitted_levels() -> None:
    keys = TopologyKeys(zone="acme.io/zone", block=None, rack="acme.io/rack", host="acme.io/host")
    [node] = node_manifests(spec=NodeSet(shape=TopologyShape(), keys=keys))
    labels = node["metadata"]["labels"]
    assert labels["acme.io/zone"] == "z0"
    assert labels["acme.io/rack"] == "z0-b0-r0"
    assert labels["acme.io/host"] == "z0-b0-r0-h0"
    assert "example.com/block" not in labels
    assert "kubernetes.io/hostname" not in labels


def test_resources_are_capacity_and_allocatable() -> None:
    extended = {"nvidia.com/gpu": "8", "example.com/nic": "4"}
    [node] = node_manifests(spec=NodeSet(cpu="64", memory="512Gi", pods=50, extended=extended))
    want = {"cpu": "64", "memory": "512Gi", "pods": "50", "nvidia.com/gpu": "8", "example.com/nic": "4"}
    assert node["status"]["allocatable"] == want
    assert node["status"]["capacity"] == want


def test_extra_labels_win_over_defaults() -> None:
    [node] = node_manifests(spec=NodeSet(labels={"pool": "train", "kubernetes.io/arch": "arm64"}))
    assert node["metadata"]["labels"]["pool"] == "train"
    assert node["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"


@pytest.mark.parametrize(
    ("ready", "condition", "taint"),
    [
        (True, "True", None),
        (False, "False", "node.kubernetes.io/not-ready"),
        (None, None, "node.kubernetes.io/unreachable"),
    ],
)
def test_ready_condition_and_its_taint(ready: bool | None, condition: str | None, taint: str | None) -> None:
    [node] = node_manifests(spec=NodeSet(ready=ready))
    assert _conditions(node).get("Ready") == condition
    assert _conditions(node)["MemoryPressure"] == "False"
    taints = [t["key"] for t in node["spec"].get("taints", [])]
    assert taints == ([taint] if taint else [])


def test_condition_taints_can_be_left_out() -> None:
    [node] = node_manifests(spec=NodeSet(ready=False, condition_taints=False))
    assert "taints" not in node["spec"]


def test_taints_are_rendered_like_the_api() -> None:
    [node] = node_manifests(
        spec=NodeSet(taints=(Taint(key="dedicated", value="infra"), Taint(key="gpu", effect="NoExecute")))
    )
    assert node["spec"]["taints"] == [
        {"key": "dedicated", "value": "infra", "effect": "NoSchedule"},
        {"key": "gpu", "effect": "NoExecute"},
    ]


def test_addresses_are_deterministic_and_in_range() -> None:
    [node] = node_manifests(spec=NodeSet(count=1))
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses == {"InternalIP": node_ip("node-0"), "Hostname": "node-0"}
    assert ipaddress.ip_address(node_ip("node-0")) in ipaddress.ip_network("172.16.0.0/12")
    assert ipaddress.ip_address(pod_ip("ns", "p")) in ipaddress.ip_network("10.128.0.0/9")
    assert pod_ip("ns", "p") == pod_ip("ns", "p") != pod_ip("ns", "q")


def test_manifests_are_independent_copies() -> None:
    a, b = node_manifests(spec=NodeSet(count=2))
    a["status"]["allocatable"]["cpu"] = "1"
    a["status"]["conditions"][0]["status"] = "True"
    assert b["status"]["allocatable"]["cpu"] == "32"
    assert b["status"]["conditions"][0]["status"] == "False"


def test_invalid_specs_are_rejected() -> None:
    with pytest.raises(ValueError, match="either count or shape"):
        NodeSet(count=2, shape=TopologyShape())
    with pytest.raises(ValueError, match="racks"):
        TopologyShape(racks=0)
    with pytest.raises(ValueError, match="count"):
        NodeSet(count=-1)


def test_parse_shape_and_gpu() -> None:
    spec = parse_node_set("zones=2,blocks=2,racks=4,hosts=4,gpu=8")
    assert spec.shape == TopologyShape(zones=2, blocks=2, racks=4, hosts=4)
    assert spec.extended == {"nvidia.com/gpu": "8"}
    assert spec.size == 64


def test_parse_everything_else() -> None:
    spec = parse_node_set(
        "count=3, cpu=16, memory=64Gi, pods=20, example.com/fpga=2, prefix=x-, ready=none,"
        "label=pool=infra, taint=dedicated=infra:NoSchedule, taint=gpu:NoExecute"
    )
    assert spec == NodeSet(
        count=3,
        cpu="16",
        memory="64Gi",
        pods=20,
        extended={"example.com/fpga": "2"},
        name_prefix="x-",
        ready=None,
        labels={"pool": "infra"},
        taints=(Taint(key="dedicated", value="infra"), Taint(key="gpu", effect="NoExecute")),
    )


@pytest.mark.parametrize(
    "text",
    ["zones", "colour=blue", "ready=maybe", "taint=gpu:Sometimes", "taint=NoSchedule", "count=1,zones=2"],
)
def test_parse_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case fails with its own message
        parse_node_set(text)
