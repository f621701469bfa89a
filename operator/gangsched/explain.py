"""`gangsched explain NAMESPACE/NAME`: why a gang waits, or where it went, from the live cluster.

The cluster is read once (`cluster.read`) into the operator's own cache types and the engine
runs one cycle on it (`engine.whatif.analyse`, which calls `schedule_cycle` as the loop
does). This module only parses the name, looks the PodGroup up and renders the answer:

- scheduled (every pod bound): the nodes per domain of its topology levels; exit 0;
- waiting: the engine's reason, the nodes per reason ("6/32 nodes are available: 26
  Insufficient nvidia.com/gpu."), the domains closest to holding it and what limits each,
  and the smallest change that would make it fit now, then the others; exit 1.

Either API's PodGroup is explained the same way: gangsched's CRD or Kubernetes' own
scheduling.k8s.io/v1alpha2 PodGroup. When both have one of that name, gangsched's is the one
the operator schedules, so it is the one explained, and one line says the other exists.

Automatic gangs (model/owners.py): a PodGroup gangsched made for a workload names its owner
(`Job/train`). When a pending pod of ours has a controller, the owner kinds the API serves are
listed too (`cluster.read.read_owners`, with the user's credentials), so that the pods the
operator holds out of the queue while their gang forms (the loop's own `loop.formation`,
reason WaitingForGang) are held here as well, and said:

- NAME is a PodGroup: as above; pods of its workload not in it yet are named with why;
- NAME is no PodGroup but the name of an automatic gang not formed yet (`job-train` while
  the Job's annotation is invalid, say): its owner and why its pods wait (`Forming`);
- NAME is a pod: a member of a PodGroup is explained through it; any other pod on its own,
  its WaitingForGang reason when it is held (`PodReport`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangsched.cluster.cache import ClusterCache
from gangsched.cluster.read import (
    Cluster,
    FoundPodGroup,
    find_pod_group,
    get,
    read_cluster,
    read_members,
    read_owners,
)
from gangsched.engine import schedule_cycle
from gangsched.engine.explain import DomainFit
from gangsched.engine.types import GroupDecision
from gangsched.engine.whatif import Analysis, Change, analyse
from gangsched.loop.formation import Formation, JoinPodGroup, pending
from gangsched.loop.gangs import not_served
from gangsched.model import (
    DEFAULT_SCHEDULER_NAME,
    Key,
    ModelError,
    Node,
    OwnerRef,
    Pod,
    PodGroup,
    PodGroupApi,
    Reason,
    parse_pod,
)
from gangsched.model.owners import automatic_name
from gangsched.occupancy import owner_text

EXIT_SCHEDULED = 0
EXIT_WAITING = 1
EXIT_BAD_INPUT = 2

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAMESPACE = re.compile(_LABEL)
_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")


class BadInputError(Exception):
    """The command line names no PodGroup that can be looked up; one line for a person."""


def parse_name(text: str, namespace: str | None = None) -> tuple[str, str]:
    """NAMESPACE/NAME (or NAME with `namespace`), both valid Kubernetes names."""
    if "/" in text:
        if namespace is not None:
            raise BadInputError(f"{text!r}: give NAMESPACE/NAME or --namespace with NAME, not both")
        ns, _, name = text.partition("/")
    elif namespace is not None:
        ns, name = namespace, text
    else:
        raise BadInputError(f"{text!r}: expected NAMESPACE/NAME (e.g. ml/train)")
    if not (len(ns) <= 63 and _NAMESPACE.fullmatch(ns)):
        raise BadInputError(f"{ns!r} is not a valid namespace (lowercase letters, digits and '-')")
    if not (len(name) <= 253 and _NAME.fullmatch(name)):
        raise BadInputError(f"{name!r} is not a valid PodGroup name (lowercase letters, digits, '-' and '.')")
    return ns, name


@dataclass(frozen=True, slots=True)
class HeldPod:
    """A pending pod held out of the queue while its automatic gang forms, and why."""

    namespace: str
    name: str
    message: str

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


@dataclass(slots=True)
class Report:
    found: FoundPodGroup
    analysis: Analysis
    nodes: Mapping[str, Node]
    # The apiVersion of the native PodGroup of the same namespace/name as gangsched's explained
    # one, when one exists (the operator schedules gangsched's and warns on the native one).
    name_clash: str | None = None
    # Pods of the workload whose automatic gang has this PodGroup's name, not in it (yet).
    held: list[HeldPod] = field(default_factory=list)
    # The pod NAME named, when it was a pod (a member of this PodGroup).
    via_pod: str | None = None
    # Owner collections served that the user may not list (module doc).
    not_listed: list[str] = field(default_factory=list)

    @property
    def owner(self) -> OwnerRef | None:
        """The workload whose automatic gang this PodGroup is (gangsched made it), else None."""
        group = self.found.group
        return group.controller if group.managed and not group.is_native else None

    @property
    def key(self) -> tuple[str, str]:
        return self.analysis.key

    @property
    def exit_code(self) -> int:
        return EXIT_SCHEDULED if self.analysis.scheduled else EXIT_WAITING

    @property
    def levels(self) -> tuple[str, ...]:
        spec = self.found.group.spec
        return tuple(c.key for c in spec.scheduling_constraints.topology) if spec is not None else ()


@dataclass(slots=True)
class Forming:
    """An automatic gang whose PodGroup does not exist: its workload and its held pods."""

    namespace: str
    name: str
    owner: OwnerRef
    held: list[HeldPod]
    not_listed: list[str] = field(default_factory=list)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def exit_code(self) -> int:
        return EXIT_WAITING


@dataclass(slots=True)
class PodReport:
    """A pod in no PodGroup that exists: alone, held while its automatic gang forms, or naming
    a PodGroup that does not exist; the cycle's decision for it while it waits."""

    pod: Pod
    # The workload whose automatic gang it belongs to (the top owner of its controller chain)
    # and that gang's PodGroup name; None when its chain reaches no table kind.
    owner: OwnerRef | None
    gang: str | None
    decision: GroupDecision | None
    held: str | None = None
    not_listed: list[str] = field(default_factory=list)
    # Another scheduler's pod (spec.schedulerName): gangsched does not place it.
    other_scheduler: bool = False

    @property
    def key(self) -> Key:
        return self.pod.key

    @property
    def scheduled(self) -> bool:
        return bool(self.pod.node_name)

    @property
    def exit_code(self) -> int:
        return EXIT_SCHEDULED if self.scheduled else EXIT_WAITING


