#!/usr/bin/env python3
"""`make demo`: gangsched on a local control plane, one story, under a minute.

It starts kube-apiserver + etcd (gangsched_testing.devcluster) with 32 fake GPU nodes (2 zones x
2 blocks x 4 racks x 2 hosts, 8 GPUs each) and a kubelet stand-in, installs the PodGroup
CRD, runs `gangsched run` as a subprocess, then submits four gangs, and a fifth with DRA:

1. zone-job   16 pods x 8 GPUs, Required zone:  128 GPUs, a whole zone;
2. block-job   8 pods x 8 GPUs, Required block:  64 GPUs, more than a rack: a whole block;
3. rack-job    6 pods x 2 GPUs, Required rack:   12 GPUs, fits in one rack;
4. next-job    8 pods x 8 GPUs, Required block: no block is free any more, so it waits
               (the PodGroupScheduled condition says why) until block-job finishes;
5. dra-job    12 pods x 1 GPU as DRA devices (a chapter of its own, when the control plane
               runs kube-controller-manager): 6 more nodes whose GPUs a fake DRA driver
               publishes as ResourceSlice devices, 8 H100 on 2 nodes and 16 A100 on 4; each
               pod's claim (from a ResourceClaimTemplate) asks for an H100, or else an A100
               (`firstAvailable`). 8 H100s are too few for the gang, so the whole gang takes
               A100s, and the PodGroup condition says so ("; devices: gpu/a100"). A pod-by-pod
               scheduler would give 8 pods H100s and 4 A100s: one job on two GPU models.

A live view (plain text, a new block whenever something changes) shows each PodGroup's
phase, counts and domain, and how many pods of each gang run in every rack (in the DRA
chapter: the devices allocated on each DRA node). Everything is read through the API. The
demo stops the operator and the control plane and removes its files when the story is over,
on failure and on Ctrl-C. Exit 0 when everything happened as scripted; 1 with a message
otherwise.

`--fast` shortens the pauses (for tests). :func:`run_story` is the story alone, against any
control plane with the demo's nodes and a running operator, and :func:`run_dra_chapter` the
DRA chapter (its nodes and slices made by :func:`dra_node_sets` and :func:`publish_devices`);
tests/integration/test_demo.py calls both with the session's control plane.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final, Literal, TextIO

# The control plane and fake nodes are test tooling, in testing/ beside the product: never
# installed, so found from here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testing"))

try:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from gangsched import occupancy
    from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, VERSION, Node, Pod, parse_node, parse_pod
    from gangsched_testing import devcluster, dra, fakedra, fakenodes
    from gangsched_testing.builders import gang_manifests, pod_group_manifest
    from gangsched_testing.rawapi import request_json
except ImportError as exc:  # pragma: no cover - depends on the environment
    sys.exit(f"hack/demo.py: {exc}; run `make setup` first (it creates .venv with gangsched and its deps)")

GPU: Final = "nvidia.com/gpu"
GPUS_PER_HOST: Final = 8
SHAPE: Final = fakenodes.TopologyShape(zones=2, blocks=2, racks=4, hosts=2)
KEYS: Final = fakenodes.TopologyKeys()
Level = Literal["zone", "block", "rack"]
LEVEL_KEYS: Final[Mapping[Level, str]] = {
    "zone": KEYS.zone or "topology.kubernetes.io/zone",
    "block": KEYS.block or "example.com/block",
    "rack": KEYS.rack or "example.com/rack",
}
DEMO_NAMESPACE: Final = "demo"

Json = dict[str, Any]


def node_set(*, name_prefix: str = "", labels: Mapping[str, str] | None = None) -> fakenodes.NodeSet:
    """The demo's 32 nodes; tests pass a prefix and a label to keep them apart from others."""
    return fakenodes.NodeSet(
        shape=SHAPE,
        name_prefix=name_prefix,
        cpu="64",
        memory="512Gi",
        extended={GPU: str(GPUS_PER_HOST)},
        labels=dict(labels or {}),
    )


# --------------------------------------------------------------------------------------------
# The gangs


@dataclass(frozen=True, slots=True)
class Gang:
    name: str
    pods: int
    gpus: int  # per pod
    level: Level  # the Required topology level
    why: str

    def pod_group(self) -> Json:
        return pod_group_manifest(
            self.name, self.pods, namespace=None, topology=[(LEVEL_KEYS[self.level], "Required")]
        )

    def pod_bodies(self, node_selector: Mapping[str, str] | None) -> list[Json]:
        return gang_manifests(
            self.name,
            self.pods,
            namespace=None,
            cpu="4",
            memory="16Gi",
            gpu=self.gpus,
            container="train",
            node_selector=node_selector,
            spec={"restartPolicy": "Never"},
        )

    def headline(self) -> str:
        return f"{self.name}: {self.pods} pods x {self.gpus} GPUs, Required {self.level} ({self.why})"


