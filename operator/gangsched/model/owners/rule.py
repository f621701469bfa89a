"""What every owner rule shares: the `Owner` view, the `OwnerRule` a kind plugs in, the lookup
the rules read the chain through, and the field readers the rules' counts use.

An `OwnerRule` is one kind of workload whose objects make an automatic gang (KAI-Scheduler's
pod grouper has one plugin per kind; so does this): where the kind is served, how its spec's
counts are read (`counts`), what minCount they give (`min_count`), which group of a set a pod
belongs to when one object makes several gangs (`group_index`), and when the kind refuses a
gang it cannot form (`refusal`). The kinds are in `owners.table`; each rule in a module of
its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gangsched.model.common import ModelError, OwnerRef

# Walks stop here: no controller chain is this deep, and a cycle (impossible in a real
# cluster; ownerReferences could still be written so) cannot loop.
MAX_CHAIN = 16


class OwnerNotKnownError(LookupError):
    """A count needs an object the lookup does not hold yet (a TrainJob's JobSet)."""


@dataclass(frozen=True, slots=True)
class Owner:
    """Any object a pod's controller chain passes through, as read from the API: its
    identity, metadata, its own controller, and (for a kind of the table) the counts its
    rule reads (None for other kinds, and for a rule that counts through another object)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    controller: OwnerRef | None = None
    counts: Any = None
    # The rule of its kind (None: a link the chain passes through, or a kind of no rule).
    rule: OwnerRule | None = None

    @property
    def ref(self) -> OwnerRef:
        """A controller reference to this object (what the PodGroup carries)."""
        return OwnerRef(self.api_version, self.kind, self.name, self.uid, controller=True)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Waiting:
    """The pod waits (never bound alone): `reason` says why. `warn` is the owner to put a
    Warning Event on (an invalid annotation names it there), None while the pod only waits
    for the cache to know a link of its chain."""

    reason: str
    warn: OwnerRef | None = None
    # Why the owner is warned: an invalid annotation, or a PodGroup of the gang's name that
    # gangsched did not create (EventReason values).
    problem: str = ""
    # The link of the chain the lookup does not hold, when that is why the pod waits.
    missing: OwnerRef | None = None


@runtime_checkable
class OwnerLookup(Protocol):
    """What the rules need of the cache: an owner by UID, and the owners a UID controls."""

    def get(self, uid: str) -> Owner | None: ...

    def controlled_by(self, uid: str) -> Iterable[Owner]: ...


class OwnerIndex:
    """An `OwnerLookup` over a collection of owners (tests, `simulate`; the cache keeps its own)."""

    def __init__(self, owners: Iterable[Owner] = ()) -> None:
        self._by_uid: dict[str, Owner] = {}
        # controller UID -> the owners it controls, by UID (in the order they came)
        self._children: dict[str, dict[str, Owner]] = {}
        for owner in owners:
            self.add(owner)

    def add(self, owner: Owner) -> None:
        self._by_uid[owner.uid] = owner
        if owner.controller is not None:
            self._children.setdefault(owner.controller.uid, {})[owner.uid] = owner

    def remove(self, owner: Owner) -> None:
        self._by_uid.pop(owner.uid, None)
        if owner.controller is not None:
            children = self._children.get(owner.controller.uid)
            if children is not None:
                children.pop(owner.uid, None)
                if not children:
                    del self._children[owner.controller.uid]

    def get(self, uid: str) -> Owner | None:
        return self._by_uid.get(uid)

    def controlled_by(self, uid: str) -> Iterable[Owner]:
        return tuple(self._children.get(uid, {}).values())

    def owners(self) -> Iterable[Owner]:
        """Every owner held."""
        return self._by_uid.values()


def as_lookup(owners: OwnerLookup | Mapping[str, Owner] | Iterable[Owner]) -> OwnerLookup:
    if isinstance(owners, Mapping):
        return OwnerIndex(owners.values())
    if isinstance(owners, OwnerLookup):
        return owners
    return OwnerIndex(owners)


class OwnerRule:
    """One kind of workload that makes an automatic gang (module doc). A rule says None for a
    count below 1 or a workload that is no gang (a work-queue Job)."""

    # Links a chain passes through on its way to this kind ((apiVersion, kind) -> the pod
    # labels that say a pod's chain does), read as owners too (a LeaderWorkerSet's
    # StatefulSets and leader pod).
    links: Mapping[tuple[str, str], tuple[str, ...]] = {}

    def __init__(self, api_version: str, kind: str, plural: str) -> None:
        self.api_version = api_version  # the version read (and watched)
        self.kind = kind
        self.plural = plural

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def __repr__(self) -> str:
        return f"OwnerRule({self.api_version} {self.kind})"

    def counts(self, spec: Mapping[str, Any]) -> Any:
        """What `min_count` reads of the spec; ModelError (naming the field) when malformed."""
        return None

    def min_count(self, owner: Owner, lookup: OwnerLookup) -> int | None:
        """The gang's size the kind's controller implies, the annotations aside;
        OwnerNotKnownError when it needs an object the lookup does not hold yet."""
        raise NotImplementedError

    def group_index(self, pod_labels: Mapping[str, str]) -> str | None:
        """Which of the object's gangs a pod is in, for a kind that makes several (a
        LeaderWorkerSet: one per group); None for a kind that makes one. ModelError when a
        pod of such a kind does not say."""
        return None

    def refusal(self, owner: Owner, count: int) -> str | None:
        """Why a gang of `count` pods could never form for this owner (said, never guessed),
        or None."""
        return None


# --------------------------------------------------------------------------- field readers


def optional_int(value: Any, where: str, *, default: int | None = None, minimum: int = 0) -> int | None:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ModelError(f"{where} must be an integer, not {value!r}")
    if value < minimum:
        raise ModelError(f"{where} must be at least {minimum}, not {value}")
    return value


def required_int(value: Any, where: str, *, default: int, minimum: int = 0) -> int:
    parsed = optional_int(value, where, default=default, minimum=minimum)
    assert parsed is not None
    return parsed


def one_of(value: Any, where: str, allowed: tuple[str, ...]) -> str:
    """An optional enum field: the first of `allowed` when unset (the API's default)."""
    if value is None or value == "":
        return allowed[0]
    if value not in allowed:
        choices = " or ".join(repr(a) for a in allowed)
        raise ModelError(f"{where}: unknown value {value!r}, must be {choices}")
    return str(value)