Explanation = Report | Forming | PodReport


def _needs_owners(cache: ClusterCache, scheduler_name: str) -> bool:
    """Could a pod of ours be held (a pending one with a controller)? Only then are owners read."""
    return any(
        p.controller is not None and p.scheduler_name == scheduler_name and pending(p)
        for p in cache.pods.values()
    )


@dataclass(slots=True)
class HeldView:
    """The cluster as read once, with the pods the operator would hold out of the queue while
    their automatic gang forms (`explain`, and `top`'s waiting gangs)."""

    cache: ClusterCache
    held: dict[Key, str]  # held pod -> why (its WaitingForGang message)
    gangs: dict[Key, tuple[OwnerRef, str]]  # held pod -> its workload and its gang's name
    not_listed: list[str]  # owner collections served that the user may not list

    def held_for(self, namespace: str, name: str) -> list[HeldPod]:
        """The held pods whose automatic gang is namespace/name."""
        return [
            HeldPod(key[0], key[1], self.held[key])
            for key, (_, gang) in sorted(self.gangs.items())
            if key[0] == namespace and gang == name
        ]


def held_view(
    cluster: Cluster,
    cache: ClusterCache,
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    found: FoundPodGroup | None = None,
    served: dict[str, set[str]] | None = None,
) -> HeldView:
    """Read the owners when a pending pod of ours has a controller (`read_owners`; `served`
    keeps its discovery across calls), and hold the pods the loop would hold
    (`loop.formation.Formation`). `found` is a PodGroup as just read, newer than the LIST."""
    not_listed = read_owners(cluster, cache, served) if _needs_owners(cache, scheduler_name) else []

    def existing(key: Key) -> PodGroup | None:
        if found is not None and not found.group.is_native and found.group.key == key:
            return found.group  # as just read
        return cache.pod_group_of(key, PodGroupApi.GANGSCHED)

    formation = Formation(cache.owners, existing, scheduler_name=scheduler_name, blocked=not_served(cache))
    steps = formation.steps(cache.pods.values())
    held = {}
    gangs = {}
    for key, step in steps.items():
        if isinstance(step, JoinPodGroup):
            # As the loop does: a member of its gang's PodGroup while its label is written.
            cache.join(key, step.gang.name)
            continue
        held[key] = step.reason
        named = automatic_name(cache.pods[key], cache.owners)
        if named is not None:
            gangs[key] = (named[0].ref, named[1])
    return HeldView(cache, held, gangs, not_listed)


