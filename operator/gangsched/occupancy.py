"""GPUs by topology domain, and which gangs hold them: `gangsched top`, `gangsched simulate
--plot` and `make demo`'s live view.

An `Occupancy` is built from the model's Nodes and Pods (`build`): per node its GPUs
(allocatable of every resource named like a GPU, e.g. nvidia.com/gpu, or one resource of the
user's choice), those bound pods request, and per holder (a PodGroup namespace/name, of
either API: a native scheduling.k8s.io/v1alpha2 PodGroup's carries `NATIVE_MARK`, and in
JSON `"api": "native"`; pods of no PodGroup together as `OTHER`). A PodGroup an automatic gang
made is followed by its owner, `(Job/train)`, and in JSON `"owner"`. Domains are the paths of
the node label values of `levels` (outermost first), as the engine forms them: rack r1 of
block b0 and rack r1 of block b1 are two racks. Gangs still waiting are listed apart
(`Waiting`).

Rendered as text (one line per domain, indented per level) and JSON here, as a picture by
`gangsched.plot`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangsched.model import Node, OwnerRef, Pod, PodGroup, PodGroupApi, Reason

# The topology label keys of the demo and the examples (docs/placement.md), outermost first;
# `default_levels` keeps those the nodes carry.
DEFAULT_LEVEL_KEYS = ("topology.kubernetes.io/zone", "example.com/block", "example.com/rack")
# Pods of no PodGroup, together.
OTHER = "(other pods)"
# The shown value of a level label a node lacks.
MISSING = "-"
# After the namespace/name of a native (scheduling.k8s.io/v1alpha2) PodGroup: the two APIs
# may each have a PodGroup of one name, and they are different gangs.
NATIVE_MARK = " (native)"
# The kind of `pending_gangs`' entries of held pods (an API's value for PodGroups, "" for pods).
_HELD = "held"


def is_gpu(resource: str) -> bool:
    """A resource counted as GPUs: named like one (nvidia.com/gpu, amd.com/gpu, ...), the rule
    preemption counts GPUs by."""
    return "gpu" in resource.lower()


@dataclass(frozen=True, slots=True)
class NodeUse:
    name: str
    path: tuple[str, ...]  # the values of the levels' labels, MISSING where absent
    total: int
    used: int
    holders: Mapping[str, int]  # PodGroup "namespace/name" (or OTHER) -> units
    # Cordoned or not ready: its free GPUs cannot be used now.
    unavailable: bool = False


@dataclass(frozen=True, slots=True)
class Waiting:
    """A gang (or a pod of no PodGroup) with pods not placed."""

    name: str  # namespace/name (with NATIVE_MARK for a native PodGroup)
    pods: int
    units: int  # what its pending pods ask of the resource
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class DomainUse:
    depth: int  # 0 for the outermost level
    level: str
    path: tuple[str, ...]
    nodes: int
    total: int
    used: int
    holders: Mapping[str, int]

    @property
    def name(self) -> str:
        return self.path[-1]


@dataclass(slots=True)
class Occupancy:
    levels: tuple[str, ...]
    resource: str  # what is counted: "GPUs", or a resource name
    nodes: list[NodeUse]
    waiting: list[Waiting] = field(default_factory=list)
    # Holder or waiting gang label -> the workload whose automatic gang it is.
    owners: Mapping[str, OwnerRef] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(n.total for n in self.nodes)

    @property
    def used(self) -> int:
        return sum(n.used for n in self.nodes)

    def holders(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for node in self.nodes:
            out.update(node.holders)
        return out

    def domains(self) -> list[DomainUse]:
        """Every domain of every level, depth first (a block, then its racks), sorted by path."""
        by_path: dict[tuple[str, ...], list[NodeUse]] = {}
        for node in self.nodes:
            for depth in range(len(self.levels)):
                by_path.setdefault(node.path[: depth + 1], []).append(node)
        out = []
        for path in sorted(by_path):
            members = by_path[path]
            holders: Counter[str] = Counter()
            for node in members:
                holders.update(node.holders)
            out.append(
                DomainUse(
                    depth=len(path) - 1,
                    level=self.levels[len(path) - 1],
                    path=path,
                    nodes=len(members),
                    total=sum(n.total for n in members),
                    used=sum(n.used for n in members),
                    holders=dict(holders),
                )
            )
        return out


def default_levels(nodes: Iterable[Node]) -> tuple[str, ...]:
    """The keys of `DEFAULT_LEVEL_KEYS` some node carries."""
    present = {key for node in nodes for key in node.labels}
    return tuple(key for key in DEFAULT_LEVEL_KEYS if key in present)


def parse_levels(text: str) -> tuple[str, ...]:
    """`--levels key1,key2`: label keys, outermost first."""
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if len(set(keys)) != len(keys):
        raise ValueError("--levels: a key is listed twice")
    return keys


def _units(requests: Mapping[str, int], resource: str | None) -> int:
    """Whole units (GPUs; cores for cpu) of `resource` in milli-unit quantities."""
    if resource is None:
        return sum(v for k, v in requests.items() if is_gpu(k)) // 1000
    return requests.get(resource, 0) // 1000


def group_label(namespace: str, name: str, api: PodGroupApi = PodGroupApi.GANGSCHED) -> str:
    """How a PodGroup is named as a holder or a waiting gang: namespace/name, marked when native."""
    return f"{namespace}/{name}" + (NATIVE_MARK if api is PodGroupApi.NATIVE else "")


def parse_label(label: str) -> tuple[str | None, str | None]:
    """A holder's or waiting gang's label -> (namespace/name or None for OTHER, "native" or None)."""
    if label == OTHER:
        return None, None
    if label.endswith(NATIVE_MARK):
        return label[: -len(NATIVE_MARK)], PodGroupApi.NATIVE.value
    return label, None


def holder(pod: Pod) -> str:
    return group_label(pod.namespace, pod.pod_group, pod.pod_group_api) if pod.pod_group else OTHER


def automatic_owners(pod_groups: Iterable[PodGroup]) -> dict[str, OwnerRef]:
    """The owner of each PodGroup gangsched made for a workload (labelled managed-by, with a
    controller), by its label: what `build` names next to it."""
    return {
        group_label(g.namespace, g.name, g.api): g.controller
        for g in pod_groups
        if g.managed and g.controller is not None
    }


def owner_text(ref: OwnerRef) -> str:
    """``Job/train``: an automatic gang's owner, as the tools show it."""
    return f"{ref.kind}/{ref.name}"


