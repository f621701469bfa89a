"""The cache's parts: one store for every kind (apply, remove, replace, sync), the assumption
layer, the write tracker that answers without changing anything; and the loop holding every
decision that involves a PodGroup while a PodGroup watch has not listed again (issue 23.1)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest
from test_scheduler import Clock, FakeBinder, group, make, node, pod, settle

from gangsched.cluster import ClusterCache
from gangsched.cluster.kinds import NODE, POD, POD_GROUP
from gangsched.cluster.store import Store
from gangsched.model import PodGroupApi
from gangsched_testing.builders import node_manifest, pod_group_manifest, pod_manifest


def _pod(name: str, rv: str, **kwargs: Any) -> dict[str, Any]:
    return pod_manifest(name, "g", uid=f"uid-{name}", resource_version=rv, **kwargs)


def test_replace_removes_what_a_list_no_longer_holds_and_keeps_what_is_newer() -> None:
    store = Store()
    store.apply(NODE, "ADDED", node_manifest("old", resource_version="5"))
    store.apply(NODE, "ADDED", node_manifest("kept", resource_version="6"))
    store.apply(NODE, "ADDED", node_manifest("new", resource_version="30"))
    changes = store.replace(NODE, [node_manifest("kept", resource_version="6")], "20")
    assert [(c.key, c.new) for c in changes if c.new is None] == [(("", "old"), None)]
    # "new" was created after the LIST was taken: its ADDED came first, the LIST cannot know it.
    assert sorted(store.objects(NODE)) == [("", "kept"), ("", "new")]


def test_a_stale_object_never_rolls_the_store_back() -> None:
    store = Store()
    store.apply(POD, "MODIFIED", _pod("p", "20", node_name="n1"))
    assert store.apply(POD, "LISTED", _pod("p", "15")) is None  # a late LIST
    held = store.get(POD, ("ml", "p"))
    assert held is not None
    assert held.node_name == "n1"
    # Deleting is not versioned: a DELETED is final whatever it carries.
    change = store.apply(POD, "DELETED", _pod("p", "3"))
    assert change is not None
    assert change.new is None
    assert store.get(POD, ("ml", "p")) is None


def test_remove_needs_no_body() -> None:
    cache = ClusterCache()
    cache.apply("pods", "ADDED", _pod("p", "3"))
    cache.remove("pods", ("ml", "p"))
    assert ("ml", "p") not in cache.pods
    cache.remove("pods", ("ml", "p"))  # twice: nothing held, nothing changes
    assert not cache.pods


def test_a_watched_kind_is_unsynced_until_listed_and_again_once_its_watch_ends() -> None:
    cache = ClusterCache()
    assert cache.pod_groups_synced()  # not watched (explain, simulate): nothing to wait for
    cache.expect(POD_GROUP.name)
    assert not cache.pod_groups_synced()
    cache.replace(POD_GROUP.name, [], "5")
    assert cache.pod_groups_synced()
    cache.lost(POD_GROUP.name)
    assert not cache.pod_groups_synced()
    cache.apply(POD_GROUP.name, "ADDED", pod_group_manifest("g", 2, resource_version="6"))
    assert not cache.pod_groups_synced()  # an event is not a LIST: what vanished is still unknown
    cache.replace(POD_GROUP.name, [], "7")
    assert cache.pod_groups_synced()
    assert not cache.pod_groups


def test_caught_up_only_answers() -> None:
    cache = ClusterCache()
    cache.apply("podgroups", "ADDED", group(2))
    cache.apply("pods", "ADDED", pod("g-0", 10))
    bound = cache.pods[("ml", "g-0")]
    cache.assume(group=("ml", "g"), pod=bound, node="n1")
    cache.wrote_pod_group(("ml", "g"), "12")
    for _ in range(3):
        assert cache.caught_up(("ml", "g")) is False
    cache.apply("pods", "MODIFIED", pod("g-0", 11, node_name="n1"))  # the binding is seen
    assert cache.caught_up(("ml", "g")) is False  # the status write is not yet
    cache.apply(
        "podgroups", "MODIFIED", pod_group_manifest("g", 2, uid="pg", generation=1, resource_version="12")
    )
    for _ in range(3):
        assert cache.caught_up(("ml", "g")) is True
    assert cache.pending_binds(("ml", "g")) == set()


def test_the_engine_and_the_members_see_one_assumption() -> None:
    cache = ClusterCache()
    cache.apply("podgroups", "ADDED", group(2))
    for i in range(2):
        cache.apply("pods", "ADDED", pod(f"g-{i}", 10 + i))
    cache.assume(group=("ml", "g"), pod=cache.pods[("ml", "g-0")], node="n1")
    engine = {p.name: p.node_name for p in cache.pods_for_engine()}
    members = {p.name: p.node_name for p in cache.members(("ml", "g"), assumed=True)}
    assert engine == members == {"g-0": "n1", "g-1": ""}
    assert {p.name: p.node_name for p in cache.members(("ml", "g"))} == {"g-0": "", "g-1": ""}
    # A replaced pod (another uid under the name) is not the one we bound.
    cache.apply("pods", "MODIFIED", pod_manifest("g-0", "g", uid="other", resource_version="20"))
    assert not cache.is_assumed(("ml", "g-0"))
    assert cache.pending_binds(("ml", "g")) == set()


def test_a_vanished_podgroup_is_forgotten_by_the_loop() -> None:
    cache = ClusterCache()
    forgotten: list[tuple[str, str]] = []
    cache.on_group_replaced = forgotten.append
    cache.apply("podgroups", "ADDED", group(2))
    cache.replace("podgroups", [], "50")
    assert forgotten == [("ml", "g")]
    assert ("ml", "g") not in cache.pod_groups


def test_no_gang_is_decided_while_a_podgroup_watch_has_not_listed_again() -> None:
    """The defect of issue 23.1 in one process: a PodGroup deleted while its watch was down is
    still held; until the watch has listed again no decision may rest on it."""

    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        clock = Clock()
        sched = make(cache, binder, clock)
        cache.expect(POD_GROUP.name)
        cache.replace(POD_GROUP.name, [group(2)], "5")
        for i in range(2):
            cache.apply("pods", "ADDED", pod(f"g-{i}", 10 + i))
        cache.lost(POD_GROUP.name)  # the watch broke; meanwhile the PodGroup is deleted
        cache.apply("nodes", "ADDED", node("n1"))  # room appears, seen by another watch
        cache.apply("nodes", "ADDED", node("n2"))
        # A lone pod does not involve a PodGroup: it is placed as usual.
        cache.apply("pods", "ADDED", pod_manifest("alone", None, uid="a", resource_version="12", gpu=8))
        for _ in range(3):
            clock.now += 1
            await sched.cycle()
            await settle(sched)
        assert [name for name, _ in binder.bound] == ["alone"]
        cache.replace(POD_GROUP.name, [], "20")  # the LIST: the group is gone
        clock.now += 1
        await sched.cycle()
        await settle(sched)
        assert [name for name, _ in binder.bound] == ["alone"]
        # Its pods are told why they wait (the group is gone), not bound.
        assert {name for name, reason in binder.events if reason == "FailedScheduling"} == {"g-0", "g-1"}

    asyncio.run(scenario())


def test_a_gang_is_decided_once_its_podgroup_watch_has_listed_again() -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        clock = Clock()
        sched = make(cache, binder, clock)
        cache.expect(POD_GROUP.name)
        cache.replace(POD_GROUP.name, [group(2)], "5")
        for i in range(2):
            cache.apply("pods", "ADDED", pod(f"g-{i}", 10 + i))
        cache.lost(POD_GROUP.name)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("nodes", "ADDED", node("n2"))
        clock.now += 1
        await sched.cycle()
        await settle(sched)
        assert binder.bound == []
        cache.replace(POD_GROUP.name, [group(2)], "20")  # still there
        clock.now += 1
        await sched.cycle()
        await settle(sched)
        assert sorted(name for name, _ in binder.bound) == ["g-0", "g-1"]

    asyncio.run(scenario())


class _Session:
    """LISTs answered from `lists` in turn; each watch as `script` says, in turn: "drop" (the
    connection is reset as it opens), "end" (it opens and the server ends it at once), or
    "event" (one event, then the server ends it). What the cache thought of the kind (stale
    or current) is recorded at each call; once the script is used up the informer is
    cancelled."""

    def __init__(self, cache: ClusterCache, lists: list[list[dict[str, Any]]], script: list[str]) -> None:
        self.cache = cache
        self.lists = lists
        self.script = script
        self.calls: list[str] = []

    def _state(self) -> str:
        return "stale" if not self.cache.store.synced(POD_GROUP) else "current"

    async def get(self, path: str, *, query: Any = None, decode: Any = None, **_: Any) -> Any:
        self.calls.append(f"LIST ({self._state()})")
        items = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        return {"metadata": {"resourceVersion": str(100 + len(self.calls))}, "items": items}

    def stream(self, path: str, *, query: Any, read_timeout: float) -> Any:
        session = self
        resumed = f" from {query['resourceVersion']}" if "resourceVersion" in query else ""
        self.calls.append(f"WATCH{resumed} ({self._state()})")

        class _Content:
            def __init__(self, lines: list[bytes]) -> None:
                self.lines = lines

            async def iter_any(self) -> Any:
                for line in self.lines:
                    yield line
                    session.calls.append(f"event read ({session._state()})")
                    await asyncio.sleep(0.05)  # open a while: past `_RESUMED_AFTER`
                    session.calls.append(f"a while later ({session._state()})")

        class _Stream:
            async def __aenter__(self) -> Any:
                if not session.script:
                    raise asyncio.CancelledError
                step = session.script.pop(0)
                if step == "drop":
                    raise ConnectionResetError("dropped")
                lines = []
                if step == "event":
                    body = {**group(2), "metadata": {**group(2)["metadata"], "resourceVersion": "500"}}
                    lines.append(json.dumps({"type": "MODIFIED", "object": body}).encode() + b"\n")
                return SimpleNamespace(content=_Content(lines))

            async def __aexit__(self, *_: Any) -> None:
                session.calls.append(f"ended ({session._state()})")

        return _Stream()


class _Intake:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    async def event(self, kind: str, event_type: str, body: Any) -> None:
        self.cache.apply(kind, event_type, body)

    def list_start(self, kind: str) -> None:
        self.cache.list_start(kind)

    async def list_page(self, kind: str, items: Any) -> None:
        self.cache.list_page(kind, items)

    async def listed(self, kind: str, rv: str) -> None:
        self.cache.list_end(kind, rv)

    def lost(self, kind: str, why: str) -> None:
        self.cache.lost(kind, why)

    def resumed(self, kind: str) -> None:
        self.cache.resumed(kind)


def _inform(session: _Session, cache: ClusterCache) -> None:
    from gangsched.cluster.informer import Informer, Resource, WatchHealth
    from gangsched.handlers import KindSink

    informer = Informer(
        session=session,  # type: ignore[arg-type]
        resource=Resource(POD_GROUP.name, "/apis/x"),
        sink=KindSink(_Intake(cache), POD_GROUP.name),  # type: ignore[arg-type]
        health=WatchHealth(),
        backoff_initial=0.001,
        backoff_max=0.001,
    )

    async def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await informer.run()

    asyncio.run(run())


def test_after_a_failed_watch_the_kind_is_stale_until_listed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33.0: a watch that fails is never resumed: whatever happened while it was down
    (a node deleted, a PodGroup deleted) is read whole again, and nothing held of the kind is
    trusted from the moment it failed until that LIST is in."""
    from gangsched.cluster import informer

    monkeypatch.setattr(informer, "_WATCH_SECONDS", (60, 60))  # a watch that ends at once ended early
    cache = ClusterCache()
    cache.expect(POD_GROUP.name)
    session = _Session(cache, [[group(2)], []], ["drop", "end"])
    _inform(session, cache)
    assert session.calls == [
        "LIST (stale)",
        "WATCH from 101 (current)",  # opened right after its LIST
        "LIST (stale)",  # reset: listed again, not resumed
        "WATCH from 103 (current)",
        "ended (stale)",  # it ended before its timeout: stale, and listed again
        "LIST (stale)",
        "WATCH from 106 (current)",
    ]
    assert not cache.pod_group_of(("ml", "g"), PodGroupApi.GANGSCHED)  # the second LIST no longer held it


