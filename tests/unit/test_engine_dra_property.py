"""DRA placement against a brute force on small device inventories (hypothesis).

**Generated.** 1-3 nodes, cpu large or tight (1-3 cpus for pods of 1). Each node publishes one
node-local ResourceSlice of 0-5 devices of driver gpu.example.com (attributes: model H100 or
A100, `resource.kubernetes.io/pcieRoot` pci0/pci1 or missing; sometimes a taint NoSchedule,
NoExecute or None, with or without a value); sometimes the node is partitionable instead: a
counter-only slice (counter sets cs0 {mem[, sm]} [and cs1 {mem}]) beside the device slice,
pool resourceSliceCount 2, devices consuming from one or both sets. Some devices are held by an
existing allocated claim (never over the counters). Classes: gpu.example.com (the driver) and
h100.example.com (driver and model H100). One gang of 1-3 pods (PodGroup minCount = its pods),
sometimes a second, later one; each pod has one claim from its gang's template: 1-2 requests of
count 1-2, an optional model selector and toleration each, optionally matchAttribute pcieRoot
over all requests, sometimes one request a firstAvailable of two alternatives.

**Properties** (`check`), gang by gang in queue order:

1. No device twice, in the cycle or against the existing claims' devices.
2. No counter over its sharedCounters value (existing plus new allocations, per pool).
3. No device tainted NoSchedule/NoExecute without a toleration of its request.
4. All or nothing: a placed gang has every pod assigned, each pod's claim allocated on its
   node with the right request names, counts, classes, selectors, matchAttribute values and
   nodeSelector, and `devices` saying the same; an unplaced gang has no assignments,
   allocations or devices.
5. Complete: the brute force (`first_fit`) enumerates how many pods go on each node and, per
   node, the devices of every pod's requests. When it finds a placement, the engine places
   the gang, and with the first firstAvailable alternative that fits the whole gang (the
   documented rule: `engine.group`, `engine.dra.claims`). A later gang is checked against
   what the earlier one took.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from gangsched.engine import CycleResult, DraObjects, GroupDecision, schedule_cycle
from gangsched.engine.types import PodDevice
from gangsched.model import Node, Pod, PodGroup
from gangsched_testing import dra
from gangsched_testing.builders import node, pod_group
from gangsched_testing.properties import examples

NS = "ml"
DRIVER = dra.GPU_DRIVER
GPU_CLASS = DRIVER
H100_CLASS = "h100.example.com"
MODEL = f'device.attributes["{DRIVER}"].model'
ECC = "gpu.example.com/ecc"
HOT = "gpu.example.com/hot"
CLAIM = "gpu"  # the pods' spec.resourceClaims entry

Device = tuple[str, str]  # pool (= node), device
Usage = tuple[str, str]  # counter set, counter


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def manifest(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value

    def manifest(self) -> dict[str, str]:
        out = {"operator": self.operator}
        for field_name, value in (("key", self.key), ("value", self.value), ("effect", self.effect)):
            if value:
                out[field_name] = value
        return out


@dataclass(frozen=True, slots=True)
class Dev:
    name: str
    model: str
    root: str | None
    taints: tuple[Taint, ...] = ()
    consumes: tuple[tuple[str, str, int], ...] = ()  # (counter set, counter, amount)

    def manifest(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"model": self.model}
        if self.root is not None:
            attrs[dra.PCIE_ROOT] = self.root
        consumes: dict[str, dict[str, str]] = {}
        for counter_set, counter, amount in self.consumes:
            consumes.setdefault(counter_set, {})[counter] = str(amount)
        return dra.device(
            self.name, attrs, taints=[t.manifest() for t in self.taints], consumes=consumes or None
        )


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu: int
    devices: tuple[Dev, ...]
    counters: tuple[tuple[str, str, int], ...] = ()  # sharedCounters (set, counter, value); () plain
    held: tuple[str, ...] = ()  # devices an existing claim holds

    def device(self, name: str) -> Dev | None:
        return next((d for d in self.devices if d.name == name), None)

    def shared(self) -> Counter[Usage]:
        return Counter({(s, c): v for s, c, v in self.counters})


@dataclass(frozen=True, slots=True)
class Alt:
    """An `exactly` request, or one alternative of a firstAvailable request."""

    name: str
    device_class: str
    model: str | None
    count: int
    tolerations: tuple[Toleration, ...]

    def selects(self, dev: Dev) -> bool:
        if self.device_class == H100_CLASS and dev.model != "H100":
            return False
        return self.model is None or dev.model == self.model

    def blocked(self, dev: Dev) -> bool:
        return any(
            t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in self.tolerations)
            for t in dev.taints
        )

    def manifest(self) -> dict[str, Any]:
        return dra.request(
            self.name,
            self.device_class,
            count=self.count,
            selectors=[f'{MODEL} == "{self.model}"'] if self.model else (),
            tolerations=[t.manifest() for t in self.tolerations],
        )


@dataclass(frozen=True, slots=True)
class Req:
    name: str
    alternatives: tuple[Alt, ...]  # one: `exactly`; more: firstAvailable

    @property
    def first_available(self) -> bool:
        return len(self.alternatives) > 1

    def manifest(self) -> dict[str, Any]:
        if self.first_available:
            return dra.first_available(self.name, *(a.manifest() for a in self.alternatives))
        only = self.alternatives[0]
        return Alt(self.name, only.device_class, only.model, only.count, only.tolerations).manifest()


@dataclass(frozen=True, slots=True)
class Gang:
    name: str
    pods: int
    cpu: int
    requests: tuple[Req, ...]  # at most one firstAvailable
    match: bool
    created: str

    @property
    def variants(self) -> int:
        return max(len(r.alternatives) for r in self.requests)

    def needs(self, variant: int) -> list[tuple[str, Alt]]:
        """(result request name, what it asks) per request, with `variant`'s alternative."""
        out = []
        for r in self.requests:
            if r.first_available:
                alt = r.alternatives[variant]
                out.append((f"{r.name}/{alt.name}", alt))
            else:
                out.append((r.name, r.alternatives[0]))
        return out

    def pod_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.pods)]


