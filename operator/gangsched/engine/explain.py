"""Why a group did not fit, in kube-scheduler's style, one line:

    12/16 nodes eligible for 9 pods: 4 Insufficient nvidia.com/gpu; best block z0-b1 fits 8/9
    (limited by nvidia.com/gpu)

Per-node reasons are counted for the group's main class (the one with the most pods) with
vector operations: this runs for every unschedulable group, every cycle.

A gang that can never fit (`reservation.never_fits`: more than the largest domain of its
Required level holds even when empty) is told so first, since waiting will not help:

    can never fit: needs 8 pods placed together (64 nvidia.com/gpu), but the largest block,
    z0-b1, holds at most 6 of them (48 nvidia.com/gpu) even when empty; 12/16 nodes
    eligible for 8 pods: 4 Insufficient nvidia.com/gpu; best block z0-b1 fits 3/8 (limited
    by nvidia.com/gpu)

"Never" is as the cluster is built now: a node added later is counted the next cycle.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched.engine.capacity import GroupCapacity, PodClass
from gangsched.engine.fill import greedy
from gangsched.engine.placer import Placer
from gangsched.engine.reservation import NeverFit, never_fits
from gangsched.engine.snapshot import (
    CLAIMS,
    INSUFFICIENT,
    MISSING_LABEL,
    NOT_READY,
    OK,
    RESERVED,
    SELECTOR,
    TAINT,
    UNSCHEDULABLE,
    IntArray,
)
from gangsched.model.text import quoted

_FIXED_REASONS = {
    UNSCHEDULABLE: "node(s) were unschedulable",
    NOT_READY: "node(s) were not ready",
    SELECTOR: "node(s) didn't match node selector/affinity",
    RESERVED: "reserved for a waiting higher-priority gang",
}


@dataclass(frozen=True, slots=True)
class NodeReasons:
    """Per node, for the group's main shape: usable (at least one pod fits now), or why not."""

    total: int
    eligible: int
    # Reason text ("Insufficient nvidia.com/gpu", "untolerated taint k=v:NoSchedule") -> nodes.
    counts: Counter[str]
    # The eligible nodes (indexes into the snapshot).
    usable: IntArray

    def ranked(self) -> list[tuple[str, int]]:
        """Reasons with their node counts, most nodes first."""
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))


def node_reasons(cap: GroupCapacity) -> NodeReasons:
    """Why each node cannot take a pod of the group's main class (the one with the most pods),
    counted per reason in kube-scheduler's words; vectorised."""
    n = len(cap.snap.nodes)
    cls = cap.classes[cap.main]
    reason = cls.eligibility.reason.copy()
    reason[(reason == OK) & cap.missing_label] = MISSING_LABEL
    if cap.blocked is not None:
        reason[(reason == OK) & cap.blocked] = RESERVED
    reason[(reason == OK) & ~cls.mask] = CLAIMS
    insufficient = (reason == OK) & (cap.caps[cap.main] == 0)
    reason[insufficient] = INSUFFICIENT
    usable = np.flatnonzero(reason == OK)
    return NodeReasons(n, int(usable.size), _reason_counts(cap, reason, cls), usable)


def explain(cap: GroupCapacity, placer: Placer) -> str:
    """Why the group does not fit: per-node reasons for its main shape, and the best domain."""
    snap = cap.snap
    if not cap.classes:
        return "no pending pods"
    cls = cap.classes[cap.main]
    reasons = node_reasons(cap)
    pods = cap.total
    head = f"{reasons.eligible}/{reasons.total} nodes eligible for {pods} pod{'s' if pods != 1 else ''}"
    parts = [f"{count} {text}" for text, count in reasons.ranked()]
    message = head + (": " + ", ".join(parts) if parts else "")
    if cap.bound_nodes and cap.required_depth >= 0:
        ids, _ = snap.domains(cap.required_keys)
        if len({int(ids[i]) for i in cap.bound_nodes}) > 1:
            message += "; bound members already span several domains of the Required level"
    message += "; " + _closest(cap, placer, reasons.usable, cls)
    never = _never_fit(cap)
    # First, since waiting will not help; the usual explanation follows unchanged.
    return message if never is None else never + "; " + message


def _never_fit(cap: GroupCapacity) -> str | None:
    """The "can never fit" verdict for a gang, or None (other groups keep their message:
    one pod that fits no node is already said plainly)."""
    if not cap.group.is_gang:
        return None
    verdict = never_fits(cap)
    return None if verdict is None else never_fit_message(cap, verdict)