def test_a_watch_the_server_ended_on_time_is_resumed_and_current_once_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gangsched.cluster import informer

    monkeypatch.setattr(informer, "_WATCH_SECONDS", (0, 0))  # every watch ends on time
    monkeypatch.setattr(informer, "_RESUMED_AFTER", 0.01)
    cache = ClusterCache()
    cache.expect(POD_GROUP.name)
    session = _Session(cache, [[group(2)]], ["end", "event", "end"])
    _inform(session, cache)
    assert session.calls == [
        "LIST (stale)",
        "WATCH from 101 (current)",
        "ended (stale)",  # ended on time: stale until the resumed watch shows it current
        "WATCH from 101 (stale)",  # resumed, no LIST
        "event read (stale)",  # the replay may not be over
        "a while later (current)",  # open without a 410 for `_RESUMED_AFTER`
        "ended (stale)",
        "WATCH from 500 (stale)",
        "ended (stale)",
        "WATCH from 500 (stale)",
    ]
    assert cache.pod_groups[("ml", "g")].resource_version == "500"


def test_a_watch_that_takes_long_to_resume_is_listed_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    """An on-time end followed by a reconnect that took longer than `_RESUME_GAP` (a stalled
    network, a server restarting) may hide any number of changes: the kind is listed again."""
    from gangsched.cluster import informer

    monkeypatch.setattr(informer, "_WATCH_SECONDS", (0, 0))
    monkeypatch.setattr(informer, "_RESUME_GAP", -1.0)  # every resume is too late
    cache = ClusterCache()
    cache.expect(POD_GROUP.name)
    session = _Session(cache, [[group(2)]], ["end", "end", "end"])
    _inform(session, cache)
    assert session.calls == [
        "LIST (stale)",
        "WATCH from 101 (current)",
        "ended (stale)",
        "WATCH from 101 (stale)",  # too late: closed at once, and listed again
        "ended (stale)",
        "LIST (stale)",
        "WATCH from 106 (current)",
        "ended (stale)",
        "WATCH from 106 (stale)",
    ]


