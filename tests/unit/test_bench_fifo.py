"""bench/e2e's fifo-rounds workload (issue 26) in its pure parts: the stream, the ideal rounds,
and the figures (inversions, gaps between rounds, occupancy) on made-up recordings."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.e2e import __main__ as cli  # noqa: E402
from bench.e2e import fifo, report  # noqa: E402
from bench.e2e.metrics import PodEvent, Recording  # noqa: E402
from bench.e2e.workload import GPUS_PER_NODE, Topology  # noqa: E402

TOPOLOGY = Topology(nodes=32, rack_size=8)


def test_the_stream_of_the_issue_takes_nine_rounds() -> None:
    sizes = fifo.fifo_sizes(fifo.FIFO_SEED)
    assert len(sizes) == fifo.FIFO_GANGS == 53
    assert min(sizes) == 1
    assert max(sizes) == 32
    assert len(fifo.strict_rounds(sizes, 32)) == 9
    assert fifo.ideal_makespan(sizes, 32, 30.0) == 270.0
    assert fifo.fifo_sizes(fifo.FIFO_SEED) == sizes  # fixed
    assert fifo.fifo_sizes(fifo.FIFO_SEED + 1) != sizes


def test_workload_is_whole_node_gangs_named_in_submission_order() -> None:
    workload = fifo.generate_fifo_rounds(TOPOLOGY)
    names = [g.name for g in workload.gangs]
    assert names == sorted(names)  # the queue breaks timestamp ties by name
    assert [len(g.pods) for g in workload.gangs] == list(fifo.fifo_sizes(fifo.FIFO_SEED))
    assert all(p.gpus == GPUS_PER_NODE for g in workload.gangs for p in g.pods)
    assert all(g.required is None and not g.preferred_rack for g in workload.gangs)
    assert workload.kind == "fifo-rounds"


def test_strict_rounds_take_consecutive_gangs_only() -> None:
    # 3 + 2 fill 5 nodes; 4 does not fit next to them, and the 1 after it may not pass it
    assert fifo.strict_rounds([3, 2, 4, 1, 5], 5) == [[0, 1], [2, 3], [4]]
    assert fifo.strict_rounds([], 5) == []
    with pytest.raises(ValueError, match="more than the cluster"):
        fifo.strict_rounds([6], 5)


def test_ideal_curve_holds_each_round_for_the_run_time() -> None:
    xs, ys = fifo.ideal_curve([3, 2, 4, 1], 5, 10.0)
    assert xs == [0.0, 10.0, 20.0]
    assert ys == [5 * GPUS_PER_NODE, 5 * GPUS_PER_NODE, 0]


def test_inversions_count_gangs_started_before_one_ahead() -> None:
    assert fifo.inversions([0.0, 0.2, 30.0, 30.4]) == 0
    # the last two passed gang 2, which started at 60
    assert fifo.inversions([0.0, 1.0, 60.0, 5.0, 7.0]) == 2
    # bindings of one cycle landing in another order are within the tie
    assert fifo.inversions([0.0, 0.9, 0.5], tie=1.0) == 0
    assert fifo.inversions([0.0, 3.0, 0.5], tie=1.0) == 1
    # a gang never started is passed by every later gang that started
    assert fifo.inversions([0.0, math.inf, 2.0, 3.0]) == 2


def test_head_gaps_measure_the_head_fitting_without_starting() -> None:
    # 4 nodes; gang 0 (4 pods) runs 1..31; gang 1 (2 pods) binds at 31.5 and 32.0
    changes = [(1.0, 0, 1)] * 4 + [(31.0, 0, -1)] * 4 + [(31.5, 1, 1), (32.0, 1, 1)]
    gaps = fifo.head_gaps([4, 2], 4, [0.0, 0.0], changes)
    assert gaps.largest == pytest.approx(1.0)
    assert gaps.largest_at == pytest.approx(31.0)
    assert gaps.total == pytest.approx(1.0)


def test_head_gaps_do_not_count_a_head_that_does_not_fit() -> None:
    # gang 0 holds 3 of 4 nodes until 30; gang 1 needs 2 and starts as soon as it frees them;
    # gang 2 (1 pod) runs beside gang 0 from 0.1: backfilled, gang 1 does not fit meanwhile
    changes = [(0.0, 0, 1)] * 3 + [(0.1, 2, 1), (30.0, 0, -1), (30.0, 0, -1), (30.0, 0, -1)]
    changes += [(30.0, 1, 1), (30.0, 1, 1)]
    gaps = fifo.head_gaps([3, 2, 1], 4, [0.0, 0.0, 0.0], changes)
    assert gaps.largest == 0.0
    assert gaps.total == 0.0


def _strict_run(run: float, delay: float) -> Recording:
    """A made-up run of the stream in strict rounds, each `delay` after the previous ended."""
    workload = fifo.generate_fifo_rounds(TOPOLOGY)
    rec = Recording(contestant="gangsched-strict")
    for gang in workload.gangs:
        for pod in gang.pods:
            rec.created[gang.pod_name(pod)] = 0.0
    start = delay
    rounds = fifo.strict_rounds([len(g.pods) for g in workload.gangs], TOPOLOGY.nodes)
    for members in rounds:
        for i in members:
            gang = workload.gangs[i]
            for n, pod in enumerate(gang.pods):
                name = gang.pod_name(pod)
                rec.events.append(PodEvent(start + 0.001 * n, name, "bound", f"n{n}"))
                rec.events.append(PodEvent(start + run + 0.001 * n, name, "finished", f"n{n}"))
        start += run + 0.001 * 31 + delay
    rec.end = start
    return rec


def test_compute_fifo_on_a_strict_run() -> None:
    workload = fifo.generate_fifo_rounds(TOPOLOGY)
    rec = _strict_run(30.0, 0.5)
    figures = fifo.compute_fifo(rec, workload, run_seconds=30.0)
    assert figures.rounds == 9
    assert figures.gangs_started == 53
    assert figures.pods_finished == workload.pods
    assert figures.inversions == 0
    # nine rounds of 30 s (and their bindings' spread of up to 31 ms), eight gaps, the first start
    assert figures.makespan_s == pytest.approx(9 * 30.0 + 8 * 0.5 + 0.5, abs=0.3)
    assert figures.occupancy == pytest.approx(270.0 / figures.makespan_s)
    # the delay between rounds: the head fits once the round before has ended
    assert figures.largest_gap_s == pytest.approx(0.5, abs=0.07)
    assert figures.total_gap_s == pytest.approx(8 * 0.5, abs=0.5)
    assert figures.first_start_s == pytest.approx(0.5)
    held = workload.pods * 30.0 * GPUS_PER_NODE
    assert figures.gpu_busy == pytest.approx(held / (figures.makespan_s * TOPOLOGY.gpus))


def test_compute_fifo_sees_a_slow_round_start() -> None:
    workload = fifo.generate_fifo_rounds(TOPOLOGY)
    slow = fifo.compute_fifo(_strict_run(30.0, 5.0), workload, run_seconds=30.0)
    fast = fifo.compute_fifo(_strict_run(30.0, 0.1), workload, run_seconds=30.0)
    assert slow.largest_gap_s == pytest.approx(5.0, abs=0.07)
    assert slow.occupancy < 0.9 < 0.99 < fast.occupancy


def test_busy_curve_steps_by_a_node_per_pod() -> None:
    workload = fifo.generate_fifo_rounds(TOPOLOGY)
    xs, ys = fifo.busy_curve(_strict_run(30.0, 0.5), workload)
    assert ys[0] == 0
    assert ys[-1] == 0
    assert max(ys) == TOPOLOGY.gpus  # the 32-pod gang fills the cluster
    assert xs == sorted(xs)


def test_table_and_cli(tmp_path: Path) -> None:
    workload = fifo.generate_fifo_rounds(TOPOLOGY)
    figures = fifo.compute_fifo(_strict_run(30.0, 0.5), workload, run_seconds=30.0)
    text = report.fifo_table({"gangsched-strict": [figures]})
    assert "| gangsched StrictFIFO |" in text
    assert f"{figures.occupancy:.3f}" in text
    args = cli.parse_args(["--workload", "fifo-rounds", "--nodes", "32"])
    assert (args.seed, args.rack_size, args.run_seconds) == (fifo.FIFO_SEED, 8, 30.0)
    assert cli.parse_args(["--nodes", "100"]).seed == 1
    assert cli.FIFO_CONTESTANTS["gangsched-strict"] == ("gangsched", ("--queueing-strategy", "StrictFIFO"))
    assert cli.main(["--workload", "fifo-rounds", "--contestants", "nobody", "--out", str(tmp_path)]) == 2