@dataclass(frozen=True, slots=True)
class Case:
    nodes: tuple[NodeSpec, ...]
    gangs: tuple[Gang, ...]  # in queue order (created)

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)


# --------------------------------------------------------------------------- strategies

TAINTS = [
    Taint(k, v, e) for k in (ECC, HOT) for v in ("", "bad") for e in ("NoSchedule", "NoExecute", "None")
]
TOLERATIONS: list[tuple[Toleration, ...]] = [
    (Toleration(ECC, "Exists"),),
    (Toleration(ECC, "Equal", "bad"),),
    (Toleration(ECC, "Exists", effect="NoExecute"),),
    (Toleration("", "Exists"),),
    (Toleration(ECC, "Exists"), Toleration(HOT, "Exists", effect="NoSchedule")),
]


@st.composite
def node_specs(draw: st.DrawFn, name: str, tight: bool) -> NodeSpec:
    cpu = draw(st.integers(1, 3)) if tight else 64
    counters: list[tuple[str, str, int]] = []
    if draw(st.integers(0, 3)) == 0:
        counters.append(("cs0", "mem", draw(st.integers(1, 4))))
        if draw(st.booleans()):
            counters.append(("cs0", "sm", draw(st.integers(1, 3))))
        if draw(st.booleans()):
            counters.append(("cs1", "mem", draw(st.integers(1, 4))))
    sets = sorted({s for s, _, _ in counters})
    devices = []
    for j in range(draw(st.sampled_from([0, 1, 2, 3, 4, 5, 3, 4, 5, 4, 5, 5]))):
        taints: tuple[Taint, ...] = ()
        if draw(st.integers(0, 4)) == 0:
            taints = (draw(st.sampled_from(TAINTS)),)
        consumes: list[tuple[str, str, int]] = []
        if counters and draw(st.integers(0, 4)) > 0:
            for counter_set in draw(st.lists(st.sampled_from(sets), min_size=1, max_size=2, unique=True)):
                names = [c for s, c, _ in counters if s == counter_set]
                for k, counter in enumerate(names):
                    if k == 0 or draw(st.booleans()):
                        consumes.append((counter_set, counter, draw(st.integers(1, 3))))
        devices.append(
            Dev(
                f"d{j}",
                draw(st.sampled_from(["H100", "A100"])),
                draw(st.sampled_from(["pci0", "pci1", "pci0", "pci1", None])),
                taints,
                tuple(consumes),
            )
        )
    # Devices held by an existing claim, never beyond the counters.
    held: list[str] = []
    left = Counter({(s, c): v for s, c, v in counters})
    for dev in devices:
        if draw(st.integers(0, 3)) == 0 and all(left[(s, c)] >= v for s, c, v in dev.consumes):
            for s, c, v in dev.consumes:
                left[(s, c)] -= v
            held.append(dev.name)
    return NodeSpec(name, cpu, tuple(devices), tuple(counters), tuple(held))