RACK_GPUS: Final = SHAPE.hosts * GPUS_PER_HOST
BLOCK_GPUS: Final = SHAPE.racks * RACK_GPUS
ZONE_GPUS: Final = SHAPE.blocks * BLOCK_GPUS

ZONE_JOB: Final = Gang("zone-job", 16, 8, "zone", f"{16 * 8} GPUs = a whole zone")
BLOCK_JOB: Final = Gang(
    "block-job", 8, 8, "block", f"{8 * 8} GPUs: more than a rack ({RACK_GPUS}), a whole block"
)
RACK_JOB: Final = Gang("rack-job", 6, 2, "rack", f"{6 * 2} GPUs: fits in one rack of {RACK_GPUS}")
NEXT_JOB: Final = Gang(
    "next-job", 8, 8, "block", f"{8 * 8} GPUs in one block: none is free until block-job finishes"
)
GANGS: Final = (ZONE_JOB, BLOCK_JOB, RACK_JOB, NEXT_JOB)


# --------------------------------------------------------------------------------------------
# Output


class Style:
    """ANSI colours when writing to a terminal that takes them, nothing otherwise."""

    CODES: Final[Mapping[str, str]] = {
        "bold": "1",
        "dim": "2",
        "red": "31",
        "green": "32",
        "yellow": "33",
        "blue": "34",
        "magenta": "35",
        "cyan": "36",
    }

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO, choice: str = "auto") -> Style:
        if choice != "auto":
            return cls(choice == "always")
        tty = hasattr(stream, "isatty") and stream.isatty()
        dumb = os.environ.get("TERM", "") in ("", "dumb")
        return cls(tty and not dumb and "NO_COLOR" not in os.environ)

    def __call__(self, text: str, *names: str) -> str:
        if not self.enabled or not names:
            return text
        codes = ";".join(self.CODES[name] for name in names)
        return f"\033[{codes}m{text}\033[0m"


PHASE_COLOURS: Final[Mapping[str, str]] = {
    "Running": "green",
    "Succeeded": "blue",
    "Scheduled": "cyan",
    "Scheduling": "cyan",
    "Unschedulable": "yellow",
    "Failed": "red",
}
GANG_COLOURS: Final[Mapping[str, str]] = {
    ZONE_JOB.name: "magenta",
    BLOCK_JOB.name: "blue",
    RACK_JOB.name: "cyan",
    NEXT_JOB.name: "green",
}


# --------------------------------------------------------------------------------------------
# What the API says


@dataclass(frozen=True, slots=True)
class Place:
    zone: str
    block: str
    rack: str


@dataclass(frozen=True, slots=True)
class GroupState:
    name: str
    phase: str
    pods: int
    scheduled: int
    running: int
    succeeded: int
    domain: str
    condition_status: str
    condition_reason: str
    condition_message: str


@dataclass(frozen=True, slots=True)
class PodState:
    name: str
    group: str
    node: str
    phase: str
    gpus: int

    @property
    def active(self) -> bool:
        return bool(self.node) and self.phase not in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Snapshot:
    groups: Mapping[str, GroupState]
    pods: Sequence[PodState]
    # The same pods as gangsched's model reads them (for the product's occupancy view).
    models: Sequence[Pod] = ()

    def phase(self, name: str) -> str:
        group = self.groups.get(name)
        return group.phase if group else ""

    def members(self, name: str) -> list[PodState]:
        return [p for p in self.pods if p.group == name]


def _group_state(item: Json) -> GroupState:
    status = item.get("status") or {}
    cond: Json = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodGroupScheduled"),
        {},
    )
    return GroupState(
        name=item["metadata"]["name"],
        phase=status.get("phase", ""),
        pods=int(status.get("pods", 0)),
        scheduled=int(status.get("scheduled", 0)),
        running=int(status.get("running", 0)),
        succeeded=int(status.get("succeeded", 0)),
        domain=status.get("domain", ""),
        condition_status=cond.get("status", ""),
        condition_reason=cond.get("reason", ""),
        condition_message=cond.get("message", ""),
    )


