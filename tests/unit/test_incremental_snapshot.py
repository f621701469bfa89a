"""The snapshot kept from cycle to cycle (cluster.snapshots, issue 27) against one built from
scratch: after any sequence of watch events, assumptions, forgets, node changes and LISTs, the
kept snapshot, the cycle's pods and the bound pods preemption reads are what the cache's full
view gives; a cycle rewrites only the rows of the nodes that changed; status-only pod events
skip the parse and give what a parse gives."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.cluster import ClusterCache
from gangsched.cluster.kinds import POD
from gangsched.cluster.snapshots import SnapshotKeeper
from gangsched.engine import BoundPods, CycleInput, Snapshot, decide, schedule_cycle
from gangsched.engine.preemption import SYSTEM_CRITICAL
from gangsched.engine.queue import build_queue
from gangsched.model import parse_pod
from gangsched.model.pod import with_status
from gangsched_testing.builders import node_manifest, pod_group_manifest, pod_manifest
from gangsched_testing.properties import examples

NODES = ["n0", "n1", "n2", "n3"]
SCHEDULER = "gangsched"
MILLI = 1000  # quantities are held in milli-units


def _free(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """Free capacity by (node, resource), leaving out what is zero everywhere it could be."""
    out = {}
    for resource, column in snapshot.columns.items():
        for row, node in enumerate(snapshot.nodes):
            used = int(snapshot.used[row, column])
            allocatable = int(snapshot.allocatable[row, column])
            if used or allocatable:
                out[(node.name, resource)] = allocatable - used
    return out


def _static(snapshot: Snapshot) -> list[Any]:
    return [(n.name, n.labels, n.taints, n.ready, n.allocatable) for n in snapshot.nodes]


class World:
    """A cache fed events, with the keeper a scheduler holds, and a versions counter."""

    def __init__(self) -> None:
        self.cache = ClusterCache()
        self.keeper = SnapshotKeeper(self.cache.node_infos, lambda: self.cache.nodes)
        self.rv = 10
        self.nodes: dict[str, dict[str, Any]] = {}

    def version(self) -> str:
        self.rv += 1
        return str(self.rv)

    def node(self, name: str, gpu: int, rack: str) -> None:
        body = node_manifest(name, gpu=gpu, labels={"rack": rack}, resource_version=self.version())
        self.nodes[name] = body
        self.cache.apply("nodes", "MODIFIED", body)

    def pod(
        self,
        name: str,
        *,
        scheduler: str,
        node: str | None,
        gpu: int,
        phase: str | None = None,
        priority: int | None = None,
    ) -> None:
        group = "g" if scheduler == SCHEDULER and name.endswith("m") else None
        body = pod_manifest(
            name,
            group,
            namespace="ns",
            uid=f"uid-{name}",
            scheduler=scheduler,
            node_name=node,
            gpu=gpu,
            cpu="500m",
            priority=priority if priority is not None else (int(name[-2]) if name[-2].isdigit() else 0),
            phase=phase,
            resource_version=self.version(),
        )
        self.cache.apply("pods", "MODIFIED", body)

    def check(self) -> None:
        cache = self.cache
        kept = self.keeper.snapshot()
        every = cache.pods_for_engine()
        fresh = Snapshot(list(cache.nodes.values()), [p for p in every if p.holds_resources])
        assert _free(kept) == _free(fresh)
        assert _static(kept) == _static(fresh)
        for key in ("rack", "kubernetes.io/hostname"):
            codes, values = kept.label_codes(key)
            fresh_codes, fresh_values = fresh.label_codes(key)
            assert [n.labels.get(key) for n in kept.nodes] == [n.labels.get(key) for n in fresh.nodes]
            assert len(codes) == len(fresh_codes)
            assert set(values) == set(fresh_values)
        # The cycle's pods: this scheduler's and every group's member, as the full view shows them.
        relevant = [p for p in every if p.scheduler_name == SCHEDULER or p.pod_group is not None]
        assert sorted(map(repr, cache.queue_pods(SCHEDULER))) == sorted(map(repr, relevant))
        bound = cache.bound_pods()
        expected = BoundPods.of(every)
        assert sorted(map(repr, bound.read())) == sorted(map(repr, expected.read()))
        assert bound.terminating == expected.terminating
        assert bound.lowest_priority == expected.lowest_priority


_names = st.sampled_from(["a0", "b1", "c2m", "d0m", "e3", "f1m"])
_ops = st.one_of(
    st.tuples(st.just("node"), st.sampled_from(NODES), st.integers(0, 8), st.sampled_from(["r0", "r1"])),
    st.tuples(
        st.just("pod"),
        _names,
        st.sampled_from([SCHEDULER, "default-scheduler"]),
        st.sampled_from([None, *NODES, "ghost"]),
        st.integers(0, 2),
    ),
    st.tuples(st.just("finish"), _names),
    st.tuples(st.just("delete"), _names),
    st.tuples(st.just("delete-node"), st.sampled_from(NODES)),
    st.tuples(st.just("assume"), st.integers(0, 5), st.sampled_from(NODES)),
    st.tuples(st.just("forget"), st.integers(0, 5)),
    st.tuples(
        st.just("list-pods"),
    ),
    st.tuples(
        st.just("check"),
    ),
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ops, max_size=40))
def test_the_kept_snapshot_is_the_one_built_from_scratch(ops: list[tuple[Any, ...]]) -> None:
    world = World()
    for name in NODES[:3]:
        world.node(name, 8, "r0")
    held: dict[str, dict[str, Any]] = {}
    for op in ops:
        kind = op[0]
        cache = world.cache
        if kind == "node":
            world.node(op[1], op[2], op[3])
        elif kind == "pod":
            _, name, scheduler, node, gpu = op
            world.pod(name, scheduler=scheduler, node=node, gpu=gpu)
            held[name] = dict(cache.store.body(POD, ("ns", name)) or {})
        elif kind == "finish" and ("ns", op[1]) in cache.pods:
            pod = cache.pods[("ns", op[1])]
            world.pod(
                op[1], scheduler=pod.scheduler_name, node=pod.node_name or None, gpu=0, phase="Succeeded"
            )
        elif kind == "delete":
            cache.remove("pods", ("ns", op[1]))
        elif kind == "delete-node":
            cache.remove("nodes", ("", op[1]))
        elif kind == "assume":
            # The i-th pending pod (an assumption of a bound pod is refused anyway).
            pending = [p for p in cache.pods.values() if not p.node_name and not cache.is_assumed(p.key)]
            if pending:
                cache.assume(group=("ns", "g"), pod=pending[op[1] % len(pending)], node=op[2])
        elif kind == "forget":
            assumed = [key for key in cache.pods if cache.is_assumed(key)]
            if assumed:
                cache.forget(assumed[op[1] % len(assumed)])
        elif kind == "list-pods":
            # The reflector's re-list: the same pods at a newer version (nothing vanishes).
            items = []
            for key, pod in cache.pods.items():
                body = pod_manifest(
                    key[1],
                    pod.pod_group,
                    namespace="ns",
                    uid=pod.uid,
                    scheduler=pod.scheduler_name,
                    node_name=pod.node_name or None,
                    gpu=pod.requests.get("nvidia.com/gpu", 0),
                    cpu="500m",
                    priority=pod.priority,
                    phase=pod.phase,
                    resource_version=world.version(),
                )
                items.append(body)
            cache.replace("pods", items, world.version())
        elif kind == "check":
            world.check()
    world.check()


def test_a_cycle_rewrites_only_the_rows_of_the_nodes_that_changed() -> None:
    world = World()
    for i in range(50):
        world.node(f"n{i}", 8, f"r{i // 10}")
    for i in range(500):
        world.pod(f"other-{i}0", scheduler="default-scheduler", node=f"n{i % 50}", gpu=0)
    keeper = world.keeper
    keeper.snapshot()
    assert keeper.last_rows == 50  # the first: every row
    keeper.snapshot()
    assert keeper.last_rows == 0  # nothing changed
    world.pod("late0", scheduler="default-scheduler", node="n7", gpu=1)
    world.pod("late1", scheduler="default-scheduler", node="n9", gpu=1)
    snapshot = keeper.snapshot()
    assert keeper.last_rows == 2
    assert int(snapshot.free[snapshot.index["n7"], snapshot.columns["nvidia.com/gpu"]]) == 7 * MILLI
    # A pod of ours assumed to a node is counted there before the watch shows it bound.
    world.pod("mine0", scheduler=SCHEDULER, node=None, gpu=2)
    world.cache.assume(group=("ns", "mine0"), pod=world.cache.pods[("ns", "mine0")], node="n3")
    snapshot = keeper.snapshot()
    assert keeper.last_rows == 1
    assert int(snapshot.free[snapshot.index["n3"], snapshot.columns["nvidia.com/gpu"]]) == 6 * MILLI
    # A node relabelled: its row and the label caches; a node added: the whole table again.
    world.node("n3", 8, "r9")
    snapshot = keeper.snapshot()
    assert keeper.last_rows == 1
    assert snapshot.nodes[snapshot.index["n3"]].labels["rack"] == "r9"
    world.node("n50", 8, "r5")
    keeper.snapshot()
    assert keeper.last_rows == 51
    world.check()


def test_a_copy_handed_out_keeps_what_it_was_given() -> None:
    world = World()
    world.node("n0", 8, "r0")
    world.node("n1", 8, "r0")
    keeper = world.keeper
    first = keeper.snapshot()
    gpu = first.columns["nvidia.com/gpu"]
    first.used[0, gpu] += 3 * MILLI  # the engine places on its copy
    world.pod("x0", scheduler="default-scheduler", node="n1", gpu=5)
    world.node("n0", 4, "r1")
    second = keeper.snapshot()
    assert int(first.free[1, gpu]) == 8 * MILLI
    assert int(first.allocatable[0, gpu]) == 8 * MILLI
    assert first.nodes[0].labels["rack"] == "r0"
    assert int(second.free[0, gpu]) == 4 * MILLI
    assert int(second.free[1, gpu]) == 3 * MILLI


def test_the_operator_cycle_on_the_kept_snapshot_decides_as_on_a_fresh_one() -> None:
    world = World()
    for i in range(8):
        world.node(f"n{i}", 8, f"r{i // 4}")
    for i in range(40):
        world.pod(f"busy-{i}0", scheduler="default-scheduler", node=f"n{i % 5}", gpu=1)
    world.cache.apply(
        "podgroups", "ADDED", pod_group_manifest("g", 4, namespace="ns", topology=[("rack", "Required")])
    )
    for i in range(4):
        world.pod(f"p{i}m", scheduler=SCHEDULER, node=None, gpu=4)
    cache = world.cache
    groups = list(cache.pod_groups.values())
    pods = cache.queue_pods(SCHEDULER)
    kept = decide(
        CycleInput.for_operator(
            snapshot=world.keeper.snapshot(),
            queue=build_queue(pods, groups, scheduler_name=SCHEDULER, waiting_seconds={}),
            bound=cache.bound_pods(),
            pods=pods,
            pod_groups=groups,
        )
    )
    fresh = schedule_cycle(nodes=list(cache.nodes.values()), pods=cache.pods_for_engine(), pod_groups=groups)
    assert [(d.key, d.reason, d.assignments) for d in kept.decisions] == [
        (d.key, d.reason, d.assignments) for d in fresh.decisions
    ]
    assert kept.decisions[0].scheduled


def test_preemption_reads_the_bound_pods_only_when_some_could_be_victims() -> None:
    world = World()
    world.node("n0", 8, "r0")
    world.pod("busy0", scheduler="default-scheduler", node="n0", gpu=8)
    world.cache.apply("podgroups", "ADDED", pod_group_manifest("g", 1, namespace="ns"))
    cache = world.cache
    reads = []

    def cycle(priority: int) -> None:
        bound = cache.bound_pods()

        def read() -> Any:
            reads.append(priority)
            return bound.read()

        pods = [dataclasses.replace(p, priority=priority) for p in cache.queue_pods(SCHEDULER)]
        groups = list(cache.pod_groups.values())
        decide(
            CycleInput.for_operator(
                snapshot=world.keeper.snapshot(),
                queue=build_queue(pods, groups, scheduler_name=SCHEDULER, waiting_seconds={}),
                bound=BoundPods(read, bound.lowest_priority, bound.terminating),
                pods=pods,
                pod_groups=groups,
            )
        )

    world.pod("q0m", scheduler=SCHEDULER, node=None, gpu=1)
    cycle(0)  # priority 0 never preempts
    assert cache.bound_pods().lowest_priority == 0
    cycle(1)  # the busy pod runs at 0: it may be a victim, so the bound pods are read
    assert reads == [1]
    world.pod("busy0", scheduler="default-scheduler", node="n0", gpu=8, priority=5)
    cycle(3)  # nothing runs below 3 and nothing terminates: not read
    assert reads == [1]
    assert BoundPods.of([]).lowest_priority == SYSTEM_CRITICAL


def test_a_status_only_event_is_not_parsed_and_reads_as_a_parse_would() -> None:
    cache = ClusterCache()
    body = pod_manifest("p", "g", uid="u", node_name="n1", gpu=1, priority=5, resource_version="5")
    cache.apply("pods", "ADDED", body)
    parsed = cache.pods[("ml", "p")]
    status: dict[str, Any] = {
        "phase": "Running",
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}],
    }
    running = {**body, "metadata": {**body["metadata"], "resourceVersion": "6"}, "status": status}
    calls = []
    original = POD.parse

    def counting(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    object.__setattr__(POD, "parse", counting)
    try:
        cache.apply("pods", "MODIFIED", running)
        assert calls == []  # refreshed, not parsed
        refreshed = cache.pods[("ml", "p")]
        assert refreshed == parse_pod(running)
        assert refreshed.shape is parsed.shape
        # A change of the spec or of the metadata the model reads is parsed in full.
        relabelled = {
            **running,
            "metadata": {**running["metadata"], "labels": {"x": "y"}, "resourceVersion": "7"},
        }
        cache.apply("pods", "MODIFIED", relabelled)
        assert calls == [1]
        assert cache.pods[("ml", "p")].pod_group is None
    finally:
        object.__setattr__(POD, "parse", original)


@settings(max_examples=examples(200), deadline=None)
@given(
    phase=st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed"]),
    reason=st.sampled_from([None, "Unschedulable", "SchedulingGated"]),
    start=st.sampled_from([None, "2026-01-01T00:00:00Z"]),
    claims=st.lists(st.sampled_from(["a", "b"]), unique=True),
    extended=st.sampled_from([None, "p-ext"]),
)
def test_with_status_equals_a_parse(
    phase: str | None, reason: str | None, start: str | None, claims: list[str], extended: str | None
) -> None:
    body = pod_manifest("p", "g", uid="u", gpu=1, priority=1, resource_version="5")
    old = parse_pod(body)
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if reason:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason}]
    if start:
        status["startTime"] = start
    if claims:
        status["resourceClaimStatuses"] = [{"name": c, "resourceClaimName": f"p-{c}"} for c in claims]
    if extended:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": extended}
    new = {**body, "metadata": {**body["metadata"], "resourceVersion": "9"}, "status": status}
    assert with_status(old, new) == parse_pod(new)
