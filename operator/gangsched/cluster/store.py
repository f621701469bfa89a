"""One store for every watched kind, fed as client-go's reflector feeds its Indexer.

Every kind (Pods, Nodes, PodGroups of both APIs, PriorityClasses, PodDisruptionBudgets, the
DRA kinds) is one `Kind`: how to parse a body into the model's view, and what of that view can
change a decision. The store holds, per kind and key, the parsed object, the resourceVersion it
was held at and why a body could not be parsed; it is changed in three ways only:

- `apply(kind, event_type, body)`: one watch event or read (DELETED removes);
- `remove(kind, key)`: the object is gone (a live read said 404, a LIST no longer holds it);
- `replace(kind, items, rv)`: the kind is exactly `items` as of a LIST at `rv`: what else is
  held at a version no newer than `rv` vanished (an object created after the LIST is newer,
  and its ADDED event is on its way). A LIST read page by page is the same in three steps
  (`list_start`, `list_page` per page, `list_end`), so no LIST is ever held whole.

An object older than the one held (a late LIST, a stale event) is ignored, so nothing rolls
the store back. Each change is returned as a `Change` so the cache can keep its indexes (a
group's members, which PodGroup of a name is scheduled) without a second copy of the rules.

A `Kind` also carries what client-go's ListWatch carries (its API group, versions, plural,
selector) and when it is watched (always, or where discovery finds it served), what it is for
(`Role`: which decisions read it) and the RBAC verbs gangsched uses on it, so the watches, the
look-only commands' LIST, the RBAC table and `simulate`'s loader are all driven by the one
table of kinds (`cluster.kinds.KINDS`).

Currency (client-go's `HasSynced`, made strict): a kind the runtime `expect`s is stale until
its first LIST is in, and again from the moment its watch ends (`lost`) until it is shown to
be current: by a LIST, or (`resumed`) by a watch resumed right after the server ended the last
one on time. While a kind is stale the loop decides nothing that reads it (`stale`, by `Role`;
docs/architecture.md "Never deciding on a stale view").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Generic, TypeVar

from gangsched.cluster.versions import parse_rv
from gangsched.model import Key, ModelError, PriorityClasses

Body = Mapping[str, Any]
T = TypeVar("T")


def key_of(body: Body, *, namespaced: bool = True) -> Key:
    """(namespace, name); namespace "" for cluster-scoped kinds, "default" when a namespaced
    body names none (as the API would default it)."""
    meta = body.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default") if namespaced else ""
    return (namespace, str(meta.get("name") or ""))


def _same(view: object) -> object:
    return view


class Role(StrEnum):
    """What a kind is for, which says which decisions wait while it is stale."""

    # Pods, Nodes, PriorityClasses: every decision reads them.
    CLUSTER = "cluster"
    # PodGroups of either API: decisions of groups, repairs, gang formation.
    POD_GROUPS = "pod groups"
    # PodDisruptionBudgets: only the choice of preemption victims.
    BUDGETS = "budgets"
    # The DRA kinds: decisions of groups whose pods or PodGroup have claims.
    DEVICES = "devices"
    # Workload owners and the links of their chains: automatic gangs' formation.
    OWNERS = "owners"


class Served(Enum):
    """When a kind is watched."""

    ALWAYS = "always"  # every cluster serves it (the core kinds)
    DISCOVERED = "discovered"  # where discovery finds one of its versions served (CRDs, betas)


@dataclass(frozen=True, slots=True, eq=False)
class Kind(Generic[T]):
    """One kind of the table: how it is read from the API, how a body is parsed, what counts.

    `name` is its collection ("pods", "podgroups.scheduling.k8s.io", ...), as informers, health
    and /debug/cache call it; `group`, `versions` (newest first: the first one served is used)
    and `plural` say where it is served, `api_kind` what its objects' `kind` is."""

    name: str
    parse: Callable[[Body, PriorityClasses], T]
    group: str = ""
    versions: tuple[str, ...] = ("v1",)
    plural: str = ""
    api_kind: str = ""
    role: Role = Role.CLUSTER
    served: Served = Served.ALWAYS
    # The watch's selectors (the LIST and the watch both use them).
    query: Mapping[str, str] = field(default_factory=dict)
    # Watched by the operator (False: read from files by `simulate`, and GET when needed).
    watched: bool = True
    # A look-only command (`explain`, `top`, with the user's credentials) that may not list
    # it goes on without it (a 403 is no error).
    optional: bool = False
    # RBAC: the verbs gangsched uses on the collection and on its subresources, and when.
    verbs: tuple[str, ...] = ("list", "watch")
    subresources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    when: str = "always"
    namespaced: bool = True
    # What of an object can change a decision: equal views are no change to react to
    # (node heartbeats, pod status conditions, the echo of our own status write).
    view: Callable[[T], object] = _same
    # On an equal view keep the object held: caches downstream are keyed by it (device tables).
    keep_equal: bool = False
    # A projection of the body kept to parse it again when what parsing reads changes
    # (a PodGroup's priority after a PriorityClass event), and to read its last status.
    keep_body: Callable[[Body], Body] | None = None
    # Errors a body of this kind can raise besides ModelError (reported, never raised).
    errors: tuple[type[Exception], ...] = ()
    # A digest of what `parse` reads of a body except what `refresh` reads again (a pod's
    # spec and metadata, not its status): an event whose digest is the one held is handed to
    # `refresh(held object, body)` instead of a full parse. None: the digest cannot be taken.
    digest: Callable[[Body], int | None] | None = None
    refresh: Callable[[T, Body], T] | None = None

    def api_version(self, version: str | None = None) -> str:
        """`v1`, `batch/v1`: the apiVersion of `version` (default: the newest)."""
        version = version or self.versions[0]
        return f"{self.group}/{version}" if self.group else version

    def path(self, version: str | None = None) -> str:
        """The cluster-wide collection URL at `version` (default: the newest)."""
        prefix = "/apis" if self.group else "/api"
        return f"{prefix}/{self.api_version(version)}/{self.plural}"