@st.composite
def alts(draw: st.DrawFn, name: str) -> Alt:
    tolerations: tuple[Toleration, ...] = ()
    if draw(st.integers(0, 1)) == 0:
        tolerations = draw(st.sampled_from(TOLERATIONS))
    return Alt(
        name,
        draw(st.sampled_from([GPU_CLASS, GPU_CLASS, GPU_CLASS, H100_CLASS])),
        draw(st.sampled_from([None, None, None, "H100", "A100"])),
        draw(st.sampled_from([1, 1, 2])),
        tolerations,
    )


@st.composite
def gangs(draw: st.DrawFn, name: str, created: str, tight: bool, first_available: bool | None) -> Gang:
    count = draw(st.sampled_from([1, 2, 1]))
    if first_available is None:
        fa_at = draw(st.sampled_from([None, None, None, *range(count)]))
    else:
        fa_at = draw(st.integers(0, count - 1)) if first_available else None
    requests = []
    for j in range(count):
        if j == fa_at:
            requests.append(Req(f"r{j}", (draw(alts("a0")), draw(alts("a1")))))
        else:
            requests.append(Req(f"r{j}", (draw(alts(f"r{j}")),)))
    return Gang(
        name=name,
        pods=draw(st.integers(1, 3)),
        cpu=1,
        requests=tuple(requests),
        match=draw(st.integers(0, 2)) == 0,
        created=created,
    )


@st.composite
def cases(draw: st.DrawFn, *, groups: int = 1, first_available: bool | None = None) -> Case:
    tight = draw(st.integers(0, 3)) == 0
    nodes = tuple(draw(node_specs(f"n{i}", tight)) for i in range(draw(st.integers(1, 3))))
    made = tuple(
        draw(gangs(f"g{k}", f"2025-0{k + 1}-01T00:00:00Z", tight, first_available)) for k in range(groups)
    )
    return Case(nodes, made)


# --------------------------------------------------------------------------- the cluster


def cluster(case: Case) -> tuple[list[Node], list[Pod], list[PodGroup], DraObjects]:
    objects: list[dict[str, Any]] = [
        dra.gpu_class(),
        dra.device_class(H100_CLASS, f'device.driver == "{DRIVER}" && {MODEL} == "H100"'),
    ]
    for n in case.nodes:
        devices = [d.manifest() for d in n.devices]
        if n.counters:
            counters: dict[str, dict[str, str]] = {}
            for counter_set, counter, value in n.counters:
                counters.setdefault(counter_set, {})[counter] = str(value)
            objects.append(dra.node_slice(n.name, counters=counters, slice_count=2))
            objects.append(dra.node_slice(n.name, devices, slice_count=2))
        else:
            objects.append(dra.node_slice(n.name, devices))
        if n.held:
            objects.append(
                dra.claim(
                    "other",
                    f"held-{n.name}",
                    dra.request("gpu", count=len(n.held)),
                    allocated=[("gpu", DRIVER, n.name, d) for d in n.held],
                    node=n.name,
                )
            )
    pods: list[Pod] = []
    groups: list[PodGroup] = []
    for g in case.gangs:
        constraints = [dra.match_attribute()] if g.match else []
        objects.append(
            dra.claim_template(NS, g.name, *(r.manifest() for r in g.requests), constraints=constraints)
        )
        pods += dra.claim_pods(g.name, g.pods, g.name, {CLAIM: f"template:{g.name}"}, cpu=str(g.cpu))
        groups.append(pod_group(g.name, g.pods, created=g.created))
    nodes = [node(n.name, gpu=0, cpu=str(n.cpu)) for n in case.nodes]
    return nodes, pods, groups, dra.dra_objects(objects, pods)


# --------------------------------------------------------------------------- the brute force