def _pod_state(item: Json) -> PodState:
    requests: Json = {}
    for container in item["spec"].get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
    return PodState(
        name=item["metadata"]["name"],
        group=(item["metadata"].get("labels") or {}).get(POD_GROUP_LABEL, ""),
        node=item["spec"].get("nodeName", ""),
        phase=(item.get("status") or {}).get("phase", "Pending"),
        gpus=int(requests.get(GPU, 0)),
    )


def read_snapshot(api: client.ApiClient, namespace: str) -> Snapshot:
    groups = request_json(api, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}")
    pods = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods")
    items = pods.get("items") or []
    return Snapshot(
        groups={g.name: g for g in map(_group_state, groups.get("items") or [])},
        pods=[_pod_state(p) for p in items],
        models=[parse_pod(p) for p in items],
    )


def read_nodes(api: client.ApiClient, label_selector: str) -> list[Node]:
    """The demo's nodes, as gangsched's model reads them."""
    nodes = request_json(api, "GET", "/api/v1/nodes", query={"labelSelector": label_selector})
    return [parse_node(node) for node in nodes.get("items") or []]


def places_of(nodes: Sequence[Node]) -> dict[str, Place]:
    """node name -> where it is."""
    return {
        node.name: Place(
            zone=node.labels.get(LEVEL_KEYS["zone"], "?"),
            block=node.labels.get(LEVEL_KEYS["block"], "?"),
            rack=node.labels.get(LEVEL_KEYS["rack"], "?"),
        )
        for node in nodes
    }


# --------------------------------------------------------------------------------------------
# The live view


def render(snap: Snapshot, nodes: Sequence[Node], style: Style) -> list[str]:
    """The view as lines; equal lines mean nothing changed."""
    lines: list[str] = []
    header = f"  {'GANG':<10} {'PHASE':<13} {'PODS':>4} {'SCHED':>5} {'RUN':>4} {'DONE':>4}  DOMAIN"
    lines.append(style(header, "bold"))
    for gang in GANGS:
        group = snap.groups.get(gang.name)
        if group is None:
            continue
        phase = group.phase or "-"
        row = (
            f"  {style(f'{gang.name:<10}', GANG_COLOURS[gang.name])} "
            f"{style(f'{phase:<13}', PHASE_COLOURS.get(phase, 'dim'))} "
            f"{group.pods:>4} {group.scheduled:>5} {group.running:>4} {group.succeeded:>4}  "
            f"{group.domain or '-'}"
        )
        lines.append(row)
        if group.condition_status == "False" and group.condition_message:
            why = f"{group.condition_reason}: {group.condition_message}"
            lines.append(f"  {'':<10} {style('why it waits:', 'yellow')} {why}")

    # GPUs per block and rack and the gangs holding them: `gangsched top`'s view, from the
    # product (bound, unfinished pods only: what holds GPUs now).
    occ = occupancy.build(nodes, snap.models, levels=(LEVEL_KEYS["block"], LEVEL_KEYS["rack"]))
    text = occupancy.to_text(occ, waiting=False).splitlines()
    lines.append("")
    lines.append(style(f"  {text[0]}", "bold"))
    lines += [f"  {line}" for line in text[1:]]
    return lines


# --------------------------------------------------------------------------------------------
# The story


class StoryError(RuntimeError):
    """Something did not happen as scripted; the message says what."""


@dataclass(frozen=True, slots=True)
class Timing:
    poll: float  # seconds between two looks at the API
    hold: float  # how long next-job is shown waiting before block-job finishes
    timeout: float  # the whole story


NORMAL: Final = Timing(poll=1.0, hold=5.0, timeout=90.0)
FAST: Final = Timing(poll=0.2, hold=1.0, timeout=60.0)


@dataclass(slots=True)
class StoryResult:
    """How the story ended: per gang its phase and where its pods were bound."""

    phases: dict[str, str]
    domains: dict[str, str]  # status.domain
    zones: dict[str, set[str]]
    blocks: dict[str, set[str]]
    racks: dict[str, set[str]]
    waiting_message: str  # next-job's condition while it waited
    timings: dict[str, float] = field(default_factory=dict)

    def inside(self, gang: Gang) -> set[str]:
        """The domains of the gang's Required level holding its pods."""
        return {"zone": self.zones, "block": self.blocks, "rack": self.racks}[gang.level][gang.name]


