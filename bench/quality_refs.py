"""Reference gang placers for the quality benchmark (bench/quality.py): what users run today.

Two deliberately small re-implementations over the same node list as gangsched's engine, so
that the benchmark compares *domain choices*, not plumbing. Both are all-or-nothing per gang
and are driven by :func:`run_sequential`, which applies each placement before the next gang
(the same "assume, then decide the next group" semantics as one `schedule_cycle`).

- :func:`place_k8s`: kube-scheduler v1.36 TopologyPlacement (KEP-5732) for a gang (KEP-4671).
  One candidate placement per distinct value of the gang's Required key (the whole cluster
  when it has none); in each, pods are placed one after the other on the feasible node with
  the highest NodeResourcesFit MostAllocated score (assumed before the next pod). A placement
  is feasible when every pod fits. The feasible placement with the highest MostAllocated
  ratio over all its nodes wins (PodGroupPodsCount ties, as every feasible placement holds
  the whole gang). There is no Preferred level: a Preferred rack is ignored.
- :func:`place_kueue`: Kueue TAS with the default profile (kueue@ff69552,
  ``pkg/cache/scheduler/tas_flavor_snapshot.go``): BestFit for Required and Preferred,
  LeastFreeCapacity for unconstrained gangs (``TASProfileMixed``, on by default since 0.15).
  Phase 1 counts pods per host (``min_r free // request``, ``pods`` included) and rolls the
  counts up; phase 2a (``findLevelWithFitDomains``) picks, at the requested level, the
  tightest domain that holds the gang (Preferred: otherwise one level up, and at the top the
  largest domains first with the tightest last); phase 2b (``updateCountsToMinimumGeneric``)
  descends level by level, taking children largest first and replacing the last one by the
  tightest child that still holds the rest. Kueue has one level per request, Required *or*
  Preferred: a gang with Required block and Preferred rack is given Required block, whose
  largest-first descent is Kueue's own way of keeping it in few racks.

Simplifications shared by both (they hold for the benchmark's input): one pod shape per gang,
no leader, no taints or selectors, every node schedulable. kube-scheduler breaks score ties at
random; here the first node / first placement in name order wins, to stay deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gangsched.model import Node, Pod

LEVEL_KEYS: tuple[str, ...] = (
    "topology.kubernetes.io/zone",
    "example.com/block",
    "example.com/rack",
    "kubernetes.io/hostname",
)
"""zone > block > rack > host, outermost first (the builders' label keys)."""

RESOURCES: tuple[str, ...] = ("cpu", "memory", "pods", "nvidia.com/gpu")
MOST_ALLOCATED: tuple[str, ...] = ("cpu", "memory", "nvidia.com/gpu")
"""Resources MostAllocated scores, weight 1 each (a GPU bin-packing NodeResourcesFit config)."""

Placement = dict[int, int]
"""Node index -> pods of the gang placed there."""


@dataclass(frozen=True, slots=True)
class Gang:
    """One gang as the references see it: `pods` identical pods, all needed."""

    name: str
    pods: int
    request: Mapping[str, int]  # per pod, milli-units, `pods` included
    required: str | None = None  # label key of the Required level
    preferred: str | None = None  # label key of the (innermost) Preferred level


@dataclass(slots=True)
class Cluster:
    """Nodes as rows: allocatable and free per resource, and each node's topology path."""

    names: list[str]
    paths: list[tuple[str, ...]]  # per node: its label value at each of LEVEL_KEYS
    alloc: np.ndarray  # int64 [N, R], milli-units (1 TiB of memory is 1.1e15: far from overflow)
    free: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.free = self.alloc.copy()

    @classmethod
    def build(cls, nodes: Sequence[Node], bound: Sequence[Pod]) -> Cluster:
        """The cluster of `nodes` with `bound` pods' requests taken off."""
        names = [n.name for n in nodes]
        paths = [tuple(n.labels.get(k, "") for k in LEVEL_KEYS) for n in nodes]
        alloc = np.array([[n.allocatable.get(r, 0) for r in RESOURCES] for n in nodes], dtype=np.int64)
        cluster = cls(names, paths, alloc)
        index = {name: i for i, name in enumerate(names)}
        for pod in bound:
            if pod.node_name in index:
                cluster.free[index[pod.node_name]] -= request_row(pod.requests)
        return cluster

    def copy(self) -> Cluster:
        other = Cluster(self.names, self.paths, self.alloc)
        other.free = self.free.copy()
        return other

    def level(self, key: str) -> int:
        return LEVEL_KEYS.index(key)

    def fit_counts(self, request: Mapping[str, int]) -> list[int]:
        """Per node: how many pods of `request` fit in what is free (Kueue's leaf count)."""
        req = request_row(request)
        cols = req > 0
        if not cols.any():
            return [0] * len(self.names)
        return [int(c) for c in (np.maximum(self.free[:, cols], 0) // req[cols]).min(axis=1)]

    def apply(self, placement: Placement, request: Mapping[str, int]) -> None:
        """Take `placement`'s pods off the free capacity; refuses to go below zero."""
        req = request_row(request)
        for node, count in placement.items():
            row = self.free[node] - req * count
            if (row < 0).any():
                raise ValueError(f"over capacity on {self.names[node]}")
            self.free[node] = row


def request_row(request: Mapping[str, int]) -> np.ndarray:
    return np.array([int(request.get(r, 0)) for r in RESOURCES], dtype=np.int64)


# --------------------------------------------------------------------------- kube-scheduler


_SCORED = np.array([RESOURCES.index(name) for name in MOST_ALLOCATED])


def _most_allocated(alloc: np.ndarray, used: np.ndarray) -> np.ndarray:
    """NodeResourcesFit MostAllocated per row (a node, or a placement's summed nodes): 0..100.

    Integer arithmetic as upstream: ``used * 100 // allocatable`` per resource, then the
    weighted (here: plain) mean.
    """
    a = alloc[..., _SCORED]
    u = used[..., _SCORED]
    per = np.where(a > 0, u * 100 // np.maximum(a, 1), 0)
    result: np.ndarray = per.sum(axis=-1) // len(MOST_ALLOCATED)
    return result


def place_k8s(cluster: Cluster, gang: Gang) -> Placement | None:
    """kube-scheduler v1.36 TAS: one placement per Required value, pods one by one, MostAllocated."""
    req = request_row(gang.request)
    if gang.required is None:
        candidates: dict[str, list[int]] = {"": list(range(len(cluster.names)))}
    else:
        level = cluster.level(gang.required)
        candidates = {}
        for i, path in enumerate(cluster.paths):
            if path[level]:
                candidates.setdefault(path[level], []).append(i)
    best: tuple[int, Placement] | None = None
    for value in sorted(candidates):
        nodes = np.array(candidates[value])
        alloc = cluster.alloc[nodes]
        free = cluster.free[nodes].copy()
        placed = np.zeros(len(nodes), dtype=np.int64)
        for _ in range(gang.pods):
            after = free - req
            fits = (after >= 0).all(axis=1)  # Filter
            if not fits.any():
                break
            scores = np.where(fits, _most_allocated(alloc, alloc - after), -1)  # Score, with the pod
            choice = int(np.argmax(scores))  # the first node with the highest score
            free[choice] -= req
            placed[choice] += 1
        if int(placed.sum()) < gang.pods:
            continue  # infeasible: the gang's minCount is all its pods
        placement_score = int(_most_allocated(alloc.sum(axis=0), (alloc - free).sum(axis=0)))
        if best is None or placement_score > best[0]:
            best = (placement_score, {int(nodes[i]): int(n) for i, n in enumerate(placed) if n})
    return best[1] if best is not None else None


# --------------------------------------------------------------------------- Kueue TAS


@dataclass(slots=True)
class _Domain:
    values: tuple[str, ...]  # the path down to this domain (Kueue's levelValues)
    state: int = 0  # pods that fit (rolled up)
    children: list[_Domain] = field(default_factory=list)
    node: int = -1  # leaves: the node index


def _tree(cluster: Cluster, counts: list[int]) -> list[dict[tuple[str, ...], _Domain]]:
    """Per level, the domains by path, with `state` rolled up from the leaf counts."""
    levels: list[dict[tuple[str, ...], _Domain]] = [{} for _ in LEVEL_KEYS]
    for i, path in enumerate(cluster.paths):
        parent: _Domain | None = None
        for lvl in range(len(LEVEL_KEYS)):
            key = path[: lvl + 1]
            dom = levels[lvl].get(key)
            if dom is None:
                dom = levels[lvl][key] = _Domain(key)
                if parent is not None:
                    parent.children.append(dom)
            dom.state += counts[i]
            parent = dom
        assert parent is not None
        parent.node = i
    return levels


def _sorted(domains: Sequence[_Domain], least_free: bool) -> list[_Domain]:
    """`sortedDomains`: state desc (BestFit) or asc (LeastFreeCapacity), then levelValues."""
    return sorted(domains, key=lambda d: (d.state if least_free else -d.state, d.values))


def _best_fit(domains: Sequence[_Domain], needed: int) -> _Domain:
    """`findBestFitDomainBy`: the first domain with the lowest state >= needed (else the first)."""
    best = domains[0]
    for dom in domains:
        if needed <= dom.state < best.state:
            best = dom
    return best


def _to_minimum(domains: list[_Domain], count: int, least_free: bool) -> list[tuple[_Domain, int]]:
    """`updateCountsToMinimumGeneric` (no leader, slice size 1): largest first, best fit last."""
    result: list[tuple[_Domain, int]] = []
    remaining = count
    for i, dom in enumerate(domains):
        if not least_free and dom.state >= remaining:
            dom = _best_fit(domains[i:], remaining)
        if dom.state >= remaining:
            result.append((dom, remaining))
            return result
        remaining -= dom.state
        result.append((dom, dom.state))
    raise AssertionError("the chosen domains hold fewer pods than counted")


def _fit_level(
    levels: list[dict[tuple[str, ...], _Domain]], lvl: int, count: int, required: bool, unconstrained: bool
) -> tuple[int, list[_Domain]] | None:
    """`findLevelWithFitDomains`: the level and domains that will hold `count` pods."""
    least_free = unconstrained
    ordered = _sorted(list(levels[lvl].values()), least_free)
    if not ordered:
        return None
    if least_free:
        for dom in ordered:
            if dom.state >= count:
                return lvl, [dom]
        if required:
            return None
    top = ordered[0]
    if not least_free and top.state >= count:
        return lvl, [_best_fit(ordered, count)]
    if required:
        return None
    if lvl > 0 and not unconstrained:
        return _fit_level(levels, lvl - 1, count, required, unconstrained)
    results: list[_Domain] = []
    remaining = count
    for i, dom in enumerate(ordered):
        if remaining <= 0:
            break
        if not least_free and dom.state >= remaining:
            dom = _best_fit(ordered[i:], remaining)
        results.append(dom)
        remaining -= dom.state
    return (lvl, results) if remaining <= 0 else None


def place_kueue(cluster: Cluster, gang: Gang) -> Placement | None:
    """Kueue TAS, default profile: BestFit (Required/Preferred), LeastFreeCapacity (unconstrained)."""
    counts = cluster.fit_counts(gang.request)
    levels = _tree(cluster, counts)
    unconstrained = gang.required is None and gang.preferred is None
    key = gang.required or gang.preferred or LEVEL_KEYS[-1]
    found = _fit_level(levels, cluster.level(key), gang.pods, gang.required is not None, unconstrained)
    if found is None:
        return None
    lvl, domains = found
    chosen = _to_minimum(domains, gang.pods, unconstrained)
    while lvl < len(LEVEL_KEYS) - 1:  # the slice level is the host: children pooled, as upstream
        pool = [child for dom, _ in chosen for child in dom.children]
        chosen = _to_minimum(_sorted(pool, unconstrained), gang.pods, unconstrained)
        lvl += 1
    placement = {dom.node: n for dom, n in chosen if n > 0}
    assert sum(placement.values()) == gang.pods
    return placement


# --------------------------------------------------------------------------- driver

Placer = Callable[[Cluster, Gang], Placement | None]


def run_sequential(placer: Placer, cluster: Cluster, gangs: Sequence[Gang]) -> dict[str, Placement]:
    """Each gang in order, all-or-nothing, its placement applied before the next gang."""
    state = cluster.copy()
    placed: dict[str, Placement] = {}
    for gang in gangs:
        placement = placer(state, gang)
        if placement is None:
            continue
        if sum(placement.values()) != gang.pods:
            raise AssertionError(f"{gang.name}: partial placement {placement}")
        state.apply(placement, gang.request)
        placed[gang.name] = placement
    return placed
