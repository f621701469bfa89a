"""GPUs per topology domain (`gangsched top`, `simulate --plot`): the occupancy, its text,
JSON and picture."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gangsched import cli, occupancy
from gangsched.model import Node
from gangsched.occupancy import OTHER, Waiting
from gangsched_testing.builders import BLOCK, RACK, ZONE, node, pod, topology_nodes

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate"


def cluster() -> list[Node]:
    """Two blocks of two racks of two 8-GPU hosts, and a CPU-only node."""
    return [*topology_nodes(1, 2, 2, 2), node("cpu-0", gpu=0)]


def load() -> list[Any]:
    return [
        pod("a-0", "a", gpu=8, node_name="z0-b0-r0-h0", phase="Running"),
        pod("a-1", "a", gpu=8, node_name="z0-b0-r0-h1", phase="Running"),
        pod("b-0", "b", gpu=4, node_name="z0-b0-r1-h0", phase="Running", namespace="team"),
        pod("solo", None, gpu=2, node_name="z0-b0-r1-h0", phase="Running"),
        pod("done", "a", gpu=8, node_name="z0-b1-r0-h0", phase="Succeeded"),  # holds nothing
        pod("waiting-0", "w", gpu=8),
        pod("waiting-1", "w", gpu=8),
    ]


def test_gpus_per_domain_and_who_holds_them() -> None:
    occ = occupancy.build(cluster(), load())
    assert occ.levels == (ZONE, BLOCK, RACK)  # the keys the nodes carry, outermost first
    assert (occ.used, occ.total) == (22, 64)
    assert len(occ.nodes) == 8  # the CPU-only node offers no GPU
    by_path = {d.path: d for d in occ.domains()}
    assert [d.path for d in occ.domains()][:3] == [("z0",), ("z0", "z0-b0"), ("z0", "z0-b0", "z0-b0-r0")]
    b0 = by_path[("z0", "z0-b0")]
    assert (b0.used, b0.total, b0.nodes) == (22, 32, 4)
    assert b0.holders == {"ml/a": 16, "team/b": 4, OTHER: 2}
    assert by_path[("z0", "z0-b1")].used == 0


def test_levels_can_be_chosen() -> None:
    occ = occupancy.build(cluster(), load(), levels=occupancy.parse_levels(f"{BLOCK}, {RACK}"))
    assert occ.levels == (BLOCK, RACK)
    assert [d.name for d in occ.domains() if d.depth == 0] == ["z0-b0", "z0-b1"]
    with pytest.raises(ValueError, match="twice"):
        occupancy.parse_levels(f"{RACK},{RACK}")


def test_another_resource_can_be_counted() -> None:
    occ = occupancy.build(cluster(), load(), levels=(), resource="cpu")
    assert occ.resource == "cpu"
    assert occ.total == 9 * 64
    assert occ.used == 4  # one cpu per running pod


def test_text_lists_domains_indented_and_waiting_gangs() -> None:
    waiting = occupancy.pending_gangs(
        load(),
        scheduler_name="gangsched",
        statuses={
            ("ml", "w"): {
                "conditions": [
                    {
                        "type": "PodGroupScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "no room",
                    }
                ]
            }
        },
    )
    assert waiting == [Waiting("ml/w", 2, 16, "Unschedulable", "no room")]
    occ = occupancy.build(cluster(), load(), levels=(BLOCK, RACK), waiting=waiting)
    lines = occupancy.to_text(occ).splitlines()
    assert lines[0] == f"GPUs by {BLOCK} > {RACK}: 22/64 used on 8 nodes"
    assert lines[1].split() == ["DOMAIN", "GPUS", "HELD", "BY"]
    assert lines[2].split() == ["z0-b0", "22/32", "ml/a", "16,", "team/b", "4,", "(other", "pods)", "2"]
    assert lines[3].startswith("  z0-b0-r0 ")
    assert lines[3].split()[1:] == ["16/16", "ml/a", "16"]
    assert "z0-b1-r1" in lines[7]
    assert lines[7].split()[1:] == ["0/16", "-"]
    assert lines[-2].split() == ["WAITING", "PODS", "GPUS", "WHY"]
    assert lines[-1].split()[:4] == ["ml/w", "2", "16", "Unschedulable:"]
    assert "WAITING" not in occupancy.to_text(occ, waiting=False)


def test_json_has_domains_nodes_and_waiting() -> None:
    occ = occupancy.build(cluster(), load(), levels=(BLOCK, RACK), waiting=[Waiting("ml/w", 2, 16)])
    data = occupancy.to_json(occ)
    json.dumps(data)
    assert data["levels"] == [BLOCK, RACK]
    assert (data["used"], data["total"]) == (22, 64)
    block = data["domains"][0]
    assert block["level"] == BLOCK
    assert block["path"] == ["z0-b0"]
    assert block["heldBy"][0] == {"podGroup": "ml/a", "name": "ml/a", "used": 16}
    assert {"podGroup": None, "name": OTHER, "used": 2} in block["heldBy"]
    assert data["nodes"][0]["name"] == "z0-b0-r0-h0"
    assert data["waiting"] == [{"name": "ml/w", "pods": 2, "units": 16, "reason": "", "message": ""}]


def test_simulated_placements_count_and_unplaced_groups_are_listed() -> None:
    from gangsched import simulate as sim

    inputs = sim.load([EXAMPLE])
    result = sim.run(inputs, scheduler_name="gangsched")
    occ = sim.occupancy(inputs, result)
    held = occ.holders()
    assert held["ml/train"] == 32  # 8 x 4 GPUs, placed by the simulation
    assert held["ml/finetune"] == 48
    assert [w.name for w in occ.waiting] == ["research/pretrain-xl"]
    assert occ.waiting[0].reason == "Unschedulable"


# ----------------------------------------------------------------------------- the picture


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    from gangsched.plot import plot_occupancy

    occ = occupancy.build(cluster(), load(), waiting=[Waiting("ml/w", 2, 16, "Unschedulable", "no room")])
    out = tmp_path / "occupancy.png"
    plot_occupancy(occ, out)
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG")
    assert len(data) > 5_000


def test_plot_of_a_cluster_without_levels_or_gpus(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    from gangsched.plot import plot_occupancy

    for occ in (occupancy.build(cluster(), load(), levels=()), occupancy.build([], [])):
        out = tmp_path / "flat.png"
        plot_occupancy(occ, out)
        assert out.stat().st_size > 0


def test_simulate_plot_writes_the_file(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    out = tmp_path / "sim.png"
    result = CliRunner().invoke(cli.main, ["simulate", str(EXAMPLE), "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 5_000
    assert "pending pods placed" in result.stdout  # the table is still printed
    assert f"wrote {out}" in result.stderr


def test_without_matplotlib_plot_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    out = tmp_path / "sim.png"
    result = CliRunner().invoke(cli.main, ["simulate", str(EXAMPLE), "--plot", str(out)])
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == "error: --plot needs matplotlib, an optional extra: pip install 'gangsched[plot]'"
    )
    assert not out.exists()