def explain(
    cluster: Cluster, namespace: str, name: str, *, scheduler_name: str = DEFAULT_SCHEDULER_NAME
) -> Explanation:
    """Read the cluster and explain NAME: a PodGroup (analysed), an automatic gang not formed
    yet, or a pod (module doc); BadInputError when it is none of them."""
    cache = read_cluster(cluster)
    found = find_pod_group(cluster, namespace, name, cache.priority_classes)
    look = held_view(cluster, cache, scheduler_name=scheduler_name, found=found)
    if found is not None:
        return _group_report(cluster, look, found, scheduler_name)
    held = look.held_for(namespace, name)
    if held:
        owner = look.gangs[held[0].key][0]
        return Forming(namespace, name, owner, held, look.not_listed)
    pod = _find_pod(cluster, cache, namespace, name)
    if pod is None:
        raise BadInputError(f"PodGroup {namespace}/{name} not found")
    group_key = cache.group_of(pod)
    if group_key is not None and group_key in cache.pod_groups:
        member_of = find_pod_group(cluster, *group_key, cache.priority_classes)
        if member_of is not None:
            report = _group_report(cluster, look, member_of, scheduler_name)
            report.via_pod = pod.name
            return report
    return _pod_report(look, pod, scheduler_name)


def _find_pod(cluster: Cluster, cache: ClusterCache, namespace: str, name: str) -> Pod | None:
    """The pod as the cache holds it (assumed bindings applied), else as a GET reads it (a
    finished pod is not in the LIST of unfinished ones)."""
    pod = cache.pods.get((namespace, name))
    if pod is not None:
        return cache.assumptions.view(pod)
    body = get(cluster, f"/api/v1/namespaces/{namespace}/pods/{name}", what=f"get pod {namespace}/{name}")
    if body is None:
        return None
    try:
        return parse_pod(body, priorities=cache.priority_classes)
    except ModelError as exc:
        raise BadInputError(f"pod {namespace}/{name} cannot be read: {exc}") from None


def _group_report(cluster: Cluster, look: HeldView, found: FoundPodGroup, scheduler_name: str) -> Report:
    cache = look.cache
    namespace, name = found.group.key
    read_members(cluster, cache, namespace, name, found.group.api)
    groups = dict(cache.pod_groups)
    groups[found.group.key] = found.group  # as just read (the LIST may be a moment older)
    # Ours is looked up first: a native PodGroup of the same name is the one not scheduled.
    native = PodGroupApi.NATIVE
    clash = not found.group.is_native and cache.pod_group_of(found.group.key, native) is not None
    analysis = analyse(
        nodes=list(cache.nodes.values()),
        pods=cache.pods_for_engine(),
        pod_groups=list(groups.values()),
        target=(namespace, name),
        scheduler_name=scheduler_name,
        dra=cache.devices.objects(time.monotonic()),
        budgets=list(cache.budgets.values()),
        held_pods=look.held or None,
    )
    held = look.held_for(namespace, name) if not found.group.is_native else []
    return Report(
        found,
        analysis,
        dict(cache.nodes),
        native.api_version if clash else None,
        held=held,
        not_listed=look.not_listed,
    )


def _pod_report(look: HeldView, pod: Pod, scheduler_name: str) -> PodReport:
    cache = look.cache
    named = automatic_name(pod, cache.owners) if pod.controller is not None else None
    decision = None
    if not pod.node_name and not pod.terminal:
        result = schedule_cycle(
            nodes=list(cache.nodes.values()),
            pods=cache.pods_for_engine(),
            pod_groups=list(cache.pod_groups.values()),
            scheduler_name=scheduler_name,
            dra=cache.devices.objects(time.monotonic()),
            budgets=list(cache.budgets.values()),
            held_pods=look.held or None,
        )
        decision = next((d for p, _, d in result.pods if p.key == pod.key), None)
    return PodReport(
        pod,
        owner=named[0].ref if named is not None else None,
        gang=named[1] if named is not None else None,
        decision=decision,
        held=look.held.get(pod.key),
        not_listed=look.not_listed,
        other_scheduler=pod.scheduler_name != scheduler_name,
    )


# ----------------------------------------------------------------------------- rendering


