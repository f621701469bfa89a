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
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.cluster.read import Cluster, FoundPodGroup, find_pod_group, read_cluster, read_members
from gangsched.engine.explain import DomainFit
from gangsched.engine.whatif import Analysis, Change, analyse
from gangsched.model import DEFAULT_SCHEDULER_NAME, Node, PodGroupApi, Reason

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


@dataclass(slots=True)
class Report:
    found: FoundPodGroup
    analysis: Analysis
    nodes: Mapping[str, Node]
    # The apiVersion of the native PodGroup of the same namespace/name as gangsched's explained
    # one, when one exists (the operator schedules gangsched's and warns on the native one).
    name_clash: str | None = None

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


def explain(
    cluster: Cluster, namespace: str, name: str, *, scheduler_name: str = DEFAULT_SCHEDULER_NAME
) -> Report:
    """Read the cluster, find the PodGroup and analyse it (BadInputError when it does not exist)."""
    cache = read_cluster(cluster)
    found = find_pod_group(cluster, namespace, name, cache.priority_classes)
    if found is None:
        raise BadInputError(f"PodGroup {namespace}/{name} not found")
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
    )
    return Report(found, analysis, dict(cache.nodes), native.api_version if clash else None)


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


def to_json(report: Report) -> dict[str, Any]:
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
    return {
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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def to_text(report: Report) -> str:
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
    clash = _clash_line(report)
    if clash:
        lines.append("  " + clash)
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
