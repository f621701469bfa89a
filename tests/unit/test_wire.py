"""The informers' decoding (cluster/wire.py): the projections of Pods and Nodes keep every
field the model and the intake read, and what they give is what json.loads gave, down to the
errors on malformed objects.

The main guard is `test_the_projections_keep_every_field_the_readers_look_at`: the readers run
on bodies that record every key they look up (present or not) and every map they read whole,
and each recorded path must survive the projection. A reader that starts to look at a new
field fails it until the field is added to `cluster.wire`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import types
import typing
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.cluster import ClusterCache, LiveReader, wire
from gangsched.cluster.informer import Informer, Resource, WatchHealth, _GoneError
from gangsched.handlers import Intake
from gangsched.loop import Faults
from gangsched.model import ModelError, PriorityClasses, parse_node, parse_pod
from gangsched.session import ApiError
from gangsched_testing.properties import examples

# ---------------------------------------------------------------------------- bodies


def rich_pod(*, native_group: bool = False) -> dict[str, Any]:
    """A pod that takes every branch the readers have, with fields nobody reads besides."""
    spec: dict[str, Any] = {
        "schedulerName": "gangsched",
        "priorityClassName": "high",
        "preemptionPolicy": "Never",
        "nodeName": "",
        "schedulingGates": [{"name": "wait"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "overhead": {"cpu": "10m"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
                            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}],
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [],
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
        },
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}],
        "resourceClaims": [
            {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
            {"name": "shared", "resourceClaimName": "shared-claim"},
        ],
        "initContainers": [
            {
                "name": "sidecar",
                "restartPolicy": "Always",
                "image": "side:1",
                "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "64Mi"}},
            },
            {"name": "setup", "image": "setup:1", "resources": {"requests": {"cpu": "2"}}},
        ],
        "containers": [
            {
                "name": "main",
                "image": "trainer:1",
                "env": [{"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {"cpu": "2", "memory": "2Gi", "example.com/gpu": "2"},
                    "claims": [{"name": "gpu"}, {"name": "shared"}],
                },
            },
            {"name": "helper", "image": "helper:1"},
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "restartPolicy": "Never",
    }
    labels = {"app": "trainer", "scheduling.gangsched.io/pod-group": "g"}
    if native_group:
        spec["schedulingGroup"] = {"podGroupName": "native-g"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "42",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:01:00Z",
            "labels": labels,
            "annotations": {"scheduling.gangsched.io/bound-for-pod-group": "pg-uid", "other": "x"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "c1"},
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1", "controller": True},
            ],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:containers": {}}}}],
        },
        "spec": spec,
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "Ready", "status": "False", "lastProbeTime": None},
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"},
            ],
            "startTime": "2026-01-01T00:00:05Z",
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-abc"}],
            "extendedResourceClaimStatus": {"resourceClaimName": "p-extended", "requestMappings": []},
            "containerStatuses": [{"name": "main", "ready": False, "restartCount": 0}],
            "podIP": "10.0.0.1",
        },
    }


def rich_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "uid": "nu1",
            "resourceVersion": "7",
            "labels": {"zone": "a", "kubernetes.io/hostname": "n1"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
            "podCIDR": "10.1.0.0/24",
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "example.com/gpu": "8"},
            "allocatable": {"cpu": "7500m", "memory": "30Gi"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": "t"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.36.3"},
            "images": [{"names": ["img:1"], "sizeBytes": 10}],
        },
    }


def event_line(event_type: str, obj: Any) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode()


def priorities() -> PriorityClasses:
    classes = PriorityClasses()
    classes.set(parse_priority_class_body("high", 1000))
    return classes


def parse_priority_class_body(name: str, value: int) -> Any:
    from gangsched.model import parse_priority_class

    return parse_priority_class({"metadata": {"name": name}, "value": value})


# ---------------------------------------------------------------------------- recording readers

Path = tuple[str, ...]
ELEMENT = "[]"


class Recorder:
    def __init__(self) -> None:
        self.keys: set[Path] = set()  # a key looked up (path ends with the key)
        self.whole: set[Path] = set()  # a map read whole (iterated)


class RecordingMap(Mapping[str, Any]):
    """A read-only view of a dict that records what is read of it."""

    def __init__(self, data: Mapping[str, Any], path: Path, recorder: Recorder) -> None:
        self._data, self._path, self._recorder = data, path, recorder

    def _wrap(self, key: str, value: Any) -> Any:
        return wrap(value, (*self._path, key), self._recorder)

    def __getitem__(self, key: str) -> Any:
        self._recorder.keys.add((*self._path, key))
        return self._wrap(key, self._data[key])

    def get(self, key: str, default: Any = None) -> Any:
        self._recorder.keys.add((*self._path, key))
        return self._wrap(key, self._data[key]) if key in self._data else default

    def __contains__(self, key: object) -> bool:
        self._recorder.keys.add((*self._path, str(key)))
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        self._recorder.whole.add(self._path)
        return iter(self._data)

    def __len__(self) -> int:  # truthiness (`x or {}`) reads no field
        return len(self._data)


def wrap(value: Any, path: Path, recorder: Recorder) -> Any:
    if isinstance(value, Mapping):
        return RecordingMap(value, path, recorder)
    if isinstance(value, list):
        return [wrap(item, (*path, ELEMENT), recorder) for item in value]
    return value


class _Scheduler:
    def wake(self, group: Any = None) -> None:
        pass

    def report(self, group: Any) -> None:
        pass

    def forget_group(self, key: Any) -> None:
        pass


class _Transport:
    async def call(self, method: str, path: str, **_: Any) -> Any:
        raise ApiError(404)


def _intake(*, delay: float = 0.0) -> tuple[Intake, ClusterCache]:
    cache = ClusterCache()
    cache.apply("priorityclasses", "ADDED", {"metadata": {"name": "high"}, "value": 1000})
    live = LiveReader(cache=cache, transport=_Transport(), scheduler_name="gangsched")  # type: ignore[arg-type]
    faults = Faults(watch_delay_seconds=delay)
    return Intake(cache=cache, scheduler=_Scheduler(), live=live, faults=faults), cache  # type: ignore[arg-type]


def read_pod_everywhere(body: Mapping[str, Any]) -> Recorder:
    """Every reader of a pod body from an informer: the intake's events and LIST, the cache,
    the model, the live reader of a deleted pod, a lagging watch (faults)."""
    recorder = Recorder()

    async def run() -> None:
        for delay in (0.0, 0.001):
            intake, _ = _intake(delay=delay)
            await intake.replace("pods", [wrap(body, (), recorder)], "1")
            for event_type in ("ADDED", "MODIFIED", "DELETED"):
                intake.pod(event_type, wrap(body, (), recorder))
            await asyncio.sleep(0.01)  # the late events' tasks

    asyncio.run(run())
    parse_pod(wrap(body, (), recorder), priorities=priorities())
    return recorder


def read_node_everywhere(body: Mapping[str, Any]) -> Recorder:
    recorder = Recorder()

    async def run() -> None:
        intake, _ = _intake()
        await intake.replace("nodes", [wrap(body, (), recorder)], "1")
        for event_type in ("ADDED", "MODIFIED", "DELETED"):
            await intake.event("nodes", event_type, wrap(body, (), recorder))

    asyncio.run(run())
    parse_node(wrap(body, (), recorder))
    return recorder


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        [inner] = [a for a in typing.get_args(annotation) if a is not type(None)]
        return inner
    return annotation


def kept(projection: Any, path: Path, *, whole: bool) -> bool:
    """Does the projection keep `path` (a key, or with `whole` a whole map)?"""
    node = projection
    for step in path:
        node = _unwrap(node)
        if node is Any:
            return True
        if step == ELEMENT:
            assert typing.get_origin(node) is list, f"{path}: {node} is no list"
            [node] = typing.get_args(node)
            continue
        hints = typing.get_type_hints(node)
        if step not in hints:
            return False
        node = hints[step]
    return _unwrap(node) is Any if whole else True


def _missing(recorder: Recorder, projection: Any) -> list[str]:
    return sorted(
        [".".join(p) for p in recorder.keys if not kept(projection, p, whole=False)]
        + [".".join(p) + " (whole)" for p in recorder.whole if not kept(projection, p, whole=True)]
    )


@pytest.mark.parametrize("native_group", [False, True])
def test_the_projections_keep_every_field_the_readers_look_at(native_group: bool) -> None:
    pods = read_pod_everywhere(rich_pod(native_group=native_group))
    assert ("spec", "containers", ELEMENT, "resources", "requests") in pods.keys  # it records
    assert not _missing(pods, wire.Pod), "add these to cluster/wire.py's Pod projection"
    nodes = read_node_everywhere(rich_node())
    assert ("status", "allocatable") in nodes.keys
    assert not _missing(nodes, wire.Node), "add these to cluster/wire.py's Node projection"


def test_the_recorder_would_catch_a_field_the_projection_drops() -> None:
    recorder = Recorder()
    body = wrap(rich_pod(), (), recorder)
    body["spec"].get("hostNetwork")
    body["status"]["containerStatuses"][0].get("ready")
    dict(body["metadata"]["managedFields"][0])
    missing = set(_missing(recorder, wire.Pod))
    assert {
        "metadata.managedFields",
        "metadata.managedFields.[] (whole)",
        "metadata.managedFields.[].manager",
        "spec.hostNetwork",
        "status.containerStatuses",
        "status.containerStatuses.[].ready",
    } <= missing


# ---------------------------------------------------------------------------- same results


def _outcome(parse: Any, body: Any) -> Any:
    try:
        return parse(body)
    except Exception as exc:  # the same error, whatever it is
        return (type(exc), str(exc))


def test_a_projected_pod_parses_as_the_whole_pod() -> None:
    for body in (rich_pod(), rich_pod(native_group=True), {"metadata": {"name": "bare"}}):
        line = event_line("MODIFIED", body)
        event = wire.PODS.event(line)
        assert event["type"] == "MODIFIED"
        assert "managedFields" not in event["object"]["metadata"]
        assert "containerStatuses" not in event["object"].get("status", {})
        whole = json.loads(line)["object"]
        classes = priorities()
        assert parse_pod(event["object"], priorities=classes) == parse_pod(whole, priorities=classes)


def test_a_projected_node_parses_as_the_whole_node() -> None:
    event = wire.NODES.event(event_line("ADDED", rich_node()))
    assert "images" not in event["object"]["status"]
    assert parse_node(event["object"]) == parse_node(rich_node())


def test_a_list_page_keeps_its_metadata_and_projects_its_items() -> None:
    page = {
        "kind": "PodList",
        "metadata": {"resourceVersion": "99", "continue": "token", "remainingItemCount": 3},
        "items": [rich_pod(), rich_pod(native_group=True)],
    }
    decoded = wire.PODS.page(json.dumps(page).encode())
    assert decoded["metadata"] == page["metadata"]
    assert [parse_pod(i, priorities=priorities()) for i in decoded["items"]] == [
        parse_pod(i, priorities=priorities()) for i in page["items"]
    ]
    assert "managedFields" not in decoded["items"][0]["metadata"]
    assert wire.NODES.page(b'{"metadata":{},"items":null}') == {"metadata": {}, "items": None}


def test_error_and_bookmark_events_keep_what_the_informer_reads() -> None:
    status = {"kind": "Status", "status": "Failure", "message": "too old resource version", "code": 410}
    for codec in (wire.PODS, wire.NODES, wire.GENERIC):
        assert codec.event(event_line("ERROR", status)) == {"type": "ERROR", "object": status}
    bookmark = {
        "kind": "Pod",
        "metadata": {"resourceVersion": "77", "annotations": {"k8s.io/initial-events-end": "true"}},
    }
    assert wire.PODS.event(event_line("BOOKMARK", bookmark))["object"]["metadata"] == bookmark["metadata"]


def test_what_msgspec_refuses_is_decoded_by_json() -> None:
    line = b'{"type":"ADDED","object":{"metadata":{"name":"\\ud800","labels":{"big":1.5e400}}}}'
    assert wire.GENERIC.event(line) == json.loads(line)
    assert wire.PODS.event(line) == json.loads(line)
    with pytest.raises(json.JSONDecodeError):
        wire.PODS.event(b'{"type":')


def test_codecs_by_collection() -> None:
    assert wire.codec_for("/api/v1/pods") is wire.PODS
    assert wire.codec_for("/api/v1/nodes") is wire.NODES
    assert wire.codec_for("/apis/scheduling.k8s.io/v1/priorityclasses") is wire.GENERIC
    assert Resource("pods", "/api/v1/pods").decoder is wire.PODS
    assert Resource("x", "/api/v1/pods", codec=wire.GENERIC).decoder is wire.GENERIC


# Any JSON value, to put where the model expects something else.
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["", "x", "1", "Always", "In"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["name", "key", "a"]), inner),
    max_leaves=4,
)
_POD_PATHS: list[Path] = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "deletionTimestamp"),
    ("spec",),
    ("spec", "containers"),
    ("spec", "containers", "0"),
    ("spec", "containers", "0", "resources"),
    ("spec", "containers", "0", "resources", "limits"),
    ("spec", "containers", "0", "resources", "claims"),
    ("spec", "initContainers"),
    ("spec", "initContainers", "0", "restartPolicy"),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity"),
    ("spec", "tolerations"),
    ("spec", "resourceClaims"),
    ("spec", "schedulingGroup"),
    ("spec", "priority"),
    ("spec", "preemptionPolicy"),
    ("spec", "overhead"),
    ("status",),
    ("status", "conditions"),
    ("status", "conditions", "1"),
    ("status", "resourceClaimStatuses"),
    ("status", "extendedResourceClaimStatus"),
]
_NODE_PATHS: list[Path] = [
    ("metadata",),
    ("metadata", "labels"),
    ("spec",),
    ("spec", "taints"),
    ("status",),
    ("status", "capacity"),
    ("status", "conditions"),
    ("status", "conditions", "0"),
]


def _set(body: Any, path: Path, value: Any) -> None:
    *parents, last = path
    for step in parents:
        body = body[int(step)] if isinstance(body, list) else body[step]
    if isinstance(body, list):
        body[int(last)] = value
    else:
        body[last] = value


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(range(len(_POD_PATHS))), _json), min_size=1, max_size=3))
def test_a_malformed_pod_fails_or_parses_as_it_did_with_json(changes: list[tuple[int, Any]]) -> None:
    body = rich_pod()
    for index, value in changes:
        try:
            _set(body, _POD_PATHS[index], copy.deepcopy(value))
        except (KeyError, IndexError, TypeError, ValueError):
            continue  # an earlier change removed the way there
    line = event_line("MODIFIED", body)
    whole, projected = json.loads(line)["object"], wire.PODS.event(line)["object"]

    def parse(body: Any) -> Any:
        return parse_pod(body, priorities=priorities())

    assert _outcome(parse, projected) == _outcome(parse, whole)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(range(len(_NODE_PATHS))), _json), min_size=1, max_size=3))
def test_a_malformed_node_fails_or_parses_as_it_did_with_json(changes: list[tuple[int, Any]]) -> None:
    body = rich_node()
    for index, value in changes:
        try:
            _set(body, _NODE_PATHS[index], copy.deepcopy(value))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    line = event_line("MODIFIED", body)
    assert _outcome(parse_node, wire.NODES.event(line)["object"]) == _outcome(
        parse_node, json.loads(line)["object"]
    )


def test_model_errors_name_the_same_field_through_the_projection() -> None:
    body = rich_pod()
    body["metadata"] = "not an object"  # does not fit the projection: decoded whole
    projected = wire.PODS.event(event_line("ADDED", body))["object"]
    assert projected["status"]["containerStatuses"]
    with pytest.raises(ModelError, match="metadata must be an object"):
        parse_pod(projected)
    body = rich_pod()
    body["spec"]["containers"][0]["resources"]["limits"] = ["1"]  # fits: a leaf is kept as it is
    projected = wire.PODS.event(event_line("ADDED", body))["object"]
    with pytest.raises(ModelError, match=r"spec.containers\[0\].resources.limits must be a map"):
        parse_pod(projected)


# ---------------------------------------------------------------------------- the informer reads


class _Content:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.content = _Content(chunks)


class _Sink:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    async def apply(self, event_type: str, body: Mapping[str, Any]) -> None:
        self.events.append((event_type, body))

    def list_start(self) -> None:
        pass

    async def list_page(self, items: Any) -> None:
        pass

    async def listed(self, resource_version: str) -> None:
        pass

    def lost(self, why: str) -> None:
        pass

    def resumed(self) -> None:
        pass


def _read(chunks: list[bytes]) -> tuple[Informer, _Sink]:
    sink = _Sink()
    informer = Informer(
        session=None,  # type: ignore[arg-type]
        resource=Resource("pods", "/api/v1/pods"),
        sink=sink,
        health=WatchHealth(),
    )
    asyncio.run(informer._read(_Response(chunks)))  # type: ignore[arg-type]
    return informer, sink


def test_the_informer_applies_projected_events_in_order_and_keeps_the_version() -> None:
    second = rich_pod()
    second["metadata"]["resourceVersion"] = "43"
    stream = b"\n".join(
        [
            event_line("ADDED", rich_pod()),
            event_line("BOOKMARK", {"metadata": {"resourceVersion": "50"}}),
            event_line("MODIFIED", second),
        ]
    )
    informer, sink = _read([stream[:100], stream[100:3000], stream[3000:]])  # lines cut anywhere
    assert [(t, b["metadata"]["resourceVersion"]) for t, b in sink.events] == [
        ("ADDED", "42"),
        ("MODIFIED", "43"),
    ]
    assert "managedFields" not in sink.events[0][1]["metadata"]
    assert informer.resource_version == "43"


def test_the_informer_still_tells_gone_from_other_errors() -> None:
    gone = {"kind": "Status", "code": 410, "message": "too old"}
    with pytest.raises(_GoneError):
        _read([event_line("ERROR", gone)])
    with pytest.raises(ApiError, match="500: boom"):
        _read([event_line("ERROR", {"kind": "Status", "code": 500, "message": "boom"})])


def test_a_quiet_watch_is_ended_by_the_server_before_the_read_timeout() -> None:
    """Issue 23.6: the apiserver sends no bookmark on a kind without events since it started,
    so a healthy watch of a quiet kind is silent until timeoutSeconds; the read timeout must
    outlast it, or every quiet watch is cut (and reported failed) instead of ending normally."""
    asked: list[tuple[dict[str, str], float]] = []

    class Session:
        @contextlib.asynccontextmanager
        async def stream(
            self, path: str, *, query: Mapping[str, str], read_timeout: float
        ) -> AsyncIterator[_Response]:
            asked.append((dict(query), read_timeout))
            yield _Response([])

    informer = Informer(
        session=Session(),  # type: ignore[arg-type]
        resource=Resource("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses"),
        sink=_Sink(),
        health=WatchHealth(),
    )
    informer.resource_version = "7"
    for _ in range(20):
        asyncio.run(informer._watch())
    timeouts = {int(query["timeoutSeconds"]) for query, _ in asked}
    assert min(timeouts) >= 60
    assert max(timeouts) <= 75
    assert len(timeouts) > 1  # spread out, so watches opened together do not end together
    for query, read_timeout in asked:
        assert read_timeout >= int(query["timeoutSeconds"]) + 30
        assert query["allowWatchBookmarks"] == "true"
        assert query["resourceVersion"] == "7"