def build(
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    *,
    levels: Sequence[str] | None = None,
    resource: str | None = None,
    placed: Mapping[tuple[str, str], str] | None = None,
    waiting: Sequence[Waiting] = (),
    owners: Mapping[str, OwnerRef] | None = None,
) -> Occupancy:
    """What `pods` take of `resource` (None: GPUs) on `nodes`; nodes without any are left out.

    A pod counts when it holds resources (bound, not finished) or when `placed` gives it a
    node (a simulated placement). `owners` (`automatic_owners`) names the workload of each
    automatic gang."""
    keys = tuple(levels) if levels is not None else default_levels(nodes)
    placed = placed or {}
    use: dict[str, Counter[str]] = {}
    for pod in pods:
        where = pod.node_name if pod.holds_resources else placed.get(pod.key)
        if not where or pod.terminal:
            continue
        units = _units(pod.requests, resource)
        if units:
            use.setdefault(where, Counter())[holder(pod)] += units
    out = []
    for node in sorted(nodes, key=lambda n: n.name):
        total = _units(node.allocatable, resource)
        if total <= 0:
            continue
        holders = use.get(node.name, Counter())
        out.append(
            NodeUse(
                name=node.name,
                path=tuple(node.labels.get(k) or MISSING for k in keys),
                total=total,
                used=sum(holders.values()),
                holders=dict(holders),
                unavailable=node.unschedulable or not node.ready,
            )
        )
    return Occupancy(keys, resource or "GPUs", out, list(waiting), dict(owners or {}))