def test_holds_name_the_stale_kinds_and_the_decisions_they_hold() -> None:
    cache = ClusterCache()
    assert not cache.holds()
    cache.expect("nodes")
    cache.expect(POD_GROUP.name)
    holds = cache.holds()
    assert [holds.everything, holds.groups, holds.devices, holds.preemption, holds.formation] == [True] * 5
    cache.replace("nodes", [], "1")
    holds = cache.holds()
    assert [holds.everything, holds.groups, holds.devices, holds.preemption, holds.formation] == [
        False,
        True,
        False,
        False,
        True,
    ]
    assert holds.why().startswith(f"{POD_GROUP.name}: not listed yet (")
    cache.replace(POD_GROUP.name, [], "1")
    cache.lost("resourceslices", "its watch is down (ConnectionResetError)")
    holds = cache.holds()
    assert [holds.devices, holds.groups, holds.everything] == [True, False, False]
    assert "resourceslices: its watch is down (ConnectionResetError)" in holds.why()
    cache.resumed("resourceslices")
    assert not cache.holds()


def test_a_list_read_page_by_page_is_a_replace() -> None:
    """Pages applied as they come, then what no page held (and is no newer) is gone; a LIST
    started over forgets what its abandoned pages held."""
    cache = ClusterCache()
    for name, rv in (("a", "3"), ("b", "4"), ("c", "5"), ("late", "40")):
        cache.apply("pods", "ADDED", _pod(name, rv))
    cache.list_start("pods")
    cache.list_page("pods", [_pod("a", "10")])
    cache.list_page("pods", [_pod("b", "10")])
    cache.list_start("pods")  # the LIST started over: "a" and "b" must be listed again
    cache.list_page("pods", [_pod("b", "12"), _pod("d", "11")])
    assert set(cache.listing("pods")) == {("ml", "b"), ("ml", "d")}
    vanished = cache.list_end("pods", "20")
    assert sorted(vanished) == [("ml", "a"), ("ml", "c")]
    # "late" is newer than the LIST: its event came after, it stays.
    assert sorted(cache.pods) == [("ml", "b"), ("ml", "d"), ("ml", "late")]
    assert cache.pods[("ml", "b")].resource_version == "12"
