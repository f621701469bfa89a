"""The end-to-end benchmark (bench/e2e) at small N: correctness only, never speed.

24 nodes, a seeded workload needing half the cluster's GPUs, each contestant in turn on the
session's control plane: gangsched, and kube-scheduler v1.36.3 when the binary was built.
Every gang fits at once, so every gang must be placed, none may ever be partial, and none
may break its Required domain. The bare binder (hack/bare-binder) only has to bind every pod:
it schedules nothing. Without its binary that test skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from gangsched_testing import ci, devcluster

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `pytest` without `python -m` does not put the repo root there
    sys.path.insert(0, str(REPO))

from bench.e2e import fifo, metrics, report  # noqa: E402
from bench.e2e.harness import Bench, Options, bare_binder_binary  # noqa: E402
from bench.e2e.workload import (  # noqa: E402
    GPUS_PER_NODE,
    Feed,
    Flavour,
    Topology,
    generate,
    generate_preemption,
    node_domains,
)

pytestmark = pytest.mark.integration


def test_small_benchmark_places_every_gang_whole(
    control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    topology = Topology(nodes=24, rack_size=4, racks_per_block=3)
    workload = generate(topology, seed=7, oversubscription=0.5)
    assert any(g.is_group and g.required for g in workload.gangs)
    options = Options(pool=f"t{uuid.uuid4().hex[:6]}", quiet=8.0, timeout=60.0, log=lambda _: None)
    contestants: list[Flavour] = ["gangsched"]
    if control_plane.binaries.kube_scheduler is not None:
        contestants.append("native")
    domains = node_domains(topology, pool=options.pool)
    figures: dict[str, list[metrics.Figures]] = {}
    with Bench(control_plane, workload, options, tmp_path) as bench:
        for flavour in contestants:
            fig = metrics.compute(bench.run(flavour), workload, domains, gap=options.gap)
            figures[flavour] = [fig]
            where = f"{flavour}: {fig.as_dict()}"
            assert fig.partial_gangs == 0, where
            assert fig.required_violations == 0, where
            assert fig.gangs_placed == len(workload.gangs), where
            assert fig.pods_bound == workload.pods, where
            assert fig.stranded_gangs == 0, where
    assert "| partial gangs ever observed (must be 0) | 0 |" in report.table(figures)
    # The table needs no plotting library: asked in a fresh interpreter, as another test of the
    # session (the plot's) may have imported matplotlib into this one.
    code = "import sys; from bench.e2e import report; report.table({}); "
    code += "assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_small_fifo_rounds_benchmark_runs_strict_fifo_in_order(
    control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    """The fifo-rounds workload at 8 nodes, 12 gangs, pods running 2 s: the node agent
    finishes every pod, and gangsched with StrictFIFO starts every gang in submission order;
    BestEffortFIFO starts and finishes every gang too."""
    topology = Topology(nodes=8, rack_size=4, racks_per_block=2)
    workload = fifo.generate_fifo_rounds(topology, seed=fifo.FIFO_SEED, gangs=12)
    sizes = [len(g.pods) for g in workload.gangs]
    assert len(fifo.strict_rounds(sizes, topology.nodes)) > 1  # some gang has to wait
    options = Options(
        pool=f"t{uuid.uuid4().hex[:6]}",
        quiet=8.0,
        timeout=120.0,
        agent=True,
        run_seconds=2.0,
        log=lambda _: None,
    )
    runs = {
        "gangsched-strict": ("--queueing-strategy", "StrictFIFO"),
        "gangsched": (),
    }
    with Bench(control_plane, workload, options, tmp_path) as bench:
        for variant, extra in runs.items():
            rec = bench.run("gangsched", variant=variant if extra else None, extra_args=extra)
            assert rec.contestant == variant
            fig = fifo.compute_fifo(rec, workload, run_seconds=2.0)
            where = f"{variant}: {fig.as_dict()}"
            assert fig.gangs_started == len(workload.gangs), where
            assert fig.pods_finished == workload.pods, where
            bound = {e.pod: e.t for e in rec.events if e.kind == "bound"}
            ran = [e.t - bound[e.pod] for e in rec.events if e.kind == "finished"]
            assert len(ran) == workload.pods, where
            assert min(ran) >= 2.0, where  # the node agent finished each pod after its run time
            if variant == "gangsched-strict":
                assert fig.inversions == 0, where


def test_small_dra_benchmark_allocates_every_device_once(
    controller_manager: devcluster.ControlPlane, tmp_path: Path
) -> None:
    """The dra workload: 20 nodes whose 8 GPUs are fake-driver devices, a one-GPU claim template
    per GPU pod, half the devices asked for. Both contestants must place every gang whole and
    hand out every device once (the DRA oracle over all the claims)."""
    topology = Topology(nodes=20, rack_size=5, racks_per_block=2)
    workload = generate(topology, seed=7, oversubscription=0.5, kind="dra")
    assert any(g.is_group and g.required for g in workload.gangs)
    options = Options(pool=f"t{uuid.uuid4().hex[:6]}", quiet=8.0, timeout=60.0, log=lambda _: None)
    contestants: list[Flavour] = ["gangsched"]
    if controller_manager.binaries.kube_scheduler is not None:
        contestants.append("native")
    domains = node_domains(topology, pool=options.pool)
    figures: dict[str, list[metrics.Figures]] = {}
    with Bench(controller_manager, workload, options, tmp_path) as bench:
        for flavour in contestants:
            fig = metrics.compute(bench.run(flavour), workload, domains, gap=options.gap)
            figures[flavour] = [fig]
            where = f"{flavour}: {fig.as_dict()}"
            assert fig.partial_gangs == 0, where
            assert fig.required_violations == 0, where
            assert fig.gangs_placed == len(workload.gangs), where
            assert fig.pods_bound == workload.pods, where
            assert fig.devices_allocated_twice == 0, where
            assert fig.bound_without_device == 0, where
            assert fig.claims_allocated == workload.gpus, where
            assert fig.stranded_gangs == 0, where
            # The resourceclaim controller's writes are not the scheduler's.
            assert report.scheduler_writes(fig) < sum(fig.api_requests.values()), where
    assert "| devices allocated twice (must be 0) | 0 |" in report.table(figures)


def test_small_jobs_benchmark_places_every_gang_whole_as_with_pod_groups(
    controller_manager: devcluster.ControlPlane, tmp_path: Path
) -> None:
    """`--workload jobs` on 24 nodes: the gangs of the small gpu workload, launcher gangs
    included, as Indexed Jobs the real Job controller turns into pods; gangsched forms their
    automatic gangs and must place every one whole, as it does with the same gangs as
    PodGroups (the baseline, run second) and as Jobs labelled into PodGroups created first."""
    topology = Topology(nodes=24, rack_size=4, racks_per_block=3)
    workload = generate(topology, seed=5, oversubscription=0.5, kind="jobs")
    assert any(g.launcher for g in workload.gangs)
    assert any(not g.is_group for g in workload.gangs)
    assert any(g.is_group and g.required for g in workload.gangs)
    options = Options(pool=f"t{uuid.uuid4().hex[:6]}", quiet=8.0, timeout=60.0, log=lambda _: None)
    domains = node_domains(topology, pool=options.pool)
    figures: dict[str, list[metrics.Figures]] = {}
    with Bench(controller_manager, workload, options, tmp_path) as bench:
        feeds: tuple[Feed, ...] = ("jobs", "podgroups", "labelled-jobs")
        for feed in feeds:
            jobs = feed == "jobs"
            rec = bench.run("gangsched", feed=feed)
            assert rec.contestant == feed
            fig = metrics.compute(rec, workload, domains, gap=options.gap)
            figures[rec.contestant] = [fig]
            where = f"{rec.contestant}: {fig.as_dict()}"
            assert fig.pods_created == workload.pods, where
            assert fig.partial_gangs == 0, where
            assert fig.required_violations == 0, where
            assert fig.gangs_placed == len(workload.gangs), where
            assert fig.pods_bound == workload.pods, where
            assert fig.stranded_gangs == 0, where
            assert fig.submit_latency_p50 >= fig.gang_latency_p50 - 0.05, where
            # One label per pod of an automatic gang (single pods are plain); none when the
            # Jobs' pods carry it. The Job controller created the pods, not the benchmark.
            members = sum(len(g.pods) for g in workload.gangs if g.is_group)
            patches = fig.api_requests.get("PATCH pods", 0)
            assert patches >= members if jobs else patches < members, where
            if feed != "podgroups":
                jobs_created = len(workload.gangs) + sum(g.launcher for g in workload.gangs)
                assert fig.api_requests.get("POST jobs", 0) == jobs_created, where
    table = report.jobs_table(figures)
    assert "| partial gangs ever observed (must be 0) | 0 | 0 | 0 |" in table
    assert "Jobs / PodGroups" in table


def test_small_preemption_benchmark_evicts_whole_gangs(
    control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    """The preemption workload (`--workload preemption`): 20 nodes filled with low-priority
    gangs, then 4 high-priority gangs (half the GPUs) one every half second. gangsched must run
    every high gang by preempting and never delete part of a low gang; kube-scheduler (with
    WorkloadAwarePreemption) runs too when built, its figures are only required to exist."""
    topology = Topology(nodes=20, rack_size=5, racks_per_block=2)
    workload = generate_preemption(topology, seed=3, high_share=0.5)
    assert any(g.pods[0].gpus == 4 for g in workload.low)
    assert len(workload.high) >= 3
    options = Options(
        pool=f"t{uuid.uuid4().hex[:6]}", quiet=6.0, timeout=45.0, interval=0.5, log=lambda _: None
    )
    contestants: list[Flavour] = ["gangsched"]
    if control_plane.binaries.kube_scheduler is not None:
        contestants.append("native")
    figures: dict[str, list[metrics.PreemptionFigures]] = {}
    with Bench(control_plane, workload, options, tmp_path) as bench:
        for flavour in contestants:
            fig = metrics.compute_preemption(bench.run(flavour), workload, gap=options.gap)
            figures[flavour] = [fig]
            where = f"{flavour}: {fig.as_dict()}"
            assert fig.low_bound_at_saturation == fig.low_pods, where
            assert fig.high_placed + len(fig.high_unplaced) == len(workload.high), where
            if flavour == "gangsched":
                assert fig.high_placed == len(workload.high), where
                assert fig.victims > 0, where
                assert fig.preemptions > 0, where
                assert fig.unattributed_victims == 0, where
                assert fig.partial_victim_gangs == 0, where
                assert fig.partial_gangs == 0, where
    assert (
        "| partial victim gangs, some not all members deleted (must be 0) | 0 |"
        in report.preemption_table({"gangsched": figures["gangsched"]})
    )


def _need_bare_binder() -> None:
    """Skip without the bare binder's binary; under CI=true (which builds it) fail instead."""
    if bare_binder_binary() is None:
        ci.missing(
            "no bare-binder binary: run `make bare-binder` (needs Go >= 1.26) or set GANGSCHED_K8S_BIN"
        )