class Story:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        timing: Timing,
        out: TextIO,
        style: Style,
        places: Mapping[str, Place],
        nodes: Sequence[Node],
        pod_node_selector: Mapping[str, str] | None,
        check_alive: Callable[[], None] | None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.timing = timing
        self.out = out
        self.style = style
        self.places = places
        self.nodes = nodes
        self.pod_node_selector = pod_node_selector
        self.check_alive = check_alive
        self.started = time.monotonic()
        self.deadline = self.started + timing.timeout
        self.last_view: list[str] = []
        self.snap = Snapshot(groups={}, pods=[])
        # The DRA chapter shows devices per node instead of pods per rack.
        self.view: Callable[[Snapshot], list[str]] = lambda snap: render(snap, self.nodes, self.style)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, text: str) -> None:
        print(self.style(f"[{self.elapsed():5.1f}s] ==> {text}", "bold"), file=self.out, flush=True)

    def look(self) -> Snapshot:
        """Read the API; print the view if it changed."""
        if self.check_alive is not None:
            self.check_alive()
        self.snap = read_snapshot(self.api, self.namespace)
        view = self.view(self.snap)
        if view != self.last_view:
            self.last_view = view
            print(self.style(f"[{self.elapsed():5.1f}s]", "dim"), file=self.out)
            print("\n".join(view), file=self.out)
            print(file=self.out, flush=True)
        return self.snap

    def wait_for(self, what: str, check: Callable[[Snapshot], bool]) -> Snapshot:
        while True:
            snap = self.look()
            if check(snap):
                return snap
            if time.monotonic() > self.deadline:
                raise StoryError(
                    f"expected {what} within {self.timing.timeout:g}s; last seen: {describe(snap)}"
                )
            time.sleep(self.timing.poll)

    def submit(self, gang: Gang) -> None:
        self.say(f"submit {gang.headline()}")
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}"
        request_json(self.api, "POST", base, body=gang.pod_group())
        for body in gang.pod_bodies(self.pod_node_selector):
            request_json(self.api, "POST", f"/api/v1/namespaces/{self.namespace}/pods", body=body)

    def finish(self, gang: Gang) -> None:
        self.say(f"{gang.name} finishes: its {gang.pods} pods exit 0 (phase Succeeded), freeing their GPUs")
        for pod in self.snap.members(gang.name):
            fakenodes.finish_pod(api=self.api, namespace=self.namespace, name=pod.name, succeeded=True)

    # -- checks ------------------------------------------------------------------------------

    def where(self, gang: Gang, level: Level) -> set[str]:
        """The distinct zones, blocks or racks holding the gang's bound pods."""
        out: set[str] = set()
        for pod in self.snap.members(gang.name):
            place = self.places.get(pod.node)
            if pod.node and place is not None:
                out.add(getattr(place, level))
            elif pod.node:
                out.add(f"(node {pod.node} outside the demo's nodes)")
        return out

    def check_inside(self, gang: Gang) -> str:
        domains = self.where(gang, gang.level)
        if len(domains) != 1:
            raise StoryError(
                f"{gang.name} should be inside one {gang.level}, its pods are in {sorted(domains)}"
            )
        return next(iter(domains))


def describe(snap: Snapshot) -> str:
    parts = []
    names = [g.name for g in GANGS] + sorted(set(snap.groups) - {g.name for g in GANGS})
    for name in names:
        group = snap.groups.get(name)
        if group is None:
            continue
        text = f"{name} {group.phase or 'no status'} {group.scheduled}/{group.pods} scheduled"
        if group.condition_status == "False":
            text += f" ({group.condition_reason}: {group.condition_message})"
        parts.append(text)
    return "; ".join(parts) or "no PodGroups"


def _running(*gangs: Gang) -> Callable[[Snapshot], bool]:
    def check(snap: Snapshot) -> bool:
        for gang in gangs:
            group = snap.groups.get(gang.name)
            if group is None or group.phase != "Running" or group.running < gang.pods:
                return False
        return True

    return check


