"""`kubectl gangsched ...`: the kubectl-gangsched console script, run as kubectl runs a plugin
(a subprocess with the user's environment and the arguments after `gangsched`), with a
kubeconfig of two contexts: its current one unreachable, the other the real control plane."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from operator_support import Operator, all_bound, create_pod_group, create_pods, wait_until

from gangsched_testing import devcluster, fakenodes, pipes
from gangsched_testing.builders import BLOCK, GPU, RACK, gang_manifests, pod_group_manifest

pytestmark = pytest.mark.integration

PLUGIN = Path(sys.executable).parent / "kubectl-gangsched"
REAL = "gangsched-dev"  # the context devcluster writes
# Not passed on to the plugin: each test says which kubeconfig it uses.
NOT_INHERITED = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
# Seconds the watch may take to exit after Ctrl-C: it exits at once, but a loaded CI machine
# (a Go build beside) may not schedule it for a while.
WATCH_EXIT_TIMEOUT = 60.0


def two_contexts(cp: devcluster.ControlPlane, path: Path) -> Path:
    """The control plane's kubeconfig plus a context "elsewhere" (current) that reaches nothing."""
    config = yaml.safe_load(cp.kubeconfig_path.read_text())
    config["clusters"].append({"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:9"}})
    config["contexts"].append({"name": "elsewhere", "context": {"cluster": "elsewhere", "user": REAL}})
    config["current-context"] = "elsewhere"
    path.write_text(yaml.safe_dump(config))
    return path