def test_small_benchmark_bare_binder_binds_every_pod(
    control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    """`--contestants bare` on 24 nodes with 1.25x the GPUs asked for: the bare binder binds every
    pod anyway, round-robin over the pool's nodes (over-committing them), with one write per pod,
    and the table reads n/a where placement and correctness do not apply."""
    _need_bare_binder()
    topology = Topology(nodes=24, rack_size=4, racks_per_block=3)
    workload = generate(topology, seed=7, oversubscription=1.25)
    options = Options(
        pool=f"t{uuid.uuid4().hex[:6]}", quiet=8.0, timeout=60.0, concurrency=8, log=lambda _: None
    )
    domains = node_domains(topology, pool=options.pool)
    with Bench(control_plane, workload, options, tmp_path) as bench:
        rec = bench.run("bare")
    fig = metrics.compute(rec, workload, domains, gap=options.gap)
    where = f"bare: {fig.as_dict()}"
    assert fig.pods_bound == workload.pods == fig.pods_created, where
    assert fig.gangs_placed == len(workload.gangs), where
    assert fig.gpu_utilisation > 1.0, where  # more GPUs bound than the nodes have
    assert rec.stranded is None, where  # no oracle on over-committed nodes
    nodes = Counter(e.node for e in rec.events if e.kind == "bound")
    assert set(nodes) == set(domains), nodes  # round-robin over the pool, and only the pool
    assert max(nodes.values()) - min(nodes.values()) <= 1, nodes
    assert report.scheduler_writes(fig) == fig.pods_bound, fig.api_requests  # one binding per pod
    table = report.table({"bare": [fig]})
    assert "| partial gangs ever observed (must be 0) | n/a |" in table
    assert "| GPU utilisation at saturation (bound / total) | n/a |" in table
    assert GPUS_PER_NODE * len(domains) < workload.gpus