@dataclass(frozen=True, slots=True)
class Stale:
    """Why a kind cannot be trusted now, and since when (the store's clock)."""

    since: float
    why: str


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    """What one call did to one key: `old` -> `new` (None: absent, or not parseable)."""

    key: Key
    old: T | None
    new: T | None
    # The view changed (or the object came or went): a change a decision can depend on.
    significant: bool


class _Table(Generic[T]):
    __slots__ = ("bodies", "digests", "invalid", "objects", "versions")

    def __init__(self) -> None:
        self.objects: dict[Key, T] = {}
        self.versions: dict[Key, str] = {}  # held per key, valid or not
        self.invalid: dict[Key, str] = {}
        self.bodies: dict[Key, Body] = {}
        self.digests: dict[Key, int] = {}  # of the body each object was parsed from (`Kind.digest`)


def _older(incoming: str, held: str) -> bool:
    new, old = parse_rv(incoming), parse_rv(held)
    return new is not None and old is not None and new < old


def _not_newer(held: str, list_rv: str) -> bool:
    version, listed = parse_rv(held), parse_rv(list_rv)
    return version is None or listed is None or version <= listed


class Store:
    """Parsed objects of every kind, the version held of each, and what could not be read."""

    def __init__(
        self, *, priorities: PriorityClasses | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.priorities = priorities if priorities is not None else PriorityClasses()
        self.clock = clock
        self._tables: dict[str, _Table[Any]] = {}
        # Highest resourceVersion seen per kind (our writes are compared with it, KEP-5647).
        self.observed_rv: dict[str, int] = {}
        # Kinds that cannot be trusted now (module doc), by name.
        self._stale: dict[str, Stale] = {}
        # Per kind, the keys the pages of a LIST in progress held (`list_page`).
        self._listing: dict[str, set[Key]] = {}

    def _table(self, kind: Kind[T]) -> _Table[T]:
        table = self._tables.get(kind.name)
        if table is None:
            table = self._tables[kind.name] = _Table()
        return table

    # ------------------------------------------------------------------ changing

    def apply(self, kind: Kind[T], event_type: str | None, body: Body) -> Change[T] | None:
        """One event or read object; None when it changed nothing held (stale, or unchanged)."""
        key = key_of(body, namespaced=kind.namespaced)
        version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        rv = parse_rv(version)
        if rv is not None and rv > self.observed_rv.get(kind.name, 0):
            self.observed_rv[kind.name] = rv
        if event_type == "DELETED":
            return self.remove(kind, key)
        table = self._table(kind)
        if _older(version, table.versions.get(key, "")):
            return None  # a late LIST or event: the store already knows better
        table.versions[key] = version
        if kind.keep_body is not None:
            table.bodies[key] = kind.keep_body(body)
        return self._parse(kind, table, key, body)

    def _parse(self, kind: Kind[T], table: _Table[T], key: Key, body: Body) -> Change[T]:
        old = table.objects.get(key)
        errors: tuple[type[Exception], ...] = (ModelError, *kind.errors)
        digest = kind.digest(body) if kind.digest is not None else None
        try:
            if digest is not None and old is not None and table.digests.get(key) == digest:
                assert kind.refresh is not None
                new = kind.refresh(old, body)  # the status alone changed
            else:
                new = kind.parse(body, self.priorities)
        except errors as exc:
            # An object we cannot read offers nothing: say why, never fail the watch on it.
            table.invalid[key] = str(exc)
            table.objects.pop(key, None)
            table.digests.pop(key, None)
            return Change(key, old, None, True)
        if digest is not None:
            table.digests[key] = digest
        else:
            table.digests.pop(key, None)
        table.invalid.pop(key, None)
        if old is not None and kind.view(old) == kind.view(new):
            if kind.keep_equal:
                return Change(key, old, old, False)
            table.objects[key] = new
            return Change(key, old, new, False)
        table.objects[key] = new
        return Change(key, old, new, True)

    def remove(self, kind: Kind[T], key: Key) -> Change[T] | None:
        table = self._table(kind)
        table.versions.pop(key, None)
        table.bodies.pop(key, None)
        table.digests.pop(key, None)
        was_invalid = table.invalid.pop(key, None) is not None
        old = table.objects.pop(key, None)
        if old is None and not was_invalid:
            return None
        return Change(key, old, None, True)

    def replace(self, kind: Kind[T], items: Sequence[Body], resource_version: str) -> list[Change[T]]:
        """The kind is exactly `items` as of `resource_version` (a LIST); returns every change."""
        self.list_start(kind)
        return [*self.list_page(kind, items), *self.list_end(kind, resource_version)]

    # A LIST taken page by page: `list_start`, `list_page` for each page (its items applied
    # as they come), `list_end` once the last is in (what no page held, and is no newer than
    # the LIST, is gone). `replace` is the three at once.

    def list_start(self, kind: Kind[Any]) -> None:
        """A LIST of `kind` begins (or starts over: what earlier pages held no longer counts)."""
        self._listing[kind.name] = set()

    def list_page(self, kind: Kind[T], items: Sequence[Body]) -> list[Change[T]]:
        listed = self._listing.setdefault(kind.name, set())
        changes = []
        for item in items:
            listed.add(key_of(item, namespaced=kind.namespaced))
            change = self.apply(kind, "LISTED", item)
            if change is not None:
                changes.append(change)
        return changes

    def keep_listed(self, kind: Kind[Any], keys: Iterable[Key]) -> None:
        """Count `keys` as held by the LIST in progress: kept as they are (a member that left
        the watch of unfinished pods, until a live read tells whether it finished)."""
        self._listing.setdefault(kind.name, set()).update(keys)

    def listing(self, kind: Kind[Any]) -> Set[Key]:
        """The keys the pages of the LIST in progress held so far."""
        return self._listing.get(kind.name, set())

    def list_end(self, kind: Kind[T], resource_version: str) -> list[Change[T]]:
        listed = self._listing.pop(kind.name, set())
        table = self._table(kind)
        changes = []
        for key in [
            k for k, v in table.versions.items() if k not in listed and _not_newer(v, resource_version)
        ]:
            change = self.remove(kind, key)
            if change is not None:
                changes.append(change)
        self._stale.pop(kind.name, None)
        return changes

    def reparse(self, kind: Kind[T]) -> list[Change[T]]:
        """Parse every kept body of `kind` again (what parsing reads has changed)."""
        table = self._table(kind)
        return [self._parse(kind, table, key, body) for key, body in list(table.bodies.items())]

    # ------------------------------------------------------------------ currency

    def expect(self, kind: Kind[Any]) -> None:
        """`kind` is watched: stale until its first LIST is in."""
        self._stale.setdefault(kind.name, Stale(self.clock(), "not listed yet"))

    def lost(self, kind: Kind[Any], why: str = "its watch ended") -> None:
        """`kind`'s watch ended: what it holds may be stale until it is shown current again
        (a LIST, or `resumed`). A later reason replaces the first; `since` is kept."""
        held = self._stale.get(kind.name)
        self._stale[kind.name] = Stale(held.since if held is not None else self.clock(), why)

    def resumed(self, kind: Kind[Any]) -> None:
        """`kind`'s watch was resumed right after the server ended the last one on time: the
        stream replays what came in between, as events in flight always are: current."""
        self._stale.pop(kind.name, None)

    def unwatched(self, kind: Kind[Any]) -> None:
        """`kind` is no longer watched (no longer served): nothing to wait for, nothing held."""
        self._stale.pop(kind.name, None)

    def synced(self, kind: Kind[Any]) -> bool:
        """Current: listed since its watch last ended (or resumed on time), or not watched."""
        return kind.name not in self._stale

    def stale(self) -> Mapping[str, Stale]:
        """The kinds that cannot be trusted now, by name (the store's own dict: read it)."""
        return self._stale

    # ------------------------------------------------------------------ reading

    def objects(self, kind: Kind[T]) -> Mapping[Key, T]:
        """The objects of `kind` by key (the store's own dict: read it, never change it)."""
        return self._table(kind).objects

    def get(self, kind: Kind[T], key: Key) -> T | None:
        return self._table(kind).objects.get(key)

    def body(self, kind: Kind[Any], key: Key) -> Body | None:
        """The kept projection of the object's body (kinds with `keep_body`)."""
        return self._table(kind).bodies.get(key)

    def version(self, kind: Kind[Any], key: Key) -> str:
        return self._table(kind).versions.get(key, "")

    def keys(self, kind: Kind[Any]) -> Iterable[Key]:
        """Every key held, whether or not its body could be parsed."""
        return self._table(kind).versions.keys()

    def invalid(self) -> dict[tuple[str, str, str], str]:
        """(kind, namespace, name) -> why the body could not be read, over every kind."""
        return {
            (name, *key): message
            for name, table in self._tables.items()
            for key, message in table.invalid.items()
        }


class ByName(Mapping[str, T]):
    """A cluster-scoped kind's objects by name (the store keys them ("", name))."""

    __slots__ = ("_objects",)

    def __init__(self, objects: Mapping[Key, T]) -> None:
        self._objects = objects

    def __getitem__(self, name: str) -> T:
        return self._objects[("", name)]

    def __iter__(self) -> Iterator[str]:
        return (name for _, name in self._objects)

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, name: object) -> bool:
        return ("", name) in self._objects
