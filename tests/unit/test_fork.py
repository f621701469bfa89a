"""`Snapshot.fork` and `DeviceState.fork`: what preemption and `explain` try things on.

A fork is changed freely (pods placed, devices allocated, victims' usage removed) and the
original stays exactly as it was.
"""

from __future__ import annotations

import numpy as np

from gangsched.engine import DeviceCaches
from gangsched.engine.dra.allocator import ClaimToAllocate
from gangsched.engine.dra.state import DeviceState
from gangsched.engine.snapshot import Snapshot
from gangsched_testing import dra
from gangsched_testing.builders import node, pod


def test_a_snapshot_fork_frees_the_gone_pods_and_leaves_the_original_alone() -> None:
    nodes = [node("a"), node("b")]
    running = pod("r", node_name="a", gpu=4)
    other = pod("o", node_name="b", gpu=2)
    snapshot = Snapshot(nodes, [running, other])
    used, columns = snapshot.used.copy(), dict(snapshot.columns)
    gpu = snapshot.columns["nvidia.com/gpu"]
    fork = snapshot.fork([running])
    assert fork.used[snapshot.index["a"], gpu] == 0
    assert fork.used[snapshot.index["b"], gpu] == 2000
    # A resource no node offers gets a column: in the fork only.
    fork.add_usage(snapshot.index["b"], fork.vector({"nvidia.com/gpu": 6000, "example.com/fpga": 1000}))
    assert fork.used[snapshot.index["b"], gpu] == 8000
    assert "example.com/fpga" in fork.columns
    np.testing.assert_array_equal(snapshot.used, used)
    assert snapshot.columns == columns
    assert snapshot.allocatable.shape == used.shape
    # Without pods gone: a plain copy of the usage.
    np.testing.assert_array_equal(snapshot.fork().used, used)


def test_a_device_state_fork_frees_devices_and_leaves_the_original_alone() -> None:
    pods = dra.claim_pods("w", 1, "g", {"gpu": "template:one-gpu"})
    objects = dra.dra_objects(
        [
            dra.gpu_class(),
            dra.node_slice("a", dra.gpus(2)),
            dra.claim_template("ml", "one-gpu", dra.request("gpu")),
            dra.claim("ml", "held", allocated=[("gpu", dra.GPU_DRIVER, "a", "gpu-0")], node="a"),
        ],
        pods,
    )
    snapshot = Snapshot([node("a", gpu=0)])
    state = DeviceState(objects, snapshot.nodes, snapshot.index, DeviceCaches())
    held = (dra.GPU_DRIVER, "a", "gpu-0")
    free, in_use = state.free.copy(), set(state.in_use)
    assert in_use == {held}
    allocation = objects.claims[("ml", "held")].allocation
    assert allocation is not None
    fork = state.fork(allocation.devices)
    assert fork.in_use == set()
    assert fork.free.all()
    claim = objects.claims[("ml", "w-0-gpu")]
    for _ in range(2):  # both GPUs, the freed one included
        results = fork.allocate(0, [ClaimToAllocate(claim.namespace, claim.name, claim.spec)])
        assert results is not None
        fork.commit(results)
    assert not fork.free.any()
    assert len(fork.in_use) == 2
    np.testing.assert_array_equal(state.free, free)
    assert state.in_use == in_use
    # The original still has one GPU to give; the fork of the fork none.
    assert state.allocate(0, [ClaimToAllocate(claim.namespace, claim.name, claim.spec)]) is not None
    assert fork.fork().allocate(0, [ClaimToAllocate(claim.namespace, claim.name, claim.spec)]) is None