def placement(report: Report) -> dict[str, dict[str, int]]:
    """Where the bound pods are: domain ("key=value/key=value" over the group's topology
    levels; "" without any) -> node -> pods."""
    out: dict[str, dict[str, int]] = {}
    for pod in report.analysis.bound:
        node = report.nodes.get(pod.node_name)
        labels = node.labels if node is not None else {}
        domain = "/".join(f"{k}={labels.get(k, '?')}" for k in report.levels)
        per = out.setdefault(domain, {})
        per[pod.node_name] = per.get(pod.node_name, 0) + 1
    return {d: dict(sorted(per.items())) for d, per in sorted(out.items())}


def nodes_summary(report: Report) -> str | None:
    """kube-scheduler's line: "6/32 nodes are available: 26 Insufficient nvidia.com/gpu."."""
    reasons = report.analysis.reasons
    if reasons is None:
        return None
    parts = ", ".join(f"{count} {text}" for text, count in reasons.ranked())
    return f"{reasons.eligible}/{reasons.total} nodes are available" + (f": {parts}." if parts else ".")


def _counts(report: Report) -> dict[str, int]:
    members = [p for p in report.analysis.members if not p.terminal or p.node_name]
    bound = sum(1 for p in members if p.node_name)
    return {"total": len(members), "bound": bound, "pending": len(members) - bound}


def _condition(report: Report) -> dict[str, str] | None:
    """The PodGroupScheduled condition of the PodGroup's status (both APIs write it)."""
    for cond in report.found.status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "PodGroupScheduled":
            return {k: str(cond.get(k) or "") for k in ("status", "reason", "message")}
    return None


def _phase(report: Report) -> str:
    """status.phase; a native PodGroup has none: its PodGroupScheduled condition's reason."""
    phase = str(report.found.status.get("phase") or "")
    if not phase and report.found.group.is_native:
        cond = _condition(report)
        phase = cond["reason"] if cond is not None else ""
    return phase


def _clash_line(report: Report) -> str | None:
    if report.name_clash is None:
        return None
    ns, name = report.key
    return (
        f"a {report.name_clash} PodGroup {ns}/{name} exists too: gangsched schedules this one and "
        "warns on that one (PodGroupNameClash); rename one of them"
    )


def _domain_json(d: DomainFit) -> dict[str, Any]:
    return {
        "level": d.level,
        "domain": d.name,
        "path": list(d.path),
        "fits": d.fits,
        "want": d.want,
        "nodes": d.nodes,
        "usableNodes": d.usable,
        "limitedBy": d.limited_by,
    }


def _change_json(c: Change) -> dict[str, Any]:
    return {"kind": c.kind, "summary": c.summary, "outcome": c.outcome, **c.data}


def _group_json(report: Report) -> dict[str, Any]:
    a = report.analysis
    spec = report.found.group.spec
    decision = a.decision
    reasons = a.reasons
    would = None
    if decision is not None and decision.scheduled and not a.scheduled:
        nodes: dict[str, int] = {}
        for node in decision.assignments.values():
            nodes[node] = nodes.get(node, 0) + 1
        would = {"domain": decision.domain, "nodes": dict(sorted(nodes.items()))}
    out: dict[str, Any] = {
        "podGroup": {"apiVersion": report.found.api_version, "namespace": a.key[0], "name": a.key[1]},
        "nameClash": None
        if report.name_clash is None
        else {"apiVersion": report.name_clash, "namespace": a.key[0], "name": a.key[1]},
        "scheduled": a.scheduled,
        "phase": _phase(report),
        "minCount": spec.min_count if spec is not None else None,
        "gang": spec.is_gang if spec is not None else None,
        "pods": _counts(report),
        "reason": None if a.scheduled or decision is None else decision.reason.value,
        "message": None if a.scheduled or decision is None else decision.message,
        "nodes": None
        if reasons is None
        else {"total": reasons.total, "available": reasons.eligible, "reasons": dict(reasons.ranked())},
        "summary": nodes_summary(report),
        "domains": [_domain_json(d) for d in a.domains],
        "smallestChange": _change_json(a.changes[0]) if a.changes else None,
        "changes": [_change_json(c) for c in a.changes],
        "placement": [{"domain": d, "nodes": per} for d, per in placement(report).items()],
        "wouldPlace": would,
    }
    # Only where they apply: the keys of any other PodGroup's answer stay exactly as they were.
    if report.owner is not None:
        out["owner"] = _owner_json(report.owner)
    if report.held:
        out["heldPods"] = [_held_json(h) for h in report.held]
    if report.via_pod:
        out["pod"] = report.via_pod
    if report.not_listed:
        out["ownersNotListed"] = report.not_listed
    return out


