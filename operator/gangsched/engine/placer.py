"""The placer: which domain a group goes to, and in which order its nodes are filled.

How one group is placed (docs/placement.md has the why):
  1. Candidate domains at the innermost Required level (or the whole cluster) are ranked:
     fits-the-whole-group first, then "a single Preferred domain fits it", then tightest fit.
  2. Inside a candidate, Preferred levels are descended: one child domain when one fits the
     whole group (the tightest such), else the fewest children (largest first, best-fit last).
     An entirely free child is kept whole (two partly used ones instead) only while another
     waiting gang needs a whole one (`spares`, from `engine.sparing`).
  3. That choice becomes a node order, along which `fill` lays the pods down.
  4. All-or-nothing: fewer than `need` placeable pods means no attempt is returned.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.fill import Attempt, fill
from gangsched.engine.snapshot import IntArray
from gangsched.engine.sparing import SparesLevel
from gangsched.model import Key, Pod

# How many candidate domains are fully evaluated per level (after vectorised ranking).
CANDIDATES_PER_LEVEL = 8


class Placer:
    """Places one group (described by its `GroupCapacity`) on the capacity's snapshot.

    `spares`: whether an entirely free domain of a Preferred level is kept whole for a gang
    still waiting for one (`engine.sparing`); None: at every level, for callers that do not
    see the queue."""

    def __init__(self, capacity: GroupCapacity, spares: SparesLevel | None = None) -> None:
        self.cap = capacity
        self.snap = capacity.snap
        self.spares = spares
        # Per Required domain: the fewest first-level Preferred children that could hold the group.
        self.fewest = np.zeros(0, dtype=np.int64)

    # -------------------------------------------------------------- entry point

    def place(self) -> Attempt | None:
        """The best attempt, or None when nothing reaches `need` (the explanation is built apart)."""
        cap = self.cap
        if cap.total == 0:
            return None
        nodes_all = cap.usable_nodes()
        if nodes_all.size == 0:
            return None
        best: Attempt | None = None
        for domain, nodes in self._required_candidates(nodes_all):
            attempt = self._place_within(nodes, 0, cap.total)
            if attempt.placed >= max(cap.need, 1) and (best is None or _better(attempt, best)):
                best = attempt
                # Candidates come best-first; stop once one meets its own lower bound.
                if attempt.placed == cap.total and self._optimal_spread(attempt, domain):
                    break
        return best

    def _optimal_spread(self, attempt: Attempt, domain: int) -> bool:
        if not self.cap.preferred_depths:
            return True
        lower = int(self.fewest[domain]) if domain >= 0 and self.fewest.size else 1
        return attempt.spread[0] <= max(lower, 1) and all(s <= 1 for s in attempt.spread[1:-1])

    def _required_candidates(self, nodes_all: IntArray) -> Iterable[tuple[int, IntArray]]:
        cap = self.cap
        if cap.required_depth < 0:
            return [(-1, nodes_all)]
        ids_all, _ = self.snap.domains(cap.required_keys)
        pinned = cap.pinned_domains(ids_all)
        if pinned is not None:
            if len(pinned) != 1 or -1 in pinned:
                return []  # members already span domains: nothing more can satisfy Required
            nodes_all = nodes_all[ids_all[nodes_all] == next(iter(pinned))]
            if nodes_all.size == 0:
                return []
        ids = ids_all[nodes_all]
        size = int(ids_all.max()) + 1
        upper, raw = cap.domain_capacity(ids, nodes_all, size)
        present = np.flatnonzero(np.bincount(ids, minlength=size))
        viable = present[upper[present] >= max(cap.need, 1)]
        if viable.size == 0:
            return []
        fits_all = upper[viable] >= cap.total
        fewest = np.zeros(size, dtype=np.int64)
        breaks = np.zeros(size, dtype=bool)
        if cap.preferred_depths:
            # How few children at the first Preferred level could hold the whole group?
            child_ids_all, _ = self.snap.domains(cap.levels[: cap.preferred_depths[0] + 1])
            child_ids = child_ids_all[nodes_all]
            ok = child_ids >= 0
            csize = int(child_ids_all.max()) + 1 if child_ids_all.size else 0
            # In main-class pods, as the descent counts them (see _order).
            _, child_upper = cap.domain_capacity(child_ids[ok], nodes_all[ok], csize)
            parents = np.full(csize, -1, dtype=np.int64)
            parents[child_ids[ok]] = ids[ok]
            fewest = fewest_children(parents, child_upper, cap.main_units(cap.total), size)
            # Would that many children have to include an entirely free one? Then a domain
            # whose partly used children hold the group just as well keeps its free ones whole
            # for bigger gangs (Slurm's block rule, Kueue's BestFit, FGD).
            empty = self._entirely_free(child_ids_all, csize)
            if empty.any():
                partial = np.where(empty, 0, child_upper)
                breaks = fewest_children(parents, partial, cap.main_units(cap.total), size) > fewest
        self.fewest = fewest
        # Rank: whole group fits, fewest Preferred children needed, no entirely free child
        # broken, then the tightest (least spare).
        order = np.lexsort((viable, raw[viable], breaks[viable], fewest[viable], ~fits_all))
        chosen = viable[order][:CANDIDATES_PER_LEVEL]
        # Lazily: the first candidate usually ends the search.
        return ((int(d), nodes_all[ids == d]) for d in chosen)

    def _entirely_free(self, child_ids_all: IntArray, csize: int) -> npt.NDArray[np.bool_]:
        """Per child domain: does no pod at all run on any of its nodes?"""
        used = self.snap.used
        busy = np.zeros(used.shape[0], dtype=bool)
        for column in range(1, used.shape[1]):  # column 0 of `used` counts pods, the others resources
            busy |= used[:, column] > 0
        busy &= child_ids_all >= 0
        free: npt.NDArray[np.bool_] = np.bincount(child_ids_all[busy], minlength=csize)[:csize] == 0
        return free

    # -------------------------------------------------------------- descent

    def _spare_free_children(
        self,
        nodes: IntArray,
        pref_index: int,
        target: int,
        uniq: IntArray,
        inverse: IntArray,
        upper: IntArray,
        fitting: IntArray,
        home: npt.NDArray[np.bool_],
    ) -> Attempt | None:
        """When the only children that hold the whole group alone are entirely free, and two
        partly used children hold it together, place it there: one more child for the gang,
        a whole free child kept for a gang that needs all of it. Only while some gang waits
        that needs a whole free child of this level: otherwise the free child is kept for
        nobody, and the group loses its one child for it (issue 26)."""
        if home.any() or uniq.size < 2:
            return None
        path = self.cap.levels[: self.cap.preferred_depths[pref_index] + 1]
        ids_all, _ = self.snap.domains(path)
        free_codes = self._entirely_free(ids_all, int(ids_all.max()) + 1)
        child_free = np.where(uniq >= 0, free_codes[np.maximum(uniq, 0)], False)
        if not child_free[fitting].all():
            return None
        # Asked last: whether anybody waits for the free child is the costly question.
        if self.spares is not None and not self.spares(path[-1]):
            return None
        partial = np.flatnonzero(~child_free & (uniq >= 0) & (upper > 0))
        if partial.size < 2 or np.sort(upper[partial])[-2:].sum() < target:
            return None
        keep = nodes[np.isin(inverse, partial)]
        order = self.order(keep, pref_index, self.cap.main_units(target))
        attempt = fill(self.cap, order, target)
        if attempt.placed < target:
            return None
        attempt.spread = self._spread(attempt)
        return attempt if attempt.spread[pref_index] <= 2 else None

    def _place_within(self, nodes: IntArray, pref_index: int, target: int) -> Attempt:
        cap = self.cap
        if pref_index < len(cap.preferred_depths):
            depth = cap.preferred_depths[pref_index]
            ids_all, _ = self.snap.domains(cap.levels[: depth + 1])
            ids = ids_all[nodes]
            uniq, inverse = np.unique(ids, return_inverse=True)
            upper, raw = cap.domain_capacity(inverse, nodes, uniq.size)
            fitting = np.flatnonzero((upper >= target) & (uniq >= 0))
            if fitting.size:
                # The domain of already-bound members first (a repaired gang stays together),
                # then the tightest: big domains stay whole for big gangs.
                home = cap.holds_members(uniq[fitting], ids_all)
                spared = self._spare_free_children(
                    nodes, pref_index, target, uniq, inverse, upper, fitting, home
                )
                if spared is not None:
                    return spared
                ranked = fitting[np.lexsort((uniq[fitting], raw[fitting], ~home))]
                for child in ranked[:CANDIDATES_PER_LEVEL]:
                    attempt = self._place_within(nodes[inverse == child], pref_index + 1, target)
                    if attempt.placed >= target:
                        return attempt
        order = self.order(nodes, pref_index, cap.main_units(target))
        attempt = fill(cap, order, target)
        attempt.spread = self._spread(attempt)
        return attempt

    def order(self, nodes: IntArray, pref_index: int, target: int) -> IntArray:
        """Nodes in preference order: fewest domains at each Preferred level, fewest hosts.

        `target` counts pods of the main class only: a domain is chosen for the class that
        makes up the gang (the workers); the few others (a launcher) fill in along the order.
        Counting them too would credit every domain with room for the launcher and so pick
        one domain too few.
        """
        cap = self.cap
        if pref_index >= len(cap.preferred_depths):
            return self.order_leaves(nodes, target)
        depth = cap.preferred_depths[pref_index]
        ids_all, _ = self.snap.domains(cap.levels[: depth + 1])
        ids = ids_all[nodes]
        uniq, inverse = np.unique(ids, return_inverse=True)
        _, raw = cap.domain_capacity(inverse, nodes, uniq.size)
        home = cap.holds_members(uniq, ids_all)
        picked = largest_then_best_fit(np.lexsort((uniq, -raw, ~home)), raw, raw, target)
        parts: list[IntArray] = []
        remaining = target
        for child in picked:
            child_nodes = nodes[inverse == child]
            take = min(int(raw[child]), remaining)
            parts.append(self.order(child_nodes, pref_index + 1, take))
            remaining -= take
        rest = np.ones(uniq.size, dtype=bool)
        rest[picked] = False
        if rest.any():
            parts.append(self.order_leaves(nodes[rest[inverse]], 0))
        return np.concatenate(parts) if parts else nodes

    def order_leaves(self, nodes: IntArray, target: int) -> IntArray:
        """Hosts largest first while none alone holds what is left (`target`, main-class pods).

        A group without any topology asked for no locality: its hosts are packed fullest
        first instead (kube-scheduler's MostAllocated, Kueue's LeastFreeCapacity), so it
        does not break up free hosts, and with them free racks, that bigger gangs need."""
        _, raw = self.cap.node_capacity(nodes)
        if not self.cap.levels:
            able = nodes[raw > 0]
            return np.concatenate([able[np.lexsort((able, raw[raw > 0]))], nodes[raw <= 0]])
        ranked = np.lexsort((nodes, -raw))
        picked = largest_then_best_fit(ranked, raw, raw, target) if target > 0 else []
        if not picked:
            return nodes[ranked]
        taken = np.zeros(nodes.shape[0], dtype=bool)
        taken[picked] = True
        rest = ranked[~taken[ranked]]
        order: IntArray = nodes[np.concatenate([np.asarray(picked, dtype=np.int64), rest])]
        return order

    def _spread(self, attempt: Attempt) -> tuple[int, ...]:
        used = attempt.nodes()
        if not used:
            return ()
        idx = np.asarray(used, dtype=np.int64)
        spread = []
        for depth in self.cap.preferred_depths:
            ids, _ = self.snap.domains(self.cap.levels[: depth + 1])
            spread.append(int(np.unique(ids[idx]).size))
        spread.append(len(used))
        return tuple(spread)

    # -------------------------------------------------------------- the outcome

    def assign(self, attempt: Attempt) -> list[tuple[Pod, int, int]]:
        """(pod, node index, class index) for every placed pod: per class, pods by name fill
        its nodes in ascending order. Deterministic, so devices verified per pod stay with it."""
        out: list[tuple[Pod, int, int]] = []
        for k, (cls, per_node) in enumerate(zip(self.cap.classes, attempt.counts, strict=True)):
            pods = iter(sorted(cls.pods, key=_by_name))
            for node, count in sorted(per_node.items()):
                for _ in range(count):
                    out.append((next(pods), node, k))
        return out

    def commit(self, attempt: Attempt) -> dict[Key, str]:
        """Pod key -> node name; the snapshot counts the placed pods as used from now on."""
        assignments = {pod.key: self.snap.nodes[node].name for pod, node, _ in self.assign(attempt)}
        width = self.cap.width
        for cls, per_node in zip(self.cap.classes, attempt.counts, strict=True):
            if not per_node:
                continue
            rows = np.fromiter(per_node.keys(), dtype=np.int64, count=len(per_node))
            counts = np.fromiter(per_node.values(), dtype=np.int64, count=len(per_node))
            request = cls.resources(width)
            # One vectorised update per class (rows are distinct), not one per pod.
            self.snap.used[rows, : request.shape[0]] += counts[:, None] * request[None, :]
        return assignments

    def domain_label(self, attempt: Attempt) -> str | None:
        """The innermost level that holds every placed pod, as "key=value/key=value"."""
        used = attempt.nodes()
        levels = self.cap.levels
        if not used or not levels:
            return None
        node = self.snap.nodes[used[0]]
        label = None
        for depth in range(len(levels)):
            ids, _ = self.snap.domains(levels[: depth + 1])
            if np.unique(ids[np.asarray(used)]).size != 1 or ids[used[0]] < 0:
                break
            label = "/".join(f"{k}={node.labels[k]}" for k in levels[: depth + 1])
        return label


_by_name = attrgetter("name")


def _better(a: Attempt, b: Attempt) -> bool:
    if a.placed != b.placed:
        return a.placed > b.placed
    return a.spread < b.spread


def largest_then_best_fit(ranked: IntArray, upper: IntArray, raw: IntArray, target: int) -> list[int]:
    """Take the largest domains while none alone covers what is left, then the tightest that does.

    `ranked` orders the domains largest first. Vectorised: this runs over thousands of nodes.
    """
    ranked = ranked[upper[ranked] > 0]
    if ranked.size == 0 or target <= 0:
        return []
    sizes = upper[ranked]
    left_before = target - np.concatenate(([0], np.cumsum(sizes)[:-1]))
    covers = sizes >= left_before
    if not covers.any():
        return [int(i) for i in ranked]
    j = int(np.argmax(covers))
    tail = ranked[j:]
    able = tail[upper[tail] >= left_before[j]]
    last = able[np.lexsort((able, raw[able]))[0]]
    return [int(i) for i in ranked[:j]] + [int(last)]


def fewest_children(parents: IntArray, child_upper: IntArray, total: int, size: int) -> IntArray:
    """Per parent domain: the fewest children whose capacities add up to `total` (a big number
    when all of them together fall short). Vectorised: a segmented sort and cumulative sum."""
    valid = np.flatnonzero(parents >= 0)
    out = np.full(size, 1 << 30, dtype=np.int64)
    if valid.size == 0:
        return out
    order = valid[np.lexsort((-child_upper[valid], parents[valid]))]
    par = parents[order]
    cap = child_upper[order]
    cum = np.cumsum(cap)
    starts = np.flatnonzero(np.concatenate(([True], par[1:] != par[:-1])))
    seg_base = np.repeat(cum[starts] - cap[starts], np.diff(np.append(starts, par.size)))
    before = cum - cap - seg_base  # capacity of the larger siblings taken before this child
    needed = np.bincount(par[before < total], minlength=size)[:size]
    totals = np.bincount(par, weights=cap, minlength=size)[:size]
    out[totals >= total] = needed[totals >= total]
    return out