def run_story(
    api: client.ApiClient,
    *,
    namespace: str = DEMO_NAMESPACE,
    timing: Timing = NORMAL,
    out: TextIO | None = None,
    style: Style | None = None,
    node_label_selector: str = f"{fakenodes.FAKE_NODE_LABEL}=true",
    pod_node_selector: Mapping[str, str] | None = None,
    check_alive: Callable[[], None] | None = None,
) -> StoryResult:
    """Submit the four gangs into `namespace`, finish block-job, and check every step.

    Needs the demo's nodes (:func:`node_set`, selected by `node_label_selector`), a kubelet
    stand-in and a running gangsched. Raises :class:`StoryError` when a step does not happen
    as scripted; `check_alive` is called at every look, to fail fast if the operator died.
    """
    stream = out if out is not None else sys.stdout
    nodes = read_nodes(api, node_label_selector)
    places = places_of(nodes)
    if len(places) != SHAPE.size:
        raise StoryError(f"expected {SHAPE.size} demo nodes ({node_label_selector}), found {len(places)}")
    story = Story(
        api,
        namespace=namespace,
        timing=timing,
        out=stream,
        style=style or Style(False),
        places=places,
        nodes=nodes,
        pod_node_selector=pod_node_selector,
        check_alive=check_alive,
    )
    timings: dict[str, float] = {}

    # 1. A gang that needs a whole zone.
    story.submit(ZONE_JOB)
    t = time.monotonic()
    story.wait_for(f"{ZONE_JOB.name} Running", _running(ZONE_JOB))
    timings[f"{ZONE_JOB.name} submitted -> Running"] = time.monotonic() - t
    zone = story.check_inside(ZONE_JOB)

    # 2. One that needs a block, one that fits a rack: both go to the other zone.
    story.submit(BLOCK_JOB)
    story.submit(RACK_JOB)
    t = time.monotonic()
    story.wait_for(f"{BLOCK_JOB.name} and {RACK_JOB.name} Running", _running(BLOCK_JOB, RACK_JOB))
    timings[f"{BLOCK_JOB.name} + {RACK_JOB.name} submitted -> Running"] = time.monotonic() - t
    block = story.check_inside(BLOCK_JOB)
    story.check_inside(RACK_JOB)
    if zone in story.where(BLOCK_JOB, "zone") | story.where(RACK_JOB, "zone"):
        raise StoryError(f"{ZONE_JOB.name} holds all of zone {zone}, yet another gang landed there")

    # 3. One that cannot fit: every block has something running. It must wait, saying why.
    story.submit(NEXT_JOB)

    def refused(snap: Snapshot) -> bool:
        group = snap.groups.get(NEXT_JOB.name)
        return (
            group is not None and group.condition_reason == "Unschedulable" and bool(group.condition_message)
        )

    t = time.monotonic()
    snap = story.wait_for(f"{NEXT_JOB.name} reported Unschedulable", refused)
    timings[f"{NEXT_JOB.name} submitted -> Unschedulable"] = time.monotonic() - t
    waiting_message = snap.groups[NEXT_JOB.name].condition_message
    story.say(f"{NEXT_JOB.name} waits: {waiting_message}")
    hold_until = time.monotonic() + timing.hold
    while time.monotonic() < hold_until:
        snap = story.look()
        if story.where(NEXT_JOB, "rack"):
            raise StoryError(f"{NEXT_JOB.name} got pods bound while no block could hold it: {describe(snap)}")
        time.sleep(timing.poll)

    # 4. block-job finishes; its block is the only whole one, so next-job goes there.
    story.finish(BLOCK_JOB)
    t = time.monotonic()

    def next_running(snap: Snapshot) -> bool:
        return snap.phase(BLOCK_JOB.name) == "Succeeded" and _running(NEXT_JOB)(snap)

    story.wait_for(f"{NEXT_JOB.name} to run once {BLOCK_JOB.name} finished", next_running)
    timings[f"{BLOCK_JOB.name} finished -> {NEXT_JOB.name} Running"] = time.monotonic() - t
    if story.check_inside(NEXT_JOB) != block:
        raise StoryError(f"{NEXT_JOB.name} should take block {block}, freed by {BLOCK_JOB.name}")

    snap = story.wait_for(
        "the end: every gang Running or Succeeded",
        lambda s: all(s.phase(g.name) in ("Running", "Succeeded") for g in GANGS),
    )
    timings["story"] = story.elapsed()
    return StoryResult(
        phases={g.name: snap.phase(g.name) for g in GANGS},
        domains={g.name: snap.groups[g.name].domain for g in GANGS},
        zones={g.name: story.where(g, "zone") for g in GANGS},
        blocks={g.name: story.where(g, "block") for g in GANGS},
        racks={g.name: story.where(g, "rack") for g in GANGS},
        waiting_message=waiting_message,
        timings=timings,
    )


# --------------------------------------------------------------------------------------------
# The DRA chapter


DRA_GANG: Final = "dra-job"
DRA_PODS: Final = 12
DRA_TEMPLATE: Final = "h100-or-a100"
DRA_LABEL: Final = "gangsched.io/demo-dra"  # on the DRA nodes (value "true" by default)
GPUS_PER_DRA_HOST: Final = 4
H100_HOSTS: Final = 2  # 8 H100s: too few for the 12-pod gang
A100_HOSTS: Final = 4  # 16 A100s: room for all of it
H100: Final = fakedra.NodeDevices(gpus=GPUS_PER_DRA_HOST, gpu_model="H100")
A100: Final = fakedra.NodeDevices(gpus=GPUS_PER_DRA_HOST, gpu_model="A100")
MODEL_ATTRIBUTE: Final = f'device.attributes["{dra.GPU_DRIVER}"].model'