def _owner_json(ref: OwnerRef | None) -> dict[str, str] | None:
    """An automatic gang's workload: {"apiVersion", "kind", "name"}; None for any other group."""
    return None if ref is None else {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}


def _held_json(held: HeldPod) -> dict[str, str]:
    return {
        "namespace": held.namespace,
        "name": held.name,
        "reason": Reason.WAITING_FOR_GANG.value,
        "message": held.message,
    }


def _forming_json(report: Forming) -> dict[str, Any]:
    return {
        "podGroup": {
            "apiVersion": PodGroupApi.GANGSCHED.api_version,
            "namespace": report.namespace,
            "name": report.name,
        },
        "exists": False,
        "owner": _owner_json(report.owner),
        "scheduled": False,
        "reason": Reason.WAITING_FOR_GANG.value,
        "heldPods": [_held_json(h) for h in report.held],
        "ownersNotListed": report.not_listed,
    }


def _pod_json(report: PodReport) -> dict[str, Any]:
    pod = report.pod
    decision = report.decision
    group = None
    if pod.pod_group is not None:
        group = {
            "apiVersion": pod.pod_group_api.api_version,
            "namespace": pod.namespace,
            "name": pod.pod_group,
        }
    return {
        "pod": {"namespace": pod.namespace, "name": pod.name},
        "podGroup": group,
        "owner": _owner_json(report.owner),
        "automaticPodGroup": report.gang,
        "scheduled": report.scheduled,
        "node": pod.node_name or None,
        "reason": None if report.scheduled or decision is None else decision.reason.value,
        "message": None if report.scheduled or decision is None else decision.message,
        "wouldPlace": None
        if report.scheduled or decision is None or not decision.scheduled
        else {"node": decision.assignments.get(pod.key)},
        "ownersNotListed": report.not_listed,
    }


def to_json(report: Explanation) -> dict[str, Any]:
    """The explanation as JSON: a PodGroup's (with "owner" and "heldPods" for automatic gangs),
    an automatic gang not formed yet ("exists": false), or a pod's ("pod")."""
    if isinstance(report, Forming):
        return _forming_json(report)
    if isinstance(report, PodReport):
        return _pod_json(report)
    return _group_json(report)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _group_text(report: Report) -> str:
    a = report.analysis
    spec = report.found.group.spec
    counts = _counts(report)
    ns, name = a.key
    state = "scheduled" if a.scheduled else "waiting"
    lines = [f"PodGroup {ns}/{name} ({report.found.api_version}): {state}"]
    facts = []
    if spec is not None:
        facts.append(f"gang of minCount {spec.min_count}" if spec.is_gang else "basic group")
        if spec.scheduling_constraints.topology:
            facts.append(
                "topology "
                + ", ".join(f"{c.key} {c.mode.value}" for c in spec.scheduling_constraints.topology)
            )
    facts.append(f"{_plural(counts['total'], 'pod')}: {counts['bound']} bound, {counts['pending']} pending")
    if report.found.status.get("phase"):
        facts.append(f"phase {_phase(report)}")
    elif report.found.group.is_native and (cond := _condition(report)) is not None:
        facts.append(f"PodGroupScheduled {cond['status']}/{cond['reason']}")
    lines.append("  " + "; ".join(facts))
    if report.via_pod is not None:
        lines.insert(0, f"pod {ns}/{report.via_pod} is a member of PodGroup {ns}/{name}")
    if report.owner is not None:
        lines.append(
            f"  owner: {owner_text(report.owner)} (an automatic gang: gangsched made this PodGroup for it)"
        )
    clash = _clash_line(report)
    if clash:
        lines.append("  " + clash)
    lines += _held_lines(report.held, "not in it")
    lines += _not_listed_lines(report.not_listed)
    if a.scheduled:
        lines.append("")
        lines.append("where it went:")
        for domain, per in placement(report).items():
            pods = sum(per.values())
            head = f"  {domain or 'pods'}: {_plural(pods, 'pod')} on {_plural(len(per), 'node')}"
            lines.append(head)
            lines.append("    " + ", ".join(f"{node} ({n})" if n > 1 else node for node, n in per.items()))
        return "\n".join(lines)
    decision = a.decision
    if decision is None:
        lines.append("  reason: no pods of this group are pending (and not all are bound)")
        return "\n".join(lines)
    if decision.scheduled:
        lines.append(f"  would be placed now: {decision.message}")
        lines.append(
            "  (gangsched has not bound it yet: is it running, and do the pods name its schedulerName?)"
        )
        return "\n".join(lines)
    lines.append(f"  reason: {decision.reason.value}: {decision.message}")
    summary = nodes_summary(report)
    if summary:
        lines += ["", f"nodes: {summary}"]
    if a.domains:
        level = a.domains[0].level
        title = f"best {level.rsplit('/', 1)[-1]}s ({level})" if level else "the cluster"
        lines += ["", f"{title}, closest first:"]
        width = max(len(d.name) for d in a.domains)
        for d in a.domains:
            limit = f"; limited by {d.limited_by}" if d.limited_by else ""
            lines.append(
                f"  {d.name:<{width}}  holds {d.fits}/{d.want} pods  "
                f"({d.usable}/{d.nodes} nodes usable{limit})"
            )
    elif decision.reason == Reason.UNSCHEDULABLE and a.reasons is not None:
        lines += ["", "no domain holds any of its pods now"]
    if a.changes:
        first, *others = a.changes
        lines += ["", "smallest change that would make it fit:", f"  {first.summary}: {first.outcome}"]
        if others:
            lines.append("other changes that would:")
            lines += [f"  {c.summary}: {c.outcome}" for c in others]
    elif decision.reason == Reason.UNSCHEDULABLE and a.reasons is not None:
        lines += ["", "no single change found that makes it fit now: it waits for capacity to free up"]
    return "\n".join(lines)


