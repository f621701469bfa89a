"""The engine's frozen view of the cluster: nodes as rows of numpy arrays.

Everything the placement engine asks per node (free capacity, eligibility of a pod shape,
topology domain of a node) is answered with vector operations over these arrays, and cached.

Two ways to get one:

- `Snapshot(nodes, bound_pods)` builds it from scratch (`gangsched simulate`, `explain`, tests);
- the operator keeps one from cycle to cycle and changes only the rows of the nodes that
  changed (`cluster.snapshots.SnapshotKeeper`, kube-scheduler's generation-numbered
  `UpdateSnapshot`): `set_node` and `set_used` change a row, `for_cycle` hands out a copy the
  engine may place on. What depends on the nodes alone (labels, domains, eligibility) is
  cached on the kept snapshot and shared by its copies until a node changes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched.model import PODS, Node, Placement, Pod, SelectorRequirement, SelectorTerm, Taint

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Why a node cannot host a pod shape, in the order kube-scheduler's filters run.
OK = 0
UNSCHEDULABLE = 1
NOT_READY = 2
TAINT = 3
SELECTOR = 4
MISSING_LABEL = 5
INSUFFICIENT = 6
RESERVED = 7
# Not a node filter: the group's ResourceClaims keep the pod off the node (`DeviceView.mask`).
CLAIMS = 8

UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", value="", effect="NoSchedule")


@dataclass(slots=True)
class Eligibility:
    """Which nodes a pod shape may use at all (before capacity), and why not."""

    mask: BoolArray
    reason: npt.NDArray[np.int8]
    # For nodes rejected by a taint: the first untolerated taint, for the explanation.
    taint_of: dict[int, Taint]


class Snapshot:
    """Nodes, their allocatable and used resources, and per-cycle caches."""

    def __init__(self, nodes: Sequence[Node], bound_pods: Iterable[Pod] = ()) -> None:
        self.nodes = list(nodes)
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        names: dict[str, int] = {PODS: 0, "cpu": 1, "memory": 2}
        for node in self.nodes:
            for resource in node.allocatable:
                names.setdefault(resource, len(names))
        self.columns = names
        n = len(self.nodes)
        self.allocatable = np.zeros((n, len(names)), dtype=np.int64)
        for i, node in enumerate(self.nodes):
            for resource, amount in node.allocatable.items():
                self.allocatable[i, names[resource]] = amount
        self.used = np.zeros_like(self.allocatable)
        for pod in bound_pods:
            if pod.holds_resources and pod.node_name in self.index:
                self.add_usage(self.index[pod.node_name], self.vector(pod.requests))
        self._shared = False  # `nodes` and `allocatable` are handed out by `for_cycle`
        self.nodes_changed()

    def nodes_changed(self) -> None:
        """Drop what was derived from the nodes (a node's labels, taints or readiness changed)."""
        self._labels: dict[str, tuple[npt.NDArray[np.int32], dict[str, int]]] = {}
        self._eligibility: dict[Placement, Eligibility] = {}
        self._domains: dict[tuple[str, ...], tuple[IntArray, list[tuple[str, ...]]]] = {}
        self.__dict__.pop("_scale", None)
        n = len(self.nodes)
        self.base_reason = np.zeros(n, dtype=np.int8)
        for i, node in enumerate(self.nodes):
            if not node.ready:
                self.base_reason[i] = NOT_READY
        self._tainted = [i for i, node in enumerate(self.nodes) if node.taints or node.unschedulable]

    # ------------------------------------------------------------------ kept across cycles

    def set_node(self, row: int, node: Node) -> None:
        """Row `row` is `node` now (the same name, changed). Call `nodes_changed` after the last."""
        for resource in node.allocatable:
            if resource not in self.columns:
                self._add_column(resource)
        if self._shared:  # copy on write: the copies handed out keep what they were given
            self.nodes = list(self.nodes)
            self.allocatable = self.allocatable.copy()
            self._shared = False
        self.nodes[row] = node
        allocatable = self.allocatable[row]
        allocatable[:] = 0
        for resource, amount in node.allocatable.items():
            allocatable[self.columns[resource]] = amount

    def set_used(self, row: int, requests: Mapping[str, int]) -> None:
        """What the pods holding resources on the node of `row` request, in all."""
        for resource in requests:
            if resource not in self.columns:
                self._add_column(resource)
        used = self.used[row]
        used[:] = 0
        for resource, amount in requests.items():
            used[self.columns[resource]] = amount

    def for_cycle(self) -> Snapshot:
        """A copy for one cycle: its usage and columns its own (the engine places on it), the
        nodes, allocatable and everything derived from the nodes shared, read-only."""
        copy_ = copy.copy(self)
        copy_.columns = dict(self.columns)
        copy_.used = self.used.copy()
        self._shared = True
        return copy_

    # ------------------------------------------------------------------ resources

    @property
    def free(self) -> IntArray:
        return self.allocatable - self.used

    def vector(self, requests: dict[str, int]) -> IntArray:
        """A request as a row; a resource no node offers gets a zero column (so it never fits)."""
        for resource in requests:
            if resource not in self.columns:
                self._add_column(resource)
        row = np.zeros(len(self.columns), dtype=np.int64)
        for resource, amount in requests.items():
            row[self.columns[resource]] = amount
        return row

    def _add_column(self, resource: str) -> None:
        self.columns[resource] = len(self.columns)
        pad = np.zeros((len(self.nodes), 1), dtype=np.int64)
        self.allocatable = np.hstack([self.allocatable, pad])
        self.used = np.hstack([self.used, pad])

    def scale(self) -> IntArray:
        """Per resource column, the largest allocatable of any node (at least 1): pod sizes are
        measured against it. Cached per column count (only `vector` adds columns)."""
        cached: IntArray | None = self.__dict__.get("_scale")
        if cached is None or cached.shape[0] != self.allocatable.shape[1]:
            width = self.allocatable.shape[1]
            columns = [int(self.allocatable[:, j].max()) if len(self.nodes) else 1 for j in range(width)]
            cached = np.maximum(np.asarray(columns, dtype=np.int64), 1)
            self.__dict__["_scale"] = cached
        return cached

    def add_usage(self, node: int, request: IntArray) -> None:
        self.used[node, : request.shape[0]] += request

    def fork(self, gone: Sequence[Pod] = ()) -> Snapshot:
        """A copy to place groups on, leaving this one as it is, with the resources of `gone`
        (bound pods) free again. The per-node caches (labels, domains, eligibility) are
        shared: usage is all that differs, and the fork's own columns and usage are copies."""
        fork = copy.copy(self)
        fork.columns = dict(self.columns)
        fork.used = self.used.copy()
        for pod in gone:
            row = fork.index.get(pod.node_name)
            if row is not None:
                request = fork.vector(pod.requests)
                fork.used[row, : request.shape[0]] -= request
        return fork

    def resource_name(self, column: int) -> str:
        for name, col in self.columns.items():
            if col == column:
                return name
        raise KeyError(column)

    # ------------------------------------------------------------------ labels and domains

    def label_codes(self, key: str) -> tuple[npt.NDArray[np.int32], dict[str, int]]:
        """Per node, an integer code of the label's value (-1 when absent)."""
        cached = self._labels.get(key)
        if cached is None:
            values: dict[str, int] = {}
            codes = np.full(len(self.nodes), -1, dtype=np.int32)
            for i, node in enumerate(self.nodes):
                value = node.labels.get(key)
                if value is not None:
                    codes[i] = values.setdefault(value, len(values))
            cached = (codes, values)
            self._labels[key] = cached
        return cached

    def domains(self, keys: tuple[str, ...]) -> tuple[IntArray, list[tuple[str, ...]]]:
        """Domain id per node for the nested levels `keys` (outermost first); -1 if a label is missing.

        A domain is the full path of label values, so rack r1 of block b0 and rack r1 of block b1
        are different domains.
        """
        cached = self._domains.get(keys)
        if cached is not None:
            return cached
        n = len(self.nodes)
        combined = np.zeros(n, dtype=np.int64)
        missing = np.zeros(n, dtype=bool)
        for key in keys:
            codes, values = self.label_codes(key)
            missing |= codes < 0
            combined = combined * (len(values) + 1) + (codes.astype(np.int64) + 1)
        ids = np.full(n, -1, dtype=np.int64)
        present = ~missing
        paths: list[tuple[str, ...]] = []
        if present.any():
            uniq, inverse = np.unique(combined[present], return_inverse=True)
            ids[present] = inverse
            first = np.zeros(len(uniq), dtype=np.int64)
            positions = np.flatnonzero(present)
            first[inverse[::-1]] = positions[::-1]
            paths = [tuple(self.nodes[int(i)].labels[k] for k in keys) for i in first]
        cached = (ids, paths)
        self._domains[keys] = cached
        return cached

    # ------------------------------------------------------------------ eligibility

    def eligibility(self, placement: Placement) -> Eligibility:
        cached = self._eligibility.get(placement)
        if cached is None:
            cached = self._compute_eligibility(placement)
            self._eligibility[placement] = cached
        return cached

    def _compute_eligibility(self, placement: Placement) -> Eligibility:
        reason = self.base_reason.copy()
        taint_of: dict[int, Taint] = {}
        hard = list(placement.tolerations)
        for i in self._tainted:
            if reason[i] != OK:
                continue
            node = self.nodes[i]
            if node.unschedulable and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in hard):
                reason[i] = UNSCHEDULABLE
                continue
            for taint in node.taints:
                if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in hard):
                    reason[i] = TAINT
                    taint_of[i] = taint
                    break
        match = np.ones(len(self.nodes), dtype=bool)
        for key, value in placement.node_selector:
            codes, values = self.label_codes(key)
            code = values.get(value)
            match &= codes == code if code is not None else False
        if placement.affinity is not None:
            match &= self.terms_mask(placement.affinity)
        reason[(reason == OK) & ~match] = SELECTOR
        return Eligibility(mask=reason == OK, reason=reason, taint_of=taint_of)

    def terms_mask(self, terms: Sequence[SelectorTerm]) -> BoolArray:
        """Nodes matching any of the node selector terms (an empty term matches nothing)."""
        any_term = np.zeros(len(self.nodes), dtype=bool)
        for term in terms:
            if not term.expressions and not term.fields:
                continue
            term_match = np.ones(len(self.nodes), dtype=bool)
            for req in term.expressions:
                term_match &= self._requirement(req)
            for req in term.fields:
                term_match &= self._field_requirement(req)
            any_term |= term_match
        return any_term

    def _requirement(self, req: SelectorRequirement) -> BoolArray:
        codes, values = self.label_codes(req.key)
        if req.operator == "Exists":
            return codes >= 0
        if req.operator == "DoesNotExist":
            return codes < 0
        if req.operator in ("In", "NotIn"):
            wanted = [values[v] for v in req.values if v in values]
            inside = np.isin(codes, wanted) if wanted else np.zeros(len(codes), dtype=bool)
            return inside if req.operator == "In" else ~inside
        # Gt / Lt compare the label value as an integer; a non-integer value never matches.
        threshold = int(req.values[0])
        out = np.zeros(len(codes), dtype=bool)
        for value, code in values.items():
            try:
                number = int(value)
            except ValueError:
                continue
            if (number > threshold) if req.operator == "Gt" else (number < threshold):
                out |= codes == code
        return out

    def _field_requirement(self, req: SelectorRequirement) -> BoolArray:
        if req.key != "metadata.name":
            return np.zeros(len(self.nodes), dtype=bool)
        names = np.array([node.name for node in self.nodes], dtype=object)
        inside = np.isin(names, list(req.values))
        if req.operator == "In":
            return inside
        if req.operator == "NotIn":
            return ~inside
        return np.zeros(len(self.nodes), dtype=bool)


def fit_counts(free: IntArray, request: IntArray, mask: BoolArray | None = None) -> IntArray:
    """How many pods of `request` fit on each row of `free` (0 where masked out)."""
    width = min(free.shape[1], request.shape[0])
    if request.shape[0] > width and (request[width:] > 0).any():
        return np.zeros(free.shape[0], dtype=np.int64)
    nonzero = np.flatnonzero(request[:width] > 0)
    if nonzero.size == 0:
        counts = np.full(free.shape[0], 1 << 30, dtype=np.int64)
    else:
        # Column by column on a transposed copy, dividing by a scalar: about 4x faster than
        # one (n, k) floor-division and a row-wise min, which numpy does element by element.
        columns = np.ascontiguousarray(free[:, nonzero].T)
        counts = columns[0] // int(request[nonzero[0]])
        for k in range(1, nonzero.size):
            np.minimum(counts, columns[k] // int(request[nonzero[k]]), out=counts)
        np.maximum(counts, 0, out=counts)
    if mask is not None:
        counts *= mask
    return counts
