"""bench/quality.py at a tiny size, and the invariants of its two reference placers.

The references (bench/quality_refs.py) stand for kube-scheduler v1.36 TAS and Kueue TAS
BestFit in the quality comparison, so they must be valid placers: all or nothing, never over
capacity, inside one value of the Required key. `quality.evaluate` checks exactly that when it
replays any placer's output; the tests below also check that it does catch each violation, and
pin the two algorithms' defining choices on hand-made clusters.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import quality  # noqa: E402
from bench.quality_refs import Cluster, Gang, place_k8s, place_kueue, run_sequential  # noqa: E402

from gangsched_testing.builders import BLOCK, RACK, pod, topology_nodes  # noqa: E402

TINY = 128  # nodes: 2 zones x 1 block x 4 racks x 16 hosts


@pytest.fixture(scope="module")
def tiny() -> quality.SeedResult:
    return quality.run_seed(3, TINY)


def test_tiny_run_is_valid_and_deterministic(tiny: quality.SeedResult) -> None:
    # run_seed replays every placer through evaluate, which asserts the invariants.
    assert [q.placer for q in tiny.results] == list(quality.PLACERS)
    assert tiny.heroes == 3
    assert tiny.trace_gpus >= quality.TRACE_SHARE * tiny.free_gpus
    again = quality.run_seed(3, TINY)
    assert quality.table([tiny]) == quality.table([again])
    for q in tiny.results:
        assert 0 < q.gangs <= tiny.trace_gangs + tiny.heroes
        assert q.gpus <= tiny.free_gpus
    assert "| 3 | kueue-bf |" in quality.table([tiny])


@pytest.mark.parametrize("placer", [place_k8s, place_kueue])
def test_references_keep_the_invariants(tiny: quality.SeedResult, placer: quality.Placer) -> None:
    nodes, bound = quality.build_cluster(3, TINY)
    cluster = Cluster.build(nodes, bound)
    gangs = quality.reference_gangs(tiny.queue)
    placed = run_sequential(placer, cluster, gangs)
    assert placed
    # evaluate: every gang whole, inside one Required value, no node over capacity.
    quality.evaluate(placer.__name__, cluster, tiny.queue, placed)
    # and directly: free capacity never below zero once all is applied
    state = cluster.copy()
    by_name = {g.name: g for g in gangs}
    for name, placement in placed.items():
        state.apply(placement, by_name[name].request)
    assert (state.free >= 0).all()


def test_evaluate_catches_each_violation(tiny: quality.SeedResult) -> None:
    nodes, bound = quality.build_cluster(3, TINY)
    cluster = Cluster.build(nodes, bound)
    good = tiny.results[2].placed
    hero = next(s for s in tiny.queue if s.hero and s.name in good)
    partial = {**good, hero.name: dict(list(good[hero.name].items())[:-1])}
    with pytest.raises(AssertionError, match="partly placed"):
        quality.evaluate("x", cluster, tiny.queue, partial)
    blocks = {cluster.paths[i][1] for i in range(len(nodes))}
    assert len(blocks) == 2
    other = next(
        i for i in range(len(nodes)) if cluster.paths[i][1] != cluster.paths[next(iter(good[hero.name]))][1]
    )
    spread = dict(good[hero.name])
    first = next(iter(spread))
    spread[first] -= 1
    if not spread[first]:
        del spread[first]
    spread[other] = spread.get(other, 0) + 1
    with pytest.raises(AssertionError, match=f"spans .* of {BLOCK}"):
        quality.evaluate("x", cluster, tiny.queue, {**good, hero.name: spread})
    over = {**good, hero.name: {first: hero.pods}}
    with pytest.raises(AssertionError, match="over capacity"):
        quality.evaluate("x", cluster, tiny.queue, over)


def _one_rack(free_gpus: list[int]) -> Cluster:
    """One rack of 8-GPU nodes whose free GPUs are `free_gpus` (the rest bound)."""
    nodes = topology_nodes(1, 1, 1, len(free_gpus), gpu=8)
    bound = [
        pod(f"bg-{n.name}", gpu=8 - f, node_name=n.name, scheduler="other")
        for n, f in zip(nodes, free_gpus, strict=True)
        if f < 8
    ]
    return Cluster.build(nodes, bound)


def test_kueue_best_fit_takes_largest_first_and_the_tightest_last() -> None:
    # The KEP's example: capacities 3, 3, 2, 1 and 7 pods -> 3 + 3, then the node of 1.
    cluster = _one_rack([3, 3, 2, 1])
    gang = Gang("g", 7, dict(pod("x", gpu=1).requests), preferred=RACK)
    assert place_kueue(cluster, gang) == {0: 3, 1: 3, 3: 1}
    # Unconstrained: LeastFreeCapacity, the host with the fewest pod slots that holds the gang.
    single = Gang("s", 1, dict(pod("x", gpu=1).requests))
    assert place_kueue(cluster, single) == {3: 1}
    pair = Gang("p", 2, dict(pod("x", gpu=1).requests))
    assert place_kueue(cluster, pair) == {2: 2}


def test_kueue_required_block_is_the_tightest_block() -> None:
    nodes = topology_nodes(1, 2, 1, 2, gpu=8)  # blocks b0, b1: one rack of two hosts each
    bound = [pod("bg", gpu=4, node_name=nodes[2].name, scheduler="other")]
    cluster = Cluster.build(nodes, bound)
    gang = Gang("g", 3, dict(pod("x", gpu=4).requests), required=BLOCK)
    assert place_kueue(cluster, gang) == {2: 1, 3: 2}
    assert place_kueue(cluster, Gang("big", 5, dict(pod("x", gpu=4).requests), required=BLOCK)) is None


def test_k8s_places_pods_most_allocated_and_ignores_preferred() -> None:
    cluster = _one_rack([8, 2, 8, 6])
    gang = Gang("g", 2, dict(pod("x", cpu="1", memory="1Gi", gpu=2).requests), preferred=RACK)
    # The first pod goes to the fullest node that fits (2 free), the second to the next (6 free).
    assert place_k8s(cluster, gang) == {1: 1, 3: 1}
    too_big = Gang("big", 5, dict(pod("x", gpu=8).requests))
    assert place_k8s(cluster, too_big) is None
    assert run_sequential(place_k8s, cluster, [too_big, gang]) == {"g": {1: 1, 3: 1}}