class World:
    """What is taken so far: devices in use and cpu per node (existing claims, earlier gangs)."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.in_use: set[Device] = {(n.name, d) for n in case.nodes for d in n.held}
        self.cpu: Counter[str] = Counter()

    def consumed(self, n: NodeSpec) -> Counter[Usage]:
        out: Counter[Usage] = Counter()
        for dev in n.devices:
            if (n.name, dev.name) in self.in_use:
                for s, c, v in dev.consumes:
                    out[(s, c)] += v
        return out


Witness = dict[str, list[dict[str, list[str]]]]  # node -> per pod: result request -> devices


def node_serves(
    world: World, n: NodeSpec, pods: int, needs: Sequence[tuple[str, Alt]], match: bool
) -> Witness:
    """Devices for `pods` pods on `n` (per pod: request -> device names), or {} when none."""
    free = [d for d in n.devices if (n.name, d.name) not in world.in_use]
    left = n.shared()
    left.subtract(world.consumed(n))
    candidates = [
        [i for i, d in enumerate(free) if alt.selects(d) and not alt.blocked(d)] for _, alt in needs
    ]
    slots = [(p, j) for p in range(pods) for j, (_, alt) in enumerate(needs) for _ in range(alt.count)]
    chosen: list[int] = []

    def search(s: int, used: frozenset[int], consumed: Counter[Usage], roots: tuple[str | None, ...]) -> bool:
        if s == len(slots):
            return True
        p, j = slots[s]
        after = chosen[-1] if s > 0 and slots[s - 1] == (p, j) else -1  # combinations, not permutations
        for i in candidates[j]:
            if i <= after or i in used:
                continue
            dev = free[i]
            if match and (dev.root is None or roots[p] not in (None, dev.root)):
                continue
            more = consumed.copy()
            for sc, c, v in dev.consumes:
                more[(sc, c)] += v
            if any(more[k] > left[k] for k in more):
                continue
            chosen.append(i)
            if search(s + 1, used | {i}, more, (*roots[:p], dev.root, *roots[p + 1 :])):
                return True
            chosen.pop()
        return False

    if not search(0, frozenset(), Counter(), (None,) * pods):
        return {}
    out: list[dict[str, list[str]]] = [{} for _ in range(pods)]
    for (p, j), i in zip(slots, chosen, strict=True):
        out[p].setdefault(needs[j][0], []).append(free[i].name)
    return {n.name: out}


def splits(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    if parts == 1:
        yield (total,)
        return
    for first in range(total, -1, -1):
        for rest in splits(total - first, parts - 1):
            yield (first, *rest)


def gang_fits(world: World, gang: Gang, variant: int) -> Witness | None:
    """A placement of the whole gang with `variant`'s alternative, or None."""
    needs = gang.needs(variant)
    memo: dict[tuple[str, int], Witness] = {}
    for split in splits(gang.pods, len(world.case.nodes)):
        witness: Witness = {}
        for n, k in zip(world.case.nodes, split, strict=True):
            if k == 0:
                continue
            if world.cpu[n.name] + k * gang.cpu > n.cpu:
                break
            if (n.name, k) not in memo:
                memo[(n.name, k)] = node_serves(world, n, k, needs, gang.match)
            if not memo[(n.name, k)]:
                break
            witness.update(memo[(n.name, k)])
        else:
            return witness
    return None


def first_fit(world: World, gang: Gang) -> tuple[int, Witness] | None:
    """The first alternative with which the whole gang fits, and a placement."""
    for variant in range(gang.variants):
        witness = gang_fits(world, gang, variant)
        if witness is not None:
            return variant, witness
    return None


# --------------------------------------------------------------------------- the properties


def selector_of(node_name: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }


