"""The placement engine: a snapshot and a queue of pod groups in, decisions and explanations out.

Pure: no I/O, no kopf, no API client. `gangsched simulate` and the operator both call
`schedule_cycle`, so what the simulator answers is what the cluster gets.

How one group is placed (docs/placement.md has the why):
  1. Pods are split into classes of identical shape (requests + eligibility).
  2. Per class and node: how many pods fit (vectorised over nodes).
  3. Candidate domains at the innermost Required level (or the whole cluster) are ranked:
     fits-the-whole-group first, then "a single Preferred domain fits it", then tightest fit.
  4. Inside a candidate, Preferred levels are descended: one child domain when one fits the
     whole group (the tightest such), else the fewest children (largest first, best-fit last).
  5. Pods are laid along that node order class by class, largest shape first (vectorised
     first-fit), with an exact bounded search when that greedy pass falls short on a small
     problem, so a heterogeneous gang is never declared unschedulable when it fits.
  6. All-or-nothing: fewer than minCount placeable pods means nothing is placed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gangsched.model import (
    DEFAULT_SCHEDULER_NAME,
    GroupRequest,
    Node,
    Placement,
    Pod,
    PodGroup,
    TopologyMode,
)
from gangsched.snapshot import (
    INSUFFICIENT,
    MISSING_LABEL,
    NOT_READY,
    OK,
    RESERVED,
    SELECTOR,
    TAINT,
    UNSCHEDULABLE,
    BoolArray,
    Eligibility,
    IntArray,
    Snapshot,
    fit_counts,
)

# Reasons, shared with the PodGroup status condition and `simulate -o json`.
SCHEDULED = "Scheduled"
UNSCHEDULABLE_REASON = "Unschedulable"
WAITING_FOR_PODS = "WaitingForPods"
POD_GROUP_NOT_FOUND = "PodGroupNotFound"

# How many candidate domains are fully evaluated per level (after vectorised ranking).
CANDIDATES_PER_LEVEL = 8
# Exact search only for small problems: it is exponential, the greedy pass is not.
EXACT_MAX_PODS = 16
EXACT_MAX_NODES = 24
EXACT_STEP_BUDGET = 50_000
# A group unschedulable this long gets a reservation: later groups may not use its domain.
DEFAULT_RESERVATION_AFTER_SECONDS = 300.0


@dataclass(slots=True)
class GroupDecision:
    namespace: str
    name: str
    scheduled: bool
    reason: str
    message: str
    # pod key -> node name, for the pods placed in this cycle
    assignments: dict[tuple[str, str], str] = field(default_factory=dict)
    # The domain the group landed in, as "key=value/key=value"; None when unplaced or unconstrained.
    domain: str | None = None
    # False for a gangsched pod without a PodGroup label (a group of one).
    is_pod_group: bool = True
    # Pending pods of this group this cycle (placed or not).
    pending: list[Pod] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(slots=True)
class CycleResult:
    decisions: list[GroupDecision]
    # Pods with their node (None when left pending), one entry per pending pod.
    pods: list[tuple[Pod, str | None, GroupDecision]]
    # The group currently holding the anti-starvation reservation, if any.
    reservation: tuple[str, str] | None = None


# =========================================================================== one group


@dataclass(slots=True)
class _Class:
    request: IntArray
    eligibility: Eligibility
    pods: list[Pod]
    mask: BoolArray
    size: float = 0.0


@dataclass(slots=True)
class _Attempt:
    """Counts per (class, node) for one candidate placement."""

    placed: int
    counts: list[dict[int, int]]
    spread: tuple[int, ...] = ()


class _GroupPlacer:
    """Places one group on a snapshot; see the module docstring for the steps."""

    def __init__(self, snapshot: Snapshot, group: GroupRequest, blocked: BoolArray | None) -> None:
        self.snap = snapshot
        self.group = group
        self.total = len(group.pending)
        bound_alive = [p for p in group.bound if p.holds_resources]
        if group.is_gang:
            self.need = max(0, group.min_count - len(bound_alive))
        else:
            self.need = 1 if self.total else 0
        self.required_keys: tuple[str, ...] = ()
        self.levels: tuple[str, ...] = tuple(c.key for c in group.topology)
        required_depth = -1
        for depth, constraint in enumerate(group.topology):
            if constraint.mode == TopologyMode.REQUIRED:
                required_depth = depth
        self.required_depth = required_depth
        self.required_keys = self.levels[: required_depth + 1]
        self.preferred_depths = [
            d for d, c in enumerate(group.topology) if c.mode == TopologyMode.PREFERRED and d > required_depth
        ]
        self.free = snapshot.free
        n = len(snapshot.nodes)
        missing = np.zeros(n, dtype=bool)
        for key in self.required_keys:
            codes, _ = snapshot.label_codes(key)
            missing |= codes < 0
        self.missing_label = missing
        self.blocked = blocked
        # Identical pods (same requests, same placement rules) form one class.
        by_shape: dict[tuple[tuple[tuple[str, int], ...], Placement], list[Pod]] = {}
        for pod in group.pending:
            by_shape.setdefault((tuple(sorted(pod.requests.items())), pod.placement), []).append(pod)
        shapes: list[_Class] = []
        for (requests, placement), members in by_shape.items():
            elig = snapshot.eligibility(placement)
            mask = elig.mask & ~missing
            if blocked is not None:
                mask = mask & ~blocked
            shapes.append(
                _Class(request=snapshot.vector(dict(requests)), eligibility=elig, pods=members, mask=mask)
            )
        self.free = snapshot.free  # after vector() may have added columns
        width = self.free.shape[1]
        scale = np.maximum(snapshot.allocatable.max(axis=0) if n else np.ones(width), 1)
        for cls in shapes:
            req = np.zeros(width, dtype=np.int64)
            req[: cls.request.shape[0]] = cls.request
            cls.request = req
            cls.size = float((req / scale).max()) if width else 0.0
        # Largest shape first: classic first-fit-decreasing, so small pods fill the gaps.
        self.classes = sorted(shapes, key=lambda c: (-c.size, -len(c.pods)))
        self.caps = [fit_counts(self.free, c.request, c.mask) for c in self.classes]
        self.counts = [len(c.pods) for c in self.classes]
        # The class with the most pods: its capacity measures how tightly a domain fits.
        self.main = max(range(len(self.classes)), key=lambda k: self.counts[k]) if self.classes else 0
        self.fewest = np.zeros(0, dtype=np.int64)
        self.bound_nodes = [snapshot.index[p.node_name] for p in bound_alive if p.node_name in snapshot.index]

    # -------------------------------------------------------------- capacity bounds

    def _upper_bound(self, ids: IntArray, nodes: IntArray, size: int) -> tuple[IntArray, IntArray]:
        """Per domain: (an upper bound on the group's pods that fit, exact for one class;
        the raw capacity for the main class, which ranks domains by how tight they are)."""
        total = np.zeros(size, dtype=np.int64)
        raw = np.zeros(size, dtype=np.int64)
        for k, (cap, count) in enumerate(zip(self.caps, self.counts, strict=True)):
            per = np.bincount(ids, weights=cap[nodes], minlength=size).astype(np.int64)
            total += np.minimum(per, count)
            if k == self.main:
                raw = per
        return total, raw

    def _node_bound(self, nodes: IntArray) -> tuple[IntArray, IntArray]:
        total = np.zeros(nodes.shape[0], dtype=np.int64)
        for cap, count in zip(self.caps, self.counts, strict=True):
            total += np.minimum(cap[nodes], count)
        return total, self.caps[self.main][nodes]

    # -------------------------------------------------------------- entry point

    def place(self) -> _Attempt | None:
        """The best attempt, or None when nothing reaches `need` (the explanation is built apart)."""
        if self.total == 0:
            return None
        usable = np.zeros(len(self.snap.nodes), dtype=bool)
        for cap in self.caps:
            usable |= cap > 0
        nodes_all = np.flatnonzero(usable)
        if nodes_all.size == 0:
            return None
        candidates = self._required_candidates(nodes_all)
        best: _Attempt | None = None
        for domain, nodes in candidates:
            attempt = self._place_within(nodes, 0, self.total)
            if attempt.placed >= max(self.need, 1) and (best is None or self._better(attempt, best)):
                best = attempt
                # Candidates come best-first; stop once one meets its own lower bound.
                if attempt.placed == self.total and self._optimal_spread(attempt, domain):
                    break
        return best

    def _optimal_spread(self, attempt: _Attempt, domain: int) -> bool:
        if not self.preferred_depths:
            return True
        lower = int(self.fewest[domain]) if domain >= 0 and self.fewest.size else 1
        return attempt.spread[0] <= max(lower, 1) and all(s <= 1 for s in attempt.spread[1:-1])

    def _better(self, a: _Attempt, b: _Attempt) -> bool:
        if a.placed != b.placed:
            return a.placed > b.placed
        return a.spread < b.spread

    def _required_candidates(self, nodes_all: IntArray) -> list[tuple[int, IntArray]]:
        if self.required_depth < 0:
            return [(-1, nodes_all)]
        ids_all, _ = self.snap.domains(self.required_keys)
        if self.bound_nodes:
            pinned = {int(ids_all[i]) for i in self.bound_nodes}
            if len(pinned) != 1 or -1 in pinned:
                return []  # members already span domains: nothing more can satisfy Required
            nodes_all = nodes_all[ids_all[nodes_all] == next(iter(pinned))]
            if nodes_all.size == 0:
                return []
        ids = ids_all[nodes_all]
        size = int(ids_all.max()) + 1
        bound, raw = self._upper_bound(ids, nodes_all, size)
        present = np.unique(ids)
        viable = present[bound[present] >= max(self.need, 1)]
        if viable.size == 0:
            return []
        fits_all = bound[viable] >= self.total
        fewest = np.zeros(size, dtype=np.int64)
        if self.preferred_depths:
            # How few children at the first Preferred level could hold the whole group?
            child_ids_all, _ = self.snap.domains(self.levels[: self.preferred_depths[0] + 1])
            child_ids = child_ids_all[nodes_all]
            ok = child_ids >= 0
            csize = int(child_ids_all.max()) + 1 if child_ids_all.size else 0
            # In main-class pods, as the descent counts them (see _order).
            _, child_bound = self._upper_bound(child_ids[ok], nodes_all[ok], csize)
            parents = np.full(csize, -1, dtype=np.int64)
            parents[child_ids[ok]] = ids[ok]
            fewest = _fewest_children(parents, child_bound, self._main_units(self.total), size)
        self.fewest = fewest
        # Rank: whole group fits, fewest Preferred children needed, then the tightest (least spare).
        order = np.lexsort((viable, raw[viable], fewest[viable], ~fits_all))
        chosen = viable[order][:CANDIDATES_PER_LEVEL]
        return [(int(d), nodes_all[ids == d]) for d in chosen]

    # -------------------------------------------------------------- descent

    def _place_within(self, nodes: IntArray, pref_index: int, target: int) -> _Attempt:
        if pref_index < len(self.preferred_depths):
            depth = self.preferred_depths[pref_index]
            ids_all, _ = self.snap.domains(self.levels[: depth + 1])
            ids = ids_all[nodes]
            uniq, inverse = np.unique(ids, return_inverse=True)
            bound, raw = self._upper_bound(inverse, nodes, uniq.size)
            fitting = np.flatnonzero((bound >= target) & (uniq >= 0))
            if fitting.size:
                # The domain of already-bound members first (a repaired gang stays together),
                # then the tightest: big domains stay whole for big gangs.
                home = self._holds_members(uniq[fitting], ids_all)
                ranked = fitting[np.lexsort((uniq[fitting], raw[fitting], ~home))]
                for child in ranked[:CANDIDATES_PER_LEVEL]:
                    attempt = self._place_within(nodes[inverse == child], pref_index + 1, target)
                    if attempt.placed >= target:
                        return attempt
        order = self._order(nodes, pref_index, self._main_units(target))
        return self._fill(order, target)

    def _order(self, nodes: IntArray, pref_index: int, target: int) -> IntArray:
        """Nodes in preference order: fewest domains at each Preferred level, fewest hosts.

        `target` counts pods of the main class only: a domain is chosen for the class that
        makes up the gang (the workers); the few others (a launcher) fill in along the order.
        Counting them too would credit every domain with room for the launcher and so pick
        one domain too few.
        """
        if pref_index >= len(self.preferred_depths):
            return self._order_leaves(nodes, target)
        depth = self.preferred_depths[pref_index]
        ids_all, _ = self.snap.domains(self.levels[: depth + 1])
        ids = ids_all[nodes]
        uniq, inverse = np.unique(ids, return_inverse=True)
        _, raw = self._upper_bound(inverse, nodes, uniq.size)
        home = self._holds_members(uniq, ids_all)
        picked = self._largest_then_best_fit(np.lexsort((uniq, -raw, ~home)), raw, raw, target)
        parts: list[IntArray] = []
        remaining = target
        for child in picked:
            child_nodes = nodes[inverse == child]
            take = min(int(raw[child]), remaining)
            parts.append(self._order(child_nodes, pref_index + 1, take))
            remaining -= take
        rest = np.setdiff1d(np.arange(uniq.size), np.asarray(picked, dtype=np.int64), assume_unique=True)
        if rest.size:
            rest_nodes = nodes[np.isin(inverse, rest)]
            parts.append(self._order_leaves(rest_nodes, 0))
        return np.concatenate(parts) if parts else nodes

    def _main_units(self, target: int) -> int:
        """Of `target` pods of the group, how many belong to the main class (the rest come first)."""
        return max(0, min(self.counts[self.main], target - (self.total - self.counts[self.main])))

    def _holds_members(self, domain_ids: IntArray, ids_all: IntArray) -> BoolArray:
        """Which of `domain_ids` already hold a bound member of the group."""
        if not self.bound_nodes:
            return np.zeros(domain_ids.shape[0], dtype=bool)
        return np.isin(domain_ids, ids_all[np.asarray(self.bound_nodes, dtype=np.int64)])

    def _order_leaves(self, nodes: IntArray, target: int) -> IntArray:
        """Hosts largest first while none alone holds what is left (`target`, main-class pods)."""
        _, raw = self._node_bound(nodes)
        ranked = np.lexsort((nodes, -raw))
        picked = self._largest_then_best_fit(ranked, raw, raw, target) if target > 0 else []
        if not picked:
            return nodes[ranked]
        taken = np.zeros(nodes.shape[0], dtype=bool)
        taken[picked] = True
        rest = ranked[~taken[ranked]]
        order: IntArray = nodes[np.concatenate([np.asarray(picked, dtype=np.int64), rest])]
        return order

    @staticmethod
    def _largest_then_best_fit(ranked: IntArray, bound: IntArray, raw: IntArray, target: int) -> list[int]:
        """Take the largest domains while none alone covers what is left, then the tightest that does.

        `ranked` orders the domains largest first. Vectorised: this runs over thousands of nodes.
        """
        ranked = ranked[bound[ranked] > 0]
        if ranked.size == 0 or target <= 0:
            return []
        sizes = bound[ranked]
        left_before = target - np.concatenate(([0], np.cumsum(sizes)[:-1]))
        covers = sizes >= left_before
        if not covers.any():
            return [int(i) for i in ranked]
        j = int(np.argmax(covers))
        tail = ranked[j:]
        able = tail[bound[tail] >= left_before[j]]
        last = able[np.lexsort((able, raw[able]))[0]]
        return [int(i) for i in ranked[:j]] + [int(last)]

    # -------------------------------------------------------------- laying pods down

    def _fill(self, order: IntArray, target: int) -> _Attempt:
        attempt = self._greedy(order, list(range(len(self.classes))))
        if attempt.placed < target and len(self.classes) > 1:
            alt = self._greedy(order, list(reversed(range(len(self.classes)))))
            if alt.placed > attempt.placed:
                attempt = alt
        bound = sum(
            min(int(cap[order].sum()), count) for cap, count in zip(self.caps, self.counts, strict=True)
        )
        # One class: first-fit of identical pods is already optimal. Several: search exactly when small.
        if len(self.classes) > 1 and attempt.placed < min(target, bound) and self.total <= EXACT_MAX_PODS:
            small = order[: EXACT_MAX_NODES * 4]
            eligible = small[np.any([cap[small] > 0 for cap in self.caps], axis=0)]
            if eligible.size <= EXACT_MAX_NODES:
                exact = self._exact(eligible, target)
                if exact is not None and exact.placed > attempt.placed:
                    attempt = exact
        attempt.spread = self._spread(attempt)
        return attempt

    def _greedy(self, order: IntArray, class_order: list[int]) -> _Attempt:
        free = self.free[order].copy()
        counts: list[dict[int, int]] = [{} for _ in self.classes]
        placed = 0
        for k in class_order:
            cls = self.classes[k]
            cap = fit_counts(free, cls.request, cls.mask[order])
            want = self.counts[k]
            cum = np.cumsum(cap)
            if cum.size == 0 or cum[-1] == 0:
                continue
            last = int(np.searchsorted(cum, want))
            if last >= cum.size:
                last = cum.size - 1
            takes = cap[: last + 1].copy()
            takes[-1] -= max(0, int(cum[last]) - want)
            used = np.flatnonzero(takes > 0)
            free[used] -= takes[used, None] * cls.request[None, :]
            for pos in used:
                counts[k][int(order[pos])] = int(takes[pos])
            placed += int(takes.sum())
        return _Attempt(placed=placed, counts=counts)

    def _exact(self, nodes: IntArray, target: int) -> _Attempt | None:
        """Bounded depth-first search for the most pods (up to target) on few nodes."""
        free = [list(map(int, row)) for row in self.free[nodes]]
        reqs = [list(map(int, c.request)) for c in self.classes]
        allowed = [[bool(c.mask[n]) for n in nodes] for c in self.classes]
        items = [k for k, count in enumerate(self.counts) for _ in range(count)]
        cols = [[r for r, v in enumerate(req) if v > 0] for req in reqs]
        best_placed = -1
        best: list[int] = []
        current = [-1] * len(items)
        steps = 0

        def fits(k: int, j: int) -> bool:
            row = free[j]
            req = reqs[k]
            return all(row[r] >= req[r] for r in cols[k])

        def visit(i: int, placed: int, start: int) -> bool:
            nonlocal best_placed, best, steps
            steps += 1
            if steps > EXACT_STEP_BUDGET:
                return True
            if placed > best_placed:
                best_placed, best = placed, current.copy()
                if placed >= target:
                    return True
            if i == len(items) or placed + (len(items) - i) <= best_placed:
                return False
            k = items[i]
            # Pods of one class are interchangeable: keep their nodes non-decreasing.
            begin = start if i > 0 and items[i - 1] == k else 0
            for j in range(begin, len(nodes)):
                if allowed[k][j] and fits(k, j):
                    row, req = free[j], reqs[k]
                    for r in cols[k]:
                        row[r] -= req[r]
                    current[i] = j
                    done = visit(i + 1, placed + 1, j)
                    current[i] = -1
                    for r in cols[k]:
                        row[r] += req[r]
                    if done:
                        return True
            # Leave this pod (and so the rest of its class) unplaced.
            nxt = i + 1
            while nxt < len(items) and items[nxt] == k:
                nxt += 1
            return visit(nxt, placed, 0)

        visit(0, 0, 0)
        if best_placed <= 0:
            return None
        counts: list[dict[int, int]] = [{} for _ in self.classes]
        for i, j in enumerate(best):
            if j >= 0:
                node = int(nodes[j])
                counts[items[i]][node] = counts[items[i]].get(node, 0) + 1
        return _Attempt(placed=best_placed, counts=counts)

    def _spread(self, attempt: _Attempt) -> tuple[int, ...]:
        used = sorted({n for per in attempt.counts for n in per})
        if not used:
            return ()
        idx = np.asarray(used, dtype=np.int64)
        spread = []
        for depth in self.preferred_depths:
            ids, _ = self.snap.domains(self.levels[: depth + 1])
            spread.append(int(np.unique(ids[idx]).size))
        spread.append(len(used))
        return tuple(spread)

    # -------------------------------------------------------------- commit and explain

    def commit(self, attempt: _Attempt) -> dict[tuple[str, str], str]:
        assignments: dict[tuple[str, str], str] = {}
        for cls, per_node in zip(self.classes, attempt.counts, strict=True):
            pods = iter(sorted(cls.pods, key=lambda p: p.name))
            for node, count in sorted(per_node.items()):
                for _ in range(count):
                    pod = next(pods)
                    assignments[pod.key] = self.snap.nodes[node].name
                    self.snap.add_usage(node, cls.request)
        return assignments

    def domain_label(self, attempt: _Attempt) -> str | None:
        used = sorted({n for per in attempt.counts for n in per})
        if not used or not self.levels:
            return None
        node = self.snap.nodes[used[0]]
        # Report the innermost level that holds every placed pod.
        label = None
        for depth in range(len(self.levels)):
            ids, _ = self.snap.domains(self.levels[: depth + 1])
            if np.unique(ids[np.asarray(used)]).size != 1 or ids[used[0]] < 0:
                break
            label = "/".join(f"{k}={node.labels[k]}" for k in self.levels[: depth + 1])
        return label

    def explain(self) -> str:
        """Why the group does not fit: per-node reasons for its main shape, and the best domain."""
        n = len(self.snap.nodes)
        if not self.classes:
            return "no pending pods"
        main = max(range(len(self.classes)), key=lambda k: self.counts[k])
        cls = self.classes[main]
        reason = cls.eligibility.reason.copy()
        reason[(reason == OK) & self.missing_label] = MISSING_LABEL
        if self.blocked is not None:
            reason[(reason == OK) & self.blocked] = RESERVED
        cap = self.caps[main]
        insufficient = (reason == OK) & (cap == 0)
        reason[insufficient] = INSUFFICIENT
        counter = self._reason_counts(reason, cls)
        eligible = int(np.count_nonzero(reason == OK))
        pods = self.total
        head = f"{eligible}/{n} nodes eligible for {pods} pod{'s' if pods != 1 else ''}"
        parts = [f"{count} {text}" for text, count in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))]
        message = head + (": " + ", ".join(parts) if parts else "")
        want = max(self.need, 1)
        if self.bound_nodes and self.required_depth >= 0:
            ids, _ = self.snap.domains(self.required_keys)
            if len({int(ids[i]) for i in self.bound_nodes}) > 1:
                message += "; bound members already span several domains of the Required level"
        best = self._best_partial()
        if best is not None:
            message += f"; {best[0]} fits {best[1]}/{want}"
            limits = self._bottlenecks(np.flatnonzero(reason == OK), cls)
            if limits:
                message += f" (limited by {limits.most_common(1)[0][0]})"
        else:
            message += f"; needs {want} pod{'s' if want != 1 else ''} placed together"
        return message

    def _best_partial(self) -> tuple[str, int] | None:
        """The domain (innermost Required level, else the cluster) that gets closest to fitting."""
        nodes = np.flatnonzero(np.any([c > 0 for c in self.caps], axis=0)) if self.caps else np.array([])
        if nodes.size == 0:
            return None
        if self.required_depth < 0:
            attempt = self._greedy(
                self._order_leaves(nodes, self._main_units(self.total)), list(range(len(self.classes)))
            )
            return "cluster", attempt.placed
        ids_all, paths = self.snap.domains(self.required_keys)
        if self.bound_nodes:
            # Bound members pin the domain: the explanation is about that domain only.
            pinned = {int(ids_all[i]) for i in self.bound_nodes}
            if len(pinned) != 1:
                return None
            nodes = nodes[ids_all[nodes] == next(iter(pinned))]
            if nodes.size == 0:
                return None
        ids = ids_all[nodes]
        uniq, inverse = np.unique(ids, return_inverse=True)
        bound, _ = self._upper_bound(inverse, nodes, uniq.size)
        top = int(np.argmax(bound))
        attempt = self._greedy(
            self._order_leaves(nodes[inverse == top], self._main_units(self.total)),
            list(range(len(self.classes))),
        )
        key = self.required_keys[-1].rsplit("/", 1)[-1]
        return f"best {key} {'-'.join(paths[int(uniq[top])])}", attempt.placed

    def _reason_counts(self, reason: npt.NDArray[np.int8], cls: _Class) -> Counter[str]:
        """Nodes per reason, vectorised (this runs for every unschedulable group, every cycle)."""
        counts = np.bincount(reason, minlength=RESERVED + 1)
        counter: Counter[str] = Counter()
        fixed = {
            UNSCHEDULABLE: "node(s) were unschedulable",
            NOT_READY: "node(s) were not ready",
            SELECTOR: "node(s) didn't match node selector/affinity",
            RESERVED: "reserved for a waiting higher-priority gang",
        }
        for code, text in fixed.items():
            if counts[code]:
                counter[text] = int(counts[code])
        if counts[TAINT]:  # few nodes: only tainted ones can get here
            for i in np.flatnonzero(reason == TAINT):
                counter[f"untolerated taint {cls.eligibility.taint_of[int(i)]}"] += 1
        if counts[MISSING_LABEL]:
            missing = np.flatnonzero(reason == MISSING_LABEL)
            for key in self.required_keys:
                codes, _ = self.snap.label_codes(key)
                lacking = missing[codes[missing] < 0]
                if lacking.size:
                    counter[f"missing label {key}"] += int(lacking.size)
                missing = missing[codes[missing] >= 0]
        if counts[INSUFFICIENT]:
            for name, count in self._bottlenecks(np.flatnonzero(reason == INSUFFICIENT), cls).items():
                counter[f"Insufficient {name}"] += count
        return counter

    def _bottlenecks(self, nodes: IntArray, cls: _Class) -> Counter[str]:
        """Per resource: on how many of `nodes` it is what limits how many pods of `cls` fit."""
        if nodes.size == 0:
            return Counter()
        cols = np.flatnonzero(cls.request > 0)
        ratio = np.maximum(self.free[np.ix_(nodes, cols)], 0) / cls.request[cols]
        worst = np.bincount(np.argmin(ratio, axis=1), minlength=cols.size)
        return Counter({self.snap.resource_name(int(cols[j])): int(worst[j]) for j in np.flatnonzero(worst)})


def _fewest_children(parents: IntArray, child_bound: IntArray, total: int, size: int) -> IntArray:
    """Per parent domain: the fewest children whose capacities add up to `total` (a big number
    when all of them together fall short). Vectorised: a segmented sort and cumulative sum."""
    valid = np.flatnonzero(parents >= 0)
    out = np.full(size, 1 << 30, dtype=np.int64)
    if valid.size == 0:
        return out
    order = valid[np.lexsort((-child_bound[valid], parents[valid]))]
    par = parents[order]
    cap = child_bound[order]
    cum = np.cumsum(cap)
    starts = np.flatnonzero(np.concatenate(([True], par[1:] != par[:-1])))
    seg_base = np.repeat(cum[starts] - cap[starts], np.diff(np.append(starts, par.size)))
    before = cum - cap - seg_base  # capacity of the larger siblings taken before this child
    needed = np.bincount(par[before < total], minlength=size)[:size]
    totals = np.bincount(par, weights=cap, minlength=size)[:size]
    out[totals >= total] = needed[totals >= total]
    return out


# =========================================================================== the queue


def queue_order(groups: Iterable[GroupRequest]) -> list[GroupRequest]:
    """Priority (higher first), then creation time, then namespace/name."""
    return sorted(groups, key=lambda g: (-g.priority, g.created, g.namespace, g.name))


def schedule_groups(
    snapshot: Snapshot,
    groups: Sequence[GroupRequest],
    *,
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
) -> tuple[list[GroupDecision], tuple[str, str] | None]:
    """Decide for every group in queue order, assuming each placement before the next group.

    A group that does not fit does not block the groups behind it, except that the first
    group (in queue order) unschedulable for longer than `reservation_after_seconds` reserves
    the domain it is closest to fitting: groups behind it may not use those nodes, so it
    stops being starved by a stream of smaller gangs.
    """
    decisions: list[GroupDecision] = []
    blocked: BoolArray | None = None
    reservation: tuple[str, str] | None = None
    for group in queue_order(groups):
        placer = _GroupPlacer(snapshot, group, blocked)
        attempt = placer.place()
        if attempt is not None and attempt.placed >= max(placer.need, 1):
            assignments = placer.commit(attempt)
            placed = len(assignments)
            message = f"placed {placed}/{placer.total} pending pod{'s' if placer.total != 1 else ''}"
            domain = placer.domain_label(attempt)
            if domain:
                message += f" in {domain}"
            decisions.append(
                GroupDecision(
                    namespace=group.namespace,
                    name=group.name,
                    scheduled=True,
                    reason=SCHEDULED,
                    message=message,
                    assignments=assignments,
                    domain=domain,
                    pending=list(group.pending),
                )
            )
            continue
        decisions.append(
            GroupDecision(
                namespace=group.namespace,
                name=group.name,
                scheduled=False,
                reason=UNSCHEDULABLE_REASON,
                message=placer.explain(),
                pending=list(group.pending),
            )
        )
        if reservation is None and group.waiting_seconds >= reservation_after_seconds:
            reserved = _reservation_nodes(placer)
            if reserved is not None:
                blocked = reserved if blocked is None else (blocked | reserved)
                reservation = group.key
    return decisions, reservation


def _reservation_nodes(placer: _GroupPlacer) -> BoolArray | None:
    """Nodes held back for a starving group: its best Required domain, or enough nodes for it."""
    snap = placer.snap
    if not placer.classes:
        return None
    eligible = np.zeros(len(snap.nodes), dtype=bool)
    empty_cap = np.zeros(len(snap.nodes), dtype=np.int64)
    for cls in placer.classes:
        eligible |= cls.mask
        empty_cap += fit_counts(snap.allocatable, cls.request, cls.mask)
    if not eligible.any():
        return None
    if placer.required_depth >= 0:
        ids, _ = snap.domains(placer.required_keys)
        nodes = np.flatnonzero(eligible & (ids >= 0))
        if nodes.size == 0:
            return None
        size = int(ids.max()) + 1
        whole = np.bincount(ids[nodes], weights=empty_cap[nodes], minlength=size)
        now, _ = placer._upper_bound(ids[nodes], nodes, size)
        able = np.flatnonzero(whole >= max(placer.need, 1))
        if able.size == 0:
            return None
        target = able[np.argmax(now[able])]
        return np.asarray(ids == target) & eligible
    # Unconstrained: the nodes it fits best on now, until their full capacity covers it.
    nodes = np.flatnonzero(eligible)
    current, _ = placer._node_bound(nodes)
    ranked = nodes[np.lexsort((nodes, -current))]
    cum = np.cumsum(empty_cap[ranked])
    last = int(np.searchsorted(cum, max(placer.need, 1)))
    mask = np.zeros(len(snap.nodes), dtype=bool)
    mask[ranked[: last + 1]] = True
    return mask


# =========================================================================== a whole cycle


def schedule_cycle(
    *,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    pod_groups: Sequence[PodGroup],
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    waiting_seconds: Mapping[tuple[str, str], float] | None = None,
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
    exclude_pods: frozenset[tuple[str, str]] = frozenset(),
) -> CycleResult:
    """Group the pending pods of `scheduler_name`, then place every group in queue order.

    `pods` is every pod the scheduler knows (bound pods are load, whoever scheduled them).
    `exclude_pods` are pending pods not to place this cycle (e.g. a bind is in flight).
    """
    snapshot = Snapshot(nodes, (p for p in pods if p.holds_resources))
    groups_by_key = {g.key: g for g in pod_groups}
    members: dict[tuple[str, str], list[Pod]] = {}
    scheduler_names: dict[tuple[str, str], set[str]] = {}
    pending: list[Pod] = []
    for pod in pods:
        if pod.pod_group is not None:
            key = (pod.namespace, pod.pod_group)
            if not pod.terminal:
                scheduler_names.setdefault(key, set()).add(pod.scheduler_name)
            if pod.scheduler_name == scheduler_name:
                members.setdefault(key, []).append(pod)
        if (
            pod.scheduler_name == scheduler_name
            and not pod.node_name
            and not pod.terminal
            and not pod.deleting
            and not pod.scheduling_gated
            and pod.key not in exclude_pods
        ):
            pending.append(pod)

    waiting = waiting_seconds or {}
    early: list[GroupDecision] = []
    requests: list[GroupRequest] = []
    seen_groups: set[tuple[str, str]] = set()
    for pod in pending:
        if pod.pod_group is None:
            requests.append(
                GroupRequest(
                    namespace=pod.namespace,
                    name=pod.name,
                    min_count=1,
                    is_gang=False,
                    topology=(),
                    pending=[pod],
                    priority=pod.priority,
                    created=pod.created,
                    waiting_seconds=waiting.get(pod.key, 0.0),
                    is_pod_group=False,
                )
            )
            continue
        key = (pod.namespace, pod.pod_group)
        if key in seen_groups:
            continue
        seen_groups.add(key)
        group_pending = [p for p in pending if p.pod_group == pod.pod_group and p.namespace == pod.namespace]
        decision = _gate_group(
            key, groups_by_key.get(key), members.get(key, []), scheduler_names.get(key, set())
        )
        if decision is not None:
            decision.pending = group_pending
            early.append(decision)
            continue
        group = groups_by_key[key]
        assert group.spec is not None
        bound = [p for p in members.get(key, []) if p.node_name and not p.terminal]
        pod_priority = max((p.priority for p in group_pending), default=0)
        has_priority = group.spec.priority is not None or group.spec.priority_class_name
        requests.append(
            GroupRequest(
                namespace=group.namespace,
                name=group.name,
                min_count=group.spec.min_count,
                is_gang=group.spec.is_gang,
                topology=group.spec.scheduling_constraints.topology,
                pending=group_pending,
                bound=bound,
                priority=group.priority if has_priority else pod_priority,
                created=group.created,
                waiting_seconds=waiting.get(key, 0.0),
            )
        )
    decisions, reservation = schedule_groups(
        snapshot, requests, reservation_after_seconds=reservation_after_seconds
    )
    for decision, request in zip(decisions, queue_order(requests), strict=True):
        decision.is_pod_group = request.is_pod_group
    all_decisions = early + decisions
    by_key = {(d.namespace, d.name, d.is_pod_group): d for d in all_decisions}
    pod_rows: list[tuple[Pod, str | None, GroupDecision]] = []
    for pod in pending:
        if pod.pod_group is None:
            decision = by_key[(pod.namespace, pod.name, False)]
        else:
            decision = by_key[(pod.namespace, pod.pod_group, True)]
        pod_rows.append((pod, decision.assignments.get(pod.key), decision))
    return CycleResult(decisions=all_decisions, pods=pod_rows, reservation=reservation)


def _gate_group(
    key: tuple[str, str],
    group: PodGroup | None,
    members: list[Pod],
    scheduler_names: set[str],
) -> GroupDecision | None:
    """Decisions that need no placement: missing or invalid group, mixed schedulers, too few pods."""
    namespace, name = key
    if group is None:
        return GroupDecision(
            namespace=namespace,
            name=name,
            scheduled=False,
            reason=POD_GROUP_NOT_FOUND,
            message=f"PodGroup {namespace}/{name} not found; its pods wait until it is created",
        )
    if group.spec is None:
        return GroupDecision(
            namespace=namespace,
            name=name,
            scheduled=False,
            reason=UNSCHEDULABLE_REASON,
            message=f"invalid PodGroup: {group.spec_error}",
        )
    if len(scheduler_names) > 1:
        return GroupDecision(
            namespace=namespace,
            name=name,
            scheduled=False,
            reason=UNSCHEDULABLE_REASON,
            message="pods of one PodGroup must share one schedulerName; found "
            + ", ".join(sorted(scheduler_names)),
        )
    # Gated pods are not ready to be scheduled yet, as in kube-scheduler's PreEnqueue.
    alive = [p for p in members if not p.terminal and not p.deleting and not p.scheduling_gated]
    if group.spec.is_gang and len(alive) < group.spec.min_count:
        return GroupDecision(
            namespace=namespace,
            name=name,
            scheduled=False,
            reason=WAITING_FOR_PODS,
            message=f"waiting for pods: {len(alive)}/{group.spec.min_count} of minCount exist",
        )
    return None