def dra_node_sets(
    *, name_prefix: str = "", labels: Mapping[str, str] | None = None
) -> tuple[fakenodes.NodeSet, fakenodes.NodeSet]:
    """The H100 nodes and the A100 nodes: no nvidia.com/gpu, their GPUs are DRA devices.

    Labelled `DRA_LABEL` (and `labels`), and not counted as the story's nodes: the story
    selects its 32 by their own label, so these are created with a selector of their own.
    """

    def one(model: str, hosts: int) -> fakenodes.NodeSet:
        return fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=1, racks=1, hosts=hosts),
            name_prefix=f"{name_prefix}{model.lower()}-",
            cpu="64",
            memory="512Gi",
            labels={DRA_LABEL: "true", **(labels or {})},
        )

    return one("H100", H100_HOSTS), one("A100", A100_HOSTS)


def publish_devices(api: client.ApiClient, h100_nodes: Sequence[str], a100_nodes: Sequence[str]) -> None:
    """What the fake driver's node plugins would write: the DeviceClass and every node's slice."""
    fakedra.ensure_device_classes(api, H100)
    fakedra.publish(api, H100, h100_nodes)
    fakedra.publish(api, A100, a100_nodes)


def dra_claim_template(namespace: str) -> Json:
    """One GPU: an H100 if one is available, else an A100 (a prioritized list)."""
    return dra.claim_template(
        namespace,
        DRA_TEMPLATE,
        dra.first_available(
            "gpu",
            dra.request("h100", selectors=[f'{MODEL_ATTRIBUTE} == "H100"']),
            dra.request("a100", selectors=[f'{MODEL_ATTRIBUTE} == "A100"']),
        ),
    )


def dra_pod_bodies(node_selector: Mapping[str, str] | None) -> list[Json]:
    bodies = gang_manifests(
        DRA_GANG,
        DRA_PODS,
        namespace=None,
        cpu="4",
        memory="16Gi",
        container="train",
        node_selector=node_selector,
        spec={"restartPolicy": "Never"},
    )
    return [dra.pod_claims(body, {"gpu": f"template:{DRA_TEMPLATE}"}) for body in bodies]