def waiting_units(pods: Iterable[Pod], resource: str | None) -> int:
    return sum(_units(p.requests, resource) for p in pods)


# ----------------------------------------------------------------------------- rendering


def shown(occ: Occupancy, label: str) -> str:
    """A holder's or waiting gang's label as shown: with its owner when an automatic gang."""
    ref = occ.owners.get(label)
    return label if ref is None else f"{label} ({owner_text(ref)})"


def _holders_text(occ: Occupancy, holders: Mapping[str, int]) -> str:
    ranked = sorted(holders.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{shown(occ, name)} {units}" for name, units in ranked) or "-"


def to_text(occ: Occupancy, *, waiting: bool = True) -> str:
    """One line per domain, indented per level; then the waiting gangs."""
    unit = occ.resource.upper() if occ.resource == "GPUs" else occ.resource
    where = " > ".join(occ.levels) if occ.levels else "no topology levels"
    lines = [f"{occ.resource} by {where}: {occ.used}/{occ.total} used on {len(occ.nodes)} nodes"]
    if not occ.nodes:
        lines.append("no node offers any" + ("" if occ.resource == "GPUs" else f" {occ.resource}"))
    elif occ.levels:
        domains = occ.domains()
        width = max(5, *(2 * d.depth + len(d.name) for d in domains))
        uwidth = max(len(unit), *(len(f"{d.used}/{d.total}") for d in domains))
        lines.append(f"{'DOMAIN':<{width}}  {unit:>{uwidth}}  HELD BY")
        for d in domains:
            label = "  " * d.depth + d.name
            lines.append(
                f"{label:<{width}}  {f'{d.used}/{d.total}':>{uwidth}}  {_holders_text(occ, d.holders)}"
            )
    else:
        lines.append(f"held by: {_holders_text(occ, occ.holders())}")
    if waiting and occ.waiting:
        lines.append("")
        nwidth = max(7, *(len(shown(occ, w.name)) for w in occ.waiting))
        lines.append(f"{'WAITING':<{nwidth}}  {'PODS':>4}  {unit:>{len(unit)}}  WHY")
        for w in occ.waiting:
            why = f"{w.reason}: {w.message}" if w.reason and w.message else (w.reason or w.message or "-")
            lines.append(f"{shown(occ, w.name):<{nwidth}}  {w.pods:>4}  {w.units:>{len(unit)}}  {why}")
    return "\n".join(lines)


def _named(label: str, owners: Mapping[str, OwnerRef] | None = None) -> dict[str, Any]:
    """A holder's or waiting gang's name for JSON: a native PodGroup's name without the mark,
    and "api": "native" (absent for gangsched's PodGroups and other pods); an automatic gang's
    "owner" (apiVersion, kind, name; absent for other PodGroups)."""
    group, api = parse_label(label)
    out: dict[str, Any] = {"name": group or label}
    if api is not None:
        out["api"] = api
    ref = (owners or {}).get(label)
    if ref is not None:
        out["owner"] = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
    return out


def to_json(occ: Occupancy) -> dict[str, Any]:
    def held(holders: Mapping[str, int]) -> list[dict[str, Any]]:
        return [
            {"podGroup": parse_label(name)[0], **_named(name, occ.owners), "used": units}
            for name, units in sorted(holders.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    return {
        "resource": occ.resource,
        "levels": list(occ.levels),
        "used": occ.used,
        "total": occ.total,
        "domains": [
            {
                "level": d.level,
                "name": d.name,
                "path": list(d.path),
                "nodes": d.nodes,
                "used": d.used,
                "total": d.total,
                "heldBy": held(d.holders),
            }
            for d in occ.domains()
        ],
        "nodes": [
            {
                "name": n.name,
                "path": list(n.path),
                "used": n.used,
                "total": n.total,
                "heldBy": held(n.holders),
            }
            for n in occ.nodes
        ],
        "waiting": [
            {
                **_named(w.name, occ.owners),
                "pods": w.pods,
                "units": w.units,
                "reason": w.reason,
                "message": w.message,
            }
            for w in occ.waiting
        ],
    }


def _condition(status: Mapping[str, Any] | None) -> tuple[str, str]:
    for cond in (status or {}).get("conditions") or ():
        if (
            isinstance(cond, Mapping)
            and cond.get("type") == "PodGroupScheduled"
            and cond.get("status") == "False"
        ):
            return str(cond.get("reason") or ""), str(cond.get("message") or "")
    return "", ""


def held_gangs(
    held: Mapping[tuple[str, str], str],
    gangs: Mapping[tuple[str, str], tuple[OwnerRef, str]],
    pod_groups: Container[tuple[str, str]],
) -> tuple[dict[tuple[str, str], tuple[str, str | None]], dict[str, OwnerRef]]:
    """The pods held while their automatic gang forms (`explain.held_view`: why each waits,
    its workload and its gang's name) as `pending_gangs` takes them: pod -> (why, the gang's
    name to list it under, None to list it alone: a PodGroup of that name exists, not its
    own), and the owners of those gangs by label (for `build`)."""
    out: dict[tuple[str, str], tuple[str, str | None]] = {}
    owners: dict[str, OwnerRef] = {}
    for key, message in held.items():
        gang = gangs.get(key)
        name = None
        if gang is not None and (key[0], gang[1]) not in pod_groups:
            name = gang[1]
            owners[group_label(key[0], name)] = gang[0]
        out[key] = (message, name)
    return out, owners


def pending_gangs(
    pods: Iterable[Pod],
    *,
    scheduler_name: str,
    resource: str | None = None,
    statuses: Mapping[tuple[str, str], Mapping[str, Any] | None] | None = None,
    apis: Mapping[tuple[str, str], PodGroupApi] | None = None,
    held: Mapping[tuple[str, str], tuple[str, str | None]] | None = None,
) -> list[Waiting]:
    """The groups (and pods of no PodGroup) with pods of `scheduler_name` not bound yet, with
    the PodGroupScheduled condition their status carries (from `statuses`, by PodGroup key).
    Pods naming a PodGroup of either API are grouped per API; `apis` (by PodGroup key) says
    which API's PodGroup `statuses` holds, so pods naming the other API's get no status.
    `held` pods (`held_gangs`) wait WaitingForGang, under their automatic gang's name."""
    pending: dict[tuple[str, str, str], list[Pod]] = {}
    for pod in pods:
        if pod.scheduler_name != scheduler_name or pod.node_name or pod.terminal or pod.deleting:
            continue
        held_as = held.get(pod.key) if held else None
        if held_as is not None:
            key = (pod.namespace, held_as[1] or pod.name, _HELD)
        else:
            api = pod.pod_group_api.value if pod.pod_group else ""
            key = (pod.namespace, pod.pod_group or pod.name, api)
        pending.setdefault(key, []).append(pod)
    out = []
    for key in sorted(pending):
        ns, name, kind = key
        members = pending[key]
        first = members[0]
        reason, message = "", ""
        if kind == _HELD:
            assert held is not None
            reason, message = Reason.WAITING_FOR_GANG.value, held[first.key][0]
            label = group_label(ns, name)
        else:
            if first.pod_group and (apis is None or apis.get((ns, name)) is first.pod_group_api):
                reason, message = _condition((statuses or {}).get((ns, name)))
            label = group_label(ns, name, first.pod_group_api)
        out.append(Waiting(label, len(members), waiting_units(members, resource), reason, message))
    return out