def _held_lines(held: Sequence[HeldPod], where: str) -> list[str]:
    """Held pods, those of one reason together (a workload's pods wait for one reason)."""
    why: dict[str, list[str]] = {}
    for h in held:
        why.setdefault(h.message, []).append(f"{h.namespace}/{h.name}")
    lines = []
    for message, names in why.items():
        pods = f"{_plural(len(names), 'pod')} {where} ({', '.join(names)})"
        lines.append(f"  {pods}: {Reason.WAITING_FOR_GANG.value}: {message}")
    return lines


def _not_listed_lines(not_listed: Sequence[str]) -> list[str]:
    if not not_listed:
        return []
    return [
        f"  note: not allowed to list {', '.join(not_listed)}: pods under those owners look as if "
        "they waited for them"
    ]


def _forming_text(report: Forming) -> str:
    ns, name = report.key
    lines = [
        f"PodGroup {ns}/{name} ({PodGroupApi.GANGSCHED.api_version}): not created yet",
        f"  owner: {owner_text(report.owner)} (its automatic gang: gangsched makes this PodGroup for it)",
    ]
    lines += _held_lines(report.held, "wait for it")
    lines += _not_listed_lines(report.not_listed)
    return "\n".join(lines)


def _pod_text(report: PodReport) -> str:
    pod = report.pod
    where = f"{pod.namespace}/{pod.name}"
    if report.scheduled:
        lines = [f"Pod {where}: scheduled", f"  on node {pod.node_name}"]
    else:
        lines = [f"Pod {where}: {'finished' if pod.terminal else 'waiting'}"]
    facts = []
    if report.other_scheduler:
        facts.append(f"spec.schedulerName is {pod.scheduler_name!r}: not gangsched's to place")
    elif pod.pod_group is not None:
        facts.append(f"names PodGroup {pod.namespace}/{pod.pod_group} ({pod.pod_group_api.api_version})")
    elif report.owner is not None and report.gang is not None:
        facts.append(f"in no PodGroup yet; its automatic gang is PodGroup {pod.namespace}/{report.gang}")
    else:
        facts.append("in no gang: placed on its own")
    if report.owner is not None:
        facts.append(f"owner {owner_text(report.owner)}")
    lines.append("  " + "; ".join(facts))
    decision = report.decision
    if decision is not None and not report.scheduled:
        node = decision.assignments.get(pod.key)
        if decision.scheduled and node:
            lines.append(f"  would be placed now on {node}: {decision.message}")
            lines.append("  (gangsched has not bound it yet: is it running?)")
        else:
            lines.append(f"  reason: {decision.reason.value}: {decision.message}")
    lines += _not_listed_lines(report.not_listed)
    return "\n".join(lines)


def to_text(report: Explanation) -> str:
    """The explanation for a person (module doc)."""
    if isinstance(report, Forming):
        return _forming_text(report)
    if isinstance(report, PodReport):
        return _pod_text(report)
    return _group_text(report)