def read_device_use(api: client.ApiClient, namespace: str) -> dict[str, list[str]]:
    """node (= the fake driver's pool) -> the allocated devices' request results, e.g. "gpu/a100"."""
    claims = request_json(api, "GET", f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims")
    use: dict[str, list[str]] = {}
    for claim in claims.get("items") or []:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            use.setdefault(result["pool"], []).append(result["request"])
    return use


def render_dra(
    snap: Snapshot, use: Mapping[str, Sequence[str]], models: Mapping[str, str], style: Style
) -> list[str]:
    """dra-job's row, then each DRA node: its model, devices allocated, the gang's pods there."""
    lines = [style(f"  {'GANG':<10} {'PHASE':<13} {'PODS':>4} {'SCHED':>5} {'RUN':>4}", "bold")]
    group = snap.groups.get(DRA_GANG)
    if group is not None:
        phase = group.phase or "-"
        coloured = style(f"{phase:<13}", PHASE_COLOURS.get(phase, "dim"))
        lines.append(
            f"  {style(f'{DRA_GANG:<10}', 'magenta')} {coloured} "
            f"{group.pods:>4} {group.scheduled:>5} {group.running:>4}"
        )
        if group.condition_message:
            lines.append(f"  {'':<10} {style('condition:', 'yellow')} {group.condition_message}")
    pods_on = Counter(p.node for p in snap.members(DRA_GANG) if p.active)
    lines.append("")
    lines.append(style(f"  {'DRA NODE':<24} {'MODEL':<6} {'DEVICES':>7}  PODS", "bold"))
    for node in sorted(models, key=lambda n: (models[n] != "H100", n)):
        used = f"{len(use.get(node, ()))}/{GPUS_PER_DRA_HOST}"
        pods = f"{DRA_GANG} {pods_on[node]}" if pods_on[node] else style(".", "dim")
        lines.append(f"  {node:<24} {models[node]:<6} {used:>7}  {pods}")
    return lines


@dataclass(frozen=True, slots=True)
class DraResult:
    phase: str
    message: str  # the PodGroupScheduled condition once the gang runs
    models: dict[str, int]  # GPU model -> the gang's pods on nodes of that model
    results: dict[str, int]  # allocated request result ("gpu/a100") -> devices
    elapsed: float


def run_dra_chapter(
    api: client.ApiClient,
    *,
    h100_nodes: Sequence[str],
    a100_nodes: Sequence[str],
    namespace: str = DEMO_NAMESPACE,
    timing: Timing = NORMAL,
    out: TextIO | None = None,
    style: Style | None = None,
    pod_node_selector: Mapping[str, str] | None = None,
    check_alive: Callable[[], None] | None = None,
) -> DraResult:
    """Submit dra-job (its devices published on `h100_nodes` and `a100_nodes` beforehand) and
    check that the whole gang runs on A100s and that its condition says so.

    Needs the resourceclaim controller (kube-controller-manager), which creates each pod's
    claim from the template, a kubelet stand-in and a running gangsched.
    """
    models = {**dict.fromkeys(h100_nodes, "H100"), **dict.fromkeys(a100_nodes, "A100")}
    story = Story(
        api,
        namespace=namespace,
        timing=timing,
        out=out if out is not None else sys.stdout,
        style=style or Style(False),
        places={},
        nodes=[],
        pod_node_selector=pod_node_selector,
        check_alive=check_alive,
    )
    story.view = lambda snap: render_dra(snap, read_device_use(api, namespace), models, story.style)
    story.say(
        f"DRA: {len(h100_nodes)} nodes with {GPUS_PER_DRA_HOST} H100 each and {len(a100_nodes)} with "
        f"{GPUS_PER_DRA_HOST} A100 each, published as ResourceSlice devices by a fake driver "
        "(no nvidia.com/gpu on them)"
    )
    request_json(
        api,
        "POST",
        f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaimtemplates",
        body=dra_claim_template(namespace),
    )
    story.say(
        f"submit {DRA_GANG}: {DRA_PODS} pods, each a claim from template {DRA_TEMPLATE} "
        f"(firstAvailable: h100, else a100); only {len(h100_nodes) * GPUS_PER_DRA_HOST} H100s exist"
    )
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    request_json(api, "POST", base, body=pod_group_manifest(DRA_GANG, DRA_PODS, namespace=None))
    for body in dra_pod_bodies(pod_node_selector):
        request_json(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=body)

    def running(snap: Snapshot) -> bool:
        group = snap.groups.get(DRA_GANG)
        return group is not None and group.phase == "Running" and group.running >= DRA_PODS

    snap = story.wait_for(f"{DRA_GANG} Running", running)
    elapsed = story.elapsed()
    message = snap.groups[DRA_GANG].condition_message
    on_models = Counter(models.get(p.node, f"(node {p.node})") for p in snap.members(DRA_GANG) if p.node)
    results = Counter(r for requests in read_device_use(api, namespace).values() for r in requests)
    if dict(on_models) != {"A100": DRA_PODS} or dict(results) != {"gpu/a100": DRA_PODS}:
        raise StoryError(
            f"{DRA_GANG} should run on A100s only: pods on {dict(on_models)}, devices {dict(results)}"
        )
    if not message.endswith("; devices: gpu/a100"):
        raise StoryError(f"{DRA_GANG}'s condition should end with '; devices: gpu/a100': {message!r}")
    story.say(f"{DRA_GANG} runs whole on A100s: {message}")
    return DraResult(
        phase=snap.phase(DRA_GANG),
        message=message,
        models=dict(on_models),
        results=dict(results),
        elapsed=elapsed,
    )


# --------------------------------------------------------------------------------------------
# main


@contextlib.contextmanager
def _stopwatch(timings: dict[str, float], name: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    timings[name] = time.monotonic() - started


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hack/demo.py", description="gangsched on a local control plane: four gangs, one story."
    )
    parser.add_argument("--fast", action="store_true", help="short pauses (for tests)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds for the story (default 90)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument(
        "--operator-log",
        type=Path,
        default=None,
        help="keep the operator's log in this file (default: a temporary file, removed at the end)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="run the operator with --verbose")
    args = parser.parse_args(argv)
    timing = FAST if args.fast else NORMAL
    if args.timeout:
        timing = Timing(poll=timing.poll, hold=timing.hold, timeout=args.timeout)
    out = sys.stdout
    style = Style.for_stream(out, args.color)
    started = time.monotonic()
    timings: dict[str, float] = {}

    def say(text: str) -> None:
        print(style(f"# {text}", "dim"), file=out, flush=True)

    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    code = 0
    try:
        with contextlib.ExitStack() as stack:
            say(f"starting kube-apiserver {devcluster.K8S_VERSION} + etcd on 127.0.0.1")
            with _stopwatch(timings, "control plane"):
                cp = stack.enter_context(devcluster.ControlPlane())
            api = stack.enter_context(cp.api_client())
            with _stopwatch(timings, "32 nodes + agent + CRD"):
                names = fakenodes.create_nodes(api=api, spec=node_set())
                agent_api = stack.enter_context(cp.api_client())
                agent = stack.enter_context(fakenodes.NodeAgent(api_client=agent_api))
                devcluster.apply_crd(api)
                request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": DEMO_NAMESPACE}})
            say(
                f"{len(names)} fake nodes: {SHAPE.zones} zones x {SHAPE.blocks} blocks x {SHAPE.racks} racks "
                f"x {SHAPE.hosts} hosts, {GPUS_PER_HOST} GPUs each (rack {RACK_GPUS}, block {BLOCK_GPUS}, "
                f"zone {ZONE_GPUS} GPUs); PodGroup CRD applied"
            )
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gangsched-demo-")))
            operator = devcluster.OperatorProcess(
                kubeconfig=cp.kubeconfig_path,
                log=args.operator_log or workdir / "operator.log",
                args=["--verbose"] if args.verbose else [],
            )
            stack.enter_context(operator)
            # Unwinding starts here: from now on Ctrl-C must not cut the cleanup short.
            stack.callback(signal.signal, signal.SIGINT, signal.SIG_IGN)
            say(f"starting gangsched run (health on :{operator.port})")
            say(
                "the view below is printed again whenever something changes; SCHED = pods bound, "
                "DONE = pods succeeded; the grid counts each gang's unfinished pods per rack"
            )
            with _stopwatch(timings, "operator ready"):
                operator.wait_ready()

            def check_alive() -> None:
                if not operator.alive():
                    raise StoryError(f"gangsched run exited:\n{operator.tail()}")

            dra_result: DraResult | None = None
            try:
                result = run_story(api, timing=timing, out=out, style=style, check_alive=check_alive)
                if cp.controller_manager:
                    with _stopwatch(timings, "6 DRA nodes + slices"):
                        cp.wait_controller_manager()
                        h100_set, a100_set = dra_node_sets()
                        h100_nodes = fakenodes.create_nodes(api=api, spec=h100_set)
                        a100_nodes = fakenodes.create_nodes(api=api, spec=a100_set)
                        publish_devices(api, h100_nodes, a100_nodes)
                    dra_result = run_dra_chapter(
                        api,
                        h100_nodes=h100_nodes,
                        a100_nodes=a100_nodes,
                        timing=timing,
                        out=out,
                        style=style,
                        check_alive=check_alive,
                    )
                else:
                    say("no kube-controller-manager (`make control-plane` builds it): DRA chapter skipped")
            except (StoryError, ApiException) as exc:
                print(style(f"demo failed: {exc}", "red", "bold"), file=sys.stderr)
                print(f"last lines of the operator's log:\n{operator.tail()}", file=sys.stderr)
                code = 1
            else:
                timings.update(result.timings)
                print(style("The story went as scripted:", "green", "bold"), file=out)
                for gang in GANGS:
                    where = ", ".join(sorted(result.inside(gang)))
                    print(
                        f"  {gang.name:<10} {result.phases[gang.name]:<10} in {gang.level} {where}", file=out
                    )
                print(f"  {NEXT_JOB.name} waited because: {result.waiting_message}", file=out)
                if dra_result is not None:
                    timings[f"{DRA_GANG} submitted -> Running"] = dra_result.elapsed
                    models = ", ".join(f"{n} pods on {m}" for m, n in dra_result.models.items())
                    print(f"  {DRA_GANG:<10} {dra_result.phase:<10} {models}", file=out)
            if agent.errors:
                say(f"the node agent survived {len(agent.errors)} errors: {agent.errors[:3]!r}")
            say("stopping the operator and the control plane")
    except KeyboardInterrupt:
        print("\ninterrupted: stopped the operator and the control plane, cleaned up", file=sys.stderr)
        return 130
    except StoryError as exc:
        print(style(f"demo failed: {exc}", "red", "bold"), file=sys.stderr)
        return 1
    except (devcluster.BinariesNotFoundError, devcluster.ControlPlaneError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    timings["total"] = time.monotonic() - started
    say("timings: " + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items()))
    return code


if __name__ == "__main__":
    sys.exit(main())
