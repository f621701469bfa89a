"""`make demo`'s story (hack/demo.py) in fast mode, on the session's control plane, then its
DRA chapter (when kube-controller-manager runs)."""

from __future__ import annotations

import importlib.util
import io
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from kubernetes import client
from operator_support import Operator

from gangsched_testing import devcluster, fakedra, fakenodes

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[2] / "hack" / "demo.py"


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gangsched_demo", DEMO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_demo_story_goes_as_scripted(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
) -> None:
    demo = load_demo()
    run = uuid.uuid4().hex[:6]
    # The demo's 32 nodes, kept apart from any other test's nodes by a label its pods select.
    label = {"gangsched.io/demo-run": run}
    fake_nodes(demo.node_set(name_prefix=f"d{run}-", labels=label))
    operator = operator_factory("--namespace", namespace)
    out = io.StringIO()

    result = demo.run_story(
        admin_api,
        namespace=namespace,
        timing=demo.FAST,
        out=out,
        node_label_selector=f"gangsched.io/demo-run={run}",
        pod_node_selector=label,
        check_alive=lambda: None if operator.proc.poll() is None else pytest.fail(operator.tail()),
    )

    assert result.phases == {
        "zone-job": "Running",
        "block-job": "Succeeded",
        "rack-job": "Running",
        "next-job": "Running",
    }
    # Each gang inside one domain of its Required level; next-job in the block block-job freed.
    assert len(result.zones["zone-job"]) == 1
    assert len(result.blocks["block-job"]) == 1
    assert len(result.racks["rack-job"]) == 1
    assert result.blocks["next-job"] == result.blocks["block-job"]
    # zone-job holds a whole zone, so the others share the other one.
    (zone,) = result.zones["zone-job"]
    assert zone not in result.zones["block-job"] | result.zones["rack-job"] | result.zones["next-job"]
    assert result.domains["zone-job"] == f"topology.kubernetes.io/zone={zone}"
    assert result.domains["next-job"] == f"example.com/block={next(iter(result.blocks['block-job']))}"
    # While it waited, next-job said why, naming the block closest to fitting it.
    assert "best block" in result.waiting_message
    assert "fits 6/8" in result.waiting_message
    text = out.getvalue()
    assert "why it waits: Unschedulable: " in text
    assert "==> block-job finishes" in text
    assert "\033[" not in text  # no colours outside a terminal


def test_demo_dra_chapter_takes_a100_for_the_whole_gang(
    controller_manager: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
) -> None:
    demo = load_demo()
    run = uuid.uuid4().hex[:6]
    label = {"gangsched.io/demo-dra-run": run}
    h100_set, a100_set = demo.dra_node_sets(name_prefix=f"d{run}-", labels=label)
    h100 = fake_nodes(h100_set)
    a100 = fake_nodes(a100_set)
    try:
        demo.publish_devices(admin_api, h100, a100)
        operator = operator_factory("--namespace", namespace)
        out = io.StringIO()

        result = demo.run_dra_chapter(
            admin_api,
            h100_nodes=h100,
            a100_nodes=a100,
            namespace=namespace,
            timing=demo.FAST,
            out=out,
            pod_node_selector=label,
            check_alive=lambda: None if operator.proc.poll() is None else pytest.fail(operator.tail()),
        )
    finally:
        fakedra.unpublish(admin_api, [*h100, *a100])

    # 8 H100s for 12 pods: the whole gang on A100s, not 8 + 4, and the condition says which.
    assert result.phase == "Running"
    assert result.models == {"A100": 12}
    assert result.results == {"gpu/a100": 12}
    assert result.message.endswith("; devices: gpu/a100")
    text = out.getvalue()
    assert "firstAvailable: h100, else a100" in text
    assert "dra-job runs whole on A100s" in text
    assert "A100       4/4  dra-job 4" in text  # the device view: a full A100 node
