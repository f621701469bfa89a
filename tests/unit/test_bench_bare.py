"""bench/e2e's `bare` contestant (hack/bare-binder) in the pure parts: manifests, table, CLI."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.e2e import __main__ as cli  # noqa: E402
from bench.e2e import report  # noqa: E402
from bench.e2e.harness import bare_binder_binary  # noqa: E402
from bench.e2e.metrics import Figures, PodEvent, Recording, compute  # noqa: E402
from bench.e2e.workload import (  # noqa: E402
    GANGSCHED_API,
    Gang,
    PodShape,
    Topology,
    Workload,
    group_manifest,
    node_domains,
    pod_manifest,
)

TOPOLOGY = Topology(nodes=20, rack_size=10)
GANGS = (
    Gang(
        index=0,
        pods=(PodShape("w0", 8, 24, 192), PodShape("w1", 8, 24, 192)),
        required="rack",
        preferred_rack=False,
    ),
    Gang(index=1, pods=(PodShape("0", 8, 24, 192),), required=None, preferred_rack=False),
)
WORKLOAD = Workload(topology=TOPOLOGY, gangs=GANGS, seed=0, oversubscription=1.0)


def _figures(contestant: str, node: str, *, span: float) -> Figures:
    """Every pod of WORKLOAD bound to `node` (over-committed: 24 GPUs on an 8-GPU node),
    the last one `span` seconds after the first create."""
    rec = Recording(contestant=contestant)
    rec.created = {"g00000-w0": 1.0, "g00000-w1": 1.0, "g00001-0": 1.0}
    rec.events = [
        PodEvent(1.0 + span / 2, "g00000-w0", "bound", node),
        PodEvent(1.0 + span / 2, "g00000-w1", "bound", node),
        PodEvent(1.0 + span, "g00001-0", "bound", node),
    ]
    rec.end = 10.0
    return compute(rec, WORKLOAD, node_domains(TOPOLOGY, pool="p"))


def test_bare_gets_gangscheds_objects_under_its_own_scheduler_name() -> None:
    gang = GANGS[0]
    assert group_manifest(gang, "bare") == group_manifest(gang, "gangsched")
    group = group_manifest(gang, "bare")
    assert group is not None
    assert group["apiVersion"] == GANGSCHED_API
    bare = pod_manifest(gang, gang.pods[0], "bare", pool="p")
    ours = pod_manifest(gang, gang.pods[0], "gangsched", pool="p")
    assert bare["spec"].pop("schedulerName") == "bare-binder"
    assert ours["spec"].pop("schedulerName") == "gangsched"
    assert bare == ours


def test_table_puts_schedulers_against_the_bare_binder_and_skips_its_correctness_rows() -> None:
    node = next(iter(node_domains(TOPOLOGY, pool="p")))
    bare = _figures("bare", node, span=1.0)  # 3 pods/s
    assert bare.gpu_utilisation == 24 / 160  # over-commit computes without complaint
    runs = {
        "bare": [bare],
        "gangsched": [_figures("gangsched", node, span=2.0)],  # 1.5 pods/s: 50 % of bare
        "native": [_figures("native", node, span=4.0)],  # 0.75 pods/s: 25 %
    }
    lines = report.table(runs).splitlines()
    assert lines[0] == (
        "| metric | gangsched | kube-scheduler v1.36.3 | bare binder | gangsched / kube-scheduler "
        "| gangsched % of bare | kube-scheduler % of bare |"
    )
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:] for line in lines[2:]}
    assert rows["pods bound per second, first create to last bind"] == [
        "2",
        "1",
        "3",
        "2.00x (higher is better)",
        "50 %",
        "25 % |",
    ]
    for label in report.BARE_NA - report.DRA_ROWS:
        assert rows[label][2] == "n/a", label
    # The others' figures stand: all on one node is a Required-rack gang in one rack.
    assert rows["Required-domain violations (must be 0)"][:3] == ["0", "0", "n/a"]
    assert rows["GPU utilisation at saturation (bound / total)"][:3] == ["15.0 %", "15.0 %", "n/a"]
    assert rows["scheduler peak RSS"][:3] == ["0 MiB", "0 MiB", "0 MiB"]
    # Without the bare binder the table is as before.
    assert "% of bare" not in report.table({"gangsched": runs["gangsched"]})


def test_cli_names_the_contestants(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.CONTESTANTS["kube-scheduler"] == cli.CONTESTANTS["native"] == "native"
    assert cli.main(["--contestants", "gangsched,bare", "--workload", "preemption", "--no-plot"]) == 2
    assert "never preempts" in capsys.readouterr().err
    assert cli.main(["--contestants", "gangsched,slurm", "--no-plot"]) == 2
    assert "unknown contestant 'slurm'" in capsys.readouterr().err


def test_bare_binder_binary_is_looked_for_where_build_sh_puts_it(tmp_path: Path) -> None:
    assert bare_binder_binary(environ={"GANGSCHED_K8S_BIN": str(tmp_path)}) is None
    binary = tmp_path / "bare-binder"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert bare_binder_binary(environ={"GANGSCHED_K8S_BIN": str(tmp_path)}) == binary
    cache = tmp_path / "cache"
    default = cache / "gangsched" / "k8s-v1.36.3" / "bin"
    default.mkdir(parents=True)
    (default / "bare-binder").write_bytes(binary.read_bytes())
    (default / "bare-binder").chmod(0o755)
    assert bare_binder_binary(environ={"XDG_CACHE_HOME": str(cache)}) == default / "bare-binder"
