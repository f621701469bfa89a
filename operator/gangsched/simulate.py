"""`gangsched simulate`: read cluster objects from files, run one engine cycle, report.

Reading is strict where a mistake would silently change the answer (bad quantities,
malformed objects, invalid PodGroups exit 2 naming the file and document) and lenient
where it cannot (unsupported kinds are skipped with one warning line). What is read is the
operator's table of kinds (`cluster.kinds`): an object is read when its group and kind are a
row of it, and parsed by that row, as the operator's watches parse what they receive.

PodGroups of both APIs are read: gangsched's (scheduling.gangsched.io/v1alpha1) and
Kubernetes' own (scheduling.k8s.io/v1alpha2, whose pods name it in
spec.schedulingGroup.podGroupName). As in the operator, when both have a PodGroup of one
namespace/name gangsched's is scheduled and the native one is left out (`Inputs.shadowed`,
one warning line); its pods then wait alone.

Automatic gangs (model/owners): the workloads of the table (Jobs, JobSets, PyTorchJobs,
...) and the objects their chains pass through (a JobSet's Jobs, a LeaderWorkerSet's
StatefulSets) are read as owners, and `loop.formation.form_gangs` forms their gangs before the
engine runs, as the operator does through its writes: PodGroups created (`Inputs.automatic`),
pods labelled, and the pods that would wait held with why (`Inputs.held`, each a
WaitingForGang decision of its own). Files written by hand may leave out UIDs: an object
without metadata.uid gets one made of its group, kind, namespace and name, and a controller
ownerReference without a uid (or naming an object that has none) is matched by the group and
kind of its apiVersion, its name and the namespace of the object that holds it. Where both
sides carry a uid, they must match, as in a cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gangsched.cluster.kinds import (
    DEVICE_CLASS,
    NATIVE_POD_GROUP,
    NODE,
    OWNER_STORE_KINDS,
    POD,
    POD_GROUP,
    PRIORITY_CLASS,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    for_object,
)
from gangsched.cluster.store import Kind, Role, key_of
from gangsched.engine import CycleResult, DraObjects, schedule_cycle
from gangsched.loop.formation import form_gangs
from gangsched.model import (
    DEFAULT_SCHEDULER_NAME,
    Key,
    ModelError,
    Node,
    OwnerRef,
    Pod,
    PodGroup,
    PodGroupApi,
    PriorityClasses,
    QueueingStrategy,
    Reason,
)
from gangsched.model.common import NAMESPACE_DEFAULT
from gangsched.model.dra import ResourceClaim, ResourceClaimTemplate
from gangsched.model.owners import Owner
from gangsched.model.owners import Waiting as GangWait
from gangsched.occupancy import Occupancy, Waiting, automatic_owners, build, group_label, waiting_units

# The C loader is ~10x faster on big inputs; fall back when libyaml is absent.
_YamlLoader: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

SUFFIXES = (".yaml", ".yml", ".json")
T = TypeVar("T")


class InputError(Exception):
    """Input that cannot be simulated; the message is one line naming the file and document."""


@dataclass(slots=True)
class Inputs:
    """What the files hold, each object parsed by its kind of the table (`cluster.kinds`)."""

    # Every object read, by kind name (`Kind.name`), in the order of the files.
    objects: dict[str, list[Any]] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    # Native PodGroups named like one of gangsched's (which is scheduled instead).
    shadowed: list[PodGroup] = field(default_factory=list)
    # The PodGroups automatic gangs made (also in `pod_groups`), and the pods held out of the
    # queue while theirs cannot form, with why.
    automatic: list[PodGroup] = field(default_factory=list)
    held: dict[Key, GangWait] = field(default_factory=dict)

    def of(self, kind: Kind[T]) -> list[T]:
        """The objects of `kind` read (a list the caller may replace with `set`)."""
        found: list[T] = self.objects.get(kind.name, [])
        return found

    def set(self, kind: Kind[T], objects: list[T]) -> None:
        self.objects[kind.name] = objects

    @property
    def nodes(self) -> list[Node]:
        return self.of(NODE)

    @property
    def pods(self) -> list[Pod]:
        return self.of(POD)

    @property
    def pod_groups(self) -> list[PodGroup]:
        """The PodGroups of both APIs, one per namespace/name (`shadowed` are left out)."""
        return [*self.of(POD_GROUP), *self.of(NATIVE_POD_GROUP)]

    @property
    def owners(self) -> list[Owner]:
        """Workload owners and the links of their chains (model/owners.py)."""
        return [o for kind in OWNER_STORE_KINDS for o in self.of(kind)]

    def missing_owners(self) -> str | None:
        """A warning naming the owners held pods wait for that the input does not hold (each
        once), and how to add them; None when there is none."""
        owners: dict[str, None] = {}
        resources: dict[str, None] = {}
        for (namespace, _), wait in sorted(self.held.items()):
            ref = wait.missing
            if ref is None:
                continue
            owners[f"{ref.kind} {namespace}/{ref.name}"] = None
            group = ref.api_version.rpartition("/")[0]
            kind = for_object(ref.api_version, ref.kind)
            plural = kind.plural if kind is not None else f"{ref.kind.lower()}s"
            resources[f"{plural}.{group}" if group else plural] = None
        if not owners:
            return None
        return (
            f"owners not in the input: {', '.join(owners)}; the pods under them wait for them, as "
            f"gangsched waits for an owner it does not know yet: add them "
            f"(kubectl get {','.join(resources)} -A -o yaml)"
        )

    def dra(self) -> DraObjects | None:
        """The DRA objects, with one claim per pod and template entry as the resourceclaim
        controller would make it (named <pod>-<claim>); None without any DRA object."""
        classes, slices = self.of(DEVICE_CLASS), self.of(RESOURCE_SLICE)
        claims, templates = self.of(RESOURCE_CLAIM), self.of(RESOURCE_CLAIM_TEMPLATE)
        if not (classes or slices or claims or templates):
            return None
        return DraObjects(
            classes={c.name: c for c in classes},
            slices=slices,
            claims=claims_from_templates(self.pods, templates, claims),
        )


def claims_from_templates(
    pods: Iterable[Pod], templates: Iterable[ResourceClaimTemplate], claims: Iterable[ResourceClaim]
) -> dict[tuple[str, str], ResourceClaim]:
    """`claims`, plus one per pod and template entry, named <pod>-<entry>, as the resourceclaim
    controller makes them (it adds a random suffix); the pod's resourceClaimStatuses name it.
    A template that does not exist makes no claim: the engine says the pod waits for it."""
    out = {c.key: c for c in claims}
    by_key = {t.key: t for t in templates}
    for pod in pods:
        for entry in pod.claims:
            if entry.template_name is None or pod.claim_statuses.get(entry.name):
                continue
            template = by_key.get((pod.namespace, entry.template_name))
            if template is None:
                continue
            name = f"{pod.name}-{entry.name}"
            pod.claim_statuses[entry.name] = name
            out.setdefault((pod.namespace, name), ResourceClaim(pod.namespace, name, "", template.spec))
    return out


def _files(paths: Sequence[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
        elif path.exists():
            yield path
        else:
            raise InputError(f"{path}: no such file or directory")


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    index = 0
    try:
        if path.suffix == ".json":
            yield 0, json.loads(text)
            return
        for doc in yaml.load_all(text, Loader=_YamlLoader):
            yield index, doc
            index += 1
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split()).replace('in "<unicode string>", ', "at ")
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise InputError(f"{path} (document {index}): not valid {kind}: {detail}") from None


def _objects(doc: Any) -> Iterator[Mapping[str, Any]]:
    if doc is None:
        return
    if not isinstance(doc, Mapping):
        raise ModelError("a document must be an object")
    if doc.get("kind") == "List" or (isinstance(doc.get("kind"), str) and doc["kind"].endswith("List")):
        items = doc.get("items")
        if not isinstance(items, list):
            raise ModelError("a List needs items")
        for item in items:
            yield from _objects(item)
        return
    yield doc


def _name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return str(name) if name else "?"


def _identity(api_version: Any, kind: Any, namespace: Any, name: Any) -> tuple[str, str, str, str]:
    """An object as an ownerReference names it: group (not version), kind, namespace, name."""
    return (str(api_version).rpartition("/")[0], str(kind), str(namespace or NAMESPACE_DEFAULT), str(name))


def _made_uid(identity: tuple[str, str, str, str]) -> str:
    group, kind, namespace, name = identity
    return f"simulate:{group or 'core'}/{kind}/{namespace}/{name}"


def _with_uids(
    raw: list[tuple[str, Kind[Any], Mapping[str, Any]]],
) -> list[tuple[str, Kind[Any], Mapping[str, Any]]]:
    """`raw` with the UIDs hand-written files leave out (module doc): an owner (or a pod an
    ownerReference names) without metadata.uid gets a made one; a controller ownerReference
    without a uid, or naming an object of the input that has none, gets that object's."""
    uids: dict[tuple[str, str, str, str], str] = {}
    without: set[tuple[str, str, str, str]] = set()
    named: set[tuple[str, str, str, str]] = set()  # what controller ownerReferences name
    for _, _, obj in raw:
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        identity = _identity(obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"))
        uid = meta.get("uid")
        if isinstance(uid, str) and uid:
            uids.setdefault(identity, uid)
        else:
            without.add(identity)
        for ref in _controller_refs(meta):
            named.add(
                _identity(ref.get("apiVersion"), ref.get("kind"), meta.get("namespace"), ref.get("name"))
            )
    out = []
    for where, kind, obj in raw:
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            out.append((where, kind, obj))
            continue
        namespace = meta.get("namespace")
        identity = _identity(obj.get("apiVersion"), obj.get("kind"), namespace, meta.get("name"))
        changed: dict[str, Any] = {}
        owner = kind.role is Role.OWNERS
        if identity in without and (owner or identity in named):
            changed["uid"] = uids.setdefault(identity, _made_uid(identity))
        refs = meta.get("ownerReferences")
        if isinstance(refs, list) and _controller_refs(meta):
            new_refs: list[Any] = []
            for ref in refs:
                if isinstance(ref, Mapping) and ref.get("controller") is True:
                    target = _identity(ref.get("apiVersion"), ref.get("kind"), namespace, ref.get("name"))
                    uid = ref.get("uid")
                    if not (isinstance(uid, str) and uid) or target in without:
                        ref = {**ref, "uid": uids.setdefault(target, _made_uid(target))}
                new_refs.append(ref)
            if new_refs != refs:
                changed["ownerReferences"] = new_refs
        out.append((where, kind, {**obj, "metadata": {**meta, **changed}} if changed else obj))
    return out


def _controller_refs(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    refs = meta.get("ownerReferences")
    return (
        [r for r in refs if isinstance(r, Mapping) and r.get("controller") is True]
        if isinstance(refs, list)
        else []
    )


def load(paths: Sequence[Path], *, scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> Inputs:
    """Read every object of a kind of the table (`cluster.kinds.for_object`: by group and kind,
    whatever the version); PriorityClasses are resolved before the objects that name them.
    Then the automatic gangs of `scheduler_name`'s pods are formed (`form`)."""
    raw: list[tuple[str, Kind[Any], Mapping[str, Any]]] = []
    priorities = PriorityClasses()
    inputs = Inputs()
    for path in _files(paths):
        for index, doc in _documents(path):
            where = f"{path} (document {index})"
            try:
                for obj in _objects(doc):
                    kind = for_object(str(obj.get("apiVersion", "")), str(obj.get("kind")))
                    if kind is None:
                        inputs.skipped[f"{obj.get('apiVersion', '?')}/{obj.get('kind')}"] += 1
                    elif kind is PRIORITY_CLASS:
                        priorities.set(PRIORITY_CLASS.parse(obj, priorities))
                    else:
                        raw.append((where, kind, obj))
            except ModelError as exc:
                raise InputError(f"{where}: {exc}") from None
            except (TypeError, AttributeError, ValueError) as exc:  # a shape the parsers did not foresee
                raise InputError(f"{where}: malformed object: {exc}") from None
    # The same object twice would silently double a node or a pod: say where the first one was.
    seen: dict[tuple[str, str, str], str] = {}
    for where, kind, obj in _with_uids(raw):
        name = obj["kind"]
        try:
            parsed = kind.parse(obj, priorities)
            if isinstance(parsed, PodGroup) and parsed.spec_error is not None:
                raise ModelError(parsed.spec_error)
            key = (kind.name, *key_of(obj, namespaced=kind.namespaced))
            if key in seen:
                raise ModelError(f"duplicate of the {name} in {seen[key]}")
            seen[key] = where
            inputs.objects.setdefault(kind.name, []).append(parsed)
        except ModelError as exc:
            raise InputError(f"{where}: {name} {_name_of(obj)}: {exc}") from None
        except (TypeError, AttributeError, ValueError) as exc:  # a shape the parsers did not foresee
            raise InputError(f"{where}: {name} {_name_of(obj)}: malformed object: {exc}") from None
    # One PodGroup per namespace/name, as the operator's cache resolves it: gangsched's wins.
    ours = {g.key for g in inputs.of(POD_GROUP)}
    inputs.shadowed = [g for g in inputs.of(NATIVE_POD_GROUP) if g.key in ours]
    inputs.set(NATIVE_POD_GROUP, [g for g in inputs.of(NATIVE_POD_GROUP) if g.key not in ours])
    return form(inputs, scheduler_name=scheduler_name)


def form(inputs: Inputs, *, scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> Inputs:
    """The automatic gangs of `inputs` formed as the operator forms them (`form_gangs`): members
    labelled, PodGroups created (`automatic`), and the pods that would wait `held`. Inputs with
    no pod of ours under a controller are left as they are."""
    if not any(p.controller is not None and p.scheduler_name == scheduler_name for p in inputs.pods):
        return inputs
    formed = form_gangs(inputs.pods, inputs.owners, inputs.pod_groups, scheduler_name=scheduler_name)
    inputs.set(POD, formed.pods)
    inputs.automatic = formed.created
    inputs.set(POD_GROUP, [*inputs.of(POD_GROUP), *formed.created])
    inputs.held = dict(formed.waiting)
    return inputs


def run(
    inputs: Inputs,
    *,
    scheduler_name: str,
    queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
) -> CycleResult:
    return schedule_cycle(
        nodes=inputs.nodes,
        pods=inputs.pods,
        pod_groups=inputs.pod_groups,
        scheduler_name=scheduler_name,
        queueing=queueing,
        dra=inputs.dra(),
        held_pods={key: wait.reason for key, wait in inputs.held.items()} or None,
    )


def _owner_json(ref: OwnerRef) -> dict[str, str]:
    return {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}


def _held(result: CycleResult) -> dict[Key, str]:
    """The pods held out of the queue while their automatic gang cannot form: the message of
    each one's WaitingForGang decision."""
    return {
        d.key: d.message
        for d in result.decisions
        if not d.is_pod_group and d.reason is Reason.WAITING_FOR_GANG
    }


def _owners(inputs: Inputs | None) -> dict[Key, OwnerRef]:
    """The owner of each PodGroup an automatic gang made (gangsched's, labelled managed-by)."""
    if inputs is None:
        return {}
    return {g.key: g.controller for g in inputs.pod_groups if g.managed and g.controller is not None}


def to_json(result: CycleResult, inputs: Inputs | None = None) -> dict[str, Any]:
    """Pods, PodGroups and preemptions. Automatic gangs add, and only where they apply, a
    PodGroup's "owner" (apiVersion, kind, name) and a held pod's "waitingForGang" (why)."""
    held = _held(result)
    owners = _owners(inputs)
    pods = []
    for pod, node, decision in sorted(result.pods, key=lambda row: row[0].key):
        row: dict[str, Any] = {
            "namespace": pod.namespace,
            "name": pod.name,
            "podGroup": pod.pod_group,
            "node": node,
            "devices": [
                {
                    "claim": d.claim,
                    "request": d.request,
                    "driver": d.driver,
                    "pool": d.pool,
                    "device": d.device,
                }
                for d in (decision.devices.get(pod.key, []) if node else [])
            ],
        }
        if pod.key in held:
            row["waitingForGang"] = held[pod.key]
        pods.append(row)
    groups = []
    for d in sorted(result.decisions, key=lambda d: d.key):
        if not d.is_pod_group:
            continue
        group: dict[str, Any] = {
            "namespace": d.namespace,
            "name": d.name,
            "scheduled": d.scheduled,
            "reason": d.reason,
            "message": d.message,
        }
        if d.key in owners:
            group["owner"] = _owner_json(owners[d.key])
        groups.append(group)
    preempted = sorted(
        (
            {"namespace": victim.namespace, "name": victim.name, "by": f"{d.namespace}/{d.name}"}
            for d in result.decisions
            if d.preemption is not None
            for victim in d.preemption.victims
        ),
        key=lambda v: (v["namespace"], v["name"]),
    )
    return {"pods": pods, "podGroups": groups, "preempted": preempted}


def to_text(result: CycleResult, inputs: Inputs | None = None) -> str:
    """A table of PodGroups (with their owner when an automatic gang made one), one of pods,
    why held pods wait for their gang, the preemptions, and a count."""
    lines = []
    owners = _owners(inputs)
    groups = sorted((d for d in result.decisions if d.is_pod_group), key=lambda d: d.key)
    if groups:
        width = max(len(f"{d.namespace}/{d.name}") for d in groups)
        owned = {d.key: f"{owners[d.key].kind}/{owners[d.key].name}" for d in groups if d.key in owners}
        if owned:
            owidth = max(5, *(len(o) for o in owned.values()))
            lines.append(f"{'PODGROUP':<{width}}  {'OWNER':<{owidth}}  {'REASON':<16}  MESSAGE")
            for d in groups:
                name = d.namespace + "/" + d.name
                lines.append(
                    f"{name:<{width}}  {owned.get(d.key, '-'):<{owidth}}  {d.reason:<16}  {d.message}"
                )
        else:
            lines.append(f"{'PODGROUP':<{width}}  {'REASON':<16}  MESSAGE")
            for d in groups:
                lines.append(f"{d.namespace + '/' + d.name:<{width}}  {d.reason:<16}  {d.message}")
        lines.append("")
    rows = sorted(result.pods, key=lambda row: row[0].key)
    if rows:
        width = max(len(f"{p.namespace}/{p.name}") for p, _, _ in rows)
        gwidth = max(8, *(len(p.pod_group or "-") for p, _, _ in rows))
        with_devices = any(node and decision.devices.get(pod.key) for pod, node, decision in rows)
        nwidth = max(4, *(len(node or f"<pending: {d.reason}>") for _, node, d in rows))
        header = f"{'POD':<{width}}  {'PODGROUP':<{gwidth}}  {'NODE':<{nwidth}}  DEVICES"
        lines.append(header if with_devices else f"{'POD':<{width}}  {'PODGROUP':<{gwidth}}  NODE")
        for pod, node, decision in rows:
            where = node or f"<pending: {decision.reason}>"
            line = f"{pod.namespace + '/' + pod.name:<{width}}  {pod.pod_group or '-':<{gwidth}}  {where}"
            if with_devices:
                devices = decision.devices.get(pod.key, []) if node else []
                names = ",".join(f"{d.pool}/{d.device}" for d in devices) or "-"
                line = f"{line:<{len(header) - len('DEVICES')}}{names}"
            lines.append(line)
    else:
        lines.append("no pending pods to place")
    # Held pods, grouped by why (the pods of one workload wait for the same reason).
    why: dict[str, list[str]] = {}
    for (namespace, name), message in sorted(_held(result).items()):
        why.setdefault(message, []).append(f"{namespace}/{name}")
    for message, held in why.items():
        verb = "waits for its gang" if len(held) == 1 else "wait for their gang"
        lines.append(f"{', '.join(held)} {verb}: {message}")
    placed = sum(1 for _, node, _ in rows if node)
    preemptions = [d for d in result.decisions if d.preemption is not None]
    for d in preemptions:
        assert d.preemption is not None
        victims = ", ".join(f"{p.namespace}/{p.name}" for p in d.preemption.victims)
        lines.append(f"{d.namespace}/{d.name} would preempt: {victims}")
    lines.append("")
    automatic = sum(1 for d in groups if d.key in owners)
    count = f"{len(groups)} pod groups" + (f" ({automatic} automatic)" if automatic else "")
    lines.append(f"{placed}/{len(rows)} pending pods placed; {count}")
    return "\n".join(lines)


def occupancy(inputs: Inputs, result: CycleResult, *, levels: Sequence[str] | None = None) -> Occupancy:
    """GPUs per topology domain once the simulated placements are made (`--plot`): the bound
    pods and the placed ones, and the groups left unplaced."""
    placed = {pod.key: node for pod, node, _ in result.pods if node}
    apis = {g.key: g.api for g in inputs.pod_groups}
    waiting = [
        Waiting(
            name=group_label(d.namespace, d.name, apis.get(d.key, PodGroupApi.GANGSCHED))
            if d.is_pod_group
            else f"{d.namespace}/{d.name}",
            pods=len(d.pending),
            units=waiting_units(d.pending, None),
            reason=d.reason.value,
            message=d.message,
        )
        for d in sorted(result.decisions, key=lambda d: d.key)
        if not d.scheduled
    ]
    return build(
        inputs.nodes,
        inputs.pods,
        levels=levels,
        placed=placed,
        waiting=waiting,
        owners=automatic_owners(inputs.pod_groups),
    )