def never_fit_message(cap: GroupCapacity, verdict: NeverFit) -> str:
    """`verdict` in words: what must go together, and the most the largest domain holds."""
    cls = cap.classes[cap.main]
    limit = _empty_bottleneck(cap, verdict.nodes, cls)
    # Totals in the limiting resource when every pod asks the same and it counts in whole
    # units (GPUs, CPUs): "64 nvidia.com/gpu" says more than "8 pods"; bytes would be noise.
    per_pod: tuple[int, str] | None = None
    if limit is not None and len(cap.classes) == 1 and limit < cap.width:
        name = cap.resource_name(limit)
        unit = int(cls.request[limit])
        if unit % 1000 == 0 and (name == "cpu" or "/" in name):
            per_pod = (unit // 1000, name)

    def worth(count: int) -> str:
        return "" if per_pod is None else f" ({count * per_pod[0]} {per_pod[1]})"

    plural = "s" if verdict.need != 1 else ""
    together = " placed together" if verdict.need > 1 else ""
    text = f"can never fit: needs {verdict.need} pod{plural}{together}{worth(verdict.need)}, but "
    if verdict.holds == 0:
        text += "no node it may use holds one of them even when empty"
    else:
        if verdict.level is None:
            where = "the whole cluster"
        else:
            where = f"the largest {verdict.level.rsplit('/', 1)[-1]}, {'-'.join(verdict.domain or ())},"
        text += f"{where} holds at most {verdict.holds} of them{worth(verdict.holds)} even when empty"
    if limit is not None and per_pod is None:  # the totals name the resource already
        text += f" (limited by {cap.resource_name(limit)})"
    return text


def explain_best(cap: GroupCapacity, placer: Placer) -> str:
    """Only how close the group comes ("best rack r3 fits 6/8 (limited by ...)")."""
    if not cap.classes:
        return "no pending pods"
    cls = cap.classes[max(range(len(cap.classes)), key=lambda k: cap.counts[k])]
    usable = np.flatnonzero(cap.caps[cap.classes.index(cls)] > 0)
    closest = _closest(cap, placer, usable, cls)
    never = _never_fit(cap)
    return closest if never is None else never + "; " + closest


def _closest(cap: GroupCapacity, placer: Placer, eligible: IntArray, cls: PodClass) -> str:
    want = max(cap.need, 1)
    best = _best_partial(cap, placer)
    if best is not None:
        text = f"{best[0]} fits {best[1]}/{want}"
        limits = _bottlenecks(cap, eligible, cls)
        if limits:
            text += f" (limited by {limits.most_common(1)[0][0]})"
        return text
    if cap.group.is_gang:
        return f"needs {want} pod{'s' if want != 1 else ''} placed together"
    if cap.group.is_pod_group:
        return "no node can hold any of its pods"
    return "no node can hold the pod"


def _best_partial(cap: GroupCapacity, placer: Placer) -> tuple[str, int] | None:
    """The domain (innermost Required level, else the cluster) that gets closest to fitting."""
    nodes = np.flatnonzero(np.any([c > 0 for c in cap.caps], axis=0)) if cap.caps else np.array([])
    if nodes.size == 0:
        return None
    all_classes = list(range(len(cap.classes)))
    if cap.required_depth < 0:
        attempt = greedy(cap, placer.order_leaves(nodes, cap.main_units(cap.total)), all_classes)
        return "cluster", attempt.placed
    ids_all, paths = cap.snap.domains(cap.required_keys)
    pinned = cap.pinned_domains(ids_all)
    if pinned is not None:
        # Bound members pin the domain: the explanation is about that domain only.
        if len(pinned) != 1:
            return None
        nodes = nodes[ids_all[nodes] == next(iter(pinned))]
        if nodes.size == 0:
            return None
    ids = ids_all[nodes]
    uniq, inverse = np.unique(ids, return_inverse=True)
    upper, _ = cap.domain_capacity(inverse, nodes, uniq.size)
    top = int(np.argmax(upper))
    order = placer.order_leaves(nodes[inverse == top], cap.main_units(cap.total))
    attempt = greedy(cap, order, all_classes)
    key = cap.required_keys[-1].rsplit("/", 1)[-1]
    return f"best {key} {'-'.join(paths[int(uniq[top])])}", attempt.placed


def _reason_counts(cap: GroupCapacity, reason: npt.NDArray[np.int8], cls: PodClass) -> Counter[str]:
    """Nodes per reason, vectorised."""
    counts = np.bincount(reason, minlength=CLAIMS + 1)
    counter: Counter[str] = Counter()
    for code, text in _FIXED_REASONS.items():
        if counts[code]:
            counter[text] = int(counts[code])
    if counts[TAINT]:  # few nodes: only tainted ones can get here
        for i in np.flatnonzero(reason == TAINT):
            counter[f"untolerated taint {cls.eligibility.taint_of[int(i)]}"] += 1
    if counts[MISSING_LABEL]:
        missing = np.flatnonzero(reason == MISSING_LABEL)
        for key in cap.required_keys:
            codes, _ = cap.snap.label_codes(key)
            lacking = missing[codes[missing] < 0]
            if lacking.size:
                counter[f"missing label {quoted(key)}"] += int(lacking.size)
            missing = missing[codes[missing] >= 0]
    if counts[CLAIMS] and cap.devices is not None:
        counter.update(cap.devices.excluded(cls.device_key, np.flatnonzero(reason == CLAIMS)))
    if counts[INSUFFICIENT]:
        nodes = np.flatnonzero(reason == INSUFFICIENT)
        limits = _limiting_columns(cap, nodes, cls)
        for column in np.unique(limits):
            at = nodes[limits == column]
            if cls.device_column is not None and column == cls.device_column and cap.devices is not None:
                # Devices say why in their own words: which request, which taint.
                counter.update(cap.devices.reasons(cls.device_key, at))
            else:
                counter[f"Insufficient {cap.resource_name(int(column))}"] += int(at.size)
    return counter


def _limiting_columns(cap: GroupCapacity, nodes: IntArray, cls: PodClass) -> IntArray:
    """Per node of `nodes`: the column that limits how many pods of `cls` fit."""
    cols = np.flatnonzero(cls.request > 0)
    ratio = np.maximum(cap.free[np.ix_(nodes, cols)], 0) / cls.request[cols]
    limiting: IntArray = cols[np.argmin(ratio, axis=1)]
    return limiting


def _empty_bottleneck(cap: GroupCapacity, nodes: IntArray, cls: PodClass) -> int | None:
    """The column that limits `cls` on most of `nodes` when they are empty (allocatable)."""
    cols = np.flatnonzero(cls.request > 0)
    if nodes.size == 0 or cols.size == 0:
        return None
    ratio = cap.allocatable[np.ix_(nodes, cols)] / cls.request[cols]
    columns, counts = np.unique(cols[np.argmin(ratio, axis=1)], return_counts=True)
    return int(columns[np.argmax(counts)])


def _bottlenecks(cap: GroupCapacity, nodes: IntArray, cls: PodClass) -> Counter[str]:
    """Per resource: on how many of `nodes` it is what limits how many pods of `cls` fit."""
    if nodes.size == 0:
        return Counter()
    limits = _limiting_columns(cap, nodes, cls)
    columns, counts = np.unique(limits, return_counts=True)
    return Counter({cap.resource_name(int(c)): int(k) for c, k in zip(columns, counts, strict=True)})


@dataclass(frozen=True, slots=True)
class DomainFit:
    """How much of a group one domain of its innermost Required level holds now."""

    # The level's label key; None for the whole cluster (a group without a Required level).
    level: str | None
    # The label values of the Required levels, outermost first (the domain's path).
    path: tuple[str, ...]
    fits: int  # pods of the group that fit there now (first-fit along the placer's order)
    want: int  # pods it must place together
    nodes: int  # nodes of the domain (those without a Required label are in no domain)
    usable: int  # of them, nodes where at least one of its pods fits now
    limited_by: str | None  # the resource that limits most usable nodes of the domain

    @property
    def name(self) -> str:
        return "-".join(self.path) if self.path else "cluster"


def domain_fits(cap: GroupCapacity, placer: Placer, limit: int = 5) -> list[DomainFit]:
    """The `limit` domains that come closest to holding the group, closest first; domains
    holding none of it are left out. Bound members pin the domain: then only that one."""
    if not cap.classes:
        return []
    cls = cap.classes[cap.main]
    usable = cap.usable_nodes()
    all_classes = list(range(len(cap.classes)))
    want = max(cap.need, 1)

    def measure(usable_here: IntArray) -> tuple[int, str | None]:
        if usable_here.size == 0:
            return 0, None
        attempt = greedy(cap, placer.order_leaves(usable_here, cap.main_units(cap.total)), all_classes)
        limits = _bottlenecks(cap, usable_here, cls)
        return attempt.placed, (limits.most_common(1)[0][0] if limits else None)

    if cap.required_depth < 0:
        placed, limited = measure(usable)
        if placed == 0:
            return []
        return [DomainFit(None, (), placed, want, len(cap.snap.nodes), int(usable.size), limited)]
    ids_all, paths = cap.snap.domains(cap.required_keys)
    pinned = cap.pinned_domains(ids_all)
    usable = usable[ids_all[usable] >= 0]
    if pinned is not None:
        usable = usable[np.isin(ids_all[usable], np.asarray(sorted(pinned), dtype=np.int64))]
    if usable.size == 0:
        return []
    ids = ids_all[usable]
    uniq, inverse = np.unique(ids, return_inverse=True)
    upper, raw = cap.domain_capacity(inverse, usable, uniq.size)
    # Rank by the vectorised upper bound, then measure the best few exactly.
    ranked = np.lexsort((uniq, -raw, -upper))[: max(limit * 2, limit)]
    out = []
    for k in ranked:
        here = usable[inverse == k]
        placed, limited = measure(here)
        if placed == 0:
            continue
        domain = int(uniq[k])
        out.append(
            DomainFit(
                level=cap.required_keys[-1],
                path=paths[domain],
                fits=placed,
                want=want,
                nodes=int(np.count_nonzero(ids_all == domain)),
                usable=int(here.size),
                limited_by=limited,
            )
        )
    out.sort(key=lambda d: (-d.fits, d.path))
    return out[:limit]
