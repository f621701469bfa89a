"""Issue 27's tooling in its pure parts: foreign pods, the fixed backlog, bench/startup.py's
table, command line and metric parsing, and `python -m bench.e2e --foreign-pods`."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import startup  # noqa: E402
from bench.e2e import __main__ as cli  # noqa: E402
from bench.e2e import foreign  # noqa: E402
from bench.e2e.workload import (  # noqa: E402
    RACK_KEY,
    Topology,
    generate_backlog,
    group_manifest,
    pod_manifest,
)


def test_foreign_pods_are_bound_pods_of_another_scheduler_round_robin() -> None:
    nodes = [f"n{i}" for i in range(7)]
    items = foreign.foreign_items("others", nodes, 0, 100) + foreign.foreign_items("others", nodes, 100, 150)
    assert {path for path, _, _ in items} == {"/api/v1/namespaces/others/pods"}
    assert not any(is_pod for _, _, is_pod in items)  # create_all records nothing for them
    pods = [json.loads(body) for _, body, _ in items]
    assert len({p["metadata"]["name"] for p in pods}) == 150
    per_node = Counter(p["spec"]["nodeName"] for p in pods)
    assert set(per_node) == set(nodes)
    assert max(per_node.values()) - min(per_node.values()) <= 1  # grown in two steps, still even
    pod = pods[3]
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ReplicaSet"
    assert owner["controller"] is True
    assert pod["metadata"]["name"].startswith(owner["name"] + "-")
    assert pod["metadata"]["labels"]["pod-template-hash"] in owner["name"]
    assert foreign.foreign_pod_manifest(3, "n3") == pod  # deterministic


def test_room_warning_when_foreign_pods_crowd_out_a_whole_node_pod() -> None:
    assert foreign.room_warning(100_000, 5_000) is None  # the issue's 20 per node
    assert foreign.room_warning(80_000, 1_000) is None
    warning = foreign.room_warning(100_000, 1_000)
    assert warning is not None
    assert "100 foreign pods per node" in warning


def test_backlog_is_the_issues_250_gangs_of_8_required_in_a_rack() -> None:
    workload = generate_backlog(Topology(nodes=1000), gangs=250, size=8)
    assert workload.pods == 2000
    assert len(workload.gangs) == 250
    assert {g.required for g in workload.gangs} == {"rack"}
    assert {len(g.pods) for g in workload.gangs} == {8}
    assert {p.gpus for g in workload.gangs for p in g.pods} == {1}
    gang = workload.gangs[0]
    group = group_manifest(gang, "gangsched")
    assert group is not None
    assert group["spec"]["schedulingConstraints"]["topology"] == [{"key": RACK_KEY, "mode": "Required"}]
    assert pod_manifest(gang, gang.pods[0], "bare", pool="p")["spec"]["schedulerName"] == "bare-binder"


def test_backlog_that_cannot_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit one rack"):
        generate_backlog(Topology(nodes=100), gangs=1, size=11, gpus=8)
    with pytest.raises(ValueError, match="GPUs asked for"):
        generate_backlog(Topology(nodes=100), gangs=101, size=8)


def test_lease_lag_read_from_metrics_or_none() -> None:
    text = (
        "# HELP gangsched_lease_renewal_lag_max_seconds Largest lag.\n"
        "# TYPE gangsched_lease_renewal_lag_max_seconds gauge\n"
        "gangsched_lease_renewal_lag_max_seconds 0.125\n"
        "gangsched_lease_renewal_lag_max_seconds_created 1.7e9\n"
        "gangsched_cycles_total 3.0\n"
    )
    assert startup.lease_lag(text) == 0.125
    assert startup.lease_lag("gangsched_cycles_total 3.0\n") is None


def _run(contestant: str, n: int, pods_per_s: float, lag: float | None = None) -> dict[str, Any]:
    run = startup.Run(contestant=contestant, foreign=n, backlog=16, bound=16, pods_per_s=pods_per_s)
    run.first_bind_s, run.peak_rss_mib, run.lease_lag_max_s = 1.5, 200.0, lag
    return asdict(run)


def test_table_has_a_row_per_point_with_ratios() -> None:
    results: dict[str, Any] = {
        "nodes": 20,
        "topology": "20 nodes",
        "backlog": "2 gangs of 8",
        "backlog_pods": 16,
        "contestants": ["gangsched", "bare"],
        "bare_flags": ["-events", "-all-pods"],
        "concurrency": 64,
        "machine": "m",
        "date": "d",
        "phases": {"nodes_s": 1.0},
        "points": [
            {"foreign": 0, "created": 0, "create_s": 0.0, "create_rate": math.nan, "runs": []},
            {"foreign": 200, "created": 200, "create_s": 1.0, "create_rate": 200.0, "runs": []},
        ],
    }
    for point in results["points"]:
        point.update(apiserver_rss_mib=300.0, etcd_rss_mib=50.0)
    results["points"][0]["runs"] = [_run("gangsched", 0, 1000.0, 0.5), _run("bare", 0, 2000.0)]
    results["points"][1]["runs"] = [_run("gangsched", 200, 900.0)]
    text = startup.table(results)
    assert "| 0 | 1,000 | 1.50 s | 200 MiB | 0.50 s | 2,000 | 1.50 s | 200 MiB | 0.50 | 1.00 |" in text
    # no bare run at 200, no lease metric: n/a
    assert "| 200 | 900 | 1.50 s | 200 MiB | n/a | n/a | n/a | n/a | n/a | 0.90 |" in text
    assert "| 200 | 200 | 1.0 s | 200 /s | 300 MiB | 50 MiB |" in text


def test_plot_draws_every_contestant(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    results: dict[str, Any] = {
        "contestants": ["gangsched", "bare"],
        "bare_flags": ["-events"],
        "topology": "20 nodes",
        "backlog": "2 gangs of 8",
        "points": [
            {"foreign": n, "runs": [_run("gangsched", n, 900.0 - n), _run("bare", n, 1000.0)]}
            for n in (0, 200)
        ],
    }
    startup.plot(results, tmp_path / "startup.png")
    assert (tmp_path / "startup.png").stat().st_size > 10_000


def test_table_takes_medians_of_repeats_and_the_largest_lease_lag() -> None:
    runs = [_run("gangsched", 0, v, lag) for v, lag in ((800.0, 0.1), (1000.0, 0.7), (1200.0, None))]
    results: dict[str, Any] = {"repeat": 3, "points": [{"foreign": 0, "runs": runs}]}
    summary = startup._runs(results, "gangsched")[0]
    assert summary["runs"] == 3
    assert summary["pods_per_s"] == 1000.0
    assert summary["lease_lag_max_s"] == 0.7
    assert startup._runs(results, "bare") == {}


def test_startup_command_line() -> None:
    assert startup.parse_args(["--extra-pods", "5"]).foreign_pods == 5  # the old name
    args = startup.parse_args(["--sweep", "0,10_000,40000"])
    assert args.sweep == (0, 10_000, 40_000)
    assert args.contestants == ("gangsched", "bare")
    assert args.backlog == "250x8"
    for bad in (["--sweep", "10,0"], ["--sweep", "0", "--foreign-pods", "3"], ["--contestants", "kube"]):
        with pytest.raises(SystemExit):
            startup.parse_args(bad)
    with pytest.raises(ValueError, match="GANGSxPODS"):
        startup.Config(nodes=100, backlog="8 gangs").workload()


def test_bench_e2e_foreign_pods_option_reaches_the_harness() -> None:
    args = cli.parse_args(["--foreign-pods", "40000"])
    assert cli._options(args).foreign_pods == 40000
    assert cli._options(cli.parse_args([])).foreign_pods == 0
