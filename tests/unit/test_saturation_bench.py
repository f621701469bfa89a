"""bench/saturation.py at a tiny size: the queue never holds a fitting gang behind one that
does not, strict FIFO does, and each policy's run is a valid schedule (issue 14, item 3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import saturation  # noqa: E402
from bench.quality import build_cluster  # noqa: E402

NODES = 128  # 2 zones x 1 block x 4 racks x 16 hosts


@pytest.fixture(scope="module")
def outcomes() -> dict[str, saturation.Outcome]:
    nodes, load = build_cluster(3, NODES)
    free = NODES * saturation.GPUS_PER_NODE - sum(p.requests.get(saturation.GPU, 0) for p in load) // 1000
    stream = saturation.arrivals(3, 1.0, free, 2.5, 20.0)
    return {
        policy: saturation.simulate(
            policy, nodes, load, stream, hours=1.0, tick=60.0, reservation_after=300.0, check_every=1
        )
        for policy in saturation.POLICIES
    }


def test_no_gang_that_fits_waits_behind_one_that_does_not(outcomes: dict[str, saturation.Outcome]) -> None:
    for policy in ("gangsched", "no-reserve"):
        assert outcomes[policy].checked > 0
        assert outcomes[policy].held_up == 0, policy


def test_backfilling_starts_more_than_strict_fifo(outcomes: dict[str, saturation.Outcome]) -> None:
    fifo = outcomes["strict-fifo"]
    assert fifo.arrived == outcomes["gangsched"].arrived > 0
    assert outcomes["no-reserve"].started > fifo.started
    assert outcomes["gangsched"].utilisation >= fifo.utilisation


def test_utilisation_is_a_share(outcomes: dict[str, saturation.Outcome]) -> None:
    for outcome in outcomes.values():
        assert 0.0 < outcome.utilisation <= 1.0
        assert outcome.started <= outcome.arrived
        assert outcome.heroes_started <= outcome.heroes_arrived


def test_table_names_every_policy(outcomes: dict[str, saturation.Outcome]) -> None:
    text = saturation.table(list(outcomes.values()))
    for policy in saturation.POLICIES:
        assert f"| {policy} |" in text


def test_engine_strict_fifo_blocks_as_strict_fifo_does(outcomes: dict[str, saturation.Outcome]) -> None:
    """The engine's StrictFIFO (a head blocks the gangs behind it) starts what the simulated
    head-of-line blocking starts on this stream, which has no gang that can never fit."""
    strict = outcomes["gangsched-strict"]
    assert strict.arrived == outcomes["strict-fifo"].arrived > 0
    assert strict.started == outcomes["strict-fifo"].started
    assert strict.started < outcomes["no-reserve"].started
    assert "| gangsched-strict |" in saturation.table([strict])
    assert saturation.table([strict]).rstrip().endswith("| n/a |")