def check_placed(case: Case, world: World, gang: Gang, d: GroupDecision) -> int:
    """Properties 1, 3 and 4 for a placed gang; the alternative it used. Commits to `world`."""
    pods = gang.pod_names()
    assert set(d.assignments) == {(NS, p) for p in pods}, (
        f"{gang.name}: not every pod placed: {d.assignments}"
    )
    assert set(d.allocations) == {(NS, f"{p}-{CLAIM}") for p in pods}, f"{gang.name}: {sorted(d.allocations)}"
    used: set[int] = set()
    for p in pods:
        node_name = d.assignments[(NS, p)]
        n = case.node(node_name)
        allocation = d.allocations[(NS, f"{p}-{CLAIM}")]
        assert allocation.node_selector == selector_of(node_name), f"{p}: {allocation.node_selector}"
        got: dict[str, list[Dev]] = {}
        for r in allocation.devices:
            where = f"{p} on {node_name}: device {r.pool}/{r.device} (request {r.request})"
            assert (r.driver, r.pool) == (DRIVER, node_name), f"{where}: not on the pod's node"
            assert not r.admin_access, where
            dev = n.device(r.device)
            assert dev is not None, f"{where}: no such device"
            assert (r.pool, r.device) not in world.in_use, (
                f"{where}: already taken ({'an existing claim' if r.device in n.held else 'this cycle'})"
            )
            world.in_use.add((r.pool, r.device))
            got.setdefault(r.request, []).append(dev)
        variant = next((v for v in range(gang.variants) if {q for q, _ in gang.needs(v)} == set(got)), None)
        assert variant is not None, f"{p}: requests {sorted(got)} are those of no alternative"
        used.add(variant)
        for request, alt in gang.needs(variant):
            devs = got[request]
            assert len(devs) == alt.count, f"{p}: request {request}: {len(devs)} devices for {alt.count}"
            for dev in devs:
                assert alt.selects(dev), f"{p}: request {request} ({alt}) got {dev}"
                assert not alt.blocked(dev), f"{p}: request {request} got tainted {dev} without toleration"
        if gang.match:
            roots = {dev.root for devs in got.values() for dev in devs}
            assert len(roots) == 1, f"{p}: matchAttribute pcieRoot, got roots {roots}"
            assert None not in roots, f"{p}: matchAttribute pcieRoot, got a device without it"
        expected = sorted(
            (PodDevice(CLAIM, r.request, r.driver, r.pool, r.device) for r in allocation.devices),
            key=lambda x: (x.request, x.device),
        )
        assert sorted(d.devices[(NS, p)], key=lambda x: (x.request, x.device)) == expected
        world.cpu[node_name] += gang.cpu
    assert len(used) == 1, f"{gang.name}: pods use different alternatives {used}"
    for name in world.cpu:
        assert world.cpu[name] <= case.node(name).cpu, f"{name}: cpu over capacity"
    return used.pop()


def check(case: Case, result: CycleResult) -> None:
    world = World(case)
    decisions = {d.name: d for d in result.decisions}
    outcomes = []
    for gang in case.gangs:
        d = decisions[gang.name]
        expected = first_fit(world, gang)
        if not d.scheduled:
            assert (d.assignments, d.allocations, d.devices) == ({}, {}, {}), f"{gang.name}: partial gang"
            assert expected is None, (
                f"{gang.name}: engine says {d.message!r}, but it fits with alternative {expected[0]}: "
                f"{expected[1]}"
            )
            outcomes.append("unplaced")
            continue
        variant = check_placed(case, world, gang, d)
        assert expected is not None, f"{gang.name}: the brute force finds no placement; engine: {d.message}"
        assert variant == expected[0], (
            f"{gang.name}: engine used alternative {variant}, but alternative {expected[0]} fits the whole "
            f"gang: {expected[1]}; engine: {d.message}"
        )
        outcomes.append("placed" if gang.variants == 1 else f"placed with alternative {variant}")
    # Property 2: counters, existing and new allocations together.
    for n in case.nodes:
        if n.counters:
            consumed = world.consumed(n)
            shared = n.shared()
            assert all(consumed[k] <= shared[k] for k in consumed), f"{n.name}: {consumed} > {shared}"
    event(", ".join(outcomes))


def describe(case: Case) -> str:
    lines = []
    for n in case.nodes:
        lines.append(f"node {n.name} cpu={n.cpu} counters={n.counters} held={n.held}")
        lines.extend(f"    {d}" for d in n.devices)
    lines.extend(f"gang {g}" for g in case.gangs)
    return "\n".join(lines)


def run(case: Case) -> None:
    note(describe(case))
    nodes, pods, groups, objects = cluster(case)
    result = schedule_cycle(nodes=nodes, pods=pods, pod_groups=groups, dra=objects)
    for d in result.decisions:
        note(f"{d.name}: {d.message}")
    check(case, result)


PROPERTY = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(cases())
def test_one_gang_against_brute_force(case: Case) -> None:
    run(case)


@PROPERTY
@given(cases(first_available=True))
def test_first_available_against_brute_force(case: Case) -> None:
    run(case)


@PROPERTY
@given(cases(groups=2))
def test_two_gangs_against_brute_force(case: Case) -> None:
    run(case)
