"""bench/e2e's pure parts: the workload generator and the partial-gang definition."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.e2e.metrics import PodEvent, Recording, compute, partial_episodes, percentile  # noqa: E402
from bench.e2e.workload import (  # noqa: E402
    Gang,
    PodShape,
    Topology,
    Workload,
    generate,
    group_manifest,
    node_domains,
    pod_manifest,
)


def test_workload_is_deterministic_and_trace_shaped() -> None:
    topology = Topology(nodes=1000)
    a = generate(topology, seed=3, oversubscription=1.25)
    b = generate(topology, seed=3, oversubscription=1.25)
    assert a == b
    assert a.gpus >= 1.25 * topology.gpus
    sizes = [len(g.pods) - g.launcher for g in a.gangs]
    assert sum(s <= 8 for s in sizes) / len(sizes) > 0.7  # mostly 1-8 pods
    assert max(sizes) <= 256
    assert all(g.gpus <= topology.gpus // 3 for g in a.gangs)
    for gang in a.gangs:
        if gang.required == "rack":
            assert 2 * gang.gpus <= topology.rack_gpus


def test_manifests_map_required_level_to_native_and_keep_preferred_for_gangsched() -> None:
    pods = tuple(PodShape(f"w{i}", 8, 24, 192) for i in range(2))
    gang = Gang(index=1, pods=(PodShape("launcher", 0, 2, 8), *pods), required="block", preferred_rack=True)
    ours = group_manifest(gang, "gangsched")
    native = group_manifest(gang, "native")
    assert ours is not None
    assert native is not None
    assert ours["spec"]["schedulingConstraints"]["topology"] == [
        {"key": "example.com/block", "mode": "Required"},
        {"key": "example.com/rack", "mode": "Preferred"},
    ]
    assert native["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert native["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "schedulingConstraints": {"topology": [{"key": "example.com/block"}]},
    }
    pod = pod_manifest(gang, pods[0], "native", pool="p")
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "g00001"}
    assert pod["spec"]["schedulerName"] == "native-gang"


def test_a_quick_binding_burst_is_not_partial_but_a_stall_below_quorum_is() -> None:
    burst = [(0.0, 1), (0.3, 1), (0.5, 1), (1.9, 1)]
    episodes, pause = partial_episodes(burst, gang="g", min_count=4, end=10.0, gap=2.0)
    assert episodes == []
    assert pause == 1.4
    stall = [(0.0, 1), (0.1, 1), (3.0, 1)]
    episodes, _ = partial_episodes(stall, gang="g", min_count=3, end=10.0, gap=2.0)
    assert [(e.start, e.end, e.bound) for e in episodes] == [(0.1, 3.0, 2)]
    # Stuck below quorum at the end of the run.
    episodes, _ = partial_episodes([(0.0, 1)], gang="g", min_count=2, end=5.0, gap=2.0)
    assert len(episodes) == 1
    # A rollback: bound members deleted after a stall counts once the stall lasted >= gap.
    episodes, _ = partial_episodes([(0.0, 1), (2.5, -1)], gang="g", min_count=2, end=5.0, gap=2.0)
    assert len(episodes) == 1


def test_figures_from_a_recording() -> None:
    topology = Topology(nodes=20, rack_size=10)
    domains = node_domains(topology, pool="p")
    rack0 = [n for n, (_, rack) in domains.items() if rack.endswith("r0")]
    rack1 = [n for n, (_, rack) in domains.items() if rack.endswith("r1")]
    gangs = (
        Gang(
            index=0,
            pods=(PodShape("w0", 8, 24, 192), PodShape("w1", 8, 24, 192)),
            required=None,
            preferred_rack=True,
        ),
        Gang(
            index=1,
            pods=(PodShape("w0", 4, 12, 96), PodShape("w1", 4, 12, 96)),
            required="rack",
            preferred_rack=False,
        ),
        Gang(index=2, pods=(PodShape("0", 1, 3, 24),), required=None, preferred_rack=False),
    )
    workload = Workload(topology=topology, gangs=gangs, seed=0, oversubscription=1.0)
    rec = Recording(contestant="gangsched")
    rec.created = {"g00000-w0": 1.0, "g00000-w1": 1.1, "g00001-w0": 1.2, "g00001-w1": 1.3, "g00002-0": 1.4}
    rec.events = [
        PodEvent(1.5, "g00000-w0", "bound", rack0[0]),
        PodEvent(1.6, "g00000-w1", "bound", rack1[0]),  # split over two racks
        PodEvent(2.3, "g00001-w0", "bound", rack0[1]),
        PodEvent(2.4, "g00001-w1", "bound", rack0[1]),
    ]
    rec.end = 20.0
    fig = compute(rec, workload, domains)
    assert (fig.pods_bound, fig.gangs_placed, fig.partial_gangs, fig.required_violations) == (4, 2, 0, 0)
    assert fig.preferred_in_one_rack == 0.0
    assert fig.preferred_eligible == 1
    assert abs(fig.gang_latency_p50 - 0.5) < 1e-9  # g00000: created 1.1, bound 1.6
    assert abs(fig.gang_latency_p99 - 1.1) < 1e-9  # g00001: created 1.3, bound 2.4
    assert abs(fig.pods_per_second - 4 / 1.4) < 1e-9
    assert fig.gpu_utilisation == 24 / 160
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