def plugin(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if not PLUGIN.exists():
        pytest.fail(
            f"{PLUGIN} is missing: run `pip install -e .` (make setup) to install the console scripts"
        )
    environ = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    return subprocess.run(
        [str(PLUGIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, **(env or {})},
        check=False,
    )


def watch_top(kubeconfig: Path, stdout: int = subprocess.PIPE) -> subprocess.Popen[bytes]:
    """`kubectl gangsched top --watch -o json` as a user's shell starts it: stdout buffered (no
    PYTHONUNBUFFERED)."""
    environ = {k: v for k, v in os.environ.items() if k not in (*NOT_INHERITED, "PYTHONUNBUFFERED")}
    return subprocess.Popen(
        [str(PLUGIN), "top", "--watch", "--interval", "0.2", "-o", "json", "--kubeconfig", str(kubeconfig),
         "--context", REAL],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=environ,
    )  # fmt: skip


def interrupt(watch: subprocess.Popen[bytes]) -> str:
    """Ctrl-C (SIGINT), then how it ended, without reading its stdout: "exit N", or "still
    running" (then killed) after WATCH_EXIT_TIMEOUT; with its stderr when there is any."""
    watch.send_signal(signal.SIGINT)
    try:
        ended = f"exit {watch.wait(timeout=WATCH_EXIT_TIMEOUT)}"
    except subprocess.TimeoutExpired:
        watch.kill()
        watch.wait()
        ended = f"still running {WATCH_EXIT_TIMEOUT:.0f} s after Ctrl-C"
    err = watch.stderr.read().decode(errors="replace") if watch.stderr else ""
    return f"{ended}: {err}" if err else ended


def test_kubectl_gangsched_top_and_explain_with_kubeconfig_and_context(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:6]
    prefix = f"k{run}-"
    label = {"gangsched.io/plugin-run": run}
    fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=2, racks=2, hosts=2),
            name_prefix=prefix,
            extended={GPU: "8"},
            labels=label,
        )
    )
    operator_factory("--namespace", namespace)
    create_pod_group(admin_api, namespace, pod_group_manifest("train", 2, namespace=None, topology=[RACK]))
    create_pods(admin_api, namespace, gang_manifests("train", 2, namespace=None, gpu=8, node_selector=label))
    nodes = wait_until(all_bound(admin_api, namespace, "train", 2), timeout=30, what="train bound")
    (rack,) = {n.rsplit("-", 1)[0] for n in nodes.values()}
    block = rack.rsplit("-", 1)[0]
    kubeconfig = two_contexts(control_plane, tmp_path / "config")

    # KUBECONFIG from the environment, the context by --context: GPUs per block and rack.
    top = plugin("top", "--context", REAL, env={"KUBECONFIG": str(kubeconfig)})
    assert top.returncode == 0, top.stderr
    lines = {line.split()[0]: line.split()[1:] for line in top.stdout.splitlines()[2:] if line.strip()}
    assert lines[block][:3] == ["16/32", f"{namespace}/train", "16"]
    assert lines[rack][:3] == ["16/16", f"{namespace}/train", "16"]

    # --kubeconfig, --levels, -o json, and a picture.
    picture = tmp_path / "top.png"
    top = plugin(
        "top", "--kubeconfig", str(kubeconfig), "--context", REAL, "--levels", f"{BLOCK},{RACK}",
        "-o", "json", "--plot", str(picture),
    )  # fmt: skip
    assert top.returncode == 0, top.stderr
    data = json.loads(top.stdout)
    assert data["levels"] == [BLOCK, RACK]
    domains = {tuple(d["path"]): d for d in data["domains"]}
    assert domains[(block, rack)]["heldBy"] == [
        {"podGroup": f"{namespace}/train", "name": f"{namespace}/train", "used": 16}
    ]
    assert picture.read_bytes().startswith(b"\x89PNG")

    # --watch refreshes (one JSON document a line with -o json) until Ctrl-C, then exits 0 at once.
    watch = watch_top(kubeconfig)
    try:
        assert watch.stdout is not None
        frames = [json.loads(watch.stdout.readline()) for _ in range(2)]
    finally:
        ended = interrupt(watch)
    assert ended == "exit 0"
    assert [frame["levels"][-1] for frame in frames] == [RACK, RACK]
    assert frames[0]["used"] == frames[1]["used"]

    # Also while it is blocked writing a frame into a full pipe nobody reads (issue 23.7).
    pipe = pipes.small_pipe()
    try:
        watch = watch_top(kubeconfig, stdout=pipe.writer)
    finally:
        os.close(pipe.writer)
    with pipe.reader:
        try:
            line = len(pipe.reader.readline())  # a frame (the cluster does not change meanwhile)
            pipes.wait_until_full(watch.pid, pipe, line=line)
        finally:
            ended = interrupt(watch)
    assert ended == "exit 0"

    # explain through the plugin: exit 0, where the gang went.
    why = plugin("explain", f"{namespace}/train", "--kubeconfig", str(kubeconfig), "--context", REAL)
    assert why.returncode == 0, why.stderr
    assert f"{RACK}={rack}: 2 pods on 2 nodes" in why.stdout

    # The current context reaches nothing: one line, exit 2.
    for args in (["top"], ["explain", f"{namespace}/train"]):
        failed = plugin(*args, env={"KUBECONFIG": str(kubeconfig)})
        assert failed.returncode == 2
        assert failed.stdout == ""
        assert failed.stderr.startswith("error: cannot reach the cluster at https://127.0.0.1:9")
        assert len(failed.stderr.strip().splitlines()) == 1


def test_kubectl_gangsched_help_and_simulate() -> None:
    help_ = plugin("--help")
    assert help_.returncode == 0
    assert help_.stdout.startswith("Usage: kubectl gangsched [OPTIONS] COMMAND [ARGS]...")
    for command in ("explain", "simulate", "top"):
        assert command in help_.stdout
    example = Path(__file__).resolve().parents[2] / "examples" / "simulate"
    sim = plugin("simulate", str(example), "-o", "json")
    assert sim.returncode == 0, sim.stderr
    assert {g["name"] for g in json.loads(sim.stdout)["podGroups"]} == {"train", "pretrain-xl", "finetune"}
